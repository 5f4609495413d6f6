"""Expand the source specs a user typed into one lazy, de-duplicated stream of documents.

Spec forms (each `ObjectInfo.key` is the key within the bucket for S3, the absolute
path for local files; `uri` is the full location):

==============================  ==========================================================
``s3://bucket/prefix[/]``        every object below ``prefix/`` whose key ends in ``.pdf``
                                 (any case), recursively; if ``prefix`` itself is an object
                                 key it is taken as-is, whatever its extension
``s3://bucket/a/**/x?.pdf``      glob, see `s3_glob_match`; only the literal part before the
                                 first wildcard is listed
``/data/pdfs``                   a directory: every file below it ending in ``.pdf``
``/data/*.pdf``, ``d/**/x.pdf``  a local glob (`glob.glob(..., recursive=True)`)
``/data/file.bin``               a file that is not ``.txt``: taken as-is, so a mislabelled
                                 file reaches the validator and gets a ledger reason
``list.txt``, ``s3://b/l.txt``   one spec per line; blank lines and '#' lines skipped;
                                 a ``.txt`` inside a list is refused (no loops)
==============================  ==========================================================

A spec that yields nothing raises StorageError naming it: a typo must not quietly
process zero PDFs. With `on_missing` it is reported there instead and the listing goes
on: a run records a missing entry of a list in its ledger and converts the others (the
run's preflight has already refused sources on the command line that name nothing). Listing is streamed page by page so the first document is yielded
while S3 is still paging; the only thing that grows is the set of URIs already seen,
kept to drop duplicates across specs (and within list files); a single prefix, glob or
folder needs none.

Relative local paths, also inside list files, are relative to the working directory.
"""

from __future__ import annotations

import glob
import os
import re
import stat
from collections.abc import Callable, Iterable, Iterator, Sequence
from fnmatch import fnmatchcase

from pagegate.errors import DownloadError, StorageError
from pagegate.io.local import LocalStore, local_etag
from pagegate.io.s3 import DEFAULT_PAGE_SIZE, S3Store, make_s3_client
from pagegate.io.storage import read_uri
from pagegate.io.store import S3_SCHEME, ObjectInfo, S3Client, split_s3_uri

PDF_SUFFIX = ".pdf"
LIST_SUFFIX = ".txt"
_WILDCARD = re.compile(r"[*?\[]")

OnMissing = Callable[[str, str], None]
"""Called with (where the spec points, why it names nothing) for a spec that yields nothing."""

OnRoot = Callable[[str], None]
"""Called once per distinct source root that yielded a document (see `source_root`)."""


def iter_sources(
    specs: Sequence[str],
    *,
    s3_client: S3Client | None = None,
    page_size: int = DEFAULT_PAGE_SIZE,
    on_missing: OnMissing | None = None,
    on_root: OnRoot | None = None,
) -> Iterator[ObjectInfo]:
    """Yield every document the specs name, in spec order, each URI once (first wins).

    `page_size` is the ListObjectsV2 page size (S3's maximum is 1000); one boto3 client is
    shared by all specs and built only when an s3:// spec is reached. `on_root` hears the
    folder or prefix each spec (or list line) lists from, before its first document.
    """
    if isinstance(specs, str):
        raise TypeError("iter_sources takes a sequence of specs, not one string")
    expander = _Expander(s3_client, page_size, on_missing, on_root)
    if len(specs) == 1 and not is_list_spec(specs[0]):
        # One prefix, glob or folder lists each object once: no set of every URI seen,
        # which is ~110 MB at a million keys (the planner's listing, bench/scaling.py).
        yield from expander.expand(specs[0], listed_in=None)
        return
    seen: set[str] = set()
    for spec in specs:
        for info in expander.expand(spec, listed_in=None):
            if info.uri not in seen:
                seen.add(info.uri)
                yield info


def s3_glob_match(pattern: str, key: str) -> bool:
    """Match an S3 key against a glob, segment by segment ('/' separates segments).

    `*`, `?` and `[...]` behave as in fnmatch but never cross a '/'. A segment that is
    exactly `**` matches whole segments: zero or more in the middle (`a/**/x.pdf` matches
    `a/x.pdf` and `a/b/c/x.pdf`), one or more at the end (`a/**` matches everything under
    `a/`, not `a` itself). This mirrors Python's `glob(recursive=True)`, except that names
    starting with '.' are matched like any other: S3 has no hidden files. Case-sensitive.
    """
    parts = key.split("/")
    segments = pattern.split("/")
    reachable = {0}  # how many key segments the pattern consumed so far, per live branch
    for index, segment in enumerate(segments):
        if segment == "**":
            first = min(reachable) + (1 if index == len(segments) - 1 else 0)
            reachable = set(range(first, len(parts) + 1))
        else:
            reachable = {
                i + 1 for i in reachable if i < len(parts) and fnmatchcase(parts[i], segment)
            }
        if not reachable:
            return False
    return len(parts) in reachable


class _Expander:
    """Per-call expansion state: the shared, lazily built S3 client and the page size."""

    def __init__(
        self,
        s3_client: S3Client | None,
        page_size: int,
        on_missing: OnMissing | None,
        on_root: OnRoot | None = None,
    ) -> None:
        self._client = s3_client
        self._page_size = page_size
        self._on_missing = on_missing
        self._on_root = on_root
        self._roots: set[str] = set()

    def _rooted(self, root: str, infos: Iterator[ObjectInfo]) -> Iterator[ObjectInfo]:
        """`infos`, reporting `root` once, before the first of them, if there is one."""
        for info in infos:
            if self._on_root is not None and root not in self._roots:
                self._roots.add(root)
                self._on_root(root)
            yield info

    def _s3(self) -> S3Client:
        if self._client is None:
            self._client = make_s3_client()
        return self._client

    def expand(self, spec: str, *, listed_in: str | None) -> Iterator[ObjectInfo]:
        """Expand one spec; raise StorageError if it names nothing."""
        spec = spec.strip()
        if not spec:
            raise StorageError("empty source spec")
        if listed_in is not None and is_list_spec(spec):
            raise StorageError(f"source list {listed_in!r} names another list {spec!r}")
        found = False
        inner = self._s3_spec(spec) if spec.startswith(S3_SCHEME) else self._local_spec(spec)
        for info in inner:
            found = True
            yield info
        if not found:
            where = f" (listed in {listed_in!r})" if listed_in else ""
            if self._on_missing is None:
                raise StorageError(f"source {spec!r} matches nothing{where}")
            self._on_missing(missing_uri(spec), f"no file or object matches {spec!r}{where}")

    # ------------------------------------------------------------------ S3

    def _s3_spec(self, spec: str) -> Iterator[ObjectInfo]:
        bucket, key = split_s3_uri(spec)
        if _WILDCARD.search(bucket):
            raise StorageError(f"wildcards are not allowed in bucket names: {spec!r}")
        wildcard = _WILDCARD.search(key)
        if wildcard:
            store = S3Store(bucket, client=self._s3(), page_size=self._page_size)
            literal = key[: wildcard.start()]
            matches = (i for i in store.list(literal) if s3_glob_match(key, i.key))
            yield from self._rooted(f"{S3_SCHEME}{bucket}/{_folder_of(literal)}", matches)
        elif key.lower().endswith(LIST_SUFFIX):
            yield from self._list_file(spec)
        else:
            yield from self._s3_prefix(bucket, key)

    def _s3_prefix(self, bucket: str, key: str) -> Iterator[ObjectInfo]:
        """An exact object key (taken as-is) and/or every .pdf below `key/`.

        The exact probe is one ListObjectsV2 call with MaxKeys=1: `key` sorts before every
        other key that starts with it, so it is the first hit if it exists. A probe that
        finds a .pdf stops there, so a list of explicit PDF keys costs one call per line.
        """
        client = self._s3()
        if key and not key.endswith("/"):
            first = next(S3Store(bucket, client=client, page_size=1).list(key), None)
            if first is not None and first.key == key:
                yield from self._rooted(f"{S3_SCHEME}{bucket}/{_folder_of(key)}", iter([first]))
                if key.lower().endswith(PDF_SUFFIX):
                    return
            key += "/"
        store = S3Store(bucket, client=client, page_size=self._page_size)
        below = (i for i in store.list(key) if i.key.lower().endswith(PDF_SUFFIX))
        yield from self._rooted(f"{S3_SCHEME}{bucket}/{key}", below)

    # ------------------------------------------------------------------ local

    def _local_spec(self, spec: str) -> Iterator[ObjectInfo]:
        expanded = os.path.expanduser(spec)
        path = os.path.abspath(expanded)
        if os.path.isdir(path):
            below = (
                ObjectInfo(key=info.uri, uri=info.uri, size=info.size, etag=info.etag)
                for info in LocalStore(path).list()
                if info.key.lower().endswith(PDF_SUFFIX)
            )
            yield from self._rooted(_as_folder(path), below)
        elif os.path.isfile(path):
            if path.lower().endswith(LIST_SUFFIX):
                yield from self._list_file(spec)
            else:
                yield from self._rooted(_as_folder(os.path.dirname(path)), _local_file(path))
        elif wildcard := _WILDCARD.search(expanded):
            # Checked after the literal path, so a real file named 'scan[1].pdf' still works.
            literal = os.path.abspath(_folder_of(expanded[: wildcard.start()]) or ".")
            matches = sorted(os.path.abspath(p) for p in glob.glob(expanded, recursive=True))
            found = (info for match in matches for info in _local_file(match))
            yield from self._rooted(_as_folder(literal), found)

    # ------------------------------------------------------------------ lists

    def _list_file(self, spec: str) -> Iterator[ObjectInfo]:
        """Read a list file whole (an S3 body held open for hours would time out)."""
        try:
            data = read_uri(spec, s3_client=self._s3() if spec.startswith(S3_SCHEME) else None)
            text = data.decode("utf-8-sig")
        except DownloadError as exc:
            raise StorageError(f"cannot read source list {spec!r}: {exc.code}") from exc
        except UnicodeDecodeError as exc:
            raise StorageError(f"source list {spec!r} is not UTF-8 text") from exc
        for line in text.splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                yield from self.expand(line, listed_in=spec)


def _folder_of(key: str) -> str:
    """The folder part of a key or path, with its trailing '/' ('' when there is none)."""
    return key[: key.rfind("/") + 1]


def _as_folder(path: str) -> str:
    """An absolute local folder as a root: with exactly one trailing separator."""
    return path.rstrip(os.sep) + os.sep


def common_root(roots: Iterable[str]) -> str | None:
    """The innermost folder or prefix holding every root, or None when they share none.

    A run's documents are named (markdown paths) relative to it: one source folder
    gives its own folder, several give the folder they have in common, so two documents
    of one run never map to the same name. Roots end in '/'. S3 roots in different
    buckets, or local and S3 roots together, have no common root.
    """
    listed = list(roots)
    if not listed:
        return None
    if all(r.startswith(S3_SCHEME) for r in listed):
        split = [split_s3_uri(r) for r in listed]
        if len({bucket for bucket, _ in split}) > 1:
            return None
        parts = [key.split("/")[:-1] for _, key in split]
        common = []
        for segments in zip(*parts, strict=False):
            if len(set(segments)) > 1:
                break
            common.append(segments[0])
        return f"{S3_SCHEME}{split[0][0]}/" + "".join(s + "/" for s in common)
    if any(r.startswith(S3_SCHEME) for r in listed):
        return None
    return _as_folder(os.path.commonpath(listed))


def missing_uri(spec: str) -> str:
    """Where a spec that names nothing points: its absolute path, or the s3:// URI as typed."""
    spec = spec.strip()
    return spec if spec.startswith(S3_SCHEME) else os.path.abspath(os.path.expanduser(spec))


def is_list_spec(spec: str) -> bool:
    """Would this spec be read as a list of specs?"""
    if spec.startswith(S3_SCHEME):
        _, key = split_s3_uri(spec)
        return not _WILDCARD.search(key) and key.lower().endswith(LIST_SUFFIX)
    path = os.path.abspath(os.path.expanduser(spec))
    return path.lower().endswith(LIST_SUFFIX) and os.path.isfile(path)


def _local_file(path: str) -> Iterator[ObjectInfo]:
    """One regular file as an ObjectInfo (nothing for directories, sockets, dangling links)."""
    try:
        st = os.stat(path)
    except OSError:
        return
    if stat.S_ISREG(st.st_mode):
        yield ObjectInfo(key=path, uri=path, size=st.st_size, etag=local_etag(st))
