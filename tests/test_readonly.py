"""The read-only view of log dirs, through the commands that only read (issues 16 and 25).

Every reading command (topics --list/--describe, consume, verify, dump, recover --dry-run, explain) leaves
every byte and every mtime of a log dir unchanged, on a copy of each real broker dir in
../shared/fixtures/broker-logs and on a dir mounted read-only; a folder that is not a log dir is refused and
nothing is created in it; a full tmpfs gives no SIGBUS; overlapping segments (a cleaned segment beside the
one it replaced) read as Kafka serves them, each record once and in order, while verify reports the overlap.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from batchtools import BASE_OFFSET, patch
from conftest import fixture_path
from kafkalog.cli import main
from kafkalog.logdir import CleanShutdownFile, MetaProperties
from kafkalog.manager import LogManager
from kafkalog.partition.readonly import ReadOnlyLogDir
from kafkalog.record import build_batch
from kafkalog.storage.checkpoints import OffsetCheckpointFile
from kafkalog.testing import MockTime

BROKERS = sorted(
    [
        "bheem6005-kafka/kafka-logs",
        "donaldy-kafka271/kafka-logs",
        "itumelengmogase-cp77-kraft/kafka-data",
        "mscaldas-cp512-lz4/kafka-data",
        "william0423-kafka/kafka-logs",
        "yangxuhao-kafka270/kafka-logs",
        "yuanliubei-kafka-src/kafka-logs",
    ]
)
T0 = 1_700_000_000_000


def run(*args: str):
    return CliRunner().invoke(main, list(args))


def tree_state(root: Path) -> dict[str, tuple]:
    """Every file's content hash, size, mode and mtime, and every directory's mtime and mode, by path."""
    state: dict[str, tuple] = {}
    for dirpath, _dirs, files in os.walk(root):
        st = os.lstat(dirpath)
        state[os.path.relpath(dirpath, root)] = ("dir", st.st_mode, st.st_mtime_ns)
        for name in files:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
            state[os.path.relpath(path, root)] = ("file", digest, st.st_size, st.st_mode, st.st_mtime_ns)
    return state


def partition_dirs(log_dir: Path) -> list[Path]:
    return sorted(p for p in log_dir.iterdir() if p.is_dir() and any(p.glob("*.log")))


def reading_commands(log_dir: Path) -> list[list[str]]:
    """Every reading command over a log dir: its topics, partitions, segments and indexes."""
    d = str(log_dir)
    view = ReadOnlyLogDir([d])
    commands = [["topics", "--log-dir", d, "--list"], ["topics", "--log-dir", d, "--describe"], ["verify", d]]
    for topic in view.topics():
        commands.append(["consume", "--log-dir", d, "--topic", topic, "--from-beginning", "--max-messages", "5"])
        commands.append(["consume", "--log-dir", d, "--topic", topic, "--isolation-level", "read_committed"])
    for part in partition_dirs(log_dir):
        commands.append(["recover", "--dry-run", str(part)])
        segment = sorted(part.glob("*.log"))[-1]
        files = [
            segment,
            *(segment.with_suffix(s) for s in (".index", ".timeindex") if segment.with_suffix(s).exists()),
        ]
        commands.append(["dump", "--files", ",".join(str(f) for f in files), "--print-data-log"])
    first = view.topics()[0]
    commands.append(["explain", "retention", d, "--topic", first])
    commands.append(["explain", "compaction", d, "--topic", first])
    last = view.partitions_of(first)[-1].partition
    commands.append(["explain", "retention", d, "--topic", first, "--partition", str(last)])
    return commands


def run_all(commands: list[list[str]]) -> list[tuple[int, str]]:
    outcomes = []
    for args in commands:
        result = run(*args)
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise AssertionError(f"{args}: {result.exception!r}\n{result.output}") from result.exception
        assert result.exit_code in (0, 1), (args, result.output)
        assert "Traceback" not in result.output, (args, result.output)
        outcomes.append((result.exit_code, result.output))
    return outcomes


@pytest.mark.parametrize("broker", BROKERS)
def test_reading_commands_change_nothing_in_a_broker_dir(broker: str, tmp_path: Path) -> None:
    source = fixture_path("broker-logs", *broker.split("/"))
    copy = tmp_path / "copy"
    shutil.copytree(source, copy)
    before = tree_state(copy)
    outcomes = run_all(reading_commands(copy))
    assert tree_state(copy) == before
    listed = outcomes[0][1].split()
    assert listed == sorted({p.name.rsplit("-", 1)[0] for p in partition_dirs(copy)} - {"__cluster_metadata"})


@contextlib.contextmanager
def read_only_mount(source: Path, target: Path):
    """``source`` bind-mounted read-only at ``target``; skips (saying why) when mounting is not permitted."""
    target.mkdir()
    steps = [["mount", "--bind", str(source), str(target)], ["mount", "-o", "remount,ro,bind", str(target)]]
    mounted = False
    try:
        for step in steps:
            try:
                done = subprocess.run(step, capture_output=True, text=True, timeout=30)
            except FileNotFoundError:
                pytest.skip("no mount command on this machine: a read-only bind mount cannot be made")
            if done.returncode != 0:
                pytest.skip(f"`{' '.join(step)}` is not permitted here: {done.stderr.strip()}")
            mounted = True
        yield target
    finally:
        if mounted:
            subprocess.run(["umount", str(target)], capture_output=True, timeout=30)


def test_reading_commands_work_on_a_read_only_file_system(tmp_path: Path) -> None:
    source = tmp_path / "rw"
    shutil.copytree(fixture_path("broker-logs", "william0423-kafka", "kafka-logs"), source)
    writable = run_all(reading_commands(source))
    if os.geteuid() != 0:  # chmod stops an ordinary user's writes; root ignores it, so root gets a mount
        for path in [source, *source.rglob("*")]:
            path.chmod(path.stat().st_mode & ~0o222)
        try:
            before = tree_state(source)
            assert [code for code, _ in run_all(reading_commands(source))] == [code for code, _ in writable]
            assert tree_state(source) == before
        finally:
            for path in [source, *source.rglob("*")]:
                path.chmod(path.stat().st_mode | 0o200)
        return
    with read_only_mount(source, tmp_path / "ro") as ro:
        with pytest.raises(OSError):
            (ro / "probe").write_bytes(b"")  # the mount does refuse writes
        before = tree_state(ro)
        outcomes = run_all(reading_commands(ro))
        assert [code for code, _ in outcomes] == [code for code, _ in writable]
        assert [out.replace(str(ro), "<dir>") for _, out in outcomes[:4]] == [
            out.replace(str(source), "<dir>") for _, out in writable[:4]
        ]
        assert tree_state(ro) == before


def test_a_folder_that_is_not_a_log_dir_is_refused_and_left_alone(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    other = tmp_path / "photos"
    (other / "holiday-2024").mkdir(parents=True)  # named like a partition directory, but no segments
    (other / "holiday-2024" / "beach.jpg").write_bytes(b"\xff\xd8")
    (other / "notes.txt").write_text("hello")
    for folder in (empty, other):
        before = tree_state(folder)
        for args in (
            ["consume", "--log-dir", str(folder), "--topic", "t", "--from-beginning"],
            ["topics", "--log-dir", str(folder), "--list"],
            ["topics", "--log-dir", str(folder), "--describe"],
            ["verify", str(folder)],
            ["explain", "retention", str(folder), "--topic", "t"],
        ):
            result = run(*args)
            assert result.exit_code == 1, (args, result.output)  # a data error (exit 1), not a usage error
            assert f"{folder} is not a Kafka log dir" in result.output, result.output
            assert "meta.properties" in result.output and "Traceback" not in result.output
        assert tree_state(folder) == before
    missing = run("consume", "--log-dir", str(tmp_path / "missing"), "--topic", "t")
    assert missing.exit_code == 1 and "does not exist" in missing.output
    assert not (tmp_path / "missing").exists()


def test_a_live_log_managers_dir_is_read_without_its_lock(tmp_path: Path) -> None:
    manager = LogManager(tmp_path, clock=MockTime())
    manager.startup()
    try:
        manager.create_topic("t", 1)
        manager.get_log("t", 0).append(build_batch([None, None], [b"a", b"b"], [T0, T0]))
        result = CliRunner().invoke(main, ["consume", "--log-dir", str(tmp_path), "--topic", "t", "--from-beginning"])
        assert result.exit_code == 0 and result.stdout == "a\nb\n"
    finally:
        manager.shutdown()


def test_a_lagging_high_watermark_checkpoint_is_derived_and_said(tmp_path: Path) -> None:
    with LogManager(tmp_path, clock=MockTime()) as manager:
        manager.create_topic("t", 1)
        manager.get_log("t", 0).append(build_batch([None] * 10, [b"v%d" % i for i in range(10)], [T0] * 10))
    OffsetCheckpointFile(tmp_path / "replication-offset-checkpoint").write({("t", 0): 3})
    before = tree_state(tmp_path)
    described = run("topics", "--log-dir", str(tmp_path), "--describe").output.splitlines()
    assert (
        "LogEndOffset: 10\tHighWatermark: 10 (derived from the log end as a single-replica leader does: "
        in (described[1])
    )
    assert "replication-offset-checkpoint says 3, 7 record offset(s) behind the log)" in described[1]
    consumed = CliRunner().invoke(main, ["consume", "--log-dir", str(tmp_path), "--topic", "t", "--from-beginning"])
    assert consumed.stdout.split() == [f"v{i}" for i in range(10)]
    assert "Note: t-0: high watermark 10 derived from the log end" in consumed.stderr
    assert tree_state(tmp_path) == before


# ----- overlapping segments -------------------------------------------------------------------------------

CLEANED = [153 + round(i * 320 / 49) for i in range(50)]  # a cleaned segment 0: 50 records, offsets 153..473
TAIL = list(range(474, 480))


def _batch(offset: int, value: bytes) -> bytes:
    return patch(build_batch([b"k%d" % offset], [value], [T0 + offset]), BASE_OFFSET, ">q", offset)


def _run_batch(first: int, count: int, tag: bytes) -> bytes:
    batch = build_batch([b"k%d" % o for o in range(first, first + count)],
                        [tag + b"-%d" % o for o in range(first, first + count)],
                        [T0 + o for o in range(first, first + count)])  # fmt: skip
    return patch(batch, BASE_OFFSET, ">q", first)


@pytest.fixture
def overlapping(tmp_path: Path) -> Path:
    """A log dir whose partition t-0 holds a cleaned segment 0 (offsets 153..473) beside the older segment 63
    (63..473) it replaced, as a cleaner swap cut short leaves them, then segment 474; a clean shutdown."""
    log_dir = tmp_path / "logs"
    part = log_dir / "t-0"
    part.mkdir(parents=True)
    MetaProperties.generate(node_id=1).write(log_dir)
    (part / f"{0:020d}.log").write_bytes(b"".join(_batch(o, b"clean-%d" % o) for o in CLEANED))
    (part / f"{63:020d}.log").write_bytes(b"".join(_run_batch(o, 10 if o + 10 <= 474 else 474 - o, b"old")
                                                   for o in range(63, 474, 10)))  # fmt: skip
    (part / f"{474:020d}.log").write_bytes(_run_batch(474, len(TAIL), b"tail"))
    CleanShutdownFile(log_dir).write(broker_epoch=5)
    return log_dir


EXPECTED = [b"clean-%d" % o for o in CLEANED] + [b"tail-%d" % o for o in TAIL]


def test_overlapping_segments_read_once_in_order_by_the_view(overlapping: Path) -> None:
    part = ReadOnlyLogDir([overlapping]).partition("t", 0)
    records = list(part.records())
    assert [r.offset for r in records] == CLEANED + TAIL
    assert [r.value for r in records] == EXPECTED
    assert [(r.base, r.start) for r in part.read_path()] == [(0, 0), (474, 474)]
    assert part.log_end_offset == part.high_watermark == 480
    # A range split anywhere gives the records of the whole read in that range.
    for start, end in ((0, 63), (63, 200), (200, 474), (100, 480), (470, 476)):
        got = [o for table in part.read_range(start, end) for o in table.column("offset").to_pylist()]
        assert got == [o for o in CLEANED + TAIL if start <= o < end], (start, end)


def test_overlapping_segments_through_consume_and_verify(overlapping: Path) -> None:
    before = tree_state(overlapping)
    consumed = CliRunner().invoke(
        main, ["consume", "--log-dir", str(overlapping), "--topic", "t", "--from-beginning", "--json"]
    )
    assert consumed.exit_code == 0, consumed.output
    lines = [__import__("json").loads(line) for line in consumed.stdout.splitlines()]
    assert [line["offset"] for line in lines] == CLEANED + TAIL
    assert [line["value"].encode() for line in lines] == EXPECTED
    verified = run("verify", str(overlapping))
    assert verified.exit_code == 1
    assert "base offset 63 overlaps the previous segment, which ends at offset 473" in verified.output
    assert tree_state(overlapping) == before


def test_overlapping_segments_through_spark(spark, overlapping: Path) -> None:
    before = tree_state(overlapping)
    for options in ({}, {"minPartitions": "7"}):
        reader = spark.read.format("kafkalog").option("path", str(overlapping)).option("subscribe", "t")
        for name, value in options.items():
            reader = reader.option(name, value)
        rows = sorted(reader.load().select("offset", "value").collect())
        assert [r.offset for r in rows] == CLEANED + TAIL, options
        assert [bytes(r.value) for r in rows] == EXPECTED
    assert tree_state(overlapping) == before


# ----- a full tmpfs ---------------------------------------------------------------------------------------


@contextlib.contextmanager
def small_tmpfs(target: Path, size: str = "4m"):
    target.mkdir()
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(target)],
                              capture_output=True, text=True, timeout=30)  # fmt: skip
    except FileNotFoundError:
        pytest.skip("no mount command on this machine: a small tmpfs cannot be mounted")
    if done.returncode != 0:
        pytest.skip(f"mounting a tmpfs is not permitted here: {done.stderr.strip()}")
    try:
        yield target
    finally:
        subprocess.run(["umount", str(target)], capture_output=True, timeout=30)


def _fill(directory: Path) -> None:
    """Write until the file system is full (ENOSPC)."""
    with open(directory / "filler", "wb") as f:
        chunk = b"\x01" * 65536
        with contextlib.suppress(OSError):
            while True:
                f.write(chunk)
                f.flush()
    with contextlib.suppress(OSError), open(directory / "filler2", "wb") as f:
        while True:
            f.write(b"\x01")
            f.flush()


def test_no_sigbus_on_a_full_tmpfs(tmp_path: Path) -> None:
    with small_tmpfs(tmp_path / "tmpfs") as fs:
        log_dir = fs / "logs"
        with LogManager(log_dir, clock=MockTime()) as manager:
            manager.create_topic("t", 1)
            manager.get_log("t", 0).append(build_batch([None] * 3, [b"a", b"b", b"c"], [T0] * 3))
        # As after an unclean stop: the active segment's indexes keep their preallocated, sparse 10 MB.
        part = log_dir / "t-0"
        for suffix in (".index", ".timeindex"):
            os.truncate(part / f"{0:020d}{suffix}", 10 * 1024 * 1024)
        (log_dir / ".kafka_cleanshutdown").unlink(missing_ok=True)
        _fill(fs)
        with pytest.raises(OSError):
            (fs / "one-more").write_bytes(b"x" * 8192)
        script = Path(sys.executable).with_name("kafkalog")
        for args in (
            ["verify", str(log_dir)],
            ["topics", "--log-dir", str(log_dir), "--describe"],
            ["consume", "--log-dir", str(log_dir), "--topic", "t", "--from-beginning"],
            ["recover", "--dry-run", str(part)],
            ["dump", "--files", str(part / f"{0:020d}.index")],
        ):
            done = subprocess.run([str(script), *args], capture_output=True, text=True, timeout=120)
            assert done.returncode in (0, 1), (args, done.returncode, done.stderr)  # -7 would be SIGBUS
            assert "Traceback" not in done.stderr
        consumed = subprocess.run([str(script), "consume", "--log-dir", str(log_dir), "--topic", "t",
                                   "--from-beginning"], capture_output=True, text=True, timeout=120)  # fmt: skip
        assert consumed.stdout.split() == ["a", "b", "c"]


def test_the_index_entries_are_read_not_mapped(tmp_path: Path) -> None:
    # A read-only index file that shrinks after it was opened still reads what it had (no SIGBUS).
    from kafkalog.storage.index import OffsetIndex

    path = tmp_path / f"{0:020d}.index"
    path.write_bytes(struct.pack(">ii", 1, 0) + struct.pack(">ii", 2, 100) + bytes(8 * 100))
    index = OffsetIndex(path, 0, writable=False)
    os.truncate(path, 0)
    assert index.entries == 102 and index.entry(1) == (2, 100)
    index.close()


def test_spark_reads_past_a_lagging_high_watermark_checkpoint(spark, tmp_path: Path) -> None:
    # The checkpoint is written after the data (newer mtime) and says 3 of 10: a single-replica leader's high
    # watermark is the log end, so the Spark source reads all 10, as consume does.
    with LogManager(tmp_path, clock=MockTime()) as manager:
        manager.create_topic("t", 1)
        manager.get_log("t", 0).append(build_batch([None] * 10, [b"v%d" % i for i in range(10)], [T0] * 10))
    OffsetCheckpointFile(tmp_path / "replication-offset-checkpoint").write({("t", 0): 3})
    before = tree_state(tmp_path)
    df = spark.read.format("kafkalog").option("path", str(tmp_path)).option("subscribe", "t").load()
    assert sorted(bytes(r.value) for r in df.select("value").collect()) == [b"v%d" % i for i in range(10)]
    assert df.count() == 10
    assert tree_state(tmp_path) == before


def test_describe_takes_a_kraft_brokers_topic_configs_from_its_metadata(tmp_path: Path) -> None:
    # Kafka creates __consumer_offsets compacted, and Schema Registry and Connect create their topics
    # compacted; the KRaft fixture's metadata snapshots hold those ConfigRecords (issue 25).
    copy = tmp_path / "kraft"
    shutil.copytree(fixture_path("broker-logs", "itumelengmogase-cp77-kraft", "kafka-data"), copy)
    before = tree_state(copy)
    described = run("topics", "--log-dir", str(copy), "--describe").output.splitlines()
    heads = {line.split("\t")[0][len("Topic: ") :]: line for line in described if line.startswith("Topic: ")}
    for topic in ("__consumer_offsets", "__transaction_state", "_schemas", "docker-connect-configs"):
        configs = heads[topic].split("Configs: ")[1].split(",")
        assert "cleanup.policy=compact" in configs, heads[topic]
        assert "TopicId: None" not in heads[topic]
    assert "__cluster_metadata" not in heads
    # explain runs the log manager on a private copy that takes the metadata partition along.
    explained = run("explain", "compaction", str(copy), "--topic", "_schemas", "--no-estimate")
    assert explained.exit_code == 0 and "_schemas-0: cleanup.policy compact" in explained.output
    assert tree_state(copy) == before


def test_consume_read_committed_through_the_view(tmp_path: Path) -> None:
    from kafkalog.record import ControlRecordType, RecordBatchBuilder

    with LogManager(tmp_path, clock=MockTime()) as manager:
        manager.create_topic("t", 1)
        log = manager.get_log("t", 0)
        log.append([(b"p", b"plain-0", T0), (b"p", b"plain-1", T0)])  # offsets 0, 1
        aborted = RecordBatchBuilder(producer_id=4000, producer_epoch=0, base_sequence=0, is_transactional=True)
        aborted.append(b"t", b"aborted-2", T0)
        aborted.append(b"t", b"aborted-3", T0)
        log.append(aborted)
        log.append_end_txn_marker(ControlRecordType.ABORT, 4000, 0, coordinator_epoch=1)  # offset 4
        log.append([(b"p", b"plain-5", T0)])
        still_open = RecordBatchBuilder(producer_id=5000, producer_epoch=0, base_sequence=0, is_transactional=True)
        still_open.append(b"t", b"open-6", T0)
        log.append(still_open)
        log.append([(b"p", b"plain-7", T0)])
    before = tree_state(tmp_path)
    base = ["consume", "--log-dir", str(tmp_path), "--topic", "t", "--from-beginning"]
    committed = CliRunner().invoke(main, [*base, "--isolation-level", "read_committed"])
    # A read_committed consumer stops at the last stable offset (6, the open transaction's first offset) and
    # drops the aborted transaction and the control record.
    assert committed.stdout.split() == ["plain-0", "plain-1", "plain-5"]
    uncommitted = CliRunner().invoke(main, base)
    everything = ["plain-0", "plain-1", "aborted-2", "aborted-3", "plain-5", "open-6", "plain-7"]
    assert uncommitted.stdout.split() == everything
    latest = CliRunner().invoke(main, [*base[:-1], "--isolation-level", "read_committed"])  # starts at the LSO
    assert latest.exit_code == 0 and latest.stdout == ""
    part = ReadOnlyLogDir([tmp_path]).partition("t", 0)
    assert (part.last_stable_offset, part.high_watermark) == (6, 8)
    assert tree_state(tmp_path) == before


def test_spark_refuses_a_folder_that_is_not_a_log_dir(spark, tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    before = tree_state(tmp_path)
    with pytest.raises(Exception, match="is not a Kafka log dir"):
        spark.read.format("kafkalog").option("path", str(tmp_path)).option("subscribe", "t").load().collect()
    assert tree_state(tmp_path) == before
