"""The ``java.util.Properties`` text format of ``server.properties`` and friends: logical lines with ``\\``
continuations, ``=``, ``:`` or white space between key and value, ``#`` and ``!`` comments, and Java's escapes
(``\\uXXXX`` included), read as ISO-8859-1 by default as Java reads it."""

from __future__ import annotations

import re
from os import PathLike

from ..errors import InvalidConfigurationError

_PROP_WS = " \t\f"
_ESCAPES = {"t": "\t", "r": "\r", "n": "\n", "f": "\f"}


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """Split ``text`` into Properties logical lines, as (first line number, raw line with escapes) pairs.

    Mirrors java.util.Properties.LineReader: leading whitespace is dropped, blank and comment lines are
    skipped, and a line ending in an odd number of backslashes continues on the next one.
    """
    lines: list[tuple[int, str]] = []
    naturals = re.split(r"\r\n|\r|\n", text)
    if naturals and naturals[-1] == "":
        naturals.pop()
    i = 0
    while i < len(naturals):
        start = i + 1
        line = naturals[i].lstrip(_PROP_WS)
        i += 1
        if not line or line[0] in "#!":
            continue
        parts = []
        while True:
            trailing = len(line) - len(line.rstrip("\\"))
            if trailing % 2 == 0:
                parts.append(line)
                break
            parts.append(line[:-1])
            if i >= len(naturals):
                break
            line = naturals[i].lstrip(_PROP_WS)
            i += 1
        lines.append((start, "".join(parts)))
    return lines


def _split_key_value(line: str) -> tuple[str, str]:
    """Split one logical line at the first unescaped '=', ':' or whitespace (escapes still in place)."""
    backslash = False
    key_end = value_start = len(line)
    has_sep = False
    for pos, ch in enumerate(line):
        if not backslash and ch in "=:":
            key_end, value_start, has_sep = pos, pos + 1, True
            break
        if not backslash and ch in _PROP_WS:
            key_end, value_start = pos, pos + 1
            break
        backslash = (not backslash) if ch == "\\" else False
    while value_start < len(line):
        ch = line[value_start]
        if ch not in _PROP_WS:
            if not has_sep and ch in "=:":
                has_sep = True
            else:
                break
        value_start += 1
    return line[:key_end], line[value_start:]


def _unescape(raw: str, lineno: int) -> str:
    """Resolve Properties escapes: \\uXXXX, \\t \\r \\n \\f, and \\x for any other x."""
    out = []
    pos = 0
    while pos < len(raw):
        ch = raw[pos]
        pos += 1
        if ch != "\\" or pos >= len(raw):
            if ch != "\\":
                out.append(ch)
            continue
        ch = raw[pos]
        pos += 1
        if ch == "u":
            digits = raw[pos : pos + 4]
            if len(digits) < 4 or not all(c in "0123456789abcdefABCDEF" for c in digits):
                raise InvalidConfigurationError(f"Malformed \\uxxxx encoding on line {lineno}: \\u{digits}")
            out.append(chr(int(digits, 16)))
            pos += 4
        else:
            out.append(_ESCAPES.get(ch, ch))
    return "".join(out)


def parse_properties(text: str) -> dict[str, str]:
    """Parse ``java.util.Properties`` text into a dict; a later duplicate key wins, as in Java."""
    props: dict[str, str] = {}
    for lineno, line in _logical_lines(text):
        key, value = _split_key_value(line)
        props[_unescape(key, lineno)] = _unescape(value, lineno)
    return props


def load_properties(path: str | PathLike[str], encoding: str = "iso-8859-1") -> dict[str, str]:
    """Read a properties file. Kafka loads server.properties from a byte stream, i.e. as ISO-8859-1."""
    with open(path, encoding=encoding, newline="") as f:
        text = f.read()
    try:
        return parse_properties(text)
    except InvalidConfigurationError as e:
        raise e.located(path=str(path)) from None
