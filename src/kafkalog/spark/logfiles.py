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
* the ``.index`` and ``.timeindex`` of an active segment are preallocated and zero-filled past their last
  entry, so only their leading increasing run of entries is trusted (the index classes opened read-only
  count every slot).

Beyond plain ranges it answers what a broker answers a consumer, from the files alone:

* ``offset_for_timestamp``: ListOffsets by timestamp (the earliest offset whose timestamp is at or after a
  time), through each segment's ``.timeindex`` and a scan from the position it gives, never the whole log;
* ``last_stable_offset``: the LSO, from the latest usable producer snapshot plus a scan of batch headers
  after it (an open transaction ends what a ``read_committed`` reader may see);
* ``read_range(..., read_committed=True)``: aborted transactions dropped using the segments' ``.txnindex``,
  as a ``read_committed`` fetch does;
* ``batch_boundaries``: offsets where no batch straddles (segment bases, and one past each ``.index``
  entry), where a range can be split so that each piece starts at an indexed batch.
"""

from __future__ import annotations

import bisect
import contextlib
import heapq
import mmap
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from ..errors import CorruptRecordError, CorruptSnapshotError, KafkaLogError, KafkaStorageError, OffsetOutOfRangeError
from ..record.batch import CONTROL_MASK, HEADER_SIZE_UP_TO_MAGIC, HEADER_STRUCT, TRANSACTIONAL_MASK
from ..record.columnar import batches_to_arrow
from ..record.scan import batch_size_at
from ..storage.checkpoints import CheckpointError, OffsetCheckpointFile
from ..storage.file_records import FileRecords
from ..storage.producer_state import list_snapshots, read_snapshot
from ..storage.txn_index import ABORTED_TXN_SIZE, AbortedTxn

LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
# Topics a Kafka admin client leaves out of listTopics(), so subscribePattern never matches them.
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__cluster_metadata"})
_SEGMENT = re.compile(r"^(\d{20,})\.log$")
_PARTITION_DIR = re.compile(r"^(.+)-(\d+)$")
RUN_BYTES = 8 * 1024 * 1024  # batch bytes decoded per columnar call while reading
# ListOffsets' special timestamps (ListOffsetsRequest): earliest, latest, the record with the max timestamp,
# earliest local (the log start here: kafkalog has no remote tier).
EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP = -2, -1, -3, -4
SPECIAL_TIMESTAMPS = (EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP)
_TIME_ENTRY = np.dtype([("ts", ">i8"), ("rel", ">i4")])


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


def _used_slots(mm: mmap.mmap, entry_size: int) -> int:
    """How many slots precede the zero-filled tail of a preallocated index: a binary search for the first
    all-zero slot after slot 0, entries being written in order from the start. Parsing only those keeps a
    lookup in an active segment's 10 MB index cheap; what is parsed is still validated entry by entry."""
    lo, hi = 1, len(mm) // entry_size
    zero = bytes(entry_size)
    while lo < hi:
        mid = (lo + hi) // 2
        if mm[mid * entry_size : (mid + 1) * entry_size] == zero:
            hi = mid
        else:
            lo = mid + 1
    return lo


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
                used = mm[: _used_slots(mm, 8) * 8]
    except (OSError, ValueError):
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


def read_range(
    directory: str,
    name: str,
    start: int,
    end: int,
    *,
    fail_on_data_loss: bool,
    run_bytes: int = RUN_BYTES,
    read_committed: bool = False,
) -> Iterator[pa.Table]:
    """Decode the records in [start, end) of one partition into tables of ``kafkalog.record.ARROW_SCHEMA``.

    Control records are left out. Segments are listed now, not at planning: one deleted since then is
    data loss (raised, or skipped when ``fail_on_data_loss`` is false). With ``read_committed`` the batches
    of aborted transactions are left out too (see ``AbortedFilter``); keeping ``end`` at or below the last
    stable offset is the caller's part.
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
    aborted = AbortedFilter(collect_aborted_txns(directory, bases, start, end)) if read_committed else None
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
                if aborted is None or aborted.keep(batch):
                    run.append(batch)
                    size += batch.size_in_bytes
                if size >= run_bytes:
                    yield _decode(run, start, end, records)
                    run, size = [], 0
                if batch.last_offset + 1 >= end:
                    done = True
                    break
            if run:
                yield _decode(run, start, end, records)
            if done:
                return
        finally:
            with contextlib.suppress(OSError):
                records.close()


def _decode(run: list, start: int | None, end: int | None, records: FileRecords, **options) -> pa.Table:
    """``batches_to_arrow`` of a run of one segment's batches; a corrupt batch's error names the segment file."""
    try:
        return batches_to_arrow(run, start_offset=start, end_offset=end, **options)
    except KafkaLogError as e:
        raise e.located(path=str(records.path)) from None


# ----- transactions ---------------------------------------------------------------------------------------


def read_txn_index(directory: str, base: int) -> list[AbortedTxn]:
    """The aborted transactions in a segment's ``.txnindex``, read-only (absent file: none; partial tail ignored)."""
    path = _segment_path(directory, base, ".txnindex")
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return []
    whole = len(data) // ABORTED_TXN_SIZE * ABORTED_TXN_SIZE
    try:
        return [AbortedTxn.from_bytes(data, pos) for pos in range(0, whole, ABORTED_TXN_SIZE)]
    except KafkaLogError as e:
        raise e.located(path=path) from None


def collect_aborted_txns(directory: str, bases: list[int], start: int, end: int) -> list[AbortedTxn]:
    """The aborted transactions overlapping [start, end), as Kafka collects them for a fetch
    (UnifiedLog.collectAbortedTransactions): the ``.txnindex`` of the segment holding ``start`` and of the
    following ones, until an entry whose last stable offset reaches ``end`` (no transaction begun before
    ``end`` can be aborted after it)."""
    first = max(0, bisect.bisect_right(bases, start) - 1)
    aborted: list[AbortedTxn] = []
    for base in bases[first:]:
        for txn in read_txn_index(directory, base):
            if txn.last_offset >= start and txn.first_offset < end:
                aborted.append(txn)
            if txn.last_stable_offset >= end:
                return aborted
    return aborted


class AbortedFilter:
    """What a ``read_committed`` consumer drops (Kafka's CompletedFetch): fed every batch of a range in order,
    control batches included, it answers whether to keep it.

    An aborted transaction joins the aborting producers once a batch reaches its first offset; a
    transactional batch of an aborting producer is dropped, and its control batch (the ABORT marker) ends
    the transaction. The same logic as ``kafkalog.storage.log.filter_aborted``, one batch at a time.
    """

    def __init__(self, aborted: Iterable[AbortedTxn]) -> None:
        self._pending = [(t.first_offset, t.producer_id) for t in aborted]
        heapq.heapify(self._pending)
        self._aborting: set[int] = set()

    def keep(self, batch) -> bool:
        while self._pending and self._pending[0][0] <= batch.last_offset:
            self._aborting.add(heapq.heappop(self._pending)[1])
        if batch.is_transactional and batch.producer_id in self._aborting:
            if batch.is_control:
                self._aborting.discard(batch.producer_id)
            return False
        return True


@dataclass(frozen=True, slots=True)
class _Header:
    """A batch header with what the transaction scan needs (FileRecords' BatchHeader lacks the attributes)."""

    position: int
    size: int
    magic: int
    base_offset: int
    last_offset: int
    max_timestamp: int
    attributes: int
    producer_id: int


def _headers(records: FileRecords, start: int) -> Iterator[_Header]:
    """Every complete batch header from ``start``, one small read each; a zero-filled tail ends the walk."""
    end = records.size
    pos = start
    while end - pos >= HEADER_SIZE_UP_TO_MAGIC:
        head = records.read(pos, HEADER_STRUCT.size)
        try:
            total = batch_size_at(head, 0, end - pos)
        except CorruptRecordError:
            if _is_zero_fill(records, pos):
                return
            raise
        if total is None:
            return
        if head[16] >= 2 and len(head) >= HEADER_STRUCT.size:
            base, _, _, magic, _, attributes, delta, _, max_ts, producer_id, _, _, _ = HEADER_STRUCT.unpack_from(head)
            yield _Header(pos, total, magic, base, base + delta, max_ts, attributes, producer_id)
        else:  # a legacy message: never transactional
            offset = int.from_bytes(head[0:8], "big", signed=True)
            max_ts = int.from_bytes(head[18:26], "big", signed=True) if head[16] == 1 and len(head) >= 26 else -1
            yield _Header(pos, total, head[16], offset, offset, max_ts, 0, -1)
        pos += total


def _headers_between(directory: str, bases: list[int], start: int, end: int) -> Iterator[_Header]:
    """The headers of the batches holding offsets in [start, end), across segments (deleted ones skipped)."""
    first = max(0, bisect.bisect_right(bases, start) - 1)
    for base in bases[first:]:
        if base >= end:
            return
        records = _open_segment(directory, base)
        if records is None:
            continue
        try:
            position = start_position(directory, base, start) if base <= start else 0
            for header in _headers(records, position):
                if header.last_offset < start:
                    continue
                if header.base_offset >= end:
                    return
                yield header
        finally:
            with contextlib.suppress(OSError):
                records.close()


def _open_transactions_at(directory: str, first_base: int, upper: int) -> tuple[dict[int, int], int]:
    """Producer id → first offset of its open transaction, from the newest readable producer snapshot at an
    offset in [first_base, upper], and that offset; ({}, first_base) when there is none."""
    for offset, path in reversed(list_snapshots(directory)):
        if not first_base <= offset <= upper:
            continue
        try:
            entries = read_snapshot(path)
        except (CorruptSnapshotError, OSError):  # being written, or deleted under us: try an older one
            continue
        return {
            e.producer_id: e.current_txn_first_offset for e in entries if e.current_txn_first_offset is not None
        }, offset
    return {}, first_base


def last_stable_offset(directory: str, log_start: int, latest: int) -> int:
    """The last stable offset: the first offset of the earliest transaction still open below ``latest`` (the
    high watermark, or the log end), at least the log start; ``latest`` when none is open.

    A transaction is open from its first transactional data batch until its producer's control batch (COMMIT
    or ABORT); a marker at or after ``latest`` does not count yet, as Kafka keeps a decided transaction
    unstable until the high watermark passes its marker. The open transactions are taken from the newest
    producer snapshot (``<offset>.snapshot``, which Kafka and kafkalog write at every segment roll) at or
    below ``latest`` and not below the first segment, then batch headers are scanned from its offset. With
    no such snapshot the scan starts at the first segment, which misses a transaction begun before it (only
    possible after retention or delete_records) whose batches are all gone: then the LSO may be too high.
    """
    bases = segment_bases(directory)
    if not bases or latest <= log_start:
        return latest
    open_txns, scan_from = _open_transactions_at(directory, bases[0], latest)
    for header in _headers_between(directory, bases, scan_from, latest):
        if header.magic < 2 or not header.attributes & TRANSACTIONAL_MASK:
            continue
        if header.attributes & CONTROL_MASK:
            open_txns.pop(header.producer_id, None)
        else:
            open_txns.setdefault(header.producer_id, header.base_offset)
    if not open_txns:
        return latest
    return min(max(min(open_txns.values()), log_start), latest)


# ----- offsets by timestamp -------------------------------------------------------------------------------


def time_index_entries(directory: str, base: int) -> tuple[np.ndarray, np.ndarray]:
    """(timestamps, absolute offsets) of the trustworthy entries of a segment's ``.timeindex`` (maybe none).

    Entries are kept while timestamps strictly increase and offsets do not go down, which cuts the
    zero-filled preallocated tail of an active segment's time index; an all-zero first slot is that tail.
    """
    empty = np.empty(0, np.int64)
    path = _segment_path(directory, base, ".timeindex")
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size // _TIME_ENTRY.itemsize * _TIME_ENTRY.itemsize
            if size == 0:
                return empty, empty
            with mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ) as mm:
                used = mm[: _used_slots(mm, _TIME_ENTRY.itemsize) * _TIME_ENTRY.itemsize]
    except (OSError, ValueError):
        return empty, empty
    raw = np.frombuffer(used, dtype=_TIME_ENTRY)
    ts, rel = raw["ts"].astype(np.int64), raw["rel"].astype(np.int64)
    if rel[0] < 0 or (ts[0] == 0 and rel[0] == 0):
        return empty, empty
    bad = np.flatnonzero((np.diff(ts) <= 0) | (np.diff(rel) < 0))
    n = int(bad[0]) + 1 if len(bad) else len(ts)
    return ts[:n], rel[:n] + base


def _max_timestamp(directory: str, base: int, scan_tail: bool) -> tuple[int, int]:
    """(max timestamp, offset of its batch) of a segment: its time index's last entry, or (-1, base).

    With ``scan_tail`` the batches from that entry on are scanned too, as Kafka does for the active segment,
    whose time index gets an entry only every ``index.interval.bytes`` (LogSegment.loadLargestTimestamp).
    """
    ts, offsets = time_index_entries(directory, base)
    best = (int(ts[-1]), int(offsets[-1])) if len(ts) else (-1, base)
    if scan_tail:
        records = _open_segment(directory, base)
        if records is not None:
            try:
                for header in _complete_headers(records, start_position(directory, base, best[1])):
                    if header.max_timestamp > best[0]:
                        best = (header.max_timestamp, header.last_offset)
            finally:
                records.close()
    return best


def _search_segment(directory: str, base: int, timestamp: int, starting_offset: int) -> int | None:
    """The first record at or after ``starting_offset`` whose timestamp is >= ``timestamp`` in one segment
    (LogSegment.findOffsetByTimestamp): the scan starts at the batch of the time index entry with the
    largest timestamp <= ``timestamp``; records before it are older. Control records count, as in Kafka."""
    ts, offsets = time_index_entries(directory, base)
    slot = int(np.searchsorted(ts, timestamp, side="right")) - 1
    entry_offset = int(offsets[slot]) if slot >= 0 else base
    records = _open_segment(directory, base)
    if records is None:
        return None
    try:
        for header in _complete_headers(records, start_position(directory, base, max(entry_offset, starting_offset))):
            if header.max_timestamp < timestamp or header.last_offset < starting_offset:
                continue
            table = _decode([records.read_batch(header)], None, None, records, include_control=True)
            found = table.column("offset").to_numpy()
            times = table.column("timestamp").cast(pa.int64()).to_numpy()
            hits = np.flatnonzero((times >= timestamp) & (found >= starting_offset))
            if len(hits):
                return int(found[hits[0]])
        return None
    finally:
        records.close()


def _largest_timestamp(directory: str, base: int, active: bool) -> int:
    """LogSegment.largestTimestamp: the max timestamp, or the ``.log`` file's mtime when it has none."""
    ts = _max_timestamp(directory, base, scan_tail=active)[0]
    if ts >= 0:
        return ts
    try:
        return int(os.stat(_segment_path(directory, base, ".log")).st_mtime * 1000)
    except FileNotFoundError:
        return -1


def _offset_of_max_timestamp(directory: str, bases: list[int]) -> int | None:
    """The offset of the first record with the partition's largest timestamp (ListOffsets MAX_TIMESTAMP)."""
    best: tuple[int, int, int] | None = None  # (max timestamp, its batch offset, segment base)
    for i, base in enumerate(bases):
        ts, offset = _max_timestamp(directory, base, scan_tail=i == len(bases) - 1)
        if best is None or ts > best[0]:
            best = (ts, offset, base)
    if best is None or best[0] < 0:
        return None
    max_ts, offset, base = best
    records = _open_segment(directory, base)
    if records is None:
        return None
    try:
        for header in _complete_headers(records, start_position(directory, base, offset)):
            if header.max_timestamp == max_ts:
                table = _decode([records.read_batch(header)], None, None, records, include_control=True)
                times = table.column("timestamp").cast(pa.int64()).to_numpy()
                hits = np.flatnonzero(times == max_ts)
                if len(hits):
                    return int(table.column("offset")[int(hits[0])].as_py())
        return None
    finally:
        records.close()


def offset_for_timestamp(directory: str, timestamp: int, log_start: int, latest: int) -> int | None:
    """What ListOffsets answers for ``timestamp`` (Partition.fetchOffsetForTimestamp), from the files.

    -2 (and -4) is the log start and -1 is ``latest``; -3 is the offset of the record with the largest
    timestamp. Otherwise it is the earliest offset at or after the log start whose record's timestamp is at
    least ``timestamp``, searched as UnifiedLog.fetchOffsetByTimestamp does: only in the first segment whose
    largest timestamp reaches it, from its ``.timeindex`` entry on. None when nothing matches, or when the
    match is not below ``latest`` (the high watermark, or the last stable offset for read_committed): Kafka
    answers no offset then.
    """
    if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
        return log_start
    if timestamp == LATEST_TIMESTAMP:
        return latest
    bases = segment_bases(directory)
    if timestamp == MAX_TIMESTAMP:
        found = _offset_of_max_timestamp(directory, bases)
    elif timestamp < 0:
        raise ValueError(f"Invalid timestamp {timestamp} for ListOffsets")
    else:
        found = None
        for i, base in enumerate(bases):
            if _largest_timestamp(directory, base, active=i == len(bases) - 1) >= timestamp:
                found = _search_segment(directory, base, timestamp, log_start)
                break
    return found if found is not None and found < latest else None


def first_offset_at_or_after(directory: str, timestamp: int, start: int, end: int) -> int:
    """A lower bound for the offsets in [start, end) whose record timestamp is >= ``timestamp``: every such
    record is at or after the returned offset (``end`` when there is none).

    Unlike ``offset_for_timestamp`` every segment that may hold a match is searched, not only the first
    whose largest timestamp reaches it, and each segment's largest timestamp includes a scan after its last
    time index entry: a filter pushed down must never drop a matching row. Segments entirely outside the
    range are skipped without reading them.
    """
    bases = segment_bases(directory)
    for i, base in enumerate(bases):
        following = bases[i + 1] if i + 1 < len(bases) else None
        if following is not None and following <= start:
            continue
        if base >= end:
            break
        if _max_timestamp(directory, base, scan_tail=True)[0] < timestamp:
            continue
        found = _search_segment(directory, base, timestamp, start)
        if found is not None:
            return min(found, end)
    return end


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
