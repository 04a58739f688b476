"""Read-only access to partition directories for the Spark source: no Log, no lock, no writes.

A reader here never opens a ``Log`` (that would recover, write and take the log dir's ``.lock``). It lists
``<topic>-<partition>`` directories and ``<base offset>.log`` segment files, finds start positions with the
segment's ``.index``, and walks batches with a read-only ``FileRecords`` (``pread`` in chunks, so a file that
shrinks or vanishes under it cannot fault the process as a memory map could).

It tolerates a broker or kafkalog writing at the same time:

* an incomplete batch at the end of the active segment is not there yet (the scan stops before it), and the
  zero-filled tail of a preallocated segment (``preallocate=true``) ends the scan the same way;
* segments deleted by retention or ``delete_records`` between planning and reading are data loss, reported
  or skipped by ``failOnDataLoss`` as Kafka's source does;
* the ``.index`` of an active segment is preallocated and zero-filled past its last entry, so only its
  leading increasing run of entries is trusted (``OffsetIndex`` opened read-only counts every slot).
"""

from __future__ import annotations

import bisect
import contextlib
import mmap
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from ..errors import CorruptRecordError, KafkaStorageError, OffsetOutOfRangeError
from ..record.columnar import batches_to_arrow
from ..storage.checkpoints import CheckpointError, OffsetCheckpointFile
from ..storage.file_records import FileRecords

LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
# Topics a Kafka admin client leaves out of listTopics(), so subscribePattern never matches them.
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__cluster_metadata"})
_SEGMENT = re.compile(r"^(\d{20,})\.log$")
_PARTITION_DIR = re.compile(r"^(.+)-(\d+)$")
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
    """What a reader may read: [log_start, latest). ``latest`` is the high watermark when the broker's
    checkpoint of it is current, else the log end offset (the end of the last complete batch)."""

    log_start: int
    log_end: int
    latest: int


def discover(paths: list[str]) -> dict[tuple[str, int], PartitionDir]:
    """Every partition directory in the log dirs ``paths``; a partition found in two of them is an error."""
    found: dict[tuple[str, int], PartitionDir] = {}
    for log_dir in paths:
        root = Path(log_dir)
        if not root.is_dir():
            raise KafkaStorageError(f"Log directory {log_dir} given in option 'path' does not exist", path=log_dir)
        for entry in sorted(os.scandir(root), key=lambda e: e.name):
            match = _PARTITION_DIR.match(entry.name)
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
    return sorted(int(m.group(1)) for name in names if (m := _SEGMENT.match(name)))


def _segment_path(directory: str, base: int, suffix: str) -> str:
    return os.path.join(directory, f"{base:020d}{suffix}")


def read_checkpoint(log_dir: str, name: str) -> dict[tuple[str, int], int]:
    """A root offset checkpoint of a log dir, read without creating it; unreadable or missing reads as empty."""
    path = os.path.join(log_dir, name)
    if not os.path.isfile(path):
        return {}
    try:
        return OffsetCheckpointFile(path, create=False).read()
    except CheckpointError:
        return {}


def index_entries(directory: str, base: int) -> tuple[np.ndarray, np.ndarray]:
    """(absolute offsets, positions) of the trustworthy entries of a segment's ``.index`` (maybe none).

    The index is mapped read-only; entries are kept while both fields strictly increase, which cuts the
    zero-filled preallocated tail of an active segment's index (and anything written out of order).
    """
    empty = np.empty(0, np.int64)
    path = _segment_path(directory, base, ".index")
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size // 8 * 8
            if size == 0:
                return empty, empty
            with mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ) as mm:
                raw = np.frombuffer(mm, dtype=">i4").astype(np.int64).reshape(-1, 2)
    except (OSError, ValueError):
        return empty, empty
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


def _open_segment(directory: str, base: int) -> FileRecords | None:
    """The segment's records file opened read-only, or None when it is gone (deleted under us)."""
    path = _segment_path(directory, base, ".log")
    try:
        return FileRecords.open(Path(path), file_already_exists=True, mutable=False)
    except KafkaStorageError:
        if os.path.exists(path):
            raise
        return None


def _is_zero_fill(records: FileRecords, position: int | None) -> bool:
    return position is not None and records.read(position, 12) == bytes(12)


def _complete_batches(records: FileRecords, start: int) -> Iterator:
    """The complete batches from ``start``; a preallocated zero tail ends the walk like a partial batch."""
    try:
        for _, batch in records.batches(start):
            yield batch
    except CorruptRecordError as e:
        if not _is_zero_fill(records, e.position):
            raise


def _complete_headers(records: FileRecords, start: int) -> Iterator:
    try:
        yield from records.batch_headers(start)
    except CorruptRecordError as e:
        if not _is_zero_fill(records, e.position):
            raise


def log_end_offset(directory: str, bases: list[int]) -> int | None:
    """One past the last offset of the last complete batch of the last segment (its base when it is empty)."""
    if not bases:
        return None
    base = bases[-1]
    records = _open_segment(directory, base)
    if records is None:
        return base
    try:
        _, positions = index_entries(directory, base)
        position = int(positions[-1]) if len(positions) and positions[-1] < records.size else 0
        end = base
        for header in _complete_headers(records, position):
            end = max(end, header.last_offset + 1)
        return end
    finally:
        records.close()


def partition_offsets(
    part: PartitionDir,
    log_starts: dict[tuple[str, int], int],
    high_watermarks: dict[tuple[str, int], int],
    high_watermark_mtime_ns: int | None,
) -> PartitionOffsets:
    """The log start, log end and latest offset of one partition, from its files and its log dir's checkpoints.

    The log start is the first segment's base, or the checkpointed log start when that is later
    (``delete_records`` moves it inside a segment). The high watermark checkpoint is used for ``latest`` only
    when it was written after the last segment last changed: a live writer checkpoints it every few seconds,
    so an older checkpoint would hide records that are already on disk.
    """
    key = (part.topic, part.partition)
    bases = segment_bases(part.directory)
    first = bases[0] if bases else 0
    log_start = max(first, log_starts.get(key, first))
    end = log_end_offset(part.directory, bases)
    log_end = max(log_start, end if end is not None else log_start)
    latest = log_end
    if key in high_watermarks and high_watermark_mtime_ns is not None and bases:
        try:
            data_mtime = os.stat(_segment_path(part.directory, bases[-1], ".log")).st_mtime_ns
        except FileNotFoundError:
            data_mtime = None
        if data_mtime is not None and high_watermark_mtime_ns >= data_mtime:
            latest = min(max(high_watermarks[key], log_start), log_end)
    return PartitionOffsets(log_start, log_end, latest)


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


def read_range(
    directory: str, name: str, start: int, end: int, *, fail_on_data_loss: bool, run_bytes: int = RUN_BYTES
) -> Iterator[pa.Table]:
    """Decode the records in [start, end) of one partition into tables of ``kafkalog.record.ARROW_SCHEMA``.

    Control records are left out. Segments are listed now, not at planning: one deleted since then is
    data loss (raised, or skipped when ``fail_on_data_loss`` is false).
    """
    if start >= end:
        return
    bases = segment_bases(directory)
    if not bases or bases[0] > start:
        available = bases[0] if bases else None
        if fail_on_data_loss:
            what = "" if available is not None else " (its segments are gone)"
            raise OffsetOutOfRangeError(
                data_loss_message(name, start, available if available is not None else end, what),
                offset=start,
                path=directory,
            )
        if available is None:
            return
        start = available
    first = max(0, bisect.bisect_right(bases, start) - 1)
    for i in range(first, len(bases)):
        base = bases[i]
        if base >= end:
            return
        records = _open_segment(directory, base)
        if records is None:
            if fail_on_data_loss:
                raise OffsetOutOfRangeError(
                    data_loss_message(
                        name,
                        max(start, base),
                        bases[i + 1] if i + 1 < len(bases) else end,
                        f" (segment {base} was deleted while it was read)",
                    ),
                    offset=max(start, base),
                    path=directory,
                )
            continue
        try:
            position = start_position(directory, base, start) if base <= start else 0
            run: list = []
            size = 0
            done = False
            for batch in _complete_batches(records, position):
                if batch.last_offset < start:
                    continue
                if batch.magic == 2 and batch.base_offset >= end:
                    done = True
                    break
                run.append(batch)
                size += batch.size_in_bytes
                if size >= run_bytes:
                    yield batches_to_arrow(run, start_offset=start, end_offset=end)
                    run, size = [], 0
                if batch.last_offset + 1 >= end:
                    done = True
                    break
            if run:
                yield batches_to_arrow(run, start_offset=start, end_offset=end)
            if done:
                return
        finally:
            with contextlib.suppress(OSError):
                records.close()
