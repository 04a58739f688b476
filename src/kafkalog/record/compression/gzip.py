"""gzip as java.util.zip.GZIPOutputStream writes it, through the stdlib zlib."""

from __future__ import annotations

import zlib

from ...errors import CorruptRecordError

DEFAULT_LEVEL = -1  # Kafka's default: zlib's own default (6)
MIN_LEVEL = 1
MAX_LEVEL = 9
_GZIP_WBITS = 16 + zlib.MAX_WBITS


def compress(data, level: int = DEFAULT_LEVEL) -> bytes:
    """One GZIP member around ``data``."""
    c = zlib.compressobj(level, zlib.DEFLATED, _GZIP_WBITS)
    return c.compress(data) + c.flush()


def decompress(data) -> bytes:
    """Inflate one or more concatenated GZIP members, as GZIPInputStream does."""
    data = bytes(data)
    parts = []
    try:
        while True:
            d = zlib.decompressobj(_GZIP_WBITS)
            parts.append(d.decompress(data))
            if not d.eof:
                raise CorruptRecordError("gzip stream ended prematurely")
            data = d.unused_data
            if not data:
                break
    except zlib.error as e:
        raise CorruptRecordError(f"Invalid gzip data: {e}") from None
    return b"".join(parts)
