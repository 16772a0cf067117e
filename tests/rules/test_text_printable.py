"""Text shown to an operator escapes what could rewrite a terminal or a page."""

from __future__ import annotations

from alkstore_sa._values.text import printable


def test_printable_escapes_terminal_control_sequences() -> None:
    shown = printable("\x1b[2K \x1b[32mOK all good\x07\r")
    assert "\x1b" not in shown and "\x07" not in shown and "\r" not in shown
    assert shown == "\\x1b[2K \\x1b[32mOK all good\\x07\\r"


def test_printable_escapes_bidi_and_zero_width_characters() -> None:
    for (
        ch
    ) in "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c\u200b\ufeff":
        assert printable(f"a{ch}b") == f"a\\u{ord(ch):04x}b"


def test_printable_escapes_c1_controls_separators_and_lone_surrogates() -> None:
    assert printable("\x9b31m") == "\\x9b31m"
    assert printable("a\u2028b\u2029c") == "a\\u2028b\\u2029c"
    assert printable("x\ud800y") == "x\\ud800y"


def test_printable_keeps_ordinary_text_and_optionally_line_breaks() -> None:
    text = "café — naïve 日本 😀 C:\\path"
    assert printable(text) == text
    assert printable("a\nb\tc") == "a\\nb\\tc"
    assert printable("a\nb\tc\rd", keep_newlines=True) == "a\nb\tc\\rd"
