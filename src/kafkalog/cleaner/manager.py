"""Which partitions the log cleaner may clean, and its checkpoints: Kafka's ``LogCleanerManager``.

It keeps ``cleaner-offset-checkpoint`` in each log dir (the first dirty offset of every compacted partition),
tracks which partitions are being cleaned, aborted, paused or uncleanable, and picks the dirtiest eligible
compacted log for a cleaner thread. ``LogCleaner`` owns one and runs the cleaner threads.

Invariants: a partition is in at most one of the states of ``LogCleaningState`` at a time (``_in_progress``), a
paused partition (``_pause_count`` > 0) is never handed to a cleaner, and the checkpoint of a log dir only names
partitions that log dir holds.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from enum import Enum
from pathlib import Path

from ..layout import CLEANER_OFFSET_CHECKPOINT
from ..storage.checkpoints import CheckpointError, OffsetCheckpointFile
from .policy import LogToClean, cleanable_offsets, max_compaction_delay

log = logging.getLogger(__name__)


class LogCleaningState(Enum):
    """What is happening to one partition's clean (Kafka's ``LogCleaningState``; paused is counted apart)."""

    IN_PROGRESS = "LogCleaningInProgress"
    ABORTED = "LogCleaningAborted"


class LogCleanerManager:
    """The cleaner's bookkeeping over the logs of a LogManager (see the module docstring); thread-safe."""

    def __init__(
        self, logs: Callable[[], dict], dir_of: Callable[[object], Path | None], clock, log_dirs: list[Path]
    ) -> None:
        self._logs = logs
        self._dir_of = dir_of
        self.clock = clock
        self.log_dirs = list(log_dirs)
        self.lock = threading.RLock()
        self._condition = threading.Condition(self.lock)
        self._in_progress: dict[object, LogCleaningState] = {}
        self._pause_count: dict[object, int] = {}
        self._uncleanable: dict[Path, set] = {}
        self.time_of_last_run_ms = clock.milliseconds()
        self.dirtiest_log_cleanable_ratio = 0.0
        self.max_compaction_delay_ms = 0
        for directory in self.log_dirs:
            OffsetCheckpointFile(directory / CLEANER_OFFSET_CHECKPOINT)  # created empty, as Kafka does

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
        with self.lock:
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
        with self.lock:
            key = (tp.topic, tp.partition)
            current = self.all_cleaner_checkpoints().get(key)
            if current is not None and current > offset:
                self.update_checkpoints(directory, update=(key, offset))

    def remove_partition(self, tp, directory: Path) -> None:
        """A deleted partition: abort its clean, forget its checkpoint and uncleanable mark."""
        self.abort_cleaning(tp)
        with self.lock:
            self._uncleanable.get(directory, set()).discard(tp)
            self.update_checkpoints(directory, remove=(tp.topic, tp.partition))

    # ----- in-progress, abort, pause -------------------------------------------------------------
    def is_aborted(self, tp) -> bool:
        with self.lock:
            return self._in_progress.get(tp) == LogCleaningState.ABORTED

    def abort_cleaning(self, tp) -> None:
        """Stop a running clean of ``tp`` and wait for it to end (abortCleaning)."""
        with self._condition:
            if self._in_progress.get(tp) == LogCleaningState.IN_PROGRESS:
                self._in_progress[tp] = LogCleaningState.ABORTED
                while self._in_progress.get(tp) == LogCleaningState.ABORTED:
                    self._condition.wait(0.1)

    def abort_all(self) -> None:
        """Ask every running clean to stop (at shutdown); does not wait."""
        with self.lock:
            for tp, state in list(self._in_progress.items()):
                if state == LogCleaningState.IN_PROGRESS:
                    self._in_progress[tp] = LogCleaningState.ABORTED

    def abort_and_pause_cleaning(self, tp) -> None:
        """Abort any clean of ``tp`` and keep it from being cleaned until ``resume_cleaning`` (nested)."""
        self.abort_cleaning(tp)
        with self.lock:
            self._pause_count[tp] = self._pause_count.get(tp, 0) + 1

    def resume_cleaning(self, tp) -> None:
        with self.lock:
            count = self._pause_count.get(tp, 0) - 1
            if count <= 0:
                self._pause_count.pop(tp, None)
            else:
                self._pause_count[tp] = count

    def done(self, tp) -> None:
        """``tp``'s clean (or retention pass) ended: it may be handed out again; wake an abort waiting for it."""
        with self._condition:
            self._in_progress.pop(tp, None)
            self._condition.notify_all()

    def done_cleaning(self, tp, end_offset: int | None) -> None:
        """A clean of ``tp`` ended: checkpoint ``end_offset`` (None after a failure) if the log is still held."""
        try:
            if end_offset is not None:
                directory = self._dir_of(tp)
                if directory is not None and tp in self._logs():
                    self.update_checkpoints(directory, update=((tp.topic, tp.partition), end_offset))
        finally:
            self.done(tp)

    def state_of(self, tp) -> str:
        """'idle', 'being cleaned', 'paused' or 'uncleanable (a clean failed)', for explanations."""
        with self.lock:
            if tp in self._in_progress:
                return "being cleaned"
            if tp in self._pause_count:
                return "paused"
        return "uncleanable (a previous clean failed)" if self.is_uncleanable(tp) else "idle"

    # ----- uncleanable partitions -----------------------------------------------------------------
    def is_uncleanable(self, tp) -> bool:
        directory = self._dir_of(tp)
        with self.lock:
            return tp in self._uncleanable.get(directory, set())

    def mark_uncleanable(self, tp) -> None:
        directory = self._dir_of(tp)
        with self.lock:
            self._uncleanable.setdefault(directory, set()).add(tp)

    def uncleanable_partitions(self) -> dict[Path, set]:
        with self.lock:
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
        with self.lock:
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
            eligible = [c for c in candidates if c.eligible(c.log.config.min_cleanable_dirty_ratio)]
            if not eligible:
                return None
            filthiest = max(eligible, key=lambda c: c.cleanable_ratio)
            self._in_progress[filthiest.topic_partition] = LogCleaningState.IN_PROGRESS
            return filthiest

    def grab_deletable_logs(self) -> list[tuple[object, object]]:
        """The compacted logs retention may run on now (deletableLogs): not being cleaned, not uncleanable; each
        is marked in progress until ``done``."""
        with self.lock:
            deletable = [
                (tp, lg)
                for tp, lg in self._logs().items()
                if lg.config.compact and tp not in self._in_progress and not self.is_uncleanable(tp)
            ]
            for tp, _ in deletable:
                self._in_progress[tp] = LogCleaningState.IN_PROGRESS
            return deletable
