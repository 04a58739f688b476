"""``kafkalog dump`` of a whole segment against the same dump through kafka-python's record classes.

The issue: "``dump`` of a 1 GiB segment streams in constant memory and runs at least 3x faster than the
same dump through kafka-python's record classes."

Segments: a pool of realistic v2 batches is built with ``kafkalog.record.build_batch`` (record counts 1 to
500, 50% uncompressed, 25% lz4, 25% zstd; text values of 20-600 bytes with some non-ASCII words, string
keys, a few null keys and tombstones, headers on about 30% of batches, idempotent-producer batches with
sequences, a few LogAppendTime batches), up to 64 MiB. The 64 MiB segment is the pool; the 1 GiB segment
is the pool written 16 times over with the base offsets rewritten (the base offset is outside the CRC),
so offsets run on consecutively and every batch stays valid. Files go to $KAFKALOG_BENCH_DIR or the
system temp dir and are removed afterwards.

Ours: the real console script, ``kafkalog dump --files SEG --deep-iteration --print-data-log``, in a
subprocess with stdout on /dev/null. Theirs: ``python -m benchmarks.bench_dump --kafka-python-dump SEG``,
a subprocess that streams the file in 1 MiB chunks through ``kafka.record.memory_records.MemoryRecords``
and ``DefaultRecordBatch`` (CRC checked with ``validate_crc``, the C crc32c package when installed) and
prints the same DumpLogSegments text (batch lines and ``| offset: ... key: ... payload: ...`` lines),
one write per batch. Both are timed as whole processes (wall clock, startup included; the startup of each,
measured on an empty segment, is reported beside it), and each child's peak RSS comes from ``os.wait4``
(in a small helper process that starts it). Constant memory is judged on the dump's own memory, its peak RSS
less the same command's on an empty segment (the interpreter and its imports), and on the growth of the
peak from the 64 MiB to the 1 GiB segment; the absolute peak is reported too.

Correctness guard (untimed): both dumps of each segment are piped into this process and compared line by
line; the record lines must number the records built and every line must be identical, else the
benchmark fails. Our dump of the 64 MiB segment is also profiled in-process with cProfile.
"""

from __future__ import annotations

import bisect
import contextlib
import cProfile
import gc
import hashlib
import itertools
import json
import os
import random
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import common

if TYPE_CHECKING:
    from rich.console import Console

REPO = Path(__file__).resolve().parents[1]
MIB = 1 << 20
GIB = 1 << 30
SPEED_GOAL = 3.0  # kafka-python's time / ours, on the largest segment
# "Constant memory": the memory the dump itself takes (its peak RSS less the same command's peak RSS on an
# empty segment, i.e. less the interpreter and its imports) is under RSS_SHARE_LIMIT of the largest file,
# and the peak RSS of the largest dump is within RSS_GROWTH_LIMIT of the smallest dump's (the same memory
# whatever the size, up to allocator noise). The absolute peak RSS is reported beside it.
RSS_SHARE_LIMIT = 0.10
RSS_GROWTH_LIMIT = 32e6
CHUNK = 1 << 20  # the kafka-python dump reads this much at a time, as FileRecords.batches does
SEGMENT_NAME = "00000000000000000000.log"
BASE_TIMESTAMP = 1_700_000_000_000
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
CODEC_NAMES = ("none", "gzip", "snappy", "lz4", "zstd")
INT32_MAX = 2**31 - 1

# The mix of batches in the segments.
RECORD_COUNTS = (1, 5, 20, 100, 500)
RECORD_COUNT_WEIGHTS = (20, 25, 25, 20, 10)
CODECS = ("none", "lz4", "zstd")
CODEC_WEIGHTS = (50, 25, 25)
VALUE_BYTES = (20, 600)
NULL_KEY_SHARE = 0.10
TOMBSTONE_SHARE = 0.02
HEADER_BATCH_SHARE = 0.30
PRODUCER_BATCH_SHARE = 0.40
PRODUCERS = 4
LOG_APPEND_TIME_SHARE = 0.05
NON_ASCII_WORDS = ("café", "naïve", "Zürich", "déjà", "日本語", "данные", "😀", "ñandú")


@dataclass(frozen=True)
class Params:
    sizes: tuple[int, ...] = (64 * MIB, GIB)  # segment sizes (upper bounds: whole pools only)
    repeats: tuple[int, ...] = (3, 1)  # timed runs of each implementation, per size
    pool_bytes: int = 64 * MIB
    startup_repeats: int = 3
    seed: int = 20240601


FULL = Params()
QUICK = Params(sizes=(64 * MIB,), repeats=(1,), startup_repeats=1)


# ----- the segments ---------------------------------------------------------------------------------


class Corpus:
    """Text to cut values from: seeded words (a few non-ASCII), cut only at word boundaries."""

    def __init__(self, rng: random.Random, words: int = 400_000) -> None:
        letters = "abcdefghijklmnopqrstuvwxyz"
        vocab = ["".join(rng.choice(letters) for _ in range(rng.randint(2, 9))) for _ in range(2000)]
        vocab += list(NON_ASCII_WORDS)
        self.text = " ".join(rng.choice(vocab) for _ in range(words)).encode()
        self.starts = [0] + [i + 1 for i, c in enumerate(self.text) if c == 0x20]

    def value(self, rng: random.Random) -> bytes:
        length = rng.randint(*VALUE_BYTES)
        i = rng.randrange(len(self.starts) // 2)
        start = self.starts[i]
        end = self.starts[bisect.bisect_left(self.starts, start + length, lo=i + 1)] - 1
        return self.text[start:end]


def make_batch(rng: random.Random, corpus: Corpus, base_offset: int, timestamp: int, sequences: list[int]):
    """One batch as a producer sends it, with its base offset; (bytes, record count, facts for the stats)."""
    from kafkalog.record import build_batch

    count = rng.choices(RECORD_COUNTS, RECORD_COUNT_WEIGHTS)[0]
    codec = rng.choices(CODECS, CODEC_WEIGHTS)[0]
    keys = [
        None if rng.random() < NULL_KEY_SHARE else f"user-{rng.randrange(1_000_000)}".encode() for _ in range(count)
    ]
    values = [None if rng.random() < TOMBSTONE_SHARE else corpus.value(rng) for _ in range(count)]
    headers = None
    if rng.random() < HEADER_BATCH_SHARE:
        source = rng.choice((b"web", b"mobile", b"batch-import"))
        headers = [[("trace-id", rng.randbytes(8).hex().encode()), ("source", source)] for _ in range(count)]
    options: dict[str, Any] = {"compression": codec, "base_offset": base_offset}
    producer = rng.randrange(PRODUCERS) if rng.random() < PRODUCER_BATCH_SHARE else None
    if producer is not None:
        options.update(producer_id=1000 + producer, producer_epoch=0, base_sequence=sequences[producer])
        sequences[producer] = (sequences[producer] + count) % (INT32_MAX + 1)
    log_append = rng.random() < LOG_APPEND_TIME_SHARE
    if log_append:
        options.update(timestamp_type="LogAppendTime", log_append_time=timestamp + count)
    batch = build_batch(keys, values, [timestamp + i for i in range(count)], headers, **options)
    return batch, count, (codec, headers is not None, producer is not None, log_append)


def make_pool(limit: int, rng: random.Random) -> tuple[bytes, list[int], int, dict[str, Any]]:
    """Batches up to ``limit`` bytes: (the bytes, each batch's position, record count, stats)."""
    corpus = Corpus(rng)
    parts: list[bytes] = []
    positions: list[int] = []
    size = records = 0
    timestamp = BASE_TIMESTAMP
    sequences = [0] * PRODUCERS
    codecs = dict.fromkeys(CODECS, 0)
    with_headers = producer_batches = log_append_batches = 0
    while True:
        batch, count, (codec, headers, producer, log_append) = make_batch(rng, corpus, records, timestamp, sequences)
        if size + len(batch) > limit:
            break
        parts.append(batch)
        positions.append(size)
        size += len(batch)
        records += count
        timestamp += count + rng.randrange(50)
        codecs[codec] += 1
        with_headers += headers
        producer_batches += producer
        log_append_batches += log_append
    stats = {
        "batches": len(parts),
        "records": records,
        "bytes": size,
        "batches_by_codec": codecs,
        "batches_with_headers": with_headers,
        "idempotent_producer_batches": producer_batches,
        "log_append_time_batches": log_append_batches,
        "mean_records_per_batch": records / len(parts),
        "mean_bytes_per_record": size / records,
    }
    return b"".join(parts), positions, records, stats


def write_segment(path: Path, pool: bytes, positions: list[int], pool_records: int, copies: int) -> tuple[int, int]:
    """The pool ``copies`` times over, base offsets shifted so offsets run on; (bytes, records)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    buf = bytearray(pool)
    bases = [struct.unpack_from(">q", pool, p)[0] for p in positions]
    with open(path, "wb") as f:
        for copy in range(copies):
            shift = copy * pool_records
            for p, base in zip(positions, bases, strict=True):
                struct.pack_into(">q", buf, p, base + shift)
            f.write(buf)
    return len(pool) * copies, pool_records * copies


# ----- the kafka-python dump (runs in a child process: python -m benchmarks.bench_dump --kafka-python-dump) ---


def kafka_python_dump(path: str, out) -> int:
    """DumpLogSegments' text for a v2 segment (deep iteration, data printed) through kafka-python's classes.

    Streams the file in CHUNK reads; each chunk's complete batches go through ``MemoryRecords`` and
    ``DefaultRecordBatch`` (CRC checked before iterating, as the tool's ``isvalid`` needs); a partial batch
    at a chunk's end is carried to the next read. Returns the number of records printed.
    """
    from kafka.record.memory_records import MemoryRecords

    write = out.write
    start = int(os.path.basename(path).split(".")[0])
    write(f"Dumping {path}\nLog starting offset: {start}\n")
    position = 0  # file position of the current chunk's first byte
    records_printed = 0
    with open(path, "rb") as f:
        pending = b""
        while chunk := f.read(CHUNK):
            data = pending + chunk if pending else chunk
            records = MemoryRecords(data)
            consumed = 0
            while records.has_next():
                batch = records.next_batch()
                if batch.magic < 2:
                    raise ValueError("the kafka-python dump handles v2 batches only")
                size = batch.size_in_bytes
                valid = batch.validate_crc()  # before iterating: it needs the compressed bytes
                attributes = batch.attributes
                ts_type = TIMESTAMP_TYPES[batch.timestamp_type]
                base = batch.base_offset
                base_seq = batch.base_sequence
                control = batch.is_control_batch
                horizon = f"OptionalLong[{batch.first_timestamp}]" if attributes & 0x40 else "OptionalLong.empty"
                lines = [
                    f"baseOffset: {base} lastOffset: {batch.last_offset} count: {batch.records_count} "
                    f"baseSequence: {base_seq} lastSequence: {batch.last_sequence} "
                    f"producerId: {batch.producer_id} producerEpoch: {batch.producer_epoch} "
                    f"partitionLeaderEpoch: {batch.leader_epoch} "
                    f"isTransactional: {'true' if batch.is_transactional else 'false'} "
                    f"isControl: {'true' if control else 'false'} deleteHorizonMs: {horizon} "
                    f"position: {position + consumed} {ts_type}: {batch.max_timestamp} size: {size} "
                    f"magic: {batch.magic} compresscodec: {CODEC_NAMES[attributes & 7]} crc: {batch.crc} "
                    f"isvalid: {'true' if valid else 'false'}"
                ]
                append = lines.append
                for record in batch:
                    if control:
                        raise ValueError("the kafka-python dump does not print control records")
                    key, value, offset = record.key, record.value, record.offset
                    sequence = -1 if base_seq == -1 else (base_seq + offset - base) & INT32_MAX
                    line = (
                        f"| offset: {offset} {ts_type}: {record.timestamp} "
                        f"keySize: {-1 if key is None else len(key)} valueSize: {-1 if value is None else len(value)} "
                        f"sequence: {sequence} headerKeys: [{','.join([k for k, _ in record.headers])}]"
                    )
                    if key is not None:
                        line += " key: " + key.decode("utf-8", "replace")
                    if value is not None:
                        line += " payload: " + value.decode("utf-8", "replace")
                    append(line)
                records_printed += len(lines) - 1
                append("")
                write("\n".join(lines))
                consumed += size
            pending = data[consumed:]
            position += consumed
    if pending:
        write(f"Found {len(pending)} invalid bytes at the end of {os.path.basename(path)}\n")
    out.flush()
    return records_printed


# ----- child processes -------------------------------------------------------------------------------


def ours_command(segment: Path) -> list[str]:
    script = Path(sys.executable).with_name("kafkalog")
    return [str(script), "dump", "--files", str(segment), "--deep-iteration", "--print-data-log"]


def theirs_command(segment: Path) -> list[str]:
    return [sys.executable, "-m", "benchmarks.bench_dump", "--kafka-python-dump", str(segment)]


COMMANDS = {"kafkalog": ours_command, "kafka-python": theirs_command}


# The child is started by a small helper process, not by this one: Linux carries the high-water RSS of the
# memory a child had before exec (a copy of its parent's, or the parent's own with vfork) into its ru_maxrss,
# so a child of this process (hundreds of MB after building the pool) would report at least that much.
# The helper is a bare interpreter: its own RSS (measured, reported as the floor) is the least any child shows.
_MEASURE = """
import os, subprocess, sys, time
with open(os.devnull, "wb") as null:
    t0 = time.perf_counter()
    proc = subprocess.Popen(sys.argv[1:], stdin=subprocess.DEVNULL, stdout=null)
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - t0
proc.returncode = os.waitstatus_to_exitcode(status)
print(elapsed, usage.ru_maxrss * 1024, proc.returncode)
"""


def run_child(cmd: list[str]) -> tuple[float, int]:
    """(wall seconds, peak RSS bytes) of one run with stdout on /dev/null; fails on a non-zero exit."""
    with tempfile.TemporaryFile() as err:
        gc.collect()
        helper = subprocess.run(
            [sys.executable, "-I", "-S", "-c", _MEASURE, *cmd],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=err,
            cwd=REPO,
            check=False,
        )
        elapsed, peak, code = helper.stdout.split() if helper.returncode == 0 else ("0", "0", helper.returncode)
        if int(code) != 0:
            err.seek(0)
            raise AssertionError(f"{cmd} exited {code}: {err.read().decode(errors='replace')[-2000:]}")
    return float(elapsed), int(peak)  # ru_maxrss is in kilobytes on Linux


def rss_floor() -> int:
    """The peak RSS the helper reports for a trivial child (/bin/true): the least any measurement can show."""
    return run_child(["/bin/true"])[1] if os.path.exists("/bin/true") else 0


def compare_outputs(segment: Path, expected_records: int) -> dict[str, Any]:
    """Both dumps of ``segment`` piped here and compared line by line (untimed): the correctness guard."""
    procs = {
        name: subprocess.Popen(
            command(segment), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=REPO
        )
        for name, command in COMMANDS.items()
    }
    ours, theirs = procs["kafkalog"], procs["kafka-python"]
    digests = {name: hashlib.sha256() for name in procs}
    record_lines = dict.fromkeys(procs, 0)
    lines = batch_lines = mismatched = 0
    first_mismatch = None
    try:
        for a, b in itertools.zip_longest(ours.stdout, theirs.stdout):  # type: ignore[arg-type]
            lines += 1
            for name, line in (("kafkalog", a), ("kafka-python", b)):
                if line is not None:
                    digests[name].update(line)
                    if line.startswith(b"| "):
                        record_lines[name] += 1
            if a is not None and a.startswith(b"baseOffset: "):
                batch_lines += 1
            if a != b:
                mismatched += 1
                if first_mismatch is None:
                    first_mismatch = {"line": lines, "kafkalog": _clip(a), "kafka-python": _clip(b)}
    finally:
        codes = {name: p.wait() for name, p in procs.items()}
    result = {
        "lines": lines,
        "batch_lines": batch_lines,
        "record_lines": record_lines,
        "expected_records": expected_records,
        "mismatched_lines": mismatched,
        "identical": mismatched == 0,
        "sha256": {name: d.hexdigest() for name, d in digests.items()},
        "first_mismatch": first_mismatch,
        "exit_codes": codes,
    }
    if any(codes.values()) or mismatched or any(n != expected_records for n in record_lines.values()):
        raise AssertionError(f"dump outputs disagree for {segment}: {json.dumps(result, indent=2)}")
    return result


def _clip(line: bytes | None) -> str | None:
    return None if line is None else line.decode("utf-8", "replace").rstrip("\n")[:300]


def figures(times: list[float], rss: list[int], nbytes: int, records: int, startup_s: float) -> dict[str, Any]:
    best = min(times)
    net = max(best - startup_s, 1e-9)
    return {
        "best_s": best,
        "median_s": statistics.median(times),
        "times_s": times,
        "mb_per_s": nbytes / best / 1e6,
        "records_per_s": records / best,
        "net_of_startup_s": net,
        "net_mb_per_s": nbytes / net / 1e6,
        "peak_rss_mb": max(rss) / 1e6,
        "peak_rss_mb_per_run": [r / 1e6 for r in rss],
        "peak_rss_share_of_file": max(rss) / nbytes,
    }


def measure_startup(scratch: Path, repeats: int) -> dict[str, Any]:
    """Each command on an empty segment: interpreter start, imports, argument parsing, one empty file."""
    empty = scratch / "empty" / SEGMENT_NAME
    empty.parent.mkdir(parents=True)
    empty.touch()
    out = {}
    for name, command in COMMANDS.items():
        runs = [run_child(command(empty)) for _ in range(repeats)]
        out[name] = {"best_s": min(t for t, _ in runs), "peak_rss_mb": max(r for _, r in runs) / 1e6}
    return out


def bench_segment(segment: Path, nbytes: int, records: int, repeats: int, startup: dict, console) -> dict[str, Any]:
    console.print(f"[dim]dump: {nbytes / MIB:,.0f} MiB segment: comparing both outputs (untimed)...[/]")
    check = compare_outputs(segment, records)
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    rss: dict[str, list[int]] = {name: [] for name in COMMANDS}
    order = list(COMMANDS)
    for r in range(repeats):
        for name in order[r % 2 :] + order[: r % 2]:
            console.print(f"[dim]dump: {nbytes / MIB:,.0f} MiB segment: timing {name} ({r + 1}/{repeats})...[/]")
            elapsed, peak = run_child(COMMANDS[name](segment))
            times[name].append(elapsed)
            rss[name].append(peak)
    figs = {name: figures(times[name], rss[name], nbytes, records, startup[name]["best_s"]) for name in COMMANDS}
    ours, theirs = figs["kafkalog"], figs["kafka-python"]
    return {
        "bytes": nbytes,
        "records": records,
        "batches": check["batch_lines"],
        "output_lines": check["lines"],
        **figs,
        "speedup_vs_kafka_python": theirs["best_s"] / ours["best_s"],
        "speedup_vs_kafka_python_net_of_startup": theirs["net_of_startup_s"] / ours["net_of_startup_s"],
        "correctness": check,
    }


def profile_ours(segment: Path, top: int = 12) -> dict[str, Any]:
    """cProfile of our dump in this process (stdout to /dev/null): the top functions by own time."""
    from kafkalog.cli.dump import dump_command

    args = ["--files", str(segment), "--deep-iteration", "--print-data-log"]
    profiler = cProfile.Profile()
    with open(os.devnull, "w") as devnull, contextlib.redirect_stdout(devnull):
        gc.collect()
        profiler.enable()
        dump_command.main(args, standalone_mode=False)
        profiler.disable()
    total, rows = common.profile_rows(profiler)
    return {"total_s": total, "by_own_time": rows[:top]}


# ----- report ---------------------------------------------------------------------------------------


def _label(nbytes: int) -> str:
    return f"{nbytes / GIB:.2f} GiB" if nbytes >= GIB // 2 else f"{nbytes / MIB:,.0f} MiB"


def print_tables(result: dict[str, Any], console) -> None:
    from rich.table import Table

    table = Table(
        title="kafkalog dump --deep-iteration --print-data-log > /dev/null, vs kafka-python's record classes",
        caption="whole processes, wall clock, startup included (startup on an empty segment: "
        + ", ".join(f"{k} {v['best_s']:.2f} s" for k, v in result["startup"].items())
        + f"); best of the timed runs; MB = 1e6 bytes; peak RSS via wait4 (floor {result['rss_floor_mb']:.0f} MB); "
        "page cache warm; whole files measured, nothing extrapolated",
    )
    for col in ("segment", "dump", "seconds", "MB/s", "records/s", "peak RSS MB", "RSS / file", "speedup"):
        table.add_column(col, justify="left" if col in ("segment", "dump") else "right")
    for label, seg in result["segments"].items():
        for name in COMMANDS:
            fig = seg[name]
            speedup = ""
            if name == "kafkalog":
                speedup = (
                    f"{seg['speedup_vs_kafka_python']:.2f}x "
                    f"({seg['speedup_vs_kafka_python_net_of_startup']:.2f}x net of startup)"
                )
            table.add_row(
                f"{label}, {seg['records']:,} records" if name == "kafkalog" else "",
                name,
                f"{fig['best_s']:.2f}",
                f"{fig['mb_per_s']:,.1f}",
                f"{fig['records_per_s']:,.0f}",
                f"{fig['peak_rss_mb']:,.0f}",
                f"{fig['peak_rss_share_of_file']:.1%}",
                speedup,
            )
    console.print(table)

    checks = ", ".join(
        f"{label}: {seg['correctness']['lines']:,} lines identical" for label, seg in result["segments"].items()
    )
    console.print(f"[dim]correctness guard (untimed, both outputs compared line by line): {checks}[/]")

    goals = common.goals_table()
    g, met = result["goals_measured"], result["goals_met"]
    goals.add_row(
        f"dump of the largest segment >= {SPEED_GOAL:g}x kafka-python's speed",
        f"{g['speedup_vs_kafka_python']:.2f}x",
        _ok(met["speedup_vs_kafka_python"]),
    )
    mem = g["constant_memory"]
    measured = (
        f"own {mem['largest_working_rss_mb']:,.1f} MB ({mem['largest_working_rss_share_of_file']:.2%}); peak "
        f"{mem['largest_rss_mb']:,.0f} MB for {_label(mem['largest_bytes'])}"
    )
    if mem["smallest_rss_mb"] is not None:
        measured += f", {mem['smallest_rss_mb']:,.0f} MB for {_label(mem['smallest_bytes'])}"
    goals.add_row(
        f"constant memory: dump's own RSS (peak - empty-segment peak) < {RSS_SHARE_LIMIT:.0%} of the file, "
        f"peak growth 64 MiB -> 1 GiB < {RSS_GROWTH_LIMIT / 1e6:g} MB",
        measured,
        _ok(met["constant_memory"]),
    )
    console.print(goals)

    prof = result["profile"]
    title = f"cProfile: kafkalog dump of the {_label(prof['segment_bytes'])} segment, top by own time"
    caption = f"in-process, profiler on: {prof['total_s']:.1f} s in all"
    console.print(common.profile_table(title, prof["by_own_time"], caption=caption, top=10))


_ok = common.ok_mark


def machine_info(scratch: Path) -> dict[str, Any]:
    from importlib import metadata

    return common.platform_info() | {
        "scratch_dir": str(scratch.parent),
        "kafka_python": metadata.version("kafka-python"),
        "kafka_python_crc32c": _kafka_python_crc32c(),
    }


def _kafka_python_crc32c() -> str:
    from kafka.record import util

    return "crc32c (C extension)" if getattr(util, "crc32c_c", None) is not None else "pure Python"


def run(*, quick: bool = False, results_dir: Path, console: Console | None = None) -> dict[str, Any]:
    """Run the dump benchmark, write ``results_dir/dump.json``, print the tables; return the result."""
    from rich.console import Console

    console = console or Console()
    p = QUICK if quick else FULL
    started = time.perf_counter()
    rng = random.Random(p.seed)
    parent = os.environ.get("KAFKALOG_BENCH_DIR") or tempfile.gettempdir()
    scratch = Path(tempfile.mkdtemp(prefix="kafkalog-bench-dump-", dir=parent))
    try:
        console.print(f"[dim]dump: building a pool of batches up to {p.pool_bytes / MIB:,.0f} MiB...[/]")
        t0 = time.perf_counter()
        pool, positions, pool_records, pool_stats = make_pool(p.pool_bytes, rng)
        build_s = time.perf_counter() - t0
        segments = []
        for size in p.sizes:
            copies = max(1, size // p.pool_bytes)
            path = scratch / f"size-{size}" / SEGMENT_NAME
            nbytes, records = write_segment(path, pool, positions, pool_records, copies)
            segments.append((path, nbytes, records, copies))
        del pool
        console.print("[dim]dump: startup on an empty segment...[/]")
        startup = measure_startup(scratch, p.startup_repeats)
        floor = rss_floor()
        results = {}
        for (path, nbytes, records, copies), repeats in zip(segments, p.repeats, strict=True):
            seg = bench_segment(path, nbytes, records, repeats, startup, console)
            seg["pool_copies"] = copies
            results[_label(nbytes)] = seg
        console.print(f"[dim]dump: profiling our dump of the {_label(segments[0][1])} segment...[/]")
        profile = {"segment_bytes": segments[0][1], **profile_ours(segments[0][0])}
        machine = machine_info(scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    by_size = sorted(results.values(), key=lambda s: s["bytes"])
    smallest, largest = by_size[0], by_size[-1]
    largest_rss = largest["kafkalog"]["peak_rss_mb"]
    two_sizes = len(by_size) > 1
    working = largest_rss - startup["kafkalog"]["peak_rss_mb"]
    constant = {
        "largest_bytes": largest["bytes"],
        "largest_rss_mb": largest_rss,
        "largest_rss_share_of_file": largest["kafkalog"]["peak_rss_share_of_file"],
        "empty_segment_rss_mb": startup["kafkalog"]["peak_rss_mb"],
        "largest_working_rss_mb": working,
        "largest_working_rss_share_of_file": working * 1e6 / largest["bytes"],
        "smallest_bytes": smallest["bytes"] if two_sizes else None,
        "smallest_rss_mb": smallest["kafkalog"]["peak_rss_mb"] if two_sizes else None,
        "rss_growth_mb": largest_rss - smallest["kafkalog"]["peak_rss_mb"] if two_sizes else None,
    }
    measured = {"speedup_vs_kafka_python": largest["speedup_vs_kafka_python"], "constant_memory": constant}
    goals_met: dict[str, bool | None] = {
        "speedup_vs_kafka_python": largest["speedup_vs_kafka_python"] >= SPEED_GOAL,
        # One segment size (a quick run) cannot show that memory does not grow with the size.
        "constant_memory": (
            constant["largest_working_rss_share_of_file"] < RSS_SHARE_LIMIT
            and constant["rss_growth_mb"] * 1e6 < RSS_GROWTH_LIMIT
        )
        if two_sizes
        else None,
    }
    result = {
        "benchmark": "dump",
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "quick": quick,
        "machine": machine,
        "parameters": {
            **asdict(p),
            "pool": pool_stats,
            "pool_build_s": build_s,
            "batch_mix": {
                "record_counts": dict(zip(RECORD_COUNTS, RECORD_COUNT_WEIGHTS, strict=True)),
                "codecs": dict(zip(CODECS, CODEC_WEIGHTS, strict=True)),
                "value_bytes": list(VALUE_BYTES),
                "null_key_share": NULL_KEY_SHARE,
                "tombstone_share": TOMBSTONE_SHARE,
                "header_batch_share": HEADER_BATCH_SHARE,
                "idempotent_producer_batch_share": PRODUCER_BATCH_SHARE,
                "log_append_time_share": LOG_APPEND_TIME_SHARE,
            },
            "segments": "the pool of distinct batches is the smallest segment; larger ones are the pool written "
            "size // pool_bytes times over, base offsets rewritten so offsets are consecutive (all batches valid)",
            "ours": "the kafkalog console script: kafkalog dump --files SEG --deep-iteration --print-data-log, "
            "stdout on /dev/null",
            "theirs": "python -m benchmarks.bench_dump --kafka-python-dump SEG: 1 MiB reads, MemoryRecords / "
            "DefaultRecordBatch, validate_crc, the same DumpLogSegments text, one write per batch, stdout on "
            "/dev/null",
            "statistic": "wall clock of the whole child process (startup included), best of the timed runs; "
            "net_of_startup subtracts the best startup time on an empty segment; peak RSS: ru_maxrss from os.wait4 "
            "in a small helper process that starts the child (so the benchmark's own memory is not counted; the "
            "helper's own RSS, rss_floor_mb, is the least a child can show), the largest over the runs; the whole "
            "file is dumped in every run, nothing is extrapolated",
            "correctness": "both outputs piped to the parent and compared line by line (untimed), record lines "
            "counted against the records built",
            "mb": "1 MB = 1e6 bytes; segment sizes are binary (MiB, GiB)",
        },
        "startup": startup,
        "rss_floor_mb": floor / 1e6,
        "segments": results,
        "goals": {
            "speedup_vs_kafka_python": SPEED_GOAL,
            "constant_memory": {
                "working_rss_share_of_file_below": RSS_SHARE_LIMIT,
                "rss_growth_mb_below": RSS_GROWTH_LIMIT / 1e6,
            },
        },
        "goals_measured": measured,
        "goals_met": goals_met,
        "all_goals_met": all(v is not False for v in goals_met.values()),
        "goals_not_assessed": [k for k, v in goals_met.items() if v is None],
        "profile": profile,
        "elapsed_s": time.perf_counter() - started,
    }
    return common.finish(results_dir, "dump", result, console, print_tables, machine["scratch_dir"])


def _main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "--kafka-python-dump":
        try:
            kafka_python_dump(argv[1], sys.stdout)
        except BrokenPipeError:
            with contextlib.suppress(OSError):
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 1
        return 0
    print("usage: python -m benchmarks.bench_dump --kafka-python-dump SEGMENT.log", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
