"""Log recovery at many partitions: LogManager startup after a crash (SIGKILL), and after a clean shutdown.

The standalone reproduction of issue 23's scale row (``kafkalog serve`` with 10,000 partitions of about one record
each took ~155 s to start after SIGKILL with num.recovery.threads.per.data.dir 1, ~15 ms per partition), without
a broker or clients around it.

Build (once per run, in a child interpreter): a log dir with ``partitions`` partitions (topics of 100), created
by ``LogManager.create_topic`` with the broker's defaults (segment.index.bytes 10 MiB: preallocated, sparse
indexes), then two rounds of one idempotent batch of one record to every partition through
``ReplicaManager.append_records`` (acks=-1), the recovery-point checkpoint written between the rounds (the
logs flushed first, as the scale benchmark's clean restart between its rounds left them: recovery points stale by
one record, so the segment holding both records is recovered). The child then kills itself with SIGKILL:
the dir is exactly what a killed broker leaves (no clean-shutdown marker, indexes at their preallocated size,
no producer snapshot, the page cache warm).

Timed, each on a fresh sparse copy (``cp -a --sparse=always``, then ``sync -f``) of that dir, for every thread count
(num.recovery.threads.per.data.dir):

- ``unclean_start``: ``LogManager.startup()`` of the killed dir (every partition's segment is recovered: indexes
  rebuilt, producer state replayed and snapshotted), the path ``kafkalog serve`` takes;
- ``shutdown``: ``LogManager.shutdown()`` right after (flush and close every log, checkpoints, marker);
- ``clean_start``: ``LogManager.startup()`` of that cleanly shut down dir (no recovery).

Every startup is verified: every partition loaded with log end offset 2 and the expected recovery point, its
producer's last sequence 1, and a CRC-valid last batch. The rounds alternate the thread counts. One more unclean
startup (1 thread, the recovery pool replaced by an in-thread executor) is profiled with cProfile. For a
sampling profile of the same path: ``py-spy record -o out.svg -- python -m benchmarks.bench_recovery --build DIR
N`` then ``py-spy record -- python -c 'from kafkalog.manager import LogManager; LogManager([DIR]).startup()'``.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from . import common

NEVER_MS = 10**12  # log.initial.task.delay.ms: no periodic task runs while measuring
PARTITIONS_PER_TOPIC = 100
PRODUCER_ID_BASE = 1000  # one idempotent producer per topic
VALUE_BYTES = 100


@dataclass(frozen=True)
class Params:
    partitions: int = 2000
    threads: tuple[int, ...] = (1, 8)
    rounds: int = 2


FULL = Params()
QUICK = Params(partitions=300, rounds=1)


def _topics(partitions: int) -> list[tuple[str, int]]:
    """(topic, partition count) covering ``partitions`` partitions, 100 per topic."""
    out, left, t = [], partitions, 0
    while left > 0:
        n = min(PARTITIONS_PER_TOPIC, left)
        out.append((f"recovery-{t:03d}", n))
        left -= n
        t += 1
    return out


def build_killed_dir(directory: Path, partitions: int) -> None:
    """Fill ``directory`` as described in the module docstring, then SIGKILL this process (the build child)."""
    from kafkalog.manager import LogManager
    from kafkalog.partition.topic_partition import TopicPartition
    from kafkalog.record import RecordBatchBuilder

    manager = LogManager([directory], {"log.initial.task.delay.ms": NEVER_MS})
    manager.startup()
    topics = _topics(partitions)
    for topic, count in topics:
        manager.create_topic(topic, count)
    for sequence in range(2):
        entries: dict[Any, bytes] = {}
        for t, (topic, count) in enumerate(topics):
            for partition in range(count):
                builder = RecordBatchBuilder(producer_id=PRODUCER_ID_BASE + t, producer_epoch=0, base_sequence=sequence)
                builder.append(b"key-%d" % partition, b"v" * VALUE_BYTES)
                entries[TopicPartition(topic, partition)] = builder.build()
        results = manager.replica_manager.append_records(entries, -1)
        failed = {tp: r.error for tp, r in results.items() if r.error is not None}
        if failed:
            raise AssertionError(f"build: {len(failed)} appends failed, e.g. {next(iter(failed.items()))}")
        if sequence == 0:  # flushed and checkpointed (as by a clean restart); then one more record each
            for topic, count in topics:
                for partition in range(count):
                    manager.get_log(topic, partition).flush()
            manager.checkpoint_recovery_points()
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def _build(directory: Path, partitions: int) -> float:
    """Run ``build_killed_dir`` in a child interpreter (this interpreter's PYTHONPATH: the tree under test)."""
    cmd = [sys.executable, "-m", "benchmarks.bench_recovery", "--build", str(directory), str(partitions)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=common.REPO, capture_output=True, text=True, check=False)
    if proc.returncode != -signal.SIGKILL:
        raise RuntimeError(f"recovery build exited {proc.returncode}, not killed:\n{proc.stderr[-3000:]}")
    if (directory / ".kafka_cleanshutdown").exists():
        raise AssertionError("the killed build left a clean-shutdown marker")
    return time.perf_counter() - t0


def _copy(source: Path, target: Path) -> None:
    """A fresh copy of a log dir, holes kept (the 10 MiB preallocated indexes stay sparse, as the broker left them),
    written out before it is used (``sync -f``: the file system's syncfs). Otherwise the copy's dirty pages are
    written back by whichever fsync comes first: the startup's snapshot writes or the shutdown's flushes, which then
    measure the copy, more so the faster the startup before them was."""
    shutil.rmtree(target, ignore_errors=True)
    subprocess.run(["cp", "-a", "--sparse=always", str(source), str(target)], check=True)
    subprocess.run(["sync", "-f", str(target)], check=True)


def _manager(directory: Path, threads: int) -> Any:
    from kafkalog.manager import LogManager

    return LogManager(
        [directory], {"log.initial.task.delay.ms": NEVER_MS, "num.recovery.threads.per.data.dir": threads}
    )


def verify(manager: Any, partitions: int, clean: bool) -> None:
    """Every partition loaded with both records, recovery point, producer state and a valid last batch."""
    from kafkalog.record import iter_batches

    loaded = 0
    for t, (topic, count) in enumerate(_topics(partitions)):
        for partition in range(count):
            log = manager.get_log(topic, partition)
            where = f"{topic}-{partition}"
            if log.log_end_offset != 2:
                raise AssertionError(f"{where}: log end offset {log.log_end_offset}, expected 2")
            expected_recovery = 2 if clean else 1  # unclean: min(checkpointed 1, log end 2), as Kafka
            if log.recovery_point != expected_recovery:
                raise AssertionError(f"{where}: recovery point {log.recovery_point}, expected {expected_recovery}")
            entry = log.producer_state.last_entry(PRODUCER_ID_BASE + t)
            if entry is None or entry.last_seq != 1:
                raise AssertionError(f"{where}: producer state {entry}, expected last sequence 1")
            last = next(iter_batches(log.read(1, 1 << 20, "log_end", min_one_message=True).records.tobytes()))
            last.ensure_valid()
            if last.last_offset != 1:
                raise AssertionError(f"{where}: last batch ends at {last.last_offset}")
            loaded += 1
    topics = sorted(topic for topic, _ in _topics(partitions))
    if loaded != partitions or manager.topics() != topics:
        raise AssertionError(f"loaded {loaded} partitions of {manager.topics()[:3]}..., expected {partitions}")


def one_round(killed: Path, work: Path, partitions: int, threads: int) -> dict[str, float]:
    """Unclean startup, shutdown, clean startup (each timed) on a fresh copy of the killed dir."""
    _copy(killed, work)
    manager = _manager(work, threads)
    unclean, _ = common.timed(manager.startup)
    try:
        verify(manager, partitions, clean=False)
    finally:
        shutdown, _ = common.timed(manager.shutdown)
    manager = _manager(work, threads)
    clean, _ = common.timed(manager.startup)
    try:
        verify(manager, partitions, clean=True)
    finally:
        manager.shutdown()
    return {"unclean_start_s": unclean, "shutdown_s": shutdown, "clean_start_s": clean}


def profile_unclean(killed: Path, work: Path, partitions: int, top: int = 15) -> dict[str, Any]:
    """cProfile of one unclean startup with one in-thread recovery 'pool'."""
    _copy(killed, work)
    manager = _manager(work, 1)
    profiler = common.profiled_startup(manager)
    try:
        verify(manager, partitions, clean=False)
    finally:
        manager.shutdown()
    total, rows = common.profile_rows(profiler)
    return {"total_s": total, "by_own_time": rows[:top]}


def _raise_fd_limit(partitions: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = partitions * 3 + 256
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(need, hard) if hard != resource.RLIM_INFINITY else need, hard))


def print_tables(result: dict[str, Any], console: Console) -> None:
    n = result["parameters"]["partitions"]
    table = Table(title=f"LogManager startup/shutdown, {n:,} partitions of 2 one-record batches (median of rounds)")
    for col in ("threads", "unclean start s", "ms/partition", "shutdown s", "clean start s", "ms/partition"):
        table.add_column(col, justify="right")
    for threads, fig in result["figures"].items():
        table.add_row(
            threads,
            f"{fig['unclean_start_s']:.2f}",
            f"{fig['unclean_start_s'] / n * 1e3:.2f}",
            f"{fig['shutdown_s']:.2f}",
            f"{fig['clean_start_s']:.2f}",
            f"{fig['clean_start_s'] / n * 1e3:.2f}",
        )
    console.print(table)
    prof = result["profile_unclean_start"]
    console.print(
        common.profile_table(
            f"cProfile, unclean startup, 1 thread in line ({prof['total_s']:.2f} s)", prof["by_own_time"]
        )
    )


def run(*, quick: bool = False, results_dir: Path, console: Console | None = None) -> dict[str, Any]:
    """Run the recovery benchmark, write ``results_dir/recovery.json``, print the tables; return the result."""
    console = console or Console()
    p = QUICK if quick else FULL
    started = time.perf_counter()
    _raise_fd_limit(p.partitions)
    scratch = common.Scratch("recovery")
    try:
        killed = scratch.root / "killed"
        console.print(f"[dim]recovery: building {p.partitions:,} partitions, then SIGKILL...[/]")
        build_s = _build(killed, p.partitions)
        times: dict[int, list[dict[str, float]]] = {t: [] for t in p.threads}
        for r in range(p.rounds):
            order = list(p.threads) if r % 2 == 0 else list(reversed(p.threads))
            for threads in order:
                console.print(f"[dim]recovery: round {r + 1}/{p.rounds}, {threads} thread(s)...[/]")
                times[threads].append(one_round(killed, scratch.root / "run", p.partitions, threads))
        console.print("[dim]recovery: profiling an unclean startup...[/]")
        profile = profile_unclean(killed, scratch.root / "run", p.partitions)
        same_device = scratch.same_device_as_repo()
    finally:
        scratch.cleanup()
    figures = {
        str(t): {key: statistics.median(r[key] for r in runs) for key in runs[0]} | {"rounds": runs}
        for t, runs in times.items()
    }
    result = {
        "benchmark": "recovery",
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "quick": quick,
        "platform": common.platform_info(),
        "parameters": {
            **asdict(p),
            "partitions_per_topic": PARTITIONS_PER_TOPIC,
            "value_bytes": VALUE_BYTES,
            "scratch_on_repo_device": same_device,
            "statistic": "median over rounds of wall time (time.perf_counter), garbage collected before each call",
        },
        "build_s": build_s,
        "figures": figures,
        "profile_unclean_start": profile,
        "elapsed_s": time.perf_counter() - started,
    }
    return common.finish(results_dir, "recovery", result, console, print_tables)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_recovery", description=__doc__.splitlines()[0])
    parser.add_argument("--build", nargs=2, metavar=("DIR", "PARTITIONS"), help="build a killed log dir (and die)")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--results-dir", type=Path, default=Path(__file__).resolve().parent / "results")
    args = parser.parse_args(argv)
    if args.build:
        build_killed_dir(Path(args.build[0]), int(args.build[1]))
        return 1  # not reached: the build kills itself
    run(quick=args.quick, results_dir=args.results_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
