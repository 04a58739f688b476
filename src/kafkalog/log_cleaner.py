"""The log cleaner of a LogManager: Kafka's ``LogCleaner`` and ``LogCleanerManager``.

It keeps ``cleaner-offset-checkpoint`` in each log dir, tracks which partitions are being cleaned, paused
or uncleanable, picks the dirtiest eligible compacted log, and cleans it with a ``storage.cleaner.Cleaner``.
``clean_once`` is one synchronous pass; the ``kafka-log-cleaner-thread-N`` threads (or, on a simulated
clock, a scheduled task) run the same pass every ``log.cleaner.backoff.ms`` when there was nothing to do.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .errors import KafkaStorageError, LogCleaningAbortedError, LogCleaningError
from .storage.checkpoints import CheckpointError, OffsetCheckpointFile
from .storage.cleaner import (
    Cleaner,
    CleanerStats,
    LogToClean,
    Throttler,
    check_not_aborted,
    cleanable_offsets,
    max_compaction_delay,
)
from .storage.config import BrokerConfig
from .storage.offset_map import SkimpyOffsetMap

log = logging.getLogger(__name__)

CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
INT32_MAX = (1 << 31) - 1
IN_PROGRESS, ABORTED, PAUSED = "LogCleaningInProgress", "LogCleaningAborted", "LogCleaningPaused"


@dataclass
class LogCleanResult:
    """One log's clean in a pass: its dirty range before and after, and what it read and wrote."""

    topic: str
    partition: int
    first_dirty_offset: int
    end_offset: int
    cleanable_ratio: float
    stats: CleanerStats | None = None
    error: str | None = None


@dataclass
class CleanerPassStats:
    """What ``clean_once`` did: the logs cleaned (or failed), retention on compacted logs, and the totals."""

    cleaned: list[LogCleanResult] = field(default_factory=list)
    segments_deleted: int = 0
    totals: CleanerStats = field(default_factory=CleanerStats)

    @property
    def logs_cleaned(self) -> int:
        return sum(1 for r in self.cleaned if r.error is None)


@dataclass
class LogCleaningStatus:
    """Per-log figures kept between cleans: last clean time, bytes read/written, dirty ratio when chosen."""

    last_clean_ms: int | None = None
    bytes_read: int = 0
    bytes_written: int = 0
    messages_read: int = 0
    messages_written: int = 0
    dirty_ratio: float = 0.0
    first_dirty_offset: int = 0
    end_offset: int = 0


class LogCleaner:
    """Compaction for every compacted log a LogManager holds."""

    def __init__(
        self,
        broker: BrokerConfig,
        logs: Callable[[], dict],
        dir_of: Callable[[object], Path | None],
        clock,
        log_dirs: list[Path],
    ) -> None:
        self.broker = broker
        self._logs = logs
        self._dir_of = dir_of
        self.clock = clock
        self.log_dirs = list(log_dirs)
        self.threads = max(int(broker.log_cleaner_threads), 1)
        memory = min(int(broker.log_cleaner_dedupe_buffer_size) // self.threads, INT32_MAX)
        self.memory_per_thread = memory
        self.load_factor = float(broker.log_cleaner_io_buffer_load_factor)
        self.throttler = Throttler(float(broker.log_cleaner_io_max_bytes_per_second), clock)
        io_buffer = max(int(broker.log_cleaner_io_buffer_size) // self.threads // 2, 1)
        self._io_buffer = io_buffer
        self._max_io_buffer = max(int(broker.message_max_bytes) + 12, io_buffer)
        self._cleaners: list[Cleaner] = []
        self._lock = threading.RLock()
        self._condition = threading.Condition(self._lock)
        self._in_progress: dict[object, str] = {}
        self._pause_count: dict[object, int] = {}
        self._uncleanable: dict[Path, set] = {}
        self.status: dict[object, LogCleaningStatus] = {}
        self.time_of_last_run_ms = clock.milliseconds()
        self.dirtiest_log_cleanable_ratio = 0.0
        self.max_compaction_delay_ms = 0
        self.last_pass: CleanerPassStats | None = None
        self._threads: list[threading.Thread] = []
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._task = None
        self.dead_thread_count = 0
        for directory in self.log_dirs:
            OffsetCheckpointFile(directory / CLEANER_OFFSET_CHECKPOINT)  # created empty, as Kafka does

    # ----- cleaners (one offset map each) ------------------------------------------------------
    def _cleaner(self, index: int) -> Cleaner:
        with self._lock:
            while len(self._cleaners) <= index:
                offset_map = SkimpyOffsetMap(
                    self.memory_per_thread, float(self.broker.log_cleaner_io_buffer_load_factor)
                )
                self._cleaners.append(
                    Cleaner(
                        offset_map,
                        self.clock,
                        io_buffer_size=self._io_buffer,
                        max_io_buffer_size=self._max_io_buffer,
                        throttler=self.throttler,
                        check_done=check_not_aborted(self._is_aborted),
                        cleaner_id=len(self._cleaners),
                    )
                )
            return self._cleaners[index]

    # ----- checkpoints ---------------------------------------------------------------------------
    def _checkpoint_file(self, directory: Path) -> OffsetCheckpointFile:
        return OffsetCheckpointFile(directory / CLEANER_OFFSET_CHECKPOINT)

    def all_cleaner_checkpoints(self) -> dict:
        """(topic, partition) → first dirty offset, over every log dir (an unreadable file counts as empty)."""
        merged: dict = {}
        for directory in self.log_dirs:
            try:
                merged.update(self._checkpoint_file(directory).read())
            except (CheckpointError, OSError, ValueError) as e:
                log.warning("Failed to access checkpoint file %s: %s", directory / CLEANER_OFFSET_CHECKPOINT, e)
        return merged

    def update_checkpoints(self, directory: Path, *, update: tuple | None = None, remove=None) -> None:
        """Rewrite one dir's checkpoint: set ``update`` = ((topic, partition), offset), drop ``remove``, and
        forget partitions this dir no longer holds."""
        with self._lock:
            file = self._checkpoint_file(directory)
            try:
                entries = file.read()
            except (CheckpointError, OSError, ValueError) as e:
                log.warning("Rewriting the unreadable checkpoint %s: %s", file.path, e)
                entries = {}
            held = {(tp.topic, tp.partition) for tp in self._logs() if self._dir_of(tp) == directory}
            entries = {key: value for key, value in entries.items() if key in held}
            if remove is not None:
                entries.pop(remove, None)
            if update is not None:
                entries[update[0]] = update[1]
            file.write(entries)

    def maybe_truncate_checkpoint(self, tp, directory: Path, offset: int) -> None:
        """After a truncation: lower the partition's checkpoint to ``offset`` when it is above it."""
        with self._lock:
            key = (tp.topic, tp.partition)
            current = self.all_cleaner_checkpoints().get(key)
            if current is not None and current > offset:
                self.update_checkpoints(directory, update=(key, offset))

    def remove_partition(self, tp, directory: Path) -> None:
        """A deleted partition: abort its clean, forget its checkpoint and uncleanable mark."""
        self.abort_cleaning(tp)
        with self._lock:
            self._uncleanable.get(directory, set()).discard(tp)
            self.update_checkpoints(directory, remove=(tp.topic, tp.partition))
            self.status.pop(tp, None)

    # ----- in-progress, abort, pause -------------------------------------------------------------
    def _is_aborted(self, tp) -> bool:
        with self._lock:
            return self._in_progress.get(tp) == ABORTED

    def abort_cleaning(self, tp) -> None:
        """Stop a running clean of ``tp`` and wait for it to end (abortCleaning)."""
        with self._condition:
            if self._in_progress.get(tp) == IN_PROGRESS:
                self._in_progress[tp] = ABORTED
                while self._in_progress.get(tp) == ABORTED:
                    self._condition.wait(0.1)

    def abort_and_pause_cleaning(self, tp) -> None:
        """Abort any clean of ``tp`` and keep it from being cleaned until ``resume_cleaning`` (nested)."""
        self.abort_cleaning(tp)
        with self._lock:
            self._pause_count[tp] = self._pause_count.get(tp, 0) + 1

    def resume_cleaning(self, tp) -> None:
        with self._lock:
            count = self._pause_count.get(tp, 0) - 1
            if count <= 0:
                self._pause_count.pop(tp, None)
            else:
                self._pause_count[tp] = count

    def _done(self, tp) -> None:
        with self._condition:
            self._in_progress.pop(tp, None)
            self._condition.notify_all()

    def state_of(self, tp) -> str:
        """'idle', 'being cleaned', 'paused' or 'uncleanable (a clean failed)', for explanations."""
        with self._lock:
            if tp in self._in_progress:
                return "being cleaned"
            if tp in self._pause_count:
                return "paused"
        return "uncleanable (a previous clean failed)" if self.is_uncleanable(tp) else "idle"

    def is_uncleanable(self, tp) -> bool:
        directory = self._dir_of(tp)
        with self._lock:
            return tp in self._uncleanable.get(directory, set())

    def mark_uncleanable(self, tp) -> None:
        directory = self._dir_of(tp)
        with self._lock:
            self._uncleanable.setdefault(directory, set()).add(tp)

    def uncleanable_partitions(self) -> dict[Path, set]:
        with self._lock:
            return {d: set(tps) for d, tps in self._uncleanable.items() if tps}

    def uncleanable_bytes(self) -> dict[Path, int]:
        """Per log dir: the dirty bytes of its uncleanable partitions (the uncleanable-bytes metric)."""
        logs = self._logs()
        checkpoints = self.all_cleaner_checkpoints()
        now = self.clock.milliseconds()
        out: dict[Path, int] = {}
        for directory, tps in self.uncleanable_partitions().items():
            total = 0
            for tp in tps:
                log_obj = logs.get(tp)
                if log_obj is None:
                    continue
                offsets = cleanable_offsets(log_obj, checkpoints.get((tp.topic, tp.partition)), now)
                total += LogToClean(
                    tp, log_obj, offsets.first_dirty_offset, offsets.first_uncleanable_dirty_offset
                ).cleanable_bytes
            out[directory] = total
        return out

    # ----- choosing the log ------------------------------------------------------------------------
    def _log_to_clean(self, tp, log_obj, checkpoints: dict, now: int) -> tuple[LogToClean, int]:
        """A log's dirty range and sizes, resetting an out-of-range checkpoint; also its compaction delay."""
        key = (tp.topic, tp.partition)
        offsets = cleanable_offsets(log_obj, checkpoints.get(key), now)
        if offsets.force_update_checkpoint:
            self.update_checkpoints(self._dir_of(tp), update=(key, offsets.first_dirty_offset))
        delay = max_compaction_delay(log_obj, offsets.first_dirty_offset, now)
        return (
            LogToClean(tp, log_obj, offsets.first_dirty_offset, offsets.first_uncleanable_dirty_offset, delay > 0),
            delay,
        )

    def grab_filthiest_compacted_log(self, skip: set | None = None) -> LogToClean | None:
        """The eligible compacted log with the highest dirty ratio, now marked in progress (or None)."""
        with self._lock:
            now = self.clock.milliseconds()
            self.time_of_last_run_ms = now
            checkpoints = self.all_cleaner_checkpoints()
            candidates: list[LogToClean] = []
            max_delay = 0
            for tp, log_obj in self._logs().items():
                if not log_obj.config.compact or tp in self._in_progress or tp in self._pause_count:
                    continue
                if (skip and tp in skip) or self.is_uncleanable(tp):
                    continue
                try:
                    to_clean, delay = self._log_to_clean(tp, log_obj, checkpoints, now)
                except Exception as e:
                    log.warning("Failed to calculate log cleaning stats for partition %s: %s", tp, e)
                    self.mark_uncleanable(tp)
                    continue
                max_delay = max(max_delay, delay)
                if to_clean.total_bytes > 0:
                    candidates.append(to_clean)
            self.max_compaction_delay_ms = max_delay
            self.dirtiest_log_cleanable_ratio = max((c.cleanable_ratio for c in candidates), default=0.0)
            eligible = [
                c
                for c in candidates
                if (c.need_compaction_now and c.cleanable_bytes > 0)
                or c.cleanable_ratio > c.log.config.min_cleanable_dirty_ratio
            ]
            if not eligible:
                return None
            filthiest = max(eligible, key=lambda c: c.cleanable_ratio)
            self._in_progress[filthiest.topic_partition] = IN_PROGRESS
            return filthiest

    # ----- cleaning --------------------------------------------------------------------------------
    def clean_once(self, cleaner_index: int = 0) -> CleanerPassStats:
        """One pass: clean every eligible compacted log once (dirtiest first), then run retention on them."""
        result = CleanerPassStats()
        seen: set = set()
        cleaner = self._cleaner(cleaner_index)
        while (cleanable := self.grab_filthiest_compacted_log(skip=seen)) is not None:
            seen.add(cleanable.topic_partition)
            outcome = self._clean_log(cleaner, cleanable)
            result.cleaned.append(outcome)
            if outcome.stats is not None:
                result.totals.add(outcome.stats)
        result.segments_deleted = self._delete_old_segments_of_compacted_logs()
        self.last_pass = result
        return result

    def _clean_log(self, cleaner: Cleaner, cleanable: LogToClean) -> LogCleanResult:
        # One offset map per cleaner: clean_once and that cleaner's thread take turns with it.
        with cleaner.lock:
            return self._clean_log_locked(cleaner, cleanable)

    def _clean_log_locked(self, cleaner: Cleaner, cleanable: LogToClean) -> LogCleanResult:
        tp, log_obj = cleanable.topic_partition, cleanable.log
        start = cleanable.first_dirty_offset
        outcome = LogCleanResult(tp.topic, tp.partition, start, start, cleanable.cleanable_ratio)
        end = start
        try:
            end, stats = cleaner.clean(cleanable)
            outcome.end_offset, outcome.stats = end, stats
            self._record(tp, cleanable, end, stats)
        except LogCleaningAbortedError:
            log.info("Cleaning of %s was aborted", tp)
            outcome.error = "aborted"
        except Exception as e:
            error = LogCleaningError(f"Failed to clean {tp}: {e}")
            log.warning("Unexpected exception thrown when cleaning log %s; marking partition %s uncleanable: %s",
                        log_obj, tp, e)  # fmt: skip
            self.mark_uncleanable(tp)
            outcome.error = str(error)
        finally:
            self._done_cleaning(tp, end if outcome.error is None else None)
        return outcome

    def _done_cleaning(self, tp, end_offset: int | None) -> None:
        try:
            if end_offset is not None:
                directory = self._dir_of(tp)
                if directory is not None and tp in self._logs():
                    self.update_checkpoints(directory, update=((tp.topic, tp.partition), end_offset))
        finally:
            self._done(tp)

    def _record(self, tp, cleanable: LogToClean, end: int, stats: CleanerStats) -> None:
        status = self.status.setdefault(tp, LogCleaningStatus())
        status.last_clean_ms = stats.end_ms
        status.bytes_read += stats.bytes_read
        status.bytes_written += stats.bytes_written
        status.messages_read += stats.messages_read
        status.messages_written += stats.messages_written
        status.dirty_ratio = cleanable.cleanable_ratio
        status.first_dirty_offset = cleanable.first_dirty_offset
        status.end_offset = end
        log.info(
            "Cleaned log %s (dirty section = [%d, %d]): %.1f MB read, %.1f MB written, %d of %d messages kept, "
            "buffer utilization %.1f%%",
            tp, cleanable.first_dirty_offset, end, stats.bytes_read / 1e6, stats.bytes_written / 1e6,
            stats.messages_written, stats.messages_read, 100 * stats.buffer_utilization,
        )  # fmt: skip

    def _delete_old_segments_of_compacted_logs(self) -> int:
        """Retention for compacted logs runs in the cleaner (deletableLogs): not in progress, not uncleanable."""
        with self._lock:
            deletable = [
                (tp, lg)
                for tp, lg in self._logs().items()
                if lg.config.compact and tp not in self._in_progress and not self.is_uncleanable(tp)
            ]
            for tp, _ in deletable:
                self._in_progress[tp] = IN_PROGRESS
        deleted = 0
        try:
            for tp, lg in deletable:
                try:
                    deleted += lg.delete_old_segments()
                except KafkaStorageError as e:
                    log.warning("Failed to delete old segments of %s: %s", tp, e)
        finally:
            for tp, _ in deletable:
                self._done(tp)
        return deleted

    # ----- threads ----------------------------------------------------------------------------------
    def startup(self, scheduler=None) -> None:
        """Start ``log.cleaner.threads`` threads, or one periodic task on a simulated clock's scheduler."""
        backoff = int(self.broker.log_cleaner_backoff_ms)
        if scheduler is not None:
            self._task = scheduler.schedule("kafka-log-cleaner-thread-0", self._scheduled_pass, backoff, backoff)
            return
        self._stop.clear()
        for i in range(self.threads):
            thread = threading.Thread(target=self._run, args=(i, backoff), name=f"kafka-log-cleaner-thread-{i}",
                                      daemon=True)  # fmt: skip
            thread.start()
            self._threads.append(thread)

    def _scheduled_pass(self) -> None:
        try:
            self.clean_once()
        except Exception:
            log.exception("Log cleaner pass failed")

    def _run(self, index: int, backoff_ms: int) -> None:
        """A cleaner thread: clean the dirtiest log, run retention on compacted logs, back off when idle."""
        try:
            while not self._stop.is_set():
                cleanable = self.grab_filthiest_compacted_log()
                if cleanable is not None:
                    self._clean_log(self._cleaner(index), cleanable)
                self._delete_old_segments_of_compacted_logs()
                if cleanable is None:
                    self._wake.wait(backoff_ms / 1000)
                    self._wake.clear()
        except Exception:
            log.exception("Log cleaner thread %d died", index)
            self.dead_thread_count += 1

    def wake(self) -> None:
        self._wake.set()

    def shutdown(self) -> None:
        """Stop the threads (each finishes or aborts its current clean)."""
        if self._task is not None:
            self._task.cancel()
            self._task = None
        self._stop.set()
        with self._lock:
            for tp, state in list(self._in_progress.items()):
                if state == IN_PROGRESS:
                    self._in_progress[tp] = ABORTED
        self._wake.set()
        for thread in self._threads:
            thread.join()
        self._threads.clear()

    # ----- metrics -----------------------------------------------------------------------------------
    def metrics(self) -> dict:
        """Kafka's cleaner metrics: buffer utilization, recopy percent, clean time, delays, uncleanables."""
        last = self.last_pass
        totals = last.totals if last else CleanerStats()
        return {
            "max-buffer-utilization-percent": 100 * totals.buffer_utilization,
            "cleaner-recopy-percent": 100 * totals.bytes_written / totals.bytes_read if totals.bytes_read else 0.0,
            "max-clean-time-secs": max((r.stats.elapsed_secs() for r in last.cleaned if r.stats), default=0.0)
            if last
            else 0.0,
            "max-compaction-delay-secs": self.max_compaction_delay_ms / 1000,
            "DeadThreadCount": self.dead_thread_count,
            "uncleanable-partitions-count": {str(d): len(t) for d, t in self.uncleanable_partitions().items()},
            "uncleanable-bytes": {str(d): b for d, b in self.uncleanable_bytes().items()},
            "max-dirty-percent": int(100 * self.dirtiest_log_cleanable_ratio),
            "time-since-last-run-ms": self.clock.milliseconds() - self.time_of_last_run_ms,
        }
