"""Read-only views of legacy messages, magic 0 and 1 (LegacyRecord, AbstractLegacyRecordBatch).

Each "batch" is one message: offset, size, CRC-32 (IEEE) over magic..end, magic, attributes,
timestamp (v1 only), key, value. A compressed message is a wrapper whose value holds inner messages.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import TYPE_CHECKING

from ..errors import CorruptRecordError, InvalidRecordError
from . import compression
from .checksums import crc32
from .types import (
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    BytesLike,
    Record,
)
from .types import TimestampType as TsType
from .view import COMPRESSION_MASK, TIMESTAMP_TYPE_MASK, BatchView

if TYPE_CHECKING:
    from typing_extensions import Buffer

LOG_OVERHEAD = 12
RECORD_OVERHEAD_V0 = 14
RECORD_OVERHEAD_V1 = 22
_CRC_OFFSET = LOG_OVERHEAD
_MAGIC_OFFSET = LOG_OVERHEAD + 4
_ATTRIBUTES_OFFSET = LOG_OVERHEAD + 5


class LegacyBatch(BatchView):
    """View of one magic 0 or 1 message (plain, or a compressed wrapper) at ``position``."""

    __slots__ = ("_inner", "crc", "magic", "offset", "size")

    partition_leader_epoch = NO_PARTITION_LEADER_EPOCH
    producer_id = NO_PRODUCER_ID
    producer_epoch = NO_PRODUCER_EPOCH
    base_sequence = NO_SEQUENCE
    last_sequence = NO_SEQUENCE
    is_transactional = False
    is_control = False
    has_producer_id = False
    delete_horizon_ms = None

    offset: int
    size: int
    magic: int

    def __init__(self, buffer: Buffer, position: int = 0) -> None:
        super().__init__(buffer, position)
        view = self._buffer
        self.offset, self.size = struct.unpack_from(">qi", view, position)
        self.magic = view[position + _MAGIC_OFFSET]
        self.crc = struct.unpack_from(">I", view, position + _CRC_OFFSET)[0]
        self._inner: list[Record] | None = None

    # ----- message fields ------------------------------------------------------------------
    @property
    def size_in_bytes(self) -> int:
        return LOG_OVERHEAD + self.size

    @property
    def _overhead(self) -> int:
        return RECORD_OVERHEAD_V0 if self.magic == 0 else RECORD_OVERHEAD_V1

    @property
    def attributes(self) -> int:
        return self._buffer[self.position + _ATTRIBUTES_OFFSET]

    @property
    def timestamp_type_id(self) -> TsType:
        if self.magic == 0:
            return TsType.NO_TIMESTAMP_TYPE
        return TsType.LOG_APPEND_TIME if self.attributes & TIMESTAMP_TYPE_MASK else TsType.CREATE_TIME

    @property
    def timestamp(self) -> int:
        """The message's own timestamp (-1 for magic 0)."""
        if self.magic == 0:
            return NO_TIMESTAMP
        timestamp: int = struct.unpack_from(">q", self._buffer, self.position + _ATTRIBUTES_OFFSET + 1)[0]
        return timestamp

    max_timestamp = timestamp

    @property
    def last_offset(self) -> int:
        return self.offset

    @property
    def next_offset(self) -> int:
        return self.offset + 1

    @property
    def base_offset(self) -> int:
        """The first offset: the wrapper's first inner offset, or the message's own."""
        if self.compression_type == compression.NONE:
            return self.offset
        return self._records()[0].offset

    @property
    def record_count(self) -> int:
        return 1 if self.compression_type == compression.NONE else len(self._records())

    # ----- validity ------------------------------------------------------------------------
    min_size_in_bytes = LOG_OVERHEAD + RECORD_OVERHEAD_V0

    def compute_checksum(self) -> int:
        """CRC-32 (IEEE) over magic..end."""
        return crc32(self._buffer[self.position + _MAGIC_OFFSET : self.position + self.size_in_bytes])

    def _offset_for_errors(self) -> int:
        return self.offset

    def _too_small(self) -> str:
        return f"Record is corrupt (crc could not be retrieved as the record is too small, size = {self.size})"

    # ----- records -------------------------------------------------------------------------
    def _key_value(self) -> tuple[bytes | None, bytes | None]:
        return _parse_key_value(self._buffer, self.position, self.size_in_bytes, self.magic)

    def _records(self) -> list[Record]:
        if self._inner is None:
            try:
                self._inner = self._decode()
            except (CorruptRecordError, InvalidRecordError) as e:
                raise e.located(position=self.position, offset=self.offset) from None
        return self._inner

    def _decode(self) -> list[Record]:
        key, value = self._key_value()
        codec = self.compression_type
        if codec == compression.NONE:
            return [Record(self.offset, self.timestamp, key, value)]
        if codec == compression.ZSTD or codec > compression.ZSTD:
            raise InvalidRecordError(f"Invalid wrapper message with compression type {codec} for magic {self.magic}")
        if value is None:
            raise InvalidRecordError("Found invalid compressed record set with null value")
        inner = _inner_messages(compression.decompress(codec, value, magic=self.magic), self.magic)
        if not inner:
            raise InvalidRecordError("Found invalid compressed record set with no inner records")
        log_append = self.magic == 1 and self.timestamp_type_id == TsType.LOG_APPEND_TIME
        wrapper_ts = self.timestamp
        if self.magic == 0 or self.offset == 0:
            base = 0  # v0: inner offsets are absolute; a v1 wrapper at offset 0 is taken as-is
        else:
            last_inner = inner[-1][0]
            if self.offset < last_inner:
                raise InvalidRecordError(
                    f"Found invalid wrapper offset in compressed v1 message set, wrapper offset '{self.offset}' "
                    f"is less than the last inner message offset '{last_inner}' and it is not zero."
                )
            base = self.offset - last_inner
        # An inner v1 record under a LogAppendTime wrapper takes the wrapper's time; a v0 one has none.
        return [
            Record(base + off, wrapper_ts if log_append and magic == 1 else ts, k, v) for off, magic, ts, k, v in inner
        ]

    def __iter__(self) -> Iterator[Record]:
        return iter(self._records())

    def records(self) -> list[Record]:
        return list(self._records())

    def __repr__(self) -> str:
        return (
            f"LegacyBatch(magic={self.magic}, offset={self.offset}, size={self.size_in_bytes}, "
            f"position={self.position})"
        )


def _parse_key_value(
    buf: BytesLike, position: int, size_in_bytes: int, magic: int
) -> tuple[bytes | None, bytes | None]:
    end = position + size_in_bytes
    pos = position + _ATTRIBUTES_OFFSET + 1 + (8 if magic == 1 else 0)
    key, pos = _sized(buf, pos, end)
    value, pos = _sized(buf, pos, end)
    return key, value


def _sized(buf: BytesLike, pos: int, end: int) -> tuple[bytes | None, int]:
    if pos + 4 > end:
        raise CorruptRecordError("Legacy message ends inside a length field")
    (length,) = struct.unpack_from(">i", buf, pos)
    pos += 4
    if length < 0:
        return None, pos
    if pos + length > end:
        raise CorruptRecordError(f"Legacy message field of {length} bytes overruns the message")
    return bytes(buf[pos : pos + length]), pos + length


def _inner_messages(data: memoryview, wrapper_magic: int) -> list[tuple[int, int, int, bytes | None, bytes | None]]:
    """Parse the (offset, size, message) entries of a decompressed wrapper value.

    Returns (offset, magic, timestamp, key, value) per message. As on Kafka's read path, an inner magic
    different from the wrapper's is accepted (only appends reject it).
    """
    out = []
    pos, end = 0, len(data)
    while end - pos >= LOG_OVERHEAD:
        offset, size = struct.unpack_from(">qi", data, pos)
        if size < RECORD_OVERHEAD_V0:
            raise CorruptRecordError(
                f"Record size {size} is less than the minimum record overhead ({RECORD_OVERHEAD_V0})"
            )
        if pos + LOG_OVERHEAD + size > end:
            raise CorruptRecordError("Inner message ends after the wrapper's decompressed value")
        magic = data[pos + _MAGIC_OFFSET]
        attributes = data[pos + _ATTRIBUTES_OFFSET]
        if magic > 1:
            raise InvalidRecordError(f"Invalid magic {magic} for a message inside a legacy wrapper")
        if attributes & COMPRESSION_MASK:
            raise InvalidRecordError(
                "Compressed outer record should not have an inner record with a compression attribute set"
            )
        timestamp = NO_TIMESTAMP if magic == 0 else struct.unpack_from(">q", data, pos + _ATTRIBUTES_OFFSET + 1)[0]
        key, value = _parse_key_value(data, pos, LOG_OVERHEAD + size, magic)
        out.append((offset, magic, timestamp, key, value))
        pos += LOG_OVERHEAD + size
    return out
