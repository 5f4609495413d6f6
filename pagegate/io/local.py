"""A local directory tree as a `Store`: atomic writes (temp file, fsync, rename) and
creates (temp file, fsync, link), sorted
streaming listings, and keys that can never leave the root."""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Callable, Iterator

from pagegate.errors import DownloadError, StorageError, WriteRefusedError
from pagegate.io.store import ObjectInfo, check_key, check_prefix

TEMP_PREFIX = ".pagegate-tmp-"  # local temp files; `LocalStore.list` never shows them

# Write failures that last: the filesystem is full (or the user's quota), read-only, or
# closed to this user. Each holds for every later write, so the run stops (WriteRefusedError).
LASTING_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM})


def local_etag(st: os.stat_result) -> str:
    """A cheap change marker for a local file, standing in for S3's ETag."""
    return f"{st.st_mtime_ns:x}-{st.st_size:x}"


def errno_code(exc: OSError) -> str:
    """'ENOENT'-style name for an OSError, for DownloadError.code."""
    return errno.errorcode.get(exc.errno or 0, "EIO")


def write_error(path: str, exc: OSError) -> StorageError:
    """The error of a failed write: WriteRefusedError when no later write can succeed."""
    message = f"cannot write {path}: {exc}"
    if exc.errno in LASTING_ERRNOS:
        return WriteRefusedError(message, cause=errno_code(exc))
    return StorageError(message)


class LocalStore:
    """A directory tree as an object store; the directory is created on first write."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.uri = os.path.abspath(os.path.expanduser(os.fspath(root)))

    def __repr__(self) -> str:
        return f"LocalStore({self.uri!r})"

    def uri_for(self, key: str) -> str:
        return os.path.join(self.uri, *check_key(key).split("/"))

    def read_bytes(self, key: str) -> bytes:
        path = self.uri_for(key)
        try:
            with open(path, "rb") as f:
                return f.read()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError) as exc:
            raise DownloadError(f"no such object: {path}", source=path, code="NoSuchKey") from exc
        except OSError as exc:
            raise DownloadError(
                f"cannot read {path}: {exc}", source=path, code=errno_code(exc)
            ) from exc

    def write_bytes(self, key: str, data: bytes) -> None:
        """Write to a temp file beside the target, fsync, then rename over it.

        `os.replace` within one directory is atomic on POSIX, so readers see either the
        old file or the complete new one; a crash leaves at most a temp file that `list`
        ignores.
        """
        self._publish(key, data, os.replace)

    def create(self, key: str, data: bytes) -> bool:
        """Write `key` only if no file has that name; False if one has.

        The complete temp file is hard-linked to the name: link(2) fails with EEXIST when
        the name exists, on local filesystems and on NFS alike, so a reader never sees a
        partial claim and two creators never both win.
        """
        try:
            self._publish(key, data, os.link)
        except FileExistsError:
            return False
        return True

    def _publish(self, key: str, data: bytes, put: Callable[[str, str], None]) -> None:
        """Write a temp file in the target's directory, fsync it, `put` it at the target's
        name (rename or link), and fsync the directory. FileExistsError passes through."""
        path = self.uri_for(key)
        directory = os.path.dirname(path)
        # Short and independent of the target's name: a 255-byte file name must still work.
        tmp = os.path.join(directory, f"{TEMP_PREFIX}{secrets.token_hex(8)}")
        try:
            os.makedirs(directory, exist_ok=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except OSError as exc:
            raise write_error(path, exc) from exc
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            put(tmp, path)
        except FileExistsError:
            raise
        except OSError as exc:
            raise write_error(path, exc) from exc
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)  # renamed away already, or the link's spare name
        _fsync_dir(directory)

    def exists(self, key: str) -> bool:
        return os.path.isfile(self.uri_for(key))

    def delete(self, key: str) -> None:
        path = self.uri_for(key)
        try:
            os.unlink(path)
        except (FileNotFoundError, NotADirectoryError):
            pass
        except OSError as exc:
            raise StorageError(f"cannot delete {path}: {exc}") from exc

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        """Files under the root whose key starts with `prefix`, in key order, streamed.

        Walks only the deepest directory named by the prefix. Symlinked directories
        are not followed (a link loop would never end); symlinked files are listed.
        """
        check_prefix(prefix)
        start, _, _ = prefix.rpartition("/")
        start_dir = os.path.join(self.uri, *start.split("/")) if start else self.uri
        return _walk_sorted(start_dir, f"{start}/" if start else "", prefix)


def _walk_sorted(directory: str, key_prefix: str, want: str) -> Iterator[ObjectInfo]:
    """Yield files below `directory` in key order; keys are `key_prefix` + relative path.

    Siblings are sorted by name, with '/' appended to directory names: every key inside a
    directory starts with 'name/', and strings sharing a prefix are contiguous in sorted
    order, so a depth-first walk in that order visits keys in global lexicographic order.
    """
    try:
        with os.scandir(directory) as it:
            entries = [(e.name + "/" if e.is_dir(follow_symlinks=False) else e.name, e) for e in it]
    except (FileNotFoundError, NotADirectoryError):
        return
    except OSError as exc:
        raise StorageError(f"cannot list {directory}: {exc}") from exc
    entries.sort(key=lambda pair: pair[0])
    for sort_name, entry in entries:
        key = key_prefix + sort_name
        if sort_name.endswith("/"):
            if key.startswith(want):
                yield from _walk_sorted(entry.path, key, "")
            elif want.startswith(key):
                yield from _walk_sorted(entry.path, key, want)
            continue
        if not key.startswith(want) or entry.name.startswith(TEMP_PREFIX):
            continue
        try:
            st = entry.stat()
        except FileNotFoundError:  # deleted (or a dangling link) since scandir saw it
            continue
        if stat.S_ISREG(st.st_mode):
            yield ObjectInfo(key=key, uri=entry.path, size=st.st_size, etag=local_etag(st),
                             modified=st.st_mtime)


def _fsync_dir(directory: str) -> None:
    """Make a rename durable; some filesystems cannot open directories, which is fine."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
