"""Transactions on a ZooKeeper cluster of ``kafkalog serve`` brokers (issue 21, cluster part).

A private ZooKeeper and three brokers on loopback (tools/cluster), confluent-kafka clients. ``__transaction_state``
is replicated (replication factor 3, min.insync 2: Kafka's defaults), the leader of a transactional id's partition
coordinates it, and the markers reach the data partitions' leaders on the other brokers as WriteTxnMarkers.
"""

from __future__ import annotations

import random
import time

import pytest

from kafkalog.coordinator.internal_topic import partition_for
from tools.cluster import zookeeper
from tools.cluster.txnload import read_all, transactional_producer

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


def _read_settled(cluster, topic: str, wanted: dict[int, list[str]], timeout: float = 30.0) -> dict[int, list[str]]:
    """What read_committed reads, read again until it is ``wanted`` or ``timeout`` passed: commit_transaction returns
    once the commit is prepared, and the markers that move the last stable offset follow a moment later."""
    deadline = time.monotonic() + timeout
    while True:
        found = read_all(cluster, topic, len(wanted))
        if found == wanted or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


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
    producer = transactional_producer(cluster.bootstrap, txn_id)
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
    assert _read_settled(cluster, topic, expected) == expected
    assert read_all(cluster, topic, 3, "read_uncommitted") == everything
    # kafka-transactions.sh's view: list asks every broker (only the coordinator knows the id), describe asks the
    # coordinator FindCoordinator names.
    coordinator = state[partition_for(txn_id, STATE_PARTITIONS)]["leader"]
    listed = _transactions_cli(cluster, "list")
    rows = [line.split() for line in listed.splitlines()[1:] if line.split()[:1] == [txn_id]]
    assert [row[1] for row in rows] == [str(coordinator)] and rows[0][3] == "CompleteCommit", listed
    described = _transactions_cli(cluster, "describe", "--transactional-id", txn_id).splitlines()[1].split()
    assert described[0] == str(coordinator) and described[4] == "CompleteCommit", described


def _transactions_cli(cluster, *args: str) -> str:
    from click.testing import CliRunner

    from kafkalog.cli import main

    result = CliRunner().invoke(main, ["transactions", "--bootstrap-server", cluster.bootstrap, *args])
    assert result.exit_code == 0, result.output
    return result.output


def test_coordinator_killed_mid_stream(cluster):
    """The transaction coordinator is SIGKILLed while a transactional producer commits a transaction every few
    records: a new leader of the state partition takes over (loading its state, completing what was prepared) and
    the producer goes on (re-created after a fatal error, as an application does); every committed transaction is
    read exactly once by a read_committed consumer, none partially, none twice, nothing aborted."""
    from tools.cluster.txnload import TxnLog, kill_when, run_transactions, settled_check

    topic = "txn-failover"
    _create(cluster, topic, 3)
    txn_id = "failover-1"
    coordinator = _find_coordinator(cluster, txn_id)
    log = TxnLog()
    delay = random.Random(21).uniform(0.0, 0.3)  # lands anywhere in a transaction: produce, EndTxn, markers

    def kill() -> None:
        time.sleep(delay)
        cluster.brokers[coordinator].kill()

    killer = kill_when(lambda: len(log.committed) >= 12, kill)
    run_transactions(cluster, topic, "failover-1", 40, 6, 3, log, deadline_s=240)
    killer.join(60)
    assert not cluster.brokers[coordinator].alive and not log.errors, log.errors
    assert _find_coordinator(cluster, txn_id) != coordinator
    _, problems = settled_check(cluster, topic, 3, log.committed, 6)
    assert problems == {"lost": [], "duplicated": [], "phantom": []}, problems
    assert len(log.committed) == 40
    cluster.brokers[coordinator].start()


def test_produce_verified_with_a_coordinator_on_another_broker(cluster):
    """Kafka's transaction verification across brokers: a transactional batch sent to a partition led by a broker
    other than the id's coordinator, before the partition was added to the transaction, is refused with
    INVALID_TXN_STATE (the leader asked the coordinator with AddPartitionsToTxn v4 VerifyOnly) and nothing is
    written; once added, the same batch is written."""
    from kafka.protocol.producer import InitProducerIdRequest, ProduceRequest
    from kafka.protocol.producer.transaction import AddPartitionsToTxnRequest, EndTxnRequest

    from brokertools import RawClient
    from kafkalog.record.builder import RecordBatchBuilder

    topic = "txn-verified"
    _create(cluster, topic, 3)
    txn_id = "verified-1"
    coordinator = _find_coordinator(cluster, txn_id)  # (creates the state topic if no test did yet)
    layout = cluster.metadata(topic)
    partition = next(p for p, info in layout.items() if info["leader"] != coordinator)
    leader = cluster.brokers[layout[partition]["leader"]]
    with RawClient(cluster.brokers[coordinator].bootstrap) as txn_client, RawClient(leader.bootstrap) as data_client:
        init = txn_client.call(InitProducerIdRequest(transactional_id=txn_id, transaction_timeout_ms=60000), 4)
        assert init.error_code == 0

        def produce() -> int:
            builder = RecordBatchBuilder(
                producer_id=init.producer_id, producer_epoch=init.producer_epoch, base_sequence=0, is_transactional=True
            )
            builder.append(b"k", b"verified", int(time.time() * 1000))
            data = ProduceRequest.TopicProduceData
            parts = [data.PartitionProduceData(index=partition, records=builder.build())]
            request = ProduceRequest(
                transactional_id=txn_id, acks=-1, timeout_ms=10000, topic_data=[data(name=topic, partition_data=parts)]
            )
            return int(data_client.call(request, 9).responses[0].partition_responses[0].error_code)

        assert produce() == 48  # INVALID_TXN_STATE
        assert read_all(cluster, topic, 3, "read_uncommitted")[partition] == []
        Topic = AddPartitionsToTxnRequest.AddPartitionsToTxnTopic
        added = txn_client.call(
            AddPartitionsToTxnRequest(
                v3_and_below_transactional_id=txn_id,
                v3_and_below_producer_id=init.producer_id,
                v3_and_below_producer_epoch=init.producer_epoch,
                v3_and_below_topics=[Topic(name=topic, partitions=[partition])],
            ),
            3,
        )
        assert [
            r.partition_error_code for t in added.results_by_topic_v3_and_below for r in t.results_by_partition
        ] == [0]
        assert produce() == 0
        end = EndTxnRequest(
            transactional_id=txn_id, producer_id=init.producer_id, producer_epoch=init.producer_epoch, committed=True
        )
        assert txn_client.call(end, 3).error_code == 0
    assert _read_settled(cluster, topic, {0: [], 1: [], 2: [], partition: ["verified"]})[partition] == ["verified"]


def _group_coordinator(cluster, group: str) -> int:
    from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse

    from tools.cluster import raw

    live = next(b for b in cluster.brokers.values() if b.alive)
    body = FindCoordinatorRequest(key=group, key_type=0).encode(version=2)
    deadline = time.monotonic() + 30
    while True:
        answer = FindCoordinatorResponse.decode(raw.request(live.bootstrap, 10, 2, body), version=2)
        if answer.error_code == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert answer.error_code == 0, answer
    return int(answer.node_id)


def test_consume_transform_produce_with_the_group_on_another_broker(cluster):
    """send_offsets_to_transaction across brokers: the group's coordinator (leader of its __consumer_offsets
    partition) is another broker than the transaction's; TxnOffsetCommit is verified with the transaction
    coordinator over the wire, the COMMIT marker reaches the group's partition as WriteTxnMarkers and makes the
    offsets visible; every input record's output is read once with read_committed and the group's committed
    offsets are the input's ends."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka import TopicPartition as CTopicPartition

    source, sink = "ctp-in", "ctp-out"
    _create(cluster, source, 3)
    _create(cluster, sink, 3)
    txn_id = "ctp-1"
    txn_coordinator = _find_coordinator(cluster, txn_id)
    group = next(g for g in (f"ctp-group-{i}" for i in range(50)) if _group_coordinator(cluster, g) != txn_coordinator)
    feeder = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    inputs = [f"in-{i}" for i in range(90)]
    for i, value in enumerate(inputs):
        feeder.produce(source, value=value.encode(), partition=i % 3)
    assert feeder.flush(30) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    producer = transactional_producer(cluster.bootstrap, txn_id)
    consumer.subscribe([source])
    done = 0
    deadline = time.monotonic() + 90
    try:
        while done < len(inputs) and time.monotonic() < deadline:
            messages = [m for m in consumer.consume(30, 1.0) if not m.error()]
            if not messages:
                continue
            producer.begin_transaction()
            for m in messages:
                producer.produce(sink, value=b"out-" + m.value(), partition=m.partition())
            positions = consumer.position(consumer.assignment())
            producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 30)
            producer.commit_transaction(30)
            done += len(messages)
        committed = consumer.committed([CTopicPartition(source, p) for p in range(3)], 30)
    finally:
        consumer.close()
    assert done == len(inputs)
    assert sorted(tp.offset for tp in committed) == [30, 30, 30]
    wanted = {p: [f"out-in-{i}" for i in range(len(inputs)) if i % 3 == p] for p in range(3)}
    assert _read_settled(cluster, sink, wanted) == wanted  # each input's output once, in order


def test_write_txn_markers_on_the_cluster(cluster):
    """WriteTxnMarkers as another coordinator sends it: NOT_LEADER_OR_FOLLOWER from a follower (the sender looks
    the leader up again), written by the leader and answered once the in-sync replicas have it (acks=-1: the high
    watermark covers it when the answer comes), TRANSACTION_COORDINATOR_FENCED for a zombie coordinator's epoch."""
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as CTopicPartition
    from kafka.protocol.producer.transaction import WriteTxnMarkersRequest

    from brokertools import RawClient

    topic = "txn-markers"
    _create(cluster, topic, 1)
    layout = cluster.metadata(topic)[0]
    leader = cluster.brokers[layout["leader"]]
    follower = cluster.brokers[next(r for r in layout["replicas"] if r != layout["leader"])]
    marker = WriteTxnMarkersRequest.WritableTxnMarker

    def write(broker, coordinator_epoch: int) -> int:
        request = WriteTxnMarkersRequest(
            markers=[
                marker(
                    producer_id=9_000_001,
                    producer_epoch=0,
                    transaction_result=False,
                    topics=[marker.WritableTxnMarkerTopic(name=topic, partition_indexes=[0])],
                    coordinator_epoch=coordinator_epoch,
                )
            ]
        )
        with RawClient(broker.bootstrap) as client:
            return int(client.call(request, 1).markers[0].topics[0].partitions[0].error_code)

    assert write(follower, 5) == 6  # NOT_LEADER_OR_FOLLOWER
    assert write(leader, 5) == 0
    consumer = Consumer({"bootstrap.servers": leader.bootstrap, "group.id": "hw-reader"})
    try:
        assert consumer.get_watermark_offsets(CTopicPartition(topic, 0), 10) == (0, 1)  # replicated: HW past it
    finally:
        consumer.close()
    assert write(leader, 4) == 52  # TRANSACTION_COORDINATOR_FENCED: an older coordinator's marker
