"""zstd frames as zstd-jni's streaming output writes them."""

from __future__ import annotations

import cramjam

from ...errors import CorruptRecordError

DEFAULT_LEVEL = 3
MIN_LEVEL = -131072
MAX_LEVEL = 22


def compress(data, level: int = DEFAULT_LEVEL):
    """One zstd frame at Kafka's level (cramjam's own default would be 11); a bytes-like object, uncopied."""
    return cramjam.zstd.compress(data, level=level)


def decompress(data):
    """Decode one or more zstd frames (with or without a content size); returns a bytes-like object."""
    try:
        return cramjam.zstd.decompress(data)
    except Exception as e:
        raise CorruptRecordError(f"Invalid zstd data: {e}") from None
