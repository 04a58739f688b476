"""lz4 frames as Kafka's Lz4BlockOutputStream writes and Lz4BlockInputStream reads them.

Writing: magic 0x184D2204 (LE), FLG 0x60 (version 1, independent blocks, no checksums, no size),
BD 0x40 (64 KiB blocks), HC = second byte of xxHash32(FLG, BD); blocks of int32 LE length, high bit
set for a stored (incompressible) block; an int32 0 end mark. Level 9 uses lz4's fast compressor and
any other level the high-compression one, as Kafka does.

Reading accepts any flags Kafka's reader accepts: content size, block checksums (verified), a content
checksum (its 4 bytes must be there; see the note on ``decompress``), block sizes of 64 KiB to 4 MiB.
"""

from __future__ import annotations

import struct

import cramjam
import numpy as np

from ...errors import CorruptRecordError
from ..checksums import xxhash32
from ..types import BytesLike
from ._limits import MAX_DECOMPRESSED_BYTES, too_large

MAGIC = 0x184D2204
DEFAULT_LEVEL = 9
MIN_LEVEL = 1
MAX_LEVEL = 17
FLG_DEFAULT = 0x60
BD_64KB = 0x40
BLOCK_SIZE = 64 * 1024
_INCOMPRESSIBLE = 0x80000000
_MAGIC_BYTES = struct.pack("<I", MAGIC)


def _descriptor_checksum(descriptor: bytes) -> int:
    return (xxhash32(descriptor) >> 8) & 0xFF


_HEADER = _MAGIC_BYTES + bytes([FLG_DEFAULT, BD_64KB, _descriptor_checksum(bytes([FLG_DEFAULT, BD_64KB]))])
_END_MARK = b"\x00\x00\x00\x00"


def _compress_block(block: memoryview, level: int) -> bytes:
    if level == DEFAULT_LEVEL:
        return bytes(cramjam.lz4.compress_block(block, store_size=False))
    return bytes(cramjam.lz4.compress_block(block, mode="high_compression", compression=level, store_size=False))


def compress(data: BytesLike, level: int = DEFAULT_LEVEL) -> bytes:
    """Frame ``data`` in independent 64 KiB blocks, storing a block raw when lz4 does not shrink it."""
    view = memoryview(data).cast("B")
    parts = [_HEADER]
    for start in range(0, len(view), BLOCK_SIZE):
        block = view[start : start + BLOCK_SIZE]
        packed = _compress_block(block, level)
        if len(packed) >= len(block):
            parts.append(struct.pack("<I", len(block) | _INCOMPRESSIBLE))
            parts.append(bytes(block))
        else:
            parts.append(struct.pack("<I", len(packed)))
            parts.append(packed)
    parts.append(_END_MARK)
    return b"".join(parts)


def _read_header(data: bytes, ignore_descriptor_checksum: bool) -> tuple[int, bool, bool, int]:
    """Validate the frame header; return (position of first block, block checksum?, content checksum?, max)."""
    if len(data) < 6:
        raise CorruptRecordError("lz4: Stream ended prematurely")
    if data[:4] != _MAGIC_BYTES:
        raise CorruptRecordError("lz4: Stream unsupported (invalid magic bytes)")
    flg, bd = data[4], data[5]
    if flg & 0x03:
        raise CorruptRecordError("lz4: Reserved bits must be 0")
    if not flg & 0x20:
        raise CorruptRecordError("lz4: Dependent block stream is unsupported")
    if flg >> 6 != 1:
        raise CorruptRecordError(f"lz4: Version {flg >> 6} is unsupported")
    size_code = (bd >> 4) & 7
    if bd & 0x0F or bd & 0x80:
        raise CorruptRecordError("lz4: Reserved BD bits must be 0")
    if not 4 <= size_code <= 7:
        raise CorruptRecordError("lz4: Block size value must be between 4 and 7")
    pos = 6
    if flg & 0x08:  # content size present: skipped, as Kafka does
        if len(data) < pos + 8:
            raise CorruptRecordError("lz4: Stream ended prematurely")
        pos += 8
    if len(data) < pos + 1:
        raise CorruptRecordError("lz4: Stream ended prematurely")
    if not ignore_descriptor_checksum and data[pos] != _descriptor_checksum(data[4:pos]):
        raise CorruptRecordError("lz4: Stream frame descriptor corrupted")
    return pos + 1, bool(flg & 0x10), bool(flg & 0x04), 1 << (2 * size_code + 8)


# An lz4 sequence of n bytes decodes to at most 255n bytes (each extra match-length byte adds 255).
_MAX_RATIO = 255
_UNBOUNDED = 1 << 62


def decompress(
    data: BytesLike,
    *,
    ignore_descriptor_checksum: bool = False,
    max_size: int = MAX_DECOMPRESSED_BYTES,
    into: np.ndarray | None = None,
) -> BytesLike | cramjam.Buffer:
    """Decode an lz4 frame the way Kafka's reader does, to at most ``max_size`` bytes; returns bytes-like.

    The frame Kafka and librdkafka write (FLG 0x60, BD 0x40) is decoded natively in one call into a buffer
    of the size its block headers bound, when that bound is within ``max_size``: ``decompress_into`` a buffer
    of known size decodes a producer's 1 MiB batch 5-8 times faster than ``cramjam.lz4.decompress``, which
    grows its output as it goes (measured on librdkafka's frames: ~500 MB/s against ~4 GB/s). ``into``, when
    given and large enough, is that buffer (the result is then a view of it, valid until its next use):
    a fresh one costs a page fault per 4 KiB once the allocator has handed the last one back to the system
    (~320 per MiB decoded, measured in the broker). Any other frame, any frame the native decoder refuses and
    any that might exceed the limit goes through ``decompress_frame``, which applies Kafka's rules, gives its
    error messages and stops at the limit.
    """
    if bytes(data[:7]) == _HEADER:
        bound = _upper_bound(data)
        if bound <= max_size:
            out = into[:bound] if into is not None and len(into) >= bound else np.empty(bound, np.uint8)
            try:
                n = cramjam.lz4.decompress_into(data, out)  # type: ignore[arg-type]  # a numpy buffer
            except Exception:
                pass  # decompress_frame below says precisely what is wrong
            else:
                return memoryview(out)[:n]  # type: ignore[arg-type]
    return decompress_frame(data, ignore_descriptor_checksum=ignore_descriptor_checksum, max_size=max_size)


def _upper_bound(data: BytesLike) -> int:
    """The most a frame with Kafka's header could decode to, from its block headers (no decoding)."""
    view = memoryview(data).cast("B") if not isinstance(data, bytes) else data
    size_of = len(view)
    pos, total = len(_HEADER), 0
    while pos + 4 <= size_of:
        (word,) = struct.unpack_from("<I", view, pos)
        size = word & ~_INCOMPRESSIBLE
        if size == 0:  # the end mark: bytes after it (another frame?) are not bounded here
            return total if pos + 4 == size_of else _UNBOUNDED
        total += size if word & _INCOMPRESSIBLE else min(BLOCK_SIZE, size * _MAX_RATIO)
        pos += 4 + size
    return total


def decompress_frame(
    data: BytesLike, *, ignore_descriptor_checksum: bool = False, max_size: int = MAX_DECOMPRESSED_BYTES
) -> bytearray:
    """Kafka's Lz4BlockInputStream, block by block: checks the header, block sizes and block checksums.

    ``ignore_descriptor_checksum`` is Kafka's switch for magic 0 wrappers, whose writers hashed the
    magic too. A content checksum's 4 bytes must be present but are not verified: Kafka's reader
    of the 4.0 era skips them as well, and newer ones disagree with the lz4 frame specification.
    Output beyond ``max_size`` raises CorruptRecordError before the block that would pass it is kept.
    """
    data = bytes(data)
    pos, block_checksum, content_checksum, max_block = _read_header(data, ignore_descriptor_checksum)
    out = bytearray()
    scratch = bytearray(max_block)
    while True:
        if pos + 4 > len(data):
            raise CorruptRecordError("lz4: Stream ended prematurely")
        (word,) = struct.unpack_from("<I", data, pos)
        pos += 4
        size = word & ~_INCOMPRESSIBLE
        if size == 0:
            if content_checksum and pos + 4 > len(data):
                raise CorruptRecordError("lz4: Stream ended prematurely")
            return out
        if size > max_block:
            raise CorruptRecordError(f"lz4: Block size {size} exceeded max: {max_block}")
        if pos + size > len(data):
            raise CorruptRecordError("lz4: Stream ended prematurely")
        block = data[pos : pos + size]
        if word & _INCOMPRESSIBLE:
            if len(out) + size > max_size:
                raise too_large("lz4", max_size)
            out += block
        else:
            try:
                n = cramjam.lz4.decompress_block_into(block, scratch, output_len=max_block)
            except Exception as e:
                raise CorruptRecordError(f"lz4: invalid block: {e}") from None
            if len(out) + n > max_size:
                raise too_large("lz4", max_size)
            out += memoryview(scratch)[:n]
        pos += size
        if block_checksum:
            if pos + 4 > len(data):
                raise CorruptRecordError("lz4: Stream ended prematurely")
            if struct.unpack_from("<I", data, pos)[0] != xxhash32(block):
                raise CorruptRecordError("lz4: Block checksum mismatch")
            pos += 4
