"""gzip as java.util.zip.GZIPOutputStream writes it, through the stdlib zlib."""

from __future__ import annotations

import struct
import zlib

from ...errors import CorruptRecordError
from ..types import BytesLike
from ._limits import MAX_DECOMPRESSED_BYTES, too_large

DEFAULT_LEVEL = -1  # Kafka's default: zlib's own default (6)
MIN_LEVEL = 1
MAX_LEVEL = 9
_GZIP_WBITS = 16 + zlib.MAX_WBITS
_ISIZE = struct.Struct("<I").unpack_from  # a member's trailer: its size mod 2**32


def compress(data: BytesLike, level: int = DEFAULT_LEVEL) -> bytes:
    """One GZIP member around ``data``."""
    c = zlib.compressobj(level, zlib.DEFLATED, _GZIP_WBITS)
    return c.compress(data) + c.flush()


def decompress(data: BytesLike, max_size: int = MAX_DECOMPRESSED_BYTES) -> bytes:
    """Inflate one or more concatenated GZIP members, as GZIPInputStream does, to at most ``max_size`` bytes.

    A last member whose trailer (ISIZE, the size mod 2**32) already says more than ``max_size`` is refused
    before inflating anything; otherwise inflation stops one byte past ``max_size`` (zlib's max_length), so
    a bomb costs at most ``max_size`` bytes of memory. Either raises CorruptRecordError naming the limit.
    """
    data = bytes(data)
    n = len(data)
    if n >= 18 and _ISIZE(data, n - 4)[0] > max_size:
        # A member that decodes to ISIZE mod 2**32 bytes is at least ISIZE long; one that does not is corrupt.
        raise too_large("gzip", max_size, _ISIZE(data, n - 4)[0])
    parts = []
    left = max_size
    try:
        d = zlib.decompressobj(_GZIP_WBITS)
        out = d.decompress(data, left + 1)
        if d.eof and not d.unused_data and len(out) <= left:  # the usual case: one member, within the limit
            return out
        while True:
            left -= len(out)
            if left < 0:
                raise too_large("gzip", max_size)
            parts.append(out)
            if not d.eof:
                raise CorruptRecordError("gzip stream ended prematurely")
            data = d.unused_data
            if not data:
                break
            d = zlib.decompressobj(_GZIP_WBITS)
            out = d.decompress(data, left + 1)
    except zlib.error as e:
        raise CorruptRecordError(f"Invalid gzip data: {e}") from None
    return parts[0] if len(parts) == 1 else b"".join(parts)
