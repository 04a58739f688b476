"""Kafka's log recovery (spec sections 3.4 and 9), planned without writing (``recover --dry-run``) and reported after.

The plan runs the storage layer's own ``LogSegment.recover`` (and, on an offset it cannot index,
``LogSegment.truncate_to``, as the loader's ``recover_log`` does) on a segment whose log is opened read-only and
whose indexes live in memory: the rule deciding which bytes are kept and which index entries are written exists
once, in storage, and the plan is what it computes. The partition-level rule of ``recover_log`` (a segment that
loses bytes takes every later segment with it) and the loader's clean-up (leftover ``.deleted``/``.cleaned``/
``.swap`` files, indexes without a ``.log``) are applied on top.

The report of a real recovery compares the partition directory before and after it: files deleted or created,
logs truncated, indexes whose bytes changed. It says what happened on disk, not what was planned.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from ..clock import SYSTEM_TIME
from ..errors import InvalidOffsetError, LogSegmentOffsetOverflowError
from ..layout import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX
from ..storage import segment as segment_module
from ..storage.file_records import FileRecords
from ..storage.index import OffsetIndex, TimeIndex
from ..storage.segment import LogSegment
from .findings import DEFAULT_SEGMENT_INDEX_BYTES, PartitionReport

ENTRY_SIZES = {INDEX_SUFFIX: OffsetIndex.ENTRY_SIZE, TIME_INDEX_SUFFIX: TimeIndex.ENTRY_SIZE}


# ------------------------------------------------------------------------------------------- in-memory segment


class _Buffer:
    """Bytes in memory in the shape of the index's file mapping (``view``, ``len``, ``flush``, ``close``)."""

    def __init__(self, size: int) -> None:
        self.data = bytearray(size)
        self.view: memoryview = memoryview(self.data)

    def __len__(self) -> int:
        return len(self.data)

    def flush(self) -> None:
        """Nothing to write: the bytes exist only here."""

    def close(self) -> None:
        self.view.release()


class _MemoryIndexMixin:
    """An index whose bytes are a buffer in memory instead of a file: the index's own append rules run unchanged,
    opening creates no file, resizing and flushing touch none. Invariant: ``_length == len(_mmap)``."""

    ENTRY_SIZE: int
    _max_index_size: int
    _length: int
    _mmap: Any

    def _open_and_map(self) -> None:
        self._existed = False
        self._mmap = None
        self._allocate(self._max_index_size - self._max_index_size % self.ENTRY_SIZE, 0)

    def _allocate(self, size: int, keep_entries: int) -> None:
        keep = bytes(self._mmap.view[: keep_entries * self.ENTRY_SIZE]) if self._mmap is not None else b""
        if self._mmap is not None:
            self._mmap.close()
        buffer = _Buffer(size)
        buffer.data[: len(keep)] = keep
        self._mmap, self._length = buffer, size

    def resize(self, new_size: int) -> bool:
        index = cast(Any, self)
        rounded = new_size - new_size % self.ENTRY_SIZE
        if rounded == self._length:
            return False
        if rounded < index.entries * self.ENTRY_SIZE:
            raise ValueError(f"cannot resize the in-memory index below its {index.entries} entries")
        self._allocate(rounded, index.entries)
        index._max_entries = rounded // self.ENTRY_SIZE
        index._refresh_last()
        return True

    def flush(self) -> None:
        """Nothing to write."""

    def entry_bytes(self) -> bytes:
        """The valid entries as they would be on disk after recovery (trimmed to them)."""
        used = cast(Any, self).entries * self.ENTRY_SIZE
        return bytes(self._mmap.view[:used]) if self._mmap is not None else b""


class MemoryOffsetIndex(_MemoryIndexMixin, OffsetIndex):
    """An offset index held in memory (see ``_MemoryIndexMixin``)."""


class MemoryTimeIndex(_MemoryIndexMixin, TimeIndex):
    """A time index held in memory (see ``_MemoryIndexMixin``)."""


class _ReadOnlyLog:
    """A segment's log opened read-only: reads go to the file; ``truncate_to`` only records the size it would keep."""

    def __init__(self, records: FileRecords) -> None:
        self._records = records
        self.kept: int | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._records, name)

    @property
    def size(self) -> int:
        return self._records.size if self.kept is None else self.kept

    def truncate_to(self, target_size: int) -> int:
        removed = max(0, self.size - target_size)
        self.kept = min(self.size, target_size)
        return removed


class _NoTransactionIndex:
    """The transaction index of a planned recovery: recovery without producer state only resets it."""

    def reset(self) -> None:
        """Nothing to reset: no file is touched."""

    def truncate_to(self, offset: int) -> None:
        """Nothing to truncate."""


class _DryRunSegment(LogSegment):
    """A LogSegment over a read-only log with in-memory indexes: its ``recover`` runs as is and writes nothing."""

    def __init__(self, log_path: Path, base: int, index_interval_bytes: int, max_index_size: int) -> None:
        self.read_only_log = _ReadOnlyLog(FileRecords.open(log_path, mutable=False))
        super().__init__(
            cast(FileRecords, self.read_only_log),
            log_path.parent,
            base,
            index_interval_bytes,
            max_index_size,
            0,
            SYSTEM_TIME,
        )
        self.txn_index = cast(Any, _NoTransactionIndex())
        self.memory_offset_index = MemoryOffsetIndex(self.offset_index_path(), base, max_index_size)
        self.memory_time_index = MemoryTimeIndex(self.time_index_path(), base, max_index_size)

    @property
    def offset_index(self) -> OffsetIndex:
        return self.memory_offset_index

    @property
    def time_index(self) -> TimeIndex:
        return self.memory_time_index

    def release(self) -> None:
        self.memory_offset_index.close_handler()
        self.memory_time_index.close_handler()
        self.read_only_log._records.close()


# ------------------------------------------------------------------------------------------- one segment


@contextlib.contextmanager
def _quiet(logger: logging.Logger) -> Iterator[None]:
    """Silence ``logger`` for the duration (restoring its previous state)."""
    was = logger.disabled
    logger.disabled = True
    try:
        yield
    finally:
        logger.disabled = was


@dataclass(frozen=True)
class SegmentRecovery:
    """What Kafka's recovery would make of one segment: the bytes it keeps and the index bytes it writes.

    ``overflow`` is set when a batch's offset does not fit the segment: the loader then splits the segment
    instead of recovering it (its other fields describe the segment as it is).
    """

    log_path: Path
    base: int
    size: int
    kept_bytes: int
    offset_index: bytes
    time_index: bytes
    overflow: str | None = None

    @property
    def cut_bytes(self) -> int:
        return self.size - self.kept_bytes

    @property
    def offset_entries(self) -> int:
        return len(self.offset_index) // OffsetIndex.ENTRY_SIZE

    @property
    def time_entries(self) -> int:
        return len(self.time_index) // TimeIndex.ENTRY_SIZE


def dry_recover_segment(
    log_path: Path, base: int, index_interval_bytes: int, max_index_size: int = DEFAULT_SEGMENT_INDEX_BYTES
) -> SegmentRecovery:
    """Run ``LogSegment.recover`` on the segment at ``log_path`` read-only (indexes in memory); nothing is written."""
    segment = _DryRunSegment(log_path, base, index_interval_bytes, max_index_size)
    size = segment.read_only_log._records.size
    overflow = None
    try:
        try:
            with _quiet(segment_module.log):  # the warnings of a recovery that does not happen would mislead
                segment.recover()
        except LogSegmentOffsetOverflowError as e:
            overflow = str(e)
        except InvalidOffsetError:  # as the loader's recover_log: the segment is truncated to its base offset
            segment.truncate_to(base)
        kept = segment.read_only_log.size
        return SegmentRecovery(
            log_path,
            base,
            size,
            size if overflow else kept,
            segment.memory_offset_index.entry_bytes(),
            segment.memory_time_index.entry_bytes(),
            overflow,
        )
    finally:
        segment.release()


# ------------------------------------------------------------------------------------------- the plan


def _index_change(path: Path, rebuilt: bytes, entry_size: int) -> str | None:
    """``rebuild <name> (<before> -> <after> entries)`` when the file's bytes differ from what recovery writes."""
    try:
        current = path.read_bytes()
    except FileNotFoundError:
        current = None
    if current == rebuilt:
        return None
    before = "missing" if current is None else f"{len(current) // entry_size} entries"
    return f"rebuild {path.name} ({before} -> {len(rebuilt) // entry_size} entries)"


def _segment_changes(report: PartitionReport, recovery: SegmentRecovery, reason: str | None) -> list[str]:
    changes: list[str] = []
    name = recovery.log_path.name
    if recovery.overflow is not None:
        return [f"split {name}: {recovery.overflow}"]
    if recovery.cut_bytes > 0:
        why = f": {reason}" if reason else ""
        changes.append(
            f"truncate {name} from {recovery.size} to {recovery.kept_bytes} bytes ({recovery.cut_bytes} bytes cut{why})"
        )
    stem = recovery.log_path.stem
    for suffix, rebuilt in ((INDEX_SUFFIX, recovery.offset_index), (TIME_INDEX_SUFFIX, recovery.time_index)):
        change = _index_change(report.directory / f"{stem}{suffix}", rebuilt, ENTRY_SIZES[suffix])
        if change is not None:
            changes.append(change)
    return changes


def plan_recovery(
    report: PartitionReport, index_interval_bytes: int, max_index_size: int = DEFAULT_SEGMENT_INDEX_BYTES
) -> list[str]:
    """What Kafka's recovery (from offset 0, unclean shutdown) would change in the scanned partition; read-only."""
    changes = [f"delete or complete {p.name} (a leftover .deleted/.cleaned/.swap file)" for p in report.temp_files]
    changes += [f"delete {p.name} (an index with no .log)" for p in report.orphan_indexes]
    truncated_at: str | None = None
    for summary in report.segments:
        if truncated_at is not None:
            changes.append(
                f"delete segment {summary.path.name} ({summary.size} bytes): it follows the truncated {truncated_at}"
            )
            continue
        recovery = dry_recover_segment(summary.path, summary.base, index_interval_bytes, max_index_size)
        changes += _segment_changes(report, recovery, summary.stop_reason)
        if recovery.cut_bytes > 0:
            truncated_at = summary.path.name
    return changes


# ------------------------------------------------------------------------------------------- what recovery did


@dataclass(frozen=True)
class FileState:
    """A file of a partition directory: its size and, for files other than logs, a digest of its bytes."""

    size: int
    digest: str | None


def directory_state(directory: Path) -> dict[str, FileState]:
    """The files of a partition directory (logs by size only: recovery only ever truncates them)."""
    state: dict[str, FileState] = {}
    for path in sorted(directory.iterdir()):
        if not path.is_file():
            continue
        size = path.stat().st_size
        digest = None if path.name.endswith(LOG_SUFFIX) else hashlib.blake2b(path.read_bytes()).hexdigest()
        state[path.name] = FileState(size, digest)
    return state


def _entries(name: str, size: int) -> str:
    for suffix, entry_size in ENTRY_SIZES.items():
        if name.endswith(suffix):
            return f"{size // entry_size} entries"
    return f"{size} bytes"


def describe_changes(before: dict[str, FileState], after: dict[str, FileState]) -> list[str]:
    """What changed between two ``directory_state``s, one line per file, in name order."""
    changes: list[str] = []
    for name in sorted(before.keys() | after.keys()):
        old, new = before.get(name), after.get(name)
        if new is None:
            assert old is not None
            changes.append(f"deleted {name} ({old.size} bytes)")
        elif old is None:
            changes.append(f"created {name} ({_entries(name, new.size)})")
        elif name.endswith(LOG_SUFFIX) and new.size != old.size:
            changes.append(f"truncated {name} from {old.size} to {new.size} bytes ({old.size - new.size} bytes cut)")
        elif new != old and name.endswith((INDEX_SUFFIX, TIME_INDEX_SUFFIX)):
            changes.append(f"rebuilt {name} ({_entries(name, old.size)} -> {_entries(name, new.size)})")
        elif new != old:
            changes.append(f"rewrote {name} ({old.size} -> {new.size} bytes)")
    return changes
