"""Request-percentage quotas (Kafka's ClientRequestQuotaManager): the time a request holds the event loop (unit),
the throttle formula capped at one window (unit, fake clock), where each response carries throttle_time_ms
(against kafka-python's encoders of Kafka's schemas), and on a running broker: a client over its
``request_percentage`` set with ``kafkalog configs`` gets throttle_time_ms > 0 and its request rate drops, while
another client is served unthrottled; librdkafka sees the throttle too."""

from __future__ import annotations

import asyncio
import struct
import subprocess
import sys
import threading
import time

import pytest
from kafka.protocol.metadata import MetadataRequest

from brokertools import REPO, BrokerProcess, RawClient, frame
from kafkalog.broker.protocol import APIS
from kafkalog.broker.quota import QuotaStore, TimedCoroutine, entity_key, request_quota, thread_percent_seconds
from kafkalog.broker.throttle import THROTTLE_FROM, throttle_field_offset


def _busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_timed_coroutine_counts_running_steps_not_waits():
    async def handler():
        _busy(0.02)
        await asyncio.sleep(0.3)  # a long poll: the loop is free meanwhile
        _busy(0.02)
        return "answer"

    async def main():
        timed = TimedCoroutine(handler())
        assert await timed == "answer"
        return timed.seconds

    seconds = asyncio.run(main())
    assert 0.04 <= seconds < 0.2

    async def failing():
        await asyncio.sleep(0)
        raise KeyError("boom")

    async def cancelled():
        task = asyncio.ensure_future(TimedCoroutine(asyncio.sleep(10)))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    async def run_failing():
        return await TimedCoroutine(failing())

    with pytest.raises(KeyError):
        asyncio.run(run_failing())
    asyncio.run(cancelled())


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_request_quota_throttle_is_kafkas_formula_capped_at_one_window(tmp_path):
    store = QuotaStore(tmp_path)
    store.alter([(entity_key([("client-id", "greedy")]), {"request_percentage": 10.0})])
    clock = Clock()
    quota = request_quota(store, samples=11, window_ms=1000, clock=clock)
    assert quota.applies("ANONYMOUS", "greedy") and not quota.applies("ANONYMOUS", "polite")
    # 10% of a thread over the minimum 10 s span = 1 s of thread time: within the quota
    assert quota.record("ANONYMOUS", "greedy", thread_percent_seconds(0.9)) == 0
    # 1.05 s over 10 s = 10.5 %: (10.5 - 10) / 10 * 10000 ms = 500 ms
    assert quota.record("ANONYMOUS", "greedy", thread_percent_seconds(0.15)) == 500
    # far over: Kafka bounds a request throttle by one quota window
    assert quota.record("ANONYMOUS", "greedy", thread_percent_seconds(5.0)) == 1000
    assert quota.record("ANONYMOUS", "polite", thread_percent_seconds(5.0)) == 0


def test_throttle_time_positions_match_kafkas_schemas():
    for key, spec in APIS.items():
        fields = spec.response._json["fields"]
        throttle = next((f for f in fields if f["name"] == "ThrottleTimeMs"), None)
        if throttle is None:
            assert key not in THROTTLE_FROM
            continue
        first = int(throttle["versions"].rstrip("+"))
        if key == 18:  # ApiVersions: exempt from the request quota
            continue
        assert THROTTLE_FROM[key] == first, spec.name
        for version in range(max(first, spec.min_version), spec.max_version + 1):
            body = spec.response(version=version, throttle_time_ms=0x0A0B0C0D).encode(version=version)
            expected = body.find(struct.pack(">i", 0x0A0B0C0D))
            assert throttle_field_offset(key, version, len(body)) == expected, (spec.name, version)


# ----- a broker ------------------------------------------------------------------------------------------------
def _kafkalog(*args: str) -> None:
    result = subprocess.run(
        [sys.executable, "-c", "from kafkalog.cli import main; main()", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr + result.stdout


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("request-quota")) as b:
        for client in ("greedy", "greedy-producer"):
            _kafkalog(
                "configs",
                "--bootstrap-server",
                b.bootstrap,
                "--alter",
                "--entity-type",
                "clients",
                "--entity-name",
                client,
                "--add-config",
                "request_percentage=0.1",
            )
        yield b


def _metadata_loop(bootstrap: str, client_id: str, seconds: float, out: dict) -> None:
    """Metadata v9 requests back to back for ``seconds``: how many were answered, and their throttle times."""
    request = MetadataRequest(version=9, topics=[], allow_auto_topic_creation=False)
    body = request.encode(version=9)
    throttles: list[int] = []
    with RawClient(bootstrap) as client:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            client.send(frame(3, 9, body, client_id=client_id))
            answer = client.receive()
            # response header v1 (flexible): correlation id, empty tagged fields; then throttle_time_ms first
            throttles.append(struct.unpack_from(">i", answer, 5)[0])
    out[client_id] = throttles


def test_a_client_over_its_request_percentage_is_throttled_and_others_are_not(broker):
    results: dict[str, list[int]] = {}
    threads = [
        threading.Thread(target=_metadata_loop, args=(broker.bootstrap, name, 3.0, results))
        for name in ("greedy", "polite")
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    greedy, polite = results["greedy"], results["polite"]
    assert max(greedy) > 0, "the greedy client was told to back off"
    assert all(0 < t <= 1000 for t in greedy if t), "throttles are bounded by one quota window"
    assert max(polite) == 0, "a client without a quota is never throttled"
    # muted for each throttle time, the greedy client gets through far fewer requests in the same time
    assert len(greedy) * 3 < len(polite), (len(greedy), len(polite))


def test_librdkafka_reports_the_request_throttle(broker):
    from confluent_kafka import Producer

    throttled: list[int] = []
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "client.id": "greedy-producer",
            "linger.ms": 0,
            "throttle_cb": lambda event: throttled.append(event.throttle_time),
        }
    )
    deadline = time.monotonic() + 20
    while not throttled and time.monotonic() < deadline:
        for _ in range(50):
            producer.produce("request-quota", b"x")
            producer.poll(0)
        producer.flush(10)
        producer.poll(0.05)
    assert throttled and max(throttled) > 0, "librdkafka received throttle_time_ms > 0 from the broker"
    assert producer.flush(30) == 0, "a throttled producer is slowed, not refused"


def test_a_produce_response_carries_the_request_throttle(broker):
    """throttle_time_ms is a Produce response's last field: the router writes it there too."""
    from kafka.protocol.producer import ProduceRequest, ProduceResponse

    from kafkalog.record import RecordBatchBuilder

    builder = RecordBatchBuilder()
    builder.append(None, b"v")
    P = ProduceRequest.TopicProduceData
    request = ProduceRequest(
        transactional_id=None,
        acks=1,
        timeout_ms=5000,
        topic_data=[P(name="request-quota", partition_data=[P.PartitionProduceData(index=0, records=builder.build())])],
    )
    body = request.encode(version=9)
    throttles = []
    with RawClient(broker.bootstrap) as client:
        for correlation_id in range(1, 400):
            client.send(frame(0, 9, body, correlation_id, client_id="greedy"))
            response = ProduceResponse[9].decode(client.receive()[5:])
            assert response.responses[0].partition_responses[0].error_code == 0
            throttles.append(response.throttle_time_ms)
            if response.throttle_time_ms > 0:
                break
    assert throttles[-1] > 0, throttles
