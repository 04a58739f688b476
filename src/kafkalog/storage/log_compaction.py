"""What a partition log offers the log cleaner (UnifiedLog's methods the cleaner calls): the segments of an offset
range, the aborted transactions and active producers, a new ``.cleaned`` segment and the swap of cleaned segments
in place of the ones they replace (``replace_segments``, crash-safe through ``.swap`` files).

A base class of ``storage.log.Log``, which holds the state these methods work on.
"""

from __future__ import annotations

import logging

from ..layout import (
    CLEANED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    segment_file,
)
from .files import delete_if_exists, fsync_dir
from .loader import open_segment, replay_producer_state
from .log_state import LogState
from .producer_entry import ProducerStateEntry
from .segment import LogSegment
from .txn_index import AbortedTxn

log = logging.getLogger(__name__)


class CleanerSupport(LogState):
    """The log cleaner's view of a ``Log`` (this class is one of its bases and has no state of its own)."""

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
