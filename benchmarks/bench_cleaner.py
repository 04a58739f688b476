"""Log compaction: cleaning throughput against a plain copy of the same bytes, and the cleaner's memory.

The issue: "``make bench``: cleaning throughput (MB/s read and written) on a 1 GiB compacted log with 1M keys,
with peak memory reported. Goal: the dedupe map stays within its configured budget, and the clean runs at no
less than half the rate of a plain copy of the same bytes."

The log (cleanup.policy=compact, segment.bytes 128 MiB, so about 8 full segments and a small active one):
uncompressed v2 batches of 100-500 records (uniform), built column-wise with ``kafkalog.record.build_batch``
from numpy/Arrow buffers and appended with ``Log.append_as_follower`` (batches carry their own offsets, so
record ``i`` is at offset ``i``). Keys are 16 bytes (``user-`` and 11 digits), drawn uniformly from 1M
distinct keys with a seeded generator, so a key appears about 4.6 times and the clean keeps about one record
in five, rebuilding nearly every batch. Values are 100-300 bytes: the record's offset (8 bytes, big-endian)
then a slice of a 1 MiB pool of word text, so every value is unique and can be regenerated for the check.
Two smaller compressed logs (lz4, zstd) are cleaned the same way. The log is built once per run in
$KAFKALOG_BENCH_DIR or the system temp dir, closed (fsynced), and removed at the end.

The clean: ``Cleaner(SkimpyOffsetMap(128 MiB, 0.9), clock)`` with Kafka's defaults (log.cleaner.dedupe.buffer.size
128 MiB for one cleaner thread, io buffer 512 KiB / 2, max io buffer message.max.bytes + 12, no throttling) cleans
the whole dirty range [0, active segment base) in one ``Cleaner.clean``: map building, then every segment
copied (filtered) into a ``.cleaned`` segment that is fsynced and swapped in. Each clean runs in a fresh child
process (``python -m benchmarks.bench_cleaner --clean-child SPEC``) on a fresh working copy of the log: the
non-active ``.log`` files are hard links to the built log (the cleaner only reads them, then unlinks its names;
their pages are in the page cache), the other files are copied. The child first cleans a tiny log so the numba
kernels are loaded, then opens the copy, measures its RSS, resets its peak (``/proc/self/clear_refs`` = 5), runs
the clean, and reports ``CleanerStats`` (wall and map-phase seconds), the map's geometry and the peak RSS: VmHWM
(which counts the mapped segment pages too) and RssAnon / RssFile sampled every 10 ms by a thread. (Not the child's
``ru_maxrss``: a child started with vfork/posix_spawn inherits its parent's high-water RSS, here the benchmark's.)

Baselines, same run, page cache warm: the same non-active segment files copied with ``shutil.copyfile``
(sendfile) and with a Python ``read(1 MiB)`` + ``write`` loop into a new directory on the same file system,
no fsync (the copies are deleted untimed right after, so nothing is written back). The goal compares the clean's
read rate (``bytes_read / wall_seconds``; the map pass reads the same bytes once more) with copyfile's rate,
medians of 5 cleans and 7 copies, interleaved, and the best run of each; the goal needs both ratios. (On this
VM, memory the guest has not touched lately is slow to back: copyfile, which fills 1 GiB of new page cache, then
slows far more than the clean, whose output is a fifth of that; the median ratio rises, the best-run ratio does
not.) The same ratio by CPU time (user + system of the whole child process for a clean, its read-ahead and flush
workers included; of the copying thread for a copy) is reported beside it.

Memory: the map's table (``memory_bytes``) against the budget, its utilization, the child's RSS before the
clean and its peak during it. A second clean with a budget too small for all keys (8 MiB: 314,572 entries)
shows a partial clean: the map fills inside the first segment, the clean stops there and stays in budget.

Correctness (the benchmark fails when wrong): after every clean the log's files are decoded with
``batches_to_arrow`` (CRCs checked); the offsets left must be exactly, for the cleaned range [0, E), the last
occurrence of each key there, and every offset from E on; every key and value must equal the generated one;
every key's latest record in the log must be the last one written for it; no .cleaned/.swap/.deleted file may
be left; and CleanerStats must count the records read and kept. One more clean runs under cProfile.
"""

from __future__ import annotations

import contextlib
import cProfile
import gc
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from . import common

if TYPE_CHECKING:
    from rich.console import Console

REPO = Path(__file__).resolve().parents[1]
MIB = 1 << 20
GIB = 1 << 30
KEY_PREFIX = b"user-"
KEY_BYTES = 16  # the prefix and 11 digits
VALUE_BYTES = (100, 300)  # inclusive range
BATCH_RECORDS = (100, 500)  # inclusive range
PREFIX_BYTES = 8  # each value starts with its record's offset, big-endian
POOL_BYTES = 1 << 20
BATCHES_PER_CHUNK = 200  # batches drawn and encoded per numpy pass while building
DEDUPE_BUFFER = 128 * MIB  # log.cleaner.dedupe.buffer.size default, one cleaner thread
LOAD_FACTOR = 0.9  # log.cleaner.io.buffer.load.factor default
IO_BUFFER = 512 * 1024 // 2  # log.cleaner.io.buffer.size / threads / 2, as LogCleaner does
MAX_IO_BUFFER = 1_048_588 + 12  # message.max.bytes + 12
ENTRY_BYTES = 24  # an offset-map entry: MD5 digest and offset
COPY_CHUNK = MIB
RATE_GOAL = 0.5  # clean MB/s read >= this x shutil.copyfile MB/s of the same bytes
LOG_DIR_NAME = "bench-0"
SAMPLE_S = 0.01
LEFTOVER_SUFFIXES = (".cleaned", ".swap", ".deleted")


@dataclass(frozen=True)
class Params:
    log_bytes: int = GIB
    keys: int = 1_000_000
    segment_bytes: int = 128 * MIB
    budget: int = DEDUPE_BUFFER
    repeats: int = 5  # timed cleans of the main log, each in a fresh process on a fresh copy
    copy_repeats: int = 7
    small_budget: int = 8 * MIB  # the partial clean: too small for every key
    codecs: tuple[str, ...] = ("lz4", "zstd")
    codec_log_bytes: int = 256 * MIB
    codec_keys: int = 250_000
    codec_segment_bytes: int = 32 * MIB
    codec_repeats: int = 3
    seed: int = 20240601


FULL = Params()
QUICK = Params(
    log_bytes=16 * MIB,
    keys=16_384,
    segment_bytes=2 * MIB,
    repeats=1,
    copy_repeats=1,
    small_budget=128 * 1024,
    codec_log_bytes=4 * MIB,
    codec_keys=4_096,
    codec_segment_bytes=512 * 1024,
    codec_repeats=1,
)


# ----- the records ---------------------------------------------------------------------------------


def key_table(keys: int) -> np.ndarray:
    """(keys, 16) uint8: key k is b"user-" and k in 11 decimal digits."""
    ids = np.arange(keys, dtype=np.int64)
    table = np.empty((keys, KEY_BYTES), np.uint8)
    table[:, : len(KEY_PREFIX)] = np.frombuffer(KEY_PREFIX, np.uint8)
    width = KEY_BYTES - len(KEY_PREFIX)
    table[:, len(KEY_PREFIX) :] = (ids[:, None] // 10 ** np.arange(width - 1, -1, -1, dtype=np.int64)) % 10 + 48
    return table


def word_pool(rng: np.random.Generator) -> np.ndarray:
    """POOL_BYTES of text: words of 2-9 lowercase letters from a 2,048-word vocabulary, space-separated."""
    lengths = rng.integers(2, 10, 2048)
    letters = rng.integers(97, 123, int(lengths.sum()), dtype=np.uint8).tobytes()
    bounds = np.concatenate([[0], np.cumsum(lengths)])
    vocabulary = [letters[bounds[i] : bounds[i + 1]] for i in range(len(lengths))]
    picks = rng.integers(0, len(vocabulary), POOL_BYTES // 4)
    text = b" ".join(vocabulary[i] for i in picks)
    assert len(text) >= POOL_BYTES
    return np.frombuffer(text[:POOL_BYTES], np.uint8)


def value_data(offsets: np.ndarray, lens: np.ndarray, starts: np.ndarray, pool: np.ndarray):
    """(bounds, data) of the values of these records: offset (8 bytes, big-endian), then pool[start:...]."""
    n = len(offsets)
    lengths = lens.astype(np.int64)
    bounds = np.zeros(n + 1, np.int64)
    np.cumsum(lengths, out=bounds[1:])
    total = int(bounds[-1])
    src = np.repeat((starts.astype(np.int64) - PREFIX_BYTES - bounds[:-1]).astype(np.int32), lengths)
    src += np.arange(total, dtype=np.int32)
    data = pool[src]
    data[bounds[:-1, None] + np.arange(PREFIX_BYTES)] = offsets.astype(">i8").view(np.uint8).reshape(n, PREFIX_BYTES)
    return bounds, data


class Workload:
    """The records of one log, drawn chunk by chunk with a seeded generator: record i (at offset i) has key
    ``ids[i]`` and a value of ``lens[i]`` bytes made from its offset and ``pool[starts[i]:]``."""

    def __init__(self, keys: int, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.keys = keys
        self.keytab = key_table(keys)
        self.pool = word_pool(self.rng)
        self._chunks: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self.drawn = 0
        self.ids = self.lens = self.starts = np.zeros(0, np.int64)
        self.records = 0

    def draw(self) -> tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The next chunk: (first offset, batch record counts, key ids, value lengths, pool starts)."""
        counts = self.rng.integers(BATCH_RECORDS[0], BATCH_RECORDS[1] + 1, BATCHES_PER_CHUNK)
        n = int(counts.sum())
        ids = self.rng.integers(0, self.keys, n, dtype=np.int32)
        lens = self.rng.integers(VALUE_BYTES[0], VALUE_BYTES[1] + 1, n).astype(np.int16)
        starts = self.rng.integers(PREFIX_BYTES, POOL_BYTES - VALUE_BYTES[1], n).astype(np.int32)
        first = self.drawn
        self._chunks.append((ids, lens, starts))
        self.drawn += n
        return first, counts, ids, lens, starts

    def finish(self, records: int) -> None:
        """Keep the first ``records`` records drawn (the log ends inside the last chunk)."""
        ids, lens, starts = (np.concatenate(cols) for cols in zip(*self._chunks, strict=True))
        self.ids, self.lens, self.starts = ids[:records], lens[:records], starts[:records]
        self.records = records
        self._chunks = []

    def key_array(self, ids: np.ndarray):
        import pyarrow as pa

        n = len(ids)
        bounds = np.arange(n + 1, dtype=np.int64) * KEY_BYTES
        data = self.keytab[ids].reshape(-1)
        return pa.LargeBinaryArray.from_buffers(pa.large_binary(), n, [None, pa.py_buffer(bounds), pa.py_buffer(data)])

    def value_array(self, offsets: np.ndarray, lens: np.ndarray, starts: np.ndarray):
        import pyarrow as pa

        bounds, data = value_data(offsets, lens, starts, self.pool)
        return pa.LargeBinaryArray.from_buffers(
            pa.large_binary(), len(offsets), [None, pa.py_buffer(bounds), pa.py_buffer(data)]
        )

    def last_occurrences(self, end: int) -> np.ndarray:
        """The offset of the last record of each key among offsets [0, end), ascending."""
        latest = self.latest_offsets(end)
        return np.sort(latest[latest >= 0])

    def latest_offsets(self, end: int) -> np.ndarray:
        """Per key id: the offset of its last record among offsets [0, end), -1 when it has none."""
        latest = np.full(self.keys, -1, np.int64)
        np.maximum.at(latest, self.ids[:end], np.arange(end, dtype=np.int64))
        return latest


def log_config(segment_bytes: int) -> dict[str, str]:
    return {"cleanup.policy": "compact", "segment.bytes": str(segment_bytes)}


def build_log(directory: Path, wl: Workload, target_bytes: int, codec: str, segment_bytes: int) -> dict[str, Any]:
    """Append batches of the workload until the log holds ``target_bytes``; close it (fsynced)."""
    from kafkalog.record import build_batch
    from kafkalog.storage.log import Log

    t0 = time.perf_counter()
    log = Log.open(directory, log_config(segment_bytes))
    append = log.append_as_follower
    base_ts = time.time_ns() // 1_000_000 - 86_400_000
    size = batches = records = 0
    try:
        while size < target_bytes:
            first, counts, ids, lens, starts = wl.draw()
            offsets = np.arange(first, first + len(ids), dtype=np.int64)
            keys = wl.key_array(ids)
            values = wl.value_array(offsets, lens, starts)
            timestamps = base_ts + offsets
            pos = 0
            for c in counts.tolist():
                batch = build_batch(
                    keys.slice(pos, c),
                    values.slice(pos, c),
                    timestamps[pos : pos + c],
                    base_offset=first + pos,
                    compression=codec,
                )
                append(batch)
                size += len(batch)
                batches += 1
                pos += c
                if size >= target_bytes:
                    break
            records = first + pos
        segments = [(s.base_offset, s.size) for s in log.segments]
        leo = log.log_end_offset
    finally:
        log.close()
    wl.finish(records)
    if leo != records:
        raise AssertionError(f"built log ends at {leo}, expected {records}")
    active_base = segments[-1][0]
    return {
        "codec": codec,
        "target_bytes": target_bytes,
        "bytes": size,
        "segment_bytes_config": segment_bytes,
        "segments": len(segments),
        "segment_bases": [b for b, _ in segments],
        "cleanable_bytes": sum(s for _, s in segments[:-1]),
        "active_segment_bytes": segments[-1][1],
        "batches": batches,
        "records": records,
        "active_base": active_base,
        "active_records": records - active_base,
        "keys": wl.keys,
        "distinct_keys_written": int(np.count_nonzero(np.bincount(wl.ids, minlength=wl.keys))),
        "distinct_keys_cleanable_range": int(np.count_nonzero(np.bincount(wl.ids[:active_base], minlength=wl.keys))),
        "build_s": time.perf_counter() - t0,
    }


# ----- the clean, in a child process -----------------------------------------------------------------


def _proc_status() -> dict[str, int]:
    """VmRSS, VmHWM, RssAnon and RssFile of this process in bytes (empty off Linux)."""
    out: dict[str, int] = {}
    with contextlib.suppress(OSError), open("/proc/self/status") as f:
        for line in f:
            name, _, rest = line.partition(":")
            if name in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
                out[name] = int(rest.split()[0]) * 1024
    return out


def _reset_peak_rss() -> bool:
    """Reset VmHWM to the current RSS (Linux clear_refs 5); False when not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


class RssSampler(threading.Thread):
    """The largest VmRSS, RssAnon and RssFile seen, sampled every SAMPLE_S while running."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak: dict[str, int] = {}
        self.samples = 0
        self._stop_event = threading.Event()

    def run(self) -> None:
        while True:
            for name, value in _proc_status().items():
                self.peak[name] = max(self.peak.get(name, 0), value)
            self.samples += 1
            if self._stop_event.wait(SAMPLE_S):
                return

    def finish(self) -> dict[str, int]:
        self._stop_event.set()
        self.join()
        for name, value in _proc_status().items():  # one last sample
            self.peak[name] = max(self.peak.get(name, 0), value)
        return self.peak


def _open_log(directory: Path, segment_bytes: int, leo: int):
    from kafkalog.storage.log import Log

    return Log.open(directory, log_config(segment_bytes), recovery_point=leo, had_clean_shutdown=True)


def _warm_up(scratch: Path, codec: str) -> None:
    """Build and clean a tiny log: loads every numba kernel the real clean uses (from numba's cache)."""
    from kafkalog.cleaner.cleaner import Cleaner
    from kafkalog.cleaner.offset_map import SkimpyOffsetMap
    from kafkalog.cleaner.policy import LogToClean
    from kafkalog.clock import SYSTEM_TIME

    directory = scratch / LOG_DIR_NAME
    try:
        info = build_log(directory, Workload(64, 1), 768 * 1024, codec, 256 * 1024)
        log = _open_log(directory, 256 * 1024, info["records"])
        try:
            Cleaner(SkimpyOffsetMap(MIB, LOAD_FACTOR), SYSTEM_TIME).clean(
                LogToClean(None, log, 0, log.active_segment.base_offset)
            )
        finally:
            log.close()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _whole_dirty_range(log):
    """(cleanable offsets, LogToClean) for a clean of ``log``'s whole dirty range, as the cleaner would pick."""
    from kafkalog.cleaner.policy import LogToClean, cleanable_offsets
    from kafkalog.clock import SYSTEM_TIME

    offsets = cleanable_offsets(log, None, SYSTEM_TIME.milliseconds())
    return offsets, LogToClean(None, log, offsets.first_dirty_offset, offsets.first_uncleanable_dirty_offset)


def _primer_clean(cleaner, directory: Path, spec: dict[str, Any]) -> float:
    """Clean ``directory`` with ``cleaner`` (untimed for the figures): its map and buffers are then in use,
    as a long-running cleaner thread's are. Returns the primer's own wall time."""
    log = _open_log(directory, spec["segment_bytes"], spec["leo"])
    try:
        _, to_clean = _whole_dirty_range(log)
        t0 = time.perf_counter()
        cleaner.clean(to_clean)
        return time.perf_counter() - t0
    finally:
        log.close()


def _process_cpu() -> float:
    """User + system CPU seconds of this whole process: the clean runs on its thread and on read-ahead and flush
    workers (the RSS sampler's share is negligible)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def clean_child(spec: dict[str, Any]) -> dict[str, Any]:
    """One clean of the log in spec["dir"], in this (fresh) process: stats, map geometry, RSS, profile."""
    from kafkalog.cleaner.cleaner import Cleaner
    from kafkalog.cleaner.offset_map import SkimpyOffsetMap
    from kafkalog.clock import SYSTEM_TIME

    _warm_up(Path(spec["warm_dir"]), spec["codec"])
    log = _open_log(Path(spec["dir"]), spec["segment_bytes"], spec["leo"])
    try:
        offsets, to_clean = _whole_dirty_range(log)
        offset_map = SkimpyOffsetMap(spec["budget"], LOAD_FACTOR)
        cleaner = Cleaner(offset_map, SYSTEM_TIME, io_buffer_size=IO_BUFFER, max_io_buffer_size=MAX_IO_BUFFER)
        primer_s = None
        if spec.get("primer_dir"):  # steady state: this cleaner has cleaned (another copy of) the log before
            primer_s = _primer_clean(cleaner, Path(spec["primer_dir"]), spec)
        profiler = cProfile.Profile() if spec["profile"] else None
        gc.collect()
        before = _proc_status()
        peak_reset = _reset_peak_rss()
        sampler = RssSampler()
        sampler.start()
        t0, cpu0, thread0 = time.perf_counter(), _process_cpu(), time.thread_time()
        if profiler is not None:
            profiler.enable()
        end_offset, stats = cleaner.clean(to_clean)
        if profiler is not None:
            profiler.disable()
        elapsed, cpu = time.perf_counter() - t0, _process_cpu() - cpu0
        thread_cpu = time.thread_time() - thread0
        sampled = sampler.finish()
        after = _proc_status()
    finally:
        log.close()
    result: dict[str, Any] = {
        "primer_s": primer_s,
        "first_dirty_offset": offsets.first_dirty_offset,
        "uncleanable_offset": offsets.first_uncleanable_dirty_offset,
        "end_offset": end_offset,
        "elapsed_s": elapsed,
        "cpu_s": cpu,
        "cleaning_thread_cpu_s": thread_cpu,
        "stats": asdict(stats),
        "map": {
            "budget_bytes": spec["budget"],
            "memory_bytes": int(offset_map.memory_bytes),
            "slots": int(offset_map.slots),
            "max_entries": int(offset_map.max_entries),
            "entries": int(offset_map.size),
            "utilization": float(offset_map.utilization),
            "collision_rate": float(offset_map.collision_rate),
            "within_budget": int(offset_map.memory_bytes) <= spec["budget"],
        },
        "rss": {
            "before_bytes": before.get("VmRSS"),
            "anon_before_bytes": before.get("RssAnon"),
            "peak_reset": peak_reset,
            "peak_hwm_bytes": after.get("VmHWM") if peak_reset else None,
            "peak_sampled_bytes": sampled.get("VmRSS"),
            "peak_anon_sampled_bytes": sampled.get("RssAnon"),
            "peak_file_sampled_bytes": sampled.get("RssFile"),
            "samples": sampler.samples,
        },
    }
    if profiler is not None:
        total, rows = common.profile_rows(profiler)
        for row in rows:
            row["cumtime_share"] = row["cumtime_s"] / total if total else 0.0
        own = rows[:15]
        cumulative = sorted((r for r in rows if r["function"].startswith("kafkalog/")), key=lambda r: -r["cumtime_s"])
        result["profile"] = {"total_s": total, "by_own_time": own, "kafkalog_by_cumulative_time": cumulative[:15]}
    return result


def run_child(spec: dict[str, Any]) -> dict[str, Any]:
    gc.collect()
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_cleaner", "--clean-child", json.dumps(spec)],
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise AssertionError(f"clean child exited {proc.returncode}:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ----- scratch copies, baselines ---------------------------------------------------------------------


class Scratch(common.Scratch):
    """The run's temp directory, handing out a fresh directory per copy or clean."""

    def __init__(self) -> None:
        super().__init__("cleaner")
        self._n = 0

    def fresh(self, name: str) -> Path:
        self._n += 1
        return self.root / f"{name}{self._n}"


def working_copy(source: Path, dest: Path, active_base: int) -> bool:
    """A copy of the closed log ``source`` to clean: non-active .log files hard-linked (the cleaner only
    reads them and unlinks its names), everything else copied. Returns whether hard links were used."""
    dest.mkdir(parents=True)
    linked = True
    for path in sorted(source.iterdir()):
        target = dest / path.name
        if path.suffix == ".log" and int(path.stem) < active_base and linked:
            try:
                os.link(path, target)
                continue
            except OSError:
                linked = False
        shutil.copyfile(path, target)
    return linked


def read_files(paths: list[Path]) -> int:
    total = 0
    buf = bytearray(COPY_CHUNK)
    for path in paths:
        with open(path, "rb", buffering=0) as f:
            while n := f.readinto(buf):
                total += n
    return total


def copy_with_copyfile(paths: list[Path], dest: Path) -> None:
    for path in paths:
        shutil.copyfile(path, dest / path.name)


def copy_with_read_write(paths: list[Path], dest: Path) -> None:
    for path in paths:
        with open(path, "rb", buffering=0) as src, open(dest / path.name, "wb", buffering=0) as dst:
            while chunk := src.read(COPY_CHUNK):
                dst.write(chunk)


COPIERS = {"copyfile": copy_with_copyfile, "read_write_loop": copy_with_read_write}


def timed_copy(scratch: Scratch, paths: list[Path], how: str, nbytes: int) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this thread, system time included) of one copy of ``paths``."""
    dest = scratch.fresh(f"copy-{how}-")
    dest.mkdir()
    try:
        gc.collect()
        t0, cpu0 = time.perf_counter(), time.thread_time()
        COPIERS[how](paths, dest)
        elapsed, cpu = time.perf_counter() - t0, time.thread_time() - cpu0
        copied = sum(p.stat().st_size for p in dest.iterdir())
        if copied != nbytes:
            raise AssertionError(f"{how}: copied {copied} bytes, expected {nbytes}")
    finally:
        shutil.rmtree(dest, ignore_errors=True)  # unlinked before write-back: the page cache stays clean
    return elapsed, cpu


# ----- correctness -----------------------------------------------------------------------------------


def _binary_parts(arr) -> tuple[np.ndarray, np.ndarray]:
    """(lengths, data) of an Arrow binary array (any offset), nulls not allowed."""
    if arr.null_count:
        raise AssertionError(f"{arr.null_count} null keys or values after the clean")
    bufs = arr.buffers()
    width = 8 if str(arr.type).startswith("large") else 4
    bounds = np.frombuffer(bufs[1], np.int64 if width == 8 else np.int32, count=len(arr) + 1, offset=arr.offset * width)
    data = np.frombuffer(bufs[2], np.uint8)[int(bounds[0]) : int(bounds[-1])] if len(arr) else np.zeros(0, np.uint8)
    return np.diff(bounds), data


def verify_clean(directory: Path, wl: Workload, info: dict[str, Any], child: dict[str, Any]) -> dict[str, Any]:
    """Check the cleaned log against the workload; raise AssertionError when anything is wrong."""
    import pyarrow as pa

    from kafkalog.record import batches_to_arrow, iter_file_batches

    t0 = time.perf_counter()
    leftovers = sorted(p.name for p in directory.iterdir() if p.suffix in LEFTOVER_SUFFIXES)
    if leftovers:
        raise AssertionError(f"files left behind by the clean: {leftovers[:10]}")
    leo, end = info["records"], child["end_offset"]
    stats = child["stats"]
    # The segments the clean rewrote: those holding offsets below the map's end.
    bases = info["segment_bases"]
    cleaned_upper = next((b for b in bases if b >= end), leo)
    logs = sorted(directory.glob("*.log"), key=lambda p: int(p.stem))
    table = pa.concat_tables([batches_to_arrow(iter_file_batches(p)) for p in logs])
    offsets = table.column("offset").to_numpy()
    last = wl.last_occurrences(end)
    expected = np.concatenate([last, np.arange(end, leo, dtype=np.int64)])
    if not np.array_equal(offsets, expected):
        missing = np.setdiff1d(expected, offsets)[:5].tolist()
        extra = np.setdiff1d(offsets, expected)[:5].tolist()
        raise AssertionError(
            f"offsets after the clean: {len(offsets):,} records, expected {len(expected):,}; "
            f"missing e.g. {missing}, unexpected e.g. {extra}"
        )
    kept_in_cleaned = int(np.count_nonzero(expected < cleaned_upper))
    if stats["messages_read"] != cleaned_upper or stats["messages_written"] != kept_in_cleaned:
        raise AssertionError(
            f"CleanerStats: read {stats['messages_read']:,} / kept {stats['messages_written']:,} records, "
            f"expected {cleaned_upper:,} / {kept_in_cleaned:,}"
        )
    ids = wl.ids[offsets]
    key_lengths, key_data = _binary_parts(table.column("key").combine_chunks())
    if not (np.all(key_lengths == KEY_BYTES) and np.array_equal(key_data, wl.keytab[ids].reshape(-1))):
        raise AssertionError("a key read back differs from the key written at its offset")
    values = table.column("value")
    step = 1 << 16
    for lo in range(0, len(offsets), step):
        part = offsets[lo : lo + step]
        lengths, data = _binary_parts(values.slice(lo, len(part)).combine_chunks())
        bounds, want = value_data(part, wl.lens[part], wl.starts[part], wl.pool)
        if not (np.array_equal(lengths, np.diff(bounds)) and np.array_equal(data, want)):
            raise AssertionError(f"a value read back differs from the value written (offsets {part[0]}..{part[-1]})")
    latest_in_log = np.full(wl.keys, -1, np.int64)
    np.maximum.at(latest_in_log, ids, offsets)
    latest_written = wl.latest_offsets(leo)
    wrong = np.flatnonzero(latest_in_log != latest_written)
    if wrong.size:
        raise AssertionError(f"{wrong.size:,} keys whose latest record is not the last written, e.g. key {wrong[0]}")
    return {
        "ok": True,
        "records_in_log": len(offsets),
        "cleaned_range": [0, end],
        "distinct_keys_cleaned_range": len(last),
        "records_from_end_offset": leo - end,
        "records_kept_by_clean": kept_in_cleaned,
        "keys_checked": int(np.count_nonzero(latest_written >= 0)),
        "values_checked": len(offsets),
        "check_s": time.perf_counter() - t0,
    }


# ----- one log: build, baselines, cleans ---------------------------------------------------------------


def clean_once(scratch: Scratch, pristine: Path, info: dict[str, Any], wl: Workload, *, budget: int, profile: bool,
               codec: str, steady: bool = False) -> dict[str, Any]:  # fmt: skip
    """A fresh working copy of the log, cleaned in a child process, then checked. ``steady``: the child's
    cleaner first cleans another copy (its first clean), and the second clean is the one measured."""
    work = scratch.fresh("work-") / LOG_DIR_NAME
    linked = working_copy(pristine, work, info["active_base"])
    primer = scratch.fresh("primer-") / LOG_DIR_NAME if steady else None
    if primer is not None:
        working_copy(pristine, primer, info["active_base"])
    try:
        spec = {
            "dir": str(work),
            "leo": info["records"],
            "segment_bytes": info["segment_bytes_config"],
            "budget": budget,
            "profile": profile,
            "codec": codec,
            "warm_dir": str(scratch.fresh("warm-")),
            "primer_dir": str(primer) if primer is not None else None,
        }
        child = run_child(spec)
        child["correctness"] = verify_clean(work, wl, info, child)
        child["hard_linked_sources"] = linked
    finally:
        shutil.rmtree(work.parent, ignore_errors=True)
        if primer is not None:
            shutil.rmtree(primer.parent, ignore_errors=True)
    return child


def _run_figures(child: dict[str, Any]) -> dict[str, Any]:
    s = child["stats"]
    wall, map_s = s["wall_seconds"], s["map_wall_seconds"]
    return {
        "wall_s": wall,
        "map_s": map_s,
        "copy_phase_s": wall - map_s,
        "mb_per_s_read": s["bytes_read"] / wall / 1e6,
        "mb_per_s_written": s["bytes_written"] / wall / 1e6,
    }


def summarize_cleans(children: list[dict[str, Any]], nbytes: int) -> dict[str, Any]:
    """Medians over the runs of one configuration (every run did the same work: checked equal)."""
    first = children[0]["stats"]
    for c in children[1:]:
        s = c["stats"]
        for key in ("bytes_read", "bytes_written", "messages_read", "messages_written", "map_bytes_read"):
            if s[key] != first[key]:
                raise AssertionError(f"cleans of the same log differ in {key}: {s[key]} vs {first[key]}")
    runs = [_run_figures(c) for c in children]
    wall = statistics.median(r["wall_s"] for r in runs)
    best = min(r["wall_s"] for r in runs)
    map_s = statistics.median(r["map_s"] for r in runs)
    copy_s = statistics.median(r["copy_phase_s"] for r in runs)
    cpu = statistics.median(c["cpu_s"] for c in children)
    rss = [c["rss"] for c in children]
    maps = [c["map"] for c in children]
    peak_hwm = [r["peak_hwm_bytes"] for r in rss if r["peak_hwm_bytes"] is not None]
    return {
        "runs": len(children),
        "bytes_read": first["bytes_read"],
        "map_bytes_read": first["map_bytes_read"],
        "bytes_written": first["bytes_written"],
        "messages_read": first["messages_read"],
        "messages_written": first["messages_written"],
        "size_reduction": 1 - first["bytes_written"] / first["bytes_read"] if first["bytes_read"] else 0.0,
        "end_offset": children[0]["end_offset"],
        "median_wall_s": wall,
        "best_wall_s": best,
        "mb_per_s_read_best": first["bytes_read"] / best / 1e6,
        "median_map_s": map_s,
        "median_copy_phase_s": copy_s,
        "map_share": map_s / wall,
        "mb_per_s_read": first["bytes_read"] / wall / 1e6,
        "mb_per_s_written": first["bytes_written"] / wall / 1e6,
        "mb_per_s_read_incl_map_pass": (first["bytes_read"] + first["map_bytes_read"]) / wall / 1e6,
        "median_cpu_s": cpu,
        "mb_per_cpu_s_read": first["bytes_read"] / cpu / 1e6,
        "cpu_times_s": [c["cpu_s"] for c in children],
        "median_cleaning_thread_cpu_s": statistics.median(c["cleaning_thread_cpu_s"] for c in children),
        "map_phase_mb_per_s": first["map_bytes_read"] / map_s / 1e6 if map_s else None,
        "copy_phase_mb_per_s": first["bytes_read"] / copy_s / 1e6 if copy_s else None,
        "cleanable_bytes": nbytes,
        "per_run": runs,
        "wall_times_s": [r["wall_s"] for r in runs],
        "memory": {
            "budget_bytes": maps[0]["budget_bytes"],
            "map_memory_bytes": maps[0]["memory_bytes"],
            "within_budget": all(m["within_budget"] for m in maps),
            "slots": maps[0]["slots"],
            "max_entries": maps[0]["max_entries"],
            "entries": maps[0]["entries"],
            "utilization": maps[0]["utilization"],
            "collision_rate": maps[0]["collision_rate"],
            "rss_before_mb": statistics.median(r["before_bytes"] for r in rss) / 1e6,
            "peak_rss_mb": max(peak_hwm) / 1e6 if peak_hwm else None,
            "rss_growth_mb": max(r["peak_hwm_bytes"] - r["before_bytes"] for r in rss) / 1e6 if peak_hwm else None,
            "peak_rss_sampled_mb": max(r["peak_sampled_bytes"] for r in rss) / 1e6,
            "peak_anon_sampled_mb": max(r["peak_anon_sampled_bytes"] for r in rss) / 1e6,
            "anon_growth_sampled_mb": max(r["peak_anon_sampled_bytes"] - r["anon_before_bytes"] for r in rss) / 1e6,
            "peak_file_sampled_mb": max(r["peak_file_sampled_bytes"] for r in rss) / 1e6,
        },
        "correctness": children[0]["correctness"],
        "hard_linked_sources": all(c["hard_linked_sources"] for c in children),
    }


def copy_figures(runs: list[tuple[float, float]], nbytes: int) -> dict[str, Any]:
    times, cpu = [t for t, _ in runs], [c for _, c in runs]
    median, median_cpu = statistics.median(times), statistics.median(cpu)
    return {
        "mb_per_s": nbytes / median / 1e6,
        "median_s": median,
        "best_s": min(times),
        "times_s": times,
        "mb_per_cpu_s": nbytes / median_cpu / 1e6,
        "median_cpu_s": median_cpu,
        "cpu_s": cpu,
    }


def bench_log(scratch: Scratch, p: Params, codec: str, console: Console, *, main: bool) -> dict[str, Any]:
    log_bytes = p.log_bytes if main else p.codec_log_bytes
    keys = p.keys if main else p.codec_keys
    segment_bytes = p.segment_bytes if main else p.codec_segment_bytes
    repeats = p.repeats if main else p.codec_repeats
    label = f"{codec} {_size_label(log_bytes)}"
    console.print(f"[dim]cleaner: building a {label} log ({keys:,} keys, {_size_label(segment_bytes)} segments)...[/]")
    pristine = scratch.fresh(f"log-{codec}-") / LOG_DIR_NAME
    wl = Workload(keys, p.seed)
    info = build_log(pristine, wl, log_bytes, codec, segment_bytes)
    info["build_mb_per_s"] = info["bytes"] / info["build_s"] / 1e6
    sources = [pristine / f"{base:020d}.log" for base in info["segment_bases"][:-1]]
    nbytes = info["cleanable_bytes"]
    read_files(sources)  # page cache warm for the copies and the cleans alike
    copy_times: dict[str, list[tuple[float, float]]] = {how: [] for how in COPIERS}
    children = []
    for r in range(max(repeats, p.copy_repeats)):
        if r < p.copy_repeats:
            for how in COPIERS:
                copy_times[how].append(timed_copy(scratch, sources, how, nbytes))
        if r < repeats:
            console.print(f"[dim]cleaner: {label}: clean {r + 1} of {repeats} (child process)...[/]")
            children.append(clean_once(scratch, pristine, info, wl, budget=p.budget, profile=False, codec=codec))
    clean = summarize_cleans(children, nbytes)
    copies = {how: copy_figures(t, nbytes) for how, t in copy_times.items()}
    out: dict[str, Any] = {
        "log": info,
        "clean": clean,
        "copy": copies,
        "clean_vs_copyfile": clean["mb_per_s_read"] / copies["copyfile"]["mb_per_s"],
        "clean_vs_copyfile_best": copies["copyfile"]["best_s"] / clean["best_wall_s"],
        "clean_vs_read_write_loop": clean["mb_per_s_read"] / copies["read_write_loop"]["mb_per_s"],
        "clean_vs_copyfile_cpu": clean["mb_per_cpu_s_read"] / copies["copyfile"]["mb_per_cpu_s"],
        "clean_vs_read_write_loop_cpu": clean["mb_per_cpu_s_read"] / copies["read_write_loop"]["mb_per_cpu_s"],
    }
    if main:
        console.print(f"[dim]cleaner: {label}: partial clean, budget {_size_label(p.small_budget)}...[/]")
        partial = clean_once(scratch, pristine, info, wl, budget=p.small_budget, profile=False, codec=codec)
        out["partial"] = {
            **summarize_cleans([partial], nbytes),
            "covered_offsets": partial["end_offset"],
            "dirty_range_covered": partial["end_offset"] / info["active_base"],
            "segments_cleaned": sum(1 for b in info["segment_bases"] if b < partial["end_offset"]),
        }
        console.print(f"[dim]cleaner: {label}: steady state, {repeats} second cleans by the same cleaner...[/]")
        steady = [
            clean_once(scratch, pristine, info, wl, budget=p.budget, profile=False, codec=codec, steady=True)
            for _ in range(repeats)
        ]
        summary = summarize_cleans(steady, nbytes)
        out["steady_state"] = {
            "runs": summary["runs"],
            "median_wall_s": summary["median_wall_s"],
            "median_map_s": summary["median_map_s"],
            "mb_per_s_read": summary["mb_per_s_read"],
            "wall_times_s": summary["wall_times_s"],
            "first_clean_in_process_s": [c["primer_s"] for c in steady],
            "clean_vs_copyfile": summary["mb_per_s_read"] / copies["copyfile"]["mb_per_s"],
            "best_wall_s": summary["best_wall_s"],
            "clean_vs_copyfile_best": copies["copyfile"]["best_s"] / summary["best_wall_s"],
            "correctness_ok": all(c["correctness"]["ok"] for c in steady),
        }
        console.print(f"[dim]cleaner: {label}: clean under cProfile...[/]")
        profiled = clean_once(scratch, pristine, info, wl, budget=p.budget, profile=True, codec=codec)
        out["profile"] = {
            "wall_s_under_profile": profiled["stats"]["wall_seconds"],
            "map_s_under_profile": profiled["stats"]["map_wall_seconds"],
            **profiled["profile"],
        }
    shutil.rmtree(pristine.parent, ignore_errors=True)
    return out


# ----- report --------------------------------------------------------------------------------------


def _size_label(nbytes: int) -> str:
    unit, name = (GIB, "GiB") if nbytes >= GIB else (MIB, "MiB") if nbytes >= MIB else (1024, "KiB")
    value = nbytes / unit
    return f"{value:.0f} {name}" if value.is_integer() else f"{value:.2f} {name}"


_ok = common.ok_mark


def machine_info(scratch: Scratch) -> dict[str, Any]:
    from importlib import metadata

    return common.platform_info() | {
        "scratch_dir": str(scratch.root.parent),
        "numpy": np.__version__,
        "numba": metadata.version("numba"),
        "pyarrow": metadata.version("pyarrow"),
    }


def print_tables(result: dict[str, Any], console: Console) -> None:
    from rich.table import Table

    p = result["parameters"]
    table = Table(
        title="Log compaction: Cleaner.clean of the whole dirty range vs a plain copy of the same segment files",
        caption=f"medians ({p['repeats']} cleans of the main log, {p['codec_repeats']} of the others, "
        f"{p['copy_repeats']} copies); each clean in a fresh process on a fresh copy; page cache warm; "
        "MB/s read = CleanerStats.bytes_read / wall time; map s / copy s = map_wall_seconds / the rest; "
        "best: the ratio of the best clean to the best copy; CPU: the ratio by CPU time (user + system; the clean's "
        "whole process, its workers included); MB = 1e6 bytes",
    )
    for col in ("log", "segments", "records / keys", "kept", "clean read MB/s", "written MB/s", "map s / copy s",
                "copyfile MB/s", "read+write MB/s", "vs copyfile", "vs copyfile, best", "vs read+write",
                "vs copyfile, CPU"):  # fmt: skip
        table.add_column(col, justify="left" if col == "log" else "right")
    for name, r in result["logs"].items():
        info, c = r["log"], r["clean"]
        table.add_row(
            f"{name} {_size_label(info['target_bytes'])}",
            f"{info['segments'] - 1} + active",
            f"{info['records']:,} / {info['keys']:,}",
            f"{c['messages_written']:,}",
            f"{c['mb_per_s_read']:,.1f}",
            f"{c['mb_per_s_written']:,.1f}",
            f"{c['median_map_s']:.2f} / {c['median_copy_phase_s']:.2f}",
            f"{r['copy']['copyfile']['mb_per_s']:,.0f}",
            f"{r['copy']['read_write_loop']['mb_per_s']:,.0f}",
            f"{r['clean_vs_copyfile']:.3f}x",
            f"{r['clean_vs_copyfile_best']:.3f}x",
            f"{r['clean_vs_read_write_loop']:.3f}x",
            f"{r['clean_vs_copyfile_cpu']:.3f}x",
        )
    console.print(table)

    mem = Table(
        title="Cleaner memory: the dedupe map against its budget, and the clean's RSS (fresh child process)",
        caption="RSS before: after opening the log and building the (untouched) map; peak: VmHWM after resetting it "
        "just before the clean (includes mapped segment pages); anon: sampled RssAnon peak every 10 ms; MB = 1e6",
    )
    for col in ("clean", "budget", "map table", "in budget", "entries / max", "utilization", "RSS before",
                "peak RSS", "growth", "anon growth"):  # fmt: skip
        mem.add_column(col, justify="left" if col == "clean" else "right")
    rows = [(f"{name} (all keys)", r["clean"]) for name, r in result["logs"].items()]
    rows.append(("none, partial (small budget)", result["partial"]))
    for name, c in rows:
        m = c["memory"]
        mem.add_row(
            name,
            _size_label(m["budget_bytes"]),
            f"{m['map_memory_bytes'] / MIB:,.2f} MiB",
            _ok(m["within_budget"]),
            f"{m['entries']:,} / {m['max_entries']:,}",
            f"{m['utilization']:.3f}",
            f"{m['rss_before_mb']:,.0f} MB",
            f"{m['peak_rss_mb']:,.0f} MB" if m["peak_rss_mb"] is not None else "n/a",
            f"{m['rss_growth_mb']:,.0f} MB" if m["rss_growth_mb"] is not None else "n/a",
            f"{m['anon_growth_sampled_mb']:,.0f} MB",
        )
    console.print(mem)
    part = result["partial"]
    console.print(
        f"[dim]partial clean: the map filled at offset {part['covered_offsets']:,} "
        f"({part['dirty_range_covered']:.1%} of the dirty range), {part['segments_cleaned']} segment(s) cleaned, "
        f"{part['mb_per_s_read']:,.1f} MB/s read[/]"
    )
    steady = result["logs"]["none"].get("steady_state")
    if steady:
        console.print(
            f"[dim]steady state (the same cleaner's second clean in its process, map and buffers in use, as a "
            f"long-running cleaner thread's): median {steady['median_wall_s']:.2f} s, {steady['mb_per_s_read']:,.1f} "
            f"MB/s read, {steady['clean_vs_copyfile']:.3f}x copyfile (best runs: {steady['best_wall_s']:.2f} s, "
            f"{steady['clean_vs_copyfile_best']:.3f}x); that process's first clean took "
            f"{statistics.median(steady['first_clean_in_process_s']):.2f} s (median)[/]"
        )

    goals = common.goals_table()
    g = result["goals_measured"]
    goals.add_row(
        f"clean (MB/s read) >= {RATE_GOAL:g}x shutil.copyfile of the same bytes ({result['main_log']})",
        f"medians {g['clean_vs_copyfile']:.3f}x, best runs {g['clean_vs_copyfile_best']:.3f}x (by CPU time "
        f"{g['clean_vs_copyfile_cpu_time']:.3f}x)",
        _ok(result["goals_met"]["clean_vs_copyfile"]),
    )
    goals.add_row(
        "dedupe map within its configured budget (every clean)",
        f"{g['map_memory_max_share_of_budget']:.3f} of budget",
        _ok(result["goals_met"]["map_within_budget"]),
    )
    console.print(goals)

    prof = result["profile"]
    table = common.profile_table(
        f"cProfile: one clean of the {result['main_log']} log, top by own time",
        prof["by_own_time"],
        caption=f"total {prof['total_s']:.2f} s under cProfile (map phase {prof['map_s_under_profile']:.2f} s)",
    )
    table.add_section()
    for row in prof["kafkalog_by_cumulative_time"][:8]:
        table.add_row(
            f"[dim]{row['function']}[/]", f"{row['calls']:,}", f"{row['tottime_s']:.3f}", "", f"{row['cumtime_s']:.3f}"
        )
    console.print(table)


def run(*, quick: bool = False, results_dir: Path, console: Console | None = None) -> dict[str, Any]:
    """Run the cleaner benchmark, write ``results_dir/cleaner.json``, print the tables; return the result."""
    from rich.console import Console

    console = console or Console()
    p = QUICK if quick else FULL
    started = time.perf_counter()
    scratch = Scratch()
    try:
        logs = {"none": bench_log(scratch, p, "none", console, main=True)}
        for codec in p.codecs:
            logs[codec] = bench_log(scratch, p, codec, console, main=False)
        machine = machine_info(scratch)
    finally:
        scratch.cleanup()

    main = logs["none"]
    partial = main.pop("partial")
    profile = main.pop("profile")
    cleans = [r["clean"] for r in logs.values()] + [partial]
    measured = {
        "clean_vs_copyfile": main["clean_vs_copyfile"],
        "clean_vs_copyfile_best": main["clean_vs_copyfile_best"],
        "clean_vs_copyfile_cpu_time": main["clean_vs_copyfile_cpu"],
        "clean_vs_copyfile_steady_state": main.get("steady_state", {}).get("clean_vs_copyfile"),
        "map_memory_max_share_of_budget": max(
            c["memory"]["map_memory_bytes"] / c["memory"]["budget_bytes"] for c in cleans
        ),
    }
    goals_met = {
        # Both statistics: on a VM whose fresh pages are slow to back, copyfile (1 GiB of new page cache) slows down
        # far more than the clean (its output is a fifth of that), which lifts the median ratio; the best runs of
        # each are the least disturbed.
        "clean_vs_copyfile": min(measured["clean_vs_copyfile"], measured["clean_vs_copyfile_best"]) >= RATE_GOAL,
        "map_within_budget": all(c["memory"]["within_budget"] for c in cleans),
    }
    result = {
        "benchmark": "cleaner",
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "quick": quick,
        "machine": machine,
        "parameters": {
            **asdict(p),
            "key_bytes": KEY_BYTES,
            "value_bytes": list(VALUE_BYTES),
            "batch_records": list(BATCH_RECORDS),
            "load_factor": LOAD_FACTOR,
            "io_buffer_size": IO_BUFFER,
            "max_io_buffer_size": MAX_IO_BUFFER,
            "statistic": "medians over the runs, and the best run of each (the goal needs both ratios); clean times "
            "are CleanerStats.wall_seconds (map phase: map_wall_seconds) of Cleaner.clean in a fresh child process "
            "that first cleaned a tiny log (numba kernels loaded); copies timed with time.perf_counter in this "
            "process; CPU seconds: user + system of the whole child process for a clean (its read-ahead and flush "
            "workers included; also reported: the cleaning thread's own), time.thread_time of the copying thread",
            "workload": "keys uniform over `keys` distinct 16-byte keys (seeded numpy generator); values 100-300 "
            "bytes (offset, then word text); batches of 100-500 records via build_batch, appended with "
            "Log.append_as_follower; cleanup.policy=compact",
            "clean": "Cleaner(SkimpyOffsetMap(budget, 0.9), SYSTEM_TIME, io_buffer_size, max_io_buffer_size) on "
            "LogToClean(first dirty 0, uncleanable = active segment base, from cleanable_offsets); working copy "
            "with the non-active .log files hard-linked to the built log",
            "baselines": "copyfile: shutil.copyfile of each non-active .log file; read_write_loop: read(1 MiB) + "
            "write with unbuffered files; into a new dir on the same file system, no fsync, deleted untimed",
            "rss": "VmRSS before the clean; VmHWM after resetting it with /proc/self/clear_refs just before the "
            "clean (counts mapped file pages); RssAnon/RssFile/VmRSS sampled every 10 ms during the clean. Not "
            "ru_maxrss: a child started by vfork/posix_spawn inherits its parent's high-water RSS into it",
            "correctness": "every clean: offsets left == last occurrence of each key in [0, end offset) plus every "
            "offset from the end offset on; every key and value equal to the generated one; each key's latest "
            "record == the last written; CleanerStats records read / kept; no .cleaned/.swap/.deleted left",
            "mb": "1 MB = 1e6 bytes; sizes of logs, segments and budgets are binary (MiB, GiB)",
        },
        "main_log": f"none {_size_label(p.log_bytes)}",
        "logs": logs,
        "partial": partial,
        "goals": {"clean_vs_copyfile": RATE_GOAL, "map_within_budget": True},
        "goals_measured": measured,
        "goals_met": goals_met,
        "all_goals_met": all(goals_met.values()),
        "profile": profile,
        "elapsed_s": time.perf_counter() - started,
    }
    return common.finish(results_dir, "cleaner", result, console, print_tables, machine["scratch_dir"])


def _main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "--clean-child":
        print(json.dumps(clean_child(json.loads(argv[1]))))
        return 0
    print("usage: python -m benchmarks.bench_cleaner --clean-child SPEC_JSON", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
