"""The cap on a batch's decompressed size, shared by the codecs (a decompression bomb must not exhaust memory).

``MAX_DECOMPRESSED_BYTES`` (2 GiB - 1) is the default: Kafka itself never rejects a batch below it and
never holds one above it. Its per-record ceiling is Records.SOFT_MAX_ARRAY_LENGTH (Integer.MAX_VALUE - 8,
the default of trunk's ``max.decompressed.message.bytes``), its producer counts a batch's uncompressed bytes
in an int (MemoryRecordsBuilder), and a Java byte array cannot hold more. Callers that want a tighter
bound pass ``max_size``.
"""

from __future__ import annotations

from ...errors import CorruptRecordError
from ...layout import INT32_MAX

MAX_DECOMPRESSED_BYTES = INT32_MAX


def too_large(codec: str, max_size: int, size: int | None = None) -> CorruptRecordError:
    """The error for output beyond ``max_size``: it names the codec and the limit (and the size when known)."""
    what = f"{size} bytes, more than" if size is not None else "more than"
    return CorruptRecordError(
        f"{codec}: the records would decompress to {what} the limit of {max_size} bytes "
        f"(max_size; a decompression bomb or a corrupt length)"
    )
