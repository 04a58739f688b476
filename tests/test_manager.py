"""LogManager: log dirs, topics, restarts, checkpoints and the background schedule (spec 5, 8, 9, 10, 11)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conftest import fixture_path
from kafkalog import LogManager
from kafkalog.errors import (
    InvalidConfigurationError,
    InvalidPartitionsError,
    InvalidTopicError,
    KafkaStorageError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)
from kafkalog.record import default_partition
from kafkalog.storage.checkpoints import OffsetCheckpointFile
from kafkalog.testing import MockTime

START = 1_700_000_000_000


@pytest.fixture
def clock() -> MockTime:
    return MockTime(start_ms=START)


def test_startup_writes_meta_properties_and_a_clean_shutdown_marker(tmp_path: Path, clock: MockTime) -> None:
    with LogManager([tmp_path / "a", tmp_path / "b"], clock=clock) as manager:
        manager.create_topic("events", partitions=4)
        assert not (tmp_path / "a" / ".kafka_cleanshutdown").exists()
    for d in ("a", "b"):
        assert (tmp_path / d / "meta.properties").is_file()
        assert (tmp_path / d / ".kafka_cleanshutdown").read_text() == '{"version":0,"brokerEpoch":0}'
        for name in (
            "recovery-point-offset-checkpoint",
            "log-start-offset-checkpoint",
            "replication-offset-checkpoint",
            "cleaner-offset-checkpoint",
        ):
            assert (tmp_path / d / name).is_file()
    # four partitions spread evenly over the two dirs (the dir with the fewest partitions first)
    assert sorted(p.name for p in (tmp_path / "a").iterdir() if p.is_dir()) == ["events-0", "events-2"]
    assert sorted(p.name for p in (tmp_path / "b").iterdir() if p.is_dir()) == ["events-1", "events-3"]


def test_a_second_manager_cannot_take_a_locked_dir(tmp_path: Path, clock: MockTime) -> None:
    with LogManager(tmp_path, clock=clock), pytest.raises(KafkaStorageError, match="Failed to acquire lock"):
        LogManager(tmp_path, clock=MockTime()).startup()
    with LogManager(tmp_path, clock=clock):  # released on shutdown
        pass


def test_topics_create_list_describe_alter_delete(tmp_path: Path, clock: MockTime) -> None:
    with LogManager(
        tmp_path, {"file.delete.delay.ms": 1000, "log.segment.delete.delay.ms": 1000}, clock=clock
    ) as manager:
        manager.create_topic("orders", partitions=2, config={"retention.ms": 3600000})
        manager.create_topic("users", config={"cleanup.policy": "compact"})
        assert manager.topics() == ["orders", "users"]
        with pytest.raises(TopicExistsError):
            manager.create_topic("orders")
        for bad in ("", ".", "..", "a/b", "../x", "x" * 250, "sp ace"):
            with pytest.raises(InvalidTopicError):
                manager.create_topic(bad)
        with pytest.raises(InvalidPartitionsError):
            manager.create_topic("zero", partitions=0)
        with pytest.raises(InvalidConfigurationError):
            manager.create_topic("badcfg", config={"segment.bytes": "13"})
        assert "badcfg" not in manager.topics()
        description = manager.describe_topic("orders")
        assert [p.partition for p in description.partitions] == [0, 1]
        assert description.config_overrides == {"retention.ms": "3600000"}
        assert description.config["retention.ms"] == 3600000
        assert (tmp_path / "orders-0" / "partition.metadata").read_text() == (
            f"version: 0\ntopic_id: {description.topic_id}"
        )
        manager.alter_topic_config("orders", {"retention.ms": 60000, "segment.bytes": 2048})
        assert manager.get_log("orders", 1).config.retention_ms == 60000
        manager.alter_topic_config("orders", {"segment.bytes": None})
        assert manager.describe_topic("orders").config_overrides == {"retention.ms": "60000"}
        manager.delete_topic("users")
        assert manager.topics() == ["orders"]
        leftover = [p for p in tmp_path.iterdir() if p.name.startswith("users-0.") and p.name.endswith("-delete")]
        assert len(leftover) == 1
        clock.advance(999)
        assert leftover[0].exists()
        clock.advance(1)
        assert not leftover[0].exists()
        with pytest.raises(UnknownTopicOrPartitionError):
            manager.get_log("users", 0)


def test_config_overrides_and_data_survive_a_restart(tmp_path: Path, clock: MockTime) -> None:
    with LogManager(tmp_path, clock=clock) as manager:
        manager.create_topic("t", partitions=3, config={"segment.bytes": 4096, "retention.bytes": 100000})
        placed = [manager.produce("t", b"value-%d" % i, key=b"key-%d" % i) for i in range(200)]
    with LogManager(tmp_path, clock=clock) as manager:
        assert manager.describe_topic("t").config_overrides == {"segment.bytes": "4096", "retention.bytes": "100000"}
        assert manager.get_log("t", 0).config.segment_bytes == 4096
        records = {(r.partition, r.offset): r for r in manager.consume("t")}
        assert len(records) == 200
        for i, (partition, offset) in enumerate(placed):
            assert records[(partition, offset)].value == b"value-%d" % i


def test_produce_uses_kafkas_default_partitioner(tmp_path: Path, clock: MockTime) -> None:
    with LogManager(tmp_path, clock=clock) as manager:
        manager.create_topic("keyed", partitions=7)
        for key in (b"21", b"foobar", b"a-little-bit-long-string", b"abc"):
            partition, _ = manager.produce("keyed", b"v", key=key)
            assert partition == default_partition(key, 7)
        assert [manager.produce("keyed", b"v", partition=5)[0] for _ in range(2)] == [5, 5]
        with pytest.raises(InvalidPartitionsError):
            manager.produce("keyed", b"v", partition=7)
        unkeyed = {manager.produce("keyed", b"v")[0] for _ in range(14)}
        assert unkeyed == set(range(7))


def test_clean_restart_skips_recovery_and_checkpoints_round_trip(tmp_path: Path, clock: MockTime) -> None:
    with LogManager(tmp_path, clock=clock) as manager:
        manager.create_topic("t", config={"segment.bytes": 1024})
        for i in range(50):
            manager.produce("t", b"x" * 40, timestamp=START + i)
        log = manager.get_log("t", 0)
        log.delete_records(20)
        manager.cleanup_logs()
        start, end = log.log_start_offset, log.log_end_offset
    recovery = OffsetCheckpointFile(tmp_path / "recovery-point-offset-checkpoint").read()
    assert recovery == {("t", 0): end}
    assert OffsetCheckpointFile(tmp_path / "log-start-offset-checkpoint").read() == {("t", 0): start}
    assert OffsetCheckpointFile(tmp_path / "replication-offset-checkpoint").read() == {("t", 0): end}
    with LogManager(tmp_path, clock=clock) as manager:
        log = manager.get_log("t", 0)
        assert (log.log_start_offset, log.log_end_offset, log.recovery_point, log.high_watermark) == (
            start,
            end,
            end,
            end,
        )


def test_broken_checkpoint_files_are_not_fatal(tmp_path: Path, clock: MockTime) -> None:
    with LogManager(tmp_path, clock=clock) as manager:
        manager.create_topic("t")
        manager.produce("t", b"v")
    for name in ("recovery-point-offset-checkpoint", "log-start-offset-checkpoint", "replication-offset-checkpoint"):
        (tmp_path / name).write_text("0\n5\nnot a line\n")
    (tmp_path / ".kafka_cleanshutdown").unlink()
    with LogManager(tmp_path, clock=clock) as manager:
        assert [r.value for r in manager.consume("t")] == [b"v"]


def test_retention_runs_on_its_schedule(tmp_path: Path, clock: MockTime) -> None:
    broker = {"log.retention.check.interval.ms": 300000, "log.segment.delete.delay.ms": 60000}
    with LogManager(tmp_path, broker, clock=clock) as manager:
        manager.create_topic("t", config={"segment.bytes": 2048, "retention.ms": 600000})
        for _i in range(40):
            manager.produce("t", b"x" * 100, timestamp=clock.milliseconds())
            clock.advance(1000)  # 40 s of data, oldest first
        log = manager.get_log("t", 0)
        first_segments = len(log.segments)
        assert first_segments > 2
        # The first check runs at log.initial.task.delay.ms (30 s) after startup, then every 5 minutes.
        clock.advance(600000)
        assert len(log.segments) < first_segments
        assert any(p.name.endswith(".deleted") for p in (tmp_path / "t-0").iterdir())
        clock.advance(60000)
        assert not any(p.name.endswith(".deleted") for p in (tmp_path / "t-0").iterdir())


def test_loads_a_real_broker_log_dir(tmp_path: Path, clock: MockTime) -> None:
    source = fixture_path("broker-logs", "bheem6005-kafka", "kafka-logs")
    target = tmp_path / "kafka-logs"
    shutil.copytree(source, target)
    (target / ".lock").unlink(missing_ok=True)
    with LogManager(target, clock=clock) as manager:
        assert "cities" in manager.topics()
        cities = list(manager.consume("cities"))
        assert len(cities) > 0
        assert (
            manager.describe_topic("cities").topic_id
            == (target / "cities-0" / "partition.metadata").read_text().split("topic_id: ")[1]
        )


def test_not_started_is_a_clear_error(tmp_path: Path) -> None:
    manager = LogManager(tmp_path, clock=MockTime())
    with pytest.raises(KafkaStorageError, match="not started"):
        manager.create_topic("t")


def test_a_manual_retention_pass_does_not_move_the_schedule(tmp_path: Path, clock: MockTime) -> None:
    """Checks run at fixed times (30 s after startup, then every 5 min); calling cleanup_logs adds a pass."""
    with LogManager(tmp_path, {"log.retention.check.interval.ms": 300000}, clock=clock) as manager:
        manager.create_topic("t", config={"retention.ms": 600000})
        manager.produce("t", b"x", timestamp=START)
        clock.advance(100_000)  # the first scheduled check ran at START + 30 s; the next is at START + 330 s
        manager.cleanup_logs()
        segment = manager.explain_retention("t", 0)[0].segments[0]
        # deletable once now - largest timestamp > 600000, i.e. from START + 600001: the check at START + 630 s
        assert segment.deleted_at_ms == START + 630_000
        clock.advance(529_999)
        assert manager.get_log("t").segments.base_offsets == [0]
        clock.advance(1)
        assert manager.get_log("t").segments.base_offsets == [1]


def test_partition_metadata_is_written_by_the_scheduler_or_before_the_first_append(tmp_path, monkeypatch):
    """As Kafka's flush-metadata-file task: creating a topic records its id and leaves the writes to the scheduler
    (off a broker's event loop); a log appended to, or closed, before that task ran writes them first."""
    m = LogManager([tmp_path])  # a real scheduler, whose tasks are held here instead of run
    m.startup()
    held: list[tuple[str, object]] = []
    monkeypatch.setattr(m.scheduler, "schedule_once", lambda name, fn, delay_ms=0: held.append((name, fn)))
    try:
        topic_id = m.create_topic("later", 2).topic_id
        assert [name for name, _ in held] == ["flush-metadata-file"]
        assert not any((tmp_path / f"later-{p}" / "partition.metadata").exists() for p in range(2))
        m.get_log("later", 1).append([(b"k", b"v")])
        for p in range(2):  # one pass wrote every partition's file, before the record went in
            assert (tmp_path / f"later-{p}" / "partition.metadata").read_text() == f"version: 0\ntopic_id: {topic_id}"
        held[0][1]()  # the task, run after the append: nothing left to write

        topic_id = m.create_topic("closed", 1).topic_id
        assert not (tmp_path / "closed-0" / "partition.metadata").exists()
    finally:
        m.shutdown()  # closing the log writes what its task did not
    assert (tmp_path / "closed-0" / "partition.metadata").read_text() == f"version: 0\ntopic_id: {topic_id}"


def test_a_missing_partition_metadata_of_a_kafkalog_topic_is_written_at_startup(tmp_path):
    """A crash between a topic's creation and its deferred partition.metadata write leaves dirs without the file;
    the next startup writes it from the topic's stored id, as Kafka's log loading does for a topic id it knows."""
    with LogManager([tmp_path], clock=MockTime()) as m:
        topic_id = m.create_topic("cut-short", 2).topic_id
    for p in range(2):
        (tmp_path / f"cut-short-{p}" / "partition.metadata").unlink()
    with LogManager([tmp_path], clock=MockTime()) as m:
        assert m.describe_topic("cut-short").topic_id == topic_id
    for p in range(2):
        assert (tmp_path / f"cut-short-{p}" / "partition.metadata").read_text() == f"version: 0\ntopic_id: {topic_id}"


def test_partition_metadata_that_cannot_be_written_refuses_appends_and_stays_pending(tmp_path, monkeypatch):
    import kafkalog.logdir as logdir

    m = LogManager([tmp_path])
    m.startup()
    monkeypatch.setattr(m.scheduler, "schedule_once", lambda name, fn, delay_ms=0: None)  # the task never runs
    real_write_all = logdir.PartitionMetadataFile.write_all
    failing = [KafkaStorageError("Error while writing partition metadata file: disk full")]

    def write_all(dirs, topic_id):
        if failing:
            raise failing.pop()
        real_write_all(dirs, topic_id)

    monkeypatch.setattr(logdir.PartitionMetadataFile, "write_all", staticmethod(write_all))
    try:
        m.create_topic("blocked", 1)
        log_ = m.get_log("blocked")
        with pytest.raises(KafkaStorageError):
            log_.append([(b"k", b"v")])
        assert log_.log_end_offset == 0  # nothing written without its topic id on disk
        log_.append([(b"k", b"v")])  # the next append writes the file, then the record
        assert (tmp_path / "blocked-0" / "partition.metadata").exists() and log_.log_end_offset == 1
    finally:
        m.shutdown()


def test_create_topic_makes_every_partition_metadata_durable_before_returning(tmp_path, monkeypatch):
    """The partition.metadata files of a new topic are written in one pass (PartitionMetadataFile.write_all): each
    fsynced under its .tmp name before its rename, every partition dir and the log dir fsynced after, no .tmp left.
    (The pass is the flush-metadata-file task, which MockTime's scheduler runs as soon as it is due: at once.)"""
    import kafkalog.logdir as logdir

    events: list[tuple[str, str]] = []
    real_file, real_dir, real_replace = logdir.fsync_file, logdir.fsync_dir, logdir.os.replace
    monkeypatch.setattr(logdir, "fsync_file", lambda p: (events.append(("file", Path(p).name)), real_file(p)))
    monkeypatch.setattr(logdir, "fsync_dir", lambda p: (events.append(("dir", Path(p).name)), real_dir(p)))
    # os.replace is the os module's: it also sees the same pass's leader-epoch-checkpoint renames (after these).
    monkeypatch.setattr(
        logdir.os,
        "replace",
        lambda a, b: (
            events.append(("rename", Path(a).parent.name) if Path(a).name == "partition.metadata.tmp" else ("-", "")),
            real_replace(a, b),
        ),
    )
    m = LogManager([tmp_path], clock=MockTime())
    m.startup()
    try:
        description = m.create_topic("durable", 3)
        names = [f"durable-{p}" for p in range(3)]
        assert [e for e in events if e[0] == "file"] == [("file", "partition.metadata.tmp")] * 3
        renames = [i for i, e in enumerate(events) if e[0] == "rename" and e[1].startswith("durable-")]
        assert [events[i][1] for i in renames] == names
        assert max(i for i, e in enumerate(events) if e[0] == "file") < min(renames)
        synced_dirs = [e[1] for e in events[max(renames) :] if e[0] == "dir"]
        assert synced_dirs[:3] == names and tmp_path.name in synced_dirs[3:]
        for name in names:
            assert sorted(f.name for f in (tmp_path / name).iterdir() if f.name.startswith("partition")) == [
                "partition.metadata"
            ]
            assert logdir.PartitionMetadataFile(tmp_path / name).read() == description.topic_id
    finally:
        m.shutdown()
