"""``kafkalog verify`` and ``kafkalog recover``: check a log dir without touching it, and run Kafka's recovery offline.

``verify`` walks a log dir (or one partition directory) read-only, one batch at a time, and checks what Kafka's
loader and readers rely on (spec sections 3, 4, 5, 9, 10):

* every batch: the size field and the CRC (``ensure_valid``), and bytes at the end that do not form a batch;
* offsets: increasing across batches and segments (an overlap or a decrease is a problem; a gap is a note, since
  compaction removes offsets), a segment's base offset <= its first batch's, offsets within the 4-byte relative range;
* the offset index against the log: entries strictly increasing, each at the start of a batch, its offset not in an
  earlier batch (a lookup would skip records) and equal to the last offset of a batch, nothing past the data;
* the time index: timestamps and offsets non-decreasing, offsets within the segment, each timestamp <= the largest
  timestamp of the batches up to its offset;
* ``.txnindex`` entries, producer snapshots (CRC), the ``leader-epoch-checkpoint``;
* the root checkpoints: readable, recovery point and high watermark <= log end, log start offset within
  [first segment base, log end], and no entry for a partition whose directory is missing.

Findings are *problems* (exit status 1) or *notes* (legitimate oddities worth knowing, exit status 0).

``recover`` runs Kafka's recovery (``Log.open`` with ``had_clean_shutdown=False, recovery_point=0``) on a partition
directory: the invalid tail is truncated, later segments are deleted, every index is rebuilt. ``--dry-run`` works
on a read-only scan and says what would change.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import click

from ..errors import CorruptRecordError, CorruptSnapshotError, KafkaLogError
from ..layout import (
    CLEAN_SHUTDOWN_FILE,
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    INT32_MAX,
    LEADER_EPOCH_CHECKPOINT,
    LOG_SUFFIX,
    ROOT_CHECKPOINTS,
    SNAPSHOT_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    parse_partition_dir,
)
from ..partition.readonly import log_dir_problem
from ..storage.checkpoints import (
    CheckpointError,
    CheckpointFile,
    EpochFormatter,
    OffsetFormatter,
)
from ..storage.file_records import FileRecords
from ..storage.index import OffsetIndex, TimeIndex
from ..storage.producer_state import read_snapshot
from ..storage.txn_index import ABORTED_TXN_SIZE, AbortedTxn
from . import EXIT_ERROR

DEFAULT_INDEX_INTERVAL = 4096
DEFAULT_SEGMENT_INDEX_BYTES = 10 * 1024 * 1024
PROGRESS_MIN_BYTES = 64 * 1024 * 1024  # show a progress bar only for scans at least this large
_PROGRESS_STEP = 1 << 20

# Topics that are compacted in any Kafka install (internal topics, Connect's and Schema Registry's, Streams changelogs).
_COMPACTED_NAMES = ("__consumer_offsets", "__transaction_state", "__cluster_metadata", "_schemas")
_COMPACTED_SUFFIXES = ("-changelog", "-configs", "-offsets", "-status")


# ------------------------------------------------------------------------------------------------ findings


@dataclass(frozen=True)
class Finding:
    """One problem (``severity == "problem"``) or note, located by file and, where it applies, byte position."""

    severity: str
    path: Path
    message: str
    position: int | None = None
    line: int | None = None

    @property
    def is_problem(self) -> bool:
        return self.severity == "problem"

    def where(self, root: Path | None = None) -> str:
        name = str(self.path)
        if root is not None:
            with contextlib.suppress(ValueError):
                name = str(self.path.relative_to(root)) or self.path.name
        if self.position is not None:
            return f"{name} @ byte {self.position}"
        if self.line is not None:
            return f"{name} @ line {self.line}"
        return name

    def format(self, root: Path | None = None) -> str:
        label = "PROBLEM" if self.is_problem else "note"
        return f"{label:<7} {self.where(root)}: {self.message}"


@dataclass
class SegmentSummary:
    """What a scan learned about one segment (small: the per-batch work is streamed)."""

    base: int
    path: Path
    size: int
    batches: int = 0
    records: int = 0
    first_offset: int | None = None
    last_offset: int | None = None
    parsed_end: int = 0  # end of the last batch whose framing was readable
    valid_bytes: int = 0  # bytes before the first invalid batch: what Kafka's recover() keeps
    stop_reason: str | None = None  # why recover() would stop, when it would
    max_timestamp: int = -1
    index_entries: int | None = None  # None: no file
    time_index_entries: int | None = None
    expected_index_entries: int = 0  # what recover() would build (counted over the valid bytes)
    expected_time_index_entries: int = 0
    index_matches: bool = True  # the existing .index holds exactly what recover() would build
    time_index_matches: bool = True


@dataclass
class PartitionReport:
    """The scan of one partition directory."""

    directory: Path
    name: str
    segments: list[SegmentSummary] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    temp_files: list[Path] = field(default_factory=list)
    orphan_indexes: list[Path] = field(default_factory=list)

    @property
    def batches(self) -> int:
        return sum(s.batches for s in self.segments)

    @property
    def records(self) -> int:
        return sum(s.records for s in self.segments)

    @property
    def bytes(self) -> int:
        return sum(s.size for s in self.segments)

    @property
    def problems(self) -> int:
        return sum(f.is_problem for f in self.findings)

    @property
    def notes(self) -> int:
        return sum(not f.is_problem for f in self.findings)

    @property
    def first_base(self) -> int | None:
        return self.segments[0].base if self.segments else None

    @property
    def log_end_offset(self) -> int | None:
        """Kafka's LEO: the offset after the last batch of the last segment, or its base when it is empty."""
        if not self.segments:
            return None
        last = self.segments[-1]
        return last.last_offset + 1 if last.last_offset is not None else last.base

    def problem(self, path: Path, message: str, position: int | None = None) -> None:
        self.findings.append(Finding("problem", path, message, position))

    def note(self, path: Path, message: str, position: int | None = None) -> None:
        self.findings.append(Finding("note", path, message, position))


@dataclass
class ScanOptions:
    index_interval_bytes: int = DEFAULT_INDEX_INTERVAL
    compacted: bool = False
    partial: bool = False
    clean_shutdown: bool = False
    progress: Callable[[int], None] | None = None


# ------------------------------------------------------------------------------------------------ small readers


def _read_checkpoint(path: Path, version: int, formatter) -> list:
    """Read a checkpoint file with Kafka's rules, without creating it (a read-only check must not)."""
    return CheckpointFile(path, version, formatter, create=False).read()


def _nonzero_length(path: Path) -> int:
    """The file length without its trailing zero bytes (read backwards in chunks: constant memory)."""
    with open(path, "rb") as f:
        end = os.fstat(f.fileno()).st_size
        while end > 0:
            start = max(0, end - _PROGRESS_STEP)
            f.seek(start)
            chunk = f.read(end - start).rstrip(b"\0")
            if chunk:
                return start + len(chunk)
            end = start
    return 0


def _entries_without_zero_tail(path: Path, entry_size: int, total: int) -> int:
    """How many entries come before a preallocated, zero-filled tail of at least two entries."""
    used = -(-_nonzero_length(path) // entry_size)
    return used if total - used >= 2 else total


def _topic_looks_compacted(topic: str) -> bool:
    return topic in _COMPACTED_NAMES or topic.endswith(_COMPACTED_SUFFIXES) or topic.startswith("_confluent")


def _segment_base(name: str) -> int | None:
    prefix = name.split(".", 1)[0]
    return int(prefix) if prefix.isdigit() else None


def is_partition_dir(path: Path) -> bool:
    """A directory holding segment files, snapshots or partition files, or named ``<topic>-<partition>`` and empty."""
    names = [p.name for p in path.iterdir()]
    if any(n.endswith((LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, SNAPSHOT_SUFFIX)) for n in names):
        return True
    if LEADER_EPOCH_CHECKPOINT in names or "partition.metadata" in names:
        return True
    if any(n in ROOT_CHECKPOINTS or n == "meta.properties" for n in names):
        return False
    try:
        parse_partition_dir(path.name)
    except ValueError:
        return False
    return not any((path / n).is_dir() for n in names)


# ------------------------------------------------------------------------------------------------ index checks


class _OffsetIndexCheck:
    """Walks an offset index alongside the batches of its segment (both in position order)."""

    def __init__(self, report: PartitionReport, index: OffsetIndex, entries: int, log_size: int) -> None:
        self.report = report
        self.index = index
        self.path = index.path
        self.n = entries
        self.i = 0
        self.pending = None  # an entry whose offset should be the last offset of a batch still to come
        self.merge = self._check_order(log_size)

    def _entry_problem(self, slot: int, message: str) -> None:
        self.report.problem(self.path, f"entry {slot}: {message}", slot * 8)

    def _check_order(self, log_size: int) -> bool:
        """Entries strictly increasing in offset and position, at or above the base, inside the log."""
        ok = True
        base = self.index.base_offset
        previous = None
        for slot in range(self.n):
            entry = self.index.entry(slot)
            if entry.offset < base:
                self._entry_problem(slot, f"offset {entry.offset} is below the segment's base offset {base}")
                ok = False
            if entry.position < 0 or entry.position >= max(log_size, 1):
                self._entry_problem(
                    slot, f"position {entry.position} (offset {entry.offset}) is outside the log ({log_size} bytes)"
                )
                ok = False
            if previous is not None and (entry.offset <= previous.offset or entry.position <= previous.position):
                self.report.problem(
                    self.path,
                    f"entries {slot - 1} and {slot}: (offset {previous.offset}, position {previous.position}) then "
                    f"(offset {entry.offset}, position {entry.position}); entries must strictly increase",
                    (slot - 1) * 8,
                )
                ok = False
            previous = entry
        return ok

    def on_batch(self, position: int, base_offset: int, last_offset: int, previous_last: int | None) -> None:
        if not self.merge:
            return
        while self.i < self.n and self.index.entry(self.i).position < position:
            entry = self.index.entry(self.i)
            self._entry_problem(
                self.i, f"position {entry.position} (offset {entry.offset}) is not the start of a batch"
            )
            self.i += 1
        starts_here = self.i < self.n and self.index.entry(self.i).position == position
        if self.pending is not None:
            slot, entry = self.pending
            if starts_here:  # the append that began at the pending entry ended before this one
                self._entry_problem(
                    slot,
                    f"offset {entry.offset} is not the last offset of any batch before the next entry's "
                    f"position {position}",
                )
                self.pending = None
            elif last_offset >= entry.offset:
                if last_offset != entry.offset:
                    self._entry_problem(
                        slot,
                        f"offset {entry.offset} is not the last offset of a batch (the batch holding it ends "
                        f"at {last_offset})",
                    )
                self.pending = None
        if not starts_here:
            return
        slot, entry = self.i, self.index.entry(self.i)
        self.i += 1
        if previous_last is not None and entry.offset <= previous_last:
            self._entry_problem(
                slot,
                f"offset {entry.offset} points at position {position}, but that offset is in an earlier batch "
                f"(ending at offset {previous_last}): a lookup would skip records",
            )
        elif last_offset > entry.offset:
            self._entry_problem(
                slot,
                f"offset {entry.offset} is not the last offset of a batch (the batch at position {position} "
                f"holds offsets {base_offset}..{last_offset})",
            )
        elif last_offset < entry.offset:  # a multi-batch append (e.g. a follower's): it names the append's last batch
            self.pending = (slot, entry)

    def finish(self, segment_last: int | None) -> None:
        if not self.merge:
            return
        if self.pending is not None:
            slot, entry = self.pending
            self._entry_problem(
                slot,
                f"offset {entry.offset} is beyond the segment's last offset {segment_last}"
                if segment_last is None or entry.offset > segment_last
                else f"offset {entry.offset} is not the last offset of any batch",
            )
        for slot in range(self.i, self.n):
            entry = self.index.entry(slot)
            self._entry_problem(
                slot, f"(offset {entry.offset}, position {entry.position}) points past the segment's last batch"
            )


class _TimeIndexCheck:
    """Walks a time index alongside the batches of its segment (entries ordered by offset)."""

    def __init__(self, report: PartitionReport, index: TimeIndex, entries: int) -> None:
        self.report = report
        self.index = index
        self.path = index.path
        self.n = entries
        self.j = 0
        self.max_ts = -1
        self.merge = self._check_order()

    def _entry_problem(self, slot: int, message: str) -> None:
        self.report.problem(self.path, f"entry {slot}: {message}", slot * 12)

    def _check_order(self) -> bool:
        ok = True
        base = self.index.base_offset
        previous = None
        for slot in range(self.n):
            entry = self.index.entry(slot)
            if entry.offset < base:
                self._entry_problem(slot, f"offset {entry.offset} is below the segment's base offset {base}")
                ok = False
            if previous is not None and (entry.timestamp < previous.timestamp or entry.offset < previous.offset):
                self.report.problem(
                    self.path,
                    f"entries {slot - 1} and {slot}: (timestamp {previous.timestamp}, offset {previous.offset}) then "
                    f"(timestamp {entry.timestamp}, offset {entry.offset}); timestamps and offsets must not decrease",
                    (slot - 1) * 12,
                )
                ok = False
            previous = entry
        return ok

    def on_batch(self, base_offset: int, last_offset: int, max_timestamp: int) -> None:
        self.max_ts = max(self.max_ts, max_timestamp)
        if not self.merge:
            return
        while self.j < self.n:
            entry = self.index.entry(self.j)
            if entry.offset > last_offset:
                break
            if entry.timestamp > self.max_ts:
                self._entry_problem(
                    self.j,
                    f"timestamp {entry.timestamp} at offset {entry.offset} is above every timestamp up to that "
                    f"offset (max {self.max_ts})",
                )
            self.j += 1

    def finish(self, segment_last: int | None) -> None:
        if not self.merge:
            return
        for slot in range(self.j, self.n):
            entry = self.index.entry(slot)
            self._entry_problem(
                slot,
                f"offset {entry.offset} is beyond the segment's last offset "
                f"{'(empty segment)' if segment_last is None else segment_last}",
            )


class _RecoveryModel:
    """Counts the index entries Kafka's ``LogSegment.recover`` would write, and compares them with the files."""

    def __init__(self, interval: int, offset_index: OffsetIndex | None, oi_n: int, time_index, ti_n: int) -> None:
        self.interval = interval
        self.last_entry_pos = 0
        self.max_ts = -1
        self.max_ts_offset = -1
        self.last_time = (-1, None)
        self.offset_entries = 0
        self.time_entries = 0
        self.oi, self.oi_n = offset_index, oi_n
        self.ti, self.ti_n = time_index, ti_n
        self.oi_same = offset_index is not None
        self.ti_same = time_index is not None

    def _time_append(self, ts: int, offset: int) -> None:
        if ts > self.last_time[0]:
            if self.ti_same and (
                self.time_entries >= self.ti_n or tuple(self.ti.entry(self.time_entries)) != (ts, offset)
            ):
                self.ti_same = False
            self.time_entries += 1
            self.last_time = (ts, offset)

    def on_valid_batch(self, position: int, last_offset: int, max_timestamp: int) -> None:
        if max_timestamp > self.max_ts:
            self.max_ts, self.max_ts_offset = max_timestamp, last_offset
        if position - self.last_entry_pos > self.interval:
            if self.oi_same and (
                self.offset_entries >= self.oi_n or tuple(self.oi.entry(self.offset_entries)) != (last_offset, position)
            ):
                self.oi_same = False
            self.offset_entries += 1
            self._time_append(self.max_ts, self.max_ts_offset)
            self.last_entry_pos = position

    def finish(self) -> None:
        self._time_append(self.max_ts, self.max_ts_offset)
        if self.offset_entries != self.oi_n:
            self.oi_same = False
        if self.time_entries != self.ti_n:
            self.ti_same = False


# ------------------------------------------------------------------------------------------------ scanning


def _open_index(cls, path: Path, base: int, report: PartitionReport):
    """A read-only index, or None (with a finding) when it cannot even be opened or fails its sanity check."""
    try:
        index = cls(path, base, writable=False)
    except (OSError, ValueError, KafkaLogError) as e:
        report.problem(path, f"cannot open the index: {e}")
        return None
    return index


def _scan_segment(
    report: PartitionReport,
    log_path: Path,
    base: int,
    is_last: bool,
    state: dict,
    options: ScanOptions,
    any_index_files: bool,
) -> SegmentSummary:
    directory = log_path.parent
    records = FileRecords.open(log_path, mutable=False)
    summary = SegmentSummary(base, log_path, records.size)
    index_path = directory / f"{log_path.stem}{INDEX_SUFFIX}"
    time_path = directory / f"{log_path.stem}{TIME_INDEX_SUFFIX}"
    offset_index = _open_index(OffsetIndex, index_path, base, report) if index_path.exists() else None
    time_index = _open_index(TimeIndex, time_path, base, report) if time_path.exists() else None
    oi_check = ti_check = None
    oi_n = ti_n = 0
    for index, entry_size in ((offset_index, 8), (time_index, 12)):
        if index is None:
            continue
        try:
            index.sanity_check()
        except KafkaLogError as e:
            report.problem(index.path, f"fails Kafka's sanity check ({e.reason}); Kafka rebuilds it at load")
        if index.length % entry_size:
            continue
        n = _entries_without_zero_tail(index.path, entry_size, index.entries)
        if n < index.entries:
            tail = index.entries - n
            if is_last and not options.clean_shutdown:
                report.note(
                    index.path,
                    f"{tail} zero-filled entries after entry {n}: the preallocated index of the active segment was not "
                    "trimmed (no clean shutdown); Kafka's recovery rebuilds it",
                    n * entry_size,
                )
            else:
                report.problem(
                    index.path,
                    f"{tail} zero-filled entries after entry {n} (a preallocated tail that was never trimmed)",
                    n * entry_size,
                )
        if index is offset_index:
            summary.index_entries, oi_n = index.entries, n
            oi_check = _OffsetIndexCheck(report, index, n, records.size)
        else:
            summary.time_index_entries, ti_n = index.entries, n
            ti_check = _TimeIndexCheck(report, index, n)
    model = _RecoveryModel(options.index_interval_bytes, offset_index, oi_n, time_index, ti_n)

    previous_last = state.get("last_offset")
    segment_previous_last = previous_last
    if previous_last is not None and base <= previous_last:
        report.problem(
            log_path, f"base offset {base} overlaps the previous segment, which ends at offset {previous_last}"
        )
    after_invalid = False
    recovering = True  # still inside the prefix that Kafka's recover() would keep
    progressed = 0
    batches = records.batches()
    try:
        while True:
            try:
                position, batch = next(batches)
            except StopIteration:
                break
            except CorruptRecordError as e:
                pos = e.position if e.position is not None else summary.parsed_end
                left = records.size - pos
                report.problem(
                    log_path,
                    f"{e.reason}: the {left} bytes from here do not form a batch (recovery truncates them)",
                    pos,
                )
                if recovering:
                    summary.stop_reason = f"{e.reason} at byte {pos}"
                    recovering = False
                break
            size = batch.size_in_bytes
            summary.batches += 1
            summary.parsed_end = position + size
            valid = True
            try:
                batch.ensure_valid()
            except CorruptRecordError as e:
                valid = False
                report.problem(log_path, f"batch at offset {batch.last_offset}: {e.reason}", position)
                if recovering:
                    summary.stop_reason = f"{e.reason} at byte {position}"
                    recovering = False
                after_invalid = True
            if valid:
                last = batch.last_offset
                try:
                    first = batch.base_offset
                    summary.records += batch.record_count
                except KafkaLogError as e:
                    report.problem(log_path, f"batch at offset {last}: records cannot be read: {e.reason}", position)
                    first = last
                if not 0 <= last - base <= INT32_MAX or first < base:
                    report.problem(
                        log_path,
                        f"batch offsets {first}..{last} do not fit the segment (base offset {base}, relative offsets "
                        "0..2^31-1)",
                        position,
                    )
                    if recovering:
                        summary.stop_reason = f"offset {last} overflows the segment at byte {position}"
                        recovering = False
                if previous_last is not None and not after_invalid:
                    if first <= previous_last:
                        report.problem(
                            log_path,
                            f"offsets go backwards: batch {first}..{last} starts at or below the previous batch's "
                            f"last offset {previous_last}",
                            position,
                        )
                    elif first > previous_last + 1:
                        state["gaps"] = state.get("gaps", 0) + 1
                        if state["gaps"] <= 3:
                            state.setdefault("gap_findings", []).append((log_path, previous_last, first, position))
                if summary.first_offset is None:
                    summary.first_offset = first
                    if first < base:
                        report.problem(
                            log_path,
                            f"the first batch starts at offset {first}, below the segment's base offset {base}",
                            position,
                        )
                if oi_check is not None:
                    oi_check.on_batch(position, first, last, previous_last)
                if ti_check is not None:
                    ti_check.on_batch(first, last, batch.max_timestamp)
                summary.max_timestamp = max(summary.max_timestamp, batch.max_timestamp)
                summary.last_offset = last
                if recovering:
                    model.on_valid_batch(position, last, batch.max_timestamp)
                    summary.valid_bytes = position + size
                previous_last = max(last, previous_last) if previous_last is not None else last
                after_invalid = False
            progressed += size
            if options.progress is not None and progressed >= _PROGRESS_STEP:
                options.progress(progressed)
                progressed = 0
    finally:
        batches.close()
        if options.progress is not None and progressed:
            options.progress(progressed)
    if summary.stop_reason is None and summary.parsed_end < records.size:
        left = records.size - summary.parsed_end
        report.problem(
            log_path,
            f"{left} trailing bytes do not form a batch (a partial or truncated write; recovery cuts them)",
            summary.parsed_end,
        )
        summary.stop_reason = f"{left} trailing bytes at byte {summary.parsed_end}"
    if oi_check is not None:
        oi_check.finish(summary.last_offset)
    if ti_check is not None:
        ti_check.finish(summary.last_offset)
    model.finish()
    summary.expected_index_entries = model.offset_entries
    summary.expected_time_index_entries = model.time_entries
    summary.index_matches = model.oi_same
    summary.time_index_matches = model.ti_same

    # Missing index files. Kafka creates them lazily: the active segment has none until its first index entry or a
    # clean close; a rolled segment always has both (the roll writes the final time entry and trims them).
    needs_index = model.offset_entries > 0 or not is_last
    for path in (index_path, time_path):
        if path.exists():
            continue
        if not needs_index:
            continue
        if not any_index_files:
            report.note(path, "missing, like every index file of this partition (Kafka rebuilds them at load)")
        else:
            report.problem(path, "missing (Kafka rebuilds it at load; until then lookups in this segment scan the log)")
    if oi_check is not None and ti_check is not None and oi_check.merge and ti_check.merge:
        _note_close_entries(report, time_index, oi_n, ti_n)
    for index in (offset_index, time_index):
        if index is not None:
            index.close()
    records.close()
    if summary.last_offset is None and not is_last:
        report.note(log_path, "empty segment before the active one")
    state["last_offset"] = previous_last if previous_last is not None else segment_previous_last
    return summary


def _note_close_entries(report: PartitionReport, time_index, oi_n: int, ti_n: int) -> None:
    """Note a time index with more entries than its appends explain.

    An append writes at most one time entry with each offset entry, and closing or rolling the segment writes one
    final entry; more than ``offset entries + 1`` means the segment was closed and reopened for appends (a clean
    restart each time). Valid, but rebuilding the index from the log will not reproduce the extra entries.
    """
    extra = ti_n - oi_n - 1
    if extra > 0:
        report.note(
            time_index.path,
            f"{extra} more entries than appends write ({ti_n} time entries, {oi_n} offset entries): final entries "
            "of earlier closes, the segment was reopened for appends after clean restarts; valid, but rebuilding "
            "the index from the log would not reproduce them",
        )


def _check_txn_index(report: PartitionReport, path: Path, base: int, segment_last: int | None) -> None:
    size = path.stat().st_size
    if size % ABORTED_TXN_SIZE:
        report.problem(
            path,
            f"{size % ABORTED_TXN_SIZE} trailing bytes after the last whole {ABORTED_TXN_SIZE}-byte entry",
            size - size % ABORTED_TXN_SIZE,
        )
    previous = None
    with open(path, "rb") as f:
        for slot in range(size // ABORTED_TXN_SIZE):
            position = slot * ABORTED_TXN_SIZE
            data = f.read(ABORTED_TXN_SIZE)
            try:
                txn = AbortedTxn.from_bytes(data)
            except KafkaLogError as e:
                report.problem(path, f"entry {slot}: {e.reason}", position)
                return
            if txn.last_offset < base:
                report.problem(
                    path,
                    f"entry {slot}: last offset {txn.last_offset} is below the segment's base offset {base} "
                    "(fails Kafka's sanity check)",
                    position,
                )
            elif segment_last is not None and txn.last_offset > segment_last:
                report.problem(
                    path,
                    f"entry {slot}: last offset {txn.last_offset} is beyond the segment's last offset {segment_last}",
                    position,
                )
            if txn.first_offset > txn.last_offset:
                report.problem(
                    path,
                    f"entry {slot}: first offset {txn.first_offset} is above its last offset {txn.last_offset}",
                    position,
                )
            if previous is not None and txn.last_offset <= previous:
                report.problem(
                    path,
                    f"entry {slot}: last offset {txn.last_offset} does not follow the previous {previous}",
                    position,
                )
            previous = txn.last_offset


def scan_partition(directory: Path, options: ScanOptions) -> PartitionReport:
    """Check one partition directory without modifying it."""
    directory = Path(directory)
    report = PartitionReport(directory, directory.name)
    logs: list[tuple[int, Path]] = []
    snapshots: list[tuple[int, Path]] = []
    txn_indexes: dict[int, Path] = {}
    index_like: list[tuple[int, Path]] = []
    for path in sorted(directory.iterdir()):
        name = path.name
        if not path.is_file():
            report.note(path, "unexpected directory inside a partition directory")
            continue
        if name.endswith((DELETED_SUFFIX, CLEANED_SUFFIX, SWAP_SUFFIX)):
            report.temp_files.append(path)
            report.note(path, "left over from a deletion, cleaning or swap; Kafka's loader finishes or removes it")
            continue
        base = _segment_base(name)
        if name.endswith((LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, SNAPSHOT_SUFFIX)):
            if base is None:
                report.problem(path, "the name does not start with a base offset")
                continue
            if len(name.split(".", 1)[0]) < 20:
                report.note(path, "the base offset is not zero-padded to 20 digits as Kafka names files")
        if name.endswith(LOG_SUFFIX):
            logs.append((base, path))
        elif name.endswith(SNAPSHOT_SUFFIX):
            snapshots.append((base, path))
        elif name.endswith(TXN_INDEX_SUFFIX):
            txn_indexes[base] = path
            index_like.append((base, path))
        elif name.endswith((INDEX_SUFFIX, TIME_INDEX_SUFFIX)):
            index_like.append((base, path))
    logs.sort()
    log_bases = {b for b, _ in logs}
    for base, path in index_like:
        if base not in log_bases:
            report.orphan_indexes.append(path)
            report.note(path, "an index with no .log: Kafka's loader deletes it")
    any_index_files = any(p.suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX) for _, p in index_like)
    try:
        topic, _ = parse_partition_dir(directory.name)
    except ValueError:
        topic = directory.name
    compacted = options.compacted or _topic_looks_compacted(topic)
    state: dict = {}
    for i, (base, path) in enumerate(logs):
        try:
            summary = _scan_segment(report, path, base, i == len(logs) - 1, state, options, any_index_files)
        except (OSError, KafkaLogError) as e:
            report.problem(path, f"cannot be read: {e}")
            continue
        report.segments.append(summary)
        if base in txn_indexes:
            _check_txn_index(report, txn_indexes[base], base, summary.last_offset)
    for log_path, previous, first, position in state.get("gap_findings", []):
        why = (
            "the topic looks compacted, and compaction removes offsets"
            if compacted
            else "legitimate after compaction (pass --compacted if the topic is)"
        )
        report.note(log_path, f"offsets {previous + 1}..{first - 1} are absent: {why}", position)
    if state.get("gaps", 0) > 3:
        report.note(directory, f"{state['gaps'] - 3} more offset gaps")
    leo = report.log_end_offset
    for base, path in snapshots:
        try:
            read_snapshot(path)
        except CorruptSnapshotError as e:
            report.problem(path, f"unreadable producer snapshot: {e.reason}")
        except OSError as e:
            report.problem(path, f"cannot be read: {e}")
        if leo is not None and base > leo:
            report.note(path, f"snapshot at offset {base} is beyond the log end {leo}; Kafka deletes it at load")
    epoch_path = directory / LEADER_EPOCH_CHECKPOINT
    if epoch_path.is_file():
        _check_leader_epochs(report, epoch_path, leo)
    return report


def _check_leader_epochs(report: PartitionReport, path: Path, leo: int | None) -> None:
    try:
        entries = _read_checkpoint(path, 0, EpochFormatter())
    except CheckpointError as e:
        report.problem(path, f"unreadable leader-epoch checkpoint: {e.reason}")
        return
    previous = None
    for number, (epoch, start) in enumerate(entries, start=3):
        if previous is not None and (epoch <= previous[0] or start < previous[1]):
            report.findings.append(
                Finding(
                    "problem",
                    path,
                    f"epoch {epoch} at {start} does not follow epoch {previous[0]} at {previous[1]}",
                    line=number,
                )
            )
        if leo is not None and start > leo:
            report.findings.append(
                Finding(
                    "note",
                    path,
                    f"epoch {epoch} starts at {start}, beyond the log end {leo}; Kafka truncates it at load",
                    line=number,
                )
            )
        previous = (epoch, start)


# ------------------------------------------------------------------------------------------------ log dir level


@dataclass
class VerifyResult:
    root: Path
    partitions: list[PartitionReport]
    findings: list[Finding]  # log-dir level findings (checkpoints)

    def all_findings(self) -> Iterator[Finding]:
        yield from self.findings
        for partition in self.partitions:
            yield from partition.findings

    @property
    def problems(self) -> int:
        return sum(f.is_problem for f in self.all_findings())


def _checkpoint_line(path: Path, topic: str, partition: int) -> int | None:
    """The 1-based line of ``<topic> <partition> ...`` in a checkpoint file (for locating a finding)."""
    try:
        lines = path.read_text("utf-8", errors="replace").splitlines()
    except OSError:
        return None
    for number, line in enumerate(lines, start=1):
        parts = line.split()
        if len(parts) == 3 and parts[0] == topic and parts[1] == str(partition):
            return number
    return None


def check_checkpoints(
    log_dir: Path, partitions: dict[tuple[str, int], PartitionReport], only: tuple[str, int] | None, partial: bool
) -> list[Finding]:
    """The root offset checkpoints against the partitions found (``only``: check just that partition's entries)."""
    findings: list[Finding] = []
    values: dict[str, dict[tuple[str, int], int]] = {}
    for name in ROOT_CHECKPOINTS:
        path = log_dir / name
        if not path.is_file():
            continue
        try:
            values[name] = dict(_read_checkpoint(path, 0, OffsetFormatter()))
        except CheckpointError as e:
            findings.append(Finding("problem", path, f"unreadable checkpoint: {e.reason}"))
    missing: dict[tuple[str, int], list[tuple[str, int]]] = {}
    for name, entries in values.items():
        path = log_dir / name
        for tp, offset in entries.items():
            if only is not None and tp != only:
                continue
            report = partitions.get(tp)
            if report is None:
                missing.setdefault(tp, []).append((name, offset))
                continue

            def bad(message: str, severity: str = "problem", _tp=tp, _path=path) -> None:
                findings.append(Finding(severity, _path, message, line=_checkpoint_line(_path, *_tp)))

            leo, first = report.log_end_offset, report.first_base
            label = f"{tp[0]}-{tp[1]}"
            if leo is None:
                if offset > 0:
                    bad(f"{label}: {offset} but the partition has no segments")
                continue
            if name == "recovery-point-offset-checkpoint" and offset > leo:
                bad(f"{label}: recovery point {offset} is beyond the log end offset {leo} (stale checkpoint)")
            elif name == "replication-offset-checkpoint" and offset > leo:
                bad(f"{label}: high watermark {offset} is beyond the log end offset {leo}")
            elif name == "log-start-offset-checkpoint" and not first <= offset <= leo:
                bad(f"{label}: log start offset {offset} is outside [first segment base {first}, log end offset {leo}]")
            elif name == "cleaner-offset-checkpoint" and offset > leo:
                bad(f"{label}: cleaner offset {offset} is beyond the log end {leo}; the cleaner resets it", "note")
    empty: list[str] = []
    for tp, entries in sorted(missing.items()):
        label = f"{tp[0]}-{tp[1]}"
        names = ", ".join(f"{n}={o}" for n, o in entries)
        path = log_dir / entries[0][0]
        line = _checkpoint_line(path, *tp)
        if all(o == 0 for _, o in entries):
            empty.append(label)
        elif partial:
            findings.append(
                Finding("note", path, f"{label} has no directory ({names}); --partial: a partial copy", line=line)
            )
        else:
            findings.append(
                Finding(
                    "problem",
                    path,
                    f"{label} has no directory, but the checkpoints say it held data ({names})",
                    line=line,
                )
            )
    if empty:
        shown = ", ".join(empty[:3]) + (f" and {len(empty) - 3} more" if len(empty) > 3 else "")
        findings.append(
            Finding(
                "note",
                log_dir,
                f"{len(empty)} checkpointed partition(s) have no directory, all at offset 0 (empty partitions, "
                f"nothing lost): {shown}",
            )
        )
    return findings


def verify_path(target: Path, options: ScanOptions) -> VerifyResult:
    """Verify a log dir or one partition directory; nothing is written."""
    target = Path(target)
    if is_partition_dir(target):
        parent = target.parent
        options.clean_shutdown = (parent / CLEAN_SHUTDOWN_FILE).exists()
        report = scan_partition(target, options)
        findings: list[Finding] = []
        try:
            tp = parse_partition_dir(target.name)
        except ValueError:
            tp = None
        if tp is not None and any((parent / n).is_file() for n in ROOT_CHECKPOINTS):
            findings = check_checkpoints(parent, {tp: report}, tp, options.partial)
        return VerifyResult(target, [report], findings)
    options.clean_shutdown = (target / CLEAN_SHUTDOWN_FILE).exists()
    reports: dict[tuple[str, int], PartitionReport] = {}
    renamed: list[PartitionReport] = []
    findings = []
    for path in sorted(target.iterdir()):
        if not path.is_dir() or path.name.startswith("."):
            continue
        try:
            tp = parse_partition_dir(path.name)
        except ValueError:
            findings.append(Finding("note", path, "not a partition directory; skipped"))
            continue
        report = scan_partition(path, options)
        if path.name.endswith(("-delete", "-future", "-stray")):
            report.note(path, "a renamed partition directory (being deleted, moved or a stray)")
            renamed.append(report)
        else:
            reports[tp] = report
    partitions = sorted([*reports.values(), *renamed], key=lambda r: r.name)
    findings += check_checkpoints(target, reports, None, options.partial)
    return VerifyResult(target, partitions, findings)


def _total_log_bytes(target: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(target):
        for name in files:
            if name.endswith(LOG_SUFFIX):
                with contextlib.suppress(OSError):
                    total += os.path.getsize(os.path.join(root, name))
    return total


# ------------------------------------------------------------------------------------------------ output


def _console(err: bool = False):
    from rich.console import Console

    stream = sys.stderr if err else sys.stdout
    width = None if stream.isatty() else 200
    return Console(file=stream, width=width, highlight=False, soft_wrap=False)


def _print_result(result: VerifyResult) -> None:
    from rich.table import Table

    table = Table(title=f"kafkalog verify {result.root}", title_justify="left")
    for column in ("partition", "segments", "batches", "records", "bytes", "problems", "notes"):
        table.add_column(column, justify="left" if column == "partition" else "right")
    for p in result.partitions:
        table.add_row(
            p.name, str(len(p.segments)), str(p.batches), str(p.records), str(p.bytes), str(p.problems), str(p.notes)
        )
    _console().print(table)
    base = (
        result.root.parent
        if len(result.partitions) == 1 and result.partitions[0].directory == result.root
        else (result.root)
    )
    findings = list(result.all_findings())
    for finding in sorted(findings, key=lambda f: not f.is_problem):
        click.echo(finding.format(base))
    problems = sum(f.is_problem for f in findings)
    notes = len(findings) - problems
    verdict = "clean" if problems == 0 else "NOT clean"
    click.echo(f"{verdict}: {problems} problem(s), {notes} note(s) in {len(result.partitions)} partition(s)")


def _with_progress(target: Path, run: Callable[[ScanOptions], VerifyResult], options: ScanOptions) -> VerifyResult:
    if not sys.stderr.isatty():
        return run(options)
    total = _total_log_bytes(target)
    if total < PROGRESS_MIN_BYTES:
        return run(options)
    from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn

    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        DownloadColumn(),
        TimeRemainingColumn(),
        console=_console(err=True),
        transient=True,
    ) as progress:
        task = progress.add_task("scanning", total=total)
        options.progress = lambda n: progress.advance(task, n)
        return run(options)


@click.command("verify")
@click.argument("path", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--compacted", is_flag=True, help="Treat every topic as compacted (offset gaps are expected).")
@click.option(
    "--partial",
    is_flag=True,
    help="PATH is a partial copy of a log dir: checkpoint entries for absent partitions are notes, not problems.",
)
@click.option(
    "--index-interval-bytes",
    type=click.IntRange(min=0),
    default=DEFAULT_INDEX_INTERVAL,
    show_default=True,
    help="The topic's index.interval.bytes (decides whether a missing active-segment index is expected).",
)
def verify_command(path: Path, compacted: bool, partial: bool, index_interval_bytes: int) -> None:
    """Check a log dir or partition directory without modifying it; exit 1 on any problem.

    Checks batch sizes and CRCs, offset order, segment bases, the offset and time indexes against the log,
    .txnindex files, producer snapshots, partial tails, and the root checkpoints.
    """
    if not is_partition_dir(path) and (problem := log_dir_problem(path)) is not None:
        raise click.ClickException(f"{problem}; verify takes a log dir or a partition directory")
    options = ScanOptions(index_interval_bytes=index_interval_bytes, compacted=compacted, partial=partial)
    result = _with_progress(path, lambda o: verify_path(path, o), options)
    _print_result(result)
    if result.problems:
        sys.exit(EXIT_ERROR)


# ------------------------------------------------------------------------------------------------ recover


def _describe_segments(report: PartitionReport) -> None:
    for s in report.segments:
        offsets = f"{s.first_offset}..{s.last_offset}" if s.last_offset is not None else "empty"
        index = "missing" if s.index_entries is None else f"{s.index_entries} entries"
        time_index = "missing" if s.time_index_entries is None else f"{s.time_index_entries} entries"
        click.echo(
            f"  {s.path.name}: {s.size} bytes, {s.batches} batches, offsets {offsets}; .index {index}, "
            f".timeindex {time_index}"
        )


def plan_recovery(report: PartitionReport) -> list[str]:
    """What Kafka's recovery (from offset 0, unclean shutdown) would change, from a read-only scan."""
    changes: list[str] = []
    for path in report.temp_files:
        changes.append(f"delete or complete {path.name} (a leftover .deleted/.cleaned/.swap file)")
    for path in report.orphan_indexes:
        changes.append(f"delete {path.name} (an index with no .log)")
    truncated_at = None
    for s in report.segments:
        if truncated_at is not None:
            changes.append(f"delete segment {s.path.name} ({s.size} bytes): it follows the truncated {truncated_at}")
            continue
        if s.valid_bytes < s.size:
            changes.append(
                f"truncate {s.path.name} from {s.size} to {s.valid_bytes} bytes ({s.size - s.valid_bytes} bytes cut: "
                f"{s.stop_reason})"
            )
            truncated_at = s.path.name
        stem = s.path.stem
        if not s.index_matches:
            before = "missing" if s.index_entries is None else f"{s.index_entries} entries"
            changes.append(f"rebuild {stem}{INDEX_SUFFIX} ({before} -> {s.expected_index_entries} entries)")
        if not s.time_index_matches:
            before = "missing" if s.time_index_entries is None else f"{s.time_index_entries} entries"
            changes.append(f"rebuild {stem}{TIME_INDEX_SUFFIX} ({before} -> {s.expected_time_index_entries} entries)")
    return changes


@click.command("recover")
@click.argument("partition_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--dry-run", is_flag=True, help="Only report what recovery would change; touch nothing.")
@click.option(
    "--index-interval-bytes",
    type=click.IntRange(min=0),
    default=DEFAULT_INDEX_INTERVAL,
    show_default=True,
    help="The topic's index.interval.bytes, used to rebuild the offset index.",
)
@click.option(
    "--segment-index-bytes",
    type=click.IntRange(min=12),
    default=DEFAULT_SEGMENT_INDEX_BYTES,
    show_default=True,
    help="The topic's segment.index.bytes (the size indexes are given while they are rebuilt).",
)
def recover_command(partition_dir: Path, dry_run: bool, index_interval_bytes: int, segment_index_bytes: int) -> None:
    """Run Kafka's log recovery offline on PARTITION_DIR: cut the invalid tail, delete what follows, rebuild indexes.

    This is what a broker does after an unclean shutdown with a recovery point of 0. Stop the broker first.
    """
    if not is_partition_dir(partition_dir):
        raise click.ClickException(f"{partition_dir} is not a partition directory (no segment files)")
    options = ScanOptions(index_interval_bytes=index_interval_bytes)
    before = scan_partition(partition_dir, options)
    click.echo(
        f"Before: {partition_dir}: {len(before.segments)} segment(s), {before.batches} batches, "
        f"{before.bytes} bytes, log end offset {before.log_end_offset}, {before.problems} problem(s)"
    )
    _describe_segments(before)
    changes = plan_recovery(before)
    if dry_run:
        click.echo("Dry run: recovery would" + (" change nothing." if not changes else ":"))
        for change in changes:
            click.echo(f"  - {change}")
        if changes:
            click.echo("Nothing was modified (dry run).")
        return
    from ..storage.config import LogConfig
    from ..storage.log import Log

    config = LogConfig({"index.interval.bytes": index_interval_bytes, "segment.index.bytes": segment_index_bytes})
    log = Log.open(partition_dir, config, had_clean_shutdown=False, recovery_point=0, log_start_offset=0)
    log.close()
    after = scan_partition(partition_dir, options)
    click.echo("Recovery:" + (" nothing to change." if not changes else ""))
    for change in changes:
        click.echo(f"  - {change.replace('delete or complete', 'deleted or completed')}")
    click.echo(
        f"After: {partition_dir}: {len(after.segments)} segment(s), {after.batches} batches, "
        f"{after.bytes} bytes, log end offset {after.log_end_offset}, {after.problems} problem(s)"
    )
    _describe_segments(after)
    for finding in after.findings:
        click.echo(finding.format(partition_dir.parent))
    if after.problems:
        sys.exit(EXIT_ERROR)
