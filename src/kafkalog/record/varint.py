"""Kafka's variable-length integers (ByteUtils): zigzag varint/varlong and unsigned LEB128.

This is the clear reference path, used by the record decoder and builder for single values.
The whole-batch paths in ``columnar`` and ``builder`` implement the same rules vectorised.
"""

from __future__ import annotations

from ..errors import InvalidRecordError
from ..layout import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN
from .types import BytesLike

_MASK32 = 0xFFFFFFFF
_MASK64 = 0xFFFFFFFFFFFFFFFF


def zigzag32(value: int) -> int:
    """Map a signed int32 to the unsigned value Kafka writes: (v << 1) ^ (v >> 31)."""
    return ((value << 1) ^ (value >> 31)) & _MASK32


def zigzag64(value: int) -> int:
    """Map a signed int64 to the unsigned value Kafka writes: (v << 1) ^ (v >> 63)."""
    return ((value << 1) ^ (value >> 63)) & _MASK64


def unzigzag(value: int) -> int:
    """Inverse of zigzag: (u >>> 1) ^ -(u & 1)."""
    return (value >> 1) ^ -(value & 1)


def encode_unsigned_varint(value: int) -> bytes:
    """Encode an int32 as an unsigned LEB128 varint (negative values take 5 bytes, as in Java)."""
    return _encode_unsigned64(value & _MASK32)


def _encode_unsigned64(value: int) -> bytes:
    """Unsigned LEB128 of a non-negative value: 7 bits a byte, low bits first, the high bit set on all but the last."""
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_varint(value: int) -> bytes:
    """Encode a signed int32 as a zigzag varint (1..5 bytes)."""
    if not INT32_MIN <= value <= INT32_MAX:
        raise ValueError(f"varint value {value} does not fit in an int32")
    return _encode_unsigned64(zigzag32(value))


def encode_varlong(value: int) -> bytes:
    """Encode a signed int64 as a zigzag varlong (1..10 bytes)."""
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError(f"varlong value {value} does not fit in an int64")
    return _encode_unsigned64(zigzag64(value))


def size_of_varint(value: int) -> int:
    """Bytes a zigzag varint of ``value`` takes."""
    return size_of_unsigned_varint(zigzag32(value))


def size_of_unsigned_varint(value: int) -> int:
    """Bytes an unsigned varint of the int32 ``value`` takes (1..5)."""
    value &= _MASK32
    size = 1
    while value > 0x7F:
        value >>= 7
        size += 1
    return size


def size_of_varlong(value: int) -> int:
    """Bytes a zigzag varlong of ``value`` takes (1..10)."""
    value = zigzag64(value)
    size = 1
    while value > 0x7F:
        value >>= 7
        size += 1
    return size


def _read_leb128(buf: BytesLike, pos: int, end: int | None, max_bytes: int, what: str) -> tuple[int, int]:
    """Raw LEB128 value of at most ``max_bytes`` bytes at ``pos``; return (value, next position)."""
    if end is None:
        end = len(buf)
    value = 0
    for shift in range(0, 7 * max_bytes, 7):
        if pos >= end:
            raise InvalidRecordError(f"Found invalid record structure: {what} runs past the end of the buffer")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
    raise InvalidRecordError(
        f"Found invalid record structure: {what} is too long, byte {max_bytes} has its high bit set"
    )


def read_unsigned_varint(buf: BytesLike, pos: int, end: int | None = None) -> tuple[int, int]:
    """Decode an unsigned varint at ``pos``; return (value as signed int32, next position).

    Like Java: a 5th byte with its continuation bit set is an error, bits above 32 are dropped.
    """
    value, pos = _read_leb128(buf, pos, end, 5, "varint")
    value &= _MASK32
    return (value - (1 << 32) if value & 0x80000000 else value), pos


def read_varint(buf: BytesLike, pos: int, end: int | None = None) -> tuple[int, int]:
    """Decode a zigzag varint (int32) at ``pos``; return (value, next position)."""
    raw, pos = read_unsigned_varint(buf, pos, end)
    raw &= _MASK32
    return (raw >> 1) ^ -(raw & 1), pos


def read_varlong(buf: BytesLike, pos: int, end: int | None = None) -> tuple[int, int]:
    """Decode a zigzag varlong (int64) at ``pos``; return (value, next position)."""
    value, pos = _read_leb128(buf, pos, end, 10, "varlong")
    value &= _MASK64
    return (value >> 1) ^ -(value & 1), pos
