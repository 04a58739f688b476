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
from typing import Any

from ..clock import SYSTEM_TIME, Time
from ..errors import (
    KafkaStorageError,
    OffsetOutOfRangeError,
)
from ..layout import (
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    INT32_MAX,
    LOG_SUFFIX,
    SNAPSHOT_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    parse_partition_dir,
    segment_file,
)
from ..record.scan import AnyBatch
from ..record.types import Record
from . import metadata_changes
from .checkpoints import CheckpointError, LeaderEpochCheckpointFile
from .config import LogConfig
from .file_records import EMPTY_SLICE
from .files import delete_if_exists, fsync_dir
from .leader_epoch import LeaderEpochFileCache
from .loader import LoadedOffsets, load_log, open_segment
from .log_append import LogAppend
from .log_compaction import CleanerSupport
from .producer_snapshot import sync_snapshot_if_exists
from .producer_state import ProducerStateManager
from .retention import RULE_LOG_START, RULE_SIZE, RULE_TIME, plan_topic_retention
from .segment import FetchDataInfo, LogOffsetMetadata, LogSegment, TimestampAndOffset
from .segments import LogSegments
from .txn_index import AbortedTxn
from .validator import (
    LogAppendInfo,
)

log = logging.getLogger(__name__)

_RULE_REASONS = {RULE_LOG_START: "log start offset", RULE_SIZE: "retention size", RULE_TIME: "retention time"}

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


class Log(LogAppend, CleanerSupport):
    """A partition log in ``directory`` (named ``<topic>-<partition>``): Kafka's UnifiedLog over its LocalLog.

    Invariants, held under ``_lock`` between calls:
    - there is always at least one segment; the last is the active one, the only one appended to;
    - segments are ordered by base offset and their offset ranges do not overlap; every offset a segment
      holds is below the next segment's base offset;
    - ``log_start_offset <= high_watermark <= log_end_offset`` and ``recovery_point <= log_end_offset``;
      the log start offset only moves forward, except when a truncation (a follower's, or a full truncation
      to a new start) takes the log end below it;
    - every byte below the recovery point has been fsynced; everything from it on is re-validated by
      recovery after an unclean shutdown;
    - the producer state's map end offset is the log end offset once an append returns;
    - a log taken offline by an I/O error refuses every later read and write (``KafkaStorageError``);
      nothing it holds is changed again until the broker restarts and loads it anew.
    """

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
        # Kafka's UnifiedLog.leaderEpochCache: loaded with the log and truncated to it (LogLoader). (Not ``or``: a
        # cache with no entries is falsy, and the loaded one knows what its file holds.)
        if leader_epoch_cache is None:
            leader_epoch_cache = LeaderEpochFileCache(self.directory / LeaderEpochCheckpointFile.FILE_NAME, entries=[])
        self.leader_epoch_cache = leader_epoch_cache
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
        # Kafka's maybeFlushMetadataFile: what makes this partition's own metadata (its topic id) durable, when
        # its creator deferred that; called before the first append and at close, then dropped.
        self.metadata_flush: Callable[[], None] | None = None

    # ----- opening -------------------------------------------------------------------------
    @classmethod
    def open(
        cls,
        directory: str | Path,
        config: LogConfig | dict[str, Any] | None = None,
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
        if not directory.is_dir():  # a stat: mkdir of an existing dir takes the parent's lock (creating many logs)
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
        log_obj = cls(
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
        if epoch_cache.stale:  # the loader truncated it in memory: written before the first append, or at close
            log_obj.metadata_flush = log_obj._flush_loaded_epochs
        return log_obj

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
        """The last segment, the one appends go to; a log always has one (loading creates it)."""
        segment = self.segments.last()
        assert segment is not None, "a log always has an active segment"
        return segment

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

    # ----- rolling -------------------------------------------------------------------------
    def _maybe_roll(self, messages_size: int, info: LogAppendInfo, now: int | None = None) -> LogSegment:
        segment = self.active_segment
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
        if segment is not None and found is not None:
            return LogOffsetMetadata(offset, segment.base_offset, found[1])
        following = self.segments.higher(segment.base_offset) if segment is not None else None
        if following is None:
            return LogOffsetMetadata(offset, active.base_offset, active.size)
        return LogOffsetMetadata(offset, following.base_offset, 0)

    def _add_aborted_transactions(self, start_offset: int, segment: LogSegment, fetch: FetchDataInfo) -> FetchDataInfo:
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

        def fetch(at: int) -> tuple[list[AnyBatch], list[AbortedTxn] | None]:
            data = self.read(at, max_bytes, isolation, min_one_message=True)
            try:  # the slice's bytes are read here, outside read(): a failed read takes the dir offline too
                return list(data.records.batches()), data.aborted_transactions
            except OSError as e:
                raise self._io_failure("reading", e) from e

        yield from consumer_records(fetch, offset, committed=_isolation(isolation) == "txn_committed")

    # ----- offsets by time -----------------------------------------------------------------
    def offset_for_timestamp(self, timestamp: int) -> TimestampAndOffset | None:
        """ListOffsets: -2 (-4) earliest, -1 latest, -3 max timestamp, else the first record with ts >= timestamp."""
        with self._lock:
            if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
                return TimestampAndOffset(-1, self._log_start_offset)
            if timestamp == LATEST_TIMESTAMP:
                return TimestampAndOffset(-1, self._log_end_offset)
            if timestamp == MAX_TIMESTAMP:
                return self._offset_of_max_timestamp()
            # Any other timestamp, negative ones too, is searched (Kafka's fetchOffsetByTimestamp has no check):
            # below every record's, it finds the first record of the first non-empty segment.
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

        The plan comes from ``storage.retention.plan_topic_retention``; this carries it out walk by walk: roll first
        when a walk takes every segment, move the log start offset, rename the files ``.deleted``. A closed or offline
        log is left alone: a pass that took it from the manager just before its topic was deleted must not rename
        files in a directory that is going (the error would take the log dir offline)."""
        with self._lock:
            if self._closed or self._offline_reason is not None:
                return 0
            segments = list(self.segments)
            plan = plan_topic_retention(
                segments,
                self.config,
                log_start_offset=self._log_start_offset,
                log_end_offset=self._log_end_offset,
                high_watermark=self._high_watermark,
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

    def _delete_segment_files(
        self, segments: list[LogSegment], *, keep_snapshots_of: frozenset[int] = frozenset()
    ) -> None:
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
            metadata_changes.note_change()

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

    def flush_metadata(self) -> None:
        """Run the deferred ``metadata_flush`` if there is one, and write the leader epoch entries it left
        unflushed (before any record is written, at close)."""
        pending = self.metadata_flush
        if pending is not None:
            pending()  # raises while the metadata cannot be written: it stays pending
            self.leader_epoch_cache.flush()
            self.metadata_flush = None

    def _flush_loaded_epochs(self) -> None:
        """``metadata_flush`` of a log whose load truncated its leader epoch cache in memory only (Kafka's
        truncateFromEndAsyncFlush): write the cache, unless the file holds it already (an empty partition made
        leader again at its old epoch), before any record is appended or the log closes."""
        try:
            self.leader_epoch_cache.flush()
        except CheckpointError as e:
            raise KafkaStorageError(
                f"Error while writing the leader epoch checkpoint of {self.topic}-{self.partition}: {e}",
                path=str(self.directory),
            ) from e

    def maybe_assign_epoch_start_offset(self, leader_epoch: int, start_offset: int) -> None:
        """Record in the leader epoch cache that ``leader_epoch`` starts at ``start_offset`` (Kafka's
        UnifiedLog.maybeAssignEpochStartOffset, called by a new leader with its log end offset).

        The entry is written (fsynced) at once, except while ``metadata_flush`` is set: in a new log whose
        creator deferred its files, it is written with them, by the creator's background flush or at the
        latest by ``flush_metadata`` before the first append, so that neither the creating request nor the
        first produce waits for its fsyncs and still no record precedes its epoch on disk; in a log just loaded
        whose cache the loader truncated in memory, it is written with that truncation by the same
        ``flush_metadata`` (and not at all when the file holds it already: a restart of an empty partition).
        An entry at the log end that no record follows yet needs no fsync before one does: a load would drop it.
        """
        self.leader_epoch_cache.assign(leader_epoch, start_offset, flush=self.metadata_flush is None)

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
                self.flush_metadata()
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

    def __exit__(self, *exc: object) -> None:
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
    fetch: Callable[[int], tuple[list[AnyBatch], list[AbortedTxn] | None]], offset: int, *, committed: bool
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


def filter_aborted(batches: list[AnyBatch], aborted: list[AbortedTxn]) -> list[AnyBatch]:
    """Drop the data batches of aborted transactions, as a read_committed consumer does."""
    pending = [(t.first_offset, t.producer_id) for t in aborted]
    heapq.heapify(pending)
    aborting: set[int] = set()
    kept: list[AnyBatch] = []
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
