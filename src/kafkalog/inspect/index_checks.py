"""The checks of a segment's offset and time indexes against its log, walked alongside the batches (spec sections 3
and 4.1), and of its transaction index; read-only.

``OffsetIndexCheck`` and ``TimeIndexCheck`` see each batch once, in position order, so a scan stays one pass over
the log; ``finish`` reports what only the end shows (entries past the data).
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

from ..errors import KafkaLogError
from ..storage.index import AbstractIndex, OffsetIndex, OffsetPosition, TimeIndex, TimestampOffset
from ..storage.txn_index import ABORTED_TXN_SIZE, AbortedTxn
from .findings import PartitionReport

READ_CHUNK = 1 << 20


def _nonzero_length(path: Path) -> int:
    """The file length without its trailing zero bytes (read backwards in chunks: constant memory)."""
    with open(path, "rb") as f:
        end = os.fstat(f.fileno()).st_size
        while end > 0:
            start = max(0, end - READ_CHUNK)
            f.seek(start)
            chunk = f.read(end - start).rstrip(b"\0")
            if chunk:
                return start + len(chunk)
            end = start
    return 0


def entries_without_zero_tail(path: Path, entry_size: int, total: int) -> int:
    """How many entries come before a preallocated, zero-filled tail of at least two entries."""
    used = -(-_nonzero_length(path) // entry_size)
    return used if total - used >= 2 else total


def open_index(cls, path: Path, base: int, report: PartitionReport):
    """A read-only index, or None (with a finding) when it cannot even be opened or fails its sanity check."""
    try:
        index = cls(path, base, writable=False)
    except (OSError, ValueError, KafkaLogError) as e:
        report.problem(path, f"cannot open the index: {e}")
        return None
    return index


class _IndexCheck(ABC):
    """What both index checks share: the report, the index, how many entries to check, and findings by slot."""

    def __init__(self, report: PartitionReport, index: AbstractIndex, entries: int) -> None:
        self.report = report
        self.path = index.path
        self.n = entries
        self.base = index.base_offset
        self.entry_size = index.entry_size

    def _entry_problem(self, slot: int, message: str) -> None:
        self.report.problem(self.path, f"entry {slot}: {message}", slot * self.entry_size)

    def _below_base(self, slot: int, offset: int) -> bool:
        """A problem (and True) when an entry's offset is below the segment's base offset."""
        if offset >= self.base:
            return False
        self._entry_problem(slot, f"offset {offset} is below the segment's base offset {self.base}")
        return True

    # The order the entries must keep, in the words of the findings (set by each index check).
    ORDER_RULE = ""

    @abstractmethod
    def _entry(self, slot: int) -> Any:
        """Entry ``slot`` of the index (each index check reads its own kind)."""

    def _entry_ok(self, slot: int, entry: Any) -> bool:
        """Checks of one entry on its own beyond the base offset (a finding and False when it fails)."""
        return True

    @abstractmethod
    def _in_order(self, previous: Any, entry: Any) -> bool:
        """Whether ``entry`` keeps ORDER_RULE after ``previous``."""

    @abstractmethod
    def _describe(self, entry: Any) -> str:
        """An entry as the findings show it."""

    def _check_order(self) -> bool:
        """Every entry at or above the base and sound on its own, and in ORDER_RULE's order after the one before
        (a finding for each that is not); True when all are."""
        ok = True
        previous = None
        for slot in range(self.n):
            entry = self._entry(slot)
            if self._below_base(slot, entry.offset):
                ok = False
            if not self._entry_ok(slot, entry):
                ok = False
            if previous is not None and not self._in_order(previous, entry):
                self.report.problem(
                    self.path,
                    f"entries {slot - 1} and {slot}: {self._describe(previous)} then {self._describe(entry)}; "
                    f"{self.ORDER_RULE}",
                    (slot - 1) * self.entry_size,
                )
                ok = False
            previous = entry
        return ok


class OffsetIndexCheck(_IndexCheck):
    """Walks an offset index alongside the batches of its segment (both in position order)."""

    def __init__(self, report: PartitionReport, index: OffsetIndex, entries: int, log_size: int) -> None:
        super().__init__(report, index, entries)
        self.index = index
        self.i = 0
        # an entry whose offset should be the last offset of a batch still to come
        self.pending: tuple[int, OffsetPosition] | None = None
        self.log_size = log_size
        self.merge = self._check_order()

    # Entries strictly increasing in offset and position, at or above the base, inside the log.
    ORDER_RULE = "entries must strictly increase"

    def _entry(self, slot: int) -> OffsetPosition:
        return self.index.entry(slot)

    def _entry_ok(self, slot: int, entry: OffsetPosition) -> bool:
        if 0 <= entry.position < max(self.log_size, 1):
            return True
        self._entry_problem(
            slot, f"position {entry.position} (offset {entry.offset}) is outside the log ({self.log_size} bytes)"
        )
        return False

    def _in_order(self, previous: OffsetPosition, entry: OffsetPosition) -> bool:
        return entry.offset > previous.offset and entry.position > previous.position

    def _describe(self, entry: OffsetPosition) -> str:
        return f"(offset {entry.offset}, position {entry.position})"

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


class TimeIndexCheck(_IndexCheck):
    """Walks a time index alongside the batches of its segment (entries ordered by offset)."""

    def __init__(self, report: PartitionReport, index: TimeIndex, entries: int) -> None:
        super().__init__(report, index, entries)
        self.index = index
        self.j = 0
        self.max_ts = -1
        self.merge = self._check_order()

    ORDER_RULE = "timestamps and offsets must not decrease"

    def _entry(self, slot: int) -> TimestampOffset:
        return self.index.entry(slot)

    def _in_order(self, previous: TimestampOffset, entry: TimestampOffset) -> bool:
        return entry.timestamp >= previous.timestamp and entry.offset >= previous.offset

    def _describe(self, entry: TimestampOffset) -> str:
        return f"(timestamp {entry.timestamp}, offset {entry.offset})"

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


def note_close_entries(report: PartitionReport, time_index, oi_n: int, ti_n: int) -> None:
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


def check_txn_index(report: PartitionReport, path: Path, base: int, segment_last: int | None) -> None:
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
