"""Validation and offset assignment on append (Kafka's LogValidator and UnifiedLog.analyzeAndValidateRecords).

Three paths, as in Kafka: uncompressed v2 batches get their offsets, leader epoch and max timestamp
rewritten in place (the CRC only recomputed when the timestamp type or max timestamp changes);
compressed batches whose codec and magic already match the target are handled in place too; anything
else (another target codec, a legacy magic) is rebuilt. Record-level checks run in one numba pass per
batch (``summarize_records``), not record by record in Python.
"""

from __future__ import annotations

import functools
import struct
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from ..errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    OffsetsOutOfOrderError,
    RecordTooLargeError,
    UnsupportedCompressionTypeError,
    UnsupportedForMessageFormatError,
)
from ..layout import INT64_MAX
from ..record import _kernels
from ..record import compression as codecs
from ..record.batch import (
    ATTRIBUTES_OFFSET,
    CONTROL_MASK,
    CRC_OFFSET,
    DELETE_HORIZON_MASK,
    HEADER_STRUCT,
    RECORDS_OFFSET,
    TRANSACTIONAL_MASK,
    RecordBatch,
)
from ..record.builder import RecordBatchBuilder
from ..record.checksums import crc32c
from ..record.columnar import _ERRORS as KERNEL_ERRORS
from ..record.scan import AnyBatch, iter_batches
from ..record.types import NO_TIMESTAMP, BytesLike, TimestampType
from ..record.view import TIMESTAMP_TYPE_MASK
from .config import LogConfig
from .producer_entry import AppendOrigin

# The origins an append can have (Kafka's AppendOrigin), as names for the validator's branches.
CLIENT, REPLICATION, COORDINATOR = AppendOrigin.CLIENT, AppendOrigin.REPLICATION, AppendOrigin.COORDINATOR
_MAX_TS_OFFSET = 35
_LEADER_EPOCH_OFFSET = 12


@dataclass(slots=True)
class LogAppendInfo:
    """What an append did (Kafka's LogAppendInfo)."""

    first_offset: int = -1
    last_offset: int = -1
    max_timestamp: int = NO_TIMESTAMP
    shallow_offset_of_max_timestamp: int = -1
    log_append_time: int = NO_TIMESTAMP
    log_start_offset: int = 0
    source_compression: str = "none"
    valid_bytes: int = 0
    shallow_count: int = 0
    num_records: int = 0
    last_leader_epoch: int = -1
    offsets_monotonic: bool = True
    last_offset_of_first_batch: int = -1
    is_duplicate: bool = False


def analyze(
    records: bytes,
    origin: AppendOrigin,
    max_message_bytes: int,
    leader_epoch: int | None = None,
    ignore_record_size: bool = False,
) -> tuple[LogAppendInfo, list[AnyBatch]]:
    """Kafka's analyzeAndValidateRecords: sizes, CRCs, monotonic offsets, the source codec."""
    info = LogAppendInfo()
    first = True
    last_offset = -1
    source_codec = codecs.NONE
    batches = list(iter_batches(records))
    for batch in batches:
        if origin == CLIENT and batch.magic >= 2 and batch.base_offset != 0:
            raise InvalidRecordError(
                f"The baseOffset of the record batch in the append should be 0, but it is {batch.base_offset}",
                offset=batch.base_offset,
                position=batch.position,
            )
        if first:
            info.first_offset = batch.base_offset if batch.magic >= 2 else -1
            info.last_offset_of_first_batch = batch.last_offset
            first = False
        if batch.last_offset < last_offset:
            info.offsets_monotonic = False
        last_offset = batch.last_offset
        info.last_offset = batch.last_offset
        size = batch.size_in_bytes
        if not ignore_record_size and size > max_message_bytes:
            raise RecordTooLargeError(
                f"The record batch size in the append is {size} bytes which exceeds the maximum configured value "
                f"of {max_message_bytes}.",
                offset=batch.base_offset,
                position=batch.position,
            )
        batch.ensure_valid()
        if batch.magic >= 2 and batch.max_timestamp > info.max_timestamp:
            info.max_timestamp = batch.max_timestamp
            info.shallow_offset_of_max_timestamp = batch.last_offset
        info.last_leader_epoch = batch.partition_leader_epoch if batch.magic >= 2 else -1
        info.shallow_count += 1
        info.valid_bytes += size
        if batch.compression_type != codecs.NONE:
            if batch.compression_type >= len(codecs.CODEC_NAMES):
                raise UnsupportedCompressionTypeError(
                    f"Unknown compression type id {batch.compression_type} in the batch attributes",
                    offset=batch.base_offset,
                    position=batch.position,
                )
            source_codec = batch.compression_type
    info.source_compression = codecs.codec_name(source_codec)
    return info, batches


def target_codec(config: LogConfig, source_codec: int) -> int:
    """compression.type 'producer' keeps the producer's codec; anything else is the target."""
    name = config.compression_type
    return source_codec if name == "producer" else _codec_of(name)


@functools.lru_cache(maxsize=16)
def _codec_of(name: str) -> int:
    return codecs.codec_id(name)


@dataclass
class ValidationResult:
    """The validated append: its bytes as buffers to write in order, and views of its batches.

    In-place validation changes only 61-byte headers, so ``parts`` alternate new headers and the
    untouched bodies, and ``batches`` holds views of the batches the producer state must see (header-only
    for data batches, which is all those checks read; a control batch keeps its record). A rebuilt
    append is one buffer.
    """

    parts: list[BytesLike]
    size: int
    batches: Sequence[AnyBatch]
    max_timestamp: int
    shallow_offset_of_max_timestamp: int
    log_append_time: int
    size_maybe_changed: bool
    next_offset: int
    num_records: int

    @property
    def records(self) -> BytesLike:
        return self.parts[0] if len(self.parts) == 1 else b"".join(self.parts)


def validate_and_assign_offsets(
    batches: list[AnyBatch],
    first_offset: int,
    now: int,
    config: LogConfig,
    *,
    origin: AppendOrigin = CLIENT,
    leader_epoch: int = 0,
) -> ValidationResult:
    """Kafka's LogValidator.validateMessagesAndAssignOffsets for one append of batches already analysed.

    ``batches`` are views (``analyze`` gives them); their bytes are not modified.
    """
    if not batches:
        raise InvalidRecordError("Record batch has no batches at all")
    source = next((b.compression_type for b in reversed(batches) if b.compression_type), codecs.NONE)
    target = target_codec(config, source)
    magic = batches[0].magic
    for batch in batches:
        if batch.magic != magic:
            raise InvalidRecordError("All batches in the append must have the same magic value")
    log_append = config.message_timestamp_type == "LogAppendTime"
    if source == codecs.NONE and target == codecs.NONE and magic == 2:
        return _assign_in_place(
            cast("list[RecordBatch]", batches), first_offset, now, config, origin, leader_epoch, log_append
        )
    first = batches[0]
    if magic >= 2 and len(batches) > 1:
        raise InvalidRecordError("Compressed outer record has more than one batch")
    in_place = (source == target and magic == 2) or (source == codecs.NONE and first.is_control)
    if in_place:  # magic 2 either way: a legacy message is never a control batch
        return _assign_in_place(
            cast("list[RecordBatch]", batches), first_offset, now, config, origin, leader_epoch, log_append
        )
    return _rebuild(batches, first_offset, now, config, origin, leader_epoch, target, log_append)


def _validate_batch(batch: AnyBatch, origin: AppendOrigin, target_magic: int = 2) -> None:
    """LogValidator.validateBatch, for client appends of v2 batches."""
    if origin != CLIENT or batch.magic < 2:
        return
    batch = cast(RecordBatch, batch)  # magic 2
    where: dict[str, Any] = {"offset": batch.base_offset, "position": batch.position}
    if batch.last_offset - batch.base_offset + 1 <= 0:
        raise InvalidRecordError("Batch has an invalid offset range", **where)
    if batch.record_count <= 0:
        raise InvalidRecordError(f"Batch has an invalid record count {batch.record_count}", **where)
    if batch.record_count != batch.last_offset_delta + 1:
        raise InvalidRecordError(
            f"Inconsistent batch offset range ({batch.base_offset}..{batch.last_offset}) and count of records "
            f"{batch.record_count}",
            **where,
        )
    if batch.is_control:
        raise InvalidRecordError("Clients are not allowed to write control records", **where)
    if batch.has_producer_id and batch.base_sequence < 0:
        raise InvalidRecordError(
            f"Invalid sequence number {batch.base_sequence} in record batch with producerId {batch.producer_id}",
            **where,
        )


class _Scratch(threading.local):
    """Each appending thread's buffer for decompressing a batch to validate it: the validation is done with the
    decompressed bytes before it returns, so one buffer serves every batch. A fresh buffer per batch cost
    ~320 page faults per MiB decoded (the allocator hands large blocks back to the system), a third of the
    broker's CPU in an lz4 produce load. Memory is mapped as it is first used (numpy.empty)."""

    def __init__(self) -> None:
        self.buffer = np.empty(SCRATCH_BYTES, np.uint8)


SCRATCH_BYTES = 8 << 20  # a batch decoding to more gets a buffer of its own
_scratch = _Scratch()


def _summarize(batch: RecordBatch) -> tuple[int, int, int, int]:
    """(records, min timestamp ignoring -1, max timestamp, null keys) of a v2 batch, validating structure."""
    section = batch.records_section(into=_scratch.buffer)
    arena = np.frombuffer(section, dtype=np.uint8)
    code, index, count, min_ts, max_ts, null_keys = _kernels.summarize_records(
        arena, 0, len(arena), max(batch.record_count, 0), batch.base_timestamp
    )
    if code != _kernels.OK:
        raise InvalidRecordError(
            f"{KERNEL_ERRORS[code]} (record {index} of {batch.record_count})",
            offset=batch.base_offset,
            position=batch.position,
        )
    if batch.attributes & TIMESTAMP_TYPE_MASK:  # a LogAppendTime batch reads back with its max timestamp
        min_ts = max_ts = batch.max_timestamp
    return count, int(min_ts), int(max_ts), int(null_keys)


def _check_records(
    batch: RecordBatch, config: LogConfig, now: int, origin: AppendOrigin, min_ts: int, max_ts: int, null_keys: int
) -> None:
    """LogValidator.validateRecord, vectorised: null keys on compacted topics, timestamp range and type."""
    if origin == REPLICATION:
        return
    where: dict[str, Any] = {"offset": batch.base_offset, "position": batch.position}
    if config.compact and null_keys and not batch.is_control:
        raise InvalidRecordError("Compacted topic cannot accept message without key in topic partition", **where)
    if config.message_timestamp_type == "CreateTime":
        before = config.message_timestamp_before_max_ms
        after = config.message_timestamp_after_max_ms
        if min_ts != INT64_MAX and min_ts != NO_TIMESTAMP and now - min_ts > before:
            raise InvalidTimestampError(
                f"Timestamp {min_ts} of message is before the allowed range: more than {before} ms before the "
                f"broker's time {now}",
                **where,
            )
        if max_ts != NO_TIMESTAMP and max_ts - now > after:
            raise InvalidTimestampError(
                f"Timestamp {max_ts} of message is after the allowed range: more than {after} ms after the "
                f"broker's time {now}",
                **where,
            )
        if batch.attributes & TIMESTAMP_TYPE_MASK and max_ts == NO_TIMESTAMP:
            raise InvalidTimestampError("Invalid timestamp type in message: LogAppendTime set by the producer", **where)
    elif batch.attributes & TIMESTAMP_TYPE_MASK:
        raise InvalidTimestampError("Invalid timestamp type in message: LogAppendTime set by the producer", **where)


def _new_header(batch: RecordBatch, last_offset: int, leader_epoch: int, log_append: bool, max_ts: int) -> bytes:
    """The batch's 61-byte header after setLastOffset, setPartitionLeaderEpoch and setMaxTimestamp."""
    view = batch.buffer
    head = bytearray(view[:RECORDS_OFFSET])
    struct.pack_into(">q", head, 0, last_offset - batch.last_offset_delta)
    struct.pack_into(">i", head, _LEADER_EPOCH_OFFSET, leader_epoch)
    attributes = batch.attributes
    wanted = (attributes | TIMESTAMP_TYPE_MASK) if log_append else (attributes & ~TIMESTAMP_TYPE_MASK)
    if wanted == attributes and max_ts == batch.max_timestamp:
        return bytes(head)  # the CRC covers neither the base offset nor the leader epoch
    wanted &= 0x07 | TIMESTAMP_TYPE_MASK | TRANSACTIONAL_MASK | CONTROL_MASK | DELETE_HORIZON_MASK
    struct.pack_into(">h", head, ATTRIBUTES_OFFSET, wanted)
    struct.pack_into(">q", head, _MAX_TS_OFFSET, max_ts)
    crc = crc32c(view[RECORDS_OFFSET:], crc32c(memoryview(head)[ATTRIBUTES_OFFSET:]))
    struct.pack_into(">I", head, CRC_OFFSET, crc)
    return bytes(head)


def _assign_in_place(
    batches: list[RecordBatch],
    first_offset: int,
    now: int,
    config: LogConfig,
    origin: AppendOrigin,
    leader_epoch: int,
    log_append: bool,
) -> ValidationResult:
    """New headers, untouched bodies: the validated bytes are made with a single copy."""
    counter = first_offset
    max_timestamp, offset_of_max = NO_TIMESTAMP, -1
    parts: list[BytesLike] = []
    views: list[RecordBatch] = []
    for batch in batches:
        _validate_batch(batch, origin)
        count, min_ts, batch_max, null_keys = _summarize(batch)
        _check_records(batch, config, now, origin, min_ts, batch_max, null_keys)
        counter += count
        last = counter - 1
        batch_max_ts = now if log_append else batch_max
        if batch_max_ts > max_timestamp:
            max_timestamp, offset_of_max = batch_max_ts, last
        header = _new_header(batch, last, leader_epoch, log_append, batch_max_ts)
        body = batch.buffer[RECORDS_OFFSET:]
        parts += (header, body)
        if batch.is_control:
            views.append(RecordBatch(header + bytes(body)))
        elif batch.has_producer_id:  # header-only: the producer-state checks read header fields
            views.append(RecordBatch(header))
    if log_append:
        max_timestamp, offset_of_max = now, counter - 1
    return ValidationResult(
        parts,
        sum(b.size_in_bytes for b in batches),
        views,
        max_timestamp,
        offset_of_max,
        now if log_append else NO_TIMESTAMP,
        False,
        counter,
        counter - first_offset,
    )


def _rebuild(
    batches: list[AnyBatch],
    first_offset: int,
    now: int,
    config: LogConfig,
    origin: AppendOrigin,
    leader_epoch: int,
    target: int,
    log_append: bool,
) -> ValidationResult:
    """Re-encode the records at magic 2 with the target codec, keeping the first batch's producer fields."""
    first = batches[0]
    if first.magic < 2 and (first.is_transactional or first.has_producer_id):
        raise UnsupportedForMessageFormatError("Idempotent and transactional records need magic v2")
    for batch in batches:
        _validate_batch(batch, origin)
        if batch.magic >= 2:
            v2 = cast(RecordBatch, batch)
            _, min_ts, max_ts, null_keys = _summarize(v2)
            _check_records(v2, config, now, origin, min_ts, max_ts, null_keys)
    records = [r for batch in batches for r in batch]
    if not records:
        raise InvalidRecordError("Record batch has no records")
    if config.compact and origin != REPLICATION and any(r.key is None for r in records):
        raise InvalidRecordError("Compacted topic cannot accept message without key in topic partition")
    builder = RecordBatchBuilder(
        compression=target,
        compression_level=_level(config, target),
        timestamp_type=TimestampType.LOG_APPEND_TIME if log_append else TimestampType.CREATE_TIME,
        producer_id=first.producer_id,
        producer_epoch=first.producer_epoch,
        base_sequence=first.base_sequence,
        is_transactional=first.is_transactional,
        base_offset=first_offset,
        partition_leader_epoch=leader_epoch,
        log_append_time=now if log_append else None,
    )
    built = builder.build_from(
        [r.key for r in records],
        [r.value for r in records],
        [max(r.timestamp, NO_TIMESTAMP) for r in records],
        [r.headers for r in records] if any(r.headers for r in records) else None,
    )
    last = first_offset + len(records) - 1
    (batch,) = iter_batches(built)
    max_ts = now if log_append else batch.max_timestamp
    return ValidationResult(
        [built], len(built), [batch], max_ts, last, now if log_append else NO_TIMESTAMP, True, last + 1, len(records)
    )


def _level(config: LogConfig, codec: int) -> int | None:
    return {
        codecs.GZIP: config.compression_gzip_level,
        codecs.LZ4: config.compression_lz4_level,
        codecs.ZSTD: config.compression_zstd_level,
    }.get(codec)


def check_follower_offsets(info: LogAppendInfo, log_end_offset: int) -> None:
    """Follower-style appends keep their offsets; they must not go backwards or behind the log end."""
    if not info.offsets_monotonic:
        raise OffsetsOutOfOrderError(f"Out of order offsets found in append: first offset {info.first_offset}")
    if info.last_offset >= INT64_MAX:
        raise InvalidRecordError(
            f"Invalid offsets in append: last offset {info.last_offset} leaves no next offset (Long.MAX_VALUE is "
            "reserved)",
            offset=info.last_offset,
        )
    if info.first_offset < log_end_offset and info.first_offset >= 0:
        raise OffsetsOutOfOrderError(
            f"Out of order offsets found in append: first offset {info.first_offset} is less than the next "
            f"offset {log_end_offset}"
        )


def check_valid_size(records: bytes, what: str) -> None:
    """Refuse bytes that do not end on a batch boundary (a partial batch in an append)."""
    consumed = sum(b.size_in_bytes for b in iter_batches(records))
    if consumed != len(records):
        raise CorruptRecordError(f"{what}: {len(records) - consumed} trailing bytes do not form a complete batch")


_FAST_ATTRIBUTES_MASK = 0x7F  # codec, timestamp type, transactional, control, delete horizon: all must be clear


# HEADER_STRUCT's 13 fields: base offset, batch length, leader epoch, magic, crc, attributes, last offset delta,
# base timestamp, max timestamp, producer id, producer epoch, base sequence, record count
PlainHeader = tuple[Any, ...]


def plain_batch_header(records: BytesLike, config: LogConfig) -> PlainHeader | None:
    """The unpacked header (``HEADER_STRUCT`` fields) of the common client append, a lone uncompressed v2
    batch without a producer id, once its header checks pass; None when the append is anything else, so
    that the general path handles it."""
    size = len(records)
    if size < RECORDS_OFFSET or records[16] != 2:
        return None
    header = HEADER_STRUCT.unpack_from(records)
    _, batch_length, _, _, _, attributes, delta, _, _, producer_id, _, _, count = header
    if (
        batch_length + 12 != size
        or attributes & _FAST_ATTRIBUTES_MASK
        or producer_id != -1
        or records[:8] != _ZERO_OFFSET
        or size > config.max_message_bytes
        or count <= 0
        or count != delta + 1
        or config.message_timestamp_type != "CreateTime"
        or config.compression_type not in ("producer", "uncompressed")
    ):
        return None
    return header


def check_plain_batch(records: BytesLike, header: PlainHeader, now: int, config: LogConfig) -> int | None:
    """The CRC and record checks (analyze's and LogValidator's) of a batch ``plain_batch_header`` passed:
    its records' max timestamp, or None when anything is wrong, so that the general path raises Kafka's
    exact error. It takes no lock, so a large batch is checked while it is written."""
    if crc32c(memoryview(records)[ATTRIBUTES_OFFSET:]) != header[_CRC]:
        return None
    # numba reads a bytes object as a buffer directly; a view (a request's frame) goes in as an array over it
    arena = records if isinstance(records, bytes) else np.frombuffer(records, dtype=np.uint8)
    code, _, _, min_ts, max_ts, null_keys = _kernels.summarize_records(
        arena, RECORDS_OFFSET, len(records), header[_COUNT], header[_BASE_TS]
    )
    if code != _kernels.OK or (null_keys and config.compact):
        return None
    max_ts = int(max_ts)
    if max_ts != NO_TIMESTAMP and (
        max_ts - now > config.message_timestamp_after_max_ms
        or (min_ts != INT64_MAX and now - min_ts > config.message_timestamp_before_max_ms)
    ):
        return None
    return max_ts


def plain_batch_append(
    records: BytesLike, header: PlainHeader, max_ts: int, first_offset: int, leader_epoch: int
) -> tuple[list[BytesLike], int, LogAppendInfo]:
    """(buffers to write, size, info) for a checked batch whose records' max timestamp is ``max_ts``: the
    header gets the offsets and leader epoch in place, and the CRC is recomputed only when the max
    timestamp changes (setMaxTimestamp: the CRC covers it)."""
    _, batch_length, epoch, _, crc, attributes, delta, base_ts, header_max_ts, _, producer_epoch, sequence, count = (
        header
    )
    body = memoryview(records)[RECORDS_OFFSET:]
    if max_ts != header_max_ts:
        new_tail = _TAIL.pack(attributes, delta, base_ts, max_ts, -1, producer_epoch, sequence, count)
        crc = crc32c(body, crc32c(new_tail))
    new_header = HEADER_STRUCT.pack(
        first_offset,
        batch_length,
        leader_epoch,
        2,
        crc,
        attributes,
        delta,
        base_ts,
        max_ts,
        -1,
        producer_epoch,
        sequence,
        count,
    )
    last = first_offset + delta
    size = batch_length + 12
    # LogAppendInfo's fields in order (positional: this runs on every single-record append): the shallow offset
    # of the max timestamp is set only for a real max, as LogValidator does; the leader epoch is the client's.
    info = LogAppendInfo(
        first_offset, last, max_ts, last if max_ts > NO_TIMESTAMP else -1, NO_TIMESTAMP, 0, "none", size, 1, count,
        epoch, True, last, False,
    )  # fmt: skip
    return [new_header, body], size, info


def warm_up() -> None:
    """Load the compiled record kernel the append path dispatches to, once per process.

    numba's first dispatch in a process loads its cached machine code and its own typing registries: about
    a second, holding the GIL. Done lazily, that second lands on the first produce request (and stalls every
    other connection of a broker meanwhile); a server calls this while it starts instead.
    """
    _kernels.summarize_records(b"", 0, 0, 0, 0)
    # the arrays the other paths pass: over a request frame's own buffer (writable), over bytes (read-only)
    _kernels.summarize_records(np.empty(0, dtype=np.uint8), 0, 0, 0, 0)
    _kernels.summarize_records(np.frombuffer(b"", dtype=np.uint8), 0, 0, 0, 0)


def validate_single_plain_batch(
    records: BytesLike, first_offset: int, now: int, config: LogConfig, leader_epoch: int
) -> tuple[list[BytesLike], int, LogAppendInfo] | None:
    """The common client append in one pass: a lone uncompressed v2 batch with no producer id.

    Returns (buffers to write, size, info). It applies the checks of ``analyze`` and
    ``validate_and_assign_offsets`` and returns None whenever the append is anything else, or anything is
    wrong, so that the general path handles it and raises Kafka's exact error.
    """
    header = plain_batch_header(records, config)
    if header is None:
        return None
    max_ts = check_plain_batch(records, header, now, config)
    if max_ts is None:
        return None
    return plain_batch_append(records, header, max_ts, first_offset, leader_epoch)


_CRC, _BASE_TS, MAX_TS_FIELD, _COUNT = 4, 7, 8, 12  # positions in HEADER_STRUCT's fields
_ZERO_OFFSET = bytes(8)
_TAIL = struct.Struct(">hiqqqhii")
