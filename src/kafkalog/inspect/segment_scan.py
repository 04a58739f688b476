"""One pass over one segment of a partition: every batch's framing and CRC, its offsets against the segment and the
batches before it, and the segment's indexes walked alongside (spec sections 1.2, 1.8 and 3). Read-only.

``PartitionScanState`` is what one segment's scan hands the next (the last offset seen, the offset gaps so far);
``SegmentScan`` holds the state of the scan of one segment, one small method per concern.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import CorruptRecordError, KafkaLogError
from ..layout import INDEX_SUFFIX, INT32_MAX, TIME_INDEX_SUFFIX
from ..storage.file_records import FileRecords
from ..storage.index import AbstractIndex, OffsetIndex, TimeIndex
from .findings import PartitionReport, ScanOptions, SegmentSummary
from .index_checks import (
    OffsetIndexCheck,
    TimeIndexCheck,
    entries_without_zero_tail,
    note_close_entries,
    open_index,
)
from .recovery import dry_recover_segment

PROGRESS_STEP = 1 << 20  # report progress every this many bytes
GAPS_SHOWN = 3  # offset gaps reported one by one; the rest are counted


@dataclass(frozen=True)
class OffsetGap:
    """Offsets ``previous + 1 .. first - 1`` are absent before the batch at ``position`` of ``log_path``."""

    log_path: Path
    previous: int
    first: int
    position: int


@dataclass
class PartitionScanState:
    """Carried from segment to segment of one partition, in base-offset order.

    Invariant: ``last_offset`` is the largest last offset of a valid batch seen so far (None before any);
    ``gaps`` counts every gap, ``gap_findings`` keeps the first ``GAPS_SHOWN`` of them.
    """

    last_offset: int | None = None
    gaps: int = 0
    gap_findings: list[OffsetGap] = field(default_factory=list)

    def add_gap(self, gap: OffsetGap) -> None:
        self.gaps += 1
        if self.gaps <= GAPS_SHOWN:
            self.gap_findings.append(gap)


@dataclass
class _IndexFiles:
    """A segment's offset and time index (None when absent or unopenable) and their checks."""

    offset_index: OffsetIndex | None = None
    time_index: TimeIndex | None = None
    offset_check: OffsetIndexCheck | None = None
    time_check: TimeIndexCheck | None = None
    offset_entries: int = 0  # entries before a zero-filled preallocated tail
    time_entries: int = 0

    def close(self) -> None:
        for index in (self.offset_index, self.time_index):
            if index is not None:
                index.close()


class SegmentScan:
    """The scan of one segment: ``run()`` returns its summary and adds findings to the partition's report.

    Invariants while scanning: ``previous_last`` is the last offset of the latest valid batch (of this segment or an
    earlier one); ``in_valid_prefix`` is True until the first damage Kafka's recovery would stop at.
    """

    def __init__(
        self,
        report: PartitionReport,
        log_path: Path,
        base: int,
        is_last: bool,
        state: PartitionScanState,
        options: ScanOptions,
        any_index_files: bool,
    ) -> None:
        self.report = report
        self.log_path = log_path
        self.base = base
        self.is_last = is_last
        self.state = state
        self.options = options
        self.any_index_files = any_index_files
        self.directory = log_path.parent
        self.index_path = self.directory / f"{log_path.stem}{INDEX_SUFFIX}"
        self.time_path = self.directory / f"{log_path.stem}{TIME_INDEX_SUFFIX}"
        self.records: FileRecords | None = None
        self.summary = SegmentSummary(base, log_path, 0)
        self.indexes = _IndexFiles()
        self.previous_last = state.last_offset
        self.after_invalid = False
        self.in_valid_prefix = True
        self.progressed = 0

    # ----- the whole scan

    def run(self) -> SegmentSummary:
        self.records = FileRecords.open(self.log_path, mutable=False)
        try:
            self.summary.size = self.records.size
            self._open_indexes()
            self._check_overlap()
            self._read_batches()
            self._check_trailing_bytes()
            self._finish_index_checks()
        finally:
            self.indexes.close()
            self.records.close()
        if self.summary.last_offset is None and not self.is_last:
            self.report.note(self.log_path, "empty segment before the active one")
        if self.previous_last is not None:
            self.state.last_offset = self.previous_last
        return self.summary

    # ----- indexes

    def _open_indexes(self) -> None:
        size = self.summary.size
        offset_index, n = self._open_index_file(OffsetIndex, self.index_path)
        if isinstance(offset_index, OffsetIndex):
            self.indexes.offset_index = offset_index
            if n is not None:
                self.summary.index_entries, self.indexes.offset_entries = offset_index.entries, n
                self.indexes.offset_check = OffsetIndexCheck(self.report, offset_index, n, size)
        time_index, n = self._open_index_file(TimeIndex, self.time_path)
        if isinstance(time_index, TimeIndex):
            self.indexes.time_index = time_index
            if n is not None:
                self.summary.time_index_entries, self.indexes.time_entries = time_index.entries, n
                self.indexes.time_check = TimeIndexCheck(self.report, time_index, n)

    def _open_index_file(self, cls: type[AbstractIndex], path: Path) -> tuple[AbstractIndex | None, int | None]:
        """The index at ``path`` read-only (None when absent or unopenable) and the entries worth checking."""
        if not path.exists():
            return None, None
        index = open_index(cls, path, self.base, self.report)
        if index is None:
            return None, None
        return index, self._check_index_file(index, index.entry_size)

    def _check_index_file(self, index: AbstractIndex, entry_size: int) -> int | None:
        """Kafka's sanity check and a zero-filled tail; the entries worth checking, None for a ragged file."""
        try:
            index.sanity_check()
        except KafkaLogError as e:
            self.report.problem(index.path, f"fails Kafka's sanity check ({e.reason}); Kafka rebuilds it at load")
        if index.length % entry_size:
            return None
        n = entries_without_zero_tail(index.path, entry_size, index.entries)
        if n < index.entries:
            tail = index.entries - n
            if self.is_last and not self.options.clean_shutdown:
                self.report.note(
                    index.path,
                    f"{tail} zero-filled entries after entry {n}: the preallocated index of the active segment was not "
                    "trimmed (no clean shutdown); Kafka's recovery rebuilds it",
                    n * entry_size,
                )
            else:
                self.report.problem(
                    index.path,
                    f"{tail} zero-filled entries after entry {n} (a preallocated tail that was never trimmed)",
                    n * entry_size,
                )
        return n

    def _finish_index_checks(self) -> None:
        checks = self.indexes
        if checks.offset_check is not None:
            checks.offset_check.finish(self.summary.last_offset)
        if checks.time_check is not None:
            checks.time_check.finish(self.summary.last_offset)
        self._check_missing_indexes()
        if (
            checks.offset_check is not None
            and checks.time_check is not None
            and checks.offset_check.merge
            and checks.time_check.merge
        ):
            note_close_entries(self.report, checks.time_index, checks.offset_entries, checks.time_entries)

    def _check_missing_indexes(self) -> None:
        """Kafka creates index files lazily: the active segment has none until its first index entry or a clean
        close; a rolled segment always has both (the roll writes the final time entry and trims them)."""
        missing = [path for path in (self.index_path, self.time_path) if not path.exists()]
        if not missing or (self.is_last and not self._recovery_writes_index_entries()):
            return
        for path in missing:
            if not self.any_index_files:
                self.report.note(path, "missing, like every index file of this partition (Kafka rebuilds them at load)")
            else:
                self.report.problem(
                    path, "missing (Kafka rebuilds it at load; until then lookups in this segment scan the log)"
                )

    def _recovery_writes_index_entries(self) -> bool:
        """Whether Kafka's recovery of this segment would write an offset index entry: asks the real recovery."""
        planned = dry_recover_segment(self.log_path, self.base, self.options.index_interval_bytes)
        return bool(planned.offset_entries)

    # ----- batches

    def _check_overlap(self) -> None:
        if self.previous_last is not None and self.base <= self.previous_last:
            self.report.problem(
                self.log_path,
                f"base offset {self.base} overlaps the previous segment, which ends at offset {self.previous_last}",
            )

    def _read_batches(self) -> None:
        assert self.records is not None
        batches = self.records.batches()  # a generator: closed below, whatever stops the loop
        try:
            while True:
                try:
                    position, batch = next(batches)
                except StopIteration:
                    break
                except CorruptRecordError as e:
                    self._on_unreadable_tail(e)
                    break
                self._on_batch(position, batch)
        finally:
            close = getattr(batches, "close", None)
            if close is not None:
                close()
            if self.options.progress is not None and self.progressed:
                self.options.progress(self.progressed)

    def _stop_recovery(self, reason: str) -> None:
        """Record the first damage Kafka's recovery stops at (later damage is past the cut)."""
        if self.in_valid_prefix:
            self.summary.stop_reason = reason
            self.in_valid_prefix = False

    def _on_unreadable_tail(self, e: CorruptRecordError) -> None:
        pos = e.position if e.position is not None else self.summary.parsed_end
        left = self.summary.size - pos
        self.report.problem(
            self.log_path, f"{e.reason}: the {left} bytes from here do not form a batch (recovery truncates them)", pos
        )
        self._stop_recovery(f"{e.reason} at byte {pos}")

    def _on_batch(self, position: int, batch: Any) -> None:
        size = batch.size_in_bytes
        self.summary.batches += 1
        self.summary.parsed_end = position + size
        try:
            batch.ensure_valid()
        except CorruptRecordError as e:
            self.report.problem(self.log_path, f"batch at offset {batch.last_offset}: {e.reason}", position)
            self._stop_recovery(f"{e.reason} at byte {position}")
            self.after_invalid = True
        else:
            self._on_valid_batch(position, batch)
            self.after_invalid = False
        self._advance_progress(size)

    def _advance_progress(self, size: int) -> None:
        self.progressed += size
        if self.options.progress is not None and self.progressed >= PROGRESS_STEP:
            self.options.progress(self.progressed)
            self.progressed = 0

    def _on_valid_batch(self, position: int, batch: Any) -> None:
        last = batch.last_offset
        try:
            first = batch.base_offset
            self.summary.records += batch.record_count
        except KafkaLogError as e:
            self.report.problem(self.log_path, f"batch at offset {last}: records cannot be read: {e.reason}", position)
            first = last
        self._check_range(position, first, last)
        self._check_order(position, first, last)
        self._check_first(position, first)
        checks = self.indexes
        if checks.offset_check is not None:
            checks.offset_check.on_batch(position, first, last, self.previous_last)
        if checks.time_check is not None:
            checks.time_check.on_batch(first, last, batch.max_timestamp)
        self.summary.max_timestamp = max(self.summary.max_timestamp, batch.max_timestamp)
        self.summary.last_offset = last
        self.previous_last = last if self.previous_last is None else max(last, self.previous_last)

    def _check_range(self, position: int, first: int, last: int) -> None:
        """Offsets must fit the segment: at or above its base, within the 4-byte relative range."""
        if not 0 <= last - self.base <= INT32_MAX or first < self.base:
            self.report.problem(
                self.log_path,
                f"batch offsets {first}..{last} do not fit the segment (base offset {self.base}, relative offsets "
                "0..2^31-1)",
                position,
            )
            self._stop_recovery(f"offset {last} overflows the segment at byte {position}")

    def _check_order(self, position: int, first: int, last: int) -> None:
        """Offsets increase; a decrease is a problem, a gap is remembered (compaction removes offsets)."""
        previous = self.previous_last
        if previous is None or self.after_invalid:
            return
        if first <= previous:
            self.report.problem(
                self.log_path,
                f"offsets go backwards: batch {first}..{last} starts at or below the previous batch's "
                f"last offset {previous}",
                position,
            )
        elif first > previous + 1:
            self.state.add_gap(OffsetGap(self.log_path, previous, first, position))

    def _check_first(self, position: int, first: int) -> None:
        if self.summary.first_offset is not None:
            return
        self.summary.first_offset = first
        if first < self.base:
            self.report.problem(
                self.log_path,
                f"the first batch starts at offset {first}, below the segment's base offset {self.base}",
                position,
            )

    def _check_trailing_bytes(self) -> None:
        summary = self.summary
        if summary.stop_reason is None and summary.parsed_end < summary.size:
            left = summary.size - summary.parsed_end
            self.report.problem(
                self.log_path,
                f"{left} trailing bytes do not form a batch (a partial or truncated write; recovery cuts them)",
                summary.parsed_end,
            )
            summary.stop_reason = f"{left} trailing bytes at byte {summary.parsed_end}"
