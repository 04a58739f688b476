"""``kafkalog serve`` over log dirs that Kafka itself wrote (../shared/fixtures/broker-logs, copied first).

A real client reads topics back over the wire; the oracle is the segment files as aiokafka's record codec
parses them (independent of kafkalog). Kafka 2.1's v0 meta.properties has no cluster.id: the broker writes
one into it, as Kafka does, so the cluster id stays the same across restarts.
"""

from __future__ import annotations

import shutil

import aiokafka.record.memory_records as aio_memory
import pytest
from kafka import KafkaConsumer, TopicPartition

from brokertools import BrokerProcess
from conftest import fixture_path
from kafkalog.logdir import MetaProperties

TOPICS = ["_schemas", "docker-connect-configs", "docker-connect-offsets"]


def _file_records(partition_dir) -> list[tuple]:
    out = []
    for segment in sorted(partition_dir.glob("*.log")):
        records = aio_memory.MemoryRecords(segment.read_bytes())
        while records.has_next():
            batch = records.next_batch()
            if batch.is_control_batch:
                continue
            out.extend((r.offset, r.key, r.value, tuple(tuple(h) for h in r.headers)) for r in batch)
    return out


def _wire_records(bootstrap: str, topic: str) -> list[tuple]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    end = consumer.end_offsets([tp])[tp]
    got = []
    while consumer.position(tp) < end:
        for records in consumer.poll(timeout_ms=1000).values():
            got.extend((r.offset, r.key, r.value, tuple(tuple(h) for h in r.headers)) for r in records)
    consumer.close()
    return got


@pytest.fixture(scope="module")
def kafka_dir(tmp_path_factory):
    source = fixture_path("broker-logs", "mscaldas-cp512-lz4", "kafka-data")
    target = tmp_path_factory.mktemp("kafka-written") / "kafka-data"
    shutil.copytree(source, target)
    for path in [target, *target.rglob("*")]:
        path.chmod(path.stat().st_mode | 0o200)
    return source, target


def test_a_client_reads_kafka_written_topics_as_kafka_wrote_them(kafka_dir):
    source, target = kafka_dir
    node = MetaProperties.read(target).node_id
    with BrokerProcess(target, {"broker.id": str(node)}) as server:
        for topic in TOPICS:
            expected = _file_records(source / f"{topic}-0")
            assert expected, topic
            assert _wire_records(server.bootstrap, topic) == expected, topic


def test_the_cluster_id_written_into_a_v0_meta_properties_stays(kafka_dir):
    _, target = kafka_dir
    node = MetaProperties.read(target).node_id
    with BrokerProcess(target, {"broker.id": str(node)}):
        pass
    first = MetaProperties.read(target)
    with BrokerProcess(target, {"broker.id": str(node)}):
        pass
    second = MetaProperties.read(target)
    assert first.version == 0 and first.node_id == node and first.cluster_id
    assert second.cluster_id == first.cluster_id


@pytest.fixture(scope="module")
def kraft_dir(tmp_path_factory):
    source = fixture_path("broker-logs", "itumelengmogase-cp77-kraft", "kafka-data")
    target = tmp_path_factory.mktemp("kraft-written") / "kafka-data"
    shutil.copytree(source, target)
    for path in [target, *target.rglob("*")]:
        path.chmod(path.stat().st_mode | 0o200)
    return source, target


def test_a_kraft_brokers_dir_keeps_its_cluster_id_leader_epochs_and_records(kraft_dir):
    from kafka.protocol.metadata import MetadataRequest

    from brokertools import RawClient

    source, target = kraft_dir
    meta = (source / "meta.properties").read_text()
    props = dict(line.split("=", 1) for line in meta.splitlines() if "=" in line and not line.startswith("#"))
    # The last line of a leader-epoch-checkpoint is "<latest epoch> <its start offset>".
    latest_epoch = int((source / "_schemas-0" / "leader-epoch-checkpoint").read_text().split()[-2])
    with BrokerProcess(target, {"node.id": props["node.id"]}) as server:
        with RawClient(server.bootstrap) as c:
            response = c.call(MetadataRequest(topics=None, allow_auto_topic_creation=False), 12)
        assert response.cluster_id == props["cluster.id"]
        topics = {t.name: t for t in response.topics}
        assert topics["_schemas"].partitions[0].leader_epoch == latest_epoch
        assert topics["__consumer_offsets"].is_internal and not topics["_schemas"].is_internal
        assert len(topics["__consumer_offsets"].partitions) == 50
        assert _wire_records(server.bootstrap, "_schemas") == _file_records(source / "_schemas-0")
