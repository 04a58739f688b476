"""Metadata answers joined from cached topic entries (handlers/metadata_encoding.py), read by real clients from
``kafkalog serve``: confluent-kafka's list_topics and describe_topics (with authorized operations), kafka-python's
and aiokafka's metadata of many topics, every version 0-12 on a raw connection (each answer re-encoded by
kafka-python's generic encoder gives the same bytes), answers that follow added partitions and deleted topics, and
two listeners whose answers name each its own advertised host however they interleave."""

from __future__ import annotations

import asyncio
import struct

import pytest

from brokertools import BrokerProcess, RawClient, encode_request

TOPICS = {f"many-{i:02d}": 5 + i % 4 for i in range(30)}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    settings = {
        "num.partitions": "1",
        "listeners": "PLAINTEXT://127.0.0.1:0,OTHER://127.0.0.1:0",
        "advertised.listeners": "PLAINTEXT://127.0.0.1:0,OTHER://localhost:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,OTHER:PLAINTEXT",
    }
    server = BrokerProcess(tmp_path_factory.mktemp("broker-metadata"), settings).start()
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    for future in admin.create_topics([NewTopic(n, p, 1) for n, p in TOPICS.items()]).values():
        future.result(60)
    yield server
    assert server.stop() == 0, server.log


def _expected(answer: dict[str, int]) -> None:
    for name, count in TOPICS.items():
        assert answer.get(name) == count, (name, answer.get(name))


def test_confluent_kafka_lists_and_describes_many_topics(broker):
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AclOperation, AdminClient

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    listed = admin.list_topics(timeout=30)
    _expected({name: len(t.partitions) for name, t in listed.topics.items()})
    for name in TOPICS:
        for p in listed.topics[name].partitions.values():
            assert (p.leader, p.replicas, p.isrs, p.error) == (0, [0], [0], None)
    names = sorted(TOPICS)[:10]
    described = admin.describe_topics(TopicCollection(names), include_authorized_operations=True)
    for name, future in described.items():
        topic = future.result(30)
        assert len(topic.partitions) == TOPICS[name]
        # no authorizer: every operation Kafka supports on a topic
        assert set(topic.authorized_operations) == {
            AclOperation.READ,
            AclOperation.WRITE,
            AclOperation.CREATE,
            AclOperation.DELETE,
            AclOperation.ALTER,
            AclOperation.DESCRIBE,
            AclOperation.DESCRIBE_CONFIGS,
            AclOperation.ALTER_CONFIGS,
        }


def test_kafka_python_and_aiokafka_read_metadata_of_many_topics(broker):
    from aiokafka import AIOKafkaClient
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap)
    try:
        assert set(TOPICS) <= consumer.topics()
        _expected({name: len(consumer.partitions_for_topic(name) or ()) for name in TOPICS})
    finally:
        consumer.close()

    async def aio() -> dict[str, int]:
        client = AIOKafkaClient(bootstrap_servers=broker.bootstrap)
        await client.bootstrap()
        try:
            cluster = await client.fetch_all_metadata()
            return {name: len(cluster.partitions_for_topic(name) or ()) for name in cluster.topics()}
        finally:
            await client.close()

    _expected(asyncio.run(aio()))


@pytest.mark.parametrize("version", range(13))
def test_every_version_is_the_generic_encoders_bytes(broker, version):
    from kafka.protocol.metadata import MetadataRequest, MetadataResponse

    flexible = version >= 9
    client = RawClient(broker.bootstrap)
    try:
        for operations in (False, True) if version >= 8 else (False,):
            kwargs = {"allow_auto_topic_creation": False} if version >= 4 else {}
            if version >= 8:
                kwargs["include_topic_authorized_operations"] = operations
            if 8 <= version <= 10:
                kwargs["include_cluster_authorized_operations"] = operations
            for topics in (None if version else [], [MetadataRequest.MetadataRequestTopic(name="many-03")]):
                client.send(encode_request(MetadataRequest(topics=topics, **kwargs), version, 7))
                frame = client.receive()
                assert struct.unpack_from(">i", frame)[0] == 7
                body = frame[5 if flexible else 4 :]
                answer = MetadataResponse.decode(body, version=version)
                answer._header = None  # (a decoded message lacks it, and encode reads it)
                assert bytes(answer.encode(version=version)) == body
                if topics:
                    assert [t.name for t in answer.topics] == ["many-03"]
                else:
                    _expected({t.name: len(t.partitions) for t in answer.topics})
    finally:
        client.sock.close()


def test_answers_follow_added_partitions_and_deleted_topics(broker):
    from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("changing", 2, 1)])["changing"].result(30)
    assert len(admin.list_topics(timeout=30).topics["changing"].partitions) == 2
    admin.create_partitions([NewPartitions("changing", 7)])["changing"].result(30)
    assert len(admin.list_topics(timeout=30).topics["changing"].partitions) == 7
    admin.delete_topics(["changing"])["changing"].result(30)
    assert "changing" not in admin.list_topics(timeout=30).topics
    admin.create_topics([NewTopic("changing", 1, 1)])["changing"].result(30)
    assert len(admin.list_topics(timeout=30).topics["changing"].partitions) == 1
    admin.delete_topics(["changing"])["changing"].result(30)


def test_each_listener_is_told_its_own_advertised_host(broker):
    from kafka.protocol.metadata import MetadataRequest

    clients = {name: RawClient(broker.bootstrap_of(name)) for name in ("PLAINTEXT", "OTHER")}
    expected = {"PLAINTEXT": ("127.0.0.1", broker.ports["PLAINTEXT"]), "OTHER": ("localhost", broker.ports["OTHER"])}
    try:
        for name in ("PLAINTEXT", "OTHER", "OTHER", "PLAINTEXT", "OTHER"):
            answer = clients[name].call(MetadataRequest(topics=None, allow_auto_topic_creation=False), 12)
            assert [(b.host, b.port) for b in answer.brokers] == [expected[name]]
            _expected({t.name: len(t.partitions) for t in answer.topics})
    finally:
        for client in clients.values():
            client.sock.close()
