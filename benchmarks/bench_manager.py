"""Log manager: a retention pass over 10,000 segments, startup of a log dir with 1,000 partitions, create_topic.

Retention: logs holding 10,000 segments in all (10 partitions x 1,000 segments of one 1-record batch each,
``segment.bytes`` = the batch size, so every append rolls), built once through ``LogManager.create_topic`` and
``Log.append`` and shut down cleanly. Record timestamps are one second apart and end at the (MockTime) clock's
now. Each timed repeat starts a LogManager on a fresh copy of that directory (inactive segments hard-linked, and
checked unchanged afterwards), then times
``LogManager.cleanup_logs()``:

- the steady-state pass: ``retention.ms`` far above the logs' age, so nothing is deletable (best of a few);
- the deleting pass: ``retention.ms`` set (``alter_topic_config``) so that exactly the older half of every
  log's segments is expired. The pass renames their files to ``.deleted`` (Kafka's deleteSegmentFiles); the
  files go ``file.delete.delay.ms`` later, on the scheduler, timed separately by advancing the MockTime.

Each pass is checked: the right segments left (log start offset, remaining base offsets, files on disk).
Every segment holds an open ``.log`` descriptor and each mapped index one more (CPython's mmap keeps a dup of
the file descriptor), so when the process's descriptor limit cannot hold all 10,000 segments at once the
segments are split over log dirs ("shards") run one after another, each with its own LogManager; a pass's
time is then the sum over the shards (cleanup_logs is a loop over the logs, each handled on its own).

Startup: one log dir with 1,000 partitions (10 topics x 100 partitions, each 3 segments of 10-record batches,
default index settings), built once. LogManager startup is timed after a clean shutdown (the
``.kafka_cleanshutdown`` marker is there: no recovery) and after a simulated unclean one (the marker and the
``recovery-point-offset-checkpoint`` removed, so every segment is re-validated and its indexes rebuilt), with
``num.recovery.threads.per.data.dir`` 1 and 2. Every startup is verified (every partition loaded with its
log end offset, size, segment count, recovery point, and a CRC-valid last batch) and shut down cleanly,
untimed, which restores the directory for the next run. Page cache warm throughout.

create_topic: ``LogManager.create_topic`` of one topic with 1,000 partitions in a new log dir (the broker's
CreateTopics on one node), best of 3, each checked (every partition.metadata holds the topic's id). Per partition
it creates a directory, the segment's ``.log``, ``.index`` and ``.timeindex`` and the partition.metadata file and
fsyncs that file and the directory: file-system metadata work, so the figure follows the disk's other load.

The unclean startup (one recovery thread, the pool replaced by an in-thread executor so that cProfile sees
the work) and the deleting retention pass are profiled (cProfile, top functions).
"""

from __future__ import annotations

import contextlib
import cProfile
import math
import os
import random
import shutil
import statistics
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from . import common

GB = 1e9  # MB/s and s/GB use decimal units
KEY_BYTES = 16
VALUE_BYTES = 100
NOW_MS = 1_700_000_000_000  # the retention logs' MockTime: record timestamps end here
RETENTION_STEP_MS = 1000  # one segment per second of record time
NEVER_MS = 10**12  # log.initial.task.delay.ms: the manager's periodic tasks never come due while measuring
FDS_PER_SEGMENT_BUDGET = 3  # a segment holds one descriptor (its .log; index maps keep none): room to spare
FD_MARGIN = 512
CLEAN_MARKER = ".kafka_cleanshutdown"
RECOVERY_CHECKPOINT = "recovery-point-offset-checkpoint"


@dataclass(frozen=True)
class Params:
    retention_partitions: int = 10
    retention_segments_per_partition: int = 1000
    retention_repeats: int = 2  # deleting passes (each on a fresh copy)
    steady_passes: int = 5  # steady-state passes per repeat and shard (best taken)
    startup_topics: int = 10
    startup_partitions_per_topic: int = 100
    startup_batches_per_partition: int = 64
    startup_records_per_batch: int = 10
    startup_segment_bytes: int = 32 * 1024  # 24 batches of ~1.3 KB: 3 segments per partition
    startup_repeats: int = 2
    recovery_threads: tuple[int, ...] = (1, 2)
    create_partitions: int = 1000  # create_topic row: one topic of this many partitions
    create_repeats: int = 3
    seed: int = 20240601


FULL = Params()
QUICK = Params(
    retention_segments_per_partition=100,
    retention_repeats=1,
    steady_passes=3,
    startup_partitions_per_topic=10,
    startup_repeats=1,
    create_partitions=100,
    create_repeats=1,
)


# ----- environment ---------------------------------------------------------------------------------


class Scratch(common.Scratch):
    """The run's temp directory."""

    def __init__(self) -> None:
        super().__init__("manager")

    def path(self, *parts: str) -> Path:
        return self.root.joinpath(*parts)


def open_fds() -> int | None:
    """Descriptors open in this process (None where the platform does not list them)."""
    for directory in ("/proc/self/fd", "/dev/fd"):
        if os.path.isdir(directory):
            return len(os.listdir(directory)) - 1  # listdir's own descriptor
    return None


class FdLimit:
    """The soft RLIMIT_NOFILE raised to the hard limit for the run (as a broker's ulimit would be), then restored."""

    def __init__(self) -> None:
        self.original: tuple[int, int] | None = None
        self.soft = self.hard = 1 << 30
        try:
            import resource
        except ImportError:  # not a Unix: no limit to manage
            return
        self._resource = resource
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        self.original = (soft, hard)
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        if soft != resource.RLIM_INFINITY and soft < target:
            with contextlib.suppress(ValueError, OSError):
                resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        self.soft = soft if soft != resource.RLIM_INFINITY else 1 << 30
        self.hard = hard if hard != resource.RLIM_INFINITY else 1 << 30

    def restore(self) -> None:
        if self.original is not None:
            with contextlib.suppress(ValueError, OSError):
                self._resource.setrlimit(self._resource.RLIMIT_NOFILE, self.original)

    def budget(self) -> int:
        """Descriptors the benchmark may still open, with a margin."""
        return self.soft - (open_fds() or 64) - FD_MARGIN


timed = common.timed


def make_batch(records: int, timestamp: int, rng: random.Random) -> bytes:
    """One uncompressed v2 batch as a client sends it (base offset 0, no producer id)."""
    from kafkalog.record import build_batch

    keys = [rng.randbytes(KEY_BYTES) for _ in range(records)]
    values = [rng.randbytes(VALUE_BYTES) for _ in range(records)]
    return build_batch(keys, values, [timestamp] * records)


def profile_rows(profiler: cProfile.Profile, top: int = 12) -> dict[str, list[dict[str, Any]]]:
    """The top functions by own time, and kafkalog's own functions by cumulative time."""
    total, rows = common.profile_rows(profiler)
    for row in rows:
        row["cumtime_share"] = row["cumtime_s"] / total if total else 0.0
        row["kafkalog"] = row["function"].startswith("kafkalog/")
    own = sorted(rows, key=lambda r: r["tottime_s"], reverse=True)[:top]
    cumulative = sorted((r for r in rows if r["kafkalog"]), key=lambda r: r["cumtime_s"], reverse=True)[:top]
    return {"total_s": total, "by_own_time": own, "kafkalog_by_cumulative_time": cumulative}


# ----- retention -----------------------------------------------------------------------------------


def shard_sizes(partitions: int, segments_per_partition: int, fd_budget: int) -> list[int]:
    """Partitions per log dir, so that one LogManager's segments fit in the descriptor budget."""
    per_shard = max(1, fd_budget // (segments_per_partition * FDS_PER_SEGMENT_BUDGET))
    shards = math.ceil(partitions / per_shard)
    return [partitions // shards + (1 if i < partitions % shards else 0) for i in range(shards)]


def retention_broker_config() -> dict[str, Any]:
    return {"log.initial.task.delay.ms": NEVER_MS}


def build_retention_shard(directory: Path, topic: str, partitions: int, p: Params, rng: random.Random) -> int:
    """A log dir with ``partitions`` logs of ``segments_per_partition`` one-batch segments; return the batch size."""
    from kafkalog.manager import LogManager
    from kafkalog.testing import MockTime

    n = p.retention_segments_per_partition
    template = make_batch(1, NOW_MS, rng)
    clock = MockTime(start_ms=NOW_MS)
    manager = LogManager([directory], retention_broker_config(), clock)
    manager.startup()
    try:
        manager.create_topic(
            topic,
            partitions,
            {
                "segment.bytes": len(template),  # every append rolls: one batch per segment
                "segment.index.bytes": 4096,  # builds faster; inactive segments' indexes are trimmed anyway
                "retention.ms": NEVER_MS,
            },
        )
        for partition in range(partitions):
            log = manager.get_log(topic, partition)
            for i in range(n):
                batch = make_batch(1, NOW_MS - (n - i) * RETENTION_STEP_MS, rng)
                info = log.append(batch)
                if info.first_offset != i:
                    raise AssertionError(f"retention build: offset {info.first_offset}, expected {i}")
            if len(log.segments) != n:
                raise AssertionError(f"retention build: {len(log.segments)} segments, expected {n}")
    finally:
        manager.shutdown()
    return len(template)


SEGMENT_FILE_SUFFIXES = (".log", ".index", ".timeindex", ".txnindex", ".snapshot")


def _base_offset(name: str) -> int | None:
    head = name.split(".", 1)[0]
    return int(head) if head.isdigit() and name.endswith(SEGMENT_FILE_SUFFIXES) else None


def link_copy(source: Path, target: Path) -> None:
    """A copy of a built log dir: inactive segments' files hard-linked (nothing writes them in place: startup,
    the retention pass and shutdown only read, rename or unlink them), everything else copied. Creating
    tens of thousands of files is what costs; links make a fresh copy per repeat affordable."""

    def copy(src: str, dst: str) -> None:
        path = Path(src)
        base = _base_offset(path.name)
        if base is not None and base < active_base.get(path.parent, -1):
            os.link(src, dst)
        else:
            shutil.copy2(src, dst)

    active_base = {}
    for log_file in source.rglob("*.log"):
        base = _base_offset(log_file.name)
        if base is not None:
            active_base[log_file.parent] = max(active_base.get(log_file.parent, -1), base)
    shutil.copytree(source, target, copy_function=copy)


def tree_state(directory: Path) -> dict[str, tuple[int, int]]:
    """(size, mtime) of every file: the built dirs must come out of every run unchanged."""
    return {str(f.relative_to(directory)): (f.stat().st_size, f.stat().st_mtime_ns) for f in directory.rglob("*")}


def segment_offsets_on_disk(directory: Path, suffix: str) -> list[int]:
    return sorted(int(f.name.split(".", 1)[0]) for f in directory.iterdir() if f.name.endswith(suffix))


def check_retention(manager, topic: str, partitions: int, n: int, after_delete: bool, files_gone: bool) -> None:
    """Every log kept exactly its newer half (or everything), in memory and on disk."""
    half = n // 2
    kept = list(range(half, n)) if after_delete else list(range(n))
    for partition in range(partitions):
        log = manager.get_log(topic, partition)
        where = f"{topic}-{partition}"
        if log.segments.base_offsets != kept:
            raise AssertionError(f"{where}: kept segments {log.segments.base_offsets[:3]}..., expected {kept[:3]}...")
        if log.log_start_offset != kept[0] or log.log_end_offset != n:
            raise AssertionError(f"{where}: log start {log.log_start_offset}, end {log.log_end_offset}")
        if segment_offsets_on_disk(log.directory, ".log") != kept:
            raise AssertionError(f"{where}: .log files on disk do not match the kept segments")
        deleted = segment_offsets_on_disk(log.directory, ".log.deleted")
        expected_deleted = [] if files_gone or not after_delete else list(range(half))
        if deleted != expected_deleted:
            raise AssertionError(f"{where}: {len(deleted)} .log.deleted files, expected {len(expected_deleted)}")
        if files_gone and any(f.name.endswith(".deleted") for f in log.directory.iterdir()):
            raise AssertionError(f"{where}: .deleted files left after file.delete.delay.ms")


def retention_shard_run(
    directory: Path, topic: str, partitions: int, p: Params, profiler: cProfile.Profile | None = None
) -> dict[str, Any]:
    """Start a LogManager on ``directory``; time the steady-state passes, the deleting pass, the file deletion."""
    from kafkalog.manager import LogManager
    from kafkalog.testing import MockTime

    n = p.retention_segments_per_partition
    clock = MockTime(start_ms=NOW_MS)
    manager = LogManager([directory], retention_broker_config(), clock)
    fds_before = open_fds()
    manager.startup()
    try:
        fds_after = open_fds()
        segments = partitions * n
        steady = []
        for _ in range(p.steady_passes):
            elapsed, deleted = timed(manager.cleanup_logs)
            if deleted:
                raise AssertionError(f"steady-state pass deleted {deleted} segments")
            steady.append(elapsed)
        check_retention(manager, topic, partitions, n, after_delete=False, files_gone=False)

        # Expired: now - largest timestamp > retention.ms. Segment i's timestamp is now - (n - i) steps.
        manager.alter_topic_config(topic, {"retention.ms": (n - n // 2) * RETENTION_STEP_MS})
        cleanup = manager.cleanup_logs if profiler is None else lambda: profiler.runcall(manager.cleanup_logs)
        elapsed, deleted = timed(cleanup)
        expected = partitions * (n // 2)
        if deleted != expected:
            raise AssertionError(f"deleting pass removed {deleted} segments, expected {expected}")
        check_retention(manager, topic, partitions, n, after_delete=True, files_gone=False)
        delay = manager.get_log(topic, 0).config.file_delete_delay_ms
        files_s, _ = timed(lambda: clock.advance(delay))
        check_retention(manager, topic, partitions, n, after_delete=True, files_gone=True)
    finally:
        manager.shutdown()
    return {
        "segments": segments,
        "steady_best_s": min(steady),
        "steady_times_s": steady,
        "delete_s": elapsed,
        "deleted": deleted,
        "file_deletion_s": files_s,
        "fds_per_segment": (fds_after - fds_before) / segments if fds_before is not None else None,
    }


def bench_retention(scratch: Scratch, fd_limit: FdLimit, p: Params, rng: random.Random, console: Console):
    n = p.retention_segments_per_partition
    sizes = shard_sizes(p.retention_partitions, n, fd_limit.budget())
    total = p.retention_partitions * n
    console.print(
        f"[dim]manager: building {total:,} segments ({p.retention_partitions} partitions x {n:,}) "
        f"in {len(sizes)} log dir(s)...[/]"
    )
    pristine = [scratch.path("retention-pristine", f"shard-{i}") for i in range(len(sizes))]
    t0 = time.perf_counter()
    batch_bytes = 0
    for i, (directory, partitions) in enumerate(zip(pristine, sizes, strict=True)):
        batch_bytes = build_retention_shard(directory, f"retention-{i}", partitions, p, rng)
    build_s = time.perf_counter() - t0
    pristine_state = [tree_state(d) for d in pristine]

    def run_copy(tag: str, profiler: cProfile.Profile | None = None, only_first: bool = False) -> list[dict]:
        results = []
        for i, (source, partitions) in enumerate(zip(pristine, sizes, strict=True)):
            if only_first and i:
                break
            target = scratch.path(tag, f"shard-{i}")
            link_copy(source, target)
            try:
                results.append(retention_shard_run(target, f"retention-{i}", partitions, p, profiler))
            finally:
                shutil.rmtree(target, ignore_errors=True)
            if tree_state(source) != pristine_state[i]:
                raise AssertionError(f"retention: the built log dir {source} changed through a hard-linked copy")
        return results

    steady_totals, delete_totals, file_totals, fds_per_segment = [], [], [], []
    for r in range(p.retention_repeats):
        console.print(f"[dim]manager: retention passes, repeat {r + 1}/{p.retention_repeats}...[/]")
        shards = run_copy(f"retention-run{r}")
        steady_totals.append(sum(s["steady_best_s"] for s in shards))
        delete_totals.append(sum(s["delete_s"] for s in shards))
        file_totals.append(sum(s["file_deletion_s"] for s in shards))
        fds_per_segment.extend(s["fds_per_segment"] for s in shards if s["fds_per_segment"] is not None)

    console.print("[dim]manager: profiling a deleting retention pass (first log dir)...[/]")
    profiler = cProfile.Profile()
    profiled = run_copy("retention-profile", profiler, only_first=True)[0]
    deleted = p.retention_partitions * (n // 2)
    steady_best, delete_best, files_best = min(steady_totals), min(delete_totals), min(file_totals)
    return {
        "layout": {
            "segments": total,
            "partitions": p.retention_partitions,
            "segments_per_partition": n,
            "batch_bytes": batch_bytes,
            "records_per_segment": 1,
            "log_dirs": len(sizes),
            "partitions_per_log_dir": sizes,
            "fds_per_segment_measured": max(fds_per_segment) if fds_per_segment else None,
            "build_s": build_s,
        },
        "steady_pass": {
            "segments_in_logs": total,
            "segments_deleted": 0,
            "ms_per_pass": steady_best * 1e3,
            "segments_per_s": total / steady_best,
            "best_s": steady_best,
            "times_s": steady_totals,
        },
        "delete_pass": {
            "segments_in_logs": total,
            "segments_deleted": deleted,
            "deleted_fraction": deleted / total,
            "ms_per_pass": delete_best * 1e3,
            "segments_per_s": deleted / delete_best,
            "best_s": delete_best,
            "median_s": statistics.median(delete_totals),
            "times_s": delete_totals,
        },
        "file_deletion": {
            "segments": deleted,
            "ms": files_best * 1e3,
            "segments_per_s": deleted / files_best,
            "best_s": files_best,
            "times_s": file_totals,
        },
        "profile_delete_pass": {
            "segments_deleted": profiled["deleted"],
            **profile_rows(profiler),
        },
    }


# ----- startup -------------------------------------------------------------------------------------


def startup_broker_config(threads: int) -> dict[str, Any]:
    return {"num.recovery.threads.per.data.dir": threads, "log.initial.task.delay.ms": NEVER_MS}


def startup_topics(p: Params) -> list[str]:
    return [f"topic-{t:02d}" for t in range(p.startup_topics)]


def build_startup_dir(directory: Path, p: Params, rng: random.Random) -> dict[str, Any]:
    """The 1,000-partition log dir; return what every startup must find again."""
    from kafkalog.manager import LogManager
    from kafkalog.testing import MockTime

    now = time.time_ns() // 1_000_000
    batch = make_batch(p.startup_records_per_batch, now, rng)
    clock = MockTime(start_ms=now)  # rolls flush in line, no background scheduler thread while building
    manager = LogManager([directory], startup_broker_config(1), clock)
    manager.startup()
    expected: dict[tuple[str, int], tuple[int, int, int]] = {}
    try:
        for topic in startup_topics(p):
            manager.create_topic(topic, p.startup_partitions_per_topic, {"segment.bytes": p.startup_segment_bytes})
            for partition in range(p.startup_partitions_per_topic):
                log = manager.get_log(topic, partition)
                for _ in range(p.startup_batches_per_partition):
                    log.append(batch)
        for topic in startup_topics(p):
            for part in manager.describe_topic(topic).partitions:
                expected[(topic, part.partition)] = (part.log_end_offset, part.size_bytes, part.segments)
    finally:
        manager.shutdown()
    log_bytes = sum(size for _, size, _ in expected.values())
    return {
        "expected": expected,
        "batch_bytes": len(batch),
        "log_bytes": log_bytes,
        "segments": sum(s for _, _, s in expected.values()),
        "files": sum(len(files) for _, _, files in os.walk(directory)),
        "disk_bytes": sum(f.stat().st_size for f in directory.rglob("*") if f.is_file()),
    }


def verify_startup(manager, expected: dict, clean: bool) -> None:
    """Every partition loaded, with its data; recovery point at the end (clean) or 0 (recovered from 0)."""
    from kafkalog.record import iter_batches

    topics = sorted({t for t, _ in expected})
    if manager.topics() != topics:
        raise AssertionError(f"startup: topics {manager.topics()[:3]}..., expected {topics[:3]}...")
    loaded = 0
    for topic in topics:
        for part in manager.describe_topic(topic).partitions:
            leo, size, segments = expected[(topic, part.partition)]
            where = f"{topic}-{part.partition}"
            if (part.log_end_offset, part.size_bytes, part.segments, part.log_start_offset) != (leo, size, segments, 0):
                raise AssertionError(
                    f"{where}: end {part.log_end_offset}, size {part.size_bytes}, {part.segments} segments; "
                    f"expected {leo}, {size}, {segments}"
                )
            log = manager.get_log(topic, part.partition)
            if log.recovery_point != (leo if clean else 0):
                raise AssertionError(f"{where}: recovery point {log.recovery_point} after a clean={clean} startup")
            data = log.read(leo - 1, 1, "log_end", min_one_message=True).records.tobytes()
            last = next(iter_batches(data))
            last.ensure_valid()
            if last.last_offset != leo - 1:
                raise AssertionError(f"{where}: last batch ends at {last.last_offset}, expected {leo - 1}")
            loaded += 1
    if loaded != len(expected):
        raise AssertionError(f"startup loaded {loaded} partitions, expected {len(expected)}")


def make_unclean(directory: Path) -> None:
    """As after a crash: no clean-shutdown marker, no recovery-point checkpoint (recover from offset 0)."""
    for name in (CLEAN_MARKER, RECOVERY_CHECKPOINT):
        (directory / name).unlink()


def startup_run(directory: Path, expected: dict, clean: bool, threads: int) -> float:
    from kafkalog.manager import LogManager

    if not (directory / CLEAN_MARKER).exists():
        raise AssertionError("startup: the previous run did not shut down cleanly")
    if not clean:
        make_unclean(directory)
    manager = LogManager([directory], startup_broker_config(threads))
    elapsed, _ = timed(manager.startup)
    try:
        verify_startup(manager, expected, clean)
    finally:
        manager.shutdown()  # clean: writes the marker and checkpoints for the next run
    return elapsed


def profile_unclean_startup(directory: Path, expected: dict) -> dict[str, Any]:
    from kafkalog.manager import LogManager

    make_unclean(directory)
    manager = LogManager([directory], startup_broker_config(1))
    profiler = common.profiled_startup(manager)
    try:
        verify_startup(manager, expected, clean=False)
    finally:
        manager.shutdown()
    return profile_rows(profiler)


def bench_startup(scratch: Scratch, fd_limit: FdLimit, p: Params, rng: random.Random, console: Console):
    partitions = p.startup_topics * p.startup_partitions_per_topic
    directory = scratch.path("startup")
    console.print(f"[dim]manager: building a log dir of {partitions:,} partitions...[/]")
    t0 = time.perf_counter()
    built = build_startup_dir(directory, p, rng)
    build_s = time.perf_counter() - t0
    need = built["segments"] * FDS_PER_SEGMENT_BUDGET
    if need > fd_limit.budget():
        raise RuntimeError(f"startup needs about {need:,} file descriptors; the limit allows {fd_limit.budget():,}")
    expected = built["expected"]

    runs = [(clean, threads) for clean in (True, False) for threads in p.recovery_threads]
    times: dict[tuple[bool, int], list[float]] = {run: [] for run in runs}
    for r in range(p.startup_repeats):
        console.print(f"[dim]manager: startups, repeat {r + 1}/{p.startup_repeats}...[/]")
        order = runs[r % len(runs) :] + runs[: r % len(runs)]
        for clean, threads in order:
            times[(clean, threads)].append(startup_run(directory, expected, clean, threads))
    console.print("[dim]manager: profiling an unclean startup (1 thread, in line)...[/]")
    profile = profile_unclean_startup(directory, expected)

    def figures(clean: bool, threads: int) -> dict[str, Any]:
        t = times[(clean, threads)]
        best = min(t)
        return {
            "threads": threads,
            "best_s": best,
            "median_s": statistics.median(t),
            "times_s": t,
            "partitions_per_s": partitions / best,
            "segments_per_s": built["segments"] / best,
            "s_per_gb": best / (built["log_bytes"] / GB),
            "mb_per_s": built["log_bytes"] / best / 1e6,
        }

    result = {
        "layout": {
            "partitions": partitions,
            "topics": p.startup_topics,
            "segments": built["segments"],
            "segments_per_partition": built["segments"] / partitions,
            "log_bytes": built["log_bytes"],
            "disk_bytes": built["disk_bytes"],
            "files": built["files"],
            "batch_bytes": built["batch_bytes"],
            "records_per_batch": p.startup_records_per_batch,
            "batches_per_partition": p.startup_batches_per_partition,
            "segment_bytes": p.startup_segment_bytes,
            "build_s": build_s,
        },
        "clean": {str(t): figures(True, t) for t in p.recovery_threads},
        "unclean": {str(t): figures(False, t) for t in p.recovery_threads},
        "profile_unclean_startup": profile,
    }
    one = str(p.recovery_threads[0])
    result["unclean_vs_clean_time"] = result["unclean"][one]["best_s"] / result["clean"][one]["best_s"]
    return result


# ----- report --------------------------------------------------------------------------------------


# ----- create_topic -------------------------------------------------------------------------------


def create_topic_run(directory: Path, partitions: int) -> float:
    """One timed ``LogManager.create_topic`` of ``partitions`` partitions in a fresh log dir (started and shut down
    untimed), checked: every partition has its log and, after the shutdown, its partition.metadata with the topic's
    id (a log writes that file before its first record or when it closes, as Kafka's UnifiedLog does)."""
    from kafkalog.logdir import PartitionMetadataFile
    from kafkalog.manager import LogManager

    manager = LogManager([directory], {"log.initial.task.delay.ms": NEVER_MS})
    manager.startup()
    try:
        seconds, description = common.timed(lambda: manager.create_topic("created", partitions))
        if len(manager.describe_topic("created").partitions) != partitions:
            raise AssertionError("create_topic: wrong partition count")
    finally:
        manager.shutdown()
    for p in range(partitions):
        read = PartitionMetadataFile(directory / f"created-{p}").read()
        if read.replace("-", "") != str(description.topic_id).replace("-", ""):
            raise AssertionError(f"created-{p}: partition.metadata holds {read}, not {description.topic_id}")
    return seconds


def bench_create_topic(scratch: Scratch, p: Params, console: Console) -> dict[str, Any]:
    """create_topic of one topic with ``p.create_partitions`` partitions (the broker's CreateTopics on one node):
    best of ``p.create_repeats``, each in a new log dir."""
    times = []
    for i in range(p.create_repeats):
        directory = scratch.path(f"create-{i}")
        directory.mkdir(parents=True)
        times.append(create_topic_run(directory, p.create_partitions))
        shutil.rmtree(directory)
    best = min(times)
    console.print(f"create_topic {p.create_partitions:,} partitions: best {best:.2f} s of {times}")
    return {
        "partitions": p.create_partitions,
        "times_s": times,
        "best_s": best,
        "partitions_per_s": p.create_partitions / best,
    }


def machine_info(scratch: Scratch, fd_limit: FdLimit) -> dict[str, Any]:
    return common.platform_info() | {
        "scratch_dir": str(scratch.root.parent),
        "scratch_same_device_as_repo": scratch.same_device_as_repo(),
        "fd_limit": fd_limit.soft,
    }


def print_profile(title: str, prof: dict[str, Any], console: Console, rows: int = 10) -> None:
    table = Table(title=title, caption=f"total {prof['total_s']:.2f} s under cProfile")
    for col in ("function", "calls", "own s", "own share", "cum s", "cum share"):
        table.add_column(col, justify="left" if col == "function" else "right")
    for row in prof["by_own_time"][:rows]:
        table.add_row(
            row["function"],
            f"{row['calls']:,}",
            f"{row['tottime_s']:.3f}",
            f"{row['tottime_share']:.0%}",
            f"{row['cumtime_s']:.3f}",
            f"{row['cumtime_share']:.0%}",
        )
    table.add_section()
    for row in prof["kafkalog_by_cumulative_time"][:rows]:
        table.add_row(
            f"[dim]cum[/] {row['function']}",
            f"{row['calls']:,}",
            f"{row['tottime_s']:.3f}",
            f"{row['tottime_share']:.0%}",
            f"{row['cumtime_s']:.3f}",
            f"{row['cumtime_share']:.0%}",
        )
    console.print(table)


def print_tables(result: dict[str, Any], console: Console) -> None:
    ret = result["retention"]
    lay = ret["layout"]
    dirs = f"; {lay['log_dirs']} log dirs run one after another (fd limit)" if lay["log_dirs"] > 1 else ""
    table = Table(
        title=f"Retention pass: LogManager.cleanup_logs() over {lay['segments']:,} segments "
        f"({lay['partitions']} partitions x {lay['segments_per_partition']:,})",
        caption=f"best of {len(ret['delete_pass']['times_s'])} repeat(s){dirs}; page cache warm",
    )
    for col in ("pass", "segments deleted", "ms / pass", "segments/s"):
        table.add_column(col, justify="left" if col == "pass" else "right")
    steady, delete, files = ret["steady_pass"], ret["delete_pass"], ret["file_deletion"]
    table.add_row(
        "steady state: nothing deletable",
        "0",
        f"{steady['ms_per_pass']:,.2f}",
        f"{steady['segments_per_s']:,.0f} held",
    )
    table.add_row(
        "older half expired (rename to .deleted)",
        f"{delete['segments_deleted']:,}",
        f"{delete['ms_per_pass']:,.1f}",
        f"{delete['segments_per_s']:,.0f} deleted",
    )
    table.add_row(
        "  then the file deletion (file.delete.delay.ms later)",
        f"{files['segments']:,}",
        f"{files['ms']:,.1f}",
        f"{files['segments_per_s']:,.0f} deleted",
    )
    console.print(table)

    st = result["startup"]
    lay = st["layout"]
    table = Table(
        title=f"LogManager startup: {lay['partitions']:,} partitions, {lay['segments']:,} segments, "
        f"{lay['log_bytes'] / 1e6:,.1f} MB of records",
        caption=f"best of {len(st['clean'][next(iter(st['clean']))]['times_s'])} run(s); unclean = no "
        f"{CLEAN_MARKER}, no {RECOVERY_CHECKPOINT} (every segment recovered); MB = 1e6 B, GB = 1e9 B",
    )
    for col in ("shutdown before", "recovery threads", "startup s", "partitions/s", "segments/s", "s/GB", "MB/s"):
        table.add_column(col, justify="left" if col == "shutdown before" else "right")
    for kind in ("clean", "unclean"):
        for threads, fig in st[kind].items():
            table.add_row(
                kind,
                threads,
                f"{fig['best_s']:.2f}",
                f"{fig['partitions_per_s']:,.0f}",
                f"{fig['segments_per_s']:,.0f}",
                f"{fig['s_per_gb']:,.1f}",
                f"{fig['mb_per_s']:,.1f}",
            )
    console.print(table)

    ct = result.get("create_topic")
    if ct:
        table = Table(
            title=f"LogManager.create_topic: one topic of {ct['partitions']:,} partitions, one log dir",
            caption=f"best of {len(ct['times_s'])} run(s), each in a new dir; partition.metadata files checked",
        )
        for col in ("partitions", "create_topic s", "partitions/s"):
            table.add_column(col, justify="right")
        table.add_row(f"{ct['partitions']:,}", f"{ct['best_s']:.2f}", f"{ct['partitions_per_s']:,.0f}")
        console.print(table)

    print_profile(
        f"cProfile: deleting retention pass ({ret['profile_delete_pass']['segments_deleted']:,} segments), "
        "top by own time / kafkalog by cumulative",
        ret["profile_delete_pass"],
        console,
    )
    print_profile(
        f"cProfile: unclean startup of {lay['partitions']:,} partitions (1 thread, in line), "
        "top by own time / kafkalog by cumulative",
        st["profile_unclean_startup"],
        console,
    )


def run(*, quick: bool = False, results_dir: Path, console: Console | None = None) -> dict[str, Any]:
    """Run the log manager benchmark, write ``results_dir/manager.json``, print the tables; return the result."""
    console = console or Console()
    p = QUICK if quick else FULL
    started = time.perf_counter()
    rng = random.Random(p.seed)
    scratch = Scratch()
    fd_limit = FdLimit()
    try:
        retention = bench_retention(scratch, fd_limit, p, rng, console)
        startup = bench_startup(scratch, fd_limit, p, rng, console)
        create = bench_create_topic(scratch, p, console)
        machine = machine_info(scratch, fd_limit)
    finally:
        scratch.cleanup()
        fd_limit.restore()

    result = {
        "benchmark": "manager",
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "quick": quick,
        "machine": machine,
        "parameters": {
            **asdict(p),
            "key_bytes": KEY_BYTES,
            "value_bytes": VALUE_BYTES,
            "statistic": "best (minimum wall time, time.perf_counter) of the repeats; garbage collected before "
            "each timed call",
            "retention": "cleanup_logs() with a MockTime clock (record timestamps 1 s apart, the newest at now); "
            "steady state: retention.ms 10^12 (nothing expires); deleting: retention.ms = half the logs' span, "
            "so segments [0, n/2) of every log expire; file deletion: MockTime advanced by file.delete.delay.ms, "
            "running the scheduled deletes. Each repeat on a fresh copy of the built dirs",
            "startup": "LogManager(dir, {num.recovery.threads.per.data.dir: t}).startup() with the real clock; "
            "clean: after a clean shutdown; unclean: .kafka_cleanshutdown and recovery-point-offset-checkpoint "
            "removed first (the indexes stay as a clean shutdown left them); verified, then shut down cleanly "
            "(untimed). The periodic tasks are kept from running (log.initial.task.delay.ms 10^12)",
            "profiles": "cProfile of one deleting pass (first log dir) and of one unclean startup with the "
            "recovery pool replaced by an in-thread executor",
            "mb": "1 MB = 1e6 bytes; 1 GB = 1e9 bytes",
        },
        "retention": retention,
        "startup": startup,
        "create_topic": create,
        "elapsed_s": time.perf_counter() - started,
    }
    return common.finish(results_dir, "manager", result, console, print_tables, machine["scratch_dir"])
