"""Argument checks that run before any SQL (Q2, Q3).

Every public entry point funnels its arguments through these helpers, so a
bad value is refused with a clear ``ValueError``/``TypeError`` and the
database never sees it.
"""

from __future__ import annotations

import math
import re
import unicodedata
from datetime import UTC, datetime, timedelta
from typing import Any

from .errors import InvalidNameError

# Plain constants that light importers (the CLI's parser) need without the
# SQLAlchemy layers: the default schema, and what O1/O2 bound one call to.
DEFAULT_SCHEMA = "alkstore"
MAX_LIST = 1000
MAX_REQUEUE = 10_000

# 63 bytes is PostgreSQL's NAMEDATALEN - 1: the longest identifier and the
# longest LISTEN channel it accepts without truncating.
MAX_NAME_BYTES = 63
RESERVED_PREFIXES = ("alkstore", "pg_")
# The longest duration we accept: big enough for any real schedule, small
# enough that timedelta arithmetic and PostgreSQL intervals never overflow.
MAX_SECONDS = 10**9
PG_INT_MIN, PG_INT_MAX = -(2**31), 2**31 - 1
_SCHEMA_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_EARLIEST = datetime(1, 1, 2, tzinfo=UTC)
_LATEST = datetime(9999, 12, 30, tzinfo=UTC)

# U1: the longest unique key, in UTF-8 bytes.  Far below PostgreSQL's limit
# on a B-tree entry (about 2.7 kB, which the key shares with the queue name),
# so a valid key can never fail in the index; long enough for any natural
# key or a hex digest of a longer one.
MAX_UNIQUE_KEY_BYTES = 1024

# The longest error text kept (last_error, an errors entry's error and
# traceback): a huge message helps nobody in a table column, and every page
# and listing that shows it pays for its size.  Every entry point cuts to
# it: the handle's retry/fail, RetryJob/FailJob, the Worker.
MAX_ERROR_CHARS = 8000
# A worker id names a process in listings and logs (host:pid:... by default).
MAX_WORKER_ID_CHARS = 200

Duration = float | int | timedelta


def _encodable(text: str) -> bool:
    """False for a lone surrogate: UTF-8 (and so PostgreSQL text) cannot hold it."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def cut_error(text: str) -> str:
    """Error text as stored: its first MAX_ERROR_CHARS characters."""
    return text[:MAX_ERROR_CHARS]


def storable_text(text: str) -> str:
    """``text`` as PostgreSQL can hold it: NULs dropped, lone surrogates as ``\\udcxx``."""
    text = text.replace("\x00", "")
    if not _encodable(text):
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def stored_text(text: str) -> str:
    """Text the library writes on a handler's behalf (an exception's message).

    Never refused (the handler already failed; its job must still move):
    ``storable_text``, cut to MAX_ERROR_CHARS.
    """
    return cut_error(storable_text(text))


def _has_bad_char(text: str) -> bool:
    return any(ch.isspace() or unicodedata.category(ch) in ("Cc", "Cf") for ch in text)


def queue_name(name: object) -> str:
    if not isinstance(name, str):
        raise InvalidNameError(f"queue name must be a str, got {type(name).__name__}")
    if not name:
        raise InvalidNameError("queue name must not be empty")
    if not _encodable(name):
        raise InvalidNameError("queue name is not valid Unicode (a lone surrogate)")
    # One queue per name as it looks: "café" typed as one code point or as
    # "e" + U+0301 (macOS file names, some keyboards) is the same queue.
    # Migration 0009 moved existing rows to their names' NFC form.
    if not unicodedata.is_normalized("NFC", name):
        name = unicodedata.normalize("NFC", name)
    if len(name.encode("utf-8")) > MAX_NAME_BYTES:
        raise InvalidNameError(f"queue name is longer than {MAX_NAME_BYTES} bytes (UTF-8)")
    if _has_bad_char(name):
        raise InvalidNameError(
            f"queue name {name!r} contains whitespace or a control/format character"
        )
    if name.casefold().startswith(RESERVED_PREFIXES):
        raise InvalidNameError(f"queue name {name!r} is reserved (starts with alkstore or pg_)")
    return name


def worker_id(value: object) -> str:
    if not isinstance(value, str):
        raise InvalidNameError(f"worker_id must be a str, got {type(value).__name__}")
    if not value or value.isspace():
        raise InvalidNameError("worker_id must not be empty or whitespace only")
    if "\x00" in value:
        raise InvalidNameError("worker_id must not contain NUL characters")
    if len(value) > MAX_WORKER_ID_CHARS:
        raise InvalidNameError(f"worker_id is longer than {MAX_WORKER_ID_CHARS} characters")
    if not _encodable(value):
        raise InvalidNameError("worker_id is not valid Unicode (a lone surrogate)")
    return value


def schema_name(value: object) -> str:
    """Schema names are plain identifiers: letters, digits, underscores."""
    if not isinstance(value, str):
        raise InvalidNameError(f"schema must be a str, got {type(value).__name__}")
    if not _SCHEMA_RE.match(value) or len(value.encode()) > MAX_NAME_BYTES:
        raise InvalidNameError(
            f"schema {value!r} must be 1-{MAX_NAME_BYTES} letters, digits or underscores, "
            "not starting with a digit"
        )
    if value.casefold().startswith("pg_"):
        raise InvalidNameError(f"schema {value!r} is reserved by PostgreSQL (pg_)")
    return value


def duration(value: object, what: str, *, allow_zero: bool = False) -> float:
    """Seconds as a float, from int/float seconds or a timedelta."""
    if isinstance(value, bool) or not isinstance(value, int | float | timedelta):
        raise TypeError(f"{what} must be seconds (int/float) or a timedelta, got {value!r}")
    if isinstance(value, int) and abs(value) > MAX_SECONDS:
        # Checked before float(), which raises OverflowError past ~1e308; the
        # value is not quoted back (a huge int's str() is refused too).
        raise ValueError(f"{what} must be between 0 and {MAX_SECONDS} seconds")
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if not math.isfinite(seconds):
        raise ValueError(f"{what} must be finite, got {value!r}")
    if seconds < 0 or (seconds == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{what} must be {bound} seconds, got {value!r}")
    if seconds > MAX_SECONDS:
        raise ValueError(f"{what} must be at most {MAX_SECONDS} seconds, got {value!r}")
    # timedelta and PostgreSQL intervals count whole microseconds: a smaller
    # positive value would become zero, which "> 0" promised it is not.
    if not allow_zero and seconds < 1e-6:
        raise ValueError(f"{what} must be at least one microsecond, got {value!r}")
    return seconds


def optional_duration(value: object, what: str) -> float | None:
    return None if value is None else duration(value, what)


def integer(value: object, what: str, *, minimum: int = PG_INT_MIN) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, got {value!r}")
    if value < minimum or value > PG_INT_MAX:
        raise ValueError(f"{what} must be between {minimum} and {PG_INT_MAX}, got {value}")
    return value


def aware_datetime(value: object, what: str) -> datetime:
    if not isinstance(value, datetime):
        raise TypeError(f"{what} must be a datetime, got {value!r}")
    if value.tzinfo is None or value.tzinfo.utcoffset(value) is None:
        raise ValueError(f"{what} must be timezone-aware (a naive datetime is ambiguous)")
    # A value Python cannot show in every session time zone (UTC-24h..UTC+24h of
    # years 1..9999) would be stored, then fail to load: get_job and every claim
    # of its queue would raise.  A day of margin at both ends avoids that.
    if not _EARLIEST <= value <= _LATEST:
        raise ValueError(f"{what} must lie between {_EARLIEST} and {_LATEST}, got {value}")
    return value


def payload(value: object, what: str = "payload") -> bytes:
    # Run for every payload of an enqueue_many: bytes, the usual case, returns
    # at once (``bytes | bytearray | memoryview`` builds a union on each call).
    if type(value) is bytes:
        return value
    if not isinstance(value, bytes | bytearray | memoryview):
        raise TypeError(
            f"{what} must be bytes-like (bytes, bytearray, memoryview), got {value!r:.80}"
        )
    return bytes(value)


def error_text(value: object, what: str = "error") -> str | None:
    """Error strings are stored as given, cut to MAX_ERROR_CHARS.

    PostgreSQL text cannot hold NUL, nor UTF-8 a lone surrogate: both are
    refused here, before any SQL.
    """
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str or None, got {type(value).__name__}")
    if "\x00" in value:
        raise ValueError(f"{what} must not contain NUL characters (PostgreSQL text cannot)")
    text = cut_error(value)
    if not _encodable(text):
        raise ValueError(f"{what} is not valid Unicode (a lone surrogate)")
    return text


def unique_key(value: object, what: str = "unique_key") -> str:
    """U1: a non-empty ``str`` of at most MAX_UNIQUE_KEY_BYTES (UTF-8), no NUL.

    A whitespace-only key counts as empty: it is almost always a value that
    went missing (``f"{order.ref}"`` of a blank field), and two unrelated
    jobs sharing it would silently collapse into one.
    """
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, got {type(value).__name__}")
    if not value or value.isspace():
        raise ValueError(f"{what} must not be empty or whitespace only")
    if "\x00" in value:
        raise ValueError(f"{what} must not contain NUL characters (PostgreSQL text cannot)")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise ValueError(f"{what} is not valid Unicode (a lone surrogate)") from None
    if size > MAX_UNIQUE_KEY_BYTES:
        raise ValueError(f"{what} is longer than {MAX_UNIQUE_KEY_BYTES} bytes (UTF-8): {size}")
    return value


def job_id(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"job id must be an int, got {value!r}")
    if not -(2**63) <= value < 2**63:
        raise ValueError(f"job id {value} is outside the bigint range")
    return value


def job_ids(values: Any) -> list[int]:
    if isinstance(values, str | bytes):
        raise TypeError("job_ids must be an iterable of ints")
    return [job_id(v) for v in values]
