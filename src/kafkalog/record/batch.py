"""A zero-copy view over one record batch v2 (DefaultRecordBatch), and its reference record decoder.

The header is read with one ``struct.unpack_from`` on the caller's buffer (bytes, memoryview or mmap);
nothing is copied until records are iterated. Iteration here is the clear, per-record reference path;
``columnar`` is its whole-batch twin and the two are tested against each other.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import TYPE_CHECKING, cast

from ..errors import InvalidRecordError, KafkaLogError
from ..layout import INT32_MAX
from . import compression
from .checksums import crc32c
from .types import (
    NO_SEQUENCE,
    BytesLike,
    EndTransactionMarker,
    Record,
    TimestampType,
    end_transaction_marker,
)
from .varint import read_varint, read_varlong
from .view import TIMESTAMP_TYPE_MASK, BatchView

if TYPE_CHECKING:
    import numpy as np
    from typing_extensions import Buffer

LOG_OVERHEAD = 12
MAGIC_OFFSET = 16
HEADER_SIZE_UP_TO_MAGIC = 17
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
RECORDS_OFFSET = 61
RECORD_BATCH_OVERHEAD = RECORDS_OFFSET
MAX_RECORD_OVERHEAD = 21

TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40


# baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta,
# baseTimestamp, maxTimestamp, producerId, producerEpoch, baseSequence, recordsCount
HEADER_STRUCT = struct.Struct(">qiibIhiqqqhii")
assert HEADER_STRUCT.size == RECORDS_OFFSET


def increment_sequence(sequence: int, increment: int) -> int:
    """Kafka's DefaultRecordBatch.incrementSequence: wrap to 0 past Int32.MAX."""
    if sequence > INT32_MAX - increment:
        return increment - (INT32_MAX - sequence) - 1
    return sequence + increment


class RecordBatch(BatchView):
    """View of one v2 batch at ``position`` in ``buffer``; fields are read once, records lazily."""

    __slots__ = (
        "attributes",
        "base_offset",
        "base_sequence",
        "base_timestamp",
        "batch_length",
        "crc",
        "last_offset_delta",
        "magic",
        "max_timestamp",
        "partition_leader_epoch",
        "producer_epoch",
        "producer_id",
        "record_count",
    )

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    def __init__(self, buffer: Buffer, position: int = 0) -> None:
        super().__init__(buffer, position)
        view = self._buffer
        try:
            fields = HEADER_STRUCT.unpack_from(view, position)
        except struct.error:
            # Shorter than a full header: read what is there, zero-padded; ensure_valid() rejects it.
            head = bytes(view[position : position + RECORDS_OFFSET]).ljust(RECORDS_OFFSET, b"\0")
            fields = HEADER_STRUCT.unpack_from(head)
        (
            self.base_offset,
            self.batch_length,
            self.partition_leader_epoch,
            self.magic,
            self.crc,
            self.attributes,
            self.last_offset_delta,
            self.base_timestamp,
            self.max_timestamp,
            self.producer_id,
            self.producer_epoch,
            self.base_sequence,
            self.record_count,
        ) = fields

    # ----- derived header values -------------------------------------------------------------
    @property
    def size_in_bytes(self) -> int:
        return LOG_OVERHEAD + self.batch_length

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def timestamp_type_id(self) -> TimestampType:
        return TimestampType.LOG_APPEND_TIME if self.attributes & TIMESTAMP_TYPE_MASK else TimestampType.CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & DELETE_HORIZON_MASK)

    @property
    def delete_horizon_ms(self) -> int | None:
        return self.base_timestamp if self.has_delete_horizon else None

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id > -1

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return increment_sequence(self.base_sequence, self.last_offset_delta)

    # ----- validity ------------------------------------------------------------------------
    min_size_in_bytes = RECORD_BATCH_OVERHEAD

    def compute_checksum(self) -> int:
        """CRC-32C over attributes..end, as Kafka computes it."""
        start = self.position + ATTRIBUTES_OFFSET
        return crc32c(self._buffer[start : self.position + self.size_in_bytes])

    def _offset_for_errors(self) -> int:
        return self.base_offset

    def _too_small(self) -> str:
        return (
            f"Record batch is corrupt (the size {self.size_in_bytes} is smaller than the minimum "
            f"allowed overhead {RECORD_BATCH_OVERHEAD})"
        )

    # ----- records -------------------------------------------------------------------------
    def records_section(self, into: np.ndarray | None = None) -> memoryview:
        """The records bytes after the 61-byte header, decompressed when the batch is compressed (``into``:
        a scratch buffer it may be decompressed into, see ``compression.decompress``)."""
        section = self._buffer[self.position + RECORDS_OFFSET : self.position + self.size_in_bytes]
        codec = self.compression_type
        if codec == compression.NONE:
            return section
        try:
            return compression.decompress(codec, section, into=into)
        except KafkaLogError as e:  # corrupt data, or an unknown codec id (5..7) in the attributes
            raise e.located(position=self.position, offset=self.base_offset) from None

    def __iter__(self) -> Iterator[Record]:
        count = self.record_count
        if count < 0:
            raise InvalidRecordError(
                f"Found invalid record count {count} in magic v2 batch",
                position=self.position,
                offset=self.base_offset,
            )
        if count == 0:
            return iter(())
        return self._iter_records(self.records_section(), count)

    def _iter_records(self, section: memoryview, count: int) -> Iterator[Record]:
        log_append_time = self.max_timestamp if self.attributes & TIMESTAMP_TYPE_MASK else None
        base_offset, base_ts, base_seq = self.base_offset, self.base_timestamp, self.base_sequence
        pos, end = 0, len(section)
        for i in range(count):
            if pos >= end:
                raise InvalidRecordError(
                    f"Incorrect declared batch size, premature EOF reached after {i} of {count} records",
                    position=self.position,
                    offset=self.base_offset,
                )
            try:
                record, pos = decode_record(section, pos, end, base_offset, base_ts, base_seq, log_append_time)
            except InvalidRecordError as e:
                raise e.located(position=self.position, offset=self.base_offset) from None
            yield record
        if pos != end:
            raise InvalidRecordError(
                f"Incorrect declared batch size, records still remaining in file after {count} records",
                position=self.position,
                offset=self.base_offset,
            )

    def records(self) -> list[Record]:
        return list(self)

    def end_transaction_marker(self) -> EndTransactionMarker:
        """The COMMIT/ABORT marker of a control batch."""
        if not self.is_control:
            raise InvalidRecordError("Not a control batch", position=self.position, offset=self.base_offset)
        first = next(iter(self), None)
        if first is None:
            raise InvalidRecordError("Control batch holds no record", position=self.position, offset=self.base_offset)
        try:
            return end_transaction_marker(first)
        except KafkaLogError as e:
            raise e.located(position=self.position, offset=self.base_offset) from None

    def __repr__(self) -> str:
        return (
            f"RecordBatch(magic=2, offsets={self.base_offset}..{self.last_offset}, count={self.record_count}, "
            f"compression={self.compression_type}, size={self.size_in_bytes}, position={self.position})"
        )


def decode_record(
    section: BytesLike,
    pos: int,
    end: int,
    base_offset: int,
    base_timestamp: int,
    base_sequence: int,
    log_append_time: int | None,
) -> tuple[Record, int]:
    """Decode one record (DefaultRecord.readFrom) at ``pos``; return it and the next position."""
    body_len, pos = read_varint(section, pos, end)
    if body_len < 0 or end - pos < body_len:
        raise InvalidRecordError(
            f"Invalid record size: expected {body_len} bytes in record payload, but instead the buffer has only "
            f"{end - pos} remaining bytes."
        )
    start = pos
    pos += 1  # attributes: unused
    ts_delta, pos = read_varlong(section, pos, end)
    offset_delta, pos = read_varint(section, pos, end)
    key_len, pos = read_varint(section, pos, end)
    key, pos = _read_bytes(section, pos, end, key_len)
    value_len, pos = read_varint(section, pos, end)
    value, pos = _read_bytes(section, pos, end, value_len)
    header_count, pos = read_varint(section, pos, end)
    if header_count < 0:
        raise InvalidRecordError(f"Found invalid number of record headers {header_count}")
    if header_count > end - pos:
        raise InvalidRecordError(
            f"Found invalid number of record headers. The number of headers {header_count} exceeds the "
            f"{end - pos} bytes left"
        )
    headers = []
    for _ in range(header_count):
        hkey_len, pos = read_varint(section, pos, end)
        if hkey_len < 0:
            raise InvalidRecordError(f"Invalid negative header key size {hkey_len}")
        hkey, pos = _read_bytes(section, pos, end, hkey_len)
        hval_len, pos = read_varint(section, pos, end)
        hval, pos = _read_bytes(section, pos, end, hval_len)
        headers.append((cast(bytes, hkey).decode("utf-8", "replace"), hval))  # hkey_len >= 0: not None
    if pos - start != body_len:
        raise InvalidRecordError(
            f"Invalid record size: expected to read {body_len} bytes in record payload, but instead read {pos - start}"
        )
    sequence = increment_sequence(base_sequence, offset_delta) if base_sequence >= 0 else NO_SEQUENCE
    timestamp = log_append_time if log_append_time is not None else base_timestamp + ts_delta
    record = Record(base_offset + offset_delta, timestamp, key, value, tuple(headers), sequence)
    return record, pos


def _read_bytes(section: BytesLike, pos: int, end: int, length: int) -> tuple[bytes | None, int]:
    if length < 0:
        return None, pos
    if length > end - pos:
        raise InvalidRecordError(f"Found invalid record structure: a field of {length} bytes overruns the record")
    return bytes(section[pos : pos + length]), pos + length
