"""Text from the database made safe to show: one place for terminals and pages.

A job's ``last_error``, its queue name or a worker id may come from anyone
who could write a row (a handler's exception text, a producer in another
language).  Printed as they are, an ESC sequence rewrites the operator's
terminal (``\\x1b[2K`` erases the line, ``\\x1b[32m`` paints a fake "OK")
and a bidi override (U+202E) makes a page show text in an order it was not
written in.  ``printable`` spells every such character as a visible escape
(``\\x1b``, ``\\u202e``) so what the operator reads is what is stored.
"""

from __future__ import annotations

import unicodedata

__all__ = ["printable"]

# Categories that never draw a glyph of their own and can change how the
# text around them is shown: C0/C1 controls (ESC, CR, BEL...), format
# characters (bidi embeddings/overrides/isolates, zero-width joiners, BOM),
# line/paragraph separators, lone surrogates, unassigned and private use.
_ESCAPED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})
_NAMED = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _escape(ch: str) -> str:
    code = ord(ch)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def printable(text: str, *, keep_newlines: bool = False) -> str:
    """``text`` with every control, format (bidi) and unassigned character escaped.

    With ``keep_newlines`` a line feed and a tab stay as they are (a
    traceback stays readable; neither can move the cursor back over text
    already shown); otherwise they are ``\\n`` and ``\\t`` too, for one-line
    cells.  A carriage return is always escaped: it can overwrite a line.
    """
    out: list[str] = []
    for ch in text:
        if keep_newlines and ch in "\n\t":
            out.append(ch)
        elif ch in _NAMED:
            out.append(_NAMED[ch])
        elif unicodedata.category(ch) in _ESCAPED_CATEGORIES:
            out.append(_escape(ch))
        else:
            out.append(ch)
    return "".join(out)
