"""LogManager restarts: checkpoints across a clean restart, kill -9 while appending, leftover temp files, stale
locks (spec 9, 10, 11).

The crash tests run a real child process that appends through a LogManager and reports what it flushed (or,
with ``flush.messages=1``, what it appended) on its stdout, then SIGKILL it at a random moment and reopen the
directory in this process. Record values are a function of (partition, offset), so every surviving record can
be checked byte for byte.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kafkalog import LogManager
from kafkalog.errors import KafkaStorageError, OffsetOutOfRangeError
from kafkalog.manager import TopicPartition
from kafkalog.storage.checkpoints import OffsetCheckpointFile
from kafkalog.storage.log import Log

REPO = Path(__file__).resolve().parents[1]
TOPIC = "crash"
RECOVERY = "recovery-point-offset-checkpoint"
LOG_START = "log-start-offset-checkpoint"
HIGH_WATERMARK = "replication-offset-checkpoint"

# Shared by the child script and this module: the value of the record at (partition, offset).
VALUES_SOURCE = """
import hashlib


def value_for(partition, offset):
    digest = hashlib.sha256(b"%d/%d" % (partition, offset)).hexdigest().encode()
    return b"p%d-o%d-" % (partition, offset) + digest[: (offset * 7 + partition) % 50]


def key_for(partition, offset):
    return None if offset % 3 == 0 else b"k%d-%d" % (partition, offset)
"""
_values: dict = {}
exec(VALUES_SOURCE, _values)
value_for = _values["value_for"]
key_for = _values["key_for"]

CHILD_SOURCE = (
    VALUES_SOURCE
    + """
import json
import random
import sys

from kafkalog import LogManager

log_dir, topic, spec = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
rng = random.Random(spec["seed"])
broker = {
    "log.initial.task.delay.ms": 0,
    "log.flush.offset.checkpoint.interval.ms": spec["checkpoint_ms"],
    "log.flush.start.offset.checkpoint.interval.ms": spec["checkpoint_ms"],
    "replica.high.watermark.checkpoint.interval.ms": spec["checkpoint_ms"],
}
manager = LogManager(log_dir, broker)
manager.startup()
if topic not in manager.topics():
    manager.create_topic(topic, partitions=spec["partitions"], config=spec["topic_config"])
logs = [manager.get_log(topic, p) for p in range(spec["partitions"])]
appends = 0
while True:
    p = rng.randrange(len(logs))
    log = logs[p]
    first = log.log_end_offset
    count = rng.choice((1, 1, 1, 2, 3, 5, 8))
    records = [(key_for(p, first + i), value_for(p, first + i)) for i in range(count)]
    info = log.append(records)
    if (info.first_offset, info.last_offset) != (first, first + count - 1):
        print("BAD-OFFSETS", p, first, count, info.first_offset, info.last_offset, flush=True)
        sys.exit(3)
    if spec["report_appends"]:
        print("appended", p, info.last_offset + 1, flush=True)
    appends += 1
    if appends == 1:
        print("ready", flush=True)  # the first append is slow (lazy imports): kill only once it runs at speed
    if appends % spec["flush_every"] == 0:
        p = rng.randrange(len(logs))
        end = logs[p].log_end_offset
        logs[p].flush()
        print("flushed", p, end, flush=True)
"""
)


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


class Child:
    """A child process running ``source`` with its stdout and stderr in files; always killed on exit."""

    def __init__(self, tmp_path: Path, name: str, source: str, *args: str) -> None:
        script = tmp_path / f"{name}.py"
        script.write_text(source)
        self.out_path = tmp_path / f"{name}.out"
        self.err_path = tmp_path / f"{name}.err"
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, str(script), *args], stdout=out, stderr=err, env=_child_env(), cwd=tmp_path
            )

    def __enter__(self) -> Child:
        return self

    def __exit__(self, *exc) -> None:
        self.kill()

    def lines(self) -> list[str]:
        """Complete stdout lines so far (a line cut by the kill has no newline and is left out)."""
        text = self.out_path.read_text()
        return text.split("\n")[:-1]

    def stderr(self) -> str:
        return self.err_path.read_text()

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while "ready" not in self.lines():
            if self.proc.poll() is not None:
                raise AssertionError(f"child exited with {self.proc.returncode} before ready:\n{self.stderr()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"child not ready after {timeout}s:\n{self.stderr()}")
            time.sleep(0.005)

    def kill(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        return self.proc.wait(timeout=30)


# ----- what a recovered log must look like -----------------------------------------------------------------


def _check_log(log: Log, partition: int, must_have: int) -> tuple[int, int]:
    """Check every batch on disk, the indexes, and a read of every offset; return (batches, records)."""
    end = log.log_end_offset
    assert end >= must_have, f"partition {partition}: log end {end} lost records below {must_have}"
    assert log.log_start_offset == 0
    assert log.segments.first().base_offset == 0
    assert log.recovery_point <= end
    assert 0 <= log.high_watermark <= end
    expected = 0
    batches = 0
    segments = list(log.segments)
    for i, segment in enumerate(segments):
        following = segments[i + 1].base_offset if i + 1 < len(segments) else None
        assert segment.base_offset == expected, f"partition {partition}: {segment} does not start at {expected}"
        positions: dict[int, tuple[int, int]] = {}
        valid_bytes = 0
        for position, batch in segment.log.batches():
            batch.ensure_valid()
            assert position == valid_bytes
            assert batch.base_offset == expected, f"partition {partition}: gap or overlap at {expected}"
            records = list(batch)
            assert [r.offset for r in records] == list(range(batch.base_offset, batch.last_offset + 1))
            for r in records:
                assert r.value == value_for(partition, r.offset), f"partition {partition} offset {r.offset}"
                assert r.key == key_for(partition, r.offset)
            positions[position] = (batch.base_offset, batch.last_offset)
            valid_bytes += batch.size_in_bytes
            expected = batch.last_offset + 1
            batches += 1
        assert valid_bytes == segment.size, f"partition {partition}: torn bytes after {valid_bytes} in {segment}"
        if following is not None:
            assert expected <= following
        # offset index: each entry is (last offset of an append, position where that batch starts)
        index = segment.offset_index
        previous = (-1, -1)
        for n in range(index.entries):
            entry = index.entry(n)
            assert entry.position in positions, f"{segment}: index entry {entry} is not at a batch boundary"
            base, last = positions[entry.position]
            assert base <= entry.offset <= last, f"{segment}: index entry {entry} outside batch [{base}, {last}]"
            assert last >= entry.offset
            assert entry.offset > previous[0] and entry.position > previous[1], f"{segment}: index not increasing"
            previous = (entry.offset, entry.position)
        time_index = segment.time_index
        for n in range(time_index.entries):
            entry = time_index.entry(n)
            assert segment.base_offset <= entry.offset < expected
    assert expected == end, f"partition {partition}: batches end at {expected}, log end is {end}"
    for offset in range(end):
        fetch = log.read(offset, max_bytes=1, isolation="log_end")
        (first, *_) = list(fetch.records.batches())
        first.ensure_valid()
        assert first.base_offset <= offset <= first.last_offset
        assert [r.value for r in first if r.offset == offset] == [value_for(partition, offset)]
    with pytest.raises(OffsetOutOfRangeError):
        log.read(end + 1, isolation="log_end")
    return batches, end


def _reported(lines: list[str], kind: str) -> dict[int, int]:
    best: dict[int, int] = {}
    for line in lines:
        parts = line.split()
        if parts and parts[0] == kind:
            p, offset = int(parts[1]), int(parts[2])
            assert offset >= best.get(p, 0), f"{kind} went backwards: {line}"
            best[p] = offset
    return best


def _crash_rounds(tmp_path: Path, seed: int, rounds: int, *, flush_messages: bool) -> list[str]:
    """``rounds`` child runs on one log dir, each killed at a random moment, each followed by a check."""
    rng = random.Random(seed)
    log_dir = tmp_path / "logs"
    partitions = rng.choice((2, 3, 4))
    topic_config = {
        "segment.bytes": rng.choice((700, 1500, 3000)),
        "index.interval.bytes": rng.choice((0, 64, 300)),
        "segment.index.bytes": rng.choice((256, 1024, 10 * 1024 * 1024)),
    }
    if flush_messages:
        topic_config["flush.messages"] = 1
    notes = []
    for round_no in range(rounds):
        spec = {
            "seed": rng.randrange(1 << 30),
            "partitions": partitions,
            "topic_config": topic_config,
            "flush_every": rng.choice((1, 3, 10, 40)),
            "report_appends": flush_messages,
            "checkpoint_ms": rng.choice((10, 100, 60000)),
        }
        with Child(tmp_path, f"child-{round_no}", CHILD_SOURCE, str(log_dir), TOPIC, json.dumps(spec)) as child:
            child.wait_ready()
            time.sleep(rng.uniform(0.0, 0.4))
            code = child.kill()
            assert code == -signal.SIGKILL, f"child ended by itself ({code}):\n{child.stderr()}"
            lines = child.lines()
        assert "Traceback" not in child.stderr(), child.stderr()
        flushed = _reported(lines, "flushed")
        appended = _reported(lines, "appended")
        must_have = appended if flush_messages else flushed
        with LogManager(log_dir) as manager:
            assert manager.topics() == [TOPIC]
            total = 0
            for p in range(partitions):
                log = manager.get_log(TOPIC, p)
                _, records = _check_log(log, p, must_have.get(p, 0))
                total += records
                # appending after the restart continues at the recovered end
                end = log.log_end_offset
                info = log.append([(key_for(p, end), value_for(p, end)), (key_for(p, end + 1), value_for(p, end + 1))])
                assert (info.first_offset, info.last_offset) == (end, end + 1)
                produced = manager.produce(TOPIC, value_for(p, end + 2), key=key_for(p, end + 2), partition=p)
                assert produced == (p, end + 2)
                got = [(r.offset, r.value) for r in log.records(end, isolation="log_end")]
                assert got == [(o, value_for(p, o)) for o in range(end, end + 3)]
        notes.append(f"round {round_no}: {len(lines)} lines, flushed {flushed}, appended {len(appended)}, {total} recs")
    # a final clean restart sees the same, and nothing was recovered away
    with LogManager(log_dir) as manager:
        for p in range(partitions):
            log = manager.get_log(TOPIC, p)
            _check_log(log, p, log.log_end_offset)
    return notes


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(5))
def test_kill_9_while_appending_loses_no_flushed_record(tmp_path: Path, seed: int) -> None:
    """5 log dirs x 5 kills: every record below a reported flushed offset survives, indexes stay consistent."""
    notes = _crash_rounds(tmp_path, 1000 + seed, 5, flush_messages=False)
    assert len(notes) == 5


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(2))
def test_kill_9_with_flush_messages_1_loses_no_appended_record(tmp_path: Path, seed: int) -> None:
    """flush.messages=1: every append is flushed before it returns, so every reported append survives."""
    notes = _crash_rounds(tmp_path, 2000 + seed, 4, flush_messages=True)
    assert len(notes) == 4


# ----- checkpoints across a clean restart --------------------------------------------------------------------


def _checkpoints(directory: Path) -> dict[str, dict]:
    return {name: OffsetCheckpointFile(directory / name).read() for name in (RECOVERY, LOG_START, HIGH_WATERMARK)}


def test_root_checkpoints_round_trip_through_a_clean_restart(tmp_path: Path) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    expected: dict[tuple[str, int], tuple[int, int, int]] = {}  # (start, end, high watermark)
    with LogManager(dirs) as manager:
        manager.create_topic("orders", partitions=3, config={"segment.bytes": 1024})
        manager.create_topic("users", partitions=2, config={"segment.bytes": 2048})
        for i in range(400):
            manager.produce("orders", b"order-%d" % i + b"." * (i % 30), partition=i % 3)
            if i % 2:
                manager.produce("users", b"user-%d" % i, partition=i % 2)
        # orders-0: start moved into the middle of a segment, old segments deleted
        manager.get_log("orders", 0).delete_records(57)
        # orders-1: start moved to the first segment's middle, nothing deleted
        manager.get_log("orders", 1).delete_records(3)
        # users-1: start moved and a lower high watermark
        manager.get_log("users", 1).delete_records(40)
        assert manager.cleanup_logs() > 0
        manager.get_log("users", 1).update_high_watermark(77)
        manager.get_log("orders", 2).update_high_watermark(10)
        # a partial flush (of a log that never rolled, so no roll flush ran): the checkpoint holds what was flushed
        manager.create_topic("small")
        for i in range(10):
            manager.produce("small", b"s%d" % i)
        manager.get_log("small", 0).flush(4)
        for _attempt in range(50):  # roll flushes run on the scheduler: retry until no recovery point moved
            before = {(tp.topic, tp.partition): lg.recovery_point for tp, lg in manager._logs.items()}
            manager.checkpoint_recovery_points()
            on_disk = {tp: o for d in dirs for tp, o in OffsetCheckpointFile(d / RECOVERY).read().items()}
            after = {(tp.topic, tp.partition): lg.recovery_point for tp, lg in manager._logs.items()}
            if before == after:
                break
            time.sleep(0.01)
        assert on_disk == before == after
        assert on_disk[("small", 0)] == 4
        for topic, partitions in (("orders", 3), ("users", 2), ("small", 1)):
            for p in range(partitions):
                lg = manager.get_log(topic, p)
                expected[(topic, p)] = (lg.log_start_offset, lg.log_end_offset, lg.high_watermark)
        where = {(tp.topic, tp.partition): d for tp, d in manager._dir_of.items()}
    assert expected[("orders", 0)][0] == 57 and expected[("users", 1)][2] == 77
    assert expected[("orders", 2)][2] == 10

    first = {d: _checkpoints(d) for d in dirs}
    for tp, (_start, end, hw) in expected.items():
        files = first[where[tp]]
        assert files[RECOVERY][tp] == end  # a clean shutdown flushes everything
        assert files[HIGH_WATERMARK][tp] == hw
    # only moved log start offsets are checkpointed, each in its own dir's file
    moved = {tp: v[0] for tp, v in expected.items() if tp in {("orders", 0), ("orders", 1), ("users", 1)}}
    assert {tp: o for d in dirs for tp, o in first[d][LOG_START].items()} == moved
    for d in dirs:
        for files in first[d].values():
            assert all(where[tp] == d for tp in files)
        assert sum(len(v) for v in first[d].values()) > 0

    with LogManager(dirs) as manager:
        for (topic, p), (start, end, _hw) in expected.items():
            lg = manager.get_log(topic, p)
            # The checkpointed high watermark (hw, checked in the files above) is where a restarted replica starts;
            # as a single-replica leader it then moves it to its log end (Kafka's makeLeader/maybeIncrementLeaderHW,
            # issue 16), so a lagging checkpoint (users-1 at 77, orders-2 at 10) hides nothing after the restart.
            assert (lg.log_start_offset, lg.log_end_offset, lg.high_watermark, lg.recovery_point) == (
                start,
                end,
                end,
                end,
            ), (topic, p)
            assert manager._dir_of[TopicPartition(topic, p)] == where[(topic, p)]
            if start > 0:
                with pytest.raises(OffsetOutOfRangeError):
                    lg.read(start - 1)
            values = [r.value for r in lg.records(start, isolation="log_end")]
            assert len(values) == end - start
        assert next(r.offset for r in manager.consume("orders", 0)) == 57
    # the restart checkpointed each high watermark at its log end; otherwise the very same checkpoints
    for d in dirs:
        first[d][HIGH_WATERMARK] = {tp: expected[tp][1] for tp in first[d][HIGH_WATERMARK]}
    assert {d: _checkpoints(d) for d in dirs} == first
    # a second clean restart with no change writes the very same checkpoints
    with LogManager(dirs):
        pass
    assert {d: _checkpoints(d) for d in dirs} == first


# ----- leftover temp files -----------------------------------------------------------------------------------


def _segment_bases(directory: Path) -> list[int]:
    return sorted(int(p.name[:-4]) for p in directory.glob("*.log"))


def _name(base: int, suffix: str) -> str:
    return f"{base:020d}{suffix}"


@pytest.mark.parametrize("clean", [True, False], ids=["clean", "unclean"])
def test_leftover_deleted_cleaned_and_swap_files_are_cleaned_up_on_startup(tmp_path: Path, clean: bool) -> None:
    values: dict[int, list[tuple[int, bytes]]] = {}
    with LogManager(tmp_path) as manager:
        manager.create_topic("t", partitions=3, config={"segment.bytes": 600, "index.interval.bytes": 50})
        for i in range(300):
            manager.produce("t", b"value-%04d" % i + b"#" * (i % 17), partition=i % 3)
        # a retention deletion whose delayed physical delete never ran: real .deleted files are left behind
        log0 = manager.get_log("t", 0)
        log0.delete_records(log0.segments.base_offsets[2])
        assert manager.cleanup_logs() == 2
        for p in range(3):
            lg = manager.get_log("t", p)
            values[p] = [(r.offset, r.value) for r in lg.records()]
    d0, d1, d2 = (tmp_path / f"t-{p}" for p in range(3))
    assert len(list(d0.glob("*.log.deleted"))) == 2
    assert all(len(_segment_bases(d)) >= 5 for d in (d1, d2))

    # t-0: more .deleted copies, plus a KRaft snapshot's .checkpoint.deleted, which Kafka keeps
    b0 = _segment_bases(d0)
    shutil.copy(d0 / _name(b0[0], ".log"), d0 / _name(b0[0], ".log.deleted"))
    shutil.copy(d0 / _name(b0[1], ".index"), d0 / _name(b0[1], ".index.deleted"))
    shutil.copy(d0 / _name(b0[1], ".timeindex"), d0 / _name(b0[1], ".timeindex.deleted"))
    kraft = d0 / "00000000000000000000-0000000000.checkpoint.deleted"
    kraft.write_bytes(b"snapshot")

    # t-1: cleaner output that never got past .cleaned, and a .swap at/after the min .cleaned offset (an
    # incomplete split): all of it goes, the original segments stay
    b1 = _segment_bases(d1)
    for suffix in (".log", ".index", ".timeindex"):
        shutil.copy(d1 / _name(b1[1], suffix), d1 / _name(b1[1], suffix + ".cleaned"))
        shutil.copy(d1 / _name(b1[2], suffix), d1 / _name(b1[2], suffix + ".swap"))
    # a .swap below the min .cleaned offset survives the clean-up and completes (same bytes: no change)
    for suffix in (".log", ".index", ".timeindex"):
        shutil.copy(d1 / _name(b1[0], suffix), d1 / _name(b1[0], suffix + ".swap"))

    # t-2: a completed swap: segments 1 and 2 compacted into one file (here: concatenated), renamed .swap, the
    # old files still in place; the swap wins and replaces every file in [base 1, end of the swap)
    b2 = _segment_bases(d2)
    merged = (d2 / _name(b2[1], ".log")).read_bytes() + (d2 / _name(b2[2], ".log")).read_bytes()
    (d2 / _name(b2[1], ".log.swap")).write_bytes(merged)
    for suffix in (".index", ".timeindex"):  # the first part's sparse indexes are valid for the merged file
        shutil.copy(d2 / _name(b2[1], suffix), d2 / _name(b2[1], suffix + ".swap"))

    if not clean:
        (tmp_path / ".kafka_cleanshutdown").unlink()
    with LogManager(tmp_path) as manager:
        for d in (d0, d1, d2):
            left = sorted(p.name for p in d.iterdir() if p.name.endswith((".deleted", ".cleaned", ".swap")))
            assert left == ([kraft.name] if d == d0 else []), left
        assert kraft.read_bytes() == b"snapshot"
        assert _segment_bases(d0) == b0
        assert _segment_bases(d1) == b1
        assert _segment_bases(d2) == [b for b in b2 if b != b2[2]]
        assert (d2 / _name(b2[1], ".log")).read_bytes() == merged
        assert (d2 / _name(b2[1], ".index")).exists()
        for p in range(3):
            lg = manager.get_log("t", p)
            assert [(r.offset, r.value) for r in lg.records()] == values[p]
            for offset, value in values[p]:
                (batch, *_) = list(lg.read(offset, max_bytes=1).records.batches())
                assert batch.base_offset <= offset <= batch.last_offset
                assert [r.value for r in batch if r.offset == offset] == [value]
            end = lg.log_end_offset
            assert manager.produce("t", b"after", partition=p) == (p, end)
    with LogManager(tmp_path) as manager:
        assert [r.value for r in manager.consume("t", 2)][-1] == b"after"


# ----- a stale lock ------------------------------------------------------------------------------------------

LOCK_HOLDER = """
import sys, time
from kafkalog import LogManager

manager = LogManager(sys.argv[1])
manager.startup()
if "t" not in manager.topics():
    manager.create_topic("t")
manager.produce("t", b"from the dead process")
print("ready", flush=True)
time.sleep(120)
"""


def test_a_dead_processs_lock_file_does_not_block_startup(tmp_path: Path) -> None:
    log_dir = tmp_path / "logs"
    with Child(tmp_path, "holder", LOCK_HOLDER, str(log_dir)) as child:
        child.wait_ready()
        # while the holder lives, its flock keeps everyone else out
        with pytest.raises(KafkaStorageError, match="Failed to acquire lock"):
            LogManager(log_dir).startup()
        assert child.kill() == -signal.SIGKILL
    assert (log_dir / ".lock").exists()
    assert not (log_dir / ".kafka_cleanshutdown").exists()
    with LogManager(log_dir) as manager:
        assert [r.value for r in manager.consume("t")] == [b"from the dead process"]
        manager.produce("t", b"after")
    assert (log_dir / ".lock").exists()  # Kafka leaves the file; only the flock matters
    with LogManager(log_dir) as manager:
        assert [r.value for r in manager.consume("t")] == [b"from the dead process", b"after"]


ATEXIT_CHILD = """
import atexit, sys
from kafkalog import LogManager

manager = LogManager([sys.argv[1]], {"num.recovery.threads.per.data.dir": 2})
manager.startup()
manager.create_topic("atexit", 3)
for p in range(3):
    for i in range(p + 1):
        manager.produce("atexit", b"v%d" % i, partition=p)
atexit.register(manager.shutdown)  # runs during interpreter shutdown: no new thread or future can start then
print("registered", flush=True)
"""


def test_shutdown_from_an_atexit_hook_closes_every_log_cleanly(tmp_path: Path) -> None:
    """LogManager.shutdown in an atexit hook: its pool of closing threads cannot start ("cannot schedule new
    futures after interpreter shutdown"), so the logs are closed in the hook's own thread; the dir ends as after
    any clean shutdown: the marker written, each log's recovery point checkpointed, and a restart
    that loads every record without recovery."""
    root = tmp_path / "logs"
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"))
    child = subprocess.run(
        [sys.executable, "-c", ATEXIT_CHILD, str(root)], capture_output=True, text=True, env=env, timeout=120
    )
    assert child.returncode == 0 and child.stdout.strip() == "registered", child.stderr
    assert "Traceback" not in child.stderr and "Exception ignored" not in child.stderr, child.stderr
    assert json.loads((root / ".kafka_cleanshutdown").read_text()) == {"version": 0, "brokerEpoch": 0}
    expected = {("atexit", p): p + 1 for p in range(3)}
    assert OffsetCheckpointFile(root / RECOVERY).read() == expected  # every log flushed to its end at close
    for p in range(3):  # the close took each producer state snapshot at the log end
        assert (root / f"atexit-{p}" / f"{p + 1:020d}.snapshot").exists()
    with LogManager([root]) as manager:
        for p in range(3):
            log_ = manager.get_log("atexit", p)
            assert (log_.log_end_offset, log_.recovery_point) == (p + 1, p + 1)
            assert [r.value for r in log_.records()] == [b"v%d" % i for i in range(p + 1)]


def test_close_logs_closes_in_the_calling_thread_what_no_pool_takes(tmp_path: Path, monkeypatch) -> None:
    """close_logs when the pools refuse work part-way (as at interpreter shutdown): the logs already handed to a
    thread are closed there, every other one in the calling thread; all end closed."""
    from concurrent.futures import ThreadPoolExecutor

    from kafkalog.log_loading import close_logs

    logs = {TopicPartition("t", p): Log.open(tmp_path / f"t-{p}") for p in range(5)}
    for lg in logs.values():
        lg.append([(b"k", b"v")])
    real_submit = ThreadPoolExecutor.submit
    taken = []

    def submit(pool, fn, *args):
        if len(taken) == 2:
            raise RuntimeError("cannot schedule new futures after interpreter shutdown")
        taken.append(args[0])
        return real_submit(pool, fn, *args)

    monkeypatch.setattr(ThreadPoolExecutor, "submit", submit)
    close_logs(logs, {tp: tmp_path for tp in logs}, 2)
    assert len(taken) == 2
    assert all(lg._closed for lg in logs.values())
    assert all(lg.recovery_point == 1 for lg in logs.values())
