"""The partition layer (Kafka's Partition and ReplicaManager): leader epoch, ISR, high watermark, acks, reads.

Expected behaviour from Kafka's core/src/main/scala/kafka/cluster/Partition.scala (makeLeader,
maybeIncrementLeaderHW, appendRecordsToLeader, fetchOffsetForTimestamp, lastOffsetForLeaderEpoch) and
ReplicaManager.appendRecords / readFromLocalLog; error names from Kafka's exceptions.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from kafkalog.cli import main
from kafkalog.errors import (
    FencedLeaderEpochError,
    InvalidRequiredAcksError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    UnknownLeaderEpochError,
    UnknownTopicOrPartitionError,
)
from kafkalog.manager import LogManager, TopicPartition
from kafkalog.partition import Partition
from kafkalog.record import RecordBatchBuilder
from kafkalog.storage.log import EARLIEST_LOCAL_TIMESTAMP, EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, Log
from kafkalog.testing import MockTime


def batch(*values: bytes, timestamp: int | None = None, **kwargs) -> bytes:
    builder = RecordBatchBuilder(clock=MockTime(), **kwargs)
    for v in values or (b"v",):
        builder.append(None, v, timestamp)
    return builder.build()


def offsets_read(partition: Partition, offset: int, isolation: str = "read_uncommitted") -> list[int]:
    return [r.offset for r in partition.records(offset, isolation)]


@pytest.fixture
def log(tmp_path: Path):
    lg = Log.open(tmp_path / "t-0", {"min.insync.replicas": 1}, MockTime())
    yield lg
    lg.close()


def test_make_leader_moves_a_lagging_high_watermark_to_the_log_end(tmp_path: Path) -> None:
    with Log.open(tmp_path / "t-0", clock=MockTime()) as lg:
        for _ in range(5):
            lg.append(batch())
    # A restart whose checkpointed high watermark lags (a kill -9 before the checkpoint): HW 1 of LEO 5.
    lg = Log.open(tmp_path / "t-0", clock=MockTime(), high_watermark=1)
    assert lg.high_watermark == 1
    partition = Partition(lg)
    heard = []
    partition.add_listener(lambda p, hw: heard.append(hw))
    assert partition.make_leader() is True
    assert (partition.leader_epoch, partition.isr, partition.high_watermark) == (0, {0}, 5)
    assert heard == [5]
    assert offsets_read(partition, 0) == [0, 1, 2, 3, 4]
    lg.close()


def test_leader_appends_stamp_the_epoch_and_advance_the_high_watermark(log: Log) -> None:
    partition = Partition(log, local_broker_id=3)
    partition.make_leader(leader_epoch=7, isr={3})
    assert log.leader_epoch_cache.entries == [(7, 0)]  # makeLeader assigns a new epoch at the log end
    heard = []
    partition.add_listener(lambda p, hw: heard.append(hw))
    info = partition.append_records_to_leader(batch(b"a", b"b"), required_acks=-1)
    assert (info.first_offset, info.last_offset, partition.high_watermark) == (0, 1, 2)
    assert heard == [2]
    assert [b.partition_leader_epoch for b in log.read(0, 1 << 20, "log_end").records.batches()] == [7]
    partition.make_leader(leader_epoch=9, isr={3})
    partition.append_records_to_leader(batch(b"c"), required_acks=1)
    assert log.leader_epoch_cache.entries == [(7, 0), (9, 2)]
    assert partition.last_offset_for_leader_epoch(7) == (7, 2)
    assert partition.last_offset_for_leader_epoch(8) == (7, 2)
    assert partition.last_offset_for_leader_epoch(9) == (9, 3)
    assert partition.last_offset_for_leader_epoch(10) == (-1, -1)  # UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
    assert partition.last_offset_for_leader_epoch(-1) == (-1, -1)


@pytest.mark.parametrize("acks", [2, -2, 100])
def test_invalid_required_acks_write_nothing(log: Log, acks: int) -> None:
    partition = Partition(log)
    partition.make_leader()
    with pytest.raises(InvalidRequiredAcksError):
        partition.append_records_to_leader(batch(), required_acks=acks)
    assert log.log_end_offset == 0


def test_min_insync_replicas_above_the_isr_refuses_acks_all_before_writing(tmp_path: Path) -> None:
    with Log.open(tmp_path / "t-0", {"min.insync.replicas": 2}, MockTime()) as lg:
        partition = Partition(lg)
        partition.make_leader()
        with pytest.raises(NotEnoughReplicasError, match=r"ISR \[0\] is insufficient .* min.isr requirement of 2"):
            partition.append_records_to_leader(batch(), required_acks=-1)
        assert lg.log_end_offset == 0 and lg.size == 0
        # acks 1 and 0 do not wait for the ISR (Kafka checks min.insync.replicas for acks=all only)
        assert partition.append_records_to_leader(batch(), required_acks=1).first_offset == 0
        assert partition.append_records_to_leader(batch(), required_acks=0).first_offset == 1
        assert partition.high_watermark == 2
        # with a second in-sync replica acks=all is accepted, and the HW waits for the follower
        partition.make_leader(leader_epoch=1, isr={0, 1})
        assert partition.high_watermark == 2
        partition.append_records_to_leader(batch(), required_acks=-1)
        assert (partition.log_end_offset, partition.high_watermark) == (3, 2)


def test_the_high_watermark_is_the_smallest_log_end_over_the_isr(log: Log) -> None:
    partition = Partition(log)
    partition.make_leader(leader_epoch=0, isr={0, 1, 2})
    for _ in range(4):
        partition.append_records_to_leader(batch(), required_acks=1)
    assert partition.high_watermark == 0
    assert offsets_read(partition, 0) == []  # nothing past the HW for a consumer
    assert [r.offset for b in partition.fetch_records(0, 1 << 20, "log_end").records.batches() for r in b] == [
        0,
        1,
        2,
        3,
    ]
    heard = []
    partition.add_listener(lambda p, hw: heard.append(hw))
    assert partition.update_follower_log_end_offset(1, 3) is False  # replica 2 is still at 0
    assert partition.update_follower_log_end_offset(2, 2) is True
    assert (partition.high_watermark, heard) == (2, [2])
    assert offsets_read(partition, 0) == [0, 1]
    partition.update_follower_log_end_offset(2, 4)
    assert partition.high_watermark == 3


def test_read_committed_stops_at_the_last_stable_offset(log: Log) -> None:
    partition = Partition(log)
    partition.make_leader()
    partition.append_records_to_leader(batch(b"plain"), 1)
    txn = batch(b"t1", b"t2", producer_id=42, producer_epoch=0, base_sequence=0, is_transactional=True)
    partition.append_records_to_leader(txn, 1)
    partition.append_records_to_leader(batch(b"after"), 1)
    assert (partition.high_watermark, partition.last_stable_offset) == (4, 1)
    assert offsets_read(partition, 0, "read_committed") == [0]
    assert offsets_read(partition, 0, "read_uncommitted") == [0, 1, 2, 3]


def test_offset_for_timestamp_is_bounded_by_the_isolation(log: Log) -> None:
    partition = Partition(log)
    partition.make_leader(leader_epoch=2, isr={0, 1})
    partition.append_records_to_leader(batch(b"a", timestamp=1000), 1)
    partition.append_records_to_leader(batch(b"b", timestamp=2000), 1)
    partition.update_follower_log_end_offset(1, 1)  # HW 1
    latest = partition.fetch_offset_for_timestamp(LATEST_TIMESTAMP, "read_uncommitted")
    assert (latest.offset, latest.leader_epoch) == (1, 2)
    assert partition.fetch_offset_for_timestamp(LATEST_TIMESTAMP, None).offset == 2
    assert partition.fetch_offset_for_timestamp(1500, None).offset == 1
    assert partition.fetch_offset_for_timestamp(1500, "read_uncommitted") is None  # offset 1 is above the HW
    found = partition.fetch_offset_for_timestamp(500, "read_uncommitted")
    assert (found.offset, found.timestamp, found.leader_epoch) == (0, 1000, 2)


@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed", None])
def test_earliest_offset_is_the_log_start_even_with_nothing_fetchable(log: Log, isolation) -> None:
    """Kafka answers EARLIEST with the log start offset, unbounded by the HW/LSO (KafkaJS's fetchTopicOffsets
    reads an empty partition's low watermark this way): an empty log is 0, not -1."""
    partition = Partition(log)
    partition.make_leader(leader_epoch=3)
    for timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
        assert partition.fetch_offset_for_timestamp(timestamp, isolation).offset == 0
    partition.append_records_to_leader(batch(b"a", b"b"), 1)
    log.delete_records(2)  # the log start moves up to the HW: nothing left to fetch
    for timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
        assert partition.fetch_offset_for_timestamp(timestamp, isolation).offset == 2
    assert partition.fetch_offset_for_timestamp(LATEST_TIMESTAMP, isolation).offset == 2


def test_leader_epoch_checks_and_non_leaders(log: Log) -> None:
    partition = Partition(log)
    partition.make_leader(leader_epoch=5)
    partition.append_records_to_leader(batch(), 1)
    assert partition.fetch_records(0, 1024, current_leader_epoch=5).records.size > 0
    with pytest.raises(FencedLeaderEpochError):
        partition.fetch_records(0, 1024, current_leader_epoch=4)
    with pytest.raises(UnknownLeaderEpochError):
        partition.fetch_records(0, 1024, current_leader_epoch=6)
    with pytest.raises(OffsetOutOfRangeError):
        partition.fetch_records(5, 1024)
    partition.make_follower(leader_id=1, leader_epoch=6)
    with pytest.raises(NotLeaderOrFollowerError):
        partition.append_records_to_leader(batch(), 1)
    with pytest.raises(NotLeaderOrFollowerError):
        partition.fetch_records(0, 1024)
    assert partition.fetch_records(0, 1024, "log_end", fetch_only_from_leader=False).records.size > 0


def test_truncation_follows_the_leaders_epochs(log: Log) -> None:
    partition = Partition(log)
    partition.make_leader(leader_epoch=1)
    for _ in range(3):
        partition.append_records_to_leader(batch(), 1)
    partition.make_leader(leader_epoch=2)
    for _ in range(3):
        partition.append_records_to_leader(batch(), 1)
    assert log.leader_epoch_cache.entries == [(1, 0), (2, 3)]
    # the leader says epoch 2 ended at 5 on its side: we keep 0..4
    assert partition.truncate_to_epoch_end(2, 5) == 5
    assert (partition.log_end_offset, partition.high_watermark) == (5, 5)
    # the leader knows only epoch 1, ending at 2: our epoch-2 entries go with the records
    assert partition.truncate_to_epoch_end(1, 2) == 2
    assert log.leader_epoch_cache.entries == [(1, 0)]
    assert partition.truncate_to(1) is True and partition.log_end_offset == 1


# ----- ReplicaManager, through the LogManager ------------------------------------------------------------------


def test_replica_manager_appends_and_fetches_per_partition(tmp_path: Path) -> None:
    with LogManager(tmp_path, clock=MockTime()) as manager:
        manager.create_topic("t", 2)
        manager.create_topic("strict", 1, {"min.insync.replicas": "2"})
        rm = manager.replica_manager
        woken = []
        rm.add_listener(woken.append)
        t0, t1, strict, missing = (TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("strict", 0),
                                   TopicPartition("nope", 0))  # fmt: skip
        results = rm.append_records({t0: batch(b"a" * 100), t1: batch(b"b"), strict: batch(), missing: batch()}, -1)
        assert results[t0].error is None and results[t0].info.first_offset == 0
        assert results[t1].error is None
        assert isinstance(results[strict].error, NotEnoughReplicasError)
        assert isinstance(results[missing].error, UnknownTopicOrPartitionError)
        assert woken == [t0, t1]
        assert manager.get_log("strict", 0).log_end_offset == 0
        bad = rm.append_records({t0: batch(), t1: batch()}, 2)
        assert all(isinstance(r.error, InvalidRequiredAcksError) for r in bad.values())
        assert manager.get_log("t", 0).log_end_offset == 1
        rm.append_records({t0: batch(b"c" * 100)}, 1)
        # KIP-74: the first partition with data may exceed the limit; then the total limit holds
        fetched = rm.fetch_messages({t0: (0, 10), t1: (0, 1 << 20), missing: (0, 100)}, "read_uncommitted", 10)
        assert len(list(fetched[t0].info.records.batches())) == 1
        assert fetched[t0].high_watermark == 2 and fetched[t0].log_start_offset == 0
        assert fetched[t1].info.records.size == 0
        assert isinstance(fetched[missing].error, UnknownTopicOrPartitionError)
        with pytest.raises(UnknownTopicOrPartitionError):
            rm.get_partition("nope", 0)
        assert rm.get_partition("t", 1).leader_epoch == 0


def test_log_manager_produce_takes_acks_and_names_kafkas_errors(tmp_path: Path) -> None:
    with LogManager(tmp_path, clock=MockTime()) as manager:
        manager.create_topic("strict", 1, {"min.insync.replicas": "2"})
        with pytest.raises(NotEnoughReplicasError):
            manager.produce("strict", b"v")
        with pytest.raises(InvalidRequiredAcksError):
            manager.produce("strict", b"v", acks=5)
        assert manager.produce("strict", b"v", acks=1) == (0, 0)
        assert manager.produce("strict", b"w", acks=0) == (0, 1)
        assert [r.value for r in manager.consume("strict", 0)] == [b"v", b"w"]


def run(*args: str, input: str | None = None):
    return CliRunner().invoke(main, list(args), input=input)


def test_cli_produce_acks_and_min_insync_replicas(tmp_path: Path) -> None:
    d = str(tmp_path)
    create = ("topics", "--log-dir", d, "--create", "--topic", "s", "--config", "min.insync.replicas=2")
    assert run(*create).exit_code == 0
    refused = run("produce", "--log-dir", d, "--topic", "s", input="a\nb\n")
    assert refused.exit_code == 1
    assert "is insufficient to satisfy the min.isr requirement of 2 for partition s-0" in refused.output
    assert "Produced 0 records to s\n" in refused.output
    assert "Not produced: 2 of the 2 lines read: lines 1-2" in refused.output
    assert "Produced 2 records to s." not in refused.output
    ok = run("produce", "--log-dir", d, "--topic", "s", "--request-required-acks", "1", input="a\nb\n")
    assert ok.exit_code == 0 and "Produced 2 records to s." in ok.output
    assert run("produce", "--log-dir", d, "--topic", "s", "--request-required-acks", "0", input="c\n").exit_code == 0
    invalid = run("produce", "--log-dir", d, "--topic", "s", "--request-required-acks", "2", input="c\n")
    assert invalid.exit_code == 2 and "'2' is not one of" in invalid.output
    consumed = run("consume", "--log-dir", d, "--topic", "s", "--from-beginning")
    assert consumed.stdout.splitlines() == ["a", "b", "c"]


def test_spark_sink_appends_through_the_partition_layer(tmp_path: Path) -> None:
    """The sink writes as a producer with Kafka's default acks=all: min.insync.replicas above its one replica
    refuses the write before anything is appended (NotEnoughReplicasError), as a Kafka producer's send fails."""
    pytest.importorskip("pyspark")
    import pyarrow as pa
    from pyspark.sql.types import StringType, StructField, StructType

    from kafkalog.spark.writer import WriterIdentity, write_arrow

    log_dir = tmp_path / "logs"
    with LogManager([log_dir], clock=MockTime()) as manager:
        manager.create_topic("strict", 1, {"min.insync.replicas": "2"})
        manager.create_topic("ok", 1)
    schema = StructType([StructField("value", StringType())])
    rows = pa.RecordBatch.from_pydict({"value": ["a", "b", "c"]})
    with pytest.raises(NotEnoughReplicasError):
        write_arrow({"path": str(log_dir), "topic": "strict"}, schema, [rows], WriterIdentity("job", 0))
    assert write_arrow({"path": str(log_dir), "topic": "ok"}, schema, [rows], WriterIdentity("job", 0)).appended == 3
    with LogManager([log_dir], clock=MockTime()) as manager:
        assert manager.get_log("strict", 0).log_end_offset == 0
        assert [r.value for r in manager.consume("ok", 0)] == [b"a", b"b", b"c"]
        assert manager.get_log("ok", 0).high_watermark == 3


def test_cli_produce_failing_part_way_says_what_was_and_was_not_produced(tmp_path: Path) -> None:
    d = str(tmp_path)
    assert run("topics", "--log-dir", d, "--create", "--topic", "k", "--partitions", "2").exit_code == 0
    # A bad line: every line before it is produced (as kafka-console-producer sends each line it reads).
    lines = "".join(f"key{i}:v{i}\n" for i in range(1, 701)) + "no separator\n" + "key:after\n"
    result = run("produce", "--log-dir", d, "--topic", "k", "--key-separator", ":", input=lines)
    assert result.exit_code == 1 and "line 701: no key separator" in result.output  # a data problem: 1
    assert "Produced 700 records to k before the error (partition 0 offsets 0-" in result.output
    assert "Not produced: 1 of the 701 lines read: line 701\nInput after line 701 was not read." in result.output
    assert "Produced 700 records to k.\n" not in result.output
    consumed = run("consume", "--log-dir", d, "--topic", "k", "--from-beginning")
    assert sorted(consumed.stdout.splitlines(), key=lambda v: int(v[1:])) == [f"v{i}" for i in range(1, 701)]

    # A refused record (over max.message.bytes) is reported by its line and the rest goes on, as Kafka's asynchronous
    # console producer (ConsoleProducer.java: send() with an ErrorLoggingCallback); the exit code says some failed.
    assert (
        run("topics", "--log-dir", d, "--create", "--topic", "m", "--config", "max.message.bytes=10000").exit_code == 0
    )
    lines = "".join(f"{i}\n" for i in range(1, 601)) + "x" * 20000 + "\n" + "".join(f"{i}\n" for i in range(602, 651))
    result = run("produce", "--log-dir", d, "--topic", "m", input=lines)
    assert result.exit_code == 1
    assert "Error when sending 1 record (line 601) to m-0: RecordTooLargeError" in result.output
    assert "Produced 649 records to m (partition 0 offsets 0-648)" in result.output
    assert "Not produced: 1 of the 650 lines read: line 601\n" in result.output
    consumed = run("consume", "--log-dir", d, "--topic", "m", "--from-beginning")
    assert consumed.stdout.splitlines() == [str(i) for i in range(1, 651) if i != 601]
    # --sync stops at the first refusal: what was read after it is not written
    lines = "a\n" + "x" * 20000 + "\nb\n"
    result = run("produce", "--log-dir", d, "--topic", "m", "--sync", input=lines)
    assert result.exit_code == 1
    assert "Produced 1 record to m before the error (partition 0 offsets 649-649)" in result.output
    assert "Not produced: 1 of the 2 lines read: line 2\nInput after line 2 was not read." in result.output


# ----- the leader epoch recorded when the partition is made leader (Kafka's makeLeader) ------------------------------
# A partition Kafka created and that never received a record: its leader-epoch-checkpoint holds epoch 0 at offset 0,
# written when the replica became leader (Partition.makeLeader -> UnifiedLog.maybeAssignEpochStartOffset).
NEVER_PRODUCED = ("broker-logs", "itumelengmogase-cp77-kraft", "kafka-data", "patient_admissions-1")


class CountingCheckpointWrites:
    """Every leader-epoch-checkpoint write (one by one or in a phased pass), by file name."""

    def __init__(self, monkeypatch) -> None:
        from kafkalog.storage.checkpoints import CheckpointFile

        self.writes: list[str] = []
        real_write, real_write_all = CheckpointFile.write_bytes, CheckpointFile.write_all

        def write(file, data, sync=True):  # CheckpointFile.write goes through write_bytes
            self.writes.append(file.path.parent.name)
            return real_write(file, data, sync)

        def write_all(writes):
            self.writes.extend(file.path.parent.name for file, _ in writes)
            return real_write_all(writes)

        monkeypatch.setattr(CheckpointFile, "write_bytes", write)
        monkeypatch.setattr(CheckpointFile, "write_all", staticmethod(write_all))


def test_make_leader_writes_the_epoch_at_the_log_end_and_the_first_append_writes_no_checkpoint(
    tmp_path: Path, monkeypatch
) -> None:
    from conftest import fixture_path

    kafka_bytes = (fixture_path(*NEVER_PRODUCED) / "leader-epoch-checkpoint").read_bytes()
    counted = CountingCheckpointWrites(monkeypatch)
    checkpoint = tmp_path / "t-0" / "leader-epoch-checkpoint"
    with Log.open(tmp_path / "t-0", clock=MockTime()) as lg:
        assert not checkpoint.exists()
        partition = Partition(lg)
        partition.make_leader()  # a new log led by its only replica: epoch 0 at log end 0, as Kafka writes it
        assert checkpoint.read_bytes() == kafka_bytes == b"0\n1\n0 0\n"
        assert counted.writes == ["t-0"]
        before = checkpoint.stat()
        for _ in range(3):
            partition.append_records_to_leader(batch(), required_acks=1)
        assert counted.writes == ["t-0"]  # the appends found epoch 0 current: no checkpoint written
        after = checkpoint.stat()
        assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
        assert [b.partition_leader_epoch for b in lg.read(0, 1 << 20, "log_end").records.batches()] == [0, 0, 0]
    with Log.open(tmp_path / "t-0", clock=MockTime()) as lg:
        Partition(lg).make_leader()  # a restart at the epoch its records have: nothing to write
        assert counted.writes == ["t-0"] and lg.leader_epoch_cache.entries == [(0, 0)]


def test_a_new_epoch_starts_at_the_log_end_when_made_leader(tmp_path: Path, monkeypatch) -> None:
    with Log.open(tmp_path / "t-0", clock=MockTime()) as lg:
        partition = Partition(lg, local_broker_id=2)
        partition.make_leader(leader_epoch=4, isr={2})
        for _ in range(2):
            partition.append_records_to_leader(batch(b"a", b"b"), required_acks=1)
        counted = CountingCheckpointWrites(monkeypatch)
        partition.make_leader(leader_epoch=7, isr={2})  # re-elected at a later epoch, log end 4
        assert lg.leader_epoch_cache.entries == [(4, 0), (7, 4)]
        assert (tmp_path / "t-0" / "leader-epoch-checkpoint").read_bytes() == b"0\n2\n4 0\n7 4\n"
        partition.append_records_to_leader(batch(), required_acks=1)
        partition.make_leader(leader_epoch=7, isr={2})  # the same epoch again: nothing new
        assert counted.writes == ["t-0"]
        assert lg.leader_epoch_cache.entries == [(4, 0), (7, 4)]


def test_provisional_leadership_records_no_epoch(tmp_path: Path) -> None:
    """A cluster's broker registers a log as leader until the controller's state says who leads at which epoch:
    that provisional leadership writes nothing; the controller's epoch is recorded when it makes it leader."""
    with Log.open(tmp_path / "t-0", clock=MockTime()) as lg:
        partition = Partition(lg, local_broker_id=1)
        partition.make_leader(provisional=True)
        assert lg.leader_epoch_cache.entries == []
        assert not (tmp_path / "t-0" / "leader-epoch-checkpoint").exists()
        partition.make_follower(2, 3)
        partition.make_leader(leader_epoch=5, isr={1})
        assert lg.leader_epoch_cache.entries == [(5, 0)]


def test_a_created_topics_checkpoints_are_written_off_the_first_produce(tmp_path: Path, monkeypatch) -> None:
    """LogManager.create_topic: each new partition is made leader (epoch 0 at offset 0) and its checkpoint written
    by the creation's background pass with partition.metadata (MockTime's scheduler runs it at once), so the
    first produce to every partition writes none."""
    from conftest import fixture_path

    kafka_bytes = (fixture_path(*NEVER_PRODUCED) / "leader-epoch-checkpoint").read_bytes()
    counted = CountingCheckpointWrites(monkeypatch)
    m = LogManager([tmp_path], clock=MockTime())
    m.startup()
    try:
        m.create_topic("fresh", 4)
        assert sorted(counted.writes) == [f"fresh-{p}" for p in range(4)]
        for p in range(4):
            assert (tmp_path / f"fresh-{p}" / "leader-epoch-checkpoint").read_bytes() == kafka_bytes
        counted.writes.clear()
        for p in range(4):
            m.produce("fresh", b"v", partition=p)
        assert counted.writes == []
    finally:
        m.shutdown()


def test_a_checkpoint_the_background_pass_could_not_write_is_written_before_the_first_record(
    tmp_path: Path, monkeypatch
) -> None:
    """The creation's pass has not run, or failed (disk full): the epoch stays recorded in memory, and the first
    append writes the checkpoint (with partition.metadata) before its record, or writes nothing while it cannot."""
    from kafkalog.errors import KafkaStorageError
    from kafkalog.storage.checkpoints import CheckpointError, CheckpointFile

    failures = [CheckpointError("Error while writing checkpoint file: [Errno 28] No space left on device")]
    real_write_all = CheckpointFile.write_all

    def write_all(writes):
        if failures:
            raise failures.pop()
        return real_write_all(writes)

    m = LogManager([tmp_path])
    m.startup()
    monkeypatch.setattr(m.scheduler, "schedule_once", lambda name, fn, delay_ms=0: None)  # the pass never runs
    monkeypatch.setattr(CheckpointFile, "write_all", staticmethod(write_all))
    try:
        m.create_topic("blocked", 1)
        checkpoint = tmp_path / "blocked-0" / "leader-epoch-checkpoint"
        assert not checkpoint.exists()
        partition = m.replica_manager.get_partition("blocked", 0)
        assert partition.log.leader_epoch_cache.entries == [(0, 0)]
        with pytest.raises(KafkaStorageError, match="leader epoch checkpoints"):
            partition.append_records_to_leader(batch(), required_acks=1)
        assert partition.log_end_offset == 0 and not checkpoint.exists()
        partition.append_records_to_leader(batch(), required_acks=1)
        assert checkpoint.read_bytes() == b"0\n1\n0 0\n" and partition.log_end_offset == 1
        assert (tmp_path / "blocked-0" / "partition.metadata").exists()
    finally:
        m.shutdown()
