"""pagegate.io.sources: every spec form, on disk and on moto's S3 server over HTTP."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from pagegate.errors import StorageError
from pagegate.io.s3 import make_s3_client
from pagegate.io.sources import common_root, iter_sources, s3_glob_match
from pagegate.io.store import ObjectInfo


def count_calls(client: Any, operation: str) -> list[dict[str, Any]]:
    """Parameters of every `operation` call made by a client this test built itself."""
    calls: list[dict[str, Any]] = []
    client.meta.events.register(
        f"before-parameter-build.s3.{operation}", lambda params, **_: calls.append(params)
    )
    return calls


def uris(infos: Any) -> list[str]:
    return [info.uri for info in infos]


def touch(root: Path, *names: str, data: bytes = b"%PDF-1.4 test") -> None:
    for name in names:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def put(client: Any, bucket: str, *keys: str, body: bytes = b"%PDF-1.4 test") -> None:
    for key in keys:
        client.put_object(Bucket=bucket, Key=key, Body=body)


# --------------------------------------------------------------------------- the S3 glob


@pytest.mark.parametrize(
    ("pattern", "key", "expected"),
    [
        ("d/*.pdf", "d/a.pdf", True),
        ("d/*.pdf", "d/sub/a.pdf", False),  # '*' stays within one segment
        ("d/*.pdf", "d/a.PDF", False),  # case-sensitive, like S3 keys
        ("d/*", "d/.hidden", True),  # no hidden files on S3
        ("d/x?.pdf", "d/x1.pdf", True),
        ("d/x?.pdf", "d/x12.pdf", False),
        ("d/x?.pdf", "d/x/.pdf", False),  # '?' never matches '/'
        ("d/[ab].pdf", "d/b.pdf", True),
        ("d/[!ab].pdf", "d/b.pdf", False),
        ("a/**/x.pdf", "a/x.pdf", True),  # '**' in the middle: zero segments...
        ("a/**/x.pdf", "a/b/c/x.pdf", True),  # ...or many
        ("a/**/x.pdf", "ab/x.pdf", False),
        ("a/**", "a/b/c.pdf", True),
        ("a/**", "a", False),  # '**' at the end: at least one segment
        ("**/*.pdf", "top.pdf", True),
        ("**/*.pdf", "x/y/z.pdf", True),
        ("a/**/b/**/c", "a/b/c", True),
        ("a/**/b/**/c", "a/x/b/y/z/c", True),
        ("a/**/b/**/c", "a/x/y/c", False),
        ("a/b**.pdf", "a/bcd.pdf", True),  # '**' inside a segment is just '*'
        ("a/b**.pdf", "a/b/c.pdf", False),
    ],
)
def test_s3_glob_match(pattern: str, key: str, expected: bool) -> None:
    assert s3_glob_match(pattern, key) is expected


# --------------------------------------------------------------------------- local


def test_local_directory_yields_pdfs_recursively_in_key_order(tmp_path: Path) -> None:
    touch(tmp_path, "b.pdf", "a/z.PDF", "a/y.pdf", "a-c.pdf", "notes.txt", "page.html", "c/d.pdfx")
    found = list(iter_sources([str(tmp_path)]))
    assert uris(found) == [str(tmp_path / n) for n in ["a-c.pdf", "a/y.pdf", "a/z.PDF", "b.pdf"]]
    first = found[0]
    st = (tmp_path / "a-c.pdf").stat()
    assert first == ObjectInfo(
        key=str(tmp_path / "a-c.pdf"),
        uri=str(tmp_path / "a-c.pdf"),
        size=st.st_size,
        etag=f"{st.st_mtime_ns:x}-{st.st_size:x}",
    )


def test_local_glob_star_stays_in_one_directory_and_double_star_recurses(tmp_path: Path) -> None:
    touch(tmp_path, "top.pdf", "sub/deep.pdf", "sub/x/deeper.pdf", "top.txt")
    assert uris(iter_sources([f"{tmp_path}/*.pdf"])) == [str(tmp_path / "top.pdf")]
    assert uris(iter_sources([f"{tmp_path}/**/*.pdf"])) == [
        str(tmp_path / "sub/deep.pdf"),
        str(tmp_path / "sub/x/deeper.pdf"),
        str(tmp_path / "top.pdf"),
    ]


def test_relative_specs_become_absolute_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    touch(tmp_path, "docs/a.pdf", "docs/sub/b.pdf")
    monkeypatch.chdir(tmp_path)
    assert uris(iter_sources(["docs/**/*.pdf"])) == [
        str(tmp_path / "docs/a.pdf"),
        str(tmp_path / "docs/sub/b.pdf"),
    ]
    assert [i.key for i in iter_sources(["docs"])] == [
        str(tmp_path / "docs/a.pdf"),
        str(tmp_path / "docs/sub/b.pdf"),
    ]


def test_an_explicit_local_file_is_taken_whatever_its_extension(tmp_path: Path) -> None:
    touch(tmp_path, "saved-page.html", data=b"<html>not a pdf</html>")
    touch(tmp_path, "scan[1].pdf")  # glob characters in a real file name
    found = list(iter_sources([str(tmp_path / "saved-page.html"), str(tmp_path / "scan[1].pdf")]))
    assert uris(found) == [str(tmp_path / "saved-page.html"), str(tmp_path / "scan[1].pdf")]
    assert found[0].size == len(b"<html>not a pdf</html>")


def test_local_list_file_expands_each_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    touch(tmp_path, "d/a.pdf", "d/b.pdf", "one.bin", "g/x.pdf", "g/y.pdf")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "list.txt").write_text(
        "\ufeff# sources for the test\n"
        "\n"
        f"  {tmp_path / 'd'}  \n"
        "one.bin\n"  # relative to the working directory
        "   # an indented comment\n"
        f"{tmp_path}/g/*.pdf\n",
        encoding="utf-8",
    )
    assert uris(iter_sources(["list.txt"])) == [
        str(tmp_path / n) for n in ["d/a.pdf", "d/b.pdf", "one.bin", "g/x.pdf", "g/y.pdf"]
    ]


def test_a_list_naming_another_list_is_refused(tmp_path: Path) -> None:
    touch(tmp_path, "a.pdf")
    (tmp_path / "inner.txt").write_text(f"{tmp_path / 'a.pdf'}\n")
    (tmp_path / "outer.TXT").write_text(f"{tmp_path / 'a.pdf'}\n{tmp_path / 'inner.txt'}\n")
    assert uris(iter_sources([str(tmp_path / "inner.txt")])) == [str(tmp_path / "a.pdf")]
    found = iter_sources([str(tmp_path / "outer.TXT")])
    assert next(found).uri == str(tmp_path / "a.pdf")  # streamed up to the bad line
    with pytest.raises(StorageError, match=r"inner\.txt"):
        next(found)


@pytest.mark.parametrize(
    "spec",
    ["missing-dir", "missing.pdf", "empty-dir", "only-text", "*.nothing", "**/*.nope", ""],
)
def test_a_spec_that_matches_nothing_is_an_error_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spec: str
) -> None:
    (tmp_path / "empty-dir").mkdir()
    touch(tmp_path, "only-text/readme.txt", "real.pdf")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(StorageError) as info:
        list(iter_sources(["real.pdf", spec]))
    assert repr(spec) in str(info.value) or not spec


def test_a_list_line_that_matches_nothing_is_an_error_naming_line_and_list(
    tmp_path: Path,
) -> None:
    touch(tmp_path, "a.pdf")
    (tmp_path / "l.txt").write_text(f"{tmp_path / 'a.pdf'}\n{tmp_path / 'typo.pdf'}\n")
    with pytest.raises(StorageError, match=r"typo\.pdf.*l\.txt"):
        list(iter_sources([str(tmp_path / "l.txt")]))


def test_a_list_with_nothing_in_it_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "l.txt").write_text("# nothing yet\n\n")
    with pytest.raises(StorageError, match="matches nothing"):
        list(iter_sources([str(tmp_path / "l.txt")]))


def test_a_list_that_is_not_text_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "l.txt").write_bytes(b"\xff\xfe\x00binary")
    with pytest.raises(StorageError, match="UTF-8"):
        list(iter_sources([str(tmp_path / "l.txt")]))


def test_duplicates_across_specs_keep_the_first_occurrence(tmp_path: Path) -> None:
    touch(tmp_path, "a.pdf", "b.pdf", "c.pdf")
    (tmp_path / "l.txt").write_text(f"{tmp_path / 'c.pdf'}\n{tmp_path / 'a.pdf'}\n")
    specs = [str(tmp_path / "b.pdf"), str(tmp_path / "l.txt"), str(tmp_path), f"{tmp_path}/*.pdf"]
    assert uris(iter_sources(specs)) == [str(tmp_path / n) for n in ["b.pdf", "c.pdf", "a.pdf"]]


def test_a_single_string_is_not_mistaken_for_a_list_of_specs(tmp_path: Path) -> None:
    with pytest.raises(TypeError):
        next(iter_sources(str(tmp_path)))


def test_home_directory_is_expanded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    touch(tmp_path, "docs/a.pdf")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert uris(iter_sources(["~/docs"])) == [str(tmp_path / "docs/a.pdf")]


# --------------------------------------------------------------------------- roots


def roots_of(specs: list[str], **kwargs: Any) -> list[str]:
    """The roots `iter_sources` reports while the specs are listed to the end."""
    heard: list[str] = []
    list(iter_sources(specs, on_root=heard.append, **kwargs))
    return heard


def test_each_local_spec_reports_the_folder_it_lists_from(tmp_path: Path) -> None:
    touch(tmp_path, "in/a.pdf", "in/sub/b.pdf", "g/x1.pdf", "single/one.pdf")
    (tmp_path / "list.txt").write_text(f"{tmp_path / 'single' / 'one.pdf'}\n")
    specs = [
        str(tmp_path / "in"), str(tmp_path / "g" / "x*.pdf"), str(tmp_path / "list.txt"),
        str(tmp_path / "nothing-here"),
    ]
    heard = roots_of(specs, on_missing=lambda *_: None)
    assert heard == [f"{tmp_path}/in/", f"{tmp_path}/g/", f"{tmp_path}/single/"]
    assert common_root(heard) == f"{tmp_path}/"


def test_s3_specs_report_their_prefix_and_an_exact_key_its_folder(
    s3_bucket: str, s3_client: Any
) -> None:
    put(s3_client, s3_bucket, "docs/a.pdf", "docs/sub/b.pdf", "in/page.html", "g/x1.pdf")
    specs = [
        f"s3://{s3_bucket}/docs", f"s3://{s3_bucket}/in/page.html", f"s3://{s3_bucket}/g/x?.pdf"
    ]
    assert roots_of(specs, s3_client=s3_client) == [
        f"s3://{s3_bucket}/docs/", f"s3://{s3_bucket}/in/", f"s3://{s3_bucket}/g/"
    ]


@pytest.mark.parametrize(
    ("roots", "expected"),
    [
        (["/home/me/pdfs/"], "/home/me/pdfs/"),
        (["/data/a/", "/data/a/sub/"], "/data/a/"),
        (["/data/a/", "/data/b/"], "/data/"),
        (["/a/", "/b/"], "/"),
        (["s3://b/docs/2024/", "s3://b/docs/2025/x/"], "s3://b/docs/"),
        (["s3://b/docs/", "s3://b/docsold/"], "s3://b/"),  # segments, not characters
        (["s3://b/x/", "s3://c/x/"], None),  # two buckets: mirrored whole
        (["s3://b/x/", "/x/"], None),
        ([], None),
    ],
)
def test_the_common_root_is_the_innermost_folder_holding_every_root(
    roots: list[str], expected: str | None
) -> None:
    assert common_root(roots) == expected


# --------------------------------------------------------------------------- S3


def test_s3_prefix_yields_pdfs_below_it_with_and_without_a_slash(
    s3_bucket: str, s3_client: Any
) -> None:
    put(s3_client, s3_bucket, "docs/a.pdf", "docs/sub/b.PDF", "docs/c.txt", "docs/d.html")
    put(s3_client, s3_bucket, "docs2/no.pdf", "docs-old/no.pdf", "docs.pdf", "other/no.pdf")
    expected = [f"s3://{s3_bucket}/docs/a.pdf", f"s3://{s3_bucket}/docs/sub/b.PDF"]
    for spec in (f"s3://{s3_bucket}/docs", f"s3://{s3_bucket}/docs/"):
        found = list(iter_sources([spec], s3_client=s3_client))
        assert uris(found) == expected
        assert [i.key for i in found] == ["docs/a.pdf", "docs/sub/b.PDF"]
        assert all(i.size == len(b"%PDF-1.4 test") and i.etag for i in found)


def test_a_whole_bucket_is_a_prefix_too(s3_bucket: str, s3_client: Any) -> None:
    put(s3_client, s3_bucket, "x.pdf", "y/z.pdf", "y/readme.md")
    assert [i.key for i in iter_sources([f"s3://{s3_bucket}"], s3_client=s3_client)] == [
        "x.pdf",
        "y/z.pdf",
    ]


def test_an_explicit_s3_object_is_taken_whatever_its_extension(
    s3_bucket: str, s3_client: Any
) -> None:
    put(s3_client, s3_bucket, "in/page.html", "in/page.html.pdf", "in/doc.pdf", "in/doc.pdf.bak")
    client = make_s3_client()
    calls = count_calls(client, "ListObjectsV2")
    specs = [f"s3://{s3_bucket}/in/page.html", f"s3://{s3_bucket}/in/doc.pdf"]
    assert [i.key for i in iter_sources(specs, s3_client=client)] == ["in/page.html", "in/doc.pdf"]
    # page.html: exact probe + a listing of 'in/page.html/'; doc.pdf: the probe alone.
    assert [(c["Prefix"], c.get("MaxKeys")) for c in calls] == [
        ("in/page.html", 1),
        ("in/page.html/", 1000),
        ("in/doc.pdf", 1),
    ]


def test_s3_glob_lists_only_from_the_literal_prefix(s3_bucket: str, s3_client: Any) -> None:
    put(
        s3_client,
        s3_bucket,
        "a/x1.pdf",
        "a/b/x2.pdf",
        "a/b/c/x3.pdf",
        "a/b/x22.pdf",
        "a/b/y1.pdf",
        "a/x1.txt",
        "ab/x4.pdf",
    )
    client = make_s3_client()
    calls = count_calls(client, "ListObjectsV2")
    found = iter_sources([f"s3://{s3_bucket}/a/**/x?.pdf"], s3_client=client)
    assert [i.key for i in found] == ["a/b/c/x3.pdf", "a/b/x2.pdf", "a/x1.pdf"]
    assert [c["Prefix"] for c in calls] == ["a/"]

    star = iter_sources([f"s3://{s3_bucket}/a/*.pdf"], s3_client=client)
    assert [i.key for i in star] == ["a/x1.pdf"]
    assert calls[-1]["Prefix"] == "a/"

    # A glob takes what it matches, .pdf or not.
    txt = iter_sources([f"s3://{s3_bucket}/a/x1.*"], s3_client=client)
    assert [i.key for i in txt] == ["a/x1.pdf", "a/x1.txt"]
    assert calls[-1]["Prefix"] == "a/x1."


def test_s3_list_file_mixes_s3_and_local_lines(
    s3_bucket: str, s3_client: Any, tmp_path: Path
) -> None:
    touch(tmp_path, "local.pdf")
    put(s3_client, s3_bucket, "p/one.pdf", "p/two.pdf", "q/three.pdf")
    listing = (
        f"# mixed\ns3://{s3_bucket}/p/\n\n{tmp_path / 'local.pdf'}\ns3://{s3_bucket}/q/*.pdf\n"
    )
    put(s3_client, s3_bucket, "lists/all.txt", body=listing.encode())
    assert uris(iter_sources([f"s3://{s3_bucket}/lists/all.txt"], s3_client=s3_client)) == [
        f"s3://{s3_bucket}/p/one.pdf",
        f"s3://{s3_bucket}/p/two.pdf",
        str(tmp_path / "local.pdf"),
        f"s3://{s3_bucket}/q/three.pdf",
    ]


def test_s3_list_naming_another_s3_list_is_refused(s3_bucket: str, s3_client: Any) -> None:
    put(s3_client, s3_bucket, "a.pdf")
    put(s3_client, s3_bucket, "inner.txt", body=f"s3://{s3_bucket}/a.pdf\n".encode())
    put(s3_client, s3_bucket, "outer.txt", body=f"s3://{s3_bucket}/inner.txt\n".encode())
    with pytest.raises(StorageError, match="names another list"):
        list(iter_sources([f"s3://{s3_bucket}/outer.txt"], s3_client=s3_client))


@pytest.mark.parametrize(
    "path", ["missing/", "missing", "missing/*.pdf", "nolist.txt", "only-text/", "only-text"]
)
def test_s3_spec_that_matches_nothing_is_an_error_naming_it(
    s3_bucket: str, s3_client: Any, path: str
) -> None:
    put(s3_client, s3_bucket, "only-text/readme.txt")
    spec = f"s3://{s3_bucket}/{path}"
    with pytest.raises(StorageError, match=re.escape(repr(spec))):
        list(iter_sources([spec], s3_client=s3_client))


def test_s3_missing_bucket_is_an_error(s3_env: str, s3_client: Any) -> None:
    with pytest.raises(StorageError, match="NoSuchBucket"):
        list(iter_sources(["s3://pg-no-such-bucket/docs/"], s3_client=s3_client))


def test_wildcards_in_the_bucket_name_are_refused(s3_client: Any) -> None:
    with pytest.raises(StorageError, match="bucket"):
        list(iter_sources(["s3://bucket-*/x.pdf"], s3_client=s3_client))


def test_s3_duplicates_across_specs_keep_the_first_occurrence(
    s3_bucket: str, s3_client: Any
) -> None:
    put(s3_client, s3_bucket, "d/a.pdf", "d/b.pdf", "d/c.pdf")
    specs = [f"s3://{s3_bucket}/d/b.pdf", f"s3://{s3_bucket}/d/", f"s3://{s3_bucket}/d/*.pdf"]
    assert [i.key for i in iter_sources(specs, s3_client=s3_client)] == [
        "d/b.pdf",
        "d/a.pdf",
        "d/c.pdf",
    ]


def test_iter_sources_streams_the_first_pdf_before_the_listing_is_done(
    s3_bucket: str, s3_client: Any
) -> None:
    put(s3_client, s3_bucket, *(f"many/{i:03d}.pdf" for i in range(40)))
    client = make_s3_client()
    calls = count_calls(client, "ListObjectsV2")
    found = iter_sources([f"s3://{s3_bucket}/many/"], s3_client=client, page_size=5)
    assert calls == []  # a generator: nothing happens until asked
    assert next(found).key == "many/000.pdf"
    assert len(calls) == 1
    assert len([next(found) for _ in range(5)]) == 5
    assert len(calls) == 2
    assert len(list(found)) == 34
    assert len(calls) == 8


def test_iter_sources_builds_its_client_from_the_environment_when_given_none(
    s3_bucket: str, s3_client: Any
) -> None:
    put(s3_client, s3_bucket, "e/a.pdf", "e/b.pdf")
    put(s3_client, s3_bucket, "e/l.txt", body=f"s3://{s3_bucket}/e/a.pdf\n".encode())
    specs = [f"s3://{s3_bucket}/e/l.txt", f"s3://{s3_bucket}/e/"]
    assert [i.key for i in iter_sources(specs)] == ["e/a.pdf", "e/b.pdf"]


def test_local_only_specs_need_no_s3_configuration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    touch(tmp_path, "a.pdf")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "not a url")  # building a client would fail
    assert uris(iter_sources([str(tmp_path)])) == [str(tmp_path / "a.pdf")]
