"""Magic 0/1 message sets written exactly as Kafka's MemoryRecordsBuilder writes them (appendLegacyRecord, close).

The cleaner needs it: Kafka rebuilds a legacy set that keeps only some of its messages in its own magic and codec.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from ..errors import UnsupportedCompressionTypeError
from ..layout import INT32_MAX
from . import compression
from .checksums import crc32, xxhash32
from .types import NO_TIMESTAMP, BytesLike, TimestampType
from .view import TIMESTAMP_TYPE_MASK

_PREFIX = struct.Struct(">qiI")  # offset, size, crc
_NULL = struct.pack(">i", -1)

LegacyRecordTuple = tuple[int, int, bytes | None, bytes | None]  # (offset, timestamp, key, value)


def build_legacy(
    magic: int,
    records: Sequence[LegacyRecordTuple],
    *,
    compression_type: int | str,
    timestamp_type: TimestampType | int,
    log_append_time: int,
) -> bytes:
    """Kafka's MemoryRecordsBuilder for magic 0 or 1, fed ``records`` with ``appendWithOffset`` and built.

    Uncompressed: one message per record at its absolute offset. Compressed: one wrapper message whose value
    is the codec's stream (default level) of the inner messages, written at toInnerOffset (relative to the
    first record for v1, absolute for v0); the wrapper has the last offset, a null key, attributes codec |
    timestamp type (v1) and, for v1, the max timestamp (CreateTime) or ``log_append_time`` (LogAppendTime),
    which every message then carries. A v0 lz4 stream has Kafka's "broken" descriptor checksum (KAFKA-3160).
    No records give b"" (MemoryRecords.EMPTY). Raises ValueError where Kafka's builder throws.
    """
    if magic not in (0, 1):
        raise ValueError(f"Invalid magic value {magic}")
    codec = compression.codec_id(compression_type)
    if codec >= compression.ZSTD:
        raise UnsupportedCompressionTypeError(f"{compression.codec_name(codec)} is not allowed with magic {magic}")
    ts_type = TimestampType(timestamp_type)
    if magic > 0 and ts_type == TimestampType.NO_TIMESTAMP_TYPE:
        raise ValueError(f"TimestampType must be set for magic {magic}")
    if not records:
        return b""
    append_time = ts_type == TimestampType.LOG_APPEND_TIME
    type_bit = TIMESTAMP_TYPE_MASK if magic > 0 and append_time else 0
    base_offset = records[0][0]
    relative = magic > 0 and codec != compression.NONE
    parts = []
    last_offset: int | None = None
    max_timestamp = NO_TIMESTAMP
    for offset, timestamp, key, value in records:
        if last_offset is not None and offset <= last_offset:
            raise ValueError(
                f"Illegal offset {offset} following previous offset {last_offset} "
                "(Offsets must increase monotonically)."
            )
        if timestamp < 0 and timestamp != NO_TIMESTAMP:
            raise ValueError(f"Invalid negative timestamp {timestamp}")
        if offset - base_offset > INT32_MAX:
            raise ValueError(f"Maximum offset delta exceeded, base offset: {base_offset}, last offset: {offset}")
        if append_time:
            timestamp = log_append_time
        parts.append(_message(magic, offset - base_offset if relative else offset, type_bit, timestamp, key, value))
        last_offset = offset
        if magic > 0 and timestamp > max_timestamp:
            max_timestamp = timestamp
    inner = b"".join(parts)
    if codec == compression.NONE:
        return inner
    packed = bytes(compression.compress(codec, inner))
    if codec == compression.LZ4 and magic == 0:
        # Lz4BlockOutputStream(useBrokenFlagDescriptorChecksum = magic == 0): the header checksum also hashes
        # the 4 magic bytes of the frame.
        packed = packed[:6] + bytes([(xxhash32(packed[:6]) >> 8) & 0xFF]) + packed[7:]
    wrapper_timestamp = log_append_time if append_time else max_timestamp
    assert last_offset is not None  # records is not empty (checked above), so the loop set it
    return _message(magic, last_offset, codec | type_bit, wrapper_timestamp, None, packed)


def _message(
    magic: int, offset: int, attributes: int, timestamp: int, key: BytesLike | None, value: BytesLike | None
) -> bytes:
    """One (offset, size, message) entry: CRC-32 over magic..value (LegacyRecord.write)."""
    if timestamp < 0 and timestamp != NO_TIMESTAMP:
        raise ValueError(f"Invalid message timestamp {timestamp}")
    fields = [struct.pack(">bbq", magic, attributes, timestamp) if magic else struct.pack(">bb", magic, attributes)]
    for data in (key, value):
        if data is None:
            fields.append(_NULL)
        else:
            fields.append(struct.pack(">i", len(data)))
            fields.append(bytes(data))
    body = b"".join(fields)
    return _PREFIX.pack(offset, 4 + len(body), crc32(body)) + body
