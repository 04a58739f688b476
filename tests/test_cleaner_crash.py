"""Crash safety of compaction: the swap protocol (spec 9) and a failing clean (spec 12).

A clean replaces each group of segments with one new segment: ``.cleaned`` files are written and
flushed, renamed ``.swap``, the old segments' files are renamed ``.deleted``, the ``.swap`` files take
their final names, and at the end of the pass the cleaner-offset-checkpoint is rewritten. The loader
finishes or rolls back whatever a crash left (spec 9 steps 1-2).

These tests kill a real process (``os._exit``) right before each file rename a clean performs, and once
after the whole clean, and reopen the copy it left: the log must read exactly as the model says (the
latest value per key, tombstoned keys absent, aborted transactions invisible), with strictly increasing
offsets, the same log end offset, no ``.cleaned``/``.swap`` left, and a further clean must succeed and
keep all of that. A clean that fails with an exception must leave no output and mark only its partition
uncleanable.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import kafkalog
from batchtools import fold, read_committed
from kafkalog import LogManager
from kafkalog.cleaner.cleaner import Cleaner
from kafkalog.manager import TopicPartition
from kafkalog.record import ControlRecordType, RecordBatchBuilder
from kafkalog.testing import MockTime

T0 = 1_700_000_000_000
RETENTION_MS = 1000
TOPIC = "crashy"
BROKER = {
    "log.cleaner.enable": "false",
    "log.cleaner.dedupe.buffer.size": str(2 * 1024 * 1024),
}
TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "segment.bytes": "1024",
    "min.cleanable.dirty.ratio": "0.01",
    "delete.retention.ms": str(RETENTION_MS),
}
KEYS = [b"k%d" % i for i in range(8)]
TXN_PID, IDEMPOTENT_PID = 7000, 9000
CRASH_EXIT = 71  # the exit status of a process killed at its crash point
TEMP_SUFFIXES = (".cleaned", ".swap", ".deleted")

# The crash driver, run as ONE subprocess. It imports kafkalog and warms the cleaner's numba kernels with a
# normal clean of one copy of the log (then shut down), then forks one child per case; each child opens its own
# copy, counts every rename (os.rename and os.replace, patched in the os module that every caller resolves
# them through: segment files, indexes, the transaction index, producer snapshots, checkpoints) and dies with
# os._exit right before rename number crash_at (or, for a negative crash_at, right after rename -crash_at);
# a child whose clean ends (crash_at 0) writes the renames to a report and dies then, without a shutdown.
# Case 0 runs first: its rename count N sets the cases ±1..±N.
DRIVER_SCRIPT = r"""
import json, os, shutil, sys, traceback
from pathlib import Path
from kafkalog import LogManager
from kafkalog.testing import MockTime

spec = json.loads(sys.argv[1])
template, root, now = Path(spec["template"]), Path(spec["root"]), spec["now"]
broker, crash_exit = spec["broker"], spec["exit"]


def copy(name):
    target = root / name
    shutil.copytree(template, target, ignore=shutil.ignore_patterns(".lock"))
    return target


def clean(directory, crash_at):
    manager = LogManager(directory, broker, clock=MockTime(start_ms=now))
    manager.startup()
    renames = []

    def counting(real):
        def rename(src, dst, *args, **kwargs):
            renames.append([os.path.basename(os.fspath(src)), os.path.basename(os.fspath(dst))])
            if len(renames) == crash_at:
                os._exit(crash_exit)
            real(src, dst, *args, **kwargs)
            if -len(renames) == crash_at:
                os._exit(crash_exit)

        return rename

    os.rename, os.replace = counting(os.rename), counting(os.replace)
    result = manager.clean_once()
    cleaned = [[r.topic, r.end_offset, r.error] for r in result.cleaned]
    (root / f"report-{crash_at}.json").write_text(json.dumps({"renames": renames, "cleaned": cleaned}))
    os._exit(crash_exit)


def case_name(k):
    return f"killed-before-{k:03d}" if k > 0 else f"killed-after-{-k:03d}"


def fork(directory, crash_at):
    pid = os.fork()
    if pid == 0:
        try:
            clean(directory, crash_at)
        except BaseException:
            traceback.print_exc()
        os._exit(98)
    return pid


warm = LogManager(copy("normal-shutdown"), broker, clock=MockTime(start_ms=now))
warm.startup()
warm_result = [[r.topic, r.end_offset, r.error] for r in warm.clean_once().cleaned]
warm.shutdown()
statuses = {}
_, status = os.waitpid(fork(copy("killed-after-clean"), 0), 0)
statuses[0] = os.waitstatus_to_exitcode(status)
renames = json.loads((root / "report-0.json").read_text())["renames"]
running = {}
for k in [*range(1, len(renames) + 1), *range(-1, -len(renames) - 1, -1)]:
    if len(running) >= spec["parallel"]:
        pid, status = os.wait()
        statuses[running.pop(pid)] = os.waitstatus_to_exitcode(status)
    running[fork(copy(case_name(k)), k)] = k
while running:
    pid, status = os.wait()
    statuses[running.pop(pid)] = os.waitstatus_to_exitcode(status)
print(json.dumps({"statuses": statuses, "warm": warm_result}))
"""


# ----- the model ----------------------------------------------------------------------------------------


@dataclass
class Expected:
    """What the log must read as: built from the writes alone."""

    writes: dict[int, tuple[bytes, bytes | None]] = field(default_factory=dict)  # offset → (key, value)
    aborted: set[int] = field(default_factory=set)  # offsets of records of aborted transactions
    log_end_offset: int = 0
    now: int = 0

    @property
    def visible(self) -> list[tuple[int, bytes, bytes | None]]:
        return [(o, k, v) for o, (k, v) in sorted(self.writes.items()) if o not in self.aborted]

    @property
    def state(self) -> dict[bytes, bytes]:
        return fold((k, v) for _, k, v in self.visible)

    @property
    def latest(self) -> dict[bytes, int]:
        return {k: o for o, k, _ in self.visible}

    @property
    def tainted(self) -> set[bytes]:
        return {self.writes[o][0] for o in self.aborted}


def assert_matches_model(log, expected: Expected, cleaned_below: int | None = None) -> None:
    """The log reads as the model: same fold, every live key's latest write at its offset, every record
    as written, offsets strictly increasing, nothing aborted; read_uncommitted agrees on untainted keys;
    below ``cleaned_below`` (a completed clean's end) each key appears once and no tombstone is past its
    horizon."""
    assert log.log_end_offset == expected.log_end_offset
    assert log.log_start_offset == 0
    committed = [(r.offset, r.key, r.value) for r in read_committed(log)]
    offsets = [o for o, _, _ in committed]
    assert offsets == sorted(set(offsets)), f"offsets not strictly increasing: {offsets}"
    for offset, key, value in committed:
        assert expected.writes.get(offset) == (key, value), f"offset {offset} reads {key!r}={value!r}"
        assert offset not in expected.aborted, f"aborted record at {offset} is visible to read_committed"
    assert fold((k, v) for _, k, v in committed) == expected.state
    for key, offset in expected.latest.items():
        if expected.writes[offset][1] is not None:
            assert offset in offsets, f"the latest value of {key!r} (offset {offset}) was lost"
    uncommitted = [(r.offset, r.key, r.value) for r in log.records(isolation="read_uncommitted")]
    u_offsets = [o for o, _, _ in uncommitted]
    assert u_offsets == sorted(set(u_offsets))
    for offset, key, value in uncommitted:
        assert expected.writes.get(offset) == (key, value), f"offset {offset} reads {key!r}={value!r}"
    untainted = [(k, v) for _, k, v in uncommitted if k not in expected.tainted]
    assert fold(untainted) == {k: v for k, v in expected.state.items() if k not in expected.tainted}
    if cleaned_below is not None:
        below = [(o, k, v) for o, k, v in uncommitted if o < cleaned_below]
        keys = [k for _, k, _ in below]
        assert len(keys) == len(set(keys)), f"a key appears twice below the cleaned offset {cleaned_below}"
        assert not any(o in expected.aborted for o, _, _ in below), "aborted data survived a clean"


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.rglob("*") if p.name.endswith(TEMP_SUFFIXES))


# ----- the log to clean -------------------------------------------------------------------------------


def build_log(directory: Path) -> Expected:
    """A compacted log with a clean section (cleaned once, with a tombstone whose horizon has passed) and a
    dirty section (overwrites, a committed and an aborted transaction with a plain write inside its range,
    idempotent batches, a fresh tombstone), all in ~1 KiB segments; left with a clean shutdown."""
    expected = Expected()
    clock = MockTime(start_ms=T0)
    with LogManager(directory, dict(BROKER), clock=clock) as manager:
        manager.create_topic(TOPIC, config=dict(TOPIC_CONFIG))
        log = manager.get_log(TOPIC)

        def append(builder: RecordBatchBuilder, rows, aborted: bool = False) -> None:
            for key, value in rows:
                builder.append(key, value, clock.milliseconds())
            info = log.append(builder)
            assert info.first_offset == expected.log_end_offset
            for i, row in enumerate(rows):
                expected.writes[info.first_offset + i] = row
                if aborted:
                    expected.aborted.add(info.first_offset + i)
            expected.log_end_offset += len(rows)

        def marker(kind: ControlRecordType) -> None:
            assert log.append_end_txn_marker(kind, TXN_PID, 0, coordinator_epoch=1).first_offset == (
                expected.log_end_offset
            )
            expected.log_end_offset += 1

        def put(key: bytes, value: bytes | None) -> None:
            append(RecordBatchBuilder(clock=clock), [(key, value)])

        for r in range(3):
            for i, key in enumerate(KEYS):
                put(key, b"r%d-%s-" % (r, key) + b"x" * 80)
                if i % 3 == 0:
                    put(b"live-%d-%d" % (r, i), b"written once")  # live data in (nearly) every old segment
            put(KEYS[r], None)  # k2's tombstone (round 2) stays its latest write
        log.roll()
        first = manager.clean_once()
        assert [c.error for c in first.cleaned] == [None]  # tombstones now carry horizon T0 + retention
        clock.advance(5 * RETENTION_MS)  # k2's tombstone is past its horizon

        for r in range(3, 5):
            for key in KEYS:
                if key != KEYS[2]:
                    put(key, b"r%d-%s-" % (r, key) + b"y" * 80)

        def txn_batch(sequence: int) -> RecordBatchBuilder:
            return RecordBatchBuilder(producer_id=TXN_PID, producer_epoch=0, base_sequence=sequence,
                                      is_transactional=True, clock=clock)  # fmt: skip

        append(txn_batch(0), [(KEYS[1], b"txn-committed"), (KEYS[3], b"txn-committed")])
        marker(ControlRecordType.COMMIT)
        append(txn_batch(2), [(KEYS[4], b"txn-aborted"), (b"only-aborted", b"x")], aborted=True)
        put(KEYS[5], b"plain-inside-aborted-range")
        marker(ControlRecordType.ABORT)
        for seq in range(2):
            append(RecordBatchBuilder(producer_id=IDEMPOTENT_PID, producer_epoch=0, base_sequence=seq, clock=clock),
                   [(KEYS[6], b"idempotent-%d" % seq)])  # fmt: skip
        put(KEYS[7], None)  # a fresh tombstone: its horizon is set by the next clean
        for key in KEYS[:2]:
            put(key, b"last-" + key + b"-" + b"z" * 80)
        log.roll()
        expected.now = clock.milliseconds()
    assert KEYS[2] not in expected.state and KEYS[7] not in expected.state
    assert b"only-aborted" in expected.tainted
    return expected


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    """A module-wide scratch directory, on tmpfs when there is one (every case fsyncs dozens of times, and a
    killed process loses nothing the page cache holds), else under pytest's tmp dir."""
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        root = Path(tempfile.mkdtemp(prefix="cleaner-crash-", dir=shm))
        yield root
        shutil.rmtree(root, ignore_errors=True)
    else:
        yield tmp_path_factory.mktemp("cleaner-crash")


@pytest.fixture(scope="module")
def template(scratch) -> tuple[Path, Expected]:
    expected = build_log(scratch / "template")
    return scratch / "template", expected


@dataclass
class CrashRuns:
    root: Path
    renames: list[list[str]]  # (source, target) names of every rename a complete clean does, in order
    cleaned: list  # what the complete clean reported: [topic, end offset, error]
    statuses: dict[int, int]  # crash_at → exit status (0: after clean_once; k > 0: before rename k; k < 0: after -k)


@pytest.fixture(scope="module")
def crash_runs(template, scratch) -> CrashRuns:
    """Every crash case, run by the driver subprocess into its own copy of the template."""
    directory, expected = template
    root = scratch / "cases"
    root.mkdir()
    spec = {"template": str(directory), "root": str(root), "now": expected.now, "broker": BROKER, "exit": CRASH_EXIT,
            "parallel": max(2, min(8, os.cpu_count() or 2))}  # fmt: skip
    env = dict(os.environ)
    src = str(Path(kafkalog.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    run = subprocess.run(
        [sys.executable, "-c", DRIVER_SCRIPT, json.dumps(spec)], capture_output=True, text=True, env=env, timeout=600
    )
    assert run.returncode == 0, run.stderr[-4000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert [(t, err) for t, _, err in out["warm"]] == [(TOPIC, None)]
    report = json.loads((root / "report-0.json").read_text())
    statuses = {int(k): v for k, v in out["statuses"].items()}
    return CrashRuns(root, report["renames"], report["cleaned"], statuses)


def reopen_and_check(directory: Path, expected: Expected) -> None:
    """Open (the loader recovers), check the model, clean again, check again, restart, check again."""
    clock = MockTime(start_ms=expected.now)
    manager = LogManager(directory, dict(BROKER), clock=clock)
    manager.startup()
    try:
        assert leftovers(directory) == [], f"temporary files left after opening: {leftovers(directory)}"
        log = manager.get_log(TOPIC)
        assert_matches_model(log, expected)
        result = manager.clean_once()
        assert all(r.error is None for r in result.cleaned), result.cleaned
        checkpoint = manager.cleaner.all_cleaner_checkpoints().get((TOPIC, 0))
        assert checkpoint is not None and checkpoint == log.active_segment.base_offset
        assert_matches_model(log, expected, cleaned_below=checkpoint)
        # k2's tombstone was past its horizon at every clean of this log since the first: gone for good;
        # k7's fresh tombstone is within its horizon: still readable.
        keys = {r.key for r in read_committed(log)}
        assert KEYS[2] not in keys and KEYS[7] in keys
    finally:
        manager.shutdown()
    with LogManager(directory, dict(BROKER), clock=clock) as manager:
        assert_matches_model(manager.get_log(TOPIC), expected, cleaned_below=checkpoint)


# ----- tests ----------------------------------------------------------------------------------------------


def _kind(src: str, dst: str) -> str:
    if src.endswith(".cleaned") and dst.endswith(".swap"):
        return "C"
    if dst.endswith(".deleted"):
        return "D"
    if src.endswith(".swap") and not dst.endswith(".swap"):
        return "F"
    return "K" if "checkpoint" in dst else "?"


def test_a_complete_clean_renames_in_swap_protocol_order(crash_runs) -> None:
    """Every group goes .cleaned→.swap, then old files→.deleted, then .swap→final name; the
    cleaner-offset-checkpoint is replaced last. Several groups are swapped, so the crash points below
    cover every stage of several swaps."""
    assert [(t, err) for t, _, err in crash_runs.cleaned] == [(TOPIC, None)]
    renames = crash_runs.renames
    kinds = "".join(_kind(src, dst) for src, dst in renames)
    assert re.fullmatch(r"(C+D+F+)+K+", kinds), kinds
    assert kinds.count("CD") >= 3, f"expected several groups swapped: {kinds}"
    swapped = {src[: -len(".cleaned")] for src, dst in renames if _kind(src, dst) == "C"}
    finalized = {dst for src, dst in renames if _kind(src, dst) == "F"}
    assert swapped == finalized  # every new file reaches its final name
    assert any(n.endswith(".txnindex") for n in swapped), "the aborted transaction's index is swapped too"
    assert renames[-1][1] == "cleaner-offset-checkpoint"


def test_a_clean_then_a_normal_shutdown_reopens_to_the_model(crash_runs, template) -> None:
    """The reference case: the same clean with no crash and a clean shutdown."""
    reopen_and_check(crash_runs.root / "normal-shutdown", template[1])


def test_a_process_killed_after_a_complete_clean_reopens_to_the_model(crash_runs, template) -> None:
    """Killed after clean_once returned (no shutdown, so an unclean start): the log reads as the model."""
    assert crash_runs.statuses[0] == CRASH_EXIT
    reopen_and_check(crash_runs.root / "killed-after-clean", template[1])


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_process_killed_at_each_rename_of_the_clean_reopens_to_the_model(crash_runs, template, when) -> None:
    """For every k, a process killed right before (or right after) the k-th rename of the clean reopens to
    the model state, with no .cleaned/.swap/.deleted left, and a further clean succeeds and keeps the model.
    Killed before rename 1: the first group's .cleaned files are written and nothing is renamed; killed after
    the last rename: the checkpoint is written and clean_once has not returned yet."""
    expected = template[1]
    renames = crash_runs.renames
    failures = []
    states = set()  # what the loader found: which temporary suffixes were on disk after the crash
    for k in range(1, len(renames) + 1):
        crash_at, name = (k, f"killed-before-{k:03d}") if when == "before" else (-k, f"killed-after-{k:03d}")
        src, dst = renames[k - 1]
        label = f"killed {when} rename {k}/{len(renames)} ({src} -> {dst})"
        try:
            status = crash_runs.statuses[crash_at]
            assert status == CRASH_EXIT, f"exit status {status}, not the crash point"
            assert not (crash_runs.root / f"report-{crash_at}.json").exists(), "the clean finished: no crash happened"
            left = leftovers(crash_runs.root / name)
            states.add(tuple(suffix for suffix in TEMP_SUFFIXES if any(n.endswith(suffix) for n in left)))
            if crash_at == 1:  # the first group's output is complete and nothing was renamed yet
                assert any(n.endswith(".log.cleaned") for n in left) and not any(n.endswith(".swap") for n in left)
            reopen_and_check(crash_runs.root / name, expected)
        except AssertionError as e:
            failures.append(f"{label}: {e}")
    assert not failures, "\n".join(failures)
    # Both loader paths ran: a swap rolled back (.cleaned beside .swap) and a swap completed (.swap alone).
    assert any(".cleaned" in st and ".swap" in st for st in states), states
    assert any(".swap" in st and ".cleaned" not in st for st in states), states


def test_an_exception_inside_a_clean_leaves_no_output_and_marks_only_that_partition_uncleanable(
    tmp_path, monkeypatch
) -> None:
    """A clean that raises after writing part of its .cleaned segment: the partial output is deleted, the
    source segments and the checkpoint are untouched, the partition is marked uncleanable (and skipped by
    later passes), and another compacted partition is still cleaned in the same pass."""
    clock = MockTime(start_ms=T0)
    bad, good = TopicPartition("bad", 0), TopicPartition("good", 0)
    models = {bad: Expected(), good: Expected()}
    with LogManager(tmp_path, dict(BROKER), clock=clock) as manager:
        for tp in (bad, good):
            manager.create_topic(tp.topic, config=dict(TOPIC_CONFIG))
            log = manager.get_log(tp.topic)
            keep = b"never-overwritten"  # so that the first group's .cleaned segment gets output at once
            models[tp].writes[log.append([(keep, b"kept", clock.milliseconds())]).first_offset] = (keep, b"kept")
            for r in range(4):
                for key in KEYS:
                    value = b"%s-%d-%s-" % (tp.topic.encode(), r, key) + b"x" * 60
                    offset = log.append([(key, value, clock.milliseconds())]).first_offset
                    models[tp].writes[offset] = (key, value)
            log.roll()
            models[tp].log_end_offset = log.log_end_offset
        bad_log = manager.get_log("bad")
        before = [(r.offset, r.key, r.value) for r in bad_log.records()]
        before_files = sorted(p.name for p in bad_log.directory.iterdir())

        real_clean_into = Cleaner.clean_into
        failed_with_output = []

        def failing_clean_into(self, tp, log_obj, source, dest, *args, **kwargs):
            real_clean_into(self, tp, log_obj, source, dest, *args, **kwargs)
            if tp == bad and dest is not None and dest.size > 0:
                assert dest.log.path.name.endswith(".cleaned") and dest.log.path.exists()
                failed_with_output.append(dest.log.path)
                raise OSError("injected failure while cleaning")

        monkeypatch.setattr(Cleaner, "clean_into", failing_clean_into)
        result = manager.clean_once()
        outcome = {(r.topic, r.partition): r for r in result.cleaned}
        assert failed_with_output, "the injected failure never fired"
        assert "injected failure" in (outcome[("bad", 0)].error or "")
        assert outcome[("good", 0)].error is None
        # The failed clean's output is gone; the bad log is exactly as before.
        assert not any(p.exists() for p in failed_with_output)
        assert leftovers(bad_log.directory) == []
        assert sorted(p.name for p in bad_log.directory.iterdir()) == before_files
        assert [(r.offset, r.key, r.value) for r in bad_log.records()] == before
        assert manager.cleaner.is_uncleanable(bad) and not manager.cleaner.is_uncleanable(good)
        assert manager.cleaner.uncleanable_partitions() == {manager.get_log("bad").directory.parent: {bad}}
        checkpoints = manager.cleaner.all_cleaner_checkpoints()
        assert ("bad", 0) not in checkpoints and checkpoints[("good", 0)] == models[good].log_end_offset
        assert_matches_model(manager.get_log("good"), models[good], cleaned_below=checkpoints[("good", 0)])
        assert_matches_model(bad_log, models[bad])
        # Later passes leave the uncleanable partition alone, however dirty it gets.
        monkeypatch.setattr(Cleaner, "clean_into", real_clean_into)
        for key in KEYS:
            offset = bad_log.append([(key, b"more", clock.milliseconds())]).first_offset
            models[bad].writes[offset] = (key, b"more")
        bad_log.roll()
        models[bad].log_end_offset = bad_log.log_end_offset
        assert all(r.topic != "bad" for r in manager.clean_once().cleaned)
        assert_matches_model(bad_log, models[bad])
    # The mark lives in memory only (as Kafka's): after a restart the partition is cleaned normally.
    with LogManager(tmp_path, dict(BROKER), clock=clock) as manager:
        result = manager.clean_once()
        assert [(r.topic, r.error) for r in result.cleaned] == [("bad", None)]
        checkpoint = manager.cleaner.all_cleaner_checkpoints()[("bad", 0)]
        assert_matches_model(manager.get_log("bad"), models[bad], cleaned_below=checkpoint)
