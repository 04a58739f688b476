"""One partition's log (Kafka's UnifiedLog and LocalLog): appends, rolls, reads, offsets, retention, flushing.

``Log.open(dir, config, clock=...)`` loads (and when needed recovers) a partition directory written by
Kafka or by kafkalog. Appends come as client batches (validated and given offsets as Kafka's
LogValidator does), through a ``RecordBatchBuilder``, or follower-style with their own offsets.
"""

from __future__ import annotations

import heapq
import logging
import random
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from ..clock import SYSTEM_TIME, Time
from ..errors import (
    CorruptRecordError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
)
from ..layout import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    INT32_MAX,
    LOG_SUFFIX,
    SNAPSHOT_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    parse_partition_dir,
    segment_file,
)
from ..record import RecordBatchBuilder, control_batch
from ..record.batch import RECORDS_OFFSET
from ..record.types import ControlRecordType, Record
from .checkpoints import LeaderEpochCheckpointFile
from .config import LogConfig
from .files import delete_if_exists, fsync_dir
from .leader_epoch import LeaderEpochFileCache
from .loader import LoadedOffsets, load_log, open_segment, replay_producer_state
from .overlap import OVERLAP_MIN_BYTES, Check, checker
from .producer_state import ProducerStateEntry, ProducerStateManager, sync_snapshot_if_exists
from .retention import RULE_LOG_START, RULE_SIZE, RULE_TIME, plan_retention
from .segment import EMPTY_SLICE, FetchDataInfo, LogOffsetMetadata, LogSegment, TimestampAndOffset
from .segments import LogSegments
from .txn_index import AbortedTxn
from .validator import (
    CLIENT,
    COORDINATOR,
    MAX_TS_FIELD,
    REPLICATION,
    LogAppendInfo,
    analyze,
    check_follower_offsets,
    check_plain_batch,
    plain_batch_append,
    plain_batch_header,
    validate_and_assign_offsets,
    validate_single_plain_batch,
)

log = logging.getLogger(__name__)

_RULE_REASONS = {RULE_LOG_START: "log start offset", RULE_SIZE: "retention size", RULE_TIME: "retention time"}

_PLACEHOLDER_HEADER = bytes(RECORDS_OFFSET)  # what an overlapped append writes until its check passes


class _Refused(Exception):
    """An overlapped append whose check failed: cut off and retried on the general path."""


EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
ISOLATIONS = {
    "log_end": "log_end",
    "high_watermark": "high_watermark",
    "read_uncommitted": "high_watermark",
    "txn_committed": "txn_committed",
    "read_committed": "txn_committed",
}
DEFAULT_FETCH_BYTES = 1024 * 1024


class Scheduler:
    """What the log asks of a scheduler: run something later (MockScheduler and the manager's fit)."""

    def schedule_once(self, name: str, fn: Callable[[], object], delay_ms: int = 0) -> object: ...


class Log:
    """A partition log in ``directory`` (named ``<topic>-<partition>``)."""

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        clock: Time,
        scheduler: Scheduler | None,
        segments: LogSegments,
        producer_state: ProducerStateManager,
        offsets: LoadedOffsets,
        high_watermark: int | None,
        rng: random.Random,
        auto_high_watermark: bool,
        leader_epoch_cache: LeaderEpochFileCache | None = None,
    ) -> None:
        self.directory = Path(directory)
        self.topic, self.partition = _topic_partition(self.directory)
        self.config = config
        self.clock = clock
        self.scheduler = scheduler
        self.segments = segments
        self.producer_state = producer_state
        # Kafka's UnifiedLog.leaderEpochCache: loaded with the log and truncated to it (LogLoader).
        self.leader_epoch_cache = leader_epoch_cache or LeaderEpochFileCache(
            self.directory / LeaderEpochCheckpointFile.FILE_NAME, entries=[]
        )
        self._rng = rng
        self._lock = threading.RLock()
        self._log_start_offset = offsets.log_start_offset
        self._recovery_point = offsets.recovery_point
        self._log_end_offset = offsets.next_offset
        # Whether appends move the high watermark, and by which rule: a standalone log is its own single-replica
        # leader (HW = log end after each append); a Partition that leads the log installs its rule
        # (maybeIncrementLeaderHW over its ISR) as ``leader_hw_rule``, run under this log's lock.
        self.auto_high_watermark = auto_high_watermark
        self.leader_hw_rule: Callable[[], None] | None = None
        hw = offsets.next_offset if high_watermark is None and auto_high_watermark else (high_watermark or 0)
        self._high_watermark = 0
        self._set_high_watermark(hw)
        self._last_flush_ms = clock.milliseconds()
        self._closed = False
        # Segments renamed .deleted whose files go after file.delete.delay.ms, by base offset.
        self._pending_deletes: dict[int, LogSegment] = {}
        self._offline_reason: str | None = None
        # Kafka's LogDirFailureChannel: called with (log, error) after an I/O error (the LogManager sets it).
        self.on_io_error: Callable[[Log, Exception], None] | None = None

    # ----- opening -------------------------------------------------------------------------
    @classmethod
    def open(
        cls,
        directory: str | Path,
        config: LogConfig | dict | None = None,
        clock: Time | None = None,
        *,
        log_start_offset: int = 0,
        recovery_point: int = 0,
        high_watermark: int | None = None,
        had_clean_shutdown: bool = False,
        scheduler: Scheduler | None = None,
        rng: random.Random | None = None,
        producer_id_expiration_ms: int = 86_400_000,
        auto_high_watermark: bool = True,
    ) -> Log:
        """Open (creating when absent) the partition log in ``directory``, recovering what must be.

        ``recovery_point`` and ``log_start_offset`` are the values from the log dir's checkpoints;
        with ``had_clean_shutdown`` false, everything from the recovery point on is re-validated.
        """

        directory = Path(directory)
        config = config if isinstance(config, LogConfig) else LogConfig(config or {})
        clock = clock or SYSTEM_TIME
        if scheduler is None:
            scheduler = getattr(clock, "scheduler", None)
        rng = rng or random.Random()
        directory.mkdir(parents=True, exist_ok=True)
        producer_state = ProducerStateManager(directory, producer_id_expiration_ms, clock)
        epoch_cache = LeaderEpochFileCache(directory / LeaderEpochCheckpointFile.FILE_NAME)
        segments, offsets = load_log(
            directory,
            config,
            clock,
            producer_state,
            rng=rng,
            log_start_offset=log_start_offset,
            recovery_point=recovery_point,
            had_clean_shutdown=had_clean_shutdown,
            leader_epoch_cache=epoch_cache,
        )
        return cls(
            directory,
            config,
            clock,
            scheduler,
            segments,
            producer_state,
            offsets,
            high_watermark,
            rng,
            auto_high_watermark,
            epoch_cache,
        )

    # ----- offsets -------------------------------------------------------------------------
    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._log_end_offset

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def last_flush_ms(self) -> int:
        return self._last_flush_ms

    @property
    def active_segment(self) -> LogSegment:
        return self.segments.last()

    @property
    def size(self) -> int:
        return sum(s.size for s in self.segments)

    def update_high_watermark(self, offset: int) -> int:
        """Set the high watermark, kept within [log start, log end] (UnifiedLog.updateHighWatermark)."""
        with self._lock:
            return self._set_high_watermark(offset)

    def _set_high_watermark(self, offset: int) -> int:
        self._high_watermark = min(max(offset, self._log_start_offset), self._log_end_offset)
        self.producer_state.on_high_watermark_updated(self._high_watermark)
        return self._high_watermark

    @property
    def first_unstable_offset(self) -> int | None:
        return self.producer_state.first_unstable_offset()

    @property
    def last_stable_offset(self) -> int:
        """The LSO: the first offset of any open transaction, capped by the high watermark."""
        unstable = self.first_unstable_offset
        return min(unstable, self._high_watermark) if unstable is not None else self._high_watermark

    # ----- appending -----------------------------------------------------------------------
    def append(self, records, *, origin: str = CLIENT, leader_epoch: int | None = None) -> LogAppendInfo:
        """Append client batches, validated and given offsets as Kafka's leader does.

        The batches are stamped with ``leader_epoch`` (default: the latest epoch of the leader epoch cache, 0 for
        a log without one), which the cache records from the append's first offset when it is new.

        ``records`` is batch bytes, a RecordBatchBuilder, or a list of records: ``Record`` objects or
        (key, value[, timestamp[, headers]]) tuples, which go into one uncompressed batch.
        """
        if type(records) is not bytes:
            if isinstance(records, RecordBatchBuilder):
                records = records.build()
            elif isinstance(records, list | tuple):
                records = self._build(records)
            elif not isinstance(records, bytearray | memoryview):
                raise TypeError(
                    "records must be batch bytes, a RecordBatchBuilder or a list of records, "
                    f"not {type(records).__name__}"
                )
            records = bytes(records)
        if leader_epoch is None:
            latest = self.leader_epoch_cache._latest
            leader_epoch = latest if latest >= 0 else 0
        return self._append(records, origin=origin, leader_epoch=leader_epoch, assign_offsets=True)

    def _build(self, records) -> bytes:
        builder = RecordBatchBuilder(clock=self.clock)
        for record in records:
            if isinstance(record, Record):
                builder.append(record.key, record.value, record.timestamp, record.headers)
            else:
                builder.append(*record)
        return builder.build()

    def append_as_follower(self, records) -> LogAppendInfo:
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

    def _append(self, records: bytes, *, origin: str, leader_epoch: int, assign_offsets: bool) -> LogAppendInfo:
        if assign_offsets and origin == CLIENT:
            with self._lock:
                now = self.clock.milliseconds()
                if len(records) < OVERLAP_MIN_BYTES:
                    fast = validate_single_plain_batch(records, self._log_end_offset, now, self.config, leader_epoch)
                    if fast is not None:
                        return self._append_validated(*fast, now, epoch=leader_epoch)
                else:
                    appended = self._append_large(records, now, leader_epoch)
                    if appended is not None:
                        return appended
        return self._append_general(records, origin=origin, leader_epoch=leader_epoch, assign_offsets=assign_offsets)

    def _append_large(self, records: bytes, now: int, leader_epoch: int) -> LogAppendInfo | None:
        """The common client append (see ``validate_single_plain_batch``) of a large batch, checked on the
        background thread while it is written. None hands it to the general path, which raises Kafka's
        exact error."""
        header = plain_batch_header(records, self.config)
        if header is None:
            return None
        check = checker.start(check_plain_batch, records, header, now, self.config)
        if check is None:  # the background thread is busy with another log's append
            max_ts = check_plain_batch(records, header, now, self.config)
        else:
            parts, size, info = plain_batch_append(
                records, header, header[MAX_TS_FIELD], self._log_end_offset, leader_epoch
            )
            self._check_open()
            segment = self.segments.last()
            if size <= self.config.segment_bytes and not self._roll_due(segment, size, info, now):
                return self._append_overlapped(segment, parts, size, info, now, check, leader_epoch)
            max_ts = check.result()  # Kafka rolls only for a valid batch: check it first
        if max_ts is None:
            return None
        return self._append_validated(
            *plain_batch_append(records, header, max_ts, self._log_end_offset, leader_epoch), now, epoch=leader_epoch
        )

    def _append_overlapped(
        self, segment: LogSegment, parts: list, size: int, info: LogAppendInfo, now: int, check: Check, epoch: int
    ) -> LogAppendInfo | None:
        """Write a batch under a placeholder header while ``check`` runs; only a batch that passes gets
        its real header and becomes visible. One that fails (or whose header's max timestamp was wrong)
        is cut off and goes to the general path. A crash in between leaves a zero header, which recovery
        truncates, as Kafka's would."""
        header = parts[0]

        def before_commit() -> bytes:
            if check.result() != info.max_timestamp:
                raise _Refused
            return header

        try:
            return self._append_validated(
                [_PLACEHOLDER_HEADER, parts[1]], size, info, now, segment, before_commit, epoch=epoch
            )
        except _Refused:
            return None

    def _append_validated(
        self,
        parts: list,
        size: int,
        info: LogAppendInfo,
        now: int,
        segment: LogSegment | None = None,
        before_commit: Callable[[], bytes | None] | None = None,
        *,
        epoch: int,
    ) -> LogAppendInfo:
        """Write a validated append with no producer state involved, rolling first unless ``segment`` is
        given (``before_commit``: see ``FileRecords.append``)."""
        self._check_open()
        self._check_fits_segment(size)
        try:
            if segment is None:
                segment = self._maybe_roll(size, info, now)
            segment.append(
                info.last_offset, info.max_timestamp, info.shallow_offset_of_max_timestamp, parts, size, before_commit
            )
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

    def _append_general(self, records: bytes, *, origin: str, leader_epoch: int, assign_offsets: bool) -> LogAppendInfo:
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
                valid = result.parts
                valid_size = result.size
                validated = result.batches
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
                valid = [valid]
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
                duplicate, pending = None, ((), ())
            if duplicate is not None:
                info.first_offset = duplicate.first_offset
                info.last_offset = duplicate.last_offset
                info.max_timestamp = duplicate.timestamp
                info.is_duplicate = True
                return info
            try:
                segment.append(info.last_offset, info.max_timestamp, info.shallow_offset_of_max_timestamp, valid)
            except (OSError, KafkaStorageError) as e:
                raise self._io_failure("appending records to", e) from e
            self._log_end_offset = info.last_offset + 1
            self._apply_producer_state(pending, segment)
            self._assign_epochs(
                validated if assign_offsets else batches, leader_epoch if assign_offsets else None, info
            )
            return self._complete_append(info)

    def _assign_epochs(self, batches: list, leader_epoch: int | None, info: LogAppendInfo) -> None:
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

    def _analyze_producer_state(self, validated: list, origin: str):
        """Producer checks before the write: a duplicate batch, or the per-producer updates to apply after."""
        updates: dict[int, object] = {}
        completed = []
        for batch in validated:
            if not batch.has_producer_id:
                continue
            if origin == CLIENT and batch.magic >= 2:
                duplicate = self.producer_state.find_duplicate_batch(batch)
                if duplicate is not None:
                    return duplicate, None
            info = updates.get(batch.producer_id)
            if info is None:
                info = self.producer_state.prepare_update(batch.producer_id, origin=origin)
                updates[batch.producer_id] = info
            done = info.append(batch)
            if done is not None:
                completed.append(done)
        return None, (list(updates.values()), completed)

    def _apply_producer_state(self, pending, segment: LogSegment) -> None:
        infos, completed = pending
        for info in infos:
            self.producer_state.update(info)
        for txn in completed:
            lso = self.producer_state.last_stable_offset(txn)
            segment.update_txn_index(txn, lso)
            self.producer_state.complete_txn(txn)

    # ----- rolling -------------------------------------------------------------------------
    def _maybe_roll(self, messages_size: int, info: LogAppendInfo, now: int | None = None) -> LogSegment:
        segment = self.segments.last()
        if self._roll_due(segment, messages_size, info, self.clock.milliseconds() if now is None else now):
            expected = info.first_offset if info.first_offset >= 0 else info.last_offset - INT32_MAX
            return self.roll(expected)
        return segment

    def _roll_due(self, segment: LogSegment, messages_size: int, info: LogAppendInfo, now: int) -> bool:
        config = self.config
        return segment.should_roll_for(
            config.max_segment_ms, config.segment_bytes, info.max_timestamp, info.last_offset, messages_size, now
        )

    def roll(self, expected_next_offset: int | None = None) -> LogSegment:
        """Start a new active segment at max(expected, log end) (LocalLog.roll, UnifiedLog.roll).

        An I/O error (creating the segment, writing the producer snapshot) takes the log and its dir
        offline with KafkaStorageError, as Kafka's roll inside maybeHandleIOException does.
        """
        with self._lock:
            self._check_open()
            try:
                return self._roll(expected_next_offset)
            except OSError as e:
                raise self._io_failure("rolling a new segment of", e) from e

    def _roll(self, expected_next_offset: int | None) -> LogSegment:
        with self._lock:
            new_offset = max(expected_next_offset or 0, self._log_end_offset)
            active = self.active_segment
            existing = self.segments.get(new_offset)
            if existing is not None:
                if existing is active and active.size == 0:
                    log.warning(
                        "Trying to roll a new segment at offset %d, replacing the empty active segment", new_offset
                    )
                    self.segments.remove(new_offset)
                    self._delete_segment_files([existing])
                else:
                    raise KafkaStorageError(
                        f"Trying to roll a new log segment for topic partition {self.topic}-{self.partition} with "
                        f"start offset {new_offset} while it already exists."
                    )
            elif new_offset < active.base_offset:
                raise KafkaStorageError(
                    f"Trying to roll a new log segment with start offset {new_offset} lower than start offset "
                    f"{active.base_offset} of the active segment"
                )
            else:
                active.on_become_inactive_segment()
            for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
                path = segment_file(self.directory, new_offset, suffix)
                if path.exists():
                    log.warning("Newly rolled segment file %s already exists; deleting it first", path)
                    delete_if_exists(path)
            segment = self._new_segment(new_offset)
            self.segments.add(segment)
            self.producer_state.update_map_end_offset(new_offset)
            snapshot = self.producer_state.take_snapshot(sync=False)

            def flush() -> None:  # UnifiedLog.roll's flush-log task: the snapshot's fsync, then the segments
                self._flush_producer_snapshot(snapshot)
                self._flush_upto(new_offset)

            self._run_async(f"flush-log-{self.topic}-{self.partition}", flush)
            return segment

    def _flush_producer_snapshot(self, snapshot: Path | None) -> None:
        """fsync a snapshot that a roll wrote without syncing (UnifiedLog.flushProducerStateSnapshot)."""
        if snapshot is None:
            return
        with self._lock:
            if self._closed or self._offline_reason is not None:
                return
        try:  # outside the lock, as Kafka: an fsync must not hold up appends
            sync_snapshot_if_exists(snapshot)
        except OSError as e:
            raise self._io_failure("flushing the producer state snapshot of", e) from e

    def _new_segment(self, base_offset: int) -> LogSegment:

        return open_segment(self.directory, base_offset, self.config, self.clock, self._rng)

    def _run_async(self, name: str, fn: Callable[[], object], delay_ms: int = 0) -> None:
        if self.scheduler is not None:
            self.scheduler.schedule_once(name, fn, delay_ms)
        else:
            fn()

    # ----- flushing ------------------------------------------------------------------------
    def flush(self, offset: int | None = None, *, include_active: bool = False) -> None:
        """fsync every segment in [recovery point, offset) and move the recovery point (UnifiedLog.flush)."""
        with self._lock:
            end = self._log_end_offset if offset is None else offset
            self._flush_upto(end + 1 if include_active and end == self._log_end_offset else end)

    def _flush_upto(self, offset: int) -> None:
        with self._lock:
            if self._closed or (offset <= self._recovery_point and offset != self._log_end_offset + 1):
                return
            if self._offline_reason is not None:
                return
            old = self._recovery_point
            flushed = self.segments.values_between(old, offset)
            try:
                for segment in flushed:
                    segment.flush()
                if any(s.base_offset >= old for s in flushed):
                    fsync_dir(self.directory)
            except OSError as e:
                raise self._io_failure(f"flushing log up to offset {offset} of", e) from e
            self._recovery_point = max(self._recovery_point, min(offset, self._log_end_offset))
            self._last_flush_ms = self.clock.milliseconds()

    def flush_if_due(self) -> bool:
        """Flush when ``flush.ms`` has passed since the last flush (the kafka-log-flusher task)."""
        if self.clock.milliseconds() - self._last_flush_ms >= self.config.flush_ms:
            self.flush()
            return True
        return False

    # ----- reading -------------------------------------------------------------------------
    def read(
        self,
        offset: int,
        max_bytes: int = DEFAULT_FETCH_BYTES,
        isolation: str = "high_watermark",
        min_one_message: bool = True,
    ) -> FetchDataInfo:
        """Bytes from the batch holding ``offset`` up to ``max_bytes`` (UnifiedLog.read / LocalLog.read)."""
        isolation = _isolation(isolation)
        with self._lock:
            if self._offline_reason is not None:
                self._check_open()
            try:
                return self._read(offset, max_bytes, isolation, min_one_message)
            except OSError as e:
                raise self._io_failure("reading", e) from e

    def _read(self, offset: int, max_bytes: int, isolation: str, min_one_message: bool) -> FetchDataInfo:
        if offset < self._log_start_offset:
            raise OffsetOutOfRangeError(
                f"Received request for offset {offset} for partition {self.topic}-{self.partition}, but we only "
                f"have log segments starting from offset: {self._log_start_offset}.",
                offset=offset,
            )
        if isolation == "log_end":
            upper = self._log_end_offset
        elif isolation == "high_watermark":
            upper = self._high_watermark
        else:
            upper = self.last_stable_offset
        segment = self.segments.floor(offset)
        if offset > self._log_end_offset or segment is None:
            raise OffsetOutOfRangeError(
                f"Received request for offset {offset} for partition {self.topic}-{self.partition}, but we only "
                f"have log segments upto {self._log_end_offset}.",
                offset=offset,
            )
        if offset >= upper:
            return FetchDataInfo(LogOffsetMetadata(offset), EMPTY_SLICE)
        upper_md = self._offset_metadata(upper)
        while segment is not None:
            if segment.base_offset < upper_md.segment_base_offset:
                max_position = segment.size
            elif segment.base_offset == upper_md.segment_base_offset:
                max_position = upper_md.relative_position_in_segment
            else:
                max_position = None
            fetch = segment.read(offset, max_bytes, max_position, min_one_message)
            if fetch is not None:
                if isolation == "txn_committed":
                    return self._add_aborted_transactions(offset, segment, fetch)
                return fetch
            segment = self.segments.higher(segment.base_offset)
        return FetchDataInfo(LogOffsetMetadata(self._log_end_offset), EMPTY_SLICE)

    def _offset_metadata(self, offset: int) -> LogOffsetMetadata:
        """Where ``offset`` sits: its segment and the position of the batch holding it."""
        active = self.active_segment
        if offset == self._log_end_offset:
            return LogOffsetMetadata(offset, active.base_offset, active.size)
        segment = self.segments.floor(offset)
        found = segment.translate_offset(offset) if segment is not None else None
        if found is None:
            following = self.segments.higher(segment.base_offset) if segment is not None else None
            if following is None:
                return LogOffsetMetadata(offset, active.base_offset, active.size)
            return LogOffsetMetadata(offset, following.base_offset, 0)
        return LogOffsetMetadata(offset, segment.base_offset, found[1])

    def _add_aborted_transactions(self, start_offset: int, segment: LogSegment, fetch: FetchDataInfo):
        start_position = fetch.fetch_offset_metadata.relative_position_in_segment
        upper = segment.fetch_upper_bound_offset(start_position, fetch.records.size)
        if upper is None:
            following = self.segments.higher(segment.base_offset)
            upper = following.base_offset if following is not None else self._log_end_offset
        aborted: list[AbortedTxn] = []
        for candidate in self.segments.values_from(segment.base_offset):
            result = candidate.collect_aborted_txns(start_offset, upper)
            aborted.extend(result.aborted)
            if result.is_complete:
                break
        return FetchDataInfo(fetch.fetch_offset_metadata, fetch.records, fetch.first_entry_incomplete, aborted)

    def records(
        self, from_offset: int | None = None, isolation: str = "read_uncommitted", max_bytes: int = DEFAULT_FETCH_BYTES
    ) -> Iterator[Record]:
        """Every record from ``from_offset`` (default: the log start) up to the isolation's bound, as a consumer
        sees them: control records left out, and with read_committed, aborted transactions too."""
        offset = self._log_start_offset if from_offset is None else from_offset

        def fetch(at: int) -> tuple[list, list[AbortedTxn] | None]:
            data = self.read(at, max_bytes, isolation, min_one_message=True)
            try:  # the slice's bytes are read here, outside read(): a failed read takes the dir offline too
                return list(data.records.batches()), data.aborted_transactions
            except OSError as e:
                raise self._io_failure("reading", e) from e

        yield from consumer_records(fetch, offset, committed=_isolation(isolation) == "txn_committed")

    # ----- offsets by time -----------------------------------------------------------------
    def offset_for_timestamp(self, timestamp: int) -> TimestampAndOffset | None:
        """ListOffsets: -2 earliest, -1 latest, -3 max timestamp, or the first record with ts >= timestamp."""
        with self._lock:
            if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
                return TimestampAndOffset(-1, self._log_start_offset)
            if timestamp == LATEST_TIMESTAMP:
                return TimestampAndOffset(-1, self._log_end_offset)
            if timestamp == MAX_TIMESTAMP:
                return self._offset_of_max_timestamp()
            if timestamp < 0:
                raise ValueError(f"Invalid timestamp {timestamp} for ListOffsets")
            for segment in self.segments:
                if segment.largest_timestamp >= timestamp:
                    return segment.find_offset_by_timestamp(timestamp, self._log_start_offset)
            return None

    def _offset_of_max_timestamp(self) -> TimestampAndOffset | None:
        best = None
        for segment in self.segments:
            if best is None or segment.max_timestamp_so_far > best.max_timestamp_so_far:
                best = segment
        if best is None or best.max_timestamp_so_far < 0:
            return None
        max_ts = best.max_timestamp_so_far
        position = best.offset_index.lookup(best.shallow_offset_of_max_timestamp_so_far).position
        for _, batch in best.log.batches(position):
            if batch.max_timestamp == max_ts:
                for record in batch:
                    if record.timestamp == max_ts:
                        return TimestampAndOffset(max_ts, record.offset)
        return None

    # ----- log start offset, retention, truncation -----------------------------------------
    def delete_records(self, offset: int) -> int:
        """DeleteRecords: move the log start offset forward (up to the high watermark); return the new start."""
        self.maybe_increment_log_start_offset(offset)
        return self._log_start_offset

    def maybe_increment_log_start_offset(self, new_start: int) -> bool:
        with self._lock:
            if new_start > self._high_watermark:
                raise OffsetOutOfRangeError(
                    f"Cannot increment the log start offset to {new_start} of partition {self.topic}-{self.partition}"
                    f" since it is larger than the high watermark {self._high_watermark}",
                    offset=new_start,
                )
            if new_start <= self._log_start_offset:
                return False
            self._log_start_offset = new_start
            if self._recovery_point < new_start:
                self._recovery_point = new_start
            self.leader_epoch_cache.truncate_from_start(new_start)
            self.producer_state.on_log_start_offset_incremented(new_start)
            return True

    def delete_old_segments(self) -> int:
        """One retention pass (UnifiedLog.deleteOldSegments): log start, size and time rules; return segments.

        The plan comes from ``storage.retention.plan_retention``; this carries it out walk by walk: roll first when
        a walk takes every segment, move the log start offset, rename the files ``.deleted``. A closed or offline
        log is left alone: a pass that took it from the manager just before its topic was deleted must not rename
        files in a directory that is going (the error would take the log dir offline)."""
        with self._lock:
            if self._closed or self._offline_reason is not None:
                return 0
            segments = list(self.segments)
            plan = plan_retention(
                segments,
                log_start_offset=self._log_start_offset,
                log_end_offset=self._log_end_offset,
                high_watermark=self._high_watermark,
                delete_policy=self.config.delete,
                retention_bytes=self.config.retention_bytes,
                retention_ms=self.config.retention_ms,
                now_ms=self.clock.milliseconds(),
            )
            deleted = 0
            for rule, indexes in plan.by_rule():
                if rule == plan.rolled_by:
                    self.roll()
                deletable = [segments[i] for i in indexes]
                following = self.segments.higher(deletable[-1].base_offset)
                if following is not None:
                    self.maybe_increment_log_start_offset(following.base_offset)
                for segment in deletable:
                    self.segments.remove(segment.base_offset)
                log.info("Deleting %d segments of %s-%s due to %s", len(deletable), self.topic, self.partition,
                         _RULE_REASONS[rule])  # fmt: skip
                self._delete_segment_files(deletable)
                deleted += len(deletable)
            return deleted

    def _delete_segment_files(self, segments: list[LogSegment], *, keep_snapshots_of: frozenset = frozenset()) -> None:
        """Rename to .deleted now, remove after file.delete.delay.ms (LocalLog.deleteSegmentFiles).

        A segment of the same base offset may still be waiting (the cleaner replaces the first segment of a log
        again and again): it is deleted now, before its ``.deleted`` names are taken. Renaming over them would
        leave its descriptor and index maps on unlinked files until its delete ran, and that delete would then
        unlink the newer segment's files while they are still open.
        """
        for segment in segments:
            earlier = self._pending_deletes.pop(segment.base_offset, None)
            if earlier is not None:
                earlier.delete_if_exists()
            segment.rename_to_deleted()
            self._pending_deletes[segment.base_offset] = segment
            if segment.base_offset not in keep_snapshots_of:
                self.producer_state.rename_snapshot_to_deleted(segment.base_offset)

        def delete() -> None:
            with self._lock:
                for segment in segments:
                    if self._pending_deletes.get(segment.base_offset) is not segment:
                        continue  # deleted already: replaced by a later one, or the log was closed
                    del self._pending_deletes[segment.base_offset]
                    segment.delete_if_exists()
                    delete_if_exists(segment_file(self.directory, segment.base_offset, SNAPSHOT_SUFFIX, DELETED_SUFFIX))

        self._run_async("delete-file", delete, self.config.file_delete_delay_ms)

    # ----- compaction support (UnifiedLog's methods the cleaner calls) --------------------------
    def log_segments(self, from_offset: int, to_offset: int) -> list[LogSegment]:
        """Segments that may hold offsets in [from, to): empty when from == to (LogSegments.values)."""
        if from_offset == to_offset:
            return []
        if to_offset < from_offset:
            raise ValueError(f"Invalid log segment range: requested segments from {from_offset} to {to_offset}")
        with self._lock:  # the cleaner swaps segments in on its flush thread
            return self.segments.values_between(from_offset, to_offset)

    def non_active_segments_from(self, offset: int) -> list[LogSegment]:
        """Every segment from the one holding ``offset`` up to, not including, the active one."""
        with self._lock:
            active = self.active_segment
            if offset > active.base_offset:
                return []
            return self.log_segments(offset, active.base_offset)

    def collect_aborted_transactions(self, start_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping [start, upper), from the txn indexes (collectAbortedTransactions)."""
        with self._lock:  # a consistent list while the cleaner swaps segments in on its flush thread
            first = self.segments.floor(start_offset)
            segments = self.segments.values_from(first.base_offset) if first is not None else []
        aborted: list[AbortedTxn] = []
        for segment in segments:
            result = segment.collect_aborted_txns(start_offset, upper_bound_offset)
            aborted.extend(result.aborted)
            if result.is_complete:
                break
        return aborted

    def active_producers(self) -> list[ProducerStateEntry]:
        """A consistent copy of every active producer's state (UnifiedLog.activeProducers, for DescribeProducers).

        Copies are taken under the log's lock, so no append is half-applied in what is returned."""
        with self._lock:
            return [entry.copy() for entry in self.producer_state.active_producers.values()]

    def last_records_of_active_producers(self) -> dict[int, tuple[int | None, int]]:
        """producer id → (last data offset or None, producer epoch), for the cleaner's RETAIN_EMPTY rule."""
        with self._lock:
            return {
                pid: (entry.last_data_offset if entry.last_data_offset >= 0 else None, entry.producer_epoch)
                for pid, entry in self.producer_state.active_producers.items()
            }

    def new_cleaned_segment(self, base_offset: int) -> LogSegment:
        """An empty ``.cleaned`` segment at ``base_offset`` (UnifiedLog.createNewCleanedSegment)."""

        for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
            delete_if_exists(segment_file(self.directory, base_offset, suffix, CLEANED_SUFFIX))
        return open_segment(self.directory, base_offset, self.config, self.clock, self._rng, suffix=CLEANED_SUFFIX)

    def replace_segments(self, new_segments: list[LogSegment], old_segments: list[LogSegment]) -> None:
        """Swap cleaned segments in for the ones they replace, crash-safely (LocalLog.replaceSegments).

        ``.cleaned`` → ``.swap`` (highest first), into the segment map, old files → ``.deleted`` (removed
        later), ``.swap`` → final names, fsync the directory. A crash between any two renames is finished or
        rolled back by the loader.
        """
        with self._lock:
            self._check_open()
            new_sorted = sorted(new_segments, key=lambda s: s.base_offset)
            old_sorted = sorted(
                (s for s in old_segments if self.segments.get(s.base_offset) is s), key=lambda s: s.base_offset
            )
            for segment in reversed(new_sorted):
                segment.change_file_suffixes(CLEANED_SUFFIX, SWAP_SUFFIX)
            for segment in reversed(new_sorted):
                self.segments.add(segment)
            new_bases = frozenset(s.base_offset for s in new_sorted)
            for segment in old_sorted:
                if segment.base_offset != new_sorted[0].base_offset:
                    self.segments.remove(segment.base_offset)
                self._delete_segment_files([segment], keep_snapshots_of=new_bases)
            for segment in new_sorted:
                segment.change_file_suffixes(SWAP_SUFFIX, "")
            fsync_dir(self.directory)

    def truncate_to(self, target_offset: int) -> bool:
        """Remove every record at or after ``target_offset`` (UnifiedLog.truncateTo); True when anything went."""
        if target_offset < 0:
            raise ValueError(f"Cannot truncate partition {self.topic}-{self.partition} to a negative offset")
        with self._lock:
            if target_offset >= self._log_end_offset:
                return False
            first = self.segments.first()
            if first is not None and first.base_offset > target_offset:
                self.truncate_fully_and_start_at(target_offset)
                return True
            doomed = [s for s in self.segments if s.base_offset > target_offset]
            for segment in doomed:
                self.segments.remove(segment.base_offset)
            if doomed:
                self._delete_segment_files(doomed)
            self.active_segment.truncate_to(target_offset)
            self.active_segment.reset_index_sizes()
            self._log_end_offset = target_offset
            self._log_start_offset = min(self._log_start_offset, target_offset)
            self._recovery_point = min(self._recovery_point, target_offset)
            self._high_watermark = min(self._high_watermark, target_offset)
            self.leader_epoch_cache.truncate_from_end(target_offset)
            self.producer_state.truncate_and_reload(self._log_start_offset, target_offset, self.clock.milliseconds())

            replay_producer_state(self.producer_state, self.segments, self._log_start_offset, target_offset)
            return True

    def truncate_fully_and_start_at(self, new_offset: int) -> None:
        """Delete every segment and restart the log, empty, at ``new_offset``."""
        with self._lock:
            doomed = list(self.segments)
            for segment in doomed:
                self.segments.remove(segment.base_offset)
            self._delete_segment_files(doomed)
            self.segments.add(self._new_segment(new_offset))
            self._log_start_offset = new_offset
            self._log_end_offset = new_offset
            self._recovery_point = new_offset
            self._high_watermark = new_offset
            self.leader_epoch_cache.clear_and_flush()
            self.producer_state.truncate_fully_and_start_at(new_offset)

    # ----- lifecycle -----------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._offline_reason is not None:
            raise KafkaStorageError(
                f"Log for partition {self.topic}-{self.partition} is in the offline log directory "
                f"{self.directory.parent} ({self._offline_reason})",
                path=str(self.directory),
            )
        if self._closed:
            raise KafkaStorageError(f"The log for {self.topic}-{self.partition} is closed", path=str(self.directory))

    # ----- I/O failures (UnifiedLog/LocalLog.maybeHandleIOException, LogDirFailureChannel) ----
    @property
    def is_offline(self) -> bool:
        return self._offline_reason is not None

    @property
    def offline_reason(self) -> str | None:
        return self._offline_reason

    def mark_offline(self, reason: str) -> None:
        """Refuse every later append, read and flush with KafkaStorageError (its log dir failed)."""
        if self._offline_reason is None:
            self._offline_reason = reason

    def _io_failure(self, action: str, error: Exception) -> Exception:
        """Turn an I/O error into Kafka's KafkaStorageError, take the log (and, through ``on_io_error``, its
        log dir) offline, and return the error to raise. Other errors come back unchanged.

        A failed append whose partial bytes were cut off again (``rolled_back``) leaves this log consistent;
        it goes offline only through its dir. Any other failure (a failed flush, or an append whose partial
        bytes could not be removed) takes the log offline at once: what is on disk is no longer known.
        """
        if getattr(error, "io_failure_handled", False):
            return error
        if isinstance(error, KafkaStorageError):
            cause = getattr(error, "io_error", None)
            if cause is None:
                return error  # a storage error that is not an I/O failure (e.g. a roll onto an existing segment)
            rolled_back = getattr(error, "rolled_back", False)
        else:
            cause, rolled_back = error, False
        where = str(getattr(cause, "filename", None) or self.directory)
        exc = KafkaStorageError(
            f"Error while {action} {self.topic}-{self.partition} in dir {self.directory.parent}: "
            f"{getattr(cause, 'strerror', None) or cause}",
            path=where,
        )
        exc.io_error = cause
        exc.rolled_back = rolled_back
        exc.io_failure_handled = True
        if not rolled_back:
            self.mark_offline(f"I/O error while {action} the log: {getattr(cause, 'strerror', None) or cause}")
        log.error("%s", exc)
        callback = self.on_io_error
        if callback is not None:
            callback(self, exc)
        return exc

    def close(self) -> None:
        """Flush everything, snapshot the producer state, and close every segment (a clean shutdown)."""
        with self._lock:
            if self._closed:
                return
            # Segments still waiting for their delayed delete would keep their descriptors and index maps for
            # good once the scheduler has stopped: close them now. Their .deleted files stay, as in Kafka, and
            # the next startup removes them.
            for segment in self._pending_deletes.values():
                segment.close_handlers()
            self._pending_deletes.clear()
            if self._offline_reason is not None:  # Kafka closes an offline log's handles, writing nothing
                for segment in self.segments:
                    segment.close_handlers()
                self._closed = True
                return
            try:
                self.flush(include_active=True)
                self.producer_state.take_snapshot()
            except (OSError, KafkaStorageError) as e:
                # UnifiedLog.close: takeSnapshot in maybeHandleIOException; the dir goes offline, so no
                # clean-shutdown marker is written for it and the next start recovers it.
                error = self._io_failure("closing", e)
                for segment in self.segments:
                    segment.close_handlers()
                self._closed = True
                raise error from e
            for segment in self.segments:
                segment.close()
            self._closed = True

    def __enter__(self) -> Log:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"Log({self.directory}, start={self._log_start_offset}, end={self._log_end_offset}, "
            f"hw={self._high_watermark}, segments={len(self.segments)})"
        )


def _topic_partition(directory: Path) -> tuple[str, int]:
    try:
        return parse_partition_dir(directory.name)
    except ValueError:
        return directory.name, 0


def _isolation(name: str) -> str:
    try:
        return ISOLATIONS[name]
    except KeyError:
        raise ValueError(f"Unknown isolation level {name!r}: use read_uncommitted or read_committed") from None


def consumer_records(
    fetch: Callable[[int], tuple[list, list[AbortedTxn] | None]], offset: int, *, committed: bool
) -> Iterator[Record]:
    """Records as a consumer sees them, fetch after fetch from ``offset``: control records left out, and with
    ``committed`` the records of aborted transactions too. ``fetch(offset)`` gives the batches read from
    ``offset`` and the aborted transactions among them; an empty fetch ends the iteration.

    As a consumer, the iteration moves past every batch it fetched, aborted and control ones included, and
    skips the records before ``offset`` of the first batch (a fetch returns the whole batch holding it)."""
    while True:
        batches, aborted = fetch(offset)
        if not batches:
            return
        last_next = batches[-1].next_offset
        if committed:
            batches = filter_aborted(batches, aborted or [])
        for batch in batches:
            if batch.is_control:
                continue
            for record in batch:
                if record.offset >= offset:
                    yield record
        if last_next <= offset:
            return
        offset = last_next


def filter_aborted(batches: list, aborted: list[AbortedTxn]) -> list:
    """Drop the data batches of aborted transactions, as a read_committed consumer does."""
    pending = [(t.first_offset, t.producer_id) for t in aborted]
    heapq.heapify(pending)
    aborting: set[int] = set()
    kept = []
    for batch in batches:
        while pending and pending[0][0] <= batch.last_offset:
            aborting.add(heapq.heappop(pending)[1])
        if batch.is_transactional and batch.producer_id in aborting:
            if batch.is_control:
                aborting.discard(batch.producer_id)
                kept.append(batch)
            continue
        kept.append(batch)
    return kept
