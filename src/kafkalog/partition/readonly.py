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
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from ..errors import (
    CorruptRecordError,
    CorruptSnapshotError,
    KafkaLogError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    UnknownTopicOrPartitionError,
)
from ..logdir import PartitionMetadataFile, TopicConfigStore
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


def _read_used_entries(path: str, entry_size: int) -> bytes:
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
    used = _read_used_entries(_segment_path(directory, base, ".index"), 8)
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
            for header in _complete_headers(records, position):
                last = header.last_offset if last is None else max(last, header.last_offset)
        except CorruptRecordError:
            if position == 0:
                raise
            continue
        if last is not None or position == 0:
            return last
    return None


def log_end_offset(directory: str, bases: list[int]) -> int | None:
    """One past the last offset of the last complete batch of the last segment (its base when it is empty)."""
    if not bases:
        return None
    base = bases[-1]
    records = _open_segment(directory, base)
    if records is None:
        return base
    try:
        last = _last_offset_of(records, directory, base)
    finally:
        records.close()
    return base if last is None else max(base, last + 1)


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


# ----- Kafka's read path ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReadRun:
    """One step of Kafka's read path: segment ``base`` is read from offset ``start`` to its end."""

    base: int
    start: int


_LAST_OFFSETS: dict[str, tuple[int, int, int | None]] = {}  # .log path -> (size, mtime_ns, last offset)


def segment_last_offset(directory: str, base: int) -> int | None:
    """The last offset of a segment's last complete batch (None when it holds none or is gone).

    Found from the last ``.index`` entry and a scan of the batch headers after it, and remembered while the
    file's size and mtime stay the same (a closed segment does not change), so planning a read path over
    many segments reads each one's tail once."""
    path = _segment_path(directory, base, ".log")
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    cached = _LAST_OFFSETS.get(path)
    if cached is not None and cached[:2] == (st.st_size, st.st_mtime_ns):
        return cached[2]
    records = _open_segment(directory, base)
    if records is None:
        return None
    try:
        last = _last_offset_of(records, directory, base)
    finally:
        records.close()
    if len(_LAST_OFFSETS) > 65536:
        _LAST_OFFSETS.clear()
    _LAST_OFFSETS[path] = (st.st_size, st.st_mtime_ns, last)
    return last


def read_path(directory: str, bases: list[int], log_start: int) -> list[ReadRun]:
    """The segments a consumer reading from ``log_start`` visits, and the offset it reads each one from.

    As Kafka's ``LocalLog.read``: the fetch goes to the segment holding the fetch offset (the floor entry
    of the segment map) and returns the batches from the first one whose last offset reaches it; a segment
    with nothing there passes the fetch to the next segment. The next fetch starts one past the last batch
    read. Segments normally follow each other, and the path is then every segment in turn. When a cleaned
    segment sits beside the older segment it replaced (a cleaner swap cut short: segment 0 holding offsets
    153..473 beside segment 63 holding 63..473), the cleaned one is read to its end and the older one only
    from 474: each offset is read once, in increasing order, as Kafka serves it.
    """
    runs: list[ReadRun] = []
    if not bases:
        return runs
    cursor = log_start
    i = max(0, bisect.bisect_right(bases, cursor) - 1)
    while i < len(bases):
        if i == len(bases) - 1:  # the last segment: read to its end, wherever that is now
            runs.append(ReadRun(bases[i], cursor))
            break
        last = segment_last_offset(directory, bases[i])
        if last is None or last < cursor:  # nothing at or after the fetch offset here: the next segment
            i += 1
            continue
        runs.append(ReadRun(bases[i], cursor))
        cursor = last + 1
        following = bisect.bisect_right(bases, cursor) - 1
        i = following if following > i else i + 1
    return runs


def _runs_from(directory: str, bases: list[int], start: int) -> list[tuple[ReadRun, int]]:
    """The read path's runs that hold offsets at or after ``start``, each with the offset to read it from."""
    runs = read_path(directory, bases, bases[0])
    first = max(0, bisect.bisect_right([r.start for r in runs], start) - 1)
    return [(run, max(run.start, start)) for run in runs[first:]]


def path_batches(
    directory: str,
    name: str,
    start: int,
    end: int,
    *,
    fail_on_data_loss: bool,
    aborted: AbortedFilter | None = None,
) -> Iterator[tuple[FileRecords, object]]:
    """(segment file, batch) for every batch on Kafka's read path holding offsets in [start, end), in order.

    Batches of aborted transactions are left out when ``aborted`` is given (control batches are kept: the
    caller decides). A segment deleted since the segments were listed is data loss: raised, or skipped when
    ``fail_on_data_loss`` is false. A file is closed when its batches have been consumed.
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
    runs = _runs_from(directory, bases, start)
    for k, (run, read_from) in enumerate(runs):
        if read_from >= end:
            return
        records = _open_segment(directory, run.base)
        if records is None:
            if fail_on_data_loss:
                following = runs[k + 1][0].start if k + 1 < len(runs) else end
                raise OffsetOutOfRangeError(
                    data_loss_message(
                        name, read_from, following, f" (segment {run.base} was deleted while it was read)"
                    ),
                    offset=read_from,
                    path=directory,
                )
            continue
        try:
            position = start_position(directory, run.base, read_from) if run.base <= read_from else 0
            for batch in _complete_batches(records, position):
                if batch.last_offset < read_from:
                    continue
                if batch.magic == 2 and batch.base_offset >= end:
                    return
                if aborted is None or aborted.keep(batch):
                    yield records, batch
                if batch.last_offset + 1 >= end:
                    return
        finally:
            with contextlib.suppress(OSError):
                records.close()


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

    The batches are those of Kafka's read path from the log start (``read_path``), so overlapping segments
    give each record once, in order, and a range split anywhere gives the same records as a whole read.
    Control records are left out. Segments are listed now, not at planning: one deleted since then is
    data loss (raised, or skipped when ``fail_on_data_loss`` is false). With ``read_committed`` the batches
    of aborted transactions are left out too (see ``AbortedFilter``); keeping ``end`` at or below the last
    stable offset is the caller's part.
    """
    if start >= end:
        return
    aborted = None
    if read_committed:
        bases = segment_bases(directory)
        aborted = AbortedFilter(collect_aborted_txns(directory, bases, start, end))
    run: list = []
    size = 0
    current: FileRecords | None = None
    for records, batch in path_batches(
        directory, name, start, end, fail_on_data_loss=fail_on_data_loss, aborted=aborted
    ):
        if current is not None and records is not current and run:
            yield _decode(run, start, end, current)
            run, size = [], 0
        current = records
        run.append(batch)
        size += batch.size_in_bytes
        if size >= run_bytes:
            yield _decode(run, start, end, records)
            run, size = [], 0
    if run and current is not None:
        yield _decode(run, start, end, current)


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
    """The headers of the batches holding offsets in [start, end), along Kafka's read path (``read_path``;
    segments deleted under us are skipped)."""
    if not bases or start >= end:
        return
    for run, read_from in _runs_from(directory, bases, max(start, bases[0])):
        if read_from >= end:
            return
        records = _open_segment(directory, run.base)
        if records is None:
            continue
        try:
            position = start_position(directory, run.base, read_from) if run.base <= read_from else 0
            for header in _headers(records, position):
                if header.last_offset < read_from:
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
    used = _read_used_entries(_segment_path(directory, base, ".timeindex"), _TIME_ENTRY.itemsize)
    if not used:
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


# ----- the read-only view of log dirs -----------------------------------------------------------------------

META_PROPERTIES = "meta.properties"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
CLEAN_SHUTDOWN_MARKER = ".kafka_cleanshutdown"
KAFKALOG_TOPICS_FILE = "kafkalog-topics.json"
METADATA_TOPIC = "__cluster_metadata"
# The files a Kafka broker (or kafkalog) keeps at the root of every log dir it has started on.
LOG_DIR_ROOT_FILES = (
    META_PROPERTIES,
    RECOVERY_POINT_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    CLEANER_OFFSET_CHECKPOINT,
    KAFKALOG_TOPICS_FILE,
)
ISOLATION_LEVELS = ("read_uncommitted", "read_committed")


def _has_segment_files(directory: str) -> bool:
    try:
        return any(_SEGMENT.match(name) for name in os.listdir(directory))
    except OSError:
        return False


def log_dir_problem(path: str | os.PathLike[str]) -> str | None:
    """Why ``path`` is not a log dir that can be read, or None when it is one.

    A broker writes ``meta.properties`` and the root checkpoints into every log dir when it starts on it
    (Kafka's ``LogManager`` and ``MetaPropertiesEnsemble``), and a partition lives in a ``<topic>-<n>``
    directory holding ``<base offset>.log`` segments. A folder with none of these is not a log dir: Kafka
    would initialise it as a new one, which a reading command must never do. A partial copy of a log dir
    (only some partition directories) still counts.
    """
    root = os.fspath(path)
    if not os.path.exists(root):
        return f"Log dir {root} does not exist"
    if not os.path.isdir(root):
        return f"{root} is not a directory, so it is not a log dir"
    try:
        entries = list(os.scandir(root))
    except OSError as e:
        return f"Log dir {root} cannot be listed: {e.strerror}"
    names = {entry.name for entry in entries}
    if any(name in names for name in LOG_DIR_ROOT_FILES):
        return None
    for entry in entries:
        if _PARTITION_DIR.match(entry.name) and entry.is_dir() and _has_segment_files(entry.path):
            return None
    return (
        f"{root} is not a Kafka log dir: it has no meta.properties, no root checkpoint file and no "
        "<topic>-<partition> directory with .log segments (a reading command does not create one)"
    )


def check_log_dir(path: str | os.PathLike[str]) -> None:
    """Raise KafkaStorageError with ``log_dir_problem``'s reason when ``path`` is not a readable log dir."""
    problem = log_dir_problem(path)
    if problem is not None:
        raise KafkaStorageError(problem, path=os.fspath(path))


class ReadOnlyPartition:
    """One partition of a log dir as a reader sees it, from its files alone: no lock, no write, no map.

    Invariants: nothing here opens a file for writing or creates one (segments and indexes are read with
    ``pread``; missing indexes are not rebuilt, a torn tail is not truncated, a checkpoint is not rewritten);
    ``log_start_offset <= high_watermark == log_end_offset``; ``last_stable_offset <= high_watermark``.

    The high watermark is what a single-replica leader would compute on becoming leader
    (``Partition.maybeIncrementLeaderHW`` with an ISR of one): the log end offset, one past the last complete
    batch of the last segment. A ``replication-offset-checkpoint`` entry below it (a broker killed between two
    checkpoints, or a follower's copy) is reported by ``high_watermark_note`` and not used to hide records.
    Offsets are computed on first use and kept: the view is a snapshot of the files at that moment.
    """

    def __init__(
        self, part: PartitionDir, log_start_checkpoint: int | None = None, checkpointed_hw: int | None = None
    ) -> None:
        self._part = part
        self._log_start_checkpoint = log_start_checkpoint
        self.checkpointed_high_watermark = checkpointed_hw
        self._offsets: tuple[int, int] | None = None
        self._lso: int | None = None

    topic = property(lambda self: self._part.topic)
    partition = property(lambda self: self._part.partition)
    directory = property(lambda self: self._part.directory)
    log_dir = property(lambda self: self._part.log_dir)
    name = property(lambda self: self._part.name)
    partition_dir = property(lambda self: self._part)

    def segment_bases(self) -> list[int]:
        """The base offsets of the segments now on disk, ascending."""
        return segment_bases(self.directory)

    def _load_offsets(self) -> tuple[int, int]:
        if self._offsets is None:
            bases = self.segment_bases()
            first = bases[0] if bases else 0
            start = max(first, self._log_start_checkpoint if self._log_start_checkpoint is not None else first)
            end = log_end_offset(self.directory, bases)
            self._offsets = (start, max(start, end if end is not None else start))
        return self._offsets

    @property
    def log_start_offset(self) -> int:
        """The first segment's base, or the checkpointed log start when DeleteRecords moved it further."""
        return self._load_offsets()[0]

    @property
    def log_end_offset(self) -> int:
        """One past the last offset of the last complete batch of the last segment (Kafka's LocalLog)."""
        return self._load_offsets()[1]

    @property
    def high_watermark(self) -> int:
        """The log end offset: a single-replica leader's high watermark (see the class comment)."""
        return self.log_end_offset

    @property
    def high_watermark_note(self) -> str | None:
        """Why the high watermark differs from the checkpointed one, or None when they agree."""
        hw, checkpointed = self.high_watermark, self.checkpointed_high_watermark
        if checkpointed is None:
            if hw > self.log_start_offset:
                return f"derived from the log end: no {REPLICATION_OFFSET_CHECKPOINT} entry"
            return None
        if checkpointed < hw:
            return (
                f"derived from the log end as a single-replica leader does: {REPLICATION_OFFSET_CHECKPOINT} "
                f"says {checkpointed}, {hw - checkpointed} record offset(s) behind the log"
            )
        if checkpointed > hw:
            return f"{REPLICATION_OFFSET_CHECKPOINT} says {checkpointed}, past the log end; capped at the log end"
        return None

    @property
    def last_stable_offset(self) -> int:
        """The first offset of the earliest open transaction below the high watermark (else the HW)."""
        if self._lso is None:
            self._lso = last_stable_offset(self.directory, self.log_start_offset, self.high_watermark)
        return self._lso

    def bound(self, isolation: str) -> int:
        """The end of what a fetch with ``isolation`` may return: the HW, or the LSO for read_committed."""
        if isolation not in ISOLATION_LEVELS:
            raise ValueError(f"Unknown isolation level {isolation!r}: expected one of {', '.join(ISOLATION_LEVELS)}")
        return self.last_stable_offset if isolation == "read_committed" else self.high_watermark

    @property
    def size_bytes(self) -> int:
        """The bytes of the segment files now on disk."""
        total = 0
        for base in self.segment_bases():
            with contextlib.suppress(FileNotFoundError):
                total += os.stat(_segment_path(self.directory, base, ".log")).st_size
        return total

    @property
    def segment_count(self) -> int:
        return len(self.segment_bases())

    def read_path(self) -> list[ReadRun]:
        """The segments a consumer from the log start reads, and from where (see ``read_path``)."""
        return read_path(self.directory, self.segment_bases(), self.log_start_offset)

    def offset_for_timestamp(self, timestamp: int, isolation: str = "read_uncommitted") -> int | None:
        """ListOffsets for ``timestamp`` (-2 earliest, -1 latest, -3 max timestamp, or a time in ms)."""
        return offset_for_timestamp(self.directory, timestamp, self.log_start_offset, self.bound(isolation))

    def batches(self, start: int | None = None, isolation: str = "read_uncommitted") -> Iterator:
        """The batches a consumer fetching from ``start`` (default: the log start) receives, up to the
        isolation's bound, along Kafka's read path; with read_committed, aborted ones are left out."""
        start = self.log_start_offset if start is None else start
        end = self.bound(isolation)
        if start < self.log_start_offset or start > self.high_watermark:
            raise OffsetOutOfRangeError(
                f"Received request for offset {start} for partition {self.name}, but we only have log segments "
                f"in the range {self.log_start_offset} to {self.high_watermark}.",
                offset=start,
                path=self.directory,
            )
        aborted = None
        if isolation == "read_committed":
            aborted = AbortedFilter(collect_aborted_txns(self.directory, self.segment_bases(), start, end))
        for _, batch in path_batches(self.directory, self.name, start, end, fail_on_data_loss=True, aborted=aborted):
            yield batch

    def records(self, start: int | None = None, isolation: str = "read_uncommitted") -> Iterator:
        """Every record from ``start`` up to the isolation's bound, as a consumer sees them: control records
        left out, and with read_committed, aborted transactions too (the same as ``Log.records``)."""
        start = self.log_start_offset if start is None else start
        end = self.bound(isolation)
        for batch in self.batches(start, isolation):
            if batch.is_control:
                continue
            for record in batch:
                if start <= record.offset < end:
                    yield record

    def read_range(self, start: int, end: int, *, read_committed: bool = False) -> Iterator[pa.Table]:
        """The records in [start, end) as Arrow tables (see ``read_range``)."""
        return read_range(self.directory, self.name, start, end, fail_on_data_loss=True, read_committed=read_committed)


class ReadOnlyLogDir:
    """One or more Kafka log dirs opened for reading only: the view every command that only reads uses.

    Invariants: opening and using it takes no lock and writes nothing (no ``.lock``, ``meta.properties``,
    checkpoint, clean-shutdown marker, index, snapshot or topic config file), so it works on a read-only file
    system and on a copy of a live broker's dir; a folder that is not a log dir (``log_dir_problem``) is
    refused with KafkaStorageError instead of being turned into one; a partition found in two of the dirs is
    an error, as Kafka refuses it at startup.
    """

    def __init__(self, paths: Iterable[str | os.PathLike[str]]) -> None:
        self.log_dirs = [os.fspath(p) for p in paths]
        if not self.log_dirs:
            raise KafkaStorageError("No log directories given")
        for path in self.log_dirs:
            check_log_dir(path)
        parts = discover(self.log_dirs)
        starts = {d: read_checkpoint(d, LOG_START_OFFSET_CHECKPOINT) for d in self.log_dirs}
        watermarks = {d: read_checkpoint(d, REPLICATION_OFFSET_CHECKPOINT) for d in self.log_dirs}
        self._partitions = {
            key: ReadOnlyPartition(part, starts[part.log_dir].get(key), watermarks[part.log_dir].get(key))
            for key, part in parts.items()
        }
        self._store: TopicConfigStore | None = None

    @property
    def clean_shutdown(self) -> bool:
        """Whether every log dir holds Kafka's clean-shutdown marker (the broker stopped cleanly)."""
        return all(os.path.exists(os.path.join(d, CLEAN_SHUTDOWN_MARKER)) for d in self.log_dirs)

    def topics(self) -> list[str]:
        """The topics with a partition directory, sorted (the KRaft metadata topic left out, as Kafka does)."""
        return sorted({topic for topic, _ in self._partitions if topic != METADATA_TOPIC})

    def partitions_of(self, topic: str) -> list[ReadOnlyPartition]:
        """The partitions of ``topic`` in partition order; UnknownTopicOrPartitionError when it has none."""
        found = sorted((p for (t, _), p in self._partitions.items() if t == topic), key=lambda p: p.partition)
        if not found:
            raise UnknownTopicOrPartitionError(f"Topic '{topic}' does not exist.")
        return found

    def partition(self, topic: str, partition: int) -> ReadOnlyPartition:
        try:
            return self._partitions[(topic, partition)]
        except KeyError:
            raise UnknownTopicOrPartitionError(f"Partition {topic}-{partition} does not exist.") from None

    def _topic_store(self):
        if self._store is None:
            self._store = TopicConfigStore([Path(d) for d in self.log_dirs]).load()
        return self._store

    def topic_id(self, topic: str) -> str | None:
        """The topic id from a partition's ``partition.metadata``, else from kafkalog's topic file."""
        for part in self.partitions_of(topic):
            metadata = PartitionMetadataFile(part.directory)
            if metadata.exists():
                with contextlib.suppress(KafkaLogError, OSError, ValueError):
                    return metadata.read()
        state = self._topic_store().get(topic)
        return state.topic_id if state is not None else None

    def config_overrides(self, topic: str) -> dict[str, str]:
        """The topic's config overrides as kafkalog recorded them (empty for a dir kafkalog did not create)."""
        state = self._topic_store().get(topic)
        return dict(state.config) if state is not None else {}
