"""The files of partition directories, read without a ``Log``: discovery, indexes, segment ends, offsets.

Nothing here opens a file for writing or maps one: segments are read through a read-only ``FileRecords``
and indexes with ``pread`` (a memory map of a file that shrinks, or of a sparse preallocated index on a full
tmpfs, raises SIGBUS, which kills the process with no message). A broker or kafkalog may be writing at the
same time:

* an incomplete batch at the end of the active segment is not there yet (the scan stops before it), and the
  zero-filled tail of a preallocated segment (``preallocate=true``) ends the scan the same way;
* the ``.index`` and ``.timeindex`` of an active segment are preallocated and zero-filled past their last
  entry, so only their leading increasing run of entries is trusted;
* a segment deleted under a reader reads as gone (``open_segment`` answers None).
"""

from __future__ import annotations

import bisect
import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import CorruptRecordError, KafkaStorageError
from ..layout import (
    INDEX_SUFFIX,
    LOG_START_OFFSET_CHECKPOINT,
    LOG_SUFFIX,
    PARTITION_DIR_NAME,
    REPLICATION_OFFSET_CHECKPOINT,
    SEGMENT_FILE,
    filename_prefix,
)
from ..storage.checkpoints import CheckpointError, OffsetCheckpointFile
from ..storage.file_records import FileRecords

# Topics a Kafka admin client leaves out of listTopics(), so subscribePattern never matches them.
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__cluster_metadata"})
RUN_BYTES = 8 * 1024 * 1024  # batch bytes decoded per columnar call while reading


@dataclass(frozen=True)
class PartitionDir:
    """One ``<topic>-<partition>`` directory in a log dir."""

    topic: str
    partition: int
    directory: str
    log_dir: str

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True)
class PartitionOffsets:
    """What a reader may read: [log_start, latest). ``latest`` is the high watermark a single-replica leader
    has, the log end offset (one past the last complete batch); ``checkpointed_high_watermark`` is what the
    log dir's replication-offset-checkpoint says (None without an entry), which may lag it."""

    log_start: int
    log_end: int
    latest: int
    checkpointed_high_watermark: int | None = None


def discover(paths: list[str]) -> dict[tuple[str, int], PartitionDir]:
    """Every partition directory in the log dirs ``paths``; a partition found in two of them is an error."""
    found: dict[tuple[str, int], PartitionDir] = {}
    for log_dir in paths:
        root = Path(log_dir)
        if not root.is_dir():
            raise KafkaStorageError(f"Log directory {log_dir} given in option 'path' does not exist", path=log_dir)
        for entry in sorted(os.scandir(root), key=lambda e: e.name):
            match = PARTITION_DIR_NAME.match(entry.name)
            # '<topic>-<n>.<uuid>-delete', '-future' and '-stray' directories do not match: the partition
            # part of their names is not all digits.
            if match is None or not entry.is_dir():
                continue
            key = (match.group(1), int(match.group(2)))
            part = PartitionDir(key[0], key[1], entry.path, str(root))
            if key in found:
                raise KafkaStorageError(
                    f"Partition {part.name} is in two log directories: {found[key].log_dir} and {part.log_dir}"
                )
            found[key] = part
    return found


def segment_bases(directory: str) -> list[int]:
    """Base offsets of the segment files in a partition directory, ascending (``.deleted`` etc. left out)."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    return sorted(int(m.group(1)) for name in names if (m := SEGMENT_FILE.match(name)))


def segment_path(directory: str, base: int, suffix: str) -> str:
    return os.path.join(directory, filename_prefix(base) + suffix)


def read_checkpoint(log_dir: str, name: str) -> dict[tuple[str, int], int]:
    """A root offset checkpoint of a log dir, read without creating it; unreadable or missing reads as empty."""
    path = os.path.join(log_dir, name)
    if not os.path.isfile(path):
        return {}
    try:
        return OffsetCheckpointFile(path, create=False).read()
    except CheckpointError:
        return {}


def _used_slots(fd: int, slots: int, entry_size: int) -> int:
    """How many slots precede the zero-filled tail of a preallocated index: a binary search for the first
    all-zero slot after slot 0, entries being written in order from the start. Parsing only those keeps a
    lookup in an active segment's 10 MB index cheap; what is parsed is still validated entry by entry.

    Each probe is one ``pread``: a file hole on a full tmpfs reads as zeros here, where a memory map of it
    would raise SIGBUS."""
    lo, hi = 1, slots
    zero = bytes(entry_size)
    while lo < hi:
        mid = (lo + hi) // 2
        if os.pread(fd, entry_size, mid * entry_size) == zero:
            hi = mid
        else:
            lo = mid + 1
    return lo


def read_used_entries(path: str, entry_size: int) -> bytes:
    """The leading used slots of an index file (see ``_used_slots``), read with ``pread``; b"" when the file is
    missing, empty or unreadable. Entries are validated by the caller."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return b""
    try:
        slots = os.fstat(fd).st_size // entry_size
        if slots == 0:
            return b""
        used = _used_slots(fd, slots, entry_size) * entry_size
        data = os.pread(fd, used, 0)
        return data[: len(data) // entry_size * entry_size]  # the file may have shrunk under us
    except OSError:
        return b""
    finally:
        os.close(fd)


def index_entries(directory: str, base: int) -> tuple[np.ndarray, np.ndarray]:
    """(absolute offsets, positions) of the trustworthy entries of a segment's ``.index`` (maybe none).

    The index is read with ``pread`` (never mapped); entries are kept while both fields strictly increase,
    which cuts the zero-filled preallocated tail of an active segment's index (and anything written out of
    order).
    """
    empty = np.empty(0, np.int64)
    used = read_used_entries(segment_path(directory, base, INDEX_SUFFIX), 8)
    if not used:
        return empty, empty
    raw = np.frombuffer(used, dtype=">i4").astype(np.int64).reshape(-1, 2)
    rel, pos = raw[:, 0], raw[:, 1]
    if rel[0] < 0 or pos[0] < 0:
        return empty, empty
    bad = np.flatnonzero((np.diff(rel) <= 0) | (np.diff(pos) <= 0))
    n = int(bad[0]) + 1 if len(bad) else len(rel)
    return rel[:n] + base, pos[:n]


def start_position(directory: str, base: int, target: int) -> int:
    """A file position at or before the batch holding ``target`` (the index's largest entry <= target)."""
    offsets, positions = index_entries(directory, base)
    slot = int(np.searchsorted(offsets, target, side="right")) - 1
    return int(positions[slot]) if slot >= 0 else 0


def open_segment(directory: str, base: int) -> FileRecords | None:
    """The segment's records file opened read-only, or None when it is gone (deleted under us)."""
    path = segment_path(directory, base, LOG_SUFFIX)
    try:
        return FileRecords.open(Path(path), file_already_exists=True, mutable=False)
    except KafkaStorageError:
        if os.path.exists(path):
            raise
        return None


def is_zero_fill(records: FileRecords, position: int | None) -> bool:
    return position is not None and records.read(position, 12) == bytes(12)


def complete_batches(records: FileRecords, start: int) -> Iterator:
    """The complete batches from ``start``; a preallocated zero tail ends the walk like a partial batch."""
    try:
        for _, batch in records.batches(start):
            yield batch
    except CorruptRecordError as e:
        if not is_zero_fill(records, e.position):
            raise


def complete_headers(records: FileRecords, start: int) -> Iterator:
    """The headers of the complete batches from ``start``; a preallocated zero tail ends the walk."""
    try:
        yield from records.batch_headers(start)
    except CorruptRecordError as e:
        if not is_zero_fill(records, e.position):
            raise


def scan_from(
    scan: Callable[[FileRecords, int], Iterator[Any]], records: FileRecords, directory: str, base: int, read_from: int
) -> Iterator[Any]:
    """``scan`` (``complete_batches`` or ``complete_headers``) of segment ``base`` from offset ``read_from``: started
    at the index position at or before it, without the batches that end before it. ``records`` is closed (quietly:
    a read-only file) once the walk ends, is abandoned or fails."""
    try:
        position = start_position(directory, base, read_from) if base <= read_from else 0
        for item in scan(records, position):
            if item.last_offset >= read_from:
                yield item
    finally:
        with contextlib.suppress(OSError):
            records.close()


def _last_offset_of(records: FileRecords, directory: str, base: int) -> int | None:
    """The last offset of the last complete batch of an open segment, or None when it holds none.

    The scan starts at the last ``.index`` entry inside the file: only the batches after it are read. When
    nothing complete follows that entry (a torn tail cut the batch it points at) or the bytes there do not
    parse (an index that does not match the log), an earlier entry is tried, and at last the file's start,
    so a damaged tail or index never hides the complete batches before it."""
    _, positions = index_entries(directory, base)
    inside = [int(p) for p in positions[-3:][::-1] if p < records.size]
    for position in [*inside, 0]:
        last = None
        try:
            for header in complete_headers(records, position):
                last = header.last_offset if last is None else max(last, header.last_offset)
        except CorruptRecordError:
            if position == 0:
                raise
            continue
        if last is not None or position == 0:
            return last
    return None


def _read_last_offset(directory: str, base: int) -> int | None:
    """The last offset of a segment's last complete batch, read from its files now (None when it holds none or is
    gone)."""
    records = open_segment(directory, base)
    if records is None:
        return None
    try:
        return _last_offset_of(records, directory, base)
    finally:
        records.close()


def log_end_offset(directory: str, bases: list[int]) -> int | None:
    """One past the last offset of the last complete batch of the last segment (its base when it is empty)."""
    if not bases:
        return None
    base = bases[-1]
    last = _read_last_offset(directory, base)
    return base if last is None else max(base, last + 1)


def partition_offsets(
    part: PartitionDir,
    log_starts: dict[tuple[str, int], int],
    high_watermarks: dict[tuple[str, int], int],
    high_watermark_mtime_ns: int | None,
) -> PartitionOffsets:
    """The log start, log end and latest offset of one partition, from its files and its log dir's checkpoints.

    The log start is the first segment's base, or the checkpointed log start when that is later
    (``delete_records`` moves it inside a segment). ``latest`` is the log end offset: the high watermark a
    single-replica leader computes on becoming leader (``Partition.maybeIncrementLeaderHW`` with an ISR of
    one), as ``ReadOnlyPartition`` has it. A high watermark checkpoint that lags the log (a writer killed
    between two checkpoints, a broker stopped with followers behind) is reported in
    ``checkpointed_high_watermark``, not used to hide records that are on disk. ``high_watermark_mtime_ns``
    is no longer consulted; it stays so that callers' signatures do not change.
    """
    key = (part.topic, part.partition)
    bases = segment_bases(part.directory)
    first = bases[0] if bases else 0
    log_start = max(first, log_starts.get(key, first))
    end = log_end_offset(part.directory, bases)
    log_end = max(log_start, end if end is not None else log_start)
    return PartitionOffsets(log_start, log_end, log_end, high_watermarks.get(key))


class CheckpointedOffsets:
    """``partition_offsets`` for many partitions, reading each log dir's log-start and high-watermark
    checkpoints once (one planning pass: a batch's partitions, or a stream trigger's latest offsets)."""

    def __init__(self) -> None:
        self._log_starts: dict[str, dict] = {}
        self._watermarks: dict[str, tuple[dict, int | None]] = {}

    def __call__(self, part: PartitionDir) -> PartitionOffsets:
        log_dir = part.log_dir
        if log_dir not in self._log_starts:
            self._log_starts[log_dir] = read_checkpoint(log_dir, LOG_START_OFFSET_CHECKPOINT)
            mtime = checkpoint_mtime_ns(log_dir, REPLICATION_OFFSET_CHECKPOINT)
            self._watermarks[log_dir] = (read_checkpoint(log_dir, REPLICATION_OFFSET_CHECKPOINT), mtime)
        hw, hw_mtime = self._watermarks[log_dir]
        return partition_offsets(part, self._log_starts[log_dir], hw, hw_mtime)


def checkpoint_mtime_ns(log_dir: str, name: str) -> int | None:
    try:
        return os.stat(os.path.join(log_dir, name)).st_mtime_ns
    except FileNotFoundError:
        return None


def data_loss_message(name: str, offset: int, available: int, what: str = "") -> str:
    return (
        f"Cannot fetch offset {offset} of {name}: the log now starts at offset {available}{what}. Some data may "
        "have been lost because they are not available any more; either the data was aged out by retention or "
        "removed by delete_records, or the topic was deleted before all of its data was read. If you want the "
        "query to go on reading from the log start in such cases, set the source option 'failOnDataLoss' to "
        "'false'."
    )


_LAST_OFFSETS: dict[str, tuple[int, int, int | None]] = {}  # .log path -> (size, mtime_ns, last offset)


def segment_last_offset(directory: str, base: int) -> int | None:
    """The last offset of a segment's last complete batch (None when it holds none or is gone).

    Found from the last ``.index`` entry and a scan of the batch headers after it, and remembered while the
    file's size and mtime stay the same (a closed segment does not change), so planning a read path over
    many segments reads each one's tail once."""
    path = segment_path(directory, base, LOG_SUFFIX)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    cached = _LAST_OFFSETS.get(path)
    if cached is not None and cached[:2] == (st.st_size, st.st_mtime_ns):
        return cached[2]
    last = _read_last_offset(directory, base)
    if last is None and not os.path.exists(path):
        return None  # deleted since the stat: nothing to remember
    if len(_LAST_OFFSETS) > 65536:
        _LAST_OFFSETS.clear()
    _LAST_OFFSETS[path] = (st.st_size, st.st_mtime_ns, last)
    return last


# ----- splitting ------------------------------------------------------------------------------------------


def batch_boundaries(directory: str, bases: list[int], offset: int) -> np.ndarray:
    """Offsets near ``offset`` where no batch straddles, ascending: the base of the segment holding it, one
    past each of that segment's ``.index`` entries (an entry's offset is the last of the batches written at
    its position), and the next segment's base. A range that starts at one of them starts on an indexed batch.
    """
    slot = max(0, bisect.bisect_right(bases, offset) - 1)
    if not bases:
        return np.empty(0, np.int64)
    base = bases[slot]
    offsets, _ = index_entries(directory, base)
    parts = [np.array([base], np.int64), offsets + 1]
    if slot + 1 < len(bases):
        parts.append(np.array([bases[slot + 1]], np.int64))
    return np.unique(np.concatenate(parts))
