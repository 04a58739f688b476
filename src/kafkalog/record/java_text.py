"""Bytes to text as Java's ``new String(bytes, StandardCharsets.UTF_8)`` does, which is what Kafka's tools print.

Valid UTF-8 decodes the same in Java and Python; the two differ only in how many bytes one U+FFFD replaces
in invalid input. Python follows Unicode's "maximal subpart" practice (``ed a0 80``, an encoded surrogate, is
three replacements); Java's decoder (``java.lang.String.decodeUTF8_UTF16`` and ``sun.nio.cs.UTF_8``, JDK 17 to
25) has its own resynchronisation rules: a well-formed-looking 3-byte surrogate is one replacement, a 3-byte
sequence with a bad third byte is one replacement for its first two bytes, a truncated sequence at the end of
the input is one replacement, and so on. Kafka's ``DumpLogSegments`` and console consumer print with Java's
rules, so kafkalog does too.

:func:`java_utf8` decodes with Python's (fast, C) decoder and a codec error handler that, at each error, replaces
exactly the bytes Java's decoder would replace with one U+FFFD and resumes where Java resumes. Both decoders
accept exactly the same well-formed sequences, so they are always at the same position when an error starts.
"""

from __future__ import annotations

import codecs

__all__ = ["JAVA_REPLACE", "java_malformed_end", "java_utf8"]

JAVA_REPLACE = "kafkalog-java-replace"
_REPLACEMENT = "\ufffd"


def _continuation(b: int) -> bool:
    return b & 0xC0 == 0x80


def java_malformed_end(data: bytes, sp: int) -> int:
    """Where Java's decoder resumes after the one U+FFFD it writes for the malformed input starting at ``sp``.

    A transcription of ``String.decodeUTF8_UTF16``'s replacing branches (and ``malformed3``/``malformed4``): the
    byte at ``sp`` is known to start a malformed or truncated sequence."""
    sl = len(data)
    b1 = data[sp]
    sp += 1
    if 0xC2 <= b1 <= 0xDF:  # 2 bytes: the second is no continuation (replace 1), or is missing (the end)
        return sp if sp < sl else sl
    if 0xE0 <= b1 <= 0xEF:  # 3 bytes
        if sp + 1 < sl:
            b2, b3 = data[sp], data[sp + 1]
            if (b1 == 0xE0 and b2 & 0xE0 == 0x80) or not _continuation(b2) or not _continuation(b3):
                # isMalformed3, then malformed3: 1 byte when the second is bad, else 2
                return sp if (b1 == 0xE0 and b2 & 0xE0 == 0x80) or not _continuation(b2) else sp + 1
            return sp + 2  # well formed but a surrogate (ED A0..BF xx): one replacement for all three
        if sp < sl and ((b1 == 0xE0 and data[sp] & 0xE0 == 0x80) or not _continuation(data[sp])):
            return sp  # isMalformed3_2 on a truncated sequence: only the first byte
        return sl  # a truncated sequence at the end: one replacement for the rest
    if 0xF0 <= b1 <= 0xF7:  # 4 bytes
        if sp + 2 < sl:  # malformed4: 1, 2 or 3 bytes
            b2 = data[sp]
            if (
                b1 > 0xF4
                or (b1 == 0xF0 and not 0x90 <= b2 <= 0xBF)
                or (b1 == 0xF4 and b2 & 0xF0 != 0x80)
                or not _continuation(b2)
            ):
                return sp
            if not _continuation(data[sp + 1]):
                return sp + 1
            return sp + 2
        if b1 > 0xF4 or (
            sp < sl
            and (
                (b1 == 0xF0 and not 0x90 <= data[sp] <= 0xBF)
                or (b1 == 0xF4 and data[sp] & 0xF0 != 0x80)
                or not _continuation(data[sp])
            )
        ):
            return sp  # isMalformed4_2 on a truncated sequence
        sp += 1
        if sp < sl and not _continuation(data[sp]):
            return sp  # isMalformed4_3: the first two bytes
        return sl  # a truncated sequence at the end: one replacement for the rest
    return sp  # a continuation byte or C0, C1, F8..FF: one byte


def _java_replace(error: UnicodeError) -> tuple[str, int]:
    if not isinstance(error, UnicodeDecodeError):
        raise error
    return _REPLACEMENT, java_malformed_end(error.object, error.start)


codecs.register_error(JAVA_REPLACE, _java_replace)


def java_utf8(data: bytes) -> str:
    """``data`` decoded as Java's ``new String(data, UTF_8)``: one U+FFFD per malformed sequence, as Java counts
    them."""
    return data.decode("utf-8", JAVA_REPLACE)
