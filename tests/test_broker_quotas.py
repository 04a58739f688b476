"""Client quotas: Kafka's precedence and throttle formula (unit, with a fake clock), and on a running broker:
quotas set with ``kafkalog configs``, a producer over its byte rate answered with throttle_time_ms and its
connection muted for that long while another client is served at once, a throttled fetch without records."""

from __future__ import annotations

import struct
import subprocess
import sys
import time

import pytest
from kafka.protocol.consumer import FetchRequest
from kafka.protocol.metadata import ApiVersionsRequest
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from brokertools import REPO, BrokerProcess, RawClient, frame
from kafkalog.broker.quota import CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE, QuotaManager, QuotaStore, entity_key
from kafkalog.record import RecordBatchBuilder


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_quota_precedence_and_throttle_formula(tmp_path):
    store = QuotaStore(tmp_path)
    store.alter(
        [
            (entity_key([("client-id", None)]), {PRODUCER_BYTE_RATE: 100.0}),
            (entity_key([("user", "alice")]), {PRODUCER_BYTE_RATE: 1000.0}),
            (entity_key([("user", "alice"), ("client-id", "etl")]), {PRODUCER_BYTE_RATE: 5000.0}),
        ]
    )
    assert store.lookup("alice", "etl", PRODUCER_BYTE_RATE)[1] == 5000.0  # (user, client-id) first
    assert store.lookup("alice", "web", PRODUCER_BYTE_RATE)[1] == 1000.0  # then (user)
    assert store.lookup("bob", "web", PRODUCER_BYTE_RATE)[1] == 100.0  # then (default client-id)
    assert store.lookup("bob", "web", CONSUMER_BYTE_RATE) is None
    assert QuotaStore(tmp_path).entries == store.entries  # persisted

    clock = Clock()
    quotas = QuotaManager(store, PRODUCER_BYTE_RATE, samples=11, window_ms=1000, clock=clock)
    assert quotas.record("alice", "web", 9000) == 0  # 9000 B over the minimum 10 s window: 900 B/s < 1000
    # 11000 B over 10 s = 1100 B/s: (1100 - 1000) / 1000 * 10000 ms (Kafka's QuotaUtils.throttleTime)
    assert quotas.record("alice", "other-client", 2000) == 1000  # alice's clients share her user quota
    clock.now += 30  # every window expired
    assert quotas.record("alice", "web", 10) == 0
    # Each client id has its own bytes under the default client-id quota.
    assert quotas.record("bob", "a", 1000) == 0 and quotas.record("bob", "b", 1000) == 0
    assert quotas.record("bob", "a", 1) > 0


def _kafkalog(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "from kafkalog.cli import main; main()", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin"},
    )


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("quotas")) as b:
        for args in (
            ["--entity-type", "clients", "--entity-name", "slow", "--add-config", "producer_byte_rate=20000"],
            ["--entity-type", "clients", "--entity-name", "slow-reader", "--add-config", "consumer_byte_rate=5000"],
        ):
            result = _kafkalog("configs", "--bootstrap-server", b.bootstrap, "--alter", *args)
            assert result.returncode == 0, result.stderr
        with RawClient(b.bootstrap) as client:  # auto-creates the topic
            from kafka.protocol.metadata import MetadataRequest

            topic = client.call(MetadataRequest(version=4, topics=["quota-topic"], allow_auto_topic_creation=True), 4)
            assert topic.topics[0].error_code == 0
        yield b


def test_kafkalog_configs_describes_client_quotas(broker):
    result = _kafkalog("configs", "--bootstrap-server", broker.bootstrap, "--describe", "--entity-type", "clients")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "Quota configs for client-id 'slow' are producer_byte_rate=20000.0",
        "Quota configs for client-id 'slow-reader' are consumer_byte_rate=5000.0",
    ]


def _produce(client: RawClient, client_id: str, value: bytes, correlation_id: int):
    builder = RecordBatchBuilder()
    builder.append(None, value)
    P = ProduceRequest.TopicProduceData
    request = ProduceRequest(
        transactional_id=None,
        acks=1,
        timeout_ms=5000,
        topic_data=[P(name="quota-topic", partition_data=[P.PartitionProduceData(index=0, records=builder.build())])],
    )
    client.send(frame(0, 9, request.encode(version=9), correlation_id, client_id=client_id))
    body = client.receive()
    assert struct.unpack_from(">i", body)[0] == correlation_id
    response = ProduceResponse[9].decode(body[5:])
    assert response.responses[0].partition_responses[0].error_code == 0
    return response


def test_a_producer_over_its_quota_is_throttled_and_others_are_not(broker):
    value = b"v" * 60000
    with RawClient(broker.bootstrap, timeout=30) as slow, RawClient(broker.bootstrap) as fast:
        throttles = [_produce(slow, "slow", value, i).throttle_time_ms for i in range(1, 5)]
        # 4 x ~60 KB over the minimum 10 s window = ~24000 B/s > 20000: (24000 - 20000) / 20000 * 10 s = ~2 s
        assert throttles[0] == 0 and throttles[-1] > 1000, throttles
        assert throttles[-1] < 11000
        start = time.monotonic()
        assert _produce(fast, "fast", value, 1).throttle_time_ms == 0  # another client: served at once
        assert time.monotonic() - start < 1.0
        start = time.monotonic()
        slow.send(frame(18, 0, ApiVersionsRequest(version=0).encode(version=0), 9, client_id="slow"))
        slow.receive()
        assert time.monotonic() - start >= throttles[-1] / 1000.0 * 0.9, "the throttled connection was muted"


def test_a_throttled_fetch_returns_no_records(broker):
    from kafka.protocol.consumer import FetchResponse

    with RawClient(broker.bootstrap) as producer:
        for i in range(3):
            _produce(producer, "loader", b"r" * 30000, i + 1)
    T = FetchRequest.FetchTopic
    request = FetchRequest(
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=0,
        max_bytes=50 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        forgotten_topics_data=[],
        rack_id="",
        topics=[
            T(
                topic="quota-topic",
                partitions=[
                    T.FetchPartition(
                        partition=0,
                        current_leader_epoch=-1,
                        fetch_offset=0,
                        log_start_offset=-1,
                        partition_max_bytes=1 << 20,
                    )
                ],
            )
        ],
    )
    with RawClient(broker.bootstrap, timeout=30) as reader:
        reader.send(frame(1, 11, request.encode(version=11), 1, client_id="slow-reader"))
        first = FetchResponse[11].decode(reader.receive()[4:])
        # ~90 KB is over 5000 B/s * 10 s: this fetch is throttled, answered empty, and its bytes not counted
        assert first.throttle_time_ms > 0 and first.responses == []
