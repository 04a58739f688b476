"""Storage layer: appends, lookups, sequential reads and recovery of a Log, each against the raw file operation.

Appends: pre-built uncompressed batches (1 record, 100 records, about 1 MiB) go through ``Log.append``
(the client path: base offset 0, validated, given offsets) and ``Log.append_as_follower`` (batches that
carry their own offsets), against a plain ``os.write`` loop of the same bytes into a file in the same
directory, in the same run. Neither side fsyncs while timing (``flush.messages`` is Long.MAX by default,
as in Kafka), so both measure writes into the page cache; each timed run starts on a fresh file and is
fsynced and deleted afterwards, untimed. The order of the three paths rotates between repeats.

Then one log of about 1 GiB (100-record batches, default segment and index settings): random-offset
lookups (``Log.read`` latency, p50/p99), a sequential ``Log.read`` pass against reading the segment files
in 1 MiB chunks, and recovery (reopen after an unclean shutdown with recovery point 0, so every segment is
re-validated and its indexes rebuilt) against CRC-32C over the same bytes read in 1 MiB chunks. Page cache
warm throughout: these are CPU costs, not disk costs.

Goals, from the issue: 1 MiB batches appended at >= 0.8 of the raw write rate; >= 100k appends/s of
single-record batches. The single-record client append path is also profiled (cProfile, top functions).
"""

from __future__ import annotations

import cProfile
import gc
import os
import random
import shutil
import statistics
import struct
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from . import common

MIB = 1 << 20
GB = 1e9  # MB/s and s/GB use decimal units; sizes of logs and batches are binary (MiB, GiB)
MAX_MESSAGE_BYTES = 1_048_588  # Kafka's default max.message.bytes: a "1 MiB" batch must fit
KEY_BYTES = 16
VALUE_BYTES = 100
APPEND_GOAL_1MIB_VS_RAW = 0.8
APPEND_GOAL_SINGLE_PER_S = 100_000
READ_CHUNK = MIB


@dataclass(frozen=True)
class Params:
    single_appends: int = 200_000  # 1-record batches per timed run
    hundred_appends: int = 10_000  # 100-record batches per timed run
    mib_appends: int = 256  # ~1 MiB batches per timed run
    repeats: int = 3
    log_bytes: int = 1 << 30  # the lookup / read / recovery log
    lookups: int = 20_000
    read_repeats: int = 3
    recovery_repeats: int = 2
    profile_appends: int = 50_000
    seed: int = 20240601


FULL = Params()
QUICK = Params(
    single_appends=20_000,
    hundred_appends=1_000,
    mib_appends=24,
    repeats=1,
    log_bytes=64 * MIB,
    lookups=2_000,
    read_repeats=1,
    recovery_repeats=1,
    profile_appends=5_000,
)


# ----- batches -------------------------------------------------------------------------------------


def make_batch(records: int, value_bytes: int, rng: random.Random) -> bytes:
    """One uncompressed v2 batch as a client sends it: base offset 0, no producer id, timestamps now."""
    from kafkalog.record import build_batch

    keys = [rng.randbytes(KEY_BYTES) for _ in range(records)]
    values = [rng.randbytes(value_bytes) for _ in range(records)]
    now = time.time_ns() // 1_000_000
    return build_batch(keys, values, [now + i for i in range(records)])


def make_mib_batch(rng: random.Random) -> bytes:
    """A batch of 1000 equal records, sized to just under 1 MiB (so also under max.message.bytes)."""
    records, value = 1000, 1000
    for _ in range(10):
        batch = make_batch(records, value, rng)
        slack = MIB - len(batch)
        if 0 <= slack < records:
            return batch
        value += slack // records  # floor: rounds a negative slack down, so the next try fits
    raise AssertionError(f"could not size a 1 MiB batch (last try {len(batch)} bytes)")


def with_base_offset(batch: bytes, base_offset: int) -> bytes:
    """The batch with another base offset (outside the CRC, so nothing else changes)."""
    out = bytearray(batch)
    struct.pack_into(">q", out, 0, base_offset)
    return bytes(out)


def record_count(batch: bytes) -> int:
    return struct.unpack_from(">i", batch, 57)[0]


# ----- scratch space -------------------------------------------------------------------------------


class Scratch(common.Scratch):
    """The run's temp directory, handing out a fresh partition directory per timed run."""

    def __init__(self) -> None:
        super().__init__("storage")
        self._n = 0

    def fresh(self, name: str) -> Path:
        self._n += 1
        return self.root / f"{name}{self._n}" / "bench-0"


def remove_log_dir(directory: Path) -> None:
    shutil.rmtree(directory.parent, ignore_errors=True)


# ----- timing --------------------------------------------------------------------------------------


timed = common.timed


def figures(times: list[float], batches: int, nbytes: int) -> dict[str, Any]:
    best = min(times)
    return {
        "batches_per_s": batches / best,
        "mb_per_s": nbytes / best / 1e6,
        "best_s": best,
        "median_s": statistics.median(times),
        "times_s": times,
    }


def percentile(sorted_values: list[float], p: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    k = max(0, min(len(sorted_values) - 1, round(p / 100 * len(sorted_values) + 0.5) - 1))
    return sorted_values[k]


# ----- appends -------------------------------------------------------------------------------------


def _open_log(directory: Path, config: dict | None = None):
    from kafkalog.storage.log import Log

    return Log.open(directory, config or {})


def run_client(scratch: Scratch, batch: bytes, n: int) -> float:
    directory = scratch.fresh("client")
    log = _open_log(directory)
    append = log.append
    try:

        def loop() -> None:
            for _ in range(n):
                append(batch)

        elapsed, _ = timed(loop)
        expected = n * record_count(batch)
        if log.log_end_offset != expected or log.size != n * len(batch):
            raise AssertionError(f"client append: log end {log.log_end_offset}, size {log.size}; expected {expected}")
    finally:
        log.close()
        remove_log_dir(directory)
    return elapsed


def run_follower(scratch: Scratch, batches: list[bytes]) -> float:
    directory = scratch.fresh("follower")
    log = _open_log(directory)
    append = log.append_as_follower
    try:

        def loop() -> None:
            for b in batches:
                append(b)

        elapsed, _ = timed(loop)
        expected = sum(map(record_count, batches))
        if log.log_end_offset != expected or log.size != sum(map(len, batches)):
            raise AssertionError(f"follower append: log end {log.log_end_offset}, expected {expected}")
    finally:
        log.close()
        remove_log_dir(directory)
    return elapsed


def run_raw(scratch: Scratch, batch: bytes, n: int) -> float:
    directory = scratch.fresh("raw")
    directory.mkdir(parents=True)
    path = directory / "00000000000000000000.log"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    write = os.write
    try:

        def loop() -> None:
            for _ in range(n):
                write(fd, batch)

        elapsed, _ = timed(loop)
        if os.fstat(fd).st_size != n * len(batch):
            raise AssertionError("raw write: short file")
        os.fsync(fd)  # as Log.close does for the log: untimed, and leaves the next run a clean page cache
    finally:
        os.close(fd)
        remove_log_dir(directory)
    return elapsed


def bench_append(scratch: Scratch, name: str, batch: bytes, n: int, p: Params, console: Console) -> dict[str, Any]:
    console.print(f"[dim]storage: append {name} ({len(batch):,} B x {n:,})...[/]")
    per_batch = record_count(batch)
    follower_batches = [with_base_offset(batch, i * per_batch) for i in range(n)]
    nbytes = n * len(batch)
    times: dict[str, list[float]] = {"client": [], "follower": [], "raw": []}
    runners = {
        "client": lambda: run_client(scratch, batch, n),
        "follower": lambda: run_follower(scratch, follower_batches),
        "raw": lambda: run_raw(scratch, batch, n),
    }
    order = list(runners)
    for r in range(p.repeats):
        for path in order[r % 3 :] + order[: r % 3]:
            times[path].append(runners[path]())
    figs = {path: figures(t, n, nbytes) for path, t in times.items()}
    return {
        "batch_bytes": len(batch),
        "records_per_batch": per_batch,
        "batches": n,
        "bytes": nbytes,
        **figs,
        "client_vs_raw": figs["client"]["mb_per_s"] / figs["raw"]["mb_per_s"],
        "follower_vs_raw": figs["follower"]["mb_per_s"] / figs["raw"]["mb_per_s"],
    }


def warm_up(scratch: Scratch, batches: list[bytes]) -> None:
    """Compile the numba kernels and touch every path once before anything is timed."""
    for batch in batches:
        run_client(scratch, batch, 3)
        run_follower(scratch, [with_base_offset(batch, i * record_count(batch)) for i in range(3)])


def profile_single(scratch: Scratch, batch: bytes, n: int) -> list[dict[str, Any]]:
    """cProfile of n single-record client appends: the top functions by own time."""
    directory = scratch.fresh("profile")
    log = _open_log(directory)
    profiler = cProfile.Profile()
    try:
        profiler.enable()
        for _ in range(n):
            log.append(batch)
        profiler.disable()
    finally:
        log.close()
        remove_log_dir(directory)
    _, rows = common.profile_rows(profiler)
    for row in rows:
        row["us_per_append"] = row["tottime_s"] / n * 1e6
    return rows[:12]


# ----- the big log: lookups, sequential reads, recovery --------------------------------------------


def build_big_log(directory: Path, template: bytes, target_bytes: int):
    """Fill a log to ``target_bytes`` with copies of ``template`` (follower appends, distinct offsets)."""
    log = _open_log(directory)
    buf = bytearray(template)
    per_batch = record_count(template)
    n = max(1, target_bytes // len(template))
    append = log.append_as_follower
    for i in range(n):
        struct.pack_into(">q", buf, 0, i * per_batch)
        append(buf)
    return log, n


def bench_lookups(log, p: Params, rng: random.Random) -> dict[str, Any]:
    from kafkalog.record import iter_batches

    end = log.log_end_offset
    offsets = [rng.randrange(end) for _ in range(p.lookups)]
    read = log.read
    perf = time.perf_counter_ns

    def latencies(fetch_bytes: bool) -> list[float]:
        out = []
        for offset in offsets:
            t0 = perf()
            info = read(offset, 1, min_one_message=True)
            if fetch_bytes:
                info.records.tobytes()
            out.append((perf() - t0) / 1000)
        return out

    for offset in offsets[:200]:  # correctness guard (untimed): the batch returned holds the offset
        batch = next(iter_batches(read(offset, 1, min_one_message=True).records.tobytes()))
        if not batch.base_offset <= offset <= batch.last_offset:
            raise AssertionError(f"lookup of {offset} returned batch {batch.base_offset}..{batch.last_offset}")
    latencies(False)  # warm-up pass
    result = {}
    for name, fetch in (("position", False), ("position_and_bytes", True)):
        gc.collect()
        lat = sorted(latencies(fetch))
        result[name] = {
            "p50_us": percentile(lat, 50),
            "p99_us": percentile(lat, 99),
            "mean_us": statistics.fmean(lat),
            "max_us": lat[-1],
        }
    return result


def sequential_log_read(log) -> tuple[int, int]:
    """Read the whole log front to back with Log.read (1 MiB per call), as a consumer does; (bytes, batches)."""
    from kafkalog.record.scan import batch_positions

    offset, total, batches = log.log_start_offset, 0, 0
    end = log.log_end_offset
    read = log.read
    while offset < end:
        data = read(offset, READ_CHUNK, min_one_message=True).records.tobytes()
        last = last_size = None
        for pos, size, _magic in batch_positions(data):
            last, last_size = pos, size
            batches += 1
        if last is None:
            raise AssertionError(f"sequential read stalled at offset {offset}")
        base, last_delta = struct.unpack_from(">q", data, last)[0], struct.unpack_from(">i", data, last + 23)[0]
        offset = base + last_delta + 1
        total += last + last_size  # complete batches only (a read may end inside one)
    return total, batches


def raw_file_read(paths: list[Path]) -> int:
    total = 0
    buf = bytearray(READ_CHUNK)
    for path in paths:
        with open(path, "rb", buffering=0) as f:
            while n := f.readinto(buf):
                total += n
    return total


def crc_file_pass(paths: list[Path]) -> int:
    from kafkalog.record.checksums import crc32c

    total = 0
    buf = bytearray(READ_CHUNK)
    view = memoryview(buf)
    for path in paths:
        with open(path, "rb", buffering=0) as f:
            while n := f.readinto(buf):
                crc32c(view[:n])
                total += n
    return total


def bench_big_log(scratch: Scratch, p: Params, rng: random.Random, console: Console) -> dict[str, Any]:
    from kafkalog.storage.log import Log

    template = make_batch(100, VALUE_BYTES, rng)
    directory = scratch.fresh("big")
    console.print(f"[dim]storage: building a {p.log_bytes / MIB:,.0f} MiB log of {len(template):,} B batches...[/]")
    t0 = time.perf_counter()
    log, n = build_big_log(directory, template, p.log_bytes)
    build_s = time.perf_counter() - t0
    try:
        size = log.size
        segments = len(log.segments)
        end = log.log_end_offset
        console.print("[dim]storage: random lookups...[/]")
        lookups = bench_lookups(log, p, rng)

        console.print("[dim]storage: sequential reads...[/]")
        paths = [s.log.path for s in log.segments]
        sequential_log_read(log)  # warm-up: page cache and code paths
        raw_file_read(paths)
        log_times, raw_times = [], []
        for _ in range(p.read_repeats):
            elapsed, got = timed(lambda: sequential_log_read(log))
            if got != (size, n):
                raise AssertionError(f"sequential read gave {got}, expected {(size, n)}")
            log_times.append(elapsed)
            elapsed, got = timed(lambda: raw_file_read(paths))
            if got != size:
                raise AssertionError("raw read: short")
            raw_times.append(elapsed)
        log_fig, raw_fig = figures(log_times, n, size), figures(raw_times, n, size)
    finally:
        log.close()  # a clean shutdown (flushes everything) before the recovery runs

    console.print("[dim]storage: recovery...[/]")
    recovery_times, crc_times = [], []
    try:
        for _ in range(p.recovery_repeats):
            elapsed, recovered = timed(lambda: Log.open(directory, {}, recovery_point=0, had_clean_shutdown=False))
            recovery_times.append(elapsed)
            try:
                if recovered.log_end_offset != end or recovered.size != size:
                    raise AssertionError(f"recovery changed the log: end {recovered.log_end_offset}, expected {end}")
            finally:
                recovered.close()
            elapsed, total = timed(lambda: crc_file_pass(paths))
            if total != size:
                raise AssertionError("crc pass: short")
            crc_times.append(elapsed)
    finally:
        remove_log_dir(directory)

    rec_best, crc_best = min(recovery_times), min(crc_times)
    return {
        "log": {
            "bytes": size,
            "segments": segments,
            "batches": n,
            "records": end,
            "batch_bytes": len(template),
            "records_per_batch": record_count(template),
            "build_s": build_s,
        },
        "lookup": {"lookups": p.lookups, **lookups},
        "sequential_read": {
            "log": log_fig,
            "raw": raw_fig,
            "log_vs_raw": log_fig["mb_per_s"] / raw_fig["mb_per_s"],
        },
        "recovery": {
            "s_per_gb": rec_best / (size / GB),
            "mb_per_s": size / rec_best / 1e6,
            "best_s": rec_best,
            "times_s": recovery_times,
            "crc32c_s_per_gb": crc_best / (size / GB),
            "crc32c_mb_per_s": size / crc_best / 1e6,
            "crc32c_times_s": crc_times,
            "recovery_vs_crc32c_time": rec_best / crc_best,
        },
    }


# ----- report --------------------------------------------------------------------------------------


def machine_info(scratch: Scratch) -> dict[str, Any]:
    return common.platform_info() | {
        "scratch_dir": str(scratch.root.parent),
        "scratch_same_device_as_repo": scratch.same_device_as_repo(),
    }


_ok = common.ok_mark


def print_tables(result: dict[str, Any], console: Console) -> None:
    p = result["parameters"]
    table = Table(
        title="Append (pre-built uncompressed batches)",
        caption=f"best of {p['repeats']} runs; MB = 1e6 bytes; raw = os.write loop of the same bytes, same dir",
    )
    for col in ("batch", "bytes/batch", "path", "batches/s", "MB/s", "vs raw"):
        table.add_column(col, justify="right" if col not in ("batch", "path") else "left")
    for name, r in result["append"].items():
        for path, label in (("client", "Log.append"), ("follower", "append_as_follower"), ("raw", "os.write")):
            fig = r[path]
            ratio = "" if path == "raw" else f"{r[f'{path}_vs_raw']:.2f}x"
            table.add_row(
                name if path == "client" else "",
                f"{r['batch_bytes']:,}" if path == "client" else "",
                label,
                f"{fig['batches_per_s']:,.0f}",
                f"{fig['mb_per_s']:,.0f}",
                ratio,
            )
    console.print(table)

    big = result["big_log"]
    log_info = big["log"]
    table = Table(
        title=f"{log_info['bytes'] / MIB:,.0f} MiB log ({log_info['segments']} segments, {log_info['batches']:,} "
        f"batches of {log_info['records_per_batch']} records, {log_info['batch_bytes']:,} B)",
        caption="page cache warm; MB = 1e6 bytes, GB = 1e9 bytes",
    )
    table.add_column("measure")
    table.add_column("kafkalog", justify="right")
    table.add_column("baseline", justify="right")
    table.add_column("ratio", justify="right")
    lk = big["lookup"]
    table.add_row(
        f"random lookup, Log.read position (p50 / p99), {lk['lookups']:,} offsets",
        f"{lk['position']['p50_us']:.1f} / {lk['position']['p99_us']:.1f} us",
        "",
        "",
    )
    table.add_row(
        "random lookup + batch bytes (p50 / p99)",
        f"{lk['position_and_bytes']['p50_us']:.1f} / {lk['position_and_bytes']['p99_us']:.1f} us",
        "",
        "",
    )
    sr = big["sequential_read"]
    table.add_row(
        "sequential read (Log.read 1 MiB vs file read 1 MiB)",
        f"{sr['log']['mb_per_s']:,.0f} MB/s",
        f"{sr['raw']['mb_per_s']:,.0f} MB/s",
        f"{sr['log_vs_raw']:.2f}x",
    )
    rc = big["recovery"]
    table.add_row(
        "recovery, all segments (vs CRC-32C of the same bytes)",
        f"{rc['s_per_gb']:.2f} s/GB",
        f"{rc['crc32c_s_per_gb']:.3f} s/GB",
        f"{rc['recovery_vs_crc32c_time']:.1f}x the time",
    )
    console.print(table)

    goals = common.goals_table()
    g = result["goals_measured"]
    goals.add_row(
        f"1 MiB batches: Log.append >= {APPEND_GOAL_1MIB_VS_RAW:g}x raw write rate",
        f"{g['append_1mib_vs_raw']:.2f}x",
        _ok(result["goals_met"]["append_1mib_vs_raw"]),
    )
    goals.add_row(
        f"single-record batches: Log.append >= {APPEND_GOAL_SINGLE_PER_S:,}/s",
        f"{g['append_single_record_per_s']:,.0f}/s",
        _ok(result["goals_met"]["append_single_record_per_s"]),
    )
    console.print(goals)

    prof = Table(title=f"cProfile: {p['profile_appends']:,} single-record Log.append calls, top by own time")
    for col in ("function", "calls", "own s", "share", "us/append"):
        prof.add_column(col, justify="left" if col == "function" else "right")
    for row in result["profile_single_record_append"][:8]:
        prof.add_row(
            row["function"],
            f"{row['calls']:,}",
            f"{row['tottime_s']:.3f}",
            f"{row['tottime_share']:.0%}",
            f"{row['us_per_append']:.2f}",
        )
    console.print(prof)


def run(*, quick: bool = False, results_dir: Path, console: Console | None = None) -> dict[str, Any]:
    """Run the storage benchmark, write ``results_dir/storage.json``, print the tables; return the result."""
    console = console or Console()
    p = QUICK if quick else FULL
    started = time.perf_counter()
    rng = random.Random(p.seed)
    scratch = Scratch()
    try:
        single = make_batch(1, VALUE_BYTES, rng)
        hundred = make_batch(100, VALUE_BYTES, rng)
        mib = make_mib_batch(rng)
        warm_up(scratch, [single, hundred, mib])
        append = {
            "1 record": bench_append(scratch, "1 record", single, p.single_appends, p, console),
            "100 records": bench_append(scratch, "100 records", hundred, p.hundred_appends, p, console),
            "1 MiB": bench_append(scratch, "1 MiB", mib, p.mib_appends, p, console),
        }
        console.print("[dim]storage: profiling single-record appends...[/]")
        profile = profile_single(scratch, single, p.profile_appends)
        big = bench_big_log(scratch, p, rng, console)
        machine = machine_info(scratch)
    finally:
        scratch.cleanup()

    measured = {
        "append_1mib_vs_raw": append["1 MiB"]["client_vs_raw"],
        "append_single_record_per_s": append["1 record"]["client"]["batches_per_s"],
    }
    goals_met = {
        "append_1mib_vs_raw": measured["append_1mib_vs_raw"] >= APPEND_GOAL_1MIB_VS_RAW,
        "append_single_record_per_s": measured["append_single_record_per_s"] >= APPEND_GOAL_SINGLE_PER_S,
    }
    result = {
        "benchmark": "storage",
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "quick": quick,
        "machine": machine,
        "parameters": {
            **asdict(p),
            "key_bytes": KEY_BYTES,
            "value_bytes": VALUE_BYTES,
            "statistic": "appends and reads: best (minimum wall time) of the timed runs with time.perf_counter after "
            "an untimed warm-up; lookups: per-call latency percentiles (nearest rank) over random offsets",
            "append_paths": {
                "client": "Log.append(batch): the same pre-built batch (base offset 0) every time; analysed, CRC "
                "checked, records validated, offsets assigned, written",
                "follower": "Log.append_as_follower(batch): pre-built batches carrying their final offsets",
                "raw": "os.write(fd, batch) in a loop into a new file in the same scratch directory",
            },
            "durability": "no fsync while timing on any path (flush.messages is Long.MAX by default); each run's "
            "file is fsynced, closed and deleted untimed afterwards",
            "config": "LogConfig defaults (segment.bytes 1 GiB, index.interval.bytes 4096, 10 MiB indexes)",
            "lookup": "Log.read(offset, max_bytes=1, min_one_message=True) at uniform random offsets: index lookup "
            "plus the scan to the batch holding the offset; '+ bytes' also reads that batch's bytes",
            "sequential_read": "Log.read(offset, 1 MiB) from the log start to the end, bytes read, next offset from "
            "the last complete batch; raw: readinto a 1 MiB buffer over the segment files",
            "recovery": "Log.open(dir, recovery_point=0, had_clean_shutdown=False) on the closed log: every batch "
            "CRC-checked, indexes rebuilt, producer state rebuilt; baseline: CRC-32C over the same files read in "
            "1 MiB chunks. Page cache warm",
            "mb": "1 MB = 1e6 bytes; 1 GB = 1e9 bytes",
        },
        "goals": {
            "append_1mib_vs_raw": APPEND_GOAL_1MIB_VS_RAW,
            "append_single_record_per_s": APPEND_GOAL_SINGLE_PER_S,
        },
        "goals_measured": measured,
        "goals_met": goals_met,
        "all_goals_met": all(goals_met.values()),
        "append": append,
        "big_log": big,
        "profile_single_record_append": profile,
        "elapsed_s": time.perf_counter() - started,
    }
    return common.finish(results_dir, "storage", result, console, print_tables, machine["scratch_dir"])
