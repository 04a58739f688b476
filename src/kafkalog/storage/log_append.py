"""The append path of a partition log (Kafka's UnifiedLog.append, analyzeAndValidateRecords and
analyzeAndValidateProducerState): a base class of ``storage.log.Log``, which holds the state it works on.

An append validates the batches (``validator``: CRC, offsets, timestamps, sizes), assigns offsets and the leader
epoch, checks producer sequences and epochs, writes to the active segment (rolling first when due) and only then
updates the log end offset and the producer state, all under the log's lock: a reader never sees a batch whose
producer state is not applied, and a failed append leaves nothing behind.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from ..errors import (
    CorruptRecordError,
    KafkaStorageError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
)
from ..record import RecordBatchBuilder, control_batch
from ..record.scan import AnyBatch
from ..record.types import BytesLike, ControlRecordType, Record
from .log_state import LogState
from .producer_entry import AppendOrigin, append_origin
from .producer_state import BatchMetadata, CompletedTxn, ProducerAppendInfo
from .segment import LogSegment
from .validator import (
    CLIENT,
    COORDINATOR,
    REPLICATION,
    LogAppendInfo,
    analyze,
    check_follower_offsets,
    validate_and_assign_offsets,
    validate_single_plain_batch,
)

log = logging.getLogger(__name__)

AppendInput = BytesLike | RecordBatchBuilder | Sequence[Record | tuple[Any, ...]]
"""What ``Log.append`` takes: batch bytes, a builder, or records for one uncompressed batch."""

_PendingProducerState = tuple[list[ProducerAppendInfo], list[CompletedTxn]]
"""The producer updates of an append, applied after its write: the per-producer infos and completed transactions."""


class LogAppend(LogState):
    """Appends to a ``Log`` (this class is one of its bases and has no state of its own)."""

    def append(
        self, records: AppendInput, *, origin: AppendOrigin | str = CLIENT, leader_epoch: int | None = None
    ) -> LogAppendInfo:
        """Append client batches, validated and given offsets as Kafka's leader does.

        The batches are stamped with ``leader_epoch`` (default: the latest epoch of the leader epoch cache, 0 for
        a log without one), which the cache records from the append's first offset when it is new.

        ``records`` is batch bytes, a RecordBatchBuilder, or a list of records: ``Record`` objects or
        (key, value[, timestamp[, headers]]) tuples, which go into one uncompressed batch.
        """
        data: BytesLike
        if isinstance(records, bytes | memoryview):
            data = records  # a view (a request's frame) is read in place by the common path: see _append
        elif isinstance(records, RecordBatchBuilder):
            data = records.build()
        elif isinstance(records, list | tuple):
            data = self._build(records)
        elif isinstance(records, bytearray):
            data = bytes(records)
        else:
            raise TypeError(
                f"records must be batch bytes, a RecordBatchBuilder or a list of records, not {type(records).__name__}"
            )
        if leader_epoch is None:
            latest = self.leader_epoch_cache._latest
            leader_epoch = latest if latest >= 0 else 0
        return self._append(data, origin=append_origin(origin), leader_epoch=leader_epoch, assign_offsets=True)

    def _build(self, records: Sequence[Record | tuple[Any, ...]]) -> bytes:
        builder = RecordBatchBuilder(clock=self.clock)
        for record in records:
            if isinstance(record, Record):
                builder.append(record.key, record.value, record.timestamp, record.headers)
            else:
                builder.append(*record)
        return builder.build()

    def append_as_follower(self, records: BytesLike) -> LogAppendInfo:
        """Append batches that keep their own offsets (a replica's fetch, or a copy of another log)."""
        if not isinstance(records, bytes | bytearray | memoryview):
            raise TypeError(f"records must be batch bytes, not {type(records).__name__}")
        return self._append(bytes(records), origin=REPLICATION, leader_epoch=-1, assign_offsets=False)

    def append_end_txn_marker(
        self,
        control_type: ControlRecordType,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        leader_epoch: int | None = None,
    ) -> LogAppendInfo:
        """Write a COMMIT or ABORT marker, as the transaction coordinator does (origin coordinator)."""
        batch = control_batch(control_type, producer_id, producer_epoch, coordinator_epoch, self.clock.milliseconds())
        if leader_epoch is None:
            latest = self.leader_epoch_cache._latest
            leader_epoch = latest if latest >= 0 else 0
        return self._append(batch, origin=COORDINATOR, leader_epoch=leader_epoch, assign_offsets=True)

    def _append(
        self, records: BytesLike, *, origin: AppendOrigin, leader_epoch: int, assign_offsets: bool
    ) -> LogAppendInfo:
        """Append ``records``: bytes, or a read-only-in-practice view (a produce request's frame). The common
        client append (one plain batch, checked and written in place) reads a view where it lies; every other
        path gets its own bytes, since its batches may outlive the call (producer state, cached batches)."""
        if self.metadata_flush is not None:  # UnifiedLog.append: the topic id on disk before any record
            self.flush_metadata()
        if assign_offsets and origin == CLIENT:
            with self._lock:
                now = self.clock.milliseconds()
                fast = validate_single_plain_batch(records, self._log_end_offset, now, self.config, leader_epoch)
                if fast is not None:
                    return self._append_validated(*fast, now, epoch=leader_epoch)
        if not isinstance(records, bytes):
            records = bytes(records)
        return self._append_general(records, origin=origin, leader_epoch=leader_epoch, assign_offsets=assign_offsets)

    def _append_validated(
        self,
        parts: list[BytesLike],
        size: int,
        info: LogAppendInfo,
        now: int,
        *,
        epoch: int,
    ) -> LogAppendInfo:
        """Write a validated append with no producer state involved, rolling first when due."""
        self._check_open()
        self._check_fits_segment(size)
        try:
            segment = self._maybe_roll(size, info, now)
            segment.append(info.last_offset, info.max_timestamp, info.shallow_offset_of_max_timestamp, parts, size)
        except (OSError, KafkaStorageError) as e:
            raise self._io_failure("appending records to", e) from e
        self._log_end_offset = info.last_offset + 1
        if epoch != self.leader_epoch_cache._latest:
            self.leader_epoch_cache.maybe_assign(epoch, info.first_offset)
        return self._complete_append(info)

    def _check_fits_segment(self, size: int) -> None:
        if size > self.config.segment_bytes:
            raise RecordBatchTooLargeError(
                f"Message batch size is {size} bytes in append to partition {self.topic}-{self.partition} "
                f"which exceeds the maximum configured segment size of {self.config.segment_bytes}."
            )

    def _complete_append(self, info: LogAppendInfo) -> LogAppendInfo:
        """After the write: the producer state's map end, the high watermark, and the flush.messages policy."""
        self.producer_state.update_map_end_offset(self._log_end_offset)
        info.log_start_offset = self._log_start_offset
        if self.auto_high_watermark:
            rule = self.leader_hw_rule
            if rule is None:
                self._set_high_watermark(self._log_end_offset)
            else:
                rule()
        if self._log_end_offset - self._recovery_point >= self.config.flush_messages:
            self.flush()
        return info

    def _append_general(
        self, records: bytes, *, origin: AppendOrigin, leader_epoch: int, assign_offsets: bool
    ) -> LogAppendInfo:
        info, batches = analyze(
            records, origin, self.config.max_message_bytes, leader_epoch, ignore_record_size=not assign_offsets
        )
        if assign_offsets and info.valid_bytes != len(records):
            # A client's append must be whole batches; a replica's fetch may end in a partial one (trimmed, as Kafka).
            raise CorruptRecordError(
                f"Record batch length runs past the end of the append: {len(records) - info.valid_bytes} trailing "
                f"bytes of {len(records)} do not form a complete batch",
                position=info.valid_bytes,
            )
        if info.shallow_count == 0:
            return info
        valid = records if info.valid_bytes == len(records) else records[: info.valid_bytes]
        with self._lock:
            self._check_open()
            if assign_offsets:
                now = self.clock.milliseconds()
                result = validate_and_assign_offsets(
                    batches, self._log_end_offset, now, self.config, origin=origin, leader_epoch=leader_epoch
                )
                parts = result.parts
                valid_size = result.size
                validated: Sequence[AnyBatch] = result.batches
                info.first_offset = self._log_end_offset
                info.last_offset = result.next_offset - 1
                info.max_timestamp = result.max_timestamp
                info.shallow_offset_of_max_timestamp = result.shallow_offset_of_max_timestamp
                info.log_append_time = result.log_append_time
                info.num_records = result.num_records
                if result.size_maybe_changed:
                    for batch in validated:
                        if batch.size_in_bytes > self.config.max_message_bytes:
                            raise RecordTooLargeError(
                                f"Message batch size is {batch.size_in_bytes} bytes in append to partition "
                                f"{self.topic}-{self.partition} which exceeds the maximum configured size of "
                                f"{self.config.max_message_bytes}."
                            )
            else:
                check_follower_offsets(info, self._log_end_offset)
                parts = [valid]
                valid_size = info.valid_bytes
                validated = [b for b in batches if b.has_producer_id or b.is_control]
                info.num_records = sum(b.record_count for b in batches)
            self._check_fits_segment(valid_size)
            try:
                segment = self._maybe_roll(valid_size, info)
            except (OSError, KafkaStorageError) as e:
                raise self._io_failure("appending records to", e) from e
            if validated:
                duplicate, pending = self._analyze_producer_state(validated, origin)
            else:
                duplicate, pending = None, ([], [])
            if duplicate is not None:
                info.first_offset = duplicate.first_offset
                info.last_offset = duplicate.last_offset
                info.max_timestamp = duplicate.timestamp
                info.is_duplicate = True
                return info
            try:
                segment.append(info.last_offset, info.max_timestamp, info.shallow_offset_of_max_timestamp, parts)
            except (OSError, KafkaStorageError) as e:
                raise self._io_failure("appending records to", e) from e
            self._log_end_offset = info.last_offset + 1
            self._apply_producer_state(pending, segment)
            self._assign_epochs(
                validated if assign_offsets else batches, leader_epoch if assign_offsets else None, info
            )
            return self._complete_append(info)

    def _assign_epochs(self, batches: Sequence[AnyBatch], leader_epoch: int | None, info: LogAppendInfo) -> None:
        """The leader epoch cache after an append (UnifiedLog.append): each v2 batch's partition leader epoch
        starts at its base offset (for a leader's append, the epoch it stamped, at the first offset); a batch
        of an older format clears the cache, as Kafka does, so that truncation falls back to the HW."""
        cache = self.leader_epoch_cache
        if any(b.magic < 2 for b in batches):
            if len(cache):
                cache.clear_and_flush()
            return
        if leader_epoch is not None:
            cache.maybe_assign(leader_epoch, info.first_offset)
            return
        for batch in batches:
            cache.maybe_assign(batch.partition_leader_epoch, batch.base_offset)

    def _analyze_producer_state(
        self, validated: Sequence[AnyBatch], origin: AppendOrigin
    ) -> tuple[BatchMetadata | None, _PendingProducerState]:
        """Producer checks before the write: a duplicate batch, or the per-producer updates to apply after."""
        updates: dict[int, ProducerAppendInfo] = {}
        completed: list[CompletedTxn] = []
        for batch in validated:
            if not batch.has_producer_id:
                continue
            if origin == CLIENT and batch.magic >= 2:
                duplicate = self.producer_state.find_duplicate_batch(batch)
                if duplicate is not None:
                    return duplicate, ([], [])
            info = updates.get(batch.producer_id)
            if info is None:
                info = self.producer_state.prepare_update(batch.producer_id, origin=origin)
                updates[batch.producer_id] = info
            done = info.append(batch)
            if done is not None:
                completed.append(done)
        return None, (list(updates.values()), completed)

    def _apply_producer_state(self, pending: _PendingProducerState, segment: LogSegment) -> None:
        infos, completed = pending
        for info in infos:
            self.producer_state.update(info)
        for txn in completed:
            lso = self.producer_state.last_stable_offset(txn)
            segment.update_txn_index(txn, lso)
            self.producer_state.complete_txn(txn)
