"""Every error pagegate raises on purpose, in one tree.

The tree separates *what went wrong* so that retries can tell the cases apart:

    PagegateError
    ├── InputError                 a source PDF cannot be processed (goes to the ledger)
    │   ├── NotAPdfError           bytes are not a PDF at all (HTML, random bytes)
    │   ├── CorruptPdfError        looks like a PDF but cannot be parsed
    │   ├── EncryptedPdfError      needs a password we do not have
    │   ├── EmptyPdfError          parses, but has zero pages
    │   ├── TooManyPagesError      more pages than the configured cap
    │   ├── RenderFailedError      the render worker crashed, hung or ran out of memory on
    │   │                          it (a page falls back to its text; a PDF neither
    │   │                          library could inspect so goes to the ledger)
    │   ├── DownloadError          the object could not be fetched (carries the S3 code)
    │   └── SourceNotFoundError    an entry of a source list (or a pattern) names nothing
    ├── StorageError               a workspace or source location is unusable
    │   └── WriteRefusedError      a store refuses writes for a reason no retry mends (no
    │                              space, access denied, bucket gone, credentials expired):
    │                              the run stops sending pages (pagegate.ocr.halt)
    ├── ClaimLostError             another run took over this run's group (pagegate.claims):
    │                              write nothing more for it; the PDF is handed over
    ├── CapacityError              the server could not take the request now (503/429,
    │                              refused, reset, timeout); back off, never burns a page retry
    │   └── ServerUnavailableError capacity errors lasted past the deadline
    ├── ContentError               the server answered, but the answer is unusable
    │   └── ReplyParseError        the reply does not follow the profile's format
    ├── MetricsError               a /metrics scrape gave no usable reading (the gate
    │                              keeps its last good one: missing, never zero)
    ├── GateClosedError            the admission closed while a page waited; says nothing
    │                              about the server, so a permit reports it as CANCELLED
    ├── ServerLaunchError          a server pagegate launched exited or never became ready
    ├── PreflightError             a run cannot start: a workspace it cannot write, no S3
    │   │                          credentials, a source that names nothing, a model the
    │   │                          server does not serve (checked before any page is sent)
    │   └── ServerUnreachableError the server does not answer /v1/models at all

    RunInterrupted (a BaseException, like KeyboardInterrupt: an `except Exception` must not
                   swallow it) SIGINT or SIGTERM stopped a run the CLI started (no fault:
                   the CLI says what was committed, exits 130/143)

`InputError.reason` is the short, stable reason class written to the failure ledger.
"""

from __future__ import annotations

from typing import Any


class PagegateError(Exception):
    """Base class for every error pagegate raises deliberately."""


class InputError(PagegateError):
    """A source document cannot be processed; recorded in the ledger, never fatal to a run."""

    reason = "unreadable"

    def __init__(self, message: str, *, source: str | None = None) -> None:
        super().__init__(message)
        self.source = source


class NotAPdfError(InputError):
    reason = "not_a_pdf"


class CorruptPdfError(InputError):
    reason = "unreadable"


class EncryptedPdfError(InputError):
    reason = "encrypted"


class EmptyPdfError(InputError):
    reason = "zero_pages"


class TooManyPagesError(InputError):
    reason = "too_many_pages"


class RenderFailedError(InputError):
    """A render worker process died, hung past its timeout, or hit its memory limit."""

    reason = "render_failed"


class DownloadError(InputError):
    reason = "download_failed"

    def __init__(self, message: str, *, source: str | None = None, code: str | None = None) -> None:
        super().__init__(message, source=source)
        self.code = code


class SourceNotFoundError(InputError):
    """A source entry names no file or object: recorded, and the run goes on without it."""

    reason = "not_found"


class StorageError(PagegateError):
    """A workspace or source location cannot be used (bad URI, missing bucket, ...)."""


class WriteRefusedError(StorageError):
    """A store stopped taking writes, and retrying will not change that.

    `cause` is the short code of what refused (ENOSPC, AccessDenied, NoSuchBucket, ...).
    """

    def __init__(self, message: str, *, cause: str) -> None:
        super().__init__(message)
        self.cause = cause


class ClaimLostError(PagegateError):
    """Another run took over this run's claim on a group (pagegate.claims): this run must
    not write for that group any more. Not a failure of the PDF: it gets no record."""


class CapacityError(PagegateError):
    """The server could not take the request right now; retry after backing off."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class ServerUnavailableError(CapacityError):
    """The server stayed unreachable or overloaded past the configured deadline."""


class ContentError(PagegateError):
    """The server answered, but the answer cannot be used; retry with other sampling."""


class ReplyParseError(ContentError):
    """The reply text does not follow the model profile's reply format."""


class MetricsError(PagegateError):
    """A scrape gave no usable reading: unreachable, an HTTP error, or missing gauges.

    The gate treats it as a missing reading, never as zeros: it keeps its last good reading,
    and pauses once that one goes stale.
    """


class GateClosedError(PagegateError):
    """The gate was closed while a page was waiting for admission."""


class ServerLaunchError(PagegateError):
    """The server exited or never became ready; the message carries its last log lines."""


class PreflightError(PagegateError):
    """A run cannot start as asked; found before any page is sent. The message says what
    to do, in one line (the CLI prints it and exits 2)."""


class ServerUnreachableError(PreflightError):
    """The server did not answer /v1/models (refused, timed out, 5xx): exit 3, not 2."""


class RunInterrupted(BaseException):
    """SIGINT or SIGTERM stopped a run; `last` is its last progress update, if any.

    pagegate.cli.stopping raises it from a signal handler, at any point of the main
    thread, so it derives from BaseException: library code's `except Exception` lets it by.
    """

    def __init__(self, signum: int, last: Any = None) -> None:
        super().__init__(f"stopped by signal {signum}")
        self.signum = signum
        self.last = last
