"""pagegate.io.storage against a real directory and moto's S3 server over HTTP."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

from pagegate.errors import DownloadError, StorageError, WriteRefusedError
from pagegate.io.local import TEMP_PREFIX, LocalStore, write_error
from pagegate.io.s3 import S3Store, make_s3_client, write_errors
from pagegate.io.storage import open_store, read_uri
from pagegate.io.store import Store, split_s3_uri


def count_calls(client: Any, operation: str) -> list[dict[str, Any]]:
    """Record the parameters of every `operation` call the (real) client makes.

    Register only on a client the test built itself: handlers stay for the client's life.
    """
    calls: list[dict[str, Any]] = []
    client.meta.events.register(
        f"before-parameter-build.s3.{operation}", lambda params, **_: calls.append(params)
    )
    return calls


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    """The same contract, run on both backends; the S3 store sits under a prefix."""
    if request.param == "local":
        return LocalStore(tmp_path / "root")
    bucket = request.getfixturevalue("s3_bucket")
    return S3Store(bucket, "root/prefix/", client=request.getfixturevalue("s3_client"))


# --------------------------------------------------------------------------- both backends


def test_write_read_exists_delete_round_trip(store: Store) -> None:
    assert not store.exists("docs/a.jsonl")
    store.write_bytes("docs/a.jsonl", b"first")
    assert store.exists("docs/a.jsonl")
    assert store.read_bytes("docs/a.jsonl") == b"first"

    store.write_bytes("docs/a.jsonl", b"second, longer")
    assert store.read_bytes("docs/a.jsonl") == b"second, longer"

    store.delete("docs/a.jsonl")
    assert not store.exists("docs/a.jsonl")
    store.delete("docs/a.jsonl")  # deleting what is gone is fine


def test_create_writes_only_what_is_absent(store: Store) -> None:
    assert store.create("claims/g1/00000000.json", b"mine")
    assert not store.create("claims/g1/00000000.json", b"theirs")
    assert store.read_bytes("claims/g1/00000000.json") == b"mine"
    assert [i.key for i in store.list("claims/")] == ["claims/g1/00000000.json"]


def test_of_many_concurrent_creates_exactly_one_wins(store: Store) -> None:
    """Eight threads race for one key and for a second one: one winner each, its bytes kept."""
    won: list[tuple[str, int]] = []
    start = threading.Barrier(8)

    def racer(n: int) -> None:
        start.wait()
        for key in ("race/a", "race/b"):
            if store.create(key, str(n).encode()):
                won.append((key, n))

    threads = [threading.Thread(target=racer, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(key for key, _ in won) == ["race/a", "race/b"]
    for key, n in won:
        assert store.read_bytes(key) == str(n).encode()


def test_empty_object_round_trips(store: Store) -> None:
    store.write_bytes("empty", b"")
    assert store.exists("empty")
    assert store.read_bytes("empty") == b""


def test_missing_object_reads_as_no_such_key(store: Store) -> None:
    with pytest.raises(DownloadError) as info:
        store.read_bytes("nope/missing.pdf")
    assert info.value.code == "NoSuchKey"
    assert info.value.reason == "download_failed"
    assert info.value.source == store.uri_for("nope/missing.pdf")


def test_a_directory_is_not_an_object(store: Store) -> None:
    store.write_bytes("dir/inner", b"x")
    assert not store.exists("dir")
    with pytest.raises(DownloadError) as info:
        store.read_bytes("dir")
    assert info.value.code == "NoSuchKey"


# Chosen so that naive directory-walk order differs from key order: '-' and '.' sort
# before '/', and '0' after it.
ORDER_KEYS = ["a/x", "a-b", "a.txt", "a0", "b/c/d", "b/c.e", "B", "é/1"]


def test_list_streams_every_key_sorted_with_metadata(store: Store) -> None:
    for key in ORDER_KEYS:
        store.write_bytes(key, key.encode() * 3)
    listed = list(store.list())
    assert [info.key for info in listed] == sorted(ORDER_KEYS)
    for info in listed:
        assert info.uri == store.uri_for(info.key)
        assert info.size == len(info.key.encode()) * 3
        assert info.etag and '"' not in info.etag


def test_list_prefix_is_a_string_prefix_not_only_a_directory(store: Store) -> None:
    for key in ["a/b.pdf", "a/bc/x.pdf", "a/c.pdf", "ab.pdf", "a/b/inner.pdf"]:
        store.write_bytes(key, b"x")
    assert [i.key for i in store.list("a/b")] == ["a/b.pdf", "a/b/inner.pdf", "a/bc/x.pdf"]
    assert [i.key for i in store.list("a/")] == [
        "a/b.pdf",
        "a/b/inner.pdf",
        "a/bc/x.pdf",
        "a/c.pdf",
    ]
    assert [i.key for i in store.list("a")] == [
        "a/b.pdf",
        "a/b/inner.pdf",
        "a/bc/x.pdf",
        "a/c.pdf",
        "ab.pdf",
    ]
    assert list(store.list("zzz")) == []


def test_list_of_a_store_that_was_never_written_is_empty(store: Store) -> None:
    assert list(store.list()) == []


BAD_KEYS = ["", "/abs", "../up", "a/../../up", "a/..", "a//b", "./a", "a/./b", "a/", "nul\x00"]


@pytest.mark.parametrize("key", BAD_KEYS)
def test_keys_that_could_escape_the_root_are_refused(store: Store, key: str) -> None:
    for call in (store.read_bytes, store.exists, store.delete, store.uri_for):
        with pytest.raises(StorageError):
            call(key)
    with pytest.raises(StorageError):
        store.write_bytes(key, b"x")


@pytest.mark.parametrize("prefix", ["/abs", "../", "a/../", "a//b", "./a", ".."])
def test_listing_prefixes_that_could_escape_are_refused(store: Store, prefix: str) -> None:
    with pytest.raises(StorageError):
        next(iter(store.list(prefix)))


def test_listing_prefix_may_end_in_a_partial_name_starting_with_a_dot(store: Store) -> None:
    store.write_bytes("d/.hidden", b"x")
    store.write_bytes("d/visible", b"x")
    assert [i.key for i in store.list("d/.")] == ["d/.hidden"]


# --------------------------------------------------------------------------- local


def test_local_store_root_is_absolute_and_created_on_first_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    store = LocalStore("out/run1/")
    assert store.uri == str(tmp_path / "out" / "run1")
    assert not (tmp_path / "out").exists()
    store.write_bytes("x/y.jsonl", b"data")
    assert (tmp_path / "out" / "run1" / "x" / "y.jsonl").read_bytes() == b"data"
    assert store.uri_for("x/y.jsonl") == str(tmp_path / "out" / "run1" / "x" / "y.jsonl")


def test_local_write_leaves_only_the_target_file(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    for i in range(5):
        store.write_bytes("d/out.jsonl", b"v%d" % i)
    assert os.listdir(tmp_path / "d") == ["out.jsonl"]
    assert store.read_bytes("d/out.jsonl") == b"v4"
    assert store.create("d/new", b"x") and not store.create("d/new", b"y")
    assert sorted(os.listdir(tmp_path / "d")) == ["new", "out.jsonl"]  # no spare link names


def test_local_write_works_for_names_at_the_file_name_limit(tmp_path: Path) -> None:
    key = "d/" + "n" * 255  # NAME_MAX on common filesystems; the temp name must not grow it
    LocalStore(tmp_path).write_bytes(key, b"x")
    assert LocalStore(tmp_path).read_bytes(key) == b"x"


def test_local_written_files_get_normal_permissions(tmp_path: Path) -> None:
    # mkstemp-style temp files are 0600; a committed output should follow the umask.
    umask = os.umask(0o022)
    try:
        LocalStore(tmp_path).write_bytes("f", b"x")
    finally:
        os.umask(umask)
    assert (tmp_path / "f").stat().st_mode & 0o777 == 0o644


_CRASHING_WRITER = textwrap.dedent(
    """
    import resource, signal, sys
    from pagegate.io.local import LocalStore
    store = LocalStore(sys.argv[1])
    # Python starts with SIGXFSZ ignored, so a write past the limit fails with EFBIG;
    # restoring the default action makes the kernel kill the process mid-write instead.
    if sys.argv[2] == "kill":
        signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
    store.write_bytes("doc.jsonl", b"N" * 1_000_000)
    """
)


def test_local_write_that_fails_midway_keeps_the_old_content_and_no_temp_file(
    tmp_path: Path,
) -> None:
    """A real short write (file-size limit), not a simulated one."""
    store = LocalStore(tmp_path)
    store.write_bytes("doc.jsonl", b"old")
    result = subprocess.run(
        [sys.executable, "-c", _CRASHING_WRITER, str(tmp_path), "error"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert "StorageError" in result.stderr
    assert store.read_bytes("doc.jsonl") == b"old"
    assert os.listdir(tmp_path) == ["doc.jsonl"]


def test_local_writer_killed_midway_keeps_the_old_content_and_list_hides_its_temp_file(
    tmp_path: Path,
) -> None:
    store = LocalStore(tmp_path)
    store.write_bytes("doc.jsonl", b"old")
    result = subprocess.run(
        [sys.executable, "-c", _CRASHING_WRITER, str(tmp_path), "kill"],
        capture_output=True,
        timeout=60,
    )
    assert result.returncode < 0  # killed by SIGXFSZ in the middle of the write
    leftovers = [name for name in os.listdir(tmp_path) if name != "doc.jsonl"]
    assert len(leftovers) == 1 and leftovers[0].startswith(TEMP_PREFIX)
    assert store.read_bytes("doc.jsonl") == b"old"
    assert [i.key for i in store.list()] == ["doc.jsonl"]


def test_local_reader_never_sees_a_partial_write(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    versions = [bytes([65 + i]) * 2_000_000 for i in range(4)]
    store.write_bytes("big", versions[0])
    seen: list[bytes] = []
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            seen.append(store.read_bytes("big"))

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for i in range(40):
            store.write_bytes("big", versions[i % 4])
    finally:
        stop.set()
        thread.join()
    assert seen
    assert all(data in versions for data in seen)


def test_local_list_does_not_follow_directory_symlinks(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    store.write_bytes("a/f", b"x")
    (tmp_path / "a" / "loop").symlink_to(tmp_path)  # would never end if followed
    (tmp_path / "a" / "link-to-file").symlink_to(tmp_path / "a" / "f")
    assert [i.key for i in store.list()] == ["a/f", "a/link-to-file"]


def test_local_store_reads_other_os_errors_with_their_errno_name(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    (tmp_path / "f").write_bytes(b"x")
    # Asking for a file below a file fails with ENOTDIR: no such object, not a crash.
    with pytest.raises(DownloadError) as info:
        store.read_bytes("f/below")
    assert info.value.code == "NoSuchKey"
    assert not store.exists("f/below")
    with pytest.raises(StorageError):
        store.write_bytes("f/below", b"x")


# --------------------------------------------------------------------------- S3


def test_s3_list_pages_lazily_with_the_configured_page_size(s3_bucket: str, s3_client: Any) -> None:
    keys = [f"k/{i:03d}.pdf" for i in range(23)]
    for key in keys:
        s3_client.put_object(Bucket=s3_bucket, Key=key, Body=b"x")
    client = make_s3_client()
    store = S3Store(s3_bucket, client=client, page_size=4)
    calls = count_calls(client, "ListObjectsV2")

    listing = store.list("k/")
    first = next(listing)
    assert first.key == "k/000.pdf"
    assert len(calls) == 1  # only the first page was fetched so far
    assert [first.key, *(i.key for i in listing)] == keys
    assert len(calls) == 6  # ceil(23 / 4)
    assert all(call["MaxKeys"] == 4 and call["Prefix"] == "k/" for call in calls)


def test_s3_store_lists_only_below_its_own_prefix(s3_bucket: str, s3_client: Any) -> None:
    for key in ["run/a", "run/b/c", "run2/x", "runa", "other/run/y"]:
        s3_client.put_object(Bucket=s3_bucket, Key=key, Body=b"x")
    store = S3Store(s3_bucket, "run", client=s3_client)
    assert [(i.key, i.uri) for i in store.list()] == [
        ("a", f"s3://{s3_bucket}/run/a"),
        ("b/c", f"s3://{s3_bucket}/run/b/c"),
    ]


def test_s3_list_skips_folder_marker_objects(s3_bucket: str, s3_client: Any) -> None:
    s3_client.put_object(Bucket=s3_bucket, Key="p/folder/", Body=b"")
    s3_client.put_object(Bucket=s3_bucket, Key="p/folder/doc.pdf", Body=b"x")
    assert [i.key for i in S3Store(s3_bucket, "p", client=s3_client).list()] == ["folder/doc.pdf"]


def test_s3_etag_matches_the_servers_etag(s3_bucket: str, s3_client: Any) -> None:
    store = S3Store(s3_bucket, client=s3_client)
    store.write_bytes("e", b"payload")
    head = s3_client.head_object(Bucket=s3_bucket, Key="e")
    [info] = store.list()
    assert info.etag == head["ETag"].strip('"')
    assert info.size == 7


def test_s3_missing_bucket_is_reported_with_its_code(s3_env: str, s3_client: Any) -> None:
    store = S3Store("pg-no-such-bucket", "p", client=s3_client)
    with pytest.raises(DownloadError) as info:
        store.read_bytes("doc.pdf")
    assert info.value.code == "NoSuchBucket"
    with pytest.raises(StorageError, match="NoSuchBucket"):
        list(store.list())
    with pytest.raises(StorageError, match="NoSuchBucket"):
        store.write_bytes("doc.pdf", b"x")


def test_s3_store_builds_its_client_from_the_environment_on_first_use(
    s3_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = S3Store(s3_bucket, "lazy")
    store.write_bytes("k", b"v")
    assert make_s3_client().get_object(Bucket=s3_bucket, Key="lazy/k")["Body"].read() == b"v"

    monkeypatch.setenv("AWS_ENDPOINT_URL", "not a url")
    broken = S3Store(s3_bucket, "lazy")  # building a store touches nothing
    assert broken.uri_for("k") == f"s3://{s3_bucket}/lazy/k"
    with pytest.raises(ValueError):  # botocore refuses the endpoint when the client is made
        broken.read_bytes("k")


def test_make_s3_client_sets_retries_and_defaults_the_region(
    s3_env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    client = make_s3_client(retry_mode="adaptive", max_attempts=3)
    assert client.meta.region_name == "us-east-1"
    assert client.meta.config.retries["mode"] == "adaptive"
    assert client.meta.config.retries["total_max_attempts"] == 4  # botocore: 1 + retries
    assert client.meta.endpoint_url == s3_env

    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-3")
    assert make_s3_client().meta.region_name == "eu-west-3"


# --------------------------------------------------------------------------- entry points


def test_read_uri_reads_s3_and_local_objects(
    s3_bucket: str, s3_client: Any, tmp_path: Path
) -> None:
    s3_client.put_object(Bucket=s3_bucket, Key="a/b.pdf", Body=b"%PDF-s3")
    assert read_uri(f"s3://{s3_bucket}/a/b.pdf", s3_client=s3_client) == b"%PDF-s3"
    assert read_uri(f"s3://{s3_bucket}/a/b.pdf") == b"%PDF-s3"  # client from the environment
    (tmp_path / "f.pdf").write_bytes(b"%PDF-local")
    assert read_uri(str(tmp_path / "f.pdf")) == b"%PDF-local"


@pytest.mark.parametrize(("key", "code"), [("missing.pdf", "NoSuchKey"), (None, "NoSuchBucket")])
def test_read_uri_reports_the_s3_error_code(
    s3_bucket: str, s3_client: Any, key: str | None, code: str
) -> None:
    uri = f"s3://{s3_bucket}/{key}" if key else "s3://pg-no-such-bucket/x.pdf"
    with pytest.raises(DownloadError) as info:
        read_uri(uri, s3_client=s3_client)
    assert info.value.code == code
    assert info.value.source == uri


def test_read_uri_reports_local_errors_by_errno_name(tmp_path: Path) -> None:
    with pytest.raises(DownloadError) as info:
        read_uri(str(tmp_path / "missing.pdf"))
    assert info.value.code == "ENOENT"
    with pytest.raises(DownloadError) as info:
        read_uri(str(tmp_path))
    assert info.value.code == "EISDIR"


@pytest.mark.parametrize("uri", ["s3://bucket", "s3://bucket/", "s3://bucket/dir/"])
def test_read_uri_refuses_s3_uris_that_name_no_object(uri: str) -> None:
    with pytest.raises(StorageError):
        read_uri(uri, s3_client=object())


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("s3://b/k", ("b", "k")),
        ("s3://b/a/b/c.pdf", ("b", "a/b/c.pdf")),
        ("s3://b", ("b", "")),
        ("s3://b/", ("b", "")),
        ("s3://b/dir/", ("b", "dir/")),
    ],
)
def test_split_s3_uri(uri: str, expected: tuple[str, str]) -> None:
    assert split_s3_uri(uri) == expected


@pytest.mark.parametrize("uri", ["s3://", "s3:///key", "S3://b/k", "/local/path", "s3://b c/k"])
def test_split_s3_uri_refuses_bad_uris(uri: str) -> None:
    with pytest.raises(StorageError):
        split_s3_uri(uri)


def test_open_store_picks_the_backend_and_normalises_the_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s3 = open_store("s3://bucket/some/prefix/")
    assert isinstance(s3, S3Store)
    assert s3.uri == "s3://bucket/some/prefix"
    assert s3.uri_for("k.jsonl") == "s3://bucket/some/prefix/k.jsonl"
    assert open_store("s3://bucket").uri_for("k") == "s3://bucket/k"

    monkeypatch.setenv("HOME", str(tmp_path))
    home = open_store("~/out/")
    assert isinstance(home, LocalStore)
    assert home.uri == str(tmp_path / "out")
    monkeypatch.chdir(tmp_path)
    assert open_store("rel/dir").uri == str(tmp_path / "rel" / "dir")


def test_open_store_passes_the_given_client_along(s3_bucket: str) -> None:
    client = make_s3_client()
    calls = count_calls(client, "PutObject")
    open_store(f"s3://{s3_bucket}/p", s3_client=client).write_bytes("k", b"v")
    assert [c["Key"] for c in calls] == ["p/k"]


@pytest.mark.parametrize(("code", "lasting"), [
    (errno.ENOSPC, True), (errno.EDQUOT, True), (errno.EROFS, True), (errno.EACCES, True),
    (errno.EPERM, True), (errno.EIO, False), (errno.ENAMETOOLONG, False), (errno.EINTR, False),
])
def test_a_local_write_failure_that_lasts_is_told_apart(code: int, lasting: bool) -> None:
    error = write_error("/ws/results/a.jsonl", OSError(code, os.strerror(code)))
    assert isinstance(error, StorageError)
    assert isinstance(error, WriteRefusedError) is lasting
    if lasting:
        assert isinstance(error, WriteRefusedError)
        assert error.cause == errno.errorcode[code]


@pytest.mark.parametrize(("code", "lasting"), [
    ("AccessDenied", True), ("NoSuchBucket", True), ("ExpiredToken", True),
    ("InvalidAccessKeyId", True), ("AllAccessDisabled", True),
    ("KeyTooLongError", False), ("EntityTooLarge", False), ("InternalError", False),
])
def test_an_s3_write_failure_that_lasts_is_told_apart(code: str, lasting: bool) -> None:
    from botocore.exceptions import ClientError

    failure = ClientError({"Error": {"Code": code, "Message": code}}, "PutObject")
    with pytest.raises(StorageError) as caught, write_errors("cannot write s3://b/k"):
        raise failure
    assert isinstance(caught.value, WriteRefusedError) is lasting
    assert str(caught.value) == f"cannot write s3://b/k: {code}"


def test_an_s3_endpoint_gone_after_the_retries_lasts() -> None:
    from botocore.exceptions import EndpointConnectionError

    with pytest.raises(WriteRefusedError) as caught, write_errors("cannot write s3://b/k"):
        raise EndpointConnectionError(endpoint_url="http://127.0.0.1:9")
    assert caught.value.cause == "EndpointConnectionError"
