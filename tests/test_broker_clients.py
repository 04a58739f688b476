"""Real Kafka clients against ``kafkalog serve``: kafka-python, confluent-kafka (librdkafka), aiokafka and kcat.

Each produces with every codec, headers, null keys and values, idempotence on, and acks 0/1/all, then
consumes from the earliest offset, a given offset, the latest offset and a timestamp; what comes back must be
exactly what was sent. The log dir the broker wrote then passes ``kafkalog verify``.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time

import pytest
from click.testing import CliRunner

from brokertools import BrokerProcess, wait_until

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def messages(tag: str, n: int = 12) -> list[tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]]:
    """Records covering null keys, null values, empty values, binary bytes and several headers."""
    out = []
    for i in range(n):
        key = None if i % 4 == 0 else f"{tag}-k{i}".encode()
        value = None if i % 5 == 1 else (b"" if i % 7 == 2 else f"{tag}-v{i}".encode() + bytes(range(i * 3)))
        headers = [] if i % 3 == 0 else [("h1", f"x{i}".encode()), ("h2", b"\x00\xff")]
        out.append((key, value, headers))
    return out


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    server = BrokerProcess(tmp_path_factory.mktemp("broker-clients"), {"num.partitions": "1"}).start()
    yield server
    assert server.stop() == 0, server.log


# ----- kafka-python ------------------------------------------------------------------------------------------
def _kp_consume(broker, topic, offset=None, n=None, timeout=15):
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap, enable_auto_commit=False, group_id=None, consumer_timeout_ms=3000
    )
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    if offset is None:
        consumer.seek_to_beginning(tp)
    else:
        consumer.seek(tp, offset)
    got = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and (n is None or len(got) < n):
        batch = consumer.poll(timeout_ms=500)
        for records in batch.values():
            got.extend(records)
        if n is None and not batch:
            break
    consumer.close()
    return got


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_round_trip(broker, codec):
    from kafka import KafkaProducer

    topic = f"kp-{codec}"
    sent = messages(topic)
    producer = KafkaProducer(
        bootstrap_servers=broker.bootstrap,
        compression_type=None if codec == "none" else codec,
        acks="all",
        enable_idempotence=True,
        linger_ms=5,
    )
    futures = [producer.send(topic, key=k, value=v, headers=h) for k, v, h in sent]
    metadata = [f.get(timeout=20) for f in futures]
    producer.close()
    assert [m.offset for m in metadata] == list(range(len(sent)))
    got = _kp_consume(broker, topic, n=len(sent))
    assert [(r.key, r.value, list(r.headers)) for r in got] == sent
    middle = _kp_consume(broker, topic, offset=5, n=len(sent) - 5)
    assert [r.offset for r in middle] == list(range(5, len(sent)))


@pytest.mark.parametrize("acks", [0, 1, "all"])
def test_kafka_python_acks(broker, acks):
    from kafka import KafkaProducer

    topic = f"kp-acks-{acks}"
    sent = messages(topic, 6)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks=acks, enable_idempotence=acks == "all")
    for k, v, h in sent:
        producer.send(topic, key=k, value=v, headers=h)
    producer.flush(20)
    producer.close()
    got = _kp_consume(broker, topic, n=len(sent))
    assert [(r.key, r.value, list(r.headers)) for r in got] == sent


# ----- confluent-kafka (librdkafka) --------------------------------------------------------------------------
def _ck_consume(broker, topic, offset, n, timeout=20, isolation="read_committed", partition=0):
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    consumer.assign([TopicPartition(topic, partition, offset)])
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is None:
            continue
        assert m.error() is None, m.error()
        got.append(m)
    consumer.close()
    return got


def _ck_headers(m):
    return [(k, v) for k, v in (m.headers() or [])]


@pytest.mark.parametrize("codec", CODECS)
def test_confluent_kafka_round_trip(broker, codec):
    from confluent_kafka import Producer

    topic = f"ck-{codec}"
    sent = messages(topic)
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "compression.type": codec,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
        }
    )
    reports = []
    for k, v, h in sent:
        producer.produce(topic, key=k, value=v, headers=h, on_delivery=lambda err, msg: reports.append((err, msg)))
    assert producer.flush(30) == 0
    assert [e for e, _ in reports if e is not None] == []
    assert sorted(m.offset() for _, m in reports) == list(range(len(sent)))
    got = _ck_consume(broker, topic, 0, len(sent))
    assert [(m.key(), m.value(), _ck_headers(m)) for m in got] == sent


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_confluent_kafka_acks(broker, acks):
    from confluent_kafka import Producer

    topic = f"ck-acks-{acks}"
    sent = messages(topic, 6)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": acks, "enable.idempotence": acks == "all"})
    for k, v, h in sent:
        producer.produce(topic, key=k, value=v, headers=h)
    assert producer.flush(30) == 0
    got = _ck_consume(broker, topic, 0, len(sent))
    assert [(m.key(), m.value(), _ck_headers(m)) for m in got] == sent


def test_consume_from_latest_offset_and_timestamp(broker):
    from confluent_kafka import Consumer, Producer, TopicPartition
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTopicPartition

    topic = "positions"
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i, ts in enumerate([1_000_000, 2_000_000, 3_000_000]):
        producer.produce(topic, value=b"old%d" % i, timestamp=ts)
    assert producer.flush(30) == 0

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused", "enable.auto.commit": False})
    found = consumer.offsets_for_times([TopicPartition(topic, 0, 1_500_000)], timeout=10)
    assert found[0].offset == 1
    assert consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (0, 3)
    consumer.close()

    latest = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None, enable_auto_commit=False)
    tp = KTopicPartition(topic, 0)
    latest.assign([tp])
    latest.seek_to_end(tp)
    assert latest.position(tp) == 3  # resolved by ListOffsets(latest) before anything new is produced
    producer.produce(topic, value=b"new")
    assert producer.flush(30) == 0
    got = []
    deadline = time.monotonic() + 15
    while not got and time.monotonic() < deadline:
        got = [r for records in latest.poll(timeout_ms=500).values() for r in records]
    latest.close()
    assert [(r.offset, r.value) for r in got] == [(3, b"new")]
    from_ts = _ck_consume(broker, topic, found[0].offset, 3)
    assert [m.value() for m in from_ts] == [b"old1", b"old2", b"new"]


# ----- aiokafka ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("codec", CODECS)
def test_aiokafka_round_trip(broker, codec):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    topic = f"aio-{codec}"
    sent = messages(topic)

    async def run():
        producer = AIOKafkaProducer(
            bootstrap_servers=broker.bootstrap,
            enable_idempotence=True,
            acks="all",
            compression_type=None if codec == "none" else codec,
        )
        await producer.start()
        try:
            offsets = []
            for k, v, h in sent:
                md = await producer.send_and_wait(topic, key=k, value=v, headers=h)
                offsets.append(md.offset)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False)
        await consumer.start()
        try:
            tp = TopicPartition(topic, 0)
            consumer.assign([tp])
            consumer.seek(tp, 0)
            got = []
            while len(got) < len(sent):
                batch = await asyncio.wait_for(consumer.getmany(tp, timeout_ms=1000), 20)
                got.extend(batch.get(tp, []))
        finally:
            await consumer.stop()
        return offsets, got

    offsets, got = asyncio.run(run())
    assert offsets == list(range(len(sent)))
    assert [(r.key, r.value, list(r.headers)) for r in got] == sent


# ----- kcat ----------------------------------------------------------------------------------------------------
KCAT = shutil.which("kcat") or shutil.which("kafkacat")


@pytest.mark.skipif(
    KCAT is None, reason="kcat is not installed (apt-get install kcat; `make test` installs it as root)"
)
@pytest.mark.parametrize("codec", CODECS)
def test_kcat_round_trip(broker, codec):
    topic = f"kcat-{codec}"
    lines = [f"key{i}\tvalue-{i}-{'x' * i}" for i in range(10)]
    produce = subprocess.run(
        [
            KCAT,
            "-b",
            broker.bootstrap,
            "-P",
            "-t",
            topic,
            "-p",
            "0",
            "-z",
            codec,
            "-K",
            "\t",
            "-H",
            "h=v",
            "-X",
            "enable.idempotence=true",
        ],
        input="\n".join(lines) + "\n",
        text=True,
        capture_output=True,
        timeout=60,
    )
    assert produce.returncode == 0, produce.stderr
    consume = subprocess.run(
        [KCAT, "-b", broker.bootstrap, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-f", "%o|%k|%s|%h\\n"],
        text=True,
        capture_output=True,
        timeout=60,
    )
    assert consume.returncode == 0, consume.stderr
    expected = [f"{i}|key{i}|value-{i}-{'x' * i}|h=v" for i in range(10)]
    assert consume.stdout.splitlines() == expected
    tail = subprocess.run(
        [KCAT, "-b", broker.bootstrap, "-C", "-t", topic, "-p", "0", "-o", "7", "-e", "-f", "%o\\n"],
        text=True,
        capture_output=True,
        timeout=60,
    )
    assert tail.stdout.split() == ["7", "8", "9"]


# ----- the log dir the broker wrote ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def written_log_dir(tmp_path_factory):
    """A log dir written by a broker (200 lz4 records from an idempotent producer), after a clean shutdown."""
    from confluent_kafka import Producer

    tmp_path = tmp_path_factory.mktemp("broker-written")
    with BrokerProcess(tmp_path / "logs") as server:
        producer = Producer(
            {"bootstrap.servers": server.bootstrap, "compression.type": "lz4", "enable.idempotence": True}
        )
        for i in range(200):
            producer.produce("verified", key=b"%d" % (i % 7), value=b"v" * i, headers=[("n", b"%d" % i)])
        assert producer.flush(30) == 0
        code = server.stop()
    return tmp_path, server, code


def test_log_dir_written_by_the_broker_passes_verify(written_log_dir):
    from kafkalog.cli import main

    tmp_path, server, code = written_log_dir
    assert code == 0, server.log
    assert "shut down completed" in server.log
    assert (tmp_path / "logs" / ".kafka_cleanshutdown").exists()
    result = CliRunner().invoke(main, ["verify", str(tmp_path / "logs")])
    assert result.exit_code == 0, result.output


# ----- admin clients ---------------------------------------------------------------------------------------------
def test_confluent_admin_client(broker):
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    futures = admin.create_topics([NewTopic("admin-made", 3, 1, config={"retention.ms": "123456"})])
    futures["admin-made"].result(20)
    cluster = admin.describe_cluster().result(20)
    assert [n.id for n in cluster.nodes] == [0] and cluster.controller.id == 0
    assert cluster.cluster_id == (broker.log_dir / "meta.properties").read_text().split("cluster.id=")[1].split()[0]
    resource = ConfigResource(ConfigResource.Type.TOPIC, "admin-made")
    configs = admin.describe_configs([resource])[resource].result(20)
    assert configs["retention.ms"].value == "123456" and configs["retention.ms"].source == 1  # a topic override
    assert configs["cleanup.policy"].value == "delete" and configs["cleanup.policy"].is_default
    assert set(admin.list_topics(timeout=20).topics["admin-made"].partitions) == {0, 1, 2}

    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(10):
        producer.produce("admin-made", value=b"%d" % i, partition=1)
    assert producer.flush(20) == 0
    deleted = admin.delete_records([TopicPartition("admin-made", 1, 4)])
    assert deleted[TopicPartition("admin-made", 1, 4)].result(20).low_watermark == 4

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused"})
    assert consumer.get_watermark_offsets(TopicPartition("admin-made", 1), timeout=10) == (4, 10)
    consumer.close()
    admin.delete_topics(["admin-made"])["admin-made"].result(20)
    assert "admin-made" not in admin.list_topics(timeout=20).topics


def test_kafka_python_admin_client(broker):
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.create_topics([NewTopic("kp-admin", num_partitions=2, replication_factor=1)])
        assert "kp-admin" in admin.list_topics()
        described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "kp-admin")])
        assert described  # decoded by the client without error
        admin.delete_topics(["kp-admin"])
        assert "kp-admin" not in admin.list_topics()
    finally:
        admin.close()


def test_log_dir_written_by_the_broker_reads_in_spark(spark, written_log_dir):
    tmp_path, _, _ = written_log_dir
    df = spark.read.format("kafkalog").option("path", str(tmp_path / "logs")).option("subscribe", "verified")
    rows = sorted(df.option("includeHeaders", "true").load().toArrow().to_pylist(), key=lambda r: r["offset"])
    assert [(r["offset"], r["key"], r["value"]) for r in rows] == [(i, b"%d" % (i % 7), b"v" * i) for i in range(200)]
    assert all(r["headers"] == [{"key": "n", "value": b"%d" % r["offset"]}] for r in rows)


def test_alter_topic_configs_with_admin_clients(broker):
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("configured", 1, 1, config={"retention.ms": "1000000"})])["configured"].result(20)
    resource = ConfigResource(
        ConfigResource.Type.TOPIC,
        "configured",
        incremental_configs=[
            ConfigEntry("segment.bytes", "1048576", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
            ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
        ],
    )
    admin.incremental_alter_configs([resource])[resource].result(20)
    described = ConfigResource(ConfigResource.Type.TOPIC, "configured")
    configs = admin.describe_configs([described])[described].result(20)
    assert configs["segment.bytes"].value == "1048576" and configs["segment.bytes"].source == 1
    assert configs["retention.ms"].is_default
    assert configs["cleanup.policy"].value == "delete,compact"
    bad = ConfigResource(
        ConfigResource.Type.TOPIC,
        "configured",
        incremental_configs=[ConfigEntry("segment.bytes", "-5", incremental_operation=AlterConfigOpType.SET)],
    )
    with pytest.raises(Exception, match=r"segment\.bytes"):
        admin.incremental_alter_configs([bad])[bad].result(20)
    assert admin.describe_configs([described])[described].result(20)["segment.bytes"].value == "1048576"

    from kafka.protocol.admin import AlterConfigsRequest

    from brokertools import RawClient

    R = AlterConfigsRequest.AlterConfigsResource
    request = AlterConfigsRequest(
        resources=[
            R(
                resource_type=2,
                resource_name="configured",
                configs=[R.AlterableConfig(name="retention.ms", value="5000")],
            )
        ],
        validate_only=False,
    )
    with RawClient(broker.bootstrap) as c:
        assert c.call(request, 2).responses[0].error_code == 0
    configs = admin.describe_configs([described])[described].result(20)
    # AlterConfigs replaces the whole override set: segment.bytes and cleanup.policy are back to their defaults.
    assert configs["retention.ms"].value == "5000" and configs["segment.bytes"].is_default
    assert configs["cleanup.policy"].value == "delete"


def test_create_partitions_with_an_admin_client(broker):
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("growing", 2, 1)])["growing"].result(20)
    admin.create_partitions([NewPartitions("growing", 5)])["growing"].result(20)
    with pytest.raises(Exception, match="higher than the requested 3"):
        admin.create_partitions([NewPartitions("growing", 3)])["growing"].result(20)
    assert set(admin.list_topics(timeout=20).topics["growing"].partitions) == set(range(5))
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce("growing", value=b"to the new partition", partition=4)
    assert producer.flush(20) == 0
    got = _ck_consume(broker, "growing", 0, 1, partition=4)
    assert [m.value() for m in got] == [b"to the new partition"]
    files = [broker.log_dir / f"growing-{p}" / "partition.metadata" for p in range(5)]
    assert wait_until(lambda: all(f.exists() for f in files))  # the broker's flush-metadata-file task, as Kafka's
    topic_ids = {f.read_text() for f in files}
    assert len(topic_ids) == 1  # the new partitions carry the topic's id
