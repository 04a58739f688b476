"""Incremental fetch sessions (KIP-227) through real clients against ``kafkalog serve``.

kafka-python 3.x's consumer opens a session (FetchSessionHandler) and then sends incremental fetches; the test
checks that it reads every record of a multi-partition topic in order, that its session advanced through many
incremental epochs (the client only moves to the next epoch on an accepted response), and that the broker's
FetchSessionCache gauges show the session. librdkafka (confluent-kafka) and kcat never ask for a session: they must
keep working sessionless on the same broker.
"""

from __future__ import annotations

import shutil
import subprocess
import time

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CTopicPartition
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KTopicPartition

from brokertools import BrokerProcess, RawClient, fetch_request, wait_until
from test_broker_metrics import _ENDPOINT, scrape, value

TOPIC = "sessions"
PARTITIONS = 4
FIRST = 50  # records per partition before the consumer starts
SECOND = 30  # records per partition produced in each later round, while it is polling
ROUNDS = 4
KCAT = shutil.which("kcat") or shutil.which("kafkacat")


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    server = BrokerProcess(
        tmp_path_factory.mktemp("fetch-sessions"),
        {"metrics.port": "0", "metrics.host": "127.0.0.1", "num.partitions": str(PARTITIONS)},
    )
    with server:
        assert wait_until(lambda: _ENDPOINT.search(server.log) is not None, 30), server.log
        server.metrics_port = int(_ENDPOINT.search(server.log).group(1))
        yield server


def _produce(bootstrap: str, start: int, count: int) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    try:
        for i in range(start, start + count):
            for p in range(PARTITIONS):
                producer.send(TOPIC, value=f"{p}:{i}".encode(), partition=p)
        producer.flush(30)
    finally:
        producer.close()


def _expected(total: int) -> dict[int, list[str]]:
    return {p: [f"{p}:{i}" for i in range(total)] for p in range(PARTITIONS)}


@pytest.fixture(scope="module")
def produced(broker):
    _produce(broker.bootstrap, 0, FIRST)
    return broker


def test_kafka_python_consumes_everything_through_an_incremental_session(produced):
    broker = produced
    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=100,
    )
    got: dict[int, list[str]] = {p: [] for p in range(PARTITIONS)}
    try:
        consumer.assign([KTopicPartition(TOPIC, p) for p in range(PARTITIONS)])
        produced_up_to = FIRST
        for _ in range(ROUNDS):  # each round's records reach the established session through incremental fetches
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and sum(len(v) for v in got.values()) < produced_up_to * PARTITIONS:
                for tp, records in consumer.poll(timeout_ms=200).items():
                    got[tp.partition].extend(r.value.decode() for r in records)
            assert got == _expected(produced_up_to)
            _produce(broker.bootstrap, produced_up_to, SECOND)
            produced_up_to += SECOND
        handlers = consumer._fetcher._session_handlers
        assert len(handlers) == 1
        metadata = next(iter(handlers.values())).next_metadata
        assert metadata.session_id > 0
        # The client moves to the next epoch only on an accepted incremental response (the full one that opened the
        # session took it to 1); rounds 2..ROUNDS were each read by at least one incremental fetch.
        assert metadata.epoch >= ROUNDS, (metadata.session_id, metadata.epoch)
        samples = scrape(broker.metrics_port)
        assert value(samples, "kafka_server_fetchsessioncache_numincrementalfetchsessions") == 1
        assert value(samples, "kafka_server_fetchsessioncache_numincrementalfetchpartitionscached") == PARTITIONS
        assert value(samples, "kafka_server_fetchsessioncache_incrementalfetchsessionevictions_total") == 0
    finally:
        consumer.close()


def test_confluent_kafka_keeps_fetching_sessionless(produced):
    broker = produced
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    got: dict[int, list[str]] = {p: [] for p in range(PARTITIONS)}
    try:
        consumer.assign([CTopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])

        def done() -> bool:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                got[msg.partition()].append(msg.value().decode())
            return all(len(v) >= FIRST for v in got.values())

        assert wait_until(done, timeout=60, interval=0)
        assert {p: v[:FIRST] for p, v in got.items()} == _expected(FIRST)
    finally:
        consumer.close()


@pytest.mark.skipif(KCAT is None, reason="kcat is not installed (apt-get install kcat)")
def test_kcat_keeps_fetching_sessionless(produced):
    broker = produced
    out = subprocess.run(
        [KCAT, "-b", broker.bootstrap, "-C", "-t", TOPIC, "-o", "beginning", "-e", "-q", "-f", "%p %s\n"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    got: dict[int, list[str]] = {p: [] for p in range(PARTITIONS)}
    for line in out.splitlines():
        p, v = line.split(" ", 1)
        got[int(p)].append(v)
    assert {p: v[:FIRST] for p, v in got.items()} == _expected(FIRST)


def _fetch(client, session_id: int, epoch: int, offsets: dict[int, int], forgotten: tuple[int, ...] = (), version=12):
    """One FetchRequest of ``TOPIC`` at (session id, epoch); ``offsets`` = partition -> fetch offset."""
    request = fetch_request(TOPIC, offsets, session_id=session_id, session_epoch=epoch, forgotten=forgotten)
    return client.call(request, version)


def _partitions(response) -> dict[int, tuple[int, int, int]]:
    """partition -> (error, high watermark, record bytes) of a response's TOPIC."""
    out = {}
    for t in response.responses:
        assert t.topic == TOPIC
        for p in t.partitions:
            out[p.partition_index] = (p.error_code, p.high_watermark, len(p.records or b""))
    return out


def test_session_rules_on_the_wire(produced):
    """Session id 0 / epoch 0 opens a session; incremental requests carry only changes and are answered with only
    the partitions that changed; a wrong epoch is 71, an unknown id 70; epoch -1 closes it."""
    broker = produced
    everything = dict.fromkeys(range(PARTITIONS), 0)
    with RawClient(broker.bootstrap) as client:
        full = _fetch(client, 0, 0, everything)
        assert full.error_code == 0 and full.session_id > 0
        sid = full.session_id
        answers = _partitions(full)
        assert sorted(answers) == list(range(PARTITIONS)) and all(a[2] > 0 for a in answers.values())
        high = {p: a[1] for p, a in answers.items()}
        # Epoch 1, nothing new in the request: the session re-reads from offset 0, so records are sent again.
        assert sorted(_partitions(_fetch(client, sid, 1, {}))) == list(range(PARTITIONS))
        # Epoch 2: every fetch offset moves to the high watermark; nothing changed, nothing answered.
        response = _fetch(client, sid, 2, high)
        assert (response.error_code, response.session_id, _partitions(response)) == (0, sid, {})
        # A record on partition 2: only partition 2 is answered.
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
        producer.send(TOPIC, value=b"2:late", partition=2).get(30)
        producer.close()
        answers = _partitions(_fetch(client, sid, 3, {}))
        assert list(answers) == [2] and answers[2][1] == high[2] + 1 and answers[2][2] > 0
        # The same epoch again, a made-up id, then an older version without sessions.
        assert _fetch(client, sid, 3, {}).error_code == 71
        assert _fetch(client, sid ^ 0x5A5A, 1, {}).error_code == 70
        assert sorted(_partitions(_fetch(client, 0, -1, everything, version=6))) == list(range(PARTITIONS))
        # Forget partition 0, read partition 1 from its start, move partition 2 past its new record (it is answered
        # as long as the session's fetch offset for it has records): only partition 1 is answered.
        answers = _partitions(_fetch(client, sid, 4, {1: 0, 2: high[2] + 1}, forgotten=(0,)))
        assert list(answers) == [1]
        # Epoch -1 closes the session: a full, sessionless answer; the id is then unknown.
        closing = _fetch(client, sid, -1, {0: high[0]})
        assert closing.session_id == 0 and list(_partitions(closing)) == [0]
        assert _fetch(client, sid, 5, {}).error_code == 70
