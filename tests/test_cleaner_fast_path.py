"""The cleaner's fast path (whole runs of plain batches in numba kernels, retention from the map pass's marks, a
read-ahead thread) against its reference path (``Cleaner(..., fast=False)``: the per-batch Python of Kafka's
doClean) on random logs: the same files byte for byte, the same stats, the same next dirty offset, clean after
clean.

The logs mix what the fast path takes (uncompressed, non-transactional batches, with or without a producer id, with
null keys, tombstones, headers, log-append time) with what it hands back to the reference path (compressed and
transactional batches, markers), in small segments, cleaned with small read buffers and maps small enough to fill
up (partial cleans), from the start and from a previous clean's end (a clean section looked up in the map).
"""

from __future__ import annotations

import os
import random
import shutil
import sys
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest

from kafkalog.cleaner import _kernels as kernels
from kafkalog.cleaner import pipeline as cleaner_module
from kafkalog.cleaner.cleaner import Cleaner
from kafkalog.cleaner.offset_map import SkimpyOffsetMap
from kafkalog.cleaner.policy import LogToClean
from kafkalog.manager import TopicPartition
from kafkalog.record import ControlRecordType, RecordBatchBuilder
from kafkalog.record.batch import RECORDS_OFFSET
from kafkalog.storage import Log
from kafkalog.testing import MockTime

TP = TopicPartition("t", 0)
DAY_MS = 86_400_000
TIMING_FIELDS = {"start_ms", "map_complete_ms", "end_ms", "wall_seconds", "map_wall_seconds"}


def config(rng: random.Random) -> dict[str, str]:
    return {
        "cleanup.policy": "compact",
        "segment.bytes": str(rng.choice([1024, 4096, 16384])),
        "segment.index.bytes": "1024",
        "index.interval.bytes": str(rng.choice([1, 512, 4096])),
        "delete.retention.ms": str(DAY_MS),
    }


def random_record(rng: random.Random, keys: int) -> tuple:
    key = None if rng.random() < 0.04 else b"k%d" % rng.randrange(keys)
    value = None if rng.random() < 0.12 else bytes(rng.randrange(97, 123) for _ in range(rng.randint(0, 40)))
    headers = [("h", b"v" * rng.randint(0, 3))] if rng.random() < 0.1 else []
    return key, value, headers


def build_random_log(directory: Path, rng: random.Random, clock: MockTime, *, plain_only: bool) -> Log:
    """About 60 appends of random batches; every fifth or so of another kind than plain unless ``plain_only``.

    Plain and compressed batches are replicated (append_as_follower: null keys allowed, as a follower takes them),
    transactions are written as a leader does."""
    log = Log.open(directory, config(rng), clock)
    keys = rng.choice([5, 30, 200])
    append_time = rng.random() < 0.2
    sequences: dict[int, int] = {}
    for _ in range(rng.randint(40, 80)):
        kind = rng.random() if not plain_only else 0.0
        n = rng.randint(1, 25)
        if kind < 0.88:
            pid = rng.choice([7, 8]) if 0.65 <= kind < 0.8 else -1
            options = (
                {"producer_id": pid, "producer_epoch": 0, "base_sequence": sequences.get(pid, 0)} if pid >= 0 else {}
            )
            if append_time:
                options.update(timestamp_type="LogAppendTime", log_append_time=clock.milliseconds())
            builder = RecordBatchBuilder(
                "lz4" if kind >= 0.8 else "none", base_offset=log.log_end_offset, clock=clock,
                **options,
            )  # fmt: skip
            for _ in range(n):
                key, value, headers = random_record(rng, keys)
                builder.append(key, value, None, headers)
            log.append_as_follower(builder.build())
            if pid >= 0:
                sequences[pid] = sequences.get(pid, 0) + n
        else:
            pid = 40 + rng.randrange(3)
            builder = RecordBatchBuilder(
                producer_id=pid, producer_epoch=0, base_sequence=sequences.get(pid, 0), is_transactional=True,
                clock=clock,
            )  # fmt: skip
            for _ in range(n):
                key, value, _ = random_record(rng, keys)
                builder.append(key or b"k0", value)
            log.append(builder.build())
            sequences[pid] = sequences.get(pid, 0) + n
            marker = ControlRecordType.COMMIT if rng.random() < 0.5 else ControlRecordType.ABORT
            log.append_end_txn_marker(marker, pid, 0, 0)
        if rng.random() < 0.05:
            log.roll()
        clock.advance(rng.randint(0, 2000))
    log.roll()
    return log


def files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


def clean_both(logs: dict[bool, Log], clock: MockTime, first_dirty: int, memory: int, io_buffer: int) -> int:
    """Clean the fast and the reference copy alike; assert the same outcome; return the next first dirty offset."""
    outcomes = {}
    for fast, log in logs.items():
        cleaner = Cleaner(SkimpyOffsetMap(memory), clock, io_buffer_size=io_buffer, fast=fast)
        to_clean = LogToClean(TP, log, first_dirty, log.active_segment.base_offset)
        end, stats = cleaner.do_clean(to_clean, clock.milliseconds())
        counters = {k: v for k, v in asdict(stats).items() if k not in TIMING_FIELDS}
        log.flush()
        outcomes[fast] = (end, counters, files(log.directory))
    fast_end, fast_stats, fast_files = outcomes[True]
    ref_end, ref_stats, ref_files = outcomes[False]
    assert (fast_end, fast_stats) == (ref_end, ref_stats)
    assert fast_files.keys() == ref_files.keys()
    for name in ref_files:
        assert fast_files[name] == ref_files[name], name
    return fast_end


def run_rounds(tmp_path: Path, seed: int, *, plain_only: bool) -> None:
    rng = random.Random(seed)
    clock = MockTime()
    built = build_random_log(tmp_path / "built" / "t-0", rng, clock, plain_only=plain_only)
    built.close()
    logs = {}
    for fast in (True, False):
        target = tmp_path / ("fast" if fast else "reference") / "t-0"
        shutil.copytree(built.directory, target)
        logs[fast] = Log.open(target, built.config, clock, recovery_point=built.log_end_offset)
    try:
        first_dirty = 0
        for _ in range(3):
            memory = rng.choice([24 * 12, 24 * 60, 64 * 1024])  # the small ones fill up: partial cleans
            io_buffer = rng.choice([512, 2048, 256 * 1024])
            end = clean_both(logs, clock, first_dirty, memory, io_buffer)
            first_dirty = end if rng.random() < 0.7 else 0
            clock.advance(rng.choice([1000, 2 * DAY_MS]))  # sometimes past the tombstones' delete horizon
    finally:
        for log in logs.values():
            log.close()


@pytest.mark.parametrize("seed", range(12))
def test_fast_path_matches_the_reference_path_on_random_logs(tmp_path, seed):
    run_rounds(tmp_path, seed, plain_only=False)


@pytest.mark.parametrize("seed", range(100, 106))
def test_fast_path_matches_the_reference_path_on_plain_logs(tmp_path, seed, monkeypatch):
    """Only plain batches: every run goes through the fast path, in runs of a few read buffers (small run sizes)
    so that the read-ahead thread hands over many runs). The copy pass reuses none, some or all of the map pass's
    segment maps."""
    monkeypatch.setattr(cleaner_module, "FILTER_RUN_BYTES", 3000)
    monkeypatch.setattr(cleaner_module, "MAP_RUN_BYTES", 2000)
    monkeypatch.setattr(cleaner_module, "_HELD_MAP_BYTES", [0, 5000, 1 << 30][seed % 3])
    run_rounds(tmp_path, seed, plain_only=True)


def test_plain_logs_take_the_fast_path_and_the_marks(tmp_path, monkeypatch):
    """The twin tests above compare two different paths: the fast one filters every run of a plain log, and
    answers retention from the marks without asking the map."""
    calls = {"filter_plain": 0, "reference_filter": 0, "get_records": 0}

    def counting(name, real):
        def wrapper(*args, **kwargs):
            calls[name] += 1
            return real(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(Cleaner, "_filter_plain", counting("filter_plain", Cleaner._filter_plain))
    monkeypatch.setattr(Cleaner, "_filter", counting("reference_filter", Cleaner._filter))
    monkeypatch.setattr(SkimpyOffsetMap, "get_records", counting("get_records", SkimpyOffsetMap.get_records))
    rng = random.Random(7)
    clock = MockTime()
    log = build_random_log(tmp_path / "t-0", rng, clock, plain_only=True)
    try:
        cleaner = Cleaner(SkimpyOffsetMap(64 * 1024), clock)
        cleaner.do_clean(LogToClean(TP, log, 0, log.active_segment.base_offset), clock.milliseconds())
    finally:
        log.close()
    assert calls["filter_plain"] > 0
    assert calls["reference_filter"] == 0
    assert calls["get_records"] == 0


def test_a_transactional_log_falls_back_to_the_reference_path(tmp_path, monkeypatch):
    calls = {"reference_filter": 0}
    real = Cleaner._filter

    def wrapper(*args, **kwargs):
        calls["reference_filter"] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(Cleaner, "_filter", wrapper)
    clock = MockTime()
    log = Log.open(tmp_path / "t-0", {"cleanup.policy": "compact"}, clock)
    try:
        builder = RecordBatchBuilder(producer_id=3, producer_epoch=0, base_sequence=0, is_transactional=True)
        builder.append(b"a", b"1")
        log.append(builder.build())
        log.append_end_txn_marker(ControlRecordType.ABORT, 3, 0, 0)
        log.roll()
        end, stats = Cleaner(SkimpyOffsetMap(64 * 1024), clock).clean(
            LogToClean(TP, log, 0, log.active_segment.base_offset)
        )
    finally:
        log.close()
    assert calls["reference_filter"] > 0
    assert (end, stats.messages_read) == (2, 2)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread priorities are Linux's")
def test_read_ahead_workers_yield_to_the_cleaning_thread():
    """The workers run at a lower priority than the cleaning thread (Linux sets it per thread); the cleaning
    thread's own priority is unchanged."""
    runs = cleaner_module.PlainRuns()
    mine = os.getpriority(os.PRIO_PROCESS, 0)
    try:
        theirs = runs._workers().submit(os.getpriority, os.PRIO_PROCESS, 0).result()
    finally:
        runs._pool.shutdown(wait=True)
    assert theirs == min(mine + cleaner_module._WORKER_NICENESS, 19)
    assert os.getpriority(os.PRIO_PROCESS, 0) == mine


def _walk_both(arena, sections, start_offset):
    """(records and digests of walk_records then digest_records, the same of walk_records hashing), as lists."""
    starts, ends, counts, bases = (np.array(column, np.int64) for column in zip(*sections, strict=True))
    n = int(counts.sum())
    append = np.zeros(len(bases), bool)
    out = [np.zeros(n, np.int64) for _ in range(8)]
    separate = kernels.walk_records(arena, starts, ends, counts, bases, bases, bases, append, *out, True, 0,
                                    np.zeros(0, np.uint8))  # fmt: skip
    digests = SkimpyOffsetMap(1024).digest_records(arena, out[5], out[6], out[3], start_offset)
    fused = [np.zeros(n, np.int64) for _ in range(8)]
    fused_digests = np.zeros(16 * n, np.uint8)
    together = kernels.walk_records(arena, starts, ends, counts, bases, bases, bases, append, *fused, True,
                                    start_offset, fused_digests)  # fmt: skip
    hashed = [(out[6] >= 0) & (out[3] >= start_offset)] * 16
    mask = np.stack(hashed, axis=1).reshape(-1)  # the digests of the records a put takes
    return (
        (tuple(separate), [a.tolist() for a in (out[3], out[5], out[6])], digests[mask].tolist()),
        (tuple(together), [a.tolist() for a in (fused[3], fused[5], fused[6])], fused_digests[mask].tolist()),
    )


@pytest.mark.parametrize("seed", range(8))
def test_walking_and_hashing_at_once_equals_walking_then_hashing(seed):
    """The map pass's walk hashes the keys as it reads them (walk_records, digests): the same records as walk_records
    (keys only) and the same digests as SkimpyOffsetMap.digest_records, for keys of every length (long ones take
    several MD5 blocks), null keys, and records below the start offset (not hashed); a malformed record gives the
    same error."""
    rng = random.Random(seed)
    data, sections, base = b"", [], 0
    for _ in range(rng.randrange(1, 12)):
        builder = RecordBatchBuilder(base_offset=base)
        count = rng.randrange(1, 40)
        for _ in range(count):
            length = rng.choice([0, 3, 16, 55, 56, 63, 64, 119, 120, 200])
            key = None if rng.random() < 0.1 else bytes(rng.randrange(256) for _ in range(length))
            builder.append(key, b"v" * rng.randrange(0, 50), 1_000)
        batch = builder.build()
        sections.append((len(data) + RECORDS_OFFSET, len(data) + len(batch), count, base))
        data += batch
        base += count
    start_offset = rng.randrange(0, base)
    arena = np.frombuffer(data, np.uint8)
    separate, together = _walk_both(arena, sections, start_offset)
    assert separate[0] == together[0] == (kernels.OK, 0, 0)
    assert separate == together
    broken = arena.copy()
    first_record = sections[-1][0]
    broken[first_record] = 0x7F  # the last batch's first record claims a 63-byte body... or more than is left
    broken[first_record + 1 : first_record + 4] = 0xFF
    separate, together = _walk_both(broken, sections, start_offset)
    assert separate[0] == together[0] != (kernels.OK, 0, 0)


def test_worker_priority_is_left_alone_off_linux(monkeypatch):
    """Elsewhere setpriority would read a thread id as a process id: the workers keep their priority there."""
    calls = []
    monkeypatch.setattr(cleaner_module.sys, "platform", "darwin")
    monkeypatch.setattr(cleaner_module.os, "setpriority", lambda *args: calls.append(args), raising=False)
    cleaner_module._yield_to_cleaning_thread()
    assert calls == []
