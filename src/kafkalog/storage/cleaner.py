"""Log compaction of one partition log: Kafka's ``Cleaner`` (``LogCleaner.scala``) and ``MemoryRecords.filterTo``.

A clean builds a key → latest-offset map over the dirty section [firstDirty, firstUncleanable), then
copies every segment below the map's end, group by group, into one ``.cleaned`` segment per group,
keeping for each key only its latest record, and swaps the result in (``Log.replace_segments``).
Transactions, markers, tombstones and producer state follow Kafka's rules (spec section 12).

Hot paths work on whole runs of batches: records are walked by one numba call per run
(``_cleaner_kernels``), keys are hashed and looked up by one call, retention is decided with numpy
masks, and batches that keep every record are copied byte for byte. Python runs once per batch, never
once per record (legacy v0/v1 batches aside).

Runs of plain batches (the usual case) take a fast path spread over threads (``_PlainRuns``): the cleaning thread
scans the batch headers, which fixes where each run ends, and does what must happen in order (the map's puts, the
appends to the cleaned segment); two read-ahead workers walk the next runs meanwhile, a few runs and one segment
ahead, hash their keys (map pass) or decide and write out what they keep (copy pass), at a lower scheduling
priority than the cleaning thread, which sets the pace. The numba kernels release the GIL. The copy pass reads the
segments through the maps the map pass made (their pages already mapped) and appends each run with one write. The
end of a cleaned group (index trimming, flush, swap) runs on a fourth thread while the next group is cleaned, in
order; that thread also starts the writeback of each run appended, so a flush has little left to wait for.
"""

from __future__ import annotations

import contextlib
import functools
import heapq
import logging
import mmap
import os
import struct
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

import numpy as np

from ..clock import Time
from ..errors import CorruptRecordError, InvalidRecordError, KafkaStorageError, LogCleaningAbortedError
from ..record import compression as codecs
from ..record.batch import RECORDS_OFFSET, RecordBatch
from ..record.builder import assemble_batch
from ..record.checksums import crc32c
from ..record.legacy import LegacyBatch
from ..record.legacy_builder import build_legacy
from ..record.scan import iter_batches, map_file
from ..record.types import NO_TIMESTAMP, ControlRecordType, TimestampType
from . import _cleaner_kernels as kernels
from .offset_map import SkimpyOffsetMap
from .segment import LogSegment
from .txn_index import AbortedTxn

log = logging.getLogger(__name__)

INT32_MAX = (1 << 31) - 1
# Batch fates (RecordFilter.BatchRetention).
DELETE, DELETE_EMPTY, RETAIN_EMPTY = "DELETE", "DELETE_EMPTY", "RETAIN_EMPTY"
# The map is built, and segments filtered, over runs of about this many batch bytes: one kernel call each.
MAP_RUN_BYTES = 8 * 1024 * 1024
FILTER_RUN_BYTES = 8 * 1024 * 1024
_CONTROL_KEY = struct.Struct(">hh")


# ----- statistics and throttling --------------------------------------------------------------
@dataclass
class CleanerStats:
    """What one clean read, wrote and kept (Kafka's CleanerStats); times are the clock's milliseconds."""

    bytes_read: int = 0
    bytes_written: int = 0
    map_bytes_read: int = 0
    map_messages_read: int = 0
    messages_read: int = 0
    messages_written: int = 0
    invalid_messages_read: int = 0
    buffer_utilization: float = 0.0
    start_ms: int = 0
    map_complete_ms: int = 0
    end_ms: int = 0
    wall_seconds: float = 0.0
    map_wall_seconds: float = 0.0

    def elapsed_secs(self) -> float:
        return (self.end_ms - self.start_ms) / 1000

    def elapsed_indexing_secs(self) -> float:
        return (self.map_complete_ms - self.start_ms) / 1000

    def add(self, other: CleanerStats) -> None:
        """Sum the counters of another clean into this one (for a cleaning pass over several logs)."""
        for name in (
            "bytes_read",
            "bytes_written",
            "map_bytes_read",
            "map_messages_read",
            "messages_read",
            "messages_written",
            "invalid_messages_read",
        ):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.buffer_utilization = max(self.buffer_utilization, other.buffer_utilization)
        self.wall_seconds += other.wall_seconds
        self.map_wall_seconds += other.map_wall_seconds


class Throttler:
    """Sleep to hold an observed byte rate under ``desired_rate_per_sec`` (Kafka's Throttler, 300 ms periods)."""

    def __init__(self, desired_rate_per_sec: float, clock: Time, check_interval_ms: int = 300) -> None:
        self.desired_rate_per_sec = float(desired_rate_per_sec)
        self.clock = clock
        self.check_interval_ns = check_interval_ms * 1_000_000
        self._period_start_ns = clock.nanoseconds()
        self._observed = 0.0
        self.slept_ms = 0

    def maybe_throttle(self, observed: float) -> None:
        self._observed += observed
        now = self.clock.nanoseconds()
        elapsed_ns = now - self._period_start_ns
        if elapsed_ns > self.check_interval_ns and self._observed > 0:
            rate = self._observed * 1e9 / elapsed_ns
            if rate > self.desired_rate_per_sec:
                desired_rate_ms = self.desired_rate_per_sec / 1000
                sleep_ms = round(self._observed / desired_rate_ms - elapsed_ns / 1e6)
                if sleep_ms > 0:
                    self.clock.sleep(sleep_ms)
                    self.slept_ms += sleep_ms
            self._period_start_ns = self.clock.nanoseconds()
            self._observed = 0.0


# ----- transactions seen while cleaning -------------------------------------------------------
class CleanedTransactionMetadata:
    """Transactions met in cleaning order: which batches are aborted, which markers may go (Kafka's class)."""

    def __init__(self) -> None:
        self._ongoing_committed: set[int] = set()
        self._ongoing_aborted: dict[int, list] = {}  # pid → [AbortedTxn, last observed batch offset or None]
        self._aborted: list[tuple[int, int, AbortedTxn]] = []  # min-heap by first offset
        self._seq = 0
        self.cleaned_index = None  # the TransactionIndex of the segment being written, if any

    def add_aborted_transactions(self, aborted: Iterable[AbortedTxn]) -> None:
        for txn in aborted:
            self._seq += 1
            heapq.heappush(self._aborted, (txn.first_offset, self._seq, txn))

    def consume_aborted_up_to(self, offset: int) -> None:
        """Start tracking every aborted transaction beginning at or before ``offset`` (as reading a batch does)."""
        self._consume_aborted_up_to(offset)

    def _consume_aborted_up_to(self, offset: int) -> None:
        while self._aborted and self._aborted[0][0] <= offset:
            txn = heapq.heappop(self._aborted)[2]
            self._ongoing_aborted.setdefault(txn.producer_id, [txn, None])

    def on_control_batch_read(self, batch: RecordBatch) -> bool:
        """True when the marker may be discarded (no batch of its transaction remains to be cleaned)."""
        self._consume_aborted_up_to(batch.last_offset)
        control_type = _control_type(batch)
        if control_type is None:
            return True  # an empty control batch was already cleaned
        pid = batch.producer_id
        if control_type == ControlRecordType.ABORT:
            state = self._ongoing_aborted.pop(pid, None)
            if state is not None and state[1] is not None:
                if self.cleaned_index is not None:
                    self.cleaned_index.append(state[0])
                return False
            return True
        if control_type == ControlRecordType.COMMIT:
            if pid in self._ongoing_committed:
                self._ongoing_committed.discard(pid)
                return False
            return True
        return False

    def on_batch_read(self, batch) -> bool:
        """True when the data batch belongs to an aborted transaction."""
        self._consume_aborted_up_to(batch.last_offset)
        if batch.is_transactional:
            state = self._ongoing_aborted.get(batch.producer_id)
            if state is not None:
                state[1] = batch.last_offset
                return True
            self._ongoing_committed.add(batch.producer_id)
        return False


def _control_type(batch: RecordBatch) -> int | None:
    """The control record type of a control batch (None when the batch is empty)."""
    if batch.record_count <= 0:
        return None
    first = next(iter(batch), None)
    if first is None or first.key is None or len(first.key) < 4:
        return -1
    return _CONTROL_KEY.unpack_from(first.key)[1]


# ----- choosing what to clean -----------------------------------------------------------------
@dataclass(frozen=True)
class OffsetsToClean:
    first_dirty_offset: int
    first_uncleanable_dirty_offset: int
    force_update_checkpoint: bool = False


def cleanable_offsets(log_obj, last_clean_offset: int | None, now: int) -> OffsetsToClean:
    """The dirty range of a log (LogCleanerManager.cleanableOffsets)."""
    start = log_obj.log_start_offset
    checkpoint = start if last_clean_offset is None else last_clean_offset
    force = False
    if checkpoint < start:
        if not (log_obj.config.compact and log_obj.config.delete):
            log.warning(
                "Resetting first dirty offset of %s to log start offset %d since the checkpointed offset %d is invalid",
                log_obj.directory.name,
                start,
                checkpoint,
            )
        first_dirty, force = start, True
    elif checkpoint > log_obj.log_end_offset:
        log.warning(
            "The last checkpoint dirty offset for partition %s is %d, which is larger than the log end offset %d. "
            "Resetting to the log start offset %d.",
            log_obj.directory.name,
            checkpoint,
            log_obj.log_end_offset,
            start,
        )
        first_dirty, force = start, True
    else:
        first_dirty = checkpoint
    bounds = [log_obj.last_stable_offset, log_obj.active_segment.base_offset]
    min_lag = max(log_obj.config.min_compaction_lag_ms, 0)
    if min_lag > 0:
        for segment in log_obj.non_active_segments_from(first_dirty):
            if segment.largest_timestamp > now - min_lag:
                bounds.append(segment.base_offset)
                break
    return OffsetsToClean(first_dirty, max(first_dirty, min(bounds)), force)


def max_compaction_delay(log_obj, first_dirty_offset: int, now: int) -> int:
    """How far past max.compaction.lag.ms the oldest dirty segment is (0 when it is not)."""
    first_timestamps = []
    for segment in log_obj.non_active_segments_from(first_dirty_offset):
        ts = segment.first_batch_timestamp()
        if ts > 0:
            first_timestamps.append(ts)
    earliest = min(first_timestamps) if first_timestamps else None
    clean_until = now - max(log_obj.config.max_compaction_lag_ms, 0)
    return clean_until - earliest if earliest is not None and earliest < clean_until else 0


def calculate_cleanable_bytes(log_obj, first_dirty_offset: int, uncleanable_offset: int) -> tuple[int, int]:
    """(base of the segment holding the uncleanable offset, bytes of the segments from first dirty up to it)."""
    segment = log_obj.segments.floor(uncleanable_offset)
    first_uncleanable = segment.base_offset if segment is not None else uncleanable_offset
    cleanable = log_obj.log_segments(min(first_dirty_offset, first_uncleanable), first_uncleanable)
    return first_uncleanable, sum(s.size for s in cleanable)


@dataclass
class LogToClean:
    """A compacted log with its dirty range and sizes (Kafka's LogToClean); ordered by ``cleanable_ratio``."""

    topic_partition: object
    log: object
    first_dirty_offset: int
    uncleanable_offset: int
    need_compaction_now: bool = False
    clean_bytes: int = field(init=False)
    first_uncleanable_offset: int = field(init=False)
    cleanable_bytes: int = field(init=False)

    def __post_init__(self) -> None:
        self.clean_bytes = sum(s.size for s in self.log.log_segments(-1, self.first_dirty_offset))
        self.first_uncleanable_offset, self.cleanable_bytes = calculate_cleanable_bytes(
            self.log, self.first_dirty_offset, self.uncleanable_offset
        )

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleanable_ratio(self) -> float:
        return self.cleanable_bytes / self.total_bytes if self.total_bytes else 0.0


def group_segments_by_size(
    segments: list[LogSegment], max_size: int, max_index_size: int, first_uncleanable_offset: int
) -> list[list[LogSegment]]:
    """Consecutive segments that fit in one cleaned segment: size, both index sizes, 2^31 offsets."""
    groups: list[list[LogSegment]] = []
    rest = list(segments)
    while rest:
        group = [rest.pop(0)]
        log_size = group[0].size
        index_size = group[0].offset_index.size_in_bytes
        time_index_size = group[0].time_index.size_in_bytes
        while rest:
            following = rest[0]
            last_offset = rest[1].base_offset - 1 if len(rest) > 1 else first_uncleanable_offset - 1
            if not (
                log_size + following.size <= max_size
                and index_size + following.offset_index.size_in_bytes <= max_index_size
                and time_index_size + following.time_index.size_in_bytes <= max_index_size
                and (following.size == 0 or last_offset - group[0].base_offset <= INT32_MAX)
            ):
                break
            group.append(rest.pop(0))
            log_size += following.size
            index_size += following.offset_index.size_in_bytes
            time_index_size += following.time_index.size_in_bytes
        groups.append(group)
    return groups


# ----- decoding runs of batches ---------------------------------------------------------------
@dataclass
class _Records:
    """Every record of a run of v2 batches, as positions into ``arena`` (see _cleaner_kernels.walk_records)."""

    arena: np.ndarray
    batch_of: np.ndarray
    first: np.ndarray  # index of each batch's first record (len = batches + 1)
    rec_start: np.ndarray
    tail_start: np.ndarray
    rec_end: np.ndarray
    offsets: np.ndarray
    timestamps: np.ndarray
    key_pos: np.ndarray
    key_len: np.ndarray
    val_len: np.ndarray
    verdict: np.ndarray | None = None  # the copy pass's candidates: V_KEEP or V_LOOKUP (see walk_decide)
    invalid: int = 0  # records the copy pass's walk dropped for want of a key


def _decode(batches: list[RecordBatch]) -> _Records:
    """Walk the records of v2 batches in one kernel call (compressed sections decompressed once each)."""
    nb = len(batches)
    counts = np.fromiter((max(b.record_count, 0) for b in batches), np.int64, nb)
    source = batches[0].source_buffer if nb else None
    if nb and all(b.compression_type == codecs.NONE and b.source_buffer is source for b in batches):
        arena = np.frombuffer(source, np.uint8)
        starts = np.fromiter((b.position + RECORDS_OFFSET for b in batches), np.int64, nb)
        ends = np.fromiter((b.position + b.size_in_bytes for b in batches), np.int64, nb)
    else:
        sections = [b.records_section() if b.record_count > 0 else b"" for b in batches]
        lengths = np.fromiter((len(s) for s in sections), np.int64, nb)
        ends = np.cumsum(lengths)
        starts = ends - lengths
        arena = np.frombuffer(b"".join(sections), np.uint8)
    n = int(counts.sum())
    if n > int((ends - starts).sum()) // 7 + 1:  # a record takes at least 7 bytes
        bad = next(b for b, s, e in zip(batches, starts, ends, strict=True) if b.record_count > (e - s) // 7 + 1)
        raise InvalidRecordError(
            f"Found invalid record count {bad.record_count} for the batch size", position=bad.position,
            offset=bad.base_offset,
        )  # fmt: skip
    base_offset = np.fromiter((b.base_offset for b in batches), np.int64, nb)
    base_ts = np.fromiter((b.base_timestamp for b in batches), np.int64, nb)
    max_ts = np.fromiter((b.max_timestamp for b in batches), np.int64, nb)
    append = np.fromiter((bool(b.attributes & 0x08) for b in batches), np.bool_, nb)
    out = [np.empty(n, np.int64) for _ in range(8)]
    code, bi, ri = kernels.walk_records(arena, starts, ends, counts, base_offset, base_ts, max_ts, append, *out,
                                        False)  # fmt: skip
    if code != kernels.OK:
        bad = batches[bi]
        raise InvalidRecordError(
            f"Found invalid record structure while cleaning (error {code}, record {ri} of {bad.record_count})",
            position=bad.position,
            offset=bad.base_offset,
        )
    first = np.zeros(nb + 1, np.int64)
    np.cumsum(counts, out=first[1:])
    batch_of = np.repeat(np.arange(nb, dtype=np.int64), counts)
    return _Records(arena, batch_of, first, *out)


def _batch_runs(view, start: int, end: int, max_run: int):
    """Consecutive batches of ``view[start:end]`` in runs of about ``max_run`` bytes: (batches, run end)."""
    run: list = []
    run_start = pos = start
    for batch in iter_batches(view, start, end):
        run.append(batch)
        pos = batch.position + batch.size_in_bytes
        if pos - run_start >= max_run:
            yield run, pos
            run, run_start = [], pos
    if run:
        yield run, pos


_INT32 = struct.Struct(">I")
_NO_MARKS = np.zeros(0, np.uint8)


# Runs of plain batches read ahead of the one being put in the map or written, each walked (and prepared) by one of
# the read-ahead workers: the kernels release the GIL, so two runs are read on two cores while this thread works.
_AHEAD_RUNS = 6
_READ_AHEAD_WORKERS = 2
_FIRST_RUN_BYTES = 512 * 1024
_HELD_MAP_BYTES = 4 * 1024 * 1024 * 1024
"""At most this many bytes of segment maps are kept from a clean's map pass for its copy pass (see
_PlainRuns.holding): mapping a file's cached pages again costs about a tenth of a second per GiB, and unmapping it a
third of that. The held pages are the page cache's, reclaimable as ever; their page tables take 2 MiB per GiB."""


@dataclass
class _PlainRun:
    """A run of plain v2 batches (magic 2, uncompressed, neither transactional nor control) read by
    ``_cleaner_kernels.scan_batches``: their headers, read buffers (copy pass) and walked records."""

    arena: np.ndarray
    hdr: np.ndarray  # int64[HEADER_COLUMNS, capacity]: columns H_* of batch b in hdr[:, b]
    batches: int
    chunks: int
    chunk_first: np.ndarray
    chunk_limit: np.ndarray
    end: int  # the position after the run
    records: _Records | None = None
    prepared: object = None  # what the pass's prepare step made of the walked run (on a read-ahead worker)
    scratch: _Scratch | None = None  # the run's work arrays, back to the pool once the pass is done with it

    def last_offsets(self) -> np.ndarray:
        return self.hdr[kernels.H_BASE, : self.batches] + self.hdr[kernels.H_LAST_DELTA, : self.batches]


class _Scratch:
    """The work arrays of one run of the fast path (batch headers, the walked records, key digests, verdicts), taken
    from and given back to a pool: a new array is zero pages until first written, and touching fresh memory for
    every run costs more than the walk itself."""

    def __init__(self) -> None:
        self.hdr = np.empty((kernels.HEADER_COLUMNS, 4096), np.int64)
        self.chunk_first = np.empty(1025, np.int64)
        self.chunk_limit = np.empty(1024, np.int64)
        self.records = np.empty((8, 0), np.int64)
        self.digests = np.empty(0, np.uint8)
        self.verdict = np.empty(0, np.uint8)

    def record_arrays(self, n: int) -> list[np.ndarray]:
        """Eight int64 arrays of ``n`` records (_Records' per-record fields)."""
        if self.records.shape[1] < n:
            self.records = np.empty((8, n + n // 4), np.int64)
        return [self.records[k, :n] for k in range(8)]

    def digest_array(self, n: int) -> np.ndarray:
        if self.digests.shape[0] < 16 * n:
            self.digests = np.empty(20 * n, np.uint8)
        return self.digests[: 16 * n]

    def verdict_array(self, n: int) -> np.ndarray:
        if self.verdict.shape[0] < n:
            self.verdict = np.empty(n + n // 4, np.uint8)
        return self.verdict[:n]


def _scan_headers(arena: np.ndarray, position: int, size: int, run_bytes: int, buffer_size: int,
                  scratch: _Scratch) -> _PlainRun | None:  # fmt: skip
    """The batch headers of the run of plain batches at ``position`` (``buffer_size`` > 0: in read buffers of that
    size, as the copy pass reads), in ``scratch``; None when the run holds anything else, or anything the reference
    path would reject or treat specially (then that path handles the run)."""
    while True:
        status, nb, nc, end = kernels.scan_batches(arena, position, size, run_bytes, max(buffer_size, 1),
                                                   buffer_size > 0, scratch.hdr, scratch.chunk_first,
                                                   scratch.chunk_limit)  # fmt: skip
        if status != kernels.SCAN_FULL:
            break
        scratch.hdr = np.empty((kernels.HEADER_COLUMNS, 2 * scratch.hdr.shape[1]), np.int64)
    if status != kernels.SCAN_DONE or (buffer_size > 0 and nb == 0 and position < size):
        return None
    return _PlainRun(arena, scratch.hdr, nb, nc, scratch.chunk_first, scratch.chunk_limit, end, scratch=scratch)


def _walk_run(run: _PlainRun, walk: Callable[[_PlainRun], _Records | None],
              prepare: Callable[[_PlainRun], object] | None) -> _PlainRun | None:  # fmt: skip
    """Walk the records of a scanned run and prepare it; None on a malformed record (the reference path raises).
    Thread-safe as long as ``walk`` and ``prepare`` are: they read the arena."""
    if run.batches:
        run.records = walk(run)
        if run.records is None:
            return None
        if prepare is not None:
            run.prepared = prepare(run)
    return run


_WORKER_NICENESS = 5
"""How much lower the read-ahead workers' scheduling priority is than the cleaning thread's. The cleaning thread does
the work that must happen in order (headers, puts, appends) and sets the pace; the workers keep runs ready ahead of
it. On a machine with fewer cores than busy threads, an equal share leaves the cleaning thread waiting for a core
while a worker fills a run it will not need yet (measured: 8-10% of the map pass's time on 2 cores)."""


def _yield_to_cleaning_thread() -> None:
    """Lower this read-ahead worker's scheduling priority. Only on Linux, where setpriority takes a thread id and
    sets that thread's alone; elsewhere it would take the id for a process's, so nothing changes there."""
    get_native_id = getattr(threading, "get_native_id", None)
    if not sys.platform.startswith("linux") or get_native_id is None or not hasattr(os, "setpriority"):
        return
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, get_native_id(), os.getpriority(os.PRIO_PROCESS, 0) + _WORKER_NICENESS)


class _PlainRuns:
    """Reads runs of plain batches for the fast path of one pass over a list of segments, up to ``_AHEAD_RUNS``
    ahead on worker threads (across segment boundaries too), and keeps the output buffers.

    The batch headers are scanned here (it is quick and fixes where each run ends); walking the records and the
    pass's ``prepare`` step (hashing keys, or deciding and writing what a run keeps) run on the workers. A run is
    known by (segment index, position, read buffer size), so whatever the pass does in between, a run read ahead
    is only used where the pass reads that very run. Used as a context manager per pass (:meth:`over`); leaving it
    waits for the reads ahead, and the segments' maps close once nothing refers to them.
    """

    def __init__(self) -> None:
        self._pool: ThreadPoolExecutor | None = None
        self._scratch: list[_Scratch] = []  # work arrays to reuse
        self._ahead: deque[tuple[tuple[int, int, int], Future]] = deque()
        self._tail = (0, 0, 0)  # (segment, position, buffer size) where the next run to read ahead starts
        self._segments: list[LogSegment] = []
        self._index: dict[int, int] = {}
        self._spare: list[np.ndarray] = []  # output buffers to reuse
        self._spare_lock = threading.Lock()
        self._holding = False  # within holding(): a holding pass keeps its segments' maps for the next pass
        self._hold = False  # whether the pass under way keeps its maps
        self._held: dict[int, tuple[LogSegment, memoryview, np.ndarray]] = {}  # by id(segment)
        self._held_bytes = 0

    @contextlib.contextmanager
    def holding(self):
        """Within this context, the maps of a pass started with ``hold=True`` (a clean's map pass) stay open, their
        pages mapped, for the next pass that reads those segments (the clean's copy pass), up to _HELD_MAP_BYTES;
        leaving it lets go of those not taken."""
        self._holding = True
        try:
            yield self
        finally:
            self._holding = False
            self._held.clear()
            self._held_bytes = 0

    def over(self, segments: list[LogSegment], starts: list[int], run_bytes: int, buffer_size: int,
             walk: Callable[[_PlainRun], _Records | None],
             prepare: Callable[[_PlainRun], object] | None, *, hold: bool = False) -> _PlainRuns:  # fmt: skip
        """Start a pass over ``segments``, each read from its ``starts`` position, the first read buffer of each
        ``buffer_size`` (0: unchunked, as the map pass reads); ``walk`` reads a run's records, on a worker.
        ``hold``: keep the segments' maps for the next pass (see :meth:`holding`)."""
        self._segments, self._starts, self._run_bytes, self._buffer_size = segments, starts, run_bytes, buffer_size
        self._hold = hold and self._holding
        self._walk, self._prepare = walk, prepare
        self._index = {id(segment): i for i, segment in enumerate(segments)}
        self._sizes = [segment.log.size for segment in segments]
        self._views: dict[int, tuple[memoryview, np.ndarray]] = {}
        self._touching: list[Future] = []
        self._map_ahead(1)  # the first is read at once, here
        return self

    def __enter__(self) -> _PlainRuns:
        return self

    def __exit__(self, *exc) -> None:
        self._drop_ahead()
        wait(self._touching)
        self._touching = []
        self._views = {}
        self._segments, self._index, self._prepare = [], {}, None
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    @property
    def active(self) -> bool:
        """Whether a pass is under way."""
        return bool(self._index)

    def index_of(self, segment: LogSegment) -> int | None:
        """The segment's index in this pass, or None when the pass does not read it."""
        return self._index.get(id(segment))

    def view(self, i: int) -> tuple[memoryview, np.ndarray]:
        """Segment ``i``'s bytes (its size when the pass started), mapped on first use; the maps of the segments
        before it are let go (the pass reads in order; runs read ahead hold their own reference)."""
        passed = [self._views.pop(j) for j in [j for j in self._views if j < i]]
        if passed:  # unmapping a segment takes milliseconds: a worker lets go of them
            self._workers().submit(passed.clear)
        return self._mapped(i)

    def _mapped(self, i: int) -> tuple[memoryview, np.ndarray]:
        if i not in self._views:
            segment, size = self._segments[i], self._sizes[i]
            held = self._take_held(segment, size)
            if held is not None:
                self._views[i] = held
            else:
                view = map_file(segment.log.path)[:size] if size else memoryview(b"")
                self._views[i] = view, np.frombuffer(view, np.uint8)
                if self._hold and size and self._held_bytes + size <= _HELD_MAP_BYTES:
                    self._held[id(segment)] = (segment, *self._views[i])
                    self._held_bytes += size
        return self._views[i]

    def _take_held(self, segment: LogSegment, size: int) -> tuple[memoryview, np.ndarray] | None:
        """The map a holding pass kept of ``segment`` (its pages already mapped), if it has the same size."""
        if self._hold:
            return None
        held = self._held.pop(id(segment), None)
        if held is None:
            return None
        self._held_bytes -= len(held[1])
        if held[0] is not segment or len(held[1]) != size:
            return None
        return held[1], held[2]

    def size(self, i: int) -> int:
        return self._sizes[i]

    def _map_ahead(self, i: int) -> None:
        """Map segment ``i`` (a segment ahead of the runs read ahead) and fault its pages in on a worker."""
        if i < len(self._segments) and i not in self._views and self._sizes[i]:
            held = not self._hold and id(self._segments[i]) in self._held
            arena = self._mapped(i)[1]
            if not held:
                self._touching.append(self._workers().submit(kernels.touch_pages, arena, mmap.PAGESIZE))

    def _workers(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(_READ_AHEAD_WORKERS, thread_name_prefix="cleaner-read-ahead",
                                            initializer=_yield_to_cleaning_thread)  # fmt: skip
        return self._pool

    def _drop_ahead(self) -> None:
        for _, future in self._ahead:
            future.cancel()
        wait([future for _, future in self._ahead])
        self._ahead.clear()

    def _headers(self, i: int, position: int, buffer_size: int, run_bytes: int | None = None) -> _PlainRun | None:
        with self._spare_lock:
            scratch = self._scratch.pop() if self._scratch else _Scratch()
        run = _scan_headers(self._mapped(i)[1], position, self._sizes[i], run_bytes or self._run_bytes, buffer_size,
                            scratch)  # fmt: skip
        if run is None or not run.batches:
            self._give_back(scratch)
        return run

    def _give_back(self, scratch: _Scratch | None) -> None:
        with self._spare_lock:
            if scratch is not None and len(self._scratch) <= _AHEAD_RUNS:
                self._scratch.append(scratch)

    def done(self, run: _PlainRun) -> None:
        """The pass is done with ``run``: its work arrays (and output buffer) go back to the pools."""
        if isinstance(run.prepared, _EmittedRun):
            self._reuse(run.prepared.out)
        self._give_back(run.scratch)
        run.scratch = run.records = run.prepared = None

    def scan(self, i: int, position: int, buffer_size: int) -> _PlainRun | None:
        """The run at ``position`` of segment ``i``, walked and prepared (see _scan_headers); keeps the runs after
        it read ahead."""
        self.view(i)
        key = (i, position, buffer_size)
        if position >= self._sizes[i]:  # the segment's end: what is read ahead (in the next segment) stays
            return self._headers(i, position, buffer_size)
        if self._ahead and self._ahead[0][0] == key:
            run = self._ahead.popleft()[1].result()
        else:  # the pass's first run (or the first after the reference path): a short one, read here while nothing
            # is read ahead yet, so that the workers start sooner
            self._drop_ahead()
            run = self._headers(i, position, buffer_size, min(self._run_bytes, _FIRST_RUN_BYTES))
            if run is not None:
                scratch = run.scratch
                run = _walk_run(run, self._walk, self._prepare)
                if run is None:
                    self._give_back(scratch)
            self._tail = (i, run.end if run is not None else position, buffer_size)
        if run is not None and run.batches:
            self._read_ahead()
        return run

    def _read_ahead(self) -> None:
        """Read ahead from where the last run read (or read ahead) ended, into the next segments too."""
        i, position, buffer_size = self._tail
        while len(self._ahead) < _AHEAD_RUNS:
            if position >= self._sizes[i]:
                if i + 1 == len(self._segments):
                    return
                i, position, buffer_size = i + 1, self._starts[i + 1], self._buffer_size
                self._map_ahead(i + 1)
                continue
            run = self._headers(i, position, buffer_size)
            if run is None or not run.batches:
                return  # the reference path's, or the end: left for when the pass gets there
            future = self._workers().submit(_walk_run, run, self._walk, self._prepare)
            self._ahead.append(((i, position, buffer_size), future))
            position = run.end
            self._tail = (i, position, buffer_size)

    def output(self, nbytes: int) -> np.ndarray:
        """An output buffer of at least ``nbytes`` (thread-safe); :meth:`done` hands it back once written."""
        with self._spare_lock:
            for i, buffer in enumerate(self._spare):
                if buffer.shape[0] >= nbytes:
                    return self._spare.pop(i)
        return np.empty(max(nbytes, FILTER_RUN_BYTES + FILTER_RUN_BYTES // 4), np.uint8)

    def _reuse(self, buffer: np.ndarray) -> None:
        with self._spare_lock:
            if len(self._spare) <= _AHEAD_RUNS:
                self._spare.append(buffer)


def _walk_keys(run: _PlainRun, hash_from: int | None = None) -> _Records | None:
    """The map pass's walk of a run of plain batches into its scratch arrays: every record read in full, only the
    offsets and keys kept (_cleaner_kernels.walk_records, keys only); None on a malformed record (the reference path
    raises). With ``hash_from``, the keys a put takes (keyed, at or after that offset) are hashed as the walk reads
    them (walk_keys_and_hash), into the run's scratch digests: SkimpyOffsetMap.digest_records's, for put_digests."""
    hdr, nb = run.hdr, run.batches
    counts = hdr[kernels.H_COUNT, :nb]
    n = int(counts.sum())
    starts = hdr[kernels.H_POS, :nb] + RECORDS_OFFSET
    ends = hdr[kernels.H_POS, :nb] + hdr[kernels.H_SIZE, :nb]
    out = run.scratch.record_arrays(n)
    if hash_from is None:
        append = (hdr[kernels.H_ATTR, :nb] & 0x08) != 0
        code, _, _ = kernels.walk_records(run.arena, starts, ends, counts, hdr[kernels.H_BASE, :nb],
                                          hdr[kernels.H_BASE_TS, :nb], hdr[kernels.H_MAX_TS, :nb], append, *out,
                                          True)  # fmt: skip
    else:
        code, _, _ = kernels.walk_keys_and_hash(run.arena, starts, ends, counts, hdr[kernels.H_BASE, :nb], out[3],
                                                out[5], out[6], hash_from, run.scratch.digest_array(n))  # fmt: skip
    if code != kernels.OK:
        return None
    first = np.zeros(nb + 1, np.int64)
    np.cumsum(counts, out=first[1:])
    return _Records(run.arena, None, first, None, None, None, out[3], None, out[5], out[6], None)


def _hashed_keys(run: _PlainRun) -> np.ndarray:
    """The digests :func:`_walk_keys` made of a run's keys."""
    return run.scratch.digests[: 16 * len(run.records.offsets)]


@dataclass
class _EmittedRun:
    """A run of plain batches filtered and written out by Cleaner._emit_plain, ready to append."""

    out: np.ndarray  # the kept batches back to back, CRCs filled in
    chunk_out: np.ndarray  # per read buffer (see _cleaner_kernels.emit_run): output end, offsets, timestamp, count
    records: int  # records read
    bytes_read: int
    invalid: int  # records read without a key below the map's latest offset


# ----- the cleaner ----------------------------------------------------------------------------
@dataclass
class _FilterResult:
    """Batches kept by one filter pass: (batch index, bytes, max timestamp, its offset, max offset, records)."""

    entries: list = field(default_factory=list)
    messages_read: int = 0
    bytes_read: int = 0
    current: int = 0  # index of the batch being filtered

    def retained(self, data, max_timestamp: int, shallow_offset: int, max_offset: int, count: int) -> None:
        self.entries.append((self.current, data, max_timestamp, shallow_offset, max_offset, count))


class Cleaner:
    """Cleans one log at a time with its own offset map (one per cleaner thread, as in Kafka)."""

    def __init__(
        self,
        offset_map: SkimpyOffsetMap,
        clock: Time,
        *,
        io_buffer_size: int = 512 * 1024 // 2,
        max_io_buffer_size: int = 1024 * 1024 + 12,
        throttler: Throttler | None = None,
        check_done: Callable[[object], None] | None = None,
        cleaner_id: int = 0,
        fast: bool = True,
    ) -> None:
        self.offset_map = offset_map
        self.fast = fast  # False: only the per-batch reference path (the fast path's test oracle)
        self._marks: np.ndarray | None = None  # the map pass's record marks (see _PlainRuns), None when unusable
        self._marks_base = 0
        self._last_put = -1
        self._runs = _PlainRuns()
        self._map_lock = threading.Lock()  # a copy pass's read-ahead workers ask the map in turn
        self._flush_pool: ThreadPoolExecutor | None = None  # flushes a cleaned segment while the next is cleaned
        self._pending_swap: tuple | None = None  # (log, cleaned segment, its group, its flush) not yet swapped in
        self.clock = clock
        self.io_buffer_size = io_buffer_size
        self.max_io_buffer_size = max(max_io_buffer_size, io_buffer_size)
        self.throttler = throttler or Throttler(float("inf"), clock)
        self._check_done = check_done or (lambda tp: None)
        self.cleaner_id = cleaner_id
        self.lock = threading.Lock()  # held for a whole clean: the offset map serves one clean at a time

    # ----- one clean ---------------------------------------------------------------------------
    def clean(self, cleanable: LogToClean) -> tuple[int, CleanerStats]:
        """Clean the log's dirty range now; return (the next first dirty offset, stats)."""
        return self.do_clean(cleanable, self.clock.milliseconds())

    def do_clean(self, cleanable: LogToClean, now: int) -> tuple[int, CleanerStats]:
        with self._runs.holding():  # the map pass's segment maps serve the copy pass too
            return self._do_clean(cleanable, now)

    def _do_clean(self, cleanable: LogToClean, now: int) -> tuple[int, CleanerStats]:
        log_obj = cleanable.log
        started = time.perf_counter()
        stats = CleanerStats(start_ms=self.clock.milliseconds())
        clean_part = log_obj.log_segments(0, cleanable.first_dirty_offset)
        legacy_delete_horizon = (
            clean_part[-1].last_modified_ms() - log_obj.config.delete_retention_ms if clean_part else 0
        )
        upper_bound = cleanable.first_uncleanable_offset
        self.build_offset_map(cleanable.topic_partition, log_obj, cleanable.first_dirty_offset, upper_bound, stats)
        end_offset = self.offset_map.latest_offset + 1
        stats.map_complete_ms = self.clock.milliseconds()
        stats.map_wall_seconds = time.perf_counter() - started
        txn = CleanedTransactionMetadata()
        groups = group_segments_by_size(
            log_obj.log_segments(0, end_offset),
            log_obj.config.segment_bytes,
            log_obj.config.segment_index_bytes,
            cleanable.first_uncleanable_offset,
        )
        try:
            with self._copy_pass(log_obj, [s for group in groups for s in group], upper_bound, now):
                for group in groups:
                    self.clean_segments(cleanable.topic_partition, log_obj, group, now, stats, txn,
                                        legacy_delete_horizon, upper_bound)  # fmt: skip
                self._swap_pending()
        finally:
            self._end_swaps()
        self._marks = None
        stats.buffer_utilization = self.offset_map.utilization
        stats.end_ms = self.clock.milliseconds()
        stats.wall_seconds = time.perf_counter() - started
        return end_offset, stats

    def estimate(self, cleanable: LogToClean, now: int) -> tuple[int, CleanerStats]:
        """A dry run of ``clean``: (the log's size once cleaned now, stats); nothing is written."""
        with self._runs.holding():
            return self._estimate(cleanable, now)

    def _estimate(self, cleanable: LogToClean, now: int) -> tuple[int, CleanerStats]:
        log_obj = cleanable.log
        stats = CleanerStats(start_ms=self.clock.milliseconds())
        clean_part = log_obj.log_segments(0, cleanable.first_dirty_offset)
        legacy_delete_horizon = (
            clean_part[-1].last_modified_ms() - log_obj.config.delete_retention_ms if clean_part else 0
        )
        upper_bound = cleanable.first_uncleanable_offset
        self.build_offset_map(cleanable.topic_partition, log_obj, cleanable.first_dirty_offset, upper_bound, stats)
        end_offset = self.offset_map.latest_offset + 1
        txn = CleanedTransactionMetadata()
        covered = log_obj.log_segments(0, end_offset)
        active_producers = log_obj.last_records_of_active_producers()
        with self._copy_pass(log_obj, covered, upper_bound, now):
            for i, segment in enumerate(covered):
                upper = covered[i + 1].base_offset if i + 1 < len(covered) else segment.read_next_offset()
                txn.add_aborted_transactions(log_obj.collect_aborted_transactions(segment.base_offset, upper))
                self.clean_into(cleanable.topic_partition, log_obj, segment, None,
                                segment.last_modified_ms() > legacy_delete_horizon, txn, active_producers, upper_bound,
                                stats, now)  # fmt: skip
        self._marks = None
        untouched = sum(s.size for s in log_obj.segments if s not in covered)
        stats.buffer_utilization = self.offset_map.utilization
        stats.end_ms = self.clock.milliseconds()
        return untouched + stats.bytes_written, stats

    # ----- the offset map ----------------------------------------------------------------------
    def build_offset_map(self, tp, log_obj, start: int, end: int, stats: CleanerStats) -> None:
        """Map key → latest offset over [start, end), stopping early when the map fills (buildOffsetMap)."""
        offset_map = self.offset_map
        offset_map.clear()
        dirty = log_obj.log_segments(start, end)
        log.info("Building offset map for log %s for %d segments in offset range [%d, %d).",
                 log_obj.directory.name, len(dirty), start, end)  # fmt: skip
        txn = CleanedTransactionMetadata()
        txn.add_aborted_transactions(log_obj.collect_aborted_transactions(start, end))
        self._marks = None
        if self.fast and end > start:
            # One byte per offset of the dirty range (capped at an eighth of the map's budget): which records the map
            # put, and which of them it still holds, so the copy pass need not hash their keys again.
            self._marks = np.zeros(min(end - start, max(offset_map.memory // 8, 1 << 20)), np.uint8)
            self._marks_base, self._last_put = start, start - 1
        # A map that takes digests (SkimpyOffsetMap) has the read-ahead workers hash the keys as they walk them
        hashed = isinstance(offset_map, SkimpyOffsetMap)
        walk = functools.partial(_walk_keys, hash_from=start) if hashed else _walk_keys
        prepare = _hashed_keys if hashed else None
        starts = [segment.offset_index.lookup(start).position for segment in dirty]
        try:
            with self._runs.over(dirty, starts, MAP_RUN_BYTES, 0, walk, prepare, hold=True) as runs:
                for i, segment in enumerate(dirty):
                    self._check_done(tp)
                    next_start = dirty[i + 1].base_offset if i + 1 < len(dirty) else end
                    if self._map_runs(tp, runs, i, starts[i], start, next_start, txn, stats, segment):
                        log.debug("Offset map is full, %d segments fully mapped, segment %d partially", i,
                                  segment.base_offset)  # fmt: skip
                        return
        finally:
            if self._marks is not None:
                offset_map.mark_held(self._marks, self._marks_base, kernels.MARK_PUT, kernels.MARK_LATEST)

    def _map_runs(self, tp, runs, i, position, start, next_segment_start, txn, stats, segment) -> bool:
        """Map segment ``i`` of the pass's keyed records at or after ``start``; True when the map filled up."""
        offset_map = self.offset_map
        view, size = runs.view(i)[0], runs.size(i)
        while True:
            plain = runs.scan(i, position, 0) if self.fast else None
            if plain is not None:
                if plain.batches == 0:
                    break
                full = self._map_plain_run(tp, plain, position, start, txn, stats)
                runs.done(plain)
                if full:
                    return True
                stats.map_bytes_read += plain.end - position
                position = plain.end
                continue
            run = next(_batch_runs(view, position, size, MAP_RUN_BYTES), None)
            if run is None:
                break
            run, run_end = run
            self._marks = None  # the reference path puts records the marks do not record
            self._check_done(tp)
            self.throttler.maybe_throttle(run_end - position)
            mapped = []
            for batch in run:
                if batch.is_control:
                    txn.on_control_batch_read(batch)
                elif txn.on_batch_read(batch):
                    stats.map_messages_read += max(batch.record_count, 0) if batch.magic == 2 else 0
                else:
                    mapped.append(batch)
            full_at = self._map_batches(mapped, start, stats)
            for batch in run:
                if full_at is not None and batch is full_at:
                    return True
                if batch.last_offset >= start:
                    offset_map.update_latest_offset(max(offset_map.latest_offset, batch.last_offset))
            stats.map_bytes_read += run_end - position
            position = run_end
        if position < size:
            raise KafkaStorageError(
                f"Partial batch at position {position} of non-active segment {segment.log.path}",
                path=str(segment.log.path),
            )
        offset_map.update_latest_offset(next_segment_start - 1)
        return False

    def _map_batches(self, batches: list, start: int, stats: CleanerStats):
        """Put the keyed records of ``batches``; return the batch where the map filled (or None)."""
        v2 = [b for b in batches if isinstance(b, RecordBatch)]
        if len(v2) != len(batches):  # legacy messages: the plain per-record path
            return self._map_batches_mixed(batches, start, stats)
        if not v2:
            return None
        records = _decode(v2)
        done = self.offset_map.put_records(records.arena, records.key_pos, records.key_len, records.offsets, start)
        stats.map_messages_read += done
        if done < len(records.offsets):
            return v2[int(records.batch_of[done])]
        return None

    def _map_batches_mixed(self, batches: list, start: int, stats: CleanerStats):
        offset_map = self.offset_map
        for batch in batches:
            if isinstance(batch, RecordBatch):
                if self._map_batches([batch], start, stats) is not None:
                    return batch
                continue
            for record in batch:
                if record.key is not None and record.offset >= start:
                    if offset_map.size >= offset_map.max_entries:
                        return batch
                    offset_map.put(record.key, record.offset)
                stats.map_messages_read += 1
        return None

    def _map_plain_run(self, tp, plain: _PlainRun, position: int, start: int, txn, stats: CleanerStats) -> bool:
        """The map pass over a run of plain batches (the fast twin of _map_segment's loop body); True when full."""
        self._check_done(tp)
        self.throttler.maybe_throttle(plain.end - position)
        lasts = plain.last_offsets()
        txn.consume_aborted_up_to(int(lasts.max()))  # what on_batch_read does for a non-transactional batch
        records = plain.records
        offset_map = self.offset_map
        if plain.prepared is not None:
            done = offset_map.put_digests(plain.prepared, records.key_len, records.offsets, start)
        else:
            done = offset_map.put_records(plain.arena, records.key_pos, records.key_len, records.offsets, start)
        stats.map_messages_read += done
        if self._marks is not None:
            self._last_put = int(kernels.mark_puts(self._marks, self._marks_base, records.offsets, records.key_len,
                                                   done, start, self._last_put))  # fmt: skip
            if self._last_put == -2:
                self._marks = None  # offsets that do not increase: marks cannot stand for the map
        upto = plain.batches
        if done < len(records.offsets):
            upto = int(np.searchsorted(records.first, done, side="right")) - 1
        lasts = lasts[:upto]
        lasts = lasts[lasts >= start]
        if lasts.size:
            offset_map.update_latest_offset(max(offset_map.latest_offset, int(lasts.max())))
        return upto < plain.batches

    # ----- copying ------------------------------------------------------------------------------
    def clean_segments(self, tp, log_obj, group, now, stats, txn, legacy_delete_horizon, upper_bound) -> None:
        """Copy a group of segments into one ``.cleaned`` segment and swap it in (cleanSegments).

        The end of cleanSegments (index trimming, flush, swap) runs on another thread while the next group is
        cleaned (:meth:`_finish_group`): groups are swapped in order, each only once its files are on disk and the
        group before it is in; nothing is swapped in after a failure. :meth:`_end_swaps` waits for them.
        """
        self._raise_swap_failure()
        cleaned = log_obj.new_cleaned_segment(group[0].base_offset)
        txn.cleaned_index = cleaned.txn_index
        try:
            active_producers = log_obj.last_records_of_active_producers()
            for i, segment in enumerate(group):
                upper = group[i + 1].base_offset if i + 1 < len(group) else segment.read_next_offset()
                txn.add_aborted_transactions(log_obj.collect_aborted_transactions(segment.base_offset, upper))
                retain_legacy_deletes = segment.last_modified_ms() > legacy_delete_horizon
                self.clean_into(tp, log_obj, segment, cleaned, retain_legacy_deletes, txn, active_producers,
                                upper_bound, stats, now)  # fmt: skip
            txn.cleaned_index = None
            self._pending_swap = self._flusher().submit(self._finish_group, log_obj, cleaned, group,
                                                        self._pending_swap)  # fmt: skip
        except BaseException:
            _delete_cleaned(cleaned)
            raise

    def _flusher(self) -> ThreadPoolExecutor:
        if self._flush_pool is None:
            self._flush_pool = ThreadPoolExecutor(1, thread_name_prefix="cleaner-flush")
        return self._flush_pool

    @staticmethod
    def _finish_group(log_obj, cleaned: LogSegment, group: list[LogSegment], before: Future | None) -> None:
        """The rest of Kafka's cleanSegments, on the flush thread: trim the indexes, flush, swap in; only once the
        group before is in (the one thread runs them in order; a failure there fails this one too)."""
        try:
            if before is not None:
                before.result()
            cleaned.on_become_inactive_segment()
            cleaned.flush()
            cleaned.log.set_last_modified_ms(group[-1].last_modified_ms())
            log.info("Swapping in cleaned segment %s for segment(s) %s in log %s", cleaned, group, log_obj)
            log_obj.replace_segments([cleaned], group)
        except BaseException:
            _delete_cleaned(cleaned)
            raise

    def _raise_swap_failure(self) -> None:
        """Fail the clean as soon as a group it cleaned could not be flushed or swapped in."""
        pending = self._pending_swap
        if pending is not None and pending.done():
            pending.result()

    def _swap_pending(self) -> None:
        """Wait until every group cleaned so far is swapped in; raise the first failure."""
        pending, self._pending_swap = self._pending_swap, None
        if pending is not None:
            pending.result()

    def _end_swaps(self) -> None:
        """The end of a clean's copy pass. After a failure, the groups cleaned before it still go in, as they would
        have in Kafka; a failure here is logged (the clean's own error is the one raised)."""
        try:
            if self._pending_swap is not None:
                try:
                    self._swap_pending()
                except Exception as e:  # secondary to the clean's own error, which is the one raised
                    log.warning("Could not swap in the last cleaned segment after a failed clean: %s", e)
        finally:
            if self._flush_pool is not None:
                self._flush_pool.shutdown(wait=True)
                self._flush_pool = None

    def clean_into(self, tp, log_obj, source: LogSegment, dest: LogSegment | None, retain_legacy_deletes: bool, txn,
                   active_producers, upper_bound: int, stats: CleanerStats, now: int) -> None:  # fmt: skip
        """Filter one source segment into ``dest`` (cleanInto).

        Kafka filters one read buffer of whole batches at a time and appends what each buffer keeps; the
        buffer boundaries decide where the cleaned segment's index entries go. Here several buffers are
        filtered in one vectorised pass, and what each buffer kept is still appended on its own.
        """
        runs = self._runs
        i = runs.index_of(source)
        if i is None:  # outside a copy pass: a pass of its own
            if runs.active:
                raise RuntimeError(f"segment {source} is not in the copy pass under way")
            with self._copy_pass(log_obj, [source], upper_bound, now, active_producers):
                return self.clean_into(tp, log_obj, source, dest, retain_legacy_deletes, txn, active_producers,
                                       upper_bound, stats, now)  # fmt: skip
        size = runs.size(i)
        if size == 0:
            return
        state = {"buffer": self.io_buffer_size}
        max_buffer = max(log_obj.config.max_message_bytes, self.max_io_buffer_size)
        self._clean_runs(tp, runs, i, state, max_buffer, source, dest, txn, active_producers, upper_bound,
                         retain_legacy_deletes, log_obj.config.delete_retention_ms, now, stats)  # fmt: skip

    def _copy_pass(self, log_obj, segments: list[LogSegment], upper_bound: int, now: int,
                   active_producers: dict | None = None) -> _PlainRuns:  # fmt: skip
        """The read-ahead context of a copy pass over ``segments``: its workers filter and write out runs of plain
        batches (_emit_plain) for clean_into. The producers' last records are read once for the pass: the clean
        changes none, and a producer's newer record only makes an empty batch kept here needless."""
        if active_producers is None:
            active_producers = log_obj.last_records_of_active_producers()
        emit = functools.partial(self._emit_plain, active_producers=active_producers, upper_bound=upper_bound,
                                 retention_ms=log_obj.config.delete_retention_ms, now=now)  # fmt: skip
        walk = functools.partial(self._walk_decide, now=now)
        return self._runs.over(segments, [0] * len(segments), FILTER_RUN_BYTES, self.io_buffer_size, walk, emit)

    def _clean_runs(self, tp, runs, i, state, max_buffer, source, dest, txn, active_producers, upper_bound,
                    retain_legacy_deletes, retention_ms, now, stats) -> None:  # fmt: skip
        view, size = runs.view(i)[0], runs.size(i)
        position = 0
        while position < size:
            self._check_done(tp)
            if self.fast:
                plain = runs.scan(i, position, state["buffer"])
                if plain is not None and plain.batches:
                    self._filter_plain(plain, dest, txn, stats)
                    position = plain.end
                    continue
            batches, chunks, position = self._read_chunks(view, position, size, state, max_buffer, source)
            result = self._filter(batches, txn, active_producers, upper_bound, retain_legacy_deletes,
                                  retention_ms, now, stats)  # fmt: skip
            stats.messages_read += result.messages_read
            stats.bytes_read += result.bytes_read
            self._append_chunks(dest, result.entries, chunks, stats)

    def _emit_plain(self, plain: _PlainRun, active_producers, upper_bound: int, retention_ms: int,
                    now: int) -> _EmittedRun:  # fmt: skip
        """What a run of plain batches keeps, written out (the fast twin of _filter), on a read-ahead worker.

        Retention was decided by the walk from the map pass's marks (_walk_decide); the map is asked only about the
        records they do not cover. The kept batches of the whole run are written by one kernel call, their CRCs
        filled in. Reads the map and the marks, which the copy pass no longer changes.
        """
        hdr, nb, records = plain.hdr, plain.batches, plain.records
        lasts = plain.last_offsets()
        retain_empty = lasts + 1 == upper_bound
        pids = hdr[kernels.H_PID, :nb]
        if active_producers and pids.max() >= 0:
            for pid in np.unique(pids[pids >= 0]).tolist():
                last = active_producers.get(pid)
                if last is not None and last[0] is not None:
                    retain_empty |= (pids == pid) & (lasts == last[0])
        n = int(hdr[kernels.H_COUNT, :nb].sum())
        verdict = records.verdict
        lookup = np.flatnonzero(verdict == kernels.V_LOOKUP)
        if lookup.size:
            with self._map_lock:  # a get counts its lookups and probes in the map
                found = self.offset_map.get_records(plain.arena, records.key_pos[lookup], records.key_len[lookup])
            verdict[lookup] = np.where(records.offsets[lookup] >= found, kernels.V_KEEP, kernels.V_DROP)
        keep = verdict == kernels.V_KEEP
        bytes_read = int(hdr[kernels.H_SIZE, :nb].sum())
        out = self._runs.output(bytes_read + 20 * n + 61 * nb)
        crc_at = np.empty(nb, np.int64)
        chunk_out = np.empty((5, plain.chunks), np.int64)
        _, ncrc = kernels.emit_run(
            plain.arena, hdr, records.first, records.tail_start, records.rec_end, records.offsets, records.timestamps,
            records.val_len, keep, retain_empty, now + retention_ms, plain.chunk_first[: plain.chunks + 1], out,
            crc_at, chunk_out,
        )  # fmt: skip
        data = out.data
        for at in crc_at[:ncrc].tolist():
            end = at + 12 + _INT32.unpack_from(data, at + 8)[0]
            _INT32.pack_into(data, at + 17, crc32c(data[at + 21 : end]))
        return _EmittedRun(out, chunk_out, n, bytes_read, records.invalid)

    def _walk_decide(self, run: _PlainRun, now: int) -> _Records | None:
        """The copy pass's walk of a run of plain batches (_cleaner_kernels.walk_decide): the records that may stay,
        with their verdicts, into the run's scratch arrays; None on a malformed record (the reference path raises)."""
        hdr, nb = run.hdr, run.batches
        n = int(hdr[kernels.H_COUNT, :nb].sum())
        _, tail_start, rec_end, offsets, timestamps, key_pos, key_len, val_len = run.scratch.record_arrays(n)
        verdict = run.scratch.verdict_array(n)
        first = np.empty(nb + 1, np.int64)
        marks = self._marks if self._marks is not None else _NO_MARKS
        code, _, _, c, invalid = kernels.walk_decide(
            run.arena, hdr, nb, marks, self._marks_base, self.offset_map.latest_offset, now, first, tail_start,
            rec_end, offsets, timestamps, key_pos, key_len, val_len, verdict,
        )  # fmt: skip
        if code != kernels.OK:
            return None
        return _Records(run.arena, None, first, None, tail_start[:c], rec_end[:c], offsets[:c], timestamps[:c],
                        key_pos[:c], key_len[:c], val_len[:c], verdict[:c], int(invalid))  # fmt: skip

    def _filter_plain(self, plain: _PlainRun, dest, txn, stats: CleanerStats) -> None:
        """The copy pass over a run of plain batches: the fast twin of _read_chunks, _filter and _append_chunks.

        The run was filtered and written out by _emit_plain; each read buffer's share is appended on its own, as
        Kafka does.
        """
        hdr = plain.hdr
        for c in range(plain.chunks):
            self.throttler.maybe_throttle(int(plain.chunk_limit[c] - hdr[kernels.H_POS, plain.chunk_first[c]]))
        txn.consume_aborted_up_to(int(plain.last_offsets().max()))  # on_batch_read for a non-transactional batch
        emitted: _EmittedRun = plain.prepared
        stats.invalid_messages_read += emitted.invalid
        stats.messages_read += emitted.records
        stats.bytes_read += emitted.bytes_read
        ends, max_offsets, max_timestamps, shallow_offsets, written = emitted.chunk_out[:, : plain.chunks].tolist()
        size = ends[-1] if ends else 0
        stats.messages_written += sum(written)
        stats.bytes_written += size
        if dest is not None and size:
            # one write for the run; each read buffer's share is still its own append to the index (Kafka's
            # LogSegment.append per buffer), and small writes cost the file system twice as much per byte
            parts = list(zip(ends, max_offsets, max_timestamps, shallow_offsets, strict=True))
            position = dest.log.size
            dest.append_in_parts(emitted.out.data[:size], parts)
            # the group's flush waits for the disk once the group is cleaned; what is written meanwhile is
            # already on its way (the flush thread asks the kernel, in order, after the flushes before it)
            self._flusher().submit(dest.log.start_writeback, position, position + size)
            self.throttler.maybe_throttle(size)
        self._runs.done(plain)

    def _read_chunks(self, view, position: int, size: int, state: dict, max_buffer: int, source):
        """Whole read buffers of batches from ``position``, about FILTER_RUN_BYTES in all: (batches, the
        index of each buffer's first batch, the position after them)."""
        batches: list = []
        chunks: list[int] = []
        start = position
        while position < size and position - start < FILTER_RUN_BYTES:
            limit = min(position + state["buffer"], size)
            chunk = list(iter_batches(view, position, limit))
            self.throttler.maybe_throttle(limit - position)
            if not chunk:
                state["buffer"] = self._grown_buffer(view, position, size, state["buffer"], max_buffer, source)
                continue
            chunks.append(len(batches))
            batches.extend(chunk)
            position = chunk[-1].position + chunk[-1].size_in_bytes
        return batches, chunks, position

    def _append_chunks(self, dest: LogSegment | None, entries: list, chunks: list[int], stats: CleanerStats) -> None:
        """Append what each read buffer kept as one write, with its largest offset and timestamp (LogSegment.append)."""
        bounds = [*chunks[1:], 1 << 62]
        k = 0
        for upper in bounds:
            parts, max_offset, max_ts, shallow = [], -1, NO_TIMESTAMP, -1
            while k < len(entries) and entries[k][0] < upper:
                _, data, ts, shallow_offset, last, count = entries[k]
                parts.append(data)
                if ts > max_ts:
                    max_ts, shallow = ts, shallow_offset
                max_offset = max(max_offset, last)
                stats.messages_written += count
                k += 1
            if not parts:
                continue
            data = parts[0] if len(parts) == 1 else b"".join(parts)
            stats.bytes_written += len(data)
            if dest is not None:
                dest.append(max_offset, max_ts, shallow, data)
                self.throttler.maybe_throttle(len(data))

    @staticmethod
    def _grown_buffer(view, position: int, size: int, buffer_size: int, max_buffer: int, source) -> int:
        """No whole batch fits the read buffer: double it toward the limit, or toward the next batch's own
        size once the limit is reached (growBuffersOrFail); a batch running past the segment is corrupt."""
        if buffer_size < max_buffer:
            return min(buffer_size * 2, max_buffer)
        head = bytes(view[position : position + 12])
        next_size = 12 + int.from_bytes(head[8:12], "big", signed=True) if len(head) == 12 else None
        where = dict(position=position, path=str(source.log.path))
        if next_size is None or next_size <= 12:
            raise CorruptRecordError(f"Invalid batch size {next_size} in log segment {source.log.path}", **where)
        if next_size > size - position:
            raise CorruptRecordError(
                f"Log segment may be corrupt, batch size {next_size} > {size - position} bytes left in segment", **where
            )
        return min(buffer_size * 2, max(next_size, max_buffer))

    def _filter(self, batches, txn, active_producers, upper_bound, retain_legacy_deletes, retention_ms, now, stats):
        """MemoryRecords.filterTo with the cleaner's RecordFilter over one buffer of batches."""
        result = _FilterResult()
        offset_map = self.offset_map
        fates: list[tuple] = []  # (batch, fate, discard records, empty marker)
        for index, batch in enumerate(batches):
            result.bytes_read += batch.size_in_bytes
            can_discard = txn.on_control_batch_read(batch) if batch.is_control else txn.on_batch_read(batch)
            if batch.is_control:
                horizon = batch.delete_horizon_ms
                discard_records = can_discard and horizon is not None and horizon <= now
            else:
                discard_records = can_discard
            last_of_producer = batch.has_producer_id and _is_last_of_producer(batch, active_producers)
            if last_of_producer or batch.next_offset == upper_bound:
                fate = RETAIN_EMPTY
            elif discard_records:
                fate = DELETE
            else:
                fate = DELETE_EMPTY
            if fate != DELETE:
                fates.append((batch, fate, discard_records, can_discard and batch.is_control, index))
        v2 = [f for f in fates if isinstance(f[0], RecordBatch)]
        keep = None
        if v2:
            records = _decode([f[0] for f in v2])
            keep = self._keep_mask(records, v2, offset_map, now, stats)
            result.messages_read += len(records.offsets)
            plans = self._rebuild_plans(records, keep, v2, retention_ms, now)
        j = 0
        for batch, fate, discard_records, _, index in fates:
            result.current = index
            if isinstance(batch, LegacyBatch):
                self._filter_legacy(batch, fate, discard_records, offset_map, retain_legacy_deletes, stats, result)
                continue
            self._emit_v2(batch, fate, plans[j], result)
            j += 1
        return result

    def _keep_mask(self, records: _Records, v2, offset_map, now: int, stats: CleanerStats) -> np.ndarray:
        """Which records stay (the cleaner's shouldRetainRecord), for every record at once."""
        nb = len(v2)
        discard = np.fromiter((f[2] for f in v2), np.bool_, nb)[records.batch_of]
        control = np.fromiter((f[0].is_control for f in v2), np.bool_, nb)[records.batch_of]
        horizons = [f[0].delete_horizon_ms for f in v2]
        retain_deletes = np.fromiter((h is None or now < h for h in horizons), np.bool_, nb)[records.batch_of]
        past = records.offsets > offset_map.latest_offset
        has_key = records.key_len >= 0
        found = offset_map.get_records(records.arena, records.key_pos, records.key_len)
        keep_data = past | (has_key & (records.offsets >= found) & ((records.val_len >= 0) | retain_deletes))
        normal = ~discard & ~control
        stats.invalid_messages_read += int(np.count_nonzero(normal & ~past & ~has_key))
        return ~discard & (control | keep_data)

    def _rebuild_plans(self, records: _Records, keep: np.ndarray, v2, retention_ms: int, now: int) -> list:
        """Per v2 batch: ('copy', n), ('empty',), ('drop',) or ('rebuild', section, n, base_ts, max_ts, horizon)."""
        nb = len(v2)
        kept = np.bincount(records.batch_of[keep], minlength=nb)
        tombstones = np.bincount(records.batch_of[keep & (records.val_len < 0)], minlength=nb) > 0
        totals = np.diff(records.first)
        plans: list = [None] * nb
        rebuild: list[int] = []
        horizons: list[int | None] = []
        for i, (batch, fate, _, empty_marker, _) in enumerate(v2):
            k = int(kept[i])
            if k == 0:
                plans[i] = ("empty",) if fate == RETAIN_EMPTY else ("drop",)
                continue
            current = batch.delete_horizon_ms
            need_horizon = (bool(tombstones[i]) or empty_marker) and current is None
            if k == totals[i] and not need_horizon:
                plans[i] = ("copy", k)
                continue
            rebuild.append(i)
            horizons.append(now + retention_ms if need_horizon else current)
        if rebuild:
            self._reframe(records, keep, v2, rebuild, horizons, plans)
        return plans

    def _reframe(self, records: _Records, keep, v2, rebuild: list[int], horizons: list, plans: list) -> None:
        """Re-encode the kept records of every batch to rebuild, in one kernel call."""
        nb = len(v2)
        selected_batch = np.zeros(nb, np.bool_)
        selected_batch[rebuild] = True
        sel = np.flatnonzero(keep & selected_batch[records.batch_of])
        sel_batch = records.batch_of[sel]
        _, first_idx = np.unique(sel_batch, return_index=True)  # rebuild is sorted: one run per batch
        ts = records.timestamps[sel]
        base_ts = np.empty(nb, np.int64)
        base_offsets = np.fromiter((f[0].base_offset for f in v2), np.int64, nb)
        for j, i in enumerate(rebuild):
            base_ts[i] = horizons[j] if horizons[j] is not None else ts[first_idx[j]]
        ts_delta = ts - base_ts[sel_batch]
        off_delta = records.offsets[sel] - base_offsets[sel_batch]
        sizes = kernels.reframed_sizes(sel, records.tail_start, records.rec_end, ts_delta, off_delta)
        out = np.empty(int(sizes.sum()), np.uint8)
        kernels.reframe_records(records.arena, sel, records.tail_start, records.rec_end, ts_delta, off_delta, out)
        bounds = np.zeros(len(sel) + 1, np.int64)
        np.cumsum(sizes, out=bounds[1:])
        ends_idx = np.append(first_idx[1:], len(sel))
        max_ts = np.maximum.reduceat(ts, first_idx)
        data = out.data
        for j, i in enumerate(rebuild):
            lo, hi = int(first_idx[j]), int(ends_idx[j])
            section = data[bounds[lo] : bounds[hi]]
            plans[i] = ("rebuild", section, hi - lo, int(base_ts[i]), int(max(max_ts[j], NO_TIMESTAMP)), horizons[j])

    def _emit_v2(self, batch: RecordBatch, fate: str, plan: tuple, result: _FilterResult) -> None:
        kind = plan[0]
        if kind == "copy":
            data = batch.source_buffer[batch.position : batch.position + batch.size_in_bytes]
            result.retained(data, batch.max_timestamp, batch.last_offset, batch.last_offset, plan[1])
        elif kind == "empty":
            data = assemble_batch(
                b"",
                record_count=0,
                last_offset_delta=batch.last_offset_delta,
                base_offset=batch.base_offset,
                base_timestamp=NO_TIMESTAMP,
                max_timestamp=batch.max_timestamp,
                timestamp_type=batch.timestamp_type_id,
                producer_id=batch.producer_id,
                producer_epoch=batch.producer_epoch,
                base_sequence=batch.base_sequence,
                is_transactional=batch.is_transactional,
                is_control=batch.is_control,
                partition_leader_epoch=batch.partition_leader_epoch,
            )
            result.retained(data, batch.max_timestamp, batch.last_offset, batch.last_offset, 0)
        elif kind == "rebuild":
            _, section, count, base_ts, max_ts, horizon = plan
            append_time = batch.timestamp_type_id == TimestampType.LOG_APPEND_TIME
            max_ts = batch.max_timestamp if append_time else max_ts
            data = assemble_batch(
                section,
                record_count=count,
                last_offset_delta=batch.last_offset_delta,
                base_offset=batch.base_offset,
                base_timestamp=base_ts,
                max_timestamp=max_ts,
                compression_type=batch.compression_type,
                timestamp_type=batch.timestamp_type_id,
                producer_id=batch.producer_id,
                producer_epoch=batch.producer_epoch,
                base_sequence=batch.base_sequence,
                is_transactional=batch.is_transactional,
                is_control=batch.is_control,
                has_delete_horizon=horizon is not None,
                partition_leader_epoch=batch.partition_leader_epoch,
            )
            result.retained(data, max_ts, batch.last_offset, batch.last_offset, count)

    def _filter_legacy(self, batch, fate, discard_records, offset_map, retain_deletes, stats, result) -> None:
        """A v0/v1 wrapper: copied byte for byte when every message stays, else rebuilt in its own magic and codec."""
        kept = []
        total = 0
        for record in batch:
            total += 1
            if discard_records:
                continue
            if record.offset > offset_map.latest_offset:
                kept.append(record)
            elif record.key is None:
                stats.invalid_messages_read += 1
            elif record.offset >= offset_map.get(record.key) and (record.value is not None or retain_deletes):
                kept.append(record)
        result.messages_read += total
        if not kept:
            if fate == RETAIN_EMPTY:
                raise KafkaStorageError(
                    "Empty batches are only supported for magic v2 and above", offset=batch.base_offset
                )
            return
        if len(kept) < total:
            # buildRetainedRecordsInto: Kafka's builder in the set's magic, codec (default level) and timestamp type,
            # from the first kept offset. Only a compressed wrapper keeps some of its messages, so one wrapper comes
            # back; as in Kafka's RecordsInfo, its (last) offset and timestamp (max or append time) describe it.
            append_time = batch.timestamp_type_id == TimestampType.LOG_APPEND_TIME
            data = build_legacy(
                batch.magic,
                [(r.offset, r.timestamp, r.key, r.value) for r in kept],
                compression_type=batch.compression_type,
                timestamp_type=batch.timestamp_type_id,
                log_append_time=batch.max_timestamp if append_time else NO_TIMESTAMP,
            )
            wrapper = LegacyBatch(data)
            result.retained(data, wrapper.max_timestamp, wrapper.offset, wrapper.offset, len(kept))
            return
        data = batch.source_buffer[batch.position : batch.position + batch.size_in_bytes]
        result.retained(data, batch.max_timestamp, batch.last_offset, batch.last_offset, total)


def _delete_cleaned(cleaned: LogSegment) -> None:
    try:
        cleaned.delete_if_exists()
    except OSError as e:
        log.warning("Failed to delete the cleaned segment %s: %s", cleaned, e)


def _is_last_of_producer(batch, active_producers: dict) -> bool:
    """The batch holds an active producer's last sequence, or is its last marker (kept for fencing)."""
    last = active_producers.get(batch.producer_id)
    if last is None:
        return False
    last_data_offset, epoch = last
    if last_data_offset is not None:
        return batch.last_offset == last_data_offset
    return batch.is_control and batch.producer_epoch == epoch


def check_not_aborted(aborted: Callable[[object], bool]) -> Callable[[object], None]:
    """A ``check_done`` hook raising LogCleaningAbortedError once ``aborted(tp)`` says so."""

    def check(tp) -> None:
        if aborted(tp):
            raise LogCleaningAbortedError(f"Cleaning of {tp} was aborted")

    return check
