"""Log compaction of one partition log: Kafka's ``Cleaner`` (``LogCleaner.scala``).

A clean builds a key → latest-offset map over the dirty section [firstDirty, firstUncleanable), then
copies every segment below the map's end, group by group, into one ``.cleaned`` segment per group,
keeping for each key only its latest record, and swaps the result in (``Log.replace_segments``).
Transactions, markers, tombstones and producer state follow Kafka's rules (spec section 12).

Hot paths work on whole runs of batches: records are walked by one numba call per run (``_kernels``), keys are
hashed and looked up by one call, retention is decided with numpy masks (``record_filter``), and batches that keep
every record are copied byte for byte. Python runs once per batch, never once per record (legacy v0/v1 batches
aside).

Runs of plain batches (the usual case) take a fast path spread over threads (``pipeline.PlainRuns``): the cleaning
thread scans the batch headers, which fixes where each run ends, and does what must happen in order (the map's puts, the
appends to the cleaned segment); two read-ahead workers walk the next runs meanwhile, a few runs and one segment
ahead, hash their keys (map pass) or decide and write out what they keep (copy pass), at a lower scheduling
priority than the cleaning thread, which sets the pace. The numba kernels release the GIL. The copy pass reads the
segments through the maps the map pass made (their pages already mapped) and appends each run with one write. The
end of a cleaned group (index trimming, flush, swap) runs on a fourth thread while the next group is cleaned, in
order; that thread also starts the writeback of each run appended, so a flush has little left to wait for.
"""

from __future__ import annotations

import functools
import logging
import struct
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from ..clock import Time
from ..errors import CorruptRecordError, KafkaStorageError, LogCleaningAbortedError
from ..record.batch import RecordBatch
from ..record.checksums import crc32c
from ..record.scan import iter_batches
from ..record.types import NO_TIMESTAMP
from ..storage.segment import LogSegment
from . import _kernels as kernels
from . import pipeline
from .offset_map import SkimpyOffsetMap
from .pipeline import NO_MARKS, EmittedRun, PlainRun, PlainRuns, Records, batch_runs, decode, hashed_keys, walk_keys
from .policy import LogToClean, group_segments_by_size
from .record_filter import BatchFilter
from .stats import CleanerStats, Throttler
from .transactions import CleanedTransactionMetadata

log = logging.getLogger(__name__)

_INT32 = struct.Struct(">I")


class Cleaner(BatchFilter):
    """Cleans one log at a time with its own offset map (one per cleaner thread, as in Kafka).

    Invariants of a clean: only offsets below the dirty range's end (``first_uncleanable_offset``) are
    rewritten; a record is dropped only when the offset map holds a later offset for its key, or when it is a
    tombstone or aborted data past its delete horizon; batches keep their offsets, producer fields and order;
    control batches are dropped only once their transaction is no longer needed; the cleaned segments replace
    the originals through ``.cleaned`` and ``.swap`` files, so a crash at any point leaves either the old
    segments or the new ones, never a mix.
    """

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
        self._marks: np.ndarray | None = None  # the map pass's record marks (see PlainRuns), None when unusable
        self._marks_base = 0
        self._last_put = -1
        self._runs = PlainRuns()
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
        legacy_delete_horizon, upper_bound, end_offset = self._map_dirty_section(cleanable, stats)
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

    def _map_dirty_section(self, cleanable: LogToClean, stats: CleanerStats) -> tuple[int, int, int]:
        """The map pass of a clean or an estimate: (the legacy delete horizon, the upper bound, the end offset)."""
        log_obj = cleanable.log
        clean_part = log_obj.log_segments(0, cleanable.first_dirty_offset)
        legacy_delete_horizon = (
            clean_part[-1].last_modified_ms() - log_obj.config.delete_retention_ms if clean_part else 0
        )
        upper_bound = cleanable.first_uncleanable_offset
        self.build_offset_map(cleanable.topic_partition, log_obj, cleanable.first_dirty_offset, upper_bound, stats)
        return legacy_delete_horizon, upper_bound, self.offset_map.latest_offset + 1

    def estimate(self, cleanable: LogToClean, now: int) -> tuple[int, CleanerStats]:
        """A dry run of ``clean``: (the log's size once cleaned now, stats); nothing is written."""
        with self._runs.holding():
            return self._estimate(cleanable, now)

    def _estimate(self, cleanable: LogToClean, now: int) -> tuple[int, CleanerStats]:
        log_obj = cleanable.log
        stats = CleanerStats(start_ms=self.clock.milliseconds())
        legacy_delete_horizon, upper_bound, end_offset = self._map_dirty_section(cleanable, stats)
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
        walk = functools.partial(walk_keys, hash_from=start) if hashed else walk_keys
        prepare = hashed_keys if hashed else None
        starts = [segment.offset_index.lookup(start).position for segment in dirty]
        try:
            with self._runs.over(dirty, starts, pipeline.MAP_RUN_BYTES, 0, walk, prepare, hold=True) as runs:
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
            run = next(batch_runs(view, position, size, pipeline.MAP_RUN_BYTES), None)
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
        records = decode(v2)
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

    def _map_plain_run(self, tp, plain: PlainRun, position: int, start: int, txn, stats: CleanerStats) -> bool:
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
                   active_producers: dict | None = None) -> PlainRuns:  # fmt: skip
        """The read-ahead context of a copy pass over ``segments``: its workers filter and write out runs of plain
        batches (_emit_plain) for clean_into. The producers' last records are read once for the pass: the clean
        changes none, and a producer's newer record only makes an empty batch kept here needless."""
        if active_producers is None:
            active_producers = log_obj.last_records_of_active_producers()
        emit = functools.partial(self._emit_plain, active_producers=active_producers, upper_bound=upper_bound,
                                 retention_ms=log_obj.config.delete_retention_ms, now=now)  # fmt: skip
        walk = functools.partial(self._walk_decide, now=now)
        return self._runs.over(
            segments, [0] * len(segments), pipeline.FILTER_RUN_BYTES, self.io_buffer_size, walk, emit
        )

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

    def _emit_plain(self, plain: PlainRun, active_producers, upper_bound: int, retention_ms: int,
                    now: int) -> EmittedRun:  # fmt: skip
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
        return EmittedRun(out, chunk_out, n, bytes_read, records.invalid)

    def _walk_decide(self, run: PlainRun, now: int) -> Records | None:
        """The copy pass's walk of a run of plain batches (_kernels.walk_decide): the records that may stay,
        with their verdicts, into the run's scratch arrays; None on a malformed record (the reference path raises)."""
        hdr, nb = run.hdr, run.batches
        n = int(hdr[kernels.H_COUNT, :nb].sum())
        _, tail_start, rec_end, offsets, timestamps, key_pos, key_len, val_len = run.scratch.record_arrays(n)
        verdict = run.scratch.verdict_array(n)
        first = np.empty(nb + 1, np.int64)
        marks = self._marks if self._marks is not None else NO_MARKS
        code, _, _, c, invalid = kernels.walk_decide(
            run.arena, hdr, nb, marks, self._marks_base, self.offset_map.latest_offset, now, first, tail_start,
            rec_end, offsets, timestamps, key_pos, key_len, val_len, verdict,
        )  # fmt: skip
        if code != kernels.OK:
            return None
        return Records(run.arena, None, first, None, tail_start[:c], rec_end[:c], offsets[:c], timestamps[:c],
                        key_pos[:c], key_len[:c], val_len[:c], verdict[:c], int(invalid))  # fmt: skip

    def _filter_plain(self, plain: PlainRun, dest, txn, stats: CleanerStats) -> None:
        """The copy pass over a run of plain batches: the fast twin of _read_chunks, _filter and _append_chunks.

        The run was filtered and written out by _emit_plain; each read buffer's share is appended on its own, as
        Kafka does.
        """
        hdr = plain.hdr
        for c in range(plain.chunks):
            self.throttler.maybe_throttle(int(plain.chunk_limit[c] - hdr[kernels.H_POS, plain.chunk_first[c]]))
        txn.consume_aborted_up_to(int(plain.last_offsets().max()))  # on_batch_read for a non-transactional batch
        emitted: EmittedRun = plain.prepared
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
        """Whole read buffers of batches from ``position``, about pipeline.FILTER_RUN_BYTES in all: (batches, the
        index of each buffer's first batch, the position after them)."""
        batches: list = []
        chunks: list[int] = []
        start = position
        while position < size and position - start < pipeline.FILTER_RUN_BYTES:
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


def _delete_cleaned(cleaned: LogSegment) -> None:
    try:
        cleaned.delete_if_exists()
    except OSError as e:
        log.warning("Failed to delete the cleaned segment %s: %s", cleaned, e)


def check_not_aborted(aborted: Callable[[object], bool]) -> Callable[[object], None]:
    """A ``check_done`` hook raising LogCleaningAbortedError once ``aborted(tp)`` says so."""

    def check(tp) -> None:
        if aborted(tp):
            raise LogCleaningAbortedError(f"Cleaning of {tp} was aborted")

    return check
