"""The cleaner's fast path over runs of plain batches: scanning, walking and hashing them on worker threads.

A run is a stretch of whole batches of about ``MAP_RUN_BYTES`` (map pass) or ``FILTER_RUN_BYTES`` (copy pass)
bytes. ``PlainRuns`` maps the segments of a pass, scans batch headers on the cleaning thread, and has two read-ahead
workers walk (and hash, or decide) the next runs at a lower scheduling priority; ``decode`` and ``batch_runs`` serve
the per-batch reference path. The numba kernels (``_kernels``) release the GIL.
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import sys
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass

import numpy as np

from ..record import compression as codecs
from ..record.batch import RECORDS_OFFSET, RecordBatch
from ..record.scan import iter_batches, map_file
from ..storage.segment import LogSegment
from . import _kernels as kernels

log = logging.getLogger(__name__)

# The map is built, and segments filtered, over runs of about this many batch bytes: one kernel call each.
MAP_RUN_BYTES = 8 * 1024 * 1024
FILTER_RUN_BYTES = 8 * 1024 * 1024


@dataclass
class Records:
    """Every record of a run of v2 batches, as positions into ``arena`` (see _kernels.walk_records)."""

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


def decode(batches: list[RecordBatch]) -> Records:
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
        raise bad.invalid_record(f"Found invalid record count {bad.record_count} for the batch size")
    base_offset = np.fromiter((b.base_offset for b in batches), np.int64, nb)
    base_ts = np.fromiter((b.base_timestamp for b in batches), np.int64, nb)
    max_ts = np.fromiter((b.max_timestamp for b in batches), np.int64, nb)
    append = np.fromiter((bool(b.attributes & 0x08) for b in batches), np.bool_, nb)
    out = [np.empty(n, np.int64) for _ in range(8)]
    code, bi, ri = kernels.walk_records(arena, starts, ends, counts, base_offset, base_ts, max_ts, append, *out,
                                        False, 0, NO_DIGESTS)  # fmt: skip
    if code != kernels.OK:
        bad = batches[bi]
        raise bad.invalid_record(
            f"Found invalid record structure while cleaning (error {code}, record {ri} of {bad.record_count})"
        )
    first = np.zeros(nb + 1, np.int64)
    np.cumsum(counts, out=first[1:])
    batch_of = np.repeat(np.arange(nb, dtype=np.int64), counts)
    return Records(arena, batch_of, first, *out)


def batch_runs(view, start: int, end: int, max_run: int):
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


NO_MARKS = np.zeros(0, np.uint8)
NO_DIGESTS = np.zeros(0, np.uint8)  # walk_records without hashing


# Runs of plain batches read ahead of the one being put in the map or written, each walked (and prepared) by one of
# the read-ahead workers: the kernels release the GIL, so two runs are read on two cores while this thread works.
_AHEAD_RUNS = 6
_READ_AHEAD_WORKERS = 2
_FIRST_RUN_BYTES = 512 * 1024
_HELD_MAP_BYTES = 4 * 1024 * 1024 * 1024
"""At most this many bytes of segment maps are kept from a clean's map pass for its copy pass (see
PlainRuns.holding): mapping a file's cached pages again costs about a tenth of a second per GiB, and unmapping it a
third of that. The held pages are the page cache's, reclaimable as ever; their page tables take 2 MiB per GiB."""


@dataclass
class PlainRun:
    """A run of plain v2 batches (magic 2, uncompressed, neither transactional nor control) read by
    ``_kernels.scan_batches``: their headers, read buffers (copy pass) and walked records."""

    arena: np.ndarray
    hdr: np.ndarray  # int64[HEADER_COLUMNS, capacity]: columns H_* of batch b in hdr[:, b]
    batches: int
    chunks: int
    chunk_first: np.ndarray
    chunk_limit: np.ndarray
    end: int  # the position after the run
    records: Records | None = None
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
        """Eight int64 arrays of ``n`` records (Records' per-record fields)."""
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
                  scratch: _Scratch) -> PlainRun | None:  # fmt: skip
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
    return PlainRun(arena, scratch.hdr, nb, nc, scratch.chunk_first, scratch.chunk_limit, end, scratch=scratch)


def _walk_run(run: PlainRun, walk: Callable[[PlainRun], Records | None],
              prepare: Callable[[PlainRun], object] | None) -> PlainRun | None:  # fmt: skip
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


class PlainRuns:
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
             walk: Callable[[PlainRun], Records | None],
             prepare: Callable[[PlainRun], object] | None, *, hold: bool = False) -> PlainRuns:  # fmt: skip
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

    def __enter__(self) -> PlainRuns:
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

    def _headers(self, i: int, position: int, buffer_size: int, run_bytes: int | None = None) -> PlainRun | None:
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

    def done(self, run: PlainRun) -> None:
        """The pass is done with ``run``: its work arrays (and output buffer) go back to the pools."""
        if isinstance(run.prepared, EmittedRun):
            self._reuse(run.prepared.out)
        self._give_back(run.scratch)
        run.scratch = run.records = run.prepared = None

    def scan(self, i: int, position: int, buffer_size: int) -> PlainRun | None:
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


def walk_keys(run: PlainRun, hash_from: int | None = None) -> Records | None:
    """The map pass's walk of a run of plain batches into its scratch arrays: every record read in full, only the
    offsets and keys kept (_kernels.walk_records, keys only); None on a malformed record (the reference path
    raises). With ``hash_from``, the keys a put takes (keyed, at or after that offset) are hashed as the walk reads
    them, into the run's scratch digests: SkimpyOffsetMap.digest_records's, for put_digests."""
    hdr, nb = run.hdr, run.batches
    counts = hdr[kernels.H_COUNT, :nb]
    n = int(counts.sum())
    starts = hdr[kernels.H_POS, :nb] + RECORDS_OFFSET
    ends = hdr[kernels.H_POS, :nb] + hdr[kernels.H_SIZE, :nb]
    out = run.scratch.record_arrays(n)
    digests = NO_DIGESTS if hash_from is None else run.scratch.digest_array(n)
    append = (hdr[kernels.H_ATTR, :nb] & 0x08) != 0
    code, _, _ = kernels.walk_records(run.arena, starts, ends, counts, hdr[kernels.H_BASE, :nb],
                                      hdr[kernels.H_BASE_TS, :nb], hdr[kernels.H_MAX_TS, :nb], append, *out, True,
                                      hash_from or 0, digests)  # fmt: skip
    if code != kernels.OK:
        return None
    first = np.zeros(nb + 1, np.int64)
    np.cumsum(counts, out=first[1:])
    return Records(run.arena, None, first, None, None, None, out[3], None, out[5], out[6], None)


def hashed_keys(run: PlainRun) -> np.ndarray:
    """The digests :func:`walk_keys` made of a run's keys."""
    return run.scratch.digests[: 16 * len(run.records.offsets)]


@dataclass
class EmittedRun:
    """A run of plain batches filtered and written out by Cleaner._emit_plain, ready to append."""

    out: np.ndarray  # the kept batches back to back, CRCs filled in
    chunk_out: np.ndarray  # per read buffer (see _kernels.emit_run): output end, offsets, timestamp, count
    records: int  # records read
    bytes_read: int
    invalid: int  # records read without a key below the map's latest offset
