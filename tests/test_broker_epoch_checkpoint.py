"""A new partition's leader-epoch-checkpoint through ``kafkalog serve``: written when CreateTopics makes the partition
leader (Kafka's Partition.makeLeader records the leader epoch at the log end), before any produce, with the bytes
Kafka writes for a partition that never received a record (../shared/fixtures: patient_admissions-1 of a
Confluent 7.7 broker); the first produce to each partition then leaves the file as it is (issue 23: the first
produce to thousands of new partitions wrote them with 2 fsyncs each on the event loop).
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
