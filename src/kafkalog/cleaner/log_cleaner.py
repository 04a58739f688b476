"""The log cleaner of a LogManager: Kafka's ``LogCleaner`` (its threads, its cleaners, its metrics).

Its ``LogCleanerManager`` (``manager``) keeps the checkpoints and the state of each partition and picks the
dirtiest eligible compacted log, which a ``Cleaner`` (one offset map each) cleans. ``clean_once`` is one synchronous
pass; the ``kafka-log-cleaner-thread-N`` threads (or, on a simulated clock, a scheduled task) run the same pass
every ``log.cleaner.backoff.ms`` when there was nothing to do.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import KafkaStorageError, LogCleaningAbortedError, LogCleaningError
from ..layout import INT32_MAX
from ..storage.config import BrokerConfig
from .cleaner import Cleaner, check_not_aborted
from .manager import LogCleanerManager
from .offset_map import SkimpyOffsetMap
from .policy import LogToClean
from .stats import CleanerStats, Throttler
from .warm import compile_in_child

log = logging.getLogger(__name__)


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
        self.manager = LogCleanerManager(logs, dir_of, clock, log_dirs)
        self._logs = logs
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
        self._lock = self.manager.lock
        self.status: dict[object, LogCleaningStatus] = {}
        self.last_pass: CleanerPassStats | None = None
        self._threads: list[threading.Thread] = []
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._task = None
        self.dead_thread_count = 0
        m = self.manager  # Kafka's LogCleaner hands these to its LogCleanerManager
        self.all_cleaner_checkpoints, self.update_checkpoints = m.all_cleaner_checkpoints, m.update_checkpoints
        self.maybe_truncate_checkpoint, self.abort_cleaning = m.maybe_truncate_checkpoint, m.abort_cleaning
        self.abort_and_pause_cleaning, self.resume_cleaning = m.abort_and_pause_cleaning, m.resume_cleaning
        self.state_of, self.is_uncleanable, self.mark_uncleanable = m.state_of, m.is_uncleanable, m.mark_uncleanable
        self.uncleanable_partitions, self.uncleanable_bytes = m.uncleanable_partitions, m.uncleanable_bytes
        self.grab_filthiest_compacted_log = m.grab_filthiest_compacted_log

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
                        check_done=check_not_aborted(self.manager.is_aborted),
                        cleaner_id=len(self._cleaners),
                    )
                )
            return self._cleaners[index]

    def remove_partition(self, tp, directory: Path) -> None:
        """A deleted partition: abort its clean, forget its checkpoint, uncleanable mark and status."""
        self.manager.remove_partition(tp, directory)
        with self._lock:
            self.status.pop(tp, None)

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
            self.manager.done_cleaning(tp, end if outcome.error is None else None)
        return outcome

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
        deletable = self.manager.grab_deletable_logs()
        deleted = 0
        try:
            for tp, lg in deletable:
                try:
                    deleted += lg.delete_old_segments()
                except KafkaStorageError as e:
                    log.warning("Failed to delete old segments of %s: %s", tp, e)
        finally:
            for tp, _ in deletable:
                self.manager.done(tp)
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
                    compile_in_child(self._stop)  # a process's first clean: kernels from numba's cache (warm.py)
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
        self.manager.abort_all()
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
            "max-compaction-delay-secs": self.manager.max_compaction_delay_ms / 1000,
            "DeadThreadCount": self.dead_thread_count,
            "uncleanable-partitions-count": {str(d): len(t) for d, t in self.uncleanable_partitions().items()},
            "uncleanable-bytes": {str(d): b for d, b in self.uncleanable_bytes().items()},
            "max-dirty-percent": int(100 * self.manager.dirtiest_log_cleanable_ratio),
            "time-since-last-run-ms": self.clock.milliseconds() - self.manager.time_of_last_run_ms,
        }
