"""Memory-mapped offset index (``.index``) and time index (``.timeindex``), as Kafka's storage engine keeps them.

Both files are flat arrays of fixed-size, big-endian entries with no header and no checksum
(spec section 3; Kafka's ``AbstractIndex``, ``OffsetIndex`` and ``TimeIndex``):

* offset index entry, 8 bytes: int32 offset relative to the segment base, int32 byte position in the ``.log``;
* time index entry, 12 bytes: int64 timestamp, int32 relative offset.

A new file is preallocated to ``round_down(max_index_size, entry_size)`` bytes; an existing file's whole length
counts as entries, which is why indexes are trimmed to their valid size when closed.

Entries are read with :func:`struct.unpack_from` straight from the mapping; no view on the mapping outlives a call,
so the mapping can always be resized or closed.

Where these classes differ from Kafka's on purpose:

* Kafka throws ``IllegalArgumentException`` on an append to a full index; here :class:`IndexFullError` is raised, a
  subclass of both :class:`~kafkalog.errors.InvalidOffsetError` and :class:`ValueError`.
* ``TimeIndex.maybe_append`` with a timestamp below the last one is Kafka's ``IllegalStateException``; here it is an
  :class:`~kafkalog.errors.InvalidOffsetError` whose message says the timestamp went backwards.
* An index opened read-only never writes its file: ``close()`` does not trim it and ``resize`` refuses to change its
  size. Kafka reopens the file read-write for a resize even when the index was opened read-only.
* A missing file opened read-only raises :class:`FileNotFoundError` (Kafka would create an empty file first), and an
  invalid ``max_index_size`` for a new file raises before the file is created (Kafka leaves an empty file behind).
* ``resize`` to fewer bytes than the entries use raises :class:`ValueError` before touching the file (Kafka fails
  after it has already shortened the file).
"""

from __future__ import annotations

import errno
import itertools
import os
import struct
from abc import abstractmethod
from collections.abc import Callable
from enum import Enum
from typing import Any, Generic, NamedTuple, TypeVar

from kafkalog.errors import CorruptIndexError, IndexOffsetOverflowError, InvalidOffsetError, KafkaLogError

from ..layout import INT32_MAX
from .fileio import file_io
from .files import delete_if_exists
from .index_file import SegmentIndexFile
from .mapped_file import FileCopy, FileMapping

__all__ = [
    "NO_TIMESTAMP",
    "AbstractIndex",
    "IndexFullError",
    "OffsetIndex",
    "OffsetPosition",
    "TimeIndex",
    "TimestampOffset",
]

NO_TIMESTAMP = -1
"""Kafka's ``RecordBatch.NO_TIMESTAMP``: the timestamp of an empty time index's sentinel last entry."""

WARM_SECTION_BYTES = 8192
"""Size in bytes of the index tail that lookups search first (Kafka's ``warmEntries`` × entry size)."""

_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")
_INT64 = struct.Struct(">q")


class IndexFullError(InvalidOffsetError, ValueError):
    """An append to an index with no free slot (Kafka's ``IllegalArgumentException("...full index...")``)."""


class OffsetPosition(NamedTuple):
    """An offset index entry: an absolute ``offset`` and the byte ``position`` of its batch in the ``.log``."""

    offset: int
    position: int


class TimestampOffset(NamedTuple):
    """A time index entry: the largest ``timestamp`` seen up to and including the batch ending at ``offset``."""

    timestamp: int
    offset: int


_Entry = TypeVar("_Entry", bound=tuple[int, int])
"""An index's entry type: (offset, position) or (timestamp, offset)."""


class _SearchResult(Enum):
    LARGEST_LOWER_BOUND = 0
    SMALLEST_UPPER_BOUND = 1


class _SearchOn(Enum):
    KEY = 0
    VALUE = 1


def _round_down(number: int, factor: int) -> int:
    """Java's ``factor * (number / factor)``: integer division truncates toward zero, so negatives give 0."""
    return factor * int(number / factor) if number < 0 else factor * (number // factor)


class AbstractIndex(SegmentIndexFile, Generic[_Entry]):
    """What the offset and time indexes share: the mapping, its size, the entry count, search, lookups,
    truncation and resizing. Entries are ``_Entry`` pairs whose first field is the searched key (offset or
    timestamp); the field holding the entry's offset is ``_OFFSET_FIELD``.

    Invariants: the file holds ``entries`` whole entries followed (while writable) by preallocated zero bytes up
    to ``max_index_size`` rounded down to a whole entry; entries are sorted by both of their fields; every
    relative offset fits in ``[0, Int32.MAX]``. Closing or trimming cuts the file to its entries, so a reopened
    index counts exactly what was written.
    """

    ENTRY_SIZE = 0
    _ENTRY: struct.Struct
    _OFFSET_FIELD: _SearchOn
    _NAME = ""
    """How the length check names the file ("Index", "Time index"), as Kafka's messages do."""

    def __init__(
        self, path: str | os.PathLike[str], base_offset: int, max_index_size: int = -1, writable: bool = True
    ) -> None:
        super().__init__(path, base_offset)
        self._max_index_size = max_index_size
        self._writable = writable
        self._mmap: FileMapping | FileCopy | None = None
        self._closed = False
        self._length = 0
        self._open_and_map()
        self._max_entries = self._length // self.ENTRY_SIZE
        self._entries = self._max_entries if self._existed else 0
        self._refresh_last()

    # ----------------------------------------------------------------- opening and mapping

    def _open_and_map(self) -> None:
        """Open (creating and preallocating a new writable file) and map the whole file."""
        self._existed = self._path.exists()
        if not self._existed and not self._writable:
            raise FileNotFoundError(
                errno.ENOENT, "index file does not exist and the index is read-only", str(self._path)
            )
        if not self._existed:
            if self._max_index_size < self.ENTRY_SIZE:
                raise ValueError(f"Invalid max index size: {self._max_index_size} (entry size {self.ENTRY_SIZE})")
            try:
                fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:  # created by someone else in between: treat it as existing
                self._existed = True
            else:
                with os.fdopen(fd, "r+b") as f:
                    f.truncate(_round_down(self._max_index_size, self.ENTRY_SIZE))
        self._map_file()

    def _map_file(self) -> None:
        """Map the file as it is now on disk (no mapping at all for a 0-byte file); a read-only index reads a
        copy of it instead (``FileCopy``). A bare descriptor, not a file object: a recovered segment's indexes are
        remapped a few times each (trimmed, then grown back), and a buffered file object costs more system calls."""
        fd = os.open(self._path, (os.O_RDWR if self._writable else os.O_RDONLY) | os.O_CLOEXEC)
        try:
            if self._writable:
                length = os.fstat(fd).st_size
                self._mmap = FileMapping(fd, length, True, self._path) if length > 0 else None
            else:
                copy = FileCopy(fd, self._path)
                length = len(copy)
                self._mmap = copy if length > 0 else None
        finally:
            os.close(fd)  # neither the mapping nor the copy needs it
        self._length = length

    def _unmap(self) -> None:
        if self._mmap is not None:
            self._mmap.close()
            self._mmap = None

    def _buffer(self) -> memoryview:
        """The live mapping's bytes; only called when at least one entry exists or is being written."""
        if self._closed:
            raise ValueError(f"index {self._path} is closed")
        view = self._mmap.view if self._mmap is not None else None
        if view is None:
            raise ValueError(f"index {self._path} has no mapped bytes")
        return view

    # ----------------------------------------------------------------- attributes

    @property
    def max_index_size(self) -> int:
        """The size in bytes a new or reset index is given."""
        return self._max_index_size

    @property
    def entries(self) -> int:
        """The number of valid entries."""
        return self._entries

    @property
    def max_entries(self) -> int:
        """How many entries the current mapping holds: ``length // entry_size``."""
        return self._max_entries

    @property
    def length(self) -> int:
        """The mapped length in bytes, which is the file's length."""
        return self._length

    @property
    def entry_size(self) -> int:
        """Bytes per entry: 8 for the offset index, 12 for the time index."""
        return self.ENTRY_SIZE

    @property
    def size_in_bytes(self) -> int:
        """The bytes the valid entries use."""
        return self._entries * self.ENTRY_SIZE

    @property
    def is_writable(self) -> bool:
        """Whether the index was opened for writing."""
        return self._writable

    def is_full(self) -> bool:
        """True when no slot is free."""
        return self._entries >= self._max_entries

    # ----------------------------------------------------------------- offsets

    def _to_relative(self, offset: int) -> int | None:
        relative = offset - self._base_offset
        return relative if 0 <= relative <= INT32_MAX else None

    def relative_offset(self, offset: int) -> int:
        """``offset - base_offset``; IndexOffsetOverflowError unless it lies in [0, Int32.MAX]."""
        relative = self._to_relative(offset)
        if relative is None:
            message = f"Integer overflow for offset: {offset} (base offset {self._base_offset})"
            raise self._error(IndexOffsetOverflowError, message, offset)
        return relative

    def _error(self, error: type[KafkaLogError], message: str, offset: int) -> KafkaLogError:
        """``error`` for an append of ``offset`` that this index refuses, naming its file."""
        return error(message, offset=offset, path=str(self._path))

    def can_append_offset(self, offset: int) -> bool:
        """Whether ``offset`` fits this index's 4-byte relative offset."""
        return self._to_relative(offset) is not None

    # ----------------------------------------------------------------- entries and search

    @abstractmethod
    def _parse(self, buf: Any, n: int) -> _Entry:
        """The entry in slot ``n`` with an absolute offset; each index defines it."""

    @abstractmethod
    def _empty_entry(self) -> _Entry:
        """What a lookup below every entry answers, and the last entry of an empty index."""

    def _last_in_mapping(self) -> _Entry:
        """The last valid entry as the mapping holds it, or the empty entry."""
        if self._entries == 0:
            return self._empty_entry()
        return self._parse(self._buffer(), self._entries - 1)

    def entry(self, n: int) -> _Entry:
        """The entry in slot ``n`` (IndexError unless 0 <= n < entries)."""
        with self._lock:
            if not 0 <= n < self._entries:
                raise IndexError(
                    f"Attempt to fetch the {n}th entry from index {self._path}, which has size {self._entries}"
                )
            return self._parse(self._buffer(), n)

    def _compare(self, buf: Any, n: int, target: int, on: _SearchOn) -> int:
        entry = self._parse(buf, n)
        value = entry[0] if on is _SearchOn.KEY else entry[1]
        return (value > target) - (value < target)

    def lookup(self, target: int) -> _Entry:
        """The entry with the largest key (offset, or timestamp) <= ``target``, else the empty entry:
        ``(base_offset, 0)`` in the offset index, ``(-1, base_offset)`` in the time index."""
        with self._lock:
            slot = self._largest_lower_bound_slot(target, _SearchOn.KEY)
            if slot == -1:
                return self._empty_entry()
            return self._parse(self._buffer(), slot)

    def _index_slot_range_for(self, target: int, on: _SearchOn, result: _SearchResult) -> int:
        """Kafka's ``indexSlotRangeFor``: search the warm tail first, then the cold head (spec 3.1)."""
        entries = self._entries
        if entries == 0:
            return -1
        buf = self._buffer()
        first_hot = max(0, entries - 1 - WARM_SECTION_BYTES // self.ENTRY_SIZE)
        if self._compare(buf, first_hot, target, on) < 0:
            return self._binary_search(buf, target, on, result, first_hot, entries - 1)
        if self._compare(buf, 0, target, on) > 0:
            return -1 if result is _SearchResult.LARGEST_LOWER_BOUND else 0
        return self._binary_search(buf, target, on, result, 0, first_hot)

    def _binary_search(self, buf: Any, target: int, on: _SearchOn, result: _SearchResult, begin: int, end: int) -> int:
        lo, hi = begin, end
        while lo < hi:
            mid = (lo + hi + 1) >> 1
            cmp = self._compare(buf, mid, target, on)
            if cmp > 0:
                hi = mid - 1
            elif cmp < 0:
                lo = mid
            else:
                return mid
        if result is _SearchResult.LARGEST_LOWER_BOUND:
            return lo
        return -1 if lo == self._entries - 1 else lo + 1

    def _largest_lower_bound_slot(self, target: int, on: _SearchOn) -> int:
        return self._index_slot_range_for(target, on, _SearchResult.LARGEST_LOWER_BOUND)

    def _smallest_upper_bound_slot(self, target: int, on: _SearchOn) -> int:
        return self._index_slot_range_for(target, on, _SearchResult.SMALLEST_UPPER_BOUND)

    def _truncate_slot_count(self, offset: int, on: _SearchOn) -> int:
        """Entries kept by ``truncate_to(offset)``: the three cases of Kafka's ``truncateTo``."""
        slot = self._largest_lower_bound_slot(offset, on)
        if slot < 0:
            return 0
        entry_offset = self._parse(self._buffer(), slot)[0 if on is _SearchOn.KEY else 1]
        return slot if entry_offset == offset else slot + 1

    def _append_all(self, entries: list[tuple[int, int]], append_one: Callable[[int, int], None]) -> None:
        """``append_one`` of every entry in order; written at once when ``plan_all`` can plan them, else one by one,
        raising where that call would."""
        with self._lock:
            plan = self.plan_all(entries)
            if plan is None:
                for first, second in entries:
                    append_one(first, second)
                return
            self.write_plan(plan)

    @abstractmethod
    def plan_all(self, entries: list[tuple[int, int]]) -> tuple[list[tuple[int, int]], Any] | None:
        """What appending every entry in order would write, for :meth:`write_plan`; None when one append would
        raise."""

    def _truncate_to_entries(self, entries: int) -> None:
        """Set the entry count (the bytes after it stay until overwritten or trimmed)."""
        with self._lock:
            self._entries = entries
            self._refresh_last()

    @abstractmethod
    def _refresh_last(self) -> None:
        """Re-read the cached last entry from the mapping; each index defines it."""

    def _write_entry(self, *fields: int) -> None:
        self._ENTRY.pack_into(self._buffer(), self._entries * self.ENTRY_SIZE, *fields)
        self._entries += 1

    def write_plan(self, plan: tuple[list[tuple[int, int]], Any]) -> None:
        """Write what ``plan_all`` planned (its entries, with one pack, and the last entry they leave); the plan holds
        only until the next change to the index."""
        rows, last = plan
        if not rows:
            return
        with self._lock:
            fields = self._ENTRY.format.lstrip(">")
            struct.pack_into(">" + fields * len(rows), self._buffer(), self._entries * self.ENTRY_SIZE,
                             *[field for row in rows for field in row])  # fmt: skip
            self._entries += len(rows)
            self._set_last(last)

    @abstractmethod
    def _set_last(self, last: Any) -> None:
        """Cache the last entry written (each index keeps its own form of it)."""

    # ----------------------------------------------------------------- size management

    def truncate(self) -> None:
        """Remove every entry (the file keeps its size)."""
        self._truncate_to_entries(0)

    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose offset is >= ``offset`` (searched by the entries' offset field)."""
        with self._lock:
            self._truncate_to_entries(self._truncate_slot_count(offset, self._OFFSET_FIELD))

    def sanity_check(self) -> None:
        """Raise CorruptIndexError on obvious damage: the checks of the entries (each index's), then a length
        that is not whole entries."""
        with self._lock:
            if self._entries != 0:
                self._check_entries()
            if self._length % self.ENTRY_SIZE != 0:
                raise CorruptIndexError(
                    f"{self._NAME} file is corrupt, found {self._length} bytes which is neither positive nor a "
                    f"multiple of {self.ENTRY_SIZE}",
                    path=str(self._path),
                )

    @abstractmethod
    def _check_entries(self) -> None:
        """CorruptIndexError when the (non-empty) entries cannot be right."""

    def resize(self, new_size: int) -> bool:
        """Set the file and mapping to ``new_size`` rounded down to whole entries; True if the size changed."""
        with self._lock:
            rounded = _round_down(new_size, self.ENTRY_SIZE)
            if self._length == rounded:
                return False
            if self._closed:
                raise ValueError(f"index {self._path} is closed")
            if not self._writable:
                raise ValueError(f"index {self._path} was opened read-only and cannot be resized to {rounded} bytes")
            if rounded < self._entries * self.ENTRY_SIZE:
                raise ValueError(
                    f"cannot resize index {self._path} to {rounded} bytes: its {self._entries} entries need "
                    f"{self._entries * self.ENTRY_SIZE}"
                )
            self._unmap()
            os.truncate(self._path, rounded)
            self._map_file()
            self._max_entries = self._length // self.ENTRY_SIZE
            self._refresh_last()
            return True

    def trim_to_valid_size(self) -> None:
        """Shrink the file to exactly the valid entries (run on close and on roll)."""
        with self._lock:
            if not self._closed:
                self.resize(self._entries * self.ENTRY_SIZE)

    def reset(self) -> None:
        """Remove every entry, then give the file ``max_index_size`` bytes again."""
        with self._lock:
            self.truncate()
            self.resize(self._max_index_size)

    def flush(self) -> None:
        """Write the mapped pages to disk."""
        with self._lock:
            if self._mmap is not None and self._writable:
                file_io().msync(self._mmap, self._path)

    def close(self) -> None:
        """Trim to the valid size (writable indexes only), then unmap."""
        with self._lock:
            if self._writable:
                self.trim_to_valid_size()
            self.close_handler()

    def close_handler(self) -> None:
        """Unmap without trimming; lookups fail afterwards."""
        with self._lock:
            self._unmap()
            self._closed = True

    def delete_if_exists(self) -> bool:
        """Unmap and delete the file; False if there was no file."""
        with self._lock:
            self.close_handler()
            return delete_if_exists(self._path)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(path={str(self._path)!r}, base_offset={self._base_offset}, "
            f"entries={self._entries}, max_entries={self._max_entries})"
        )


class OffsetIndex(AbstractIndex[OffsetPosition]):
    """The ``.index`` file: relative offset → byte position, one entry every ``index.interval.bytes``.

    Invariant: offsets strictly increase from entry to entry (an append at or below the last is refused), and
    each position is the start of a batch in the segment's ``.log`` holding that offset or an earlier one.
    """

    ENTRY_SIZE = 8
    _ENTRY = _OFFSET_ENTRY
    _OFFSET_FIELD = _SearchOn.KEY
    _NAME = "Index"
    _last_offset: int  # the last entry's offset, or the base offset when empty (kept by _refresh_last)

    def _parse(self, buf: Any, n: int) -> OffsetPosition:
        relative, position = _OFFSET_ENTRY.unpack_from(buf, n * 8)
        return OffsetPosition(self._base_offset + relative, position)

    def _empty_entry(self) -> OffsetPosition:
        return OffsetPosition(self._base_offset, 0)

    def _refresh_last(self) -> None:
        self._last_offset = self._last_in_mapping().offset

    @property
    def last_offset(self) -> int:
        """The last entry's absolute offset, or the base offset when empty."""
        return self._last_offset

    def fetch_upper_bound_offset(self, start_position: int | OffsetPosition, fetch_size: int) -> OffsetPosition | None:
        """The first entry whose position is >= ``start_position + fetch_size`` (Kafka's search), or None.

        ``start_position`` may also be an :class:`OffsetPosition`, as Kafka passes it; its position is used.
        Kafka's search has one quirk that is kept: when the bound equals the first entry's position exactly (and
        the search goes to the cold section), the second entry is returned, which is still a valid upper bound.
        """
        if isinstance(start_position, OffsetPosition):
            start_position = start_position.position
        with self._lock:
            slot = self._smallest_upper_bound_slot(start_position + fetch_size, _SearchOn.VALUE)
            if slot == -1:
                return None
            return self._parse(self._buffer(), slot)

    def append(self, offset: int, position: int) -> None:
        """Add ``(offset, position)``; the offset must be above the last one unless the index is empty."""
        with self._lock:
            if self.is_full():
                raise self._error(IndexFullError, f"Attempt to append to a full index (size = {self._entries})", offset)
            if self._entries != 0 and offset <= self._last_offset:
                message = (
                    f"Attempt to append an offset {offset} to position {self._entries} no larger than the last "
                    f"offset appended ({self._last_offset})"
                )
                raise self._error(InvalidOffsetError, message, offset)
            self._write_entry(self.relative_offset(offset), position)
            self._last_offset = offset

    def plan_all(self, entries: list[tuple[int, int]]) -> tuple[list[tuple[int, int]], int] | None:
        """What :meth:`append` of every ``(offset, position)`` in order would write, for :meth:`write_plan`; None when
        one of those calls would raise (the index full, an offset not above the last one, or out of range)."""
        with self._lock:
            offsets = [offset for offset, _ in entries]
            previous = [self._last_offset] if self._entries else []  # an empty index takes any first offset
            if not (
                self._entries + len(entries) <= self._max_entries
                and all(a < b for a, b in itertools.pairwise([*previous, *offsets]))
                and all(self._to_relative(offset) is not None for offset in offsets)
            ):
                return None
            rows = [(offset - self._base_offset, position) for offset, position in entries]
            return rows, offsets[-1] if offsets else self._last_offset

    def append_all(self, entries: list[tuple[int, int]]) -> None:
        """:meth:`append` of every ``(offset, position)`` in order; written at once when :meth:`plan_all` can."""
        self._append_all(entries, self.append)

    def _set_last(self, last: int) -> None:
        self._last_offset = last

    def _check_entries(self) -> None:
        """The last offset must not be below the base offset."""
        if self._last_offset < self._base_offset:
            raise CorruptIndexError(
                f"Corrupt index found, index file has non-zero size but the last offset is {self._last_offset} "
                f"which is less than the base offset {self._base_offset}",
                path=str(self._path),
            )


class TimeIndex(AbstractIndex[TimestampOffset]):
    """The ``.timeindex`` file: the largest timestamp so far → the offset of the batch that carried it.

    Invariants: timestamps strictly increase and offsets never decrease from entry to entry (an equal timestamp
    is not written); one slot is kept free so that closing or rolling the segment can always add its last entry.
    """

    ENTRY_SIZE = 12
    _ENTRY = _TIME_ENTRY
    _OFFSET_FIELD = _SearchOn.VALUE
    _NAME = "Time index"
    _last_entry: TimestampOffset  # the last entry, or (-1, base offset) when empty (kept by _refresh_last)

    def _parse(self, buf: Any, n: int) -> TimestampOffset:
        timestamp, relative = _TIME_ENTRY.unpack_from(buf, n * 12)
        return TimestampOffset(timestamp, self._base_offset + relative)

    def _empty_entry(self) -> TimestampOffset:
        return TimestampOffset(NO_TIMESTAMP, self._base_offset)

    def _refresh_last(self) -> None:
        self._last_entry = self._last_in_mapping()

    def is_full(self) -> bool:
        """True one slot early: the last slot is kept for the entry written on roll or close."""
        return self._entries >= self._max_entries - 1

    @property
    def last_entry(self) -> TimestampOffset:
        """The last entry, or ``(-1, base_offset)`` when empty."""
        return self._last_entry

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        """Add ``(timestamp, offset)`` if the timestamp is above the last one; an equal timestamp is dropped.

        Raises IndexFullError when full (unless ``skip_full_check``, used on roll and close), and
        InvalidOffsetError when the offset or the timestamp goes below the last entry's (Kafka throws
        ``IllegalStateException`` for the timestamp case).
        """
        with self._lock:
            if not skip_full_check and self.is_full():
                message = f"Attempt to append to a full time index (size = {self._entries})"
                raise self._error(IndexFullError, message, offset)
            last = self._last_entry
            if self._entries != 0 and (offset < last.offset or timestamp < last.timestamp):
                raise self._error(InvalidOffsetError, self._backwards_message(timestamp, offset), offset)
            if timestamp > last.timestamp:
                if self._entries >= self._max_entries:  # no byte left even for the reserved slot
                    message = f"Attempt to append past the end of a full time index (size = {self._entries})"
                    raise self._error(IndexFullError, message, offset)
                self._write_entry(timestamp, self.relative_offset(offset))
                self._last_entry = TimestampOffset(timestamp, offset)

    def _backwards_message(self, timestamp: int, offset: int) -> str:
        """Why an entry going back from the last one is refused: its offset first, then its timestamp."""
        last = self._last_entry
        if offset < last.offset:
            return (
                f"Attempt to append an offset ({offset}) to slot {self._entries} no larger than the last offset "
                f"appended ({last.offset})"
            )
        return (
            f"Attempt to append a timestamp ({timestamp}) to slot {self._entries} no larger than the last "
            f"timestamp appended ({last.timestamp}): timestamps in a time index must not go backwards"
        )

    def plan_all(self, entries: list[tuple[int, int]]) -> tuple[list[tuple[int, int]], TimestampOffset] | None:
        """What :meth:`maybe_append` of every ``(timestamp, offset)`` in order would write, for :meth:`write_plan`;
        None when one of those calls would raise (the index full, an offset or timestamp going back)."""
        with self._lock:
            last = self._last_entry
            rows: list[tuple[int, int]] = []
            for timestamp, offset in entries:
                entries_now = self._entries + len(rows)
                if entries_now >= self._max_entries - 1:  # is_full
                    return None
                if entries_now and (offset < last.offset or timestamp < last.timestamp):
                    return None
                if timestamp > last.timestamp:
                    relative = self._to_relative(offset)
                    if relative is None:
                        return None
                    rows.append((timestamp, relative))
                    last = TimestampOffset(timestamp, offset)
            return rows, last

    def maybe_append_all(self, entries: list[tuple[int, int]]) -> None:
        """:meth:`maybe_append` of every ``(timestamp, offset)`` in order; written at once when none would raise."""
        self._append_all(entries, self.maybe_append)

    def _set_last(self, last: TimestampOffset) -> None:
        self._last_entry = last

    def _check_entries(self) -> None:
        """Timestamps must not end below where they start, nor the last offset lie below the base offset."""
        last = self._last_entry
        first_timestamp = _INT64.unpack_from(self._buffer(), 0)[0]
        if last.timestamp < first_timestamp:
            raise CorruptIndexError(
                f"Corrupt time index found, time index file has non-zero size but the last timestamp is "
                f"{last.timestamp} which is less than the first timestamp {first_timestamp}",
                path=str(self._path),
            )
        if last.offset < self._base_offset:
            raise CorruptIndexError(
                f"Corrupt time index found, time index file has non-zero size but the last offset is "
                f"{last.offset} which is less than the first offset {self._base_offset}",
                path=str(self._path),
            )
