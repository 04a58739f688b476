"""snappy in the xerial framing snappy-java's SnappyOutputStream writes, plus raw snappy on read.

Framing: magic ``82 'SNAPPY' 00``, int32 BE version 1, int32 BE compatible version 1, then blocks of
int32 BE length + raw snappy. Input without the magic is read as one raw snappy block, as
SnappyInputStream does.
"""

from __future__ import annotations

import struct

import cramjam

from ...errors import CorruptRecordError
from ..types import BytesLike
from ._limits import MAX_DECOMPRESSED_BYTES, too_large

XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
BLOCK_SIZE = 32 * 1024  # snappy-java's default block size
# A snappy element of n input bytes yields at most ~21n output bytes (a 3-byte copy makes 64);
# a claimed length beyond this bound cannot be honest, so it is refused before allocating.
_MAX_EXPANSION = 24


def compress(data: BytesLike) -> bytes:
    """Frame ``data`` in xerial blocks of 32 KiB."""
    view = memoryview(data)
    parts = [XERIAL_HEADER]
    for start in range(0, len(view), BLOCK_SIZE):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + BLOCK_SIZE]))
        parts.append(struct.pack(">i", len(block)))
        parts.append(block)
    return b"".join(parts)


def _claimed(block: BytesLike) -> int:
    """The length a raw snappy block says it decodes to, refused when no honest block could say it."""
    try:
        claimed = cramjam.snappy.decompress_raw_len(block)
    except Exception as e:
        raise CorruptRecordError(f"Invalid snappy data: {e}") from None
    if claimed > _MAX_EXPANSION * len(block) + 64:
        raise CorruptRecordError(f"Invalid snappy data: claims {claimed} bytes from a {len(block)}-byte block")
    return claimed


def _raw(block: BytesLike, max_size: int = MAX_DECOMPRESSED_BYTES) -> cramjam.Buffer:
    claimed = _claimed(block)
    if claimed > max_size:
        raise too_large("snappy", max_size, claimed)
    try:
        return cramjam.snappy.decompress_raw(block)
    except Exception as e:
        raise CorruptRecordError(f"Invalid snappy data: {e}") from None


def decompress(data: BytesLike, max_size: int = MAX_DECOMPRESSED_BYTES) -> BytesLike | cramjam.Buffer:
    """Read xerial framing, or a single raw snappy block when the magic is absent; returns bytes-like.

    Every raw block states its decoded length, so output beyond ``max_size`` is refused before anything is
    decoded (for xerial framing, the lengths of all blocks are added up first when they could exceed it).
    """
    data = bytes(data)
    if not data.startswith(XERIAL_MAGIC):
        return _raw(data, max_size)
    if len(data) - len(XERIAL_HEADER) <= BLOCK_SIZE and len(data) >= len(XERIAL_HEADER) + 4:
        (length,) = struct.unpack_from(">i", data, len(XERIAL_HEADER))
        if length == len(data) - len(XERIAL_HEADER) - 4:  # the common case: a single block
            return _raw(data[len(XERIAL_HEADER) + 4 :], max_size)
    if len(data) < len(XERIAL_HEADER):
        raise CorruptRecordError("snappy stream ended prematurely inside the xerial header")
    view = memoryview(data)  # blocks are views: no copies
    blocks = []
    pos = len(XERIAL_HEADER)
    while pos < len(data):
        if pos + 4 > len(data):
            raise CorruptRecordError("snappy stream ended prematurely inside a block length")
        (length,) = struct.unpack_from(">i", data, pos)
        pos += 4
        if length < 0 or pos + length > len(data):
            raise CorruptRecordError(f"Invalid snappy block length {length}")
        blocks.append(view[pos : pos + length])
        pos += length
    # Each block claims at most 24n + 64 bytes and takes 4 + n: below this size no total can pass the limit.
    if _MAX_EXPANSION * len(data) + 64 * len(blocks) > max_size:
        total = sum(_claimed(block) for block in blocks)
        if total > max_size:
            raise too_large("snappy", max_size, total)
    return b"".join([_raw(block) for block in blocks])
