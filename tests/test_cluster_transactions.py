"""Transactions on a ZooKeeper cluster of ``kafkalog serve`` brokers (issue 21, cluster part).

A private ZooKeeper and three brokers on loopback (tools/cluster), confluent-kafka clients. ``__transaction_state``
is replicated (replication factor 3, min.insync 2: Kafka's defaults), the leader of a transactional id's partition
coordinates it, and the markers reach the data partitions' leaders on the other brokers as WriteTxnMarkers.
"""

from __future__ import annotations

import random
import threading
import time

import pytest

from kafkalog.coordinator.group.coordinator import partition_for
from tools.cluster import zookeeper

missing = zookeeper.available()
pytestmark = pytest.mark.skipif(missing is not None, reason=f"no ZooKeeper: {missing}")

STATE_PARTITIONS = 4  # transaction.state.log.num.partitions (Kafka's 50 would only slow the test down)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from tools.cluster.brokers import LocalCluster

    overrides = {
        "auto.leader.rebalance.enable": "false",
        "transaction.state.log.num.partitions": str(STATE_PARTITIONS),
    }
    with LocalCluster(tmp_path_factory.mktemp("txn-cluster"), overrides=overrides) as c:
        yield c


def _create(cluster, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 3, config={"min.insync.replicas": "2"})])[topic].result(30)
    cluster.wait_for(
        lambda: all(len(p["isr"]) == 3 and p["leader"] >= 0 for p in cluster.metadata(topic).values()),
        30,
        "a leader and a full ISR",
    )


def _producer(cluster, txn_id: str):
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "transactional.id": txn_id,
            "transaction.timeout.ms": 30000,
            "message.timeout.ms": 30000,
            "linger.ms": 5,
        }
    )
    producer.init_transactions(60)
    return producer


def _committed(cluster, topic: str, partitions: int, isolation: str = "read_committed") -> dict[int, list[str]]:
    """Every record value a consumer with ``isolation`` reads from each partition, to the end."""
    from confluent_kafka import Consumer, TopicPartition

    live = ",".join(b.bootstrap for b in cluster.brokers.values() if b.alive)
    consumer = Consumer(
        {
            "bootstrap.servers": live,
            "group.id": f"reader-{time.monotonic_ns()}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": True,
        }
    )
    out: dict[int, list[str]] = {p: [] for p in range(partitions)}
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        done: set[int] = set()
        deadline = time.monotonic() + 60
        while len(done) < partitions and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == -191:  # _PARTITION_EOF
                    done.add(msg.partition())
                continue
            out[msg.partition()].append(msg.value().decode())
        assert len(done) == partitions, f"only partitions {sorted(done)} read to their end"
    finally:
        consumer.close()
    return out


def _find_coordinator(cluster, txn_id: str) -> int:
    """The broker id FindCoordinator(TRANSACTION) v2 names, asked of a live broker over a plain socket."""
    from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse

    from tools.cluster import raw

    live = next(b for b in cluster.brokers.values() if b.alive)
    body = FindCoordinatorRequest(key=txn_id, key_type=1).encode(version=2)
    deadline = time.monotonic() + 30
    while True:
        answer = FindCoordinatorResponse.decode(raw.request(live.bootstrap, 10, 2, body), version=2)
        if answer.error_code == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert answer.error_code == 0, answer
    return int(answer.node_id)


def test_transactions_span_brokers(cluster):
    """One transaction writes to three partitions led by three brokers: commits and aborts reach each of them
    (markers over the wire), a read_committed consumer sees exactly the committed records, a read_uncommitted
    one also the aborted ones; FindCoordinator answers the leader of the id's __transaction_state partition."""
    topic = "txn-spread"
    _create(cluster, topic, 3)
    assert {p["leader"] for p in cluster.metadata(topic).values()} == {1, 2, 3}
    txn_id = "spread-1"
    producer = _producer(cluster, txn_id)
    state = cluster.metadata("__transaction_state")
    assert len(state) == STATE_PARTITIONS and all(len(p["replicas"]) == 3 for p in state.values()), state
    assert _find_coordinator(cluster, txn_id) == state[partition_for(txn_id, STATE_PARTITIONS)]["leader"]
    expected: dict[int, list[str]] = {0: [], 1: [], 2: []}
    everything: dict[int, list[str]] = {0: [], 1: [], 2: []}
    for round_, commit in enumerate([True, False, True, False, True]):
        producer.begin_transaction()
        for p in range(3):
            for i in range(3):
                value = f"r{round_}-p{p}-{i}"
                producer.produce(topic, value=value.encode(), partition=p)
                everything[p].append(value)
                if commit:
                    expected[p].append(value)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.flush(30)  # written to the logs first (librdkafka drops what it has not sent yet on abort)
            producer.abort_transaction(30)
    assert _committed(cluster, topic, 3) == expected
    assert _committed(cluster, topic, 3, "read_uncommitted") == everything
    # The coordinator is another broker than two of the data partitions' leaders: markers went over the wire.
    logs = "".join(line for b in cluster.brokers.values() for line in b.lines)
    assert "Elected as the txn coordinator for partition" in logs


def test_coordinator_killed_mid_stream(cluster):
    """The transaction coordinator is SIGKILLed while a transactional producer commits a transaction every few
    records: a new leader of the state partition takes over (loading its state, completing what was prepared) and
    the producer goes on (re-created after a fatal error, as an application does); every committed transaction is
    read exactly once by a read_committed consumer, none partially, none twice."""
    from confluent_kafka import KafkaException

    topic = "txn-failover"
    _create(cluster, topic, 3)
    txn_id = "failover-1"
    producer = _producer(cluster, txn_id)
    coordinator = _find_coordinator(cluster, txn_id)
    committed: list[int] = []  # batch numbers whose commit_transaction returned
    batches = 40
    killed = threading.Event()

    def kill_when_running() -> None:  # lands anywhere in a transaction: produce, AddPartitions, EndTxn, markers
        while len(committed) < 12:
            time.sleep(0.01)
        time.sleep(random.Random(21).uniform(0.0, 0.3))
        cluster.brokers[coordinator].kill()
        killed.set()

    killer = threading.Thread(target=kill_when_running, daemon=True)
    killer.start()
    batch = 0
    while batch < batches:
        try:
            producer.begin_transaction()
            for i in range(6):
                producer.produce(topic, value=f"b{batch}-{i}".encode(), partition=i % 3)
            producer.commit_transaction(60)
            committed.append(batch)
            batch += 1
        except KafkaException as e:
            error = e.args[0]
            if error.txn_requires_abort():
                producer.abort_transaction(60)
            elif error.retriable():
                continue  # the same batch again in a new transaction (the failed one is aborted or never began)
            else:  # fatal (e.g. fenced): a new producer with the same id, as librdkafka's docs advise
                producer = _producer(cluster, txn_id)
            seen = {v.split("-")[0] for vs in _committed(cluster, topic, 3).values() for v in vs}
            if f"b{batch}" in seen:  # the commit did happen before the error
                committed.append(batch)
                batch += 1
    killer.join(60)
    assert killed.is_set() and len(committed) == batches
    new_coordinator = _find_coordinator(cluster, txn_id)
    assert new_coordinator != coordinator
    values = [v for vs in _committed(cluster, topic, 3).values() for v in vs]
    assert len(values) == len(set(values)), "a record read twice"
    by_batch: dict[str, int] = {}
    for v in values:
        by_batch[v.split("-")[0]] = by_batch.get(v.split("-")[0], 0) + 1
    assert sorted(by_batch) == sorted(f"b{b}" for b in committed), "a committed batch lost, or an aborted one seen"
    assert set(by_batch.values()) == {6}, "a transaction seen in part"
    cluster.brokers[coordinator].start()
