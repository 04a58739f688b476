"""A new partition's leader-epoch-checkpoint through ``kafkalog serve``: written when CreateTopics makes the partition
leader (Kafka's Partition.makeLeader records the leader epoch at the log end), before any produce, with the bytes
Kafka writes for a partition that never received a record (../shared/fixtures: patient_admissions-1 of a
Confluent 7.7 broker); the first produce to each partition then leaves the file as it is (issue 23: the first
produce to thousands of new partitions wrote them with 2 fsyncs each on the event loop). A restart, clean or after
SIGKILL, rewrites none of them (each was rewritten twice per empty partition at every start: the loader's
truncation at the log end, then makeLeader's epoch 0 at offset 0 again).
"""

from __future__ import annotations

from pathlib import Path

from conftest import fixture_path
from tests.brokertools import BrokerProcess, wait_until

NEVER_PRODUCED = ("broker-logs", "itumelengmogase-cp77-kraft", "kafka-data", "patient_admissions-1")
PARTITIONS = 6


def test_create_topics_writes_each_new_partitions_epoch_before_any_produce(tmp_path: Path) -> None:
    from confluent_kafka import Producer

    from benchmarks.bench_scale import create_topics

    kafka_bytes = (fixture_path(*NEVER_PRODUCED) / "leader-epoch-checkpoint").read_bytes()
    logs = tmp_path / "logs"
    with BrokerProcess(logs) as broker:
        create_topics(broker.bootstrap, ["fresh"], PARTITIONS, 1)
        files = [logs / f"fresh-{p}" / "leader-epoch-checkpoint" for p in range(PARTITIONS)]
        # Written by the creation's background pass (with partition.metadata), so poll rather than expect it at once.
        assert wait_until(lambda: all(f.exists() for f in files), timeout=30), [f for f in files if not f.exists()]
        assert [f.read_bytes() for f in files] == [kafka_bytes] * PARTITIONS  # epoch 0 at offset 0
        before = [(f.stat().st_ino, f.stat().st_mtime_ns) for f in files]
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
        for p in range(PARTITIONS):
            producer.produce("fresh", b"first", partition=p)
        assert producer.flush(30) == 0
        assert all((logs / f"fresh-{p}" / "00000000000000000000.log").stat().st_size > 0 for p in range(PARTITIONS))
        after = [(f.stat().st_ino, f.stat().st_mtime_ns) for f in files]
        assert after == before  # the first produce found epoch 0 current: no checkpoint rewritten
        assert [f.read_bytes() for f in files] == [kafka_bytes] * PARTITIONS


def _stats(files: list[Path]) -> list[tuple[int, int]]:
    return [(f.stat().st_ino, f.stat().st_mtime_ns) for f in files]


def _produce_one(bootstrap: str, partitions: list[tuple[str, int]]) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for topic, p in partitions:
        producer.produce(topic, b"after restart", partition=p)
    assert producer.flush(30) == 0


def test_a_restart_clean_or_killed_rewrites_no_epoch_checkpoint(tmp_path: Path) -> None:
    from benchmarks.bench_scale import create_topics

    kafka_bytes = (fixture_path(*NEVER_PRODUCED) / "leader-epoch-checkpoint").read_bytes()
    logs = tmp_path / "logs"
    idle = [logs / f"idle-{p}" / "leader-epoch-checkpoint" for p in range(30)]
    busy = [logs / f"busy-{p}" / "leader-epoch-checkpoint" for p in range(2)]
    with BrokerProcess(logs) as broker:
        create_topics(broker.bootstrap, ["idle"], len(idle), 1)
        create_topics(broker.bootstrap, ["busy"], len(busy), 1)
        assert wait_until(lambda: all(f.exists() for f in idle + busy), timeout=30)
        _produce_one(broker.bootstrap, [("busy", 0), ("busy", 1)])
    assert [f.read_bytes() for f in idle + busy] == [kafka_bytes] * (len(idle) + len(busy))
    before = _stats(idle + busy)
    with BrokerProcess(logs) as broker:  # after a clean shutdown
        assert _stats(idle + busy) == before
        _produce_one(broker.bootstrap, [("idle", 0), ("busy", 0)])  # epoch 0 is current: nothing to write first
        assert _stats(idle + busy) == before
    assert _stats(idle + busy) == before  # nor at shutdown
    killed = BrokerProcess(logs).start()
    killed.proc.kill()
    killed.proc.wait(30)
    assert not (logs / ".kafka_cleanshutdown").exists()
    with BrokerProcess(logs) as broker:  # after SIGKILL: the logs are recovered, their epochs relearnt in memory
        assert _stats(idle + busy) == before
        _produce_one(broker.bootstrap, [("idle", 1), ("busy", 1)])
    assert _stats(idle + busy) == before
    assert [f.read_bytes() for f in idle + busy] == [kafka_bytes] * (len(idle) + len(busy))
