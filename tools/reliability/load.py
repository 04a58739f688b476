"""The load row of ``make reliability``: many partitions, many threads, retention and the cleaner, bounded.

``run_load(config)`` starts ``python -m tools.reliability.load --child`` (a fresh process, so its descriptors,
memory maps and RSS are this test's alone) which runs a real-clock ``LogManager`` over two log dirs with:

- ``load``: ``partitions`` partitions, ``cleanup.policy=delete`` with ``retention.bytes`` (size retention); a hot
  set (``hot_fraction`` of them) takes ``hot_share`` of the bytes, the rest is spread over every partition;
- ``expiring``: a few partitions with a short ``retention.ms`` (time retention, which also rolls the active
  segment once everything in it has expired);
- ``compacted``: a few ``cleanup.policy=compact`` partitions with a small key space, cleaned by the log cleaner
  thread (``log.cleaner.enable=true``) all through the run;

``appenders`` threads append self-checking records (paced by one token bucket per class of partition: at most
its share of ``max_bytes_per_s``, in bursts of at most ``BURST_S`` of it; round robin within the class, so that a
partition's byte rate is, on average, its class's over its partition count) while
``readers`` threads fetch and check records at random offsets and look up offsets by timestamp. A sampler thread
counts ``/proc/self/fd``, ``/proc/self/maps`` lines and ``VmRSS`` every ``sample_ms`` (the parent counts the
child's descriptors and maps every 100 ms too, without waiting for the child's GIL); a watchdog dumps every
thread's stack (faulthandler) and fails the run if the workers, the final checks or the shutdown do not finish
in time (a deadlock). At the end every acknowledged record must be readable byte for byte, or below the log
start offset (deleted by retention), or, in the compacted topic, superseded by a later record with its key.
No descriptor and no mapping may point at an unlinked file at any sample; one open on a ``.deleted`` file (its
segment waiting for file.delete.delay.ms) must be gone one delay later; after the shutdown none may point into
the log dirs at all, and the descriptor count must be back at its baseline.

The bounds are predictions from the configuration and from what the implementation holds open, computed
before the run (``predict``):

- a segment holds one descriptor (its ``.log``; the ``.txnindex`` only once the segment has an aborted
  transaction, never here) and two mappings (``.index`` and ``.timeindex``, opened lazily as Kafka's
  LazyIndex, kept until the segment is closed or deleted; the mappings keep no descriptor);
- segment files of one partition at any moment ``N_p <= min(E_p, 1 + K + G + Q)``, with ``S`` = segment.bytes,
  ``b`` = the largest batch, ``r_p`` = the partition's byte rate (its class's share of ``max_bytes_per_s`` over
  the class's partitions; every window below gets ``BURST_S`` more for a bucket's burst), ``T`` = the run,
  ``I`` = the retention check interval, ``L`` = the lag allowed to a retention pass (checked: the measured gap
  between passes must stay under ``I + L``), ``D`` = file.delete.delay.ms, and
  ``rolls(x) = floor((x + b) / (S - b))`` (a segment is rolled only past ``S - b`` bytes): ever created
  ``E_p = 1 + rolls(r_p T) + X`` (``X`` = rolls forced by time retention, ``T / retention.ms + 1``); kept after a
  pass ``K = floor((R + S) / (S - b))`` inactive ones (size retention stops once the excess is below the oldest
  segment); rolled until the next pass ``G = rolls(r_p (I + L)) + 1``; renamed ``.deleted`` and still open for
  ``D``: ``Q = rolls(S + r_p (D + I + L)) + 2``. For the compacted topic: live segments
  ``V = min(E_p, 1 + C + rolls(r_p (B + L_c)) + 1)``, where ``C = 2 ceil(keys (61 + record) / S) + 1`` is what
  the last clean kept (each key's record in a batch of its own at worst, no two neighbouring segments small enough
  to share one, or they would have been grouped), ``B`` = log.cleaner.backoff.ms and ``L_c`` the lag allowed
  between two cleans of a partition (checked as well); a clean needs a roll since the last one, so at most
  ``rolls(r_p D) + 1`` cleans removed at most ``V`` segments each in the last ``D``: ``N_p <= V (rolls(r_p D) + 2)``;
- ``fds <= fds_base + sum(N_p) + 2 * threads`` (``fds_base`` measured with the manager started and no partition;
  the second term is what threads open for a moment: a checkpoint, an index file being mapped, the cleaner's
  source map and its ``.cleaned`` segment);
- ``maps <= maps_base + 2 * sum(N_p) + 2 * threads + 16 * cpus + 64`` (two per segment, a stack and a guard per
  thread, glibc's per-thread malloc arenas, and up to 64 large allocations that malloc maps on their own);
- ``RSS <= RSS_base + 1.25 * (P * c_partition + sum(N_p) * (c_segment + 2 pages) + dedupe buffer + cleaner
  I/O: 2 * io buffer + 8 MiB filter run + 2 * S mapped + readers * 4 * fetch bytes + threads * 256 KiB +
  24 B * max_appends) + 16 MiB``, where ``c_partition`` and ``c_segment`` are the Python bytes one partition and
  one more segment take, measured with tracemalloc on 64 partitions before the run (and extrapolated to all of
  them), the two pages are each segment's resident index pages, and 25 % + 16 MiB covers the allocator.
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import gc
import itertools
import json
import logging
import math
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import tracemalloc
from array import array
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

PAGE = 4096
BATCH_OVERHEAD = 61  # a v2 batch header
RECORD_OVERHEAD = 21  # the most a record of these sizes adds to its key and value (varints, attributes, deltas)
KEY_BYTES = 8
BURST_S = 0.1  # a class's token bucket holds at most this many seconds of its byte rate


@dataclass(frozen=True)
class LoadConfig:
    """What the load test runs; every bound is predicted from these values (see the module docstring)."""

    partitions: int = 10_000
    hot_fraction: float = 0.05
    hot_share: float = 0.6
    expiring_partitions: int = 50
    expiring_share: float = 0.05
    compacted_partitions: int = 2
    compacted_share: float = 0.05
    keys: int = 100
    log_dirs: int = 2
    appenders: int = 4
    readers: int = 2
    duration_s: float = 60.0
    max_appends: int = 1_000_000
    max_bytes_per_s: int = 1_500_000
    value_bytes: tuple[int, int] = (50, 400)
    max_records: int = 5
    segment_bytes: int = 16 * 1024
    segment_index_bytes: int = 64 * 1024
    retention_bytes: int = 32 * 1024
    expiring_retention_ms: int = 2_000
    retention_check_ms: int = 500
    retention_lag_ms: int = 5_000
    file_delete_delay_ms: int = 1_000
    cleaner_backoff_ms: int = 200
    clean_lag_ms: int = 10_000
    dedupe_buffer_bytes: int = 16 << 20
    cleaner_io_buffer_bytes: int = 512 << 10
    fetch_bytes: int = 16 * 1024
    sample_ms: int = 200
    watchdog_s: float = 120.0
    seed: int = 1

    @property
    def max_batch_bytes(self) -> int:
        return BATCH_OVERHEAD + self.max_records * (KEY_BYTES + self.value_bytes[1] + RECORD_OVERHEAD)

    @property
    def hot_partitions(self) -> int:
        return max(1, math.ceil(self.partitions * self.hot_fraction))

    @property
    def cold_share(self) -> float:
        return 1.0 - self.hot_share - self.expiring_share - self.compacted_share

    @property
    def threads(self) -> int:
        """Every thread of the child: main, sampler, workers, the scheduler, the cleaner, recovery, spare."""
        return 1 + 1 + self.appenders + self.readers + 1 + 1 + 2


FULL = LoadConfig()
QUICK = replace(FULL, partitions=1_000, hot_fraction=0.1, expiring_partitions=20, duration_s=12.0, watchdog_s=90.0)


# ----- the prediction --------------------------------------------------------------------------------------------
@dataclass
class Bounds:
    """Predicted ceilings, and the terms they were made of (reported with the result)."""

    segment_files: int
    fds: int
    maps: int
    rss_bytes: int
    terms: dict = field(default_factory=dict)


def class_shares(config: LoadConfig) -> dict[str, float]:
    """The share of ``max_bytes_per_s`` each class of partition gets (each has its own token bucket)."""
    return {
        "hot": config.hot_share,
        "cold": config.cold_share,
        "expiring": config.expiring_share,
        "compacted": config.compacted_share,
    }


def _rolls(config: LoadConfig, nbytes: float) -> int:
    """How many rolls ``nbytes`` appended to one partition can cause: a segment rolls only past S - b bytes."""
    b = config.max_batch_bytes
    return int((nbytes + b) // (config.segment_bytes - b))


def segment_files_per_partition(config: LoadConfig) -> dict[str, tuple[int, int]]:
    """(partitions, the most segment files one of them can have open at once) for each class of partition."""
    c, t = config.max_bytes_per_s, config.duration_s
    hot, parts = config.hot_partitions, config.partitions
    cold_rate = c * config.cold_share / parts
    rates = {
        "hot": (hot, c * config.hot_share / hot + cold_rate),
        "cold": (parts - hot, cold_rate),
        "expiring": (config.expiring_partitions, c * config.expiring_share / config.expiring_partitions),
        "compacted": (config.compacted_partitions, c * config.compacted_share / config.compacted_partitions),
    }
    window = (config.retention_check_ms + config.retention_lag_ms) / 1000 + BURST_S  # a burst on top of the rate
    delay = config.file_delete_delay_ms / 1000 + BURST_S
    s, b = config.segment_bytes, config.max_batch_bytes
    out = {}
    for name, (count, rate) in rates.items():
        ever = 1 + _rolls(config, rate * (t + BURST_S))
        if name == "compacted":
            # kept by the last clean: every key's record, each in a batch of its own at worst, in segments of
            # which no two neighbours would fit in one (or they would have been grouped)
            record = KEY_BYTES + config.value_bytes[1] + RECORD_OVERHEAD
            cleaned = 2 * math.ceil(config.keys * (BATCH_OVERHEAD + record) / s) + 1
            clean_window = (config.cleaner_backoff_ms + config.clean_lag_ms) / 1000 + BURST_S
            live = min(ever, 1 + cleaned + _rolls(config, rate * clean_window) + 1)
            out[name] = (count, live * (_rolls(config, rate * delay) + 2))
            continue
        if name == "expiring":
            ever += int(t * 1000 // config.expiring_retention_ms) + 1
        kept = (config.retention_bytes + s) // (s - b)
        grown = _rolls(config, rate * window) + 1
        pending = _rolls(config, s + rate * (delay + window)) + 2
        out[name] = (count, min(ever, 1 + kept + grown + pending))
    return out


def predict(config: LoadConfig, base: dict, c_partition: float, c_segment: float) -> Bounds:
    """The bounds of the module docstring, from the configuration, the baseline and the per-object costs."""
    per_class = segment_files_per_partition(config)
    segments = sum(count * n for count, n in per_class.values())
    threads = config.threads
    fds = base["fds"] + segments + 2 * threads
    maps = base["maps"] + 2 * segments + 2 * threads + 16 * (os.cpu_count() or 1) + 64
    total_partitions = config.partitions + config.expiring_partitions + config.compacted_partitions
    index_pages = 2 * PAGE  # entries per segment: S / index.interval.bytes + 1 = 5 -> one page per index
    dynamic = (
        total_partitions * c_partition
        + segments * (c_segment + index_pages)
        + config.dedupe_buffer_bytes
        + 2 * config.cleaner_io_buffer_bytes
        + (8 << 20)
        + 2 * config.segment_bytes
        + config.readers * 4 * config.fetch_bytes
        + threads * (256 << 10)
        + 24 * config.max_appends
    )
    rss = int(base["rss"] + 1.25 * dynamic + (16 << 20))
    terms = {
        "segment files per partition": {k: list(v) for k, v in per_class.items()},
        "c_partition bytes": round(c_partition),
        "c_segment bytes": round(c_segment),
        "dynamic bytes": int(dynamic),
    }
    return Bounds(segments, fds, maps, rss, terms)


# ----- /proc -----------------------------------------------------------------------------------------------------
def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def map_count() -> int:
    with open("/proc/self/maps", "rb") as f:
        return f.read().count(b"\n")


def status_kib(field_name: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
    return 0


def fd_targets() -> list[str]:
    out = []
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # closed in between (the listing's own descriptor, another thread's)
            out.append(os.readlink(f"/proc/self/fd/{name}"))
    return out


def mapped_files() -> list[str]:
    with open("/proc/self/maps") as f:
        return [parts[5].rstrip("\n") for line in f if len(parts := line.split(maxsplit=5)) == 6 and "/" in parts[5]]


def stale(paths: list[str], root: str) -> tuple[list[str], list[str]]:
    """(unlinked files, ``.deleted`` files) among descriptor or mapping targets under the directory ``root``."""
    root = os.path.join(root, "")
    ours = [p for p in paths if p.startswith(root)]
    return [p for p in ours if p.endswith("(deleted)")], [p for p in ours if ".deleted" in p]


# ----- the child ---------------------------------------------------------------------------------------------------
def make_value(tag: int, seq: int, length: int) -> bytes:
    from .runner import make_value as reliability_value

    return reliability_value(tag, seq, length)


class TokenBucket:
    """At most ``rate`` bytes a second over all threads, in bursts of at most ``burst`` bytes."""

    def __init__(self, rate: float, burst: float) -> None:
        self.rate = rate
        self.burst = burst
        self._tokens = 0.0
        self._last = time.monotonic()
        self._lock = threading.Lock()

    def take(self, n: int, stop: threading.Event) -> bool:
        while not stop.is_set():
            with self._lock:
                now = time.monotonic()
                self._tokens = min(self.burst, self._tokens + (now - self._last) * self.rate)
                self._last = now
                if self._tokens >= n:
                    self._tokens -= n
                    return True
                wait = (n - self._tokens) / self.rate
            time.sleep(min(wait, 0.05))
        return False


class Counting(logging.Handler):
    """Counts retention deletions and cleans from kafkalog's log lines; keeps every warning and error."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.deleted_segments = 0
        self.cleans = 0
        self.problems: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.msg
        if msg.startswith("Deleting %d segments"):
            self.deleted_segments += record.args[0]
        elif msg.startswith("Cleaned log"):
            self.cleans += 1
        elif record.levelno >= logging.WARNING:
            self.problems.append(f"{record.levelname} {record.name}: {record.getMessage()[:300]}")


def _broker(config: LoadConfig, dirs: list[Path]) -> dict:
    return {
        "log.dirs": ",".join(map(str, dirs)),
        "log.retention.check.interval.ms": config.retention_check_ms,
        "log.initial.task.delay.ms": config.retention_check_ms,
        "log.segment.delete.delay.ms": config.file_delete_delay_ms,
        "log.cleaner.enable": "true",
        "log.cleaner.backoff.ms": config.cleaner_backoff_ms,
        "log.cleaner.dedupe.buffer.size": config.dedupe_buffer_bytes,
        "log.cleaner.io.buffer.size": config.cleaner_io_buffer_bytes,
        "log.flush.offset.checkpoint.interval.ms": 5_000,
        "log.flush.start.offset.checkpoint.interval.ms": 5_000,
        "num.recovery.threads.per.data.dir": 1,
    }


def _topic_configs(config: LoadConfig) -> dict[str, dict]:
    common = {"segment.bytes": config.segment_bytes, "segment.index.bytes": config.segment_index_bytes}
    return {
        "load": common | {"retention.bytes": config.retention_bytes, "retention.ms": -1},
        "expiring": common | {"retention.ms": config.expiring_retention_ms},
        "compacted": common
        | {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0.01, "delete.retention.ms": 1000},
    }


class Acks:
    """Per partition, every acknowledged append as (first offset, tag, record count), in int64 arrays."""

    def __init__(self) -> None:
        self.by_partition: dict[tuple[str, int], array] = {}
        self._lock = threading.Lock()

    def add(self, tp: tuple[str, int], first: int, tag: int, n: int) -> None:
        entries = self.by_partition.get(tp)
        if entries is None:
            with self._lock:
                entries = self.by_partition.setdefault(tp, array("q"))
        entries.extend((first, tag, n))  # one C call under the GIL: entries stay whole

    def records(self, tp: tuple[str, int]):
        entries = self.by_partition.get(tp, array("q"))
        for i in range(0, len(entries), 3):
            first, tag, n = entries[i : i + 3]
            for j in range(n):
                yield first + j, tag + j


def key_of(seq: int, keys: int) -> bytes:
    """A compacted record's key follows from its sequence number, so the final check knows every acked key."""
    return b"k%07d" % ((seq * 2654435761) % keys)


def _tag(topic: str, partition: int) -> int:
    """The ``run`` field of a record's value: which partition it was written to."""
    return {"load": 0, "expiring": 1, "compacted": 2}[topic] * 1_000_000 + partition


class Child:
    """The load run inside the child process."""

    def __init__(self, config: LoadConfig, root: Path) -> None:
        self.config = config
        self.root = root
        self.result: dict = {"failures": [], "config": asdict(config)}
        self.stop = threading.Event()
        self.acks = Acks()
        self.errors: list[str] = []
        self.counters = {
            "appends": 0,
            "records": 0,
            "bytes": 0,
            "reads": 0,
            "records_read": 0,
            "out_of_range": 0,
            "lookups": 0,
        }
        self._count_lock = threading.Lock()
        self.peaks = {"fds": 0, "maps": 0, "rss_kib": 0, "threads": 0, "unlinked": 0, "samples": 0}
        self.unlinked_seen: list[str] = []
        self.retention_passes: list[tuple[float, float]] = []
        self.clean_times: dict = {}  # partition -> when its last clean ended
        self.max_clean_gap_s = 0.0

    def fail(self, message: str) -> None:
        self.result["failures"].append(message)

    def bump(self, **counts: int) -> None:
        with self._count_lock:
            for key, n in counts.items():
                self.counters[key] += n

    # ----- workers ---------------------------------------------------------------------------------------------
    def appender(self, index: int, manager, buckets: dict[str, TokenBucket], turns: dict) -> None:
        config = self.config
        rng = random.Random(config.seed * 1000 + index)
        classes, weights = zip(*class_shares(config).items(), strict=True)
        seq = 0
        try:
            while not self.stop.is_set():
                with self._count_lock:
                    if self.counters["appends"] >= config.max_appends:
                        break
                    self.counters["appends"] += 1
                kind = rng.choices(classes, weights)[0]
                turn = next(turns[kind])  # round robin within the class: every partition's rate is known
                if kind == "hot":
                    topic, partition = "load", turn % config.hot_partitions
                elif kind == "cold":
                    topic, partition = "load", turn % config.partitions
                elif kind == "expiring":
                    topic, partition = "expiring", turn % config.expiring_partitions
                else:
                    topic, partition = "compacted", turn % config.compacted_partitions
                n = rng.randint(1, config.max_records)
                tag = (index << 40) | seq
                values = [
                    make_value(_tag(topic, partition), tag + j, rng.randint(*config.value_bytes)) for j in range(n)
                ]
                keys = [key_of(tag + j, config.keys) for j in range(n)] if topic == "compacted" else [None] * n
                size = BATCH_OVERHEAD + sum(
                    len(v) + RECORD_OVERHEAD + (KEY_BYTES if k else 0) for k, v in zip(keys, values, strict=True)
                )
                if not buckets[kind].take(size, self.stop):
                    break
                info = manager.get_log(topic, partition).append(list(zip(keys, values, strict=True)))
                self.acks.add((topic, partition), info.first_offset, tag, n)
                seq += n
                self.bump(records=n, bytes=info.valid_bytes if info.valid_bytes > 0 else size)
        except Exception:
            self.errors.append(f"appender {index}: {traceback.format_exc()[-2000:]}")
            self.stop.set()

    def reader(self, index: int, manager) -> None:
        from kafkalog.errors import OffsetOutOfRangeError

        from .runner import value_key, value_ok

        config = self.config
        rng = random.Random(config.seed * 7919 + index)
        try:
            while not self.stop.is_set():
                r = rng.random()
                if r < 0.5:
                    topic, partition = "load", rng.randrange(config.hot_partitions)
                elif r < 0.8:
                    topic, partition = "load", rng.randrange(config.partitions)
                elif r < 0.9:
                    topic, partition = "expiring", rng.randrange(config.expiring_partitions)
                else:
                    topic, partition = "compacted", rng.randrange(config.compacted_partitions)
                lg = manager.get_log(topic, partition)
                start, end = lg.log_start_offset, lg.high_watermark
                if end <= start:
                    time.sleep(0.001)
                    continue
                if rng.random() < 0.1:
                    lg.offset_for_timestamp(int(time.time() * 1000) - rng.randrange(5000))
                    self.bump(lookups=1)
                    continue
                offset = rng.randrange(start, end)
                try:
                    fetch = lg.read(offset, config.fetch_bytes)
                    batches = list(fetch.records.batches())
                except OffsetOutOfRangeError:
                    self.bump(out_of_range=1)  # retention moved the log start past it in between
                    continue
                n = 0
                for batch in batches:
                    batch.ensure_valid()
                    for record in batch:
                        n += 1
                        if not value_ok(record.value) or value_key(record.value)[0] != _tag(topic, partition):
                            self.errors.append(f"reader {index}: bad record at {topic}-{partition}@{record.offset}")
                            self.stop.set()
                if not batches or batches[0].last_offset < offset:
                    self.errors.append(f"reader {index}: read of {topic}-{partition}@{offset} returned nothing")
                self.bump(reads=1, records_read=n)
        except Exception:
            self.errors.append(f"reader {index}: {traceback.format_exc()[-2000:]}")
            self.stop.set()

    def sampler(self, manager) -> None:
        root = str(self.root)
        while not self.stop.wait(self.config.sample_ms / 1000):
            self.sample(root, manager)

    def sample(self, root: str, manager) -> None:
        peaks = self.peaks
        peaks["samples"] += 1
        peaks["fds"] = max(peaks["fds"], open_fds())
        peaks["maps"] = max(peaks["maps"], map_count())
        peaks["rss_kib"] = max(peaks["rss_kib"], status_kib("VmRSS"))
        peaks["threads"] = max(peaks["threads"], threading.active_count())
        if peaks["samples"] % 5 == 0:  # the full scans cost more: every fifth sample
            unlinked = stale(fd_targets(), root)[0] + stale(mapped_files(), root)[0]
            peaks["unlinked"] = max(peaks["unlinked"], len(unlinked))
            if unlinked and len(self.unlinked_seen) < 5:
                self.unlinked_seen += unlinked[:5]

    # ----- phases ----------------------------------------------------------------------------------------------
    def calibrate(self, manager) -> tuple[float, float]:
        """Python bytes per partition (created, one append) and per extra segment (one roll), on 64 partitions.

        Measured twice, the second time kept: the first pays for lazy imports and caches."""
        self._calibrate_once(manager)
        time.sleep(self.config.file_delete_delay_ms / 1000 + 0.3)  # the first topic's dir goes
        return self._calibrate_once(manager)

    def _calibrate_once(self, manager) -> tuple[float, float]:
        n = 64
        gc.collect()
        tracemalloc.start()
        t0 = tracemalloc.get_traced_memory()[0]
        manager.create_topic("calibration", n, _topic_configs(self.config)["load"])
        for p in range(n):
            manager.get_log("calibration", p).append([(None, b"x" * 100)])
        gc.collect()
        t1 = tracemalloc.get_traced_memory()[0]
        for p in range(n):
            lg = manager.get_log("calibration", p)
            lg.roll()
            lg.append([(None, b"x" * 100)])
        gc.collect()
        t2 = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        manager.delete_topic("calibration")
        return (t1 - t0) / n, (t2 - t1) / n

    def warm_up(self, manager) -> None:
        """Import and compile (numba, from its cache) every path the run uses, so the baseline includes them."""
        from .runner import value_ok

        manager.create_topic("warm-up", 1, _topic_configs(self.config)["compacted"])
        lg = manager.get_log("warm-up")
        for i in range(50):
            lg.append([(b"k%07d" % (i % 5), make_value(9, i, 300))])
            if i % 10 == 9:
                lg.roll()
        manager.clean_once()
        for batch in lg.read(lg.log_start_offset).records.batches():
            for record in batch:
                value_ok(record.value)
        lg.offset_for_timestamp(0)
        manager.delete_topic("warm-up")

    def run(self) -> dict:
        """Every phase, then the checks that need the manager shut down."""
        from kafkalog.manager import LogManager

        config, result = self.config, self.result
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < hard:  # as a broker's service file does; the bounds are checked against this limit
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        result["rlimit_nofile"] = hard
        result["max_map_count"] = int(Path("/proc/sys/vm/max_map_count").read_text())
        counting = Counting()
        kafkalog_log = logging.getLogger("kafkalog")
        kafkalog_log.setLevel(logging.INFO)
        kafkalog_log.addHandler(counting)
        kafkalog_log.propagate = False
        dirs = [self.root / f"dir{i}" for i in range(config.log_dirs)]
        started = time.monotonic()
        manager = LogManager(dirs, _broker(config, dirs))
        manager.startup()
        try:
            base = self.phases(manager)
        finally:
            t = time.monotonic()
            shut_down = self._with_watchdog(manager.shutdown, "shutdown")
            result["shutdown_s"] = round(time.monotonic() - t, 1)
        if base is None or not shut_down:
            return result
        self.after_shutdown(base)
        result["counting"] = {"segments_deleted": counting.deleted_segments, "cleans": counting.cleans}
        result["log_problems"] = counting.problems[:20]
        if counting.problems:
            self.fail(f"{len(counting.problems)} warnings or errors logged, first: {counting.problems[0]}")
        if counting.deleted_segments == 0:
            self.fail("retention deleted no segment: the run did not exercise it")
        if counting.cleans == 0:
            self.fail("the log cleaner cleaned no log: the run did not exercise it")
        result["elapsed_s"] = round(time.monotonic() - started, 1)
        return result

    def phases(self, manager) -> dict | None:
        """Warm up, calibrate, measure the baseline, predict, create the topics, load, verify; return the baseline
        (None when the configuration cannot fit this machine's limits)."""
        config, result = self.config, self.result
        self.warm_up(manager)
        c_partition, c_segment = self.calibrate(manager)
        time.sleep(config.file_delete_delay_ms / 1000 + 0.3)  # the deleted topics' dirs go
        gc.collect()
        base = {"fds": open_fds(), "maps": map_count(), "rss": status_kib("VmRSS") * 1024}
        bounds = predict(config, base, c_partition, c_segment)
        result["base"] = base
        result["bounds"] = asdict(bounds)
        if bounds.fds > result["rlimit_nofile"]:
            self.fail(f"the configuration needs up to {bounds.fds} descriptors, the limit is {result['rlimit_nofile']}")
        if bounds.maps > result["max_map_count"]:
            self.fail(
                f"the configuration needs up to {bounds.maps} maps, vm.max_map_count is {result['max_map_count']}"
            )
        if result["failures"]:
            return None
        t = time.monotonic()
        topics = _topic_configs(config)
        manager.create_topic("load", config.partitions, topics["load"])
        manager.create_topic("expiring", config.expiring_partitions, topics["expiring"])
        manager.create_topic("compacted", config.compacted_partitions, topics["compacted"])
        result["create_s"] = round(time.monotonic() - t, 1)
        self._watch_background(manager)
        self.load(manager)
        if not result["failures"]:
            self.settle_and_verify(manager)
        return base

    def _watch_background(self, manager) -> None:
        """Record when each retention pass starts and ends, and when each clean of a partition ends (to check the
        lags the bounds allow)."""
        cleanup_logs, record = manager.cleanup_logs, manager.cleaner._record

        def timed_cleanup() -> int:
            start = time.monotonic()
            try:
                return cleanup_logs()
            finally:
                self.retention_passes.append((start, time.monotonic()))

        def timed_record(tp, *args) -> None:
            now = time.monotonic()
            if self.stop.is_set():
                self.clean_times.clear()  # after the load there is nothing left to clean: no gap to measure
            elif tp in self.clean_times:
                self.max_clean_gap_s = max(self.max_clean_gap_s, now - self.clean_times[tp])
            self.clean_times[tp] = now
            record(tp, *args)

        manager.cleanup_logs = timed_cleanup
        manager.cleaner._record = timed_record

    def _with_watchdog(self, fn, what: str, timeout: float | None = None) -> bool:
        """Run ``fn`` in a thread; on timeout dump every stack (a deadlock) and fail."""
        box: list[BaseException] = []

        def target() -> None:
            try:
                fn()
            except BaseException as e:
                box.append(e)

        thread = threading.Thread(target=target, name=f"load-{what}", daemon=True)
        thread.start()
        thread.join(timeout or self.config.watchdog_s)
        if thread.is_alive():
            self.deadlock(what)
            return False
        if box:
            self.fail(f"{what} failed: {''.join(traceback.format_exception(box[0]))[-1500:]}")
        return True

    def deadlock(self, what: str) -> None:
        try:
            faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        except (AttributeError, OSError, ValueError):  # a stderr without a descriptor (captured)
            faulthandler.dump_traceback(file=sys.__stderr__, all_threads=True)
        stacks = []
        names = {t.ident: t.name for t in threading.enumerate()}
        for ident, frame in sys._current_frames().items():
            stacks.append(f"--- {names.get(ident, ident)}\n" + "".join(traceback.format_stack(frame)[-6:]))
        self.fail(f"deadlock: {what} did not finish within {self.config.watchdog_s:.0f} s")
        self.result["stacks"] = stacks
        self.result["deadlock"] = True

    def load(self, manager) -> None:
        config = self.config
        buckets = {}
        for kind, share in class_shares(config).items():
            rate = config.max_bytes_per_s * share
            buckets[kind] = TokenBucket(rate, max(rate * BURST_S, config.max_batch_bytes))
        turns = {k: itertools.count() for k in buckets}
        workers = [threading.Thread(target=self.appender, args=(i, manager, buckets, turns), name=f"appender-{i}")
                   for i in range(config.appenders)]  # fmt: skip
        workers += [threading.Thread(target=self.reader, args=(i, manager), name=f"reader-{i}")
                    for i in range(config.readers)]  # fmt: skip
        sampler = threading.Thread(target=self.sampler, args=(manager,), name="sampler", daemon=True)
        t = time.monotonic()
        sampler.start()
        for w in workers:
            w.start()
        self.stop.wait(config.duration_s)
        self.stop.set()
        deadline = time.monotonic() + config.watchdog_s
        for w in workers:
            w.join(max(0.0, deadline - time.monotonic()))
        if any(w.is_alive() for w in workers):
            self.deadlock("the worker threads")
            return
        sampler.join()
        self.sample(str(self.root), manager)
        self.result["load_s"] = round(time.monotonic() - t, 1)
        self.result["peak_rss_hwm_kib"] = status_kib("VmHWM")
        self.result["errors"] = self.errors[:10]
        for error in self.errors[:3]:
            self.fail(error)

    def settle_and_verify(self, manager) -> None:
        """Let the delayed deletes run, check nothing points at deleted files, then check every ack."""
        config, result = self.config, self.result
        time.sleep((config.retention_check_ms + config.file_delete_delay_ms) / 1000 + 0.5)
        passes = sorted(self.retention_passes)
        gaps = [b[1] - a[0] for a, b in itertools.pairwise(passes)]
        result["retention_passes"] = len(passes)
        result["max_retention_gap_s"] = round(max(gaps, default=0.0), 2)
        allowed = (config.retention_check_ms + config.retention_lag_ms) / 1000
        if result["max_retention_gap_s"] > allowed:
            self.fail(
                f"retention fell behind: {result['max_retention_gap_s']} s between passes, bounds allow {allowed}"
            )
        result["max_clean_gap_s"] = round(self.max_clean_gap_s, 2)
        if self.max_clean_gap_s > (config.cleaner_backoff_ms + config.clean_lag_ms) / 1000:
            self.fail(f"the cleaner fell behind: {self.max_clean_gap_s:.1f} s between cleans of a partition")
        durations = [end - start for start, end in passes]
        result["max_retention_pass_s"] = round(max(durations, default=0.0), 2)
        root = str(self.root)
        fd_unlinked, fd_deleted = stale(fd_targets(), root)
        map_unlinked, map_deleted = stale(mapped_files(), root)
        # A .deleted file is open while its segment waits for file.delete.delay.ms (retention goes on after the
        # load); one delay later its delete must have released it. An unlinked file must never be open or mapped.
        time.sleep((config.file_delete_delay_ms + config.retention_check_ms) / 1000 + 0.5)
        fd_unlinked2, fd_deleted2 = stale(fd_targets(), root)
        map_unlinked2, map_deleted2 = stale(mapped_files(), root)
        kept = sorted(set(fd_deleted + map_deleted) & set(fd_deleted2 + map_deleted2))
        unlinked = fd_unlinked + map_unlinked + fd_unlinked2 + map_unlinked2
        result["after_delayed_delete"] = {
            "fds_on_unlinked": len(fd_unlinked + fd_unlinked2), "maps_on_unlinked": len(map_unlinked + map_unlinked2),
            "fds_on_deleted_pending": len(fd_deleted), "maps_on_deleted_pending": len(map_deleted),
            "still_open_one_delay_later": len(kept),
        }  # fmt: skip
        if unlinked or kept:
            self.fail(f"descriptors or maps left on deleted files: {(unlinked + kept)[:3]}")
        if self.peaks["unlinked"]:
            self.fail(f"a sample saw descriptors or maps on unlinked files: {self.unlinked_seen[:3]}")
        self._with_watchdog(lambda: self.verify(manager), "the final checks")

    def verify(self, manager) -> None:
        from .runner import value_key, value_ok

        lost = corrupt = below_start = superseded = checked = 0
        problems: list[str] = []
        for (topic, partition), _ in sorted(self.acks.by_partition.items()):
            lg = manager.get_log(topic, partition)
            present = {}
            for record in lg.records(isolation="log_end"):
                if not value_ok(record.value) or value_key(record.value)[0] != _tag(topic, partition):
                    corrupt += 1
                    problems.append(f"garbage at {topic}-{partition}@{record.offset}")
                present[record.offset] = (value_key(record.value)[1], record.key)
            acked = dict(self.acks.records((topic, partition)))
            for offset, (tag, _) in present.items():
                if acked.get(offset) != tag:
                    corrupt += 1
                    problems.append(f"{topic}-{partition}@{offset} holds a record that was not acknowledged there")
            compacted = topic == "compacted"
            latest_per_key: dict = {}
            for offset, (tag, key) in present.items():
                if compacted:
                    latest_per_key[key] = max(latest_per_key.get(key, -1), offset)
                    if key != key_of(tag, self.config.keys):
                        corrupt += 1
                        problems.append(f"{topic}-{partition}@{offset} has the key {key!r}, not its own")
            start = lg.log_start_offset
            for offset, tag in acked.items():
                checked += 1
                if offset < start:
                    below_start += 1
                elif offset in present:
                    if present[offset][0] != tag:
                        lost += 1
                elif compacted and latest_per_key.get(key_of(tag, self.config.keys), -1) > offset:
                    superseded += 1  # the cleaner keeps the latest record of each key; this one had a later one
                else:
                    lost += 1
                    if len(problems) < 10:
                        problems.append(f"acked {topic}-{partition}@{offset} is missing")
        self.result["verify"] = {
            "acked_records": checked, "lost": lost, "corrupt": corrupt,
            "below_log_start": below_start, "compacted_away": superseded,
        }  # fmt: skip
        for problem in problems[:5]:
            self.fail(problem)

    def after_shutdown(self, base: dict) -> None:
        gc.collect()
        root = os.path.join(self.root, "")
        fds, maps = fd_targets(), mapped_files()
        ours_fd = [p for p in fds if p.startswith(root)]
        ours_map = [p for p in maps if p.startswith(root)]
        after = {
            "fds": open_fds(),
            "maps": map_count(),
            "fds_in_log_dirs": len(ours_fd),
            "maps_in_log_dirs": len(ours_map),
        }
        self.result["after_shutdown"] = after
        if ours_fd or ours_map:
            self.fail(f"after shutdown, still open or mapped in the log dirs: {(ours_fd + ours_map)[:3]}")
        if after["fds"] > base["fds"]:
            self.fail(f"{after['fds']} descriptors open after shutdown, {base['fds']} before the partitions existed")


def child_main(config: LoadConfig, root: Path, out: Path) -> int:
    faulthandler.enable()
    # Last resort: a hang outside the watched sections (e.g. topic creation) dumps every stack and exits.
    faulthandler.dump_traceback_later(config.duration_s + 4 * config.watchdog_s + 600, exit=True)
    child = Child(config, root)
    try:
        result = child.run()
    except Exception:
        result = child.result
        child.fail(f"the load run failed: {traceback.format_exc()[-2000:]}")
    result["peaks"] = child.peaks
    result["counters"] = child.counters
    out.write_text(json.dumps(result, indent=1, default=str))
    return 0 if not result["failures"] else 1


# ----- the parent --------------------------------------------------------------------------------------------------
@dataclass
class LoadResult:
    """What ``run_load`` reports: the figures, the bounds, and every failure."""

    config: LoadConfig
    ok: bool
    failures: list[str]
    figures: dict

    def summary(self) -> str:
        """The row's note: each peak against its bound, and what retention, the cleaner and the checks saw."""
        f = self.figures
        if "peaks" not in f or "bounds" not in f:
            return "no figures"
        b, p = f["bounds"], f["peaks"]
        rss_peak = max(p["rss_kib"], f.get("peak_rss_hwm_kib", 0)) / 1024
        after = f.get("after_delayed_delete", {})
        shut = f.get("after_shutdown", {})
        left = (
            p.get("unlinked", 0)
            + after.get("fds_on_unlinked", 0)
            + after.get("maps_on_unlinked", 0)
            + after.get("still_open_one_delay_later", 0)
            + shut.get("fds_in_log_dirs", 0)
            + shut.get("maps_in_log_dirs", 0)
        )
        counting = f.get("counting", {})
        return (
            f"peak fds {p['fds']:,}/{b['fds']:,}, RSS {rss_peak:.0f}/{b['rss_bytes'] / 2**20:.0f} MiB, "
            f"maps {p['maps']:,}/{b['maps']:,} (peak/bound); {p['threads']} threads; "
            f"{counting.get('segments_deleted', 0):,} segments deleted, {counting.get('cleans', 0)} cleans; "
            f"{left} fds/maps left on deleted files"
        )


def check_bounds(figures: dict) -> list[str]:
    """The peak figures against the predicted bounds."""
    if "peaks" not in figures or "bounds" not in figures:
        return []
    p, b = figures["peaks"], figures["bounds"]
    failures = []
    if p["fds"] > b["fds"]:
        failures.append(f"peak open fds {p['fds']} above the bound {b['fds']}")
    if p["maps"] > b["maps"]:
        failures.append(f"peak maps {p['maps']} above the bound {b['maps']}")
    rss = max(p["rss_kib"], figures.get("peak_rss_hwm_kib", 0)) * 1024
    if rss > b["rss_bytes"]:
        failures.append(f"peak RSS {rss >> 20} MiB above the bound {b['rss_bytes'] >> 20} MiB")
    return failures


def sample_from_outside(proc: subprocess.Popen, timeout: float, interval: float = 0.1) -> dict:
    """Count the child's descriptors and maps from this process until it exits: no sample waits for the child's
    GIL, so the peaks are not missed while its threads are busy (the child samples itself too)."""
    peaks = {"fds": 0, "maps": 0, "samples": 0}
    deadline = time.monotonic() + timeout
    base = f"/proc/{proc.pid}"
    while proc.poll() is None and time.monotonic() < deadline:
        with contextlib.suppress(OSError):  # the child may exit between the two reads
            peaks["fds"] = max(peaks["fds"], len(os.listdir(f"{base}/fd")))
            with open(f"{base}/maps", "rb") as f:
                peaks["maps"] = max(peaks["maps"], f.read().count(b"\n"))
            peaks["samples"] += 1
        time.sleep(interval)
    return peaks


def _child_env() -> dict[str, str]:
    """This environment with the repository root first on PYTHONPATH, so the child finds ``tools`` from any cwd."""
    repo = str(Path(__file__).resolve().parents[2])
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": repo + (os.pathsep + path if path else "")}


def run_load(config: LoadConfig = QUICK, root: Path | None = None) -> LoadResult:
    """Run the load test in a child process; a child that hangs past every watchdog is killed (a deadlock)."""
    own = root is None
    root = Path(tempfile.mkdtemp(prefix="kafkalog-load-")) if root is None else Path(root)
    work = root / "load"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    out = root / "load-result.json"
    out.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "tools.reliability.load", "--child", "--root", str(work), "--out", str(out),
           "--config", json.dumps(asdict(config))]  # fmt: skip
    failures: list[str] = []
    timeout = config.duration_s + 5 * config.watchdog_s + 900
    err_path = root / "load-stderr.txt"
    with open(err_path, "w+") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=_child_env())
        outside = sample_from_outside(proc, timeout)
        if proc.returncode is None:
            proc.kill()
            proc.wait()
            failures.append(f"deadlock: the load child did not finish within {timeout:.0f} s and was killed")
        err.seek(0)
        stderr = err.read()
    try:
        figures = json.loads(out.read_text()) if out.exists() else {}
        if proc.returncode not in (0, 1, -signal.SIGKILL):
            failures.append(f"the load child exited with {proc.returncode}: {stderr[-1500:]}")
        elif not figures:
            failures.append(f"the load child wrote no result: {stderr[-1500:]}")
        if "peaks" in figures:
            figures["peaks_outside"] = outside
            figures["peaks"]["fds"] = max(figures["peaks"]["fds"], outside["fds"])
            figures["peaks"]["maps"] = max(figures["peaks"]["maps"], outside["maps"])
        failures += figures.get("failures", []) + check_bounds(figures)
        return LoadResult(config, not failures, failures, figures)
    finally:
        if own:
            shutil.rmtree(root, ignore_errors=True)
        else:
            shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.reliability.load", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help=f"{QUICK.partitions} partitions for {QUICK.duration_s} s")
    parser.add_argument("--partitions", type=int)
    parser.add_argument("--duration", type=float)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--root", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--config", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        values = json.loads(args.config)
        values["value_bytes"] = tuple(values["value_bytes"])
        return child_main(LoadConfig(**values), args.root, args.out)
    config = QUICK if args.quick else FULL
    if args.partitions:
        config = replace(config, partitions=args.partitions)
    if args.duration:
        config = replace(config, duration_s=args.duration)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    result = run_load(config)
    print(json.dumps(result.figures, indent=1, default=str))
    print(("OK: " if result.ok else "FAILED: ") + result.summary())
    for failure in result.failures:
        print("  -", failure)
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
