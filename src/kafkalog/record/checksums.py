"""The checksums Kafka's formats use: CRC-32C (v2 batches), CRC-32 (legacy messages), xxHash32 (lz4 frames)."""

from __future__ import annotations

import zlib
from typing import TYPE_CHECKING

from crc32c import crc32c as _crc32c

if TYPE_CHECKING:
    from typing_extensions import Buffer

_P1, _P2, _P3, _P4, _P5 = 0x9E3779B1, 0x85EBCA77, 0xC2B2AE3D, 0x27D4EB2F, 0x165667B1
_M = 0xFFFFFFFF


def crc32c(data: Buffer, value: int = 0) -> int:
    """CRC-32C (Castagnoli) as an unsigned int; ``value`` continues a running CRC. Hardware-accelerated."""
    return _crc32c(data, value)


def crc32(data: Buffer) -> int:
    """CRC-32 (IEEE, java.util.zip.CRC32) as an unsigned int, for magic 0 and 1 messages."""
    return zlib.crc32(data) & _M


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M


def xxhash32(data: Buffer, seed: int = 0) -> int:
    """xxHash32 of ``data``. Pure Python: it only covers lz4 frame descriptors and the rare block checksums."""
    data = memoryview(data).cast("B")
    n = len(data)
    pos = 0
    if n >= 16:
        v1 = (seed + _P1 + _P2) & _M
        v2 = (seed + _P2) & _M
        v3 = seed & _M
        v4 = (seed - _P1) & _M
        limit = n - 16
        words = data[: (n // 4) * 4].cast("I")  # little-endian on every platform Kafka runs on
        w = 0
        while pos <= limit:
            v1 = (_rotl((v1 + words[w] * _P2) & _M, 13) * _P1) & _M
            v2 = (_rotl((v2 + words[w + 1] * _P2) & _M, 13) * _P1) & _M
            v3 = (_rotl((v3 + words[w + 2] * _P2) & _M, 13) * _P1) & _M
            v4 = (_rotl((v4 + words[w + 3] * _P2) & _M, 13) * _P1) & _M
            w += 4
            pos += 16
        h = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & _M
    else:
        h = (seed + _P5) & _M
    h = (h + n) & _M
    while pos + 4 <= n:
        k = int.from_bytes(data[pos : pos + 4], "little")
        h = (_rotl((h + k * _P3) & _M, 17) * _P4) & _M
        pos += 4
    while pos < n:
        h = (_rotl((h + data[pos] * _P5) & _M, 11) * _P1) & _M
        pos += 1
    h ^= h >> 15
    h = (h * _P2) & _M
    h ^= h >> 13
    h = (h * _P3) & _M
    h ^= h >> 16
    return h
