"""What the render pool and its worker processes say to each other, and how it is framed.

One request at a time per worker: the pool writes a `Request`, the worker answers with one
`Reply`. Each message is pickled behind an 8-byte length on the worker's stdin/stdout
(the worker points its own fd 1 at stderr, so a stray print cannot corrupt the stream).
Pickle is safe here: both ends are this package, and the worker is our own child.
The values that cross (`PdfInfo`, `RenderedPage`) are defined here, not beside pdfium and
pypdf, so the run's process imports neither library.
"""

from __future__ import annotations

import pickle
import struct
from dataclasses import dataclass, field
from typing import IO, Any

_LENGTH = struct.Struct(">Q")
LENGTH_SIZE = _LENGTH.size

ROTATIONS = (0, 90, 180, 270)
DEFAULT_MAX_PIXELS = 1288 * 1288 * 2


@dataclass(frozen=True)
class PdfInfo:
    """What the pipeline needs to know about a document before scheduling its pages.

    `engine` is the library that opened it ("pdfium", or "pypdf": text layer only);
    `password` is the password it needs (None: none); `header_added` says pdfium saw it
    only with a `%PDF-` header line put in front.
    """

    page_count: int
    engine: str = "pdfium"
    password: str | None = None
    header_added: bool = False


@dataclass(frozen=True)
class RenderedPage:
    """A page image ready to send to the model."""

    png: bytes
    width: int
    height: int
    width_pt: float = 0.0
    """The page's size in PDF points as the image shows it (after /Rotate and `rotation`):
    what a box given as a fraction of the image is a fraction of."""
    height_pt: float = 0.0


@dataclass(frozen=True)
class PdfSource:
    """A PDF as a worker opens it: its bytes, or a file path (a local source, or a copy
    spooled to disk), with the password it needs.

    `key` names it within a run (its URI); workers keep documents open by key.
    `use_pdfium=False` marks a file pdfium crashed or hung on: its text layer is read
    with pypdf and nothing tries to render it.
    """

    key: str
    data: bytes | None = field(default=None, repr=False)
    path: str | None = None
    password: str | None = field(default=None, repr=False)
    use_pdfium: bool = True

    def __post_init__(self) -> None:
        if (self.data is None) == (self.path is None):
            raise ValueError("a PdfSource has either data or a path")

    @property
    def size(self) -> int:
        """Bytes held in memory for it (0 for a file on disk)."""
        return len(self.data) if self.data is not None else 0


@dataclass(frozen=True)
class Request:
    """One operation: "count", "inspect", "render", "text" or "stats".

    `source` is sent only when the worker does not have the document open yet; `evict`
    lists documents it should close first (the pool decides, so both sides agree).
    """

    op: str
    key: str = ""
    source: PdfSource | None = None
    page: int = 0
    rotation: int = 0
    password: str | None = field(default=None, repr=False)
    max_pages: int | None = None
    use_pdfium: bool = True
    evict: tuple[str, ...] = ()


@dataclass(frozen=True)
class Reply:
    """The result, or an error: the pagegate.errors class name and its message.

    `fatal` tells the pool the worker is about to exit (it ran out of memory).
    """

    value: Any = None
    error: str | None = None
    message: str = ""
    fatal: bool = False


def encode(message: Request | Reply) -> bytes:
    body = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return _LENGTH.pack(len(body)) + body


def length_of(prefix: bytes) -> int:
    (length,) = _LENGTH.unpack(prefix)
    return int(length)


def decode(body: bytes) -> Any:
    return pickle.loads(body)


def read_message(stream: IO[bytes]) -> Any | None:
    """The next message from a blocking stream; None at end of stream."""
    prefix = stream.read(LENGTH_SIZE)
    if len(prefix) < LENGTH_SIZE:
        return None
    body = stream.read(length_of(prefix))
    return decode(body)


def write_message(stream: IO[bytes], message: Request | Reply) -> None:
    stream.write(encode(message))
    stream.flush()
