"""What the templates show, computed in Python: times, sizes, payload text, the chart's bars."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC as _UTC
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import quote, urlencode

__all__ = [
    "PAYLOAD_SHOWN",
    "Bar",
    "Chart",
    "PayloadView",
    "ago",
    "chart",
    "duration",
    "number",
    "payload_view",
    "preview",
    "stamp",
    "task_name",
    "url_for",
]

# W2: the job page shows at most this much of a payload.
PAYLOAD_SHOWN = 64 * 1024
_PREVIEW = 80


def url_for(base: str, *parts: object, **query: object) -> str:
    """``base`` + each part percent-encoded as one path segment (``/`` too) + the query."""
    path = base + "".join("/" + quote(str(p), safe="") for p in parts)
    shown = {k: str(v) for k, v in query.items() if v is not None and v != ""}
    return path + ("?" + urlencode(shown) if shown else "")


def number(value: int | None) -> str:
    return "" if value is None else f"{value:,}"


def duration(seconds: float | None) -> str:
    """A short human duration: ``850 ms``, ``12.3 s``, ``4 min 05 s``, ``3 h 20 min``."""
    if seconds is None:
        return ""
    if not math.isfinite(seconds):
        return "-"
    s = abs(seconds)
    if s < 1:
        text = f"{s * 1000:.0f} ms"
    elif s < 60:
        text = f"{s:.1f} s"
    elif s < 3600:
        text = f"{int(s // 60)} min {int(s % 60):02d} s"
    elif s < 86400:
        text = f"{int(s // 3600)} h {int(s % 3600 // 60):02d} min"
    else:
        text = f"{int(s // 86400)} d {int(s % 86400 // 3600)} h"
    return "-" + text if seconds < 0 else text


def stamp(when: datetime | None) -> str:
    """UTC, to the second (the title attribute carries the full value)."""
    if when is None:
        return ""
    return when.astimezone(tz=_UTC).strftime("%Y-%m-%d %H:%M:%S") + "Z"


def ago(when: datetime | None, now: datetime) -> str:
    """``5.2 s ago`` or ``in 3 min 00 s``, judged against the database's clock."""
    if when is None:
        return ""
    delta = (now - when).total_seconds()
    return f"{duration(delta)} ago" if delta >= 0 else f"in {duration(-delta)}"


# A task envelope (T1) as this package writes it, ``{"v":1,"task":"NAME",...``, read
# from the payload's first bytes; others (another producer's key order or
# spacing) are decoded in full when small enough.
_ENVELOPE_HEAD = re.compile(rb'^\{\s*"v"\s*:\s*1\s*,\s*"task"\s*:\s*("(?:[^"\\]|\\.){1,400}")')
_ENVELOPE_DECODED = 64 * 1024


def task_name(payload: bytes) -> str | None:
    """T1: the task a payload's envelope names, or None when it is not one (V2)."""
    if not payload.startswith(b"{"):
        return None
    found = _ENVELOPE_HEAD.match(payload[:1024])
    try:
        if found is not None:
            name = json.loads(found.group(1))
        elif len(payload) <= _ENVELOPE_DECODED:
            envelope = json.loads(payload)
            version = envelope.get("v") if isinstance(envelope, dict) else None
            if version != 1 or isinstance(version, bool):
                return None
            name = envelope.get("task")
        else:
            return None
    except (ValueError, RecursionError):
        return None
    return name if isinstance(name, str) and name else None


def _printable(text: str) -> bool:
    return all(c.isprintable() or c in "\n\r\t" for c in text)


def preview(payload: bytes) -> str:
    """The first bytes of a payload as text when they are text, else as hex."""
    head = payload[:_PREVIEW]
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:
        text = ""
        if len(payload) > _PREVIEW:  # maybe a character cut in two at the end
            try:
                text = head[:-3].decode("utf-8", errors="strict")
            except UnicodeDecodeError:
                text = ""
        if not text:
            return "0x" + head[:32].hex() + ("…" if len(payload) > 32 else "")
    if not _printable(text):
        return "0x" + head[:32].hex() + ("…" if len(payload) > 32 else "")
    flat = " ".join(text.split())
    return flat + ("…" if len(payload) > len(head) else "")


@dataclass(frozen=True)
class PayloadView:
    kind: str  # "text", "hex" or "empty"
    body: str
    size: int
    shown: int


def payload_view(payload: bytes) -> PayloadView:
    """W2: the first 64 KiB of a payload, as UTF-8 text when it is text, else a hex dump."""
    head = payload[:PAYLOAD_SHOWN]
    if not payload:
        return PayloadView("empty", "", 0, 0)
    text: str | None
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as exc:
        # A character cut at the 64 KiB mark is still text.
        if len(payload) > PAYLOAD_SHOWN and exc.start >= len(head) - 3:
            text = head[: exc.start].decode("utf-8")
        else:
            text = None
    if text is not None and _printable(text):
        return PayloadView("text", text, len(payload), len(head))
    lines = []
    for offset in range(0, len(head), 16):
        chunk = head[offset : offset + 16]
        hexed = " ".join(f"{b:02x}" for b in chunk)
        shown = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{offset:08x}  {hexed:<47}  {shown}")
    return PayloadView("hex", "\n".join(lines), len(payload), len(head))


@dataclass(frozen=True)
class Bar:
    x: float
    minute: datetime
    acked: int
    retried: int
    dead: int
    h_acked: float
    h_retried: float
    h_dead: float


@dataclass(frozen=True)
class Chart:
    bars: list[Bar]
    peak: int
    totals: Mapping[str, int]
    width: float
    height: float
    bar_width: float


def chart(rows: Sequence[Any], now: datetime) -> Chart:
    """W2: the last hour, one bar per minute (stacked acked / retried / dead), empty minutes too."""
    height, bar_width, gap = 80.0, 9.0, 2.0
    this_minute = now.replace(second=0, microsecond=0)
    by_minute = {r.minute.astimezone(_UTC).replace(second=0, microsecond=0): r for r in rows}
    minutes = [this_minute - timedelta(minutes=59 - i) for i in range(60)]
    counts: list[tuple[datetime, int, int, int]] = []
    for m in minutes:
        r = by_minute.get(m.astimezone(_UTC))
        a, b, c = (int(getattr(r, k)) if r is not None else 0 for k in _KINDS)
        counts.append((m, a, b, c))
    peak = max((a + b + c for _, a, b, c in counts), default=0)
    scale = height / peak if peak else 0.0
    bars = [
        Bar(i * (bar_width + gap), m, a, r, d, a * scale, r * scale, d * scale)
        for i, (m, a, r, d) in enumerate(counts)
    ]
    totals = {
        "acked": sum(c[1] for c in counts),
        "retried": sum(c[2] for c in counts),
        "dead": sum(c[3] for c in counts),
    }
    return Chart(bars, peak, totals, 60 * (bar_width + gap) - gap, height, bar_width)


_KINDS = ("acked", "retried", "dead")
