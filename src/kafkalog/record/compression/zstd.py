"""zstd frames as zstd-jni's streaming output writes them."""

from __future__ import annotations

import struct

import cramjam
import numpy as np

from ...errors import CorruptRecordError
from ..types import BytesLike
from ._limits import MAX_DECOMPRESSED_BYTES, too_large

DEFAULT_LEVEL = 3
MIN_LEVEL = -131072
MAX_LEVEL = 22

_MAGIC = 0xFD2FB528
_BLOCK_MAX = 128 * 1024  # a block never decodes to more (Block_Maximum_Size)
# Every block takes at least 4 bytes (a 3-byte header and one byte) and yields at most 128 KiB.
_MAX_RATIO = _BLOCK_MAX // 4


def compress(data: BytesLike, level: int = DEFAULT_LEVEL) -> cramjam.Buffer:
    """One zstd frame at Kafka's level (cramjam's own default would be 11); a bytes-like object, uncopied."""
    return cramjam.zstd.compress(data, level=level)


def decompress(data: BytesLike, max_size: int = MAX_DECOMPRESSED_BYTES) -> bytes | cramjam.Buffer:
    """Decode one or more zstd frames (with or without a content size) to at most ``max_size`` bytes.

    Small input (under ``max_size`` / 32768) cannot exceed the limit and is decoded in one native call. Larger
    input is bounded first from its frame and block headers: the declared content sizes, and the sizes of
    raw and RLE blocks, are exact, so a bomb made of them is refused before anything is decoded; input whose
    bound stays under the limit is decoded natively; the rest is decoded into a buffer of ``max_size + 1``
    bytes, so a bomb costs at most ``max_size`` bytes of memory. Beyond the limit: CorruptRecordError.
    """
    if len(data) * _MAX_RATIO > max_size:
        bounds = _bounds(data)  # None: headers that do not parse; the bounded decoder below says what is wrong
        if bounds is not None:
            exact, upper = bounds
            if exact > max_size:
                raise too_large("zstd", max_size, exact)
            if upper <= max_size:
                return _native(data)
        out = np.empty(max_size + 1, dtype=np.uint8)  # uninitialised: only the pages written are used
        try:
            n = cramjam.zstd.decompress_into(data, out)  # type: ignore[arg-type]  # numpy arrays are buffers
        except Exception as e:
            if "failed to write whole buffer" in str(e):
                raise too_large("zstd", max_size) from None
            raise CorruptRecordError(f"Invalid zstd data: {e}") from None
        if n > max_size:
            raise too_large("zstd", max_size, n)
        return out[:n].tobytes()
    return _native(data)


def _native(data: BytesLike) -> cramjam.Buffer:
    try:
        return cramjam.zstd.decompress(data)
    except Exception as e:
        raise CorruptRecordError(f"Invalid zstd data: {e}") from None


def _bounds(data: BytesLike) -> tuple[int, int] | None:
    """(bytes the frames certainly decode to, most they can decode to), from the headers; None if malformed.

    A declared content size is exact (the decoder checks it); a frame without one adds its raw and RLE block
    sizes (exact) and 128 KiB per compressed block (an upper bound).
    """
    view = memoryview(data).cast("B")
    end, pos = len(view), 0
    exact = upper = 0
    while pos < end:
        if end - pos < 5:
            return None
        (magic,) = struct.unpack_from("<I", view, pos)
        if magic & 0xFFFFFFF0 == 0x184D2A50:  # a skippable frame
            if end - pos < 8:
                return None
            pos += 8 + struct.unpack_from("<I", view, pos + 4)[0]
            continue
        if magic != _MAGIC:
            return None
        fhd = view[pos + 4]
        pos += 5
        single_segment = fhd & 0x20
        pos += 0 if single_segment else 1  # the window descriptor
        pos += (0, 1, 2, 4)[fhd & 3]  # the dictionary id
        fcs_size = (1 if single_segment else 0, 2, 4, 8)[fhd >> 6]
        if pos + fcs_size > end:
            return None
        declared = None
        if fcs_size:
            declared = int.from_bytes(view[pos : pos + fcs_size], "little") + (256 if fcs_size == 2 else 0)
            pos += fcs_size
        frame_exact = frame_upper = 0
        while True:
            if pos + 3 > end:
                return None
            header = view[pos] | view[pos + 1] << 8 | view[pos + 2] << 16
            pos += 3
            kind, size = (header >> 1) & 3, header >> 3
            if kind == 3:
                return None
            if kind == 1:  # RLE: one byte, repeated size times
                frame_exact += size
                frame_upper += size
                pos += 1
            else:
                if kind == 0:
                    frame_exact += size
                    frame_upper += size
                else:
                    frame_upper += _BLOCK_MAX
                pos += size
            if header & 1:
                break
        if fhd & 0x04:
            pos += 4  # the content checksum
        if pos > end:
            return None
        if declared is not None:
            exact += declared
            upper += declared
        else:
            exact += frame_exact
            upper += frame_upper
    return exact, upper
