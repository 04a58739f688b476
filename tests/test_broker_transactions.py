"""Transactions over the wire against ``kafkalog serve``: confluent-kafka's (librdkafka) and kafka-python's
transactional producers, read_committed and read_uncommitted consumers, offsets committed in a transaction,
zombie fencing, the coordinator's timeout abort, a restart with an open transaction and with one caught in
PrepareCommit, and Kafka's error codes for bad requests (raw protocol, nothing written).

Error codes are Kafka's (org.apache.kafka.common.protocol.Errors): INVALID_PRODUCER_EPOCH 47,
INVALID_TXN_STATE 48, INVALID_PRODUCER_ID_MAPPING 49, INVALID_TRANSACTION_TIMEOUT 50, PRODUCER_FENCED 90.
"""

from __future__ import annotations

import time
import uuid

import pytest

from brokertools import BrokerProcess, RawClient, wait_until

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, KafkaException, Producer  # noqa: E402
from confluent_kafka import TopicPartition as CTopicPartition  # noqa: E402
from kafka import KafkaConsumer, KafkaProducer, OffsetAndMetadata, TopicPartition  # noqa: E402
from kafka.admin import KafkaAdminClient, NewTopic  # noqa: E402
from kafka.protocol.admin.transactions import DescribeTransactionsRequest, ListTransactionsRequest  # noqa: E402
from kafka.protocol.metadata import FindCoordinatorRequest  # noqa: E402
from kafka.protocol.producer import InitProducerIdRequest, ProduceRequest  # noqa: E402
from kafka.protocol.producer.transaction import (  # noqa: E402
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    TxnOffsetCommitRequest,
    WriteTxnMarkersRequest,
)

from kafkalog.coordinator.internal_topic import partition_for  # noqa: E402
from kafkalog.coordinator.transaction import TRANSACTION_STATE_TOPIC_NAME  # noqa: E402
from kafkalog.coordinator.transaction.records import encode_key, encode_value, value_from_state  # noqa: E402
from kafkalog.coordinator.transaction.state import TransactionState  # noqa: E402
from kafkalog.manager import LogManager  # noqa: E402
from kafkalog.manager import TopicPartition as KTopicPartition  # noqa: E402
from kafkalog.record.builder import RecordBatchBuilder  # noqa: E402
from kafkalog.storage.producer_state import AppendOrigin  # noqa: E402

OVERRIDES = {
    "num.partitions": "1",
    "offsets.topic.num.partitions": "3",
    "transaction.state.log.num.partitions": "5",
    "group.initial.rebalance.delay.ms": "0",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "300",
}
INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE, INVALID_PRODUCER_ID_MAPPING = 47, 48, 49
INVALID_TRANSACTION_TIMEOUT, PRODUCER_FENCED, UNKNOWN_TOPIC_OR_PARTITION = 50, 90, 3


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    server = BrokerProcess(tmp_path_factory.mktemp("broker-txn"), OVERRIDES).start()
    yield server
    assert server.stop() == 0, "".join(server.lines)


def create_topic(bootstrap: str, name: str, partitions: int = 1) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(name, partitions, 1)])
    finally:
        admin.close()


def quiet(bs=None, **conf) -> dict:
    """A librdkafka config (dotted keys written with underscores) that logs only critical messages: the tests
    kill brokers under live clients, whose reconnect attempts would flood the output."""
    out = {key.replace("_", "."): value for key, value in conf.items()}
    out["log_level"] = 2
    if bs is not None:
        out["bootstrap.servers"] = bs.bootstrap
    return out


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def consume_all(bootstrap: str, topic: str, isolation: str, expected: int, timeout: float = 15.0) -> list[bytes]:
    """Values of ``topic`` as a consumer with ``isolation`` sees them: until ``expected`` came, then a second more."""
    consumer = Consumer(
        {
            "log_level": 2,
            "bootstrap.servers": bootstrap,
            "group.id": unique("reader"),
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    consumer.subscribe([topic])
    values: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and len(values) < expected:
            message = consumer.poll(0.3)
            if message is not None and not message.error():
                values.append(message.value())
        end = time.monotonic() + 1.0
        while time.monotonic() < end:  # nothing more may come
            message = consumer.poll(0.2)
            if message is not None and not message.error():
                values.append(message.value())
    finally:
        consumer.close()
    return values


def committed_end(bootstrap: str, topic: str, partition: int = 0) -> int:
    """The partition's end offset for a read_committed consumer: its last stable offset (ListOffsets LATEST)."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed")
    try:
        tp = TopicPartition(topic, partition)
        return consumer.end_offsets([tp])[tp]
    finally:
        consumer.close()


def high_watermark(bootstrap: str, topic: str, partition: int = 0) -> int:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        tp = TopicPartition(topic, partition)
        return consumer.end_offsets([tp])[tp]
    finally:
        consumer.close()


def group_offsets(bootstrap: str, group: str) -> dict:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        return {tp: om.offset for tp, om in admin.list_group_offsets(group)[group].items()}
    finally:
        admin.close()


# ----- real clients ---------------------------------------------------------------------------------------------
def test_confluent_commit_and_abort(broker) -> None:
    topic = unique("cf")
    create_topic(broker.bootstrap, topic, 2)
    producer = Producer({"log_level": 2, "bootstrap.servers": broker.bootstrap, "transactional.id": unique("cf-tx")})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(6):
        producer.produce(topic, value=b"committed-%d" % i, partition=i % 2)
    producer.commit_transaction(30)
    producer.begin_transaction()
    for i in range(4):
        producer.produce(topic, value=b"aborted-%d" % i, partition=i % 2)
    producer.flush(30)  # librdkafka drops unsent messages on abort: make them reach the log first
    producer.abort_transaction(30)
    producer.begin_transaction()
    producer.produce(topic, value=b"committed-last", partition=0)
    producer.commit_transaction(30)
    committed = sorted([b"committed-%d" % i for i in range(6)] + [b"committed-last"])
    assert sorted(consume_all(broker.bootstrap, topic, "read_committed", 7)) == committed
    everything = committed + [b"aborted-%d" % i for i in range(4)]
    assert sorted(consume_all(broker.bootstrap, topic, "read_uncommitted", 11)) == sorted(everything)


def test_kafka_python_commit_and_abort(broker) -> None:
    topic = unique("kp")
    create_topic(broker.bootstrap, topic)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=unique("kp-tx"))
    try:
        producer.init_transactions()
        producer.begin_transaction()
        for i in range(3):
            producer.send(topic, b"ok-%d" % i)
        producer.commit_transaction()
        producer.begin_transaction()
        producer.send(topic, b"no-0")
        producer.send(topic, b"no-1")
        producer.flush()
        producer.abort_transaction()
    finally:
        producer.close()
    reader = KafkaConsumer(
        topic,
        bootstrap_servers=broker.bootstrap,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
        consumer_timeout_ms=3000,
    )
    try:
        assert [m.value for m in reader] == [b"ok-0", b"ok-1", b"ok-2"]
    finally:
        reader.close()
    assert sorted(consume_all(broker.bootstrap, topic, "read_uncommitted", 5)) == sorted(
        [b"ok-0", b"ok-1", b"ok-2", b"no-0", b"no-1"]
    )
    # 3 records + COMMIT, 2 records + ABORT: the LSO is the log end once both are decided
    assert committed_end(broker.bootstrap, topic) == high_watermark(broker.bootstrap, topic) == 7


def test_send_offsets_to_transaction_visible_only_after_commit(broker) -> None:
    source, sink = unique("in"), unique("out")
    create_topic(broker.bootstrap, source)
    create_topic(broker.bootstrap, sink)
    group = unique("etl")
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([source])
    consumer.poll(2)
    producer = Producer({"log_level": 2, "bootstrap.servers": broker.bootstrap, "transactional.id": unique("etl-tx")})
    producer.init_transactions(30)
    try:
        producer.begin_transaction()
        producer.produce(sink, b"x")
        producer.send_offsets_to_transaction([CTopicPartition(source, 0, 5)], consumer.consumer_group_metadata(), 30)
        assert group_offsets(broker.bootstrap, group) == {}  # pending: not visible before the commit
        producer.commit_transaction(30)
        assert group_offsets(broker.bootstrap, group) == {TopicPartition(source, 0): 5}
        producer.begin_transaction()
        producer.send_offsets_to_transaction([CTopicPartition(source, 0, 9)], consumer.consumer_group_metadata(), 30)
        producer.abort_transaction(30)
        assert group_offsets(broker.bootstrap, group) == {TopicPartition(source, 0): 5}  # the aborted 9 is gone
    finally:
        consumer.close()
    # kafka-python's producer does the same through AddOffsetsToTxn + TxnOffsetCommit
    kgroup = unique("kp-etl")
    kp = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=unique("kp-etl-tx"))
    try:
        kp.init_transactions()
        kp.begin_transaction()
        kp.send(sink, b"y")
        kp.send_offsets_to_transaction({TopicPartition(source, 0): OffsetAndMetadata(7, "", -1)}, kgroup)
        assert group_offsets(broker.bootstrap, kgroup) == {}
        kp.commit_transaction()
    finally:
        kp.close()
    assert group_offsets(broker.bootstrap, kgroup) == {TopicPartition(source, 0): 7}


def test_zombie_producer_is_fenced(broker) -> None:
    topic = unique("zombie")
    create_topic(broker.bootstrap, topic)
    txn_id = unique("z-tx")
    zombie = Producer({"log_level": 2, "bootstrap.servers": broker.bootstrap, "transactional.id": txn_id})
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce(topic, b"from-zombie")
    zombie.flush(30)
    successor = Producer({"log_level": 2, "bootstrap.servers": broker.bootstrap, "transactional.id": txn_id})
    successor.init_transactions(30)  # fences the zombie and aborts its open transaction
    successor.begin_transaction()
    successor.produce(topic, b"from-successor")
    successor.commit_transaction(30)
    with pytest.raises(KafkaException) as failure:
        zombie.commit_transaction(30)
    assert failure.value.args[0].fatal()  # librdkafka: the producer was fenced
    assert consume_all(broker.bootstrap, topic, "read_committed", 1) == [b"from-successor"]


def test_expired_transaction_is_aborted_and_lso_moves(broker) -> None:
    topic = unique("expire")
    create_topic(broker.bootstrap, topic)
    producer = Producer(
        {
            "log_level": 2,
            "bootstrap.servers": broker.bootstrap,
            "transactional.id": unique("exp-tx"),
            "transaction.timeout.ms": 2000,
        }
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"abandoned")
    producer.flush(30)
    assert committed_end(broker.bootstrap, topic) == 0  # the open transaction holds the LSO
    # the coordinator aborts it once 2 s have passed (checked every 300 ms here): an ABORT marker follows it
    assert wait_until(lambda: committed_end(broker.bootstrap, topic) == 2, timeout=20)
    assert high_watermark(broker.bootstrap, topic) == 2
    with pytest.raises(KafkaException):
        producer.commit_transaction(10)  # its epoch was bumped by the abort
    assert consume_all(broker.bootstrap, topic, "read_committed", 0) == []


# ----- restarts -------------------------------------------------------------------------------------------------
def test_restart_with_open_transaction(tmp_path) -> None:
    """SIGKILL with a transaction open: after the restart it is loaded Ongoing and aborted at its timeout (as Kafka
    leaves it for expiry); the LSO moves and a read_committed consumer sees the records committed after it."""
    topic = "restart"
    server = BrokerProcess(tmp_path / "logs", OVERRIDES).start()
    try:
        create_topic(server.bootstrap, topic)
        producer = Producer(
            {
                "log_level": 2,
                "bootstrap.servers": server.bootstrap,
                "transactional.id": "open-tx",
                "transaction.timeout.ms": 3000,
            }
        )
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce(topic, b"in-flight")
        producer.flush(30)
        assert committed_end(server.bootstrap, topic) == 0
    finally:
        server.proc.kill()
        server.proc.wait()
    server = BrokerProcess(tmp_path / "logs", OVERRIDES).start()
    try:
        assert wait_until(lambda: committed_end(server.bootstrap, topic) == 2, timeout=30)
        after = Producer({"log_level": 2, "bootstrap.servers": server.bootstrap, "transactional.id": "open-tx"})
        after.init_transactions(30)
        after.begin_transaction()
        after.produce(topic, b"after-restart")
        after.commit_transaction(30)
        assert consume_all(server.bootstrap, topic, "read_committed", 1) == [b"after-restart"]
        with RawClient(server.bootstrap) as client:
            described = client.call(DescribeTransactionsRequest(transactional_ids=["open-tx"]), 0)
        state = described.transaction_states[0]
        # epoch 0, 1 after the timeout's fencing abort, 2 for the new producer
        assert (state.error_code, state.transaction_state, state.producer_epoch) == (0, "CompleteCommit", 2)
    finally:
        assert server.stop() == 0


def test_restart_completes_a_transaction_in_prepare_commit(tmp_path) -> None:
    """A log dir as a broker killed between PrepareCommit and its markers leaves it (built offline): on start the
    coordinator writes the COMMIT marker and CompleteCommit, as Kafka completes a loaded PrepareCommit."""
    logs = tmp_path / "logs"
    manager = LogManager(logs)
    manager.startup()
    try:
        manager.create_topic("prepared", 1)
        manager.create_topic(TRANSACTION_STATE_TOPIC_NAME, 5, {"cleanup.policy": "compact"})
        rm = manager.replica_manager
        data = RecordBatchBuilder(producer_id=777, producer_epoch=4, base_sequence=0, is_transactional=True)
        data.append(b"k", b"decided-to-commit", 1_700_000_000_000)
        assert (
            rm.append_records({KTopicPartition("prepared", 0): data.build()}, -1)[KTopicPartition("prepared", 0)].error
            is None
        )
        value = value_from_state(
            777, 4, 60_000, TransactionState.PREPARE_COMMIT, [("prepared", 0)], 1_700_000_000_500, 1_700_000_000_000
        )
        state = RecordBatchBuilder()
        state.append(encode_key("prepared-tx"), encode_value(value, 1), 1_700_000_000_500)
        state_tp = KTopicPartition(TRANSACTION_STATE_TOPIC_NAME, partition_for("prepared-tx", 5))
        assert rm.append_records({state_tp: state.build()}, -1, AppendOrigin.COORDINATOR)[state_tp].error is None
    finally:
        manager.shutdown()
    server = BrokerProcess(logs, OVERRIDES).start()
    try:
        assert committed_end(server.bootstrap, "prepared") == 2  # the record and its COMMIT marker
        assert consume_all(server.bootstrap, "prepared", "read_committed", 1) == [b"decided-to-commit"]
        with RawClient(server.bootstrap) as client:
            described = client.call(DescribeTransactionsRequest(transactional_ids=["prepared-tx"]), 0)
        assert described.transaction_states[0].transaction_state == "CompleteCommit"
    finally:
        assert server.stop() == 0


# ----- bad input over the raw protocol --------------------------------------------------------------------------
def _init(client: RawClient, txn_id: str, timeout_ms: int = 60_000, version: int = 4):
    return client.call(InitProducerIdRequest(transactional_id=txn_id, transaction_timeout_ms=timeout_ms), version)


def _state_topic_end(bootstrap: str, txn_id: str) -> int:
    return high_watermark(bootstrap, TRANSACTION_STATE_TOPIC_NAME, partition_for(txn_id, 5))


def test_find_coordinator_and_init_errors(broker) -> None:
    with RawClient(broker.bootstrap) as client:
        found = client.call(FindCoordinatorRequest(key="any-txn", key_type=1), 3)
        assert found.error_code == 0 and found.port == broker.port
        # transaction.max.timeout.ms is 900000 by default
        assert _init(client, "too-long", 900_001).error_code == INVALID_TRANSACTION_TIMEOUT
        ok = _init(client, unique("fine"), 900_000)
        assert ok.error_code == 0 and ok.producer_epoch == 0


def test_end_txn_without_a_transaction(broker) -> None:
    txn_id = unique("no-txn")
    with RawClient(broker.bootstrap) as client:
        init = _init(client, txn_id)
        before = _state_topic_end(broker.bootstrap, txn_id)
        for committed in (True, False):
            response = client.call(
                EndTxnRequest(
                    transactional_id=txn_id, producer_id=init.producer_id, producer_epoch=0, committed=committed
                ),
                3,
            )
            assert response.error_code == INVALID_TXN_STATE
        unknown = client.call(
            EndTxnRequest(transactional_id=unique("never"), producer_id=1, producer_epoch=0, committed=True), 3
        )
        assert unknown.error_code == INVALID_PRODUCER_ID_MAPPING
    assert _state_topic_end(broker.bootstrap, txn_id) == before


def test_add_partitions_with_wrong_epoch(broker) -> None:
    topic = unique("ap")
    create_topic(broker.bootstrap, topic)
    txn_id = unique("ap-tx")
    with RawClient(broker.bootstrap) as client:
        init = _init(client, txn_id)
        before = _state_topic_end(broker.bootstrap, txn_id)
        Topic = AddPartitionsToTxnRequest.AddPartitionsToTxnTopic
        for version, expected in ((1, INVALID_PRODUCER_EPOCH), (3, PRODUCER_FENCED)):  # KIP-588 from v2
            response = client.call(
                AddPartitionsToTxnRequest(
                    v3_and_below_transactional_id=txn_id,
                    v3_and_below_producer_id=init.producer_id,
                    v3_and_below_producer_epoch=init.producer_epoch + 1,
                    v3_and_below_topics=[Topic(name=topic, partitions=[0])],
                ),
                version,
            )
            codes = [
                p.partition_error_code for t in response.results_by_topic_v3_and_below for p in t.results_by_partition
            ]
            assert codes == [expected]
        described = client.call(DescribeTransactionsRequest(transactional_ids=[txn_id]), 0).transaction_states[0]
        assert (described.transaction_state, described.topics) == ("Empty", [])
    assert _state_topic_end(broker.bootstrap, txn_id) == before


def test_txn_offset_commit_with_wrong_epoch(broker) -> None:
    txn_id, group = unique("toc-tx"), unique("toc-group")
    with RawClient(broker.bootstrap) as client:
        init = _init(client, txn_id)
        added = client.call(
            AddOffsetsToTxnRequest(
                transactional_id=txn_id, producer_id=init.producer_id, producer_epoch=0, group_id=group
            ),
            3,
        )
        assert added.error_code == 0
        Topic = TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic
        Partition = Topic.TxnOffsetCommitRequestPartition
        offsets_end = high_watermark(broker.bootstrap, "__consumer_offsets", partition_for(group, 3))
        response = client.call(
            TxnOffsetCommitRequest(
                transactional_id=txn_id,
                group_id=group,
                producer_id=init.producer_id,
                producer_epoch=3,
                generation_id=-1,
                member_id="",
                group_instance_id=None,
                topics=[
                    Topic(
                        name="ap", partitions=[Partition(partition_index=0, committed_offset=11, committed_metadata="")]
                    )
                ],
            ),
            3,
        )
        assert [p.error_code for t in response.topics for p in t.partitions] == [INVALID_PRODUCER_EPOCH]
        assert high_watermark(broker.bootstrap, "__consumer_offsets", partition_for(group, 3)) == offsets_end
        # the group's partition not added to the transaction (no AddOffsetsToTxn): INVALID_TXN_STATE
        # a group on another __consumer_offsets partition than the one added
        other = next(f"{group}-{i}" for i in range(100) if partition_for(f"{group}-{i}", 3) != partition_for(group, 3))
        response = client.call(
            TxnOffsetCommitRequest(
                transactional_id=txn_id,
                group_id=other,
                producer_id=init.producer_id,
                producer_epoch=0,
                generation_id=-1,
                member_id="",
                group_instance_id=None,
                topics=[
                    Topic(
                        name="ap", partitions=[Partition(partition_index=0, committed_offset=11, committed_metadata="")]
                    )
                ],
            ),
            3,
        )
        assert [p.error_code for t in response.topics for p in t.partitions] == [INVALID_TXN_STATE]


def test_transactional_produce_to_partition_not_in_transaction(broker) -> None:
    topic = unique("unadded")
    create_topic(broker.bootstrap, topic)
    txn_id = unique("un-tx")
    with RawClient(broker.bootstrap) as client:
        init = _init(client, txn_id)
        builder = RecordBatchBuilder(
            producer_id=init.producer_id, producer_epoch=init.producer_epoch, base_sequence=0, is_transactional=True
        )
        builder.append(b"k", b"stray", int(time.time() * 1000))
        Data = ProduceRequest.TopicProduceData
        response = client.call(
            ProduceRequest(
                transactional_id=txn_id,
                acks=-1,
                timeout_ms=5000,
                topic_data=[
                    Data(name=topic, partition_data=[Data.PartitionProduceData(index=0, records=builder.build())])
                ],
            ),
            9,
        )
        assert response.responses[0].partition_responses[0].error_code == INVALID_TXN_STATE
    assert high_watermark(broker.bootstrap, topic) == 0  # nothing written, no hanging transaction


def test_write_txn_markers_errors(broker) -> None:
    topic = unique("markers")
    create_topic(broker.bootstrap, topic)
    Marker = WriteTxnMarkersRequest.WritableTxnMarker
    with RawClient(broker.bootstrap) as client:

        def write(name: str, producer_epoch: int) -> int:
            response = client.call(
                WriteTxnMarkersRequest(
                    markers=[
                        Marker(
                            producer_id=555,
                            producer_epoch=producer_epoch,
                            transaction_result=False,
                            topics=[Marker.WritableTxnMarkerTopic(name=name, partition_indexes=[0])],
                            coordinator_epoch=0,
                        )
                    ]
                ),
                1,
            )
            return response.markers[0].topics[0].partitions[0].error_code

        assert write(unique("absent"), 0) == UNKNOWN_TOPIC_OR_PARTITION
        assert write(topic, 5) == 0
        assert write(topic, 4) == INVALID_PRODUCER_EPOCH  # older than the epoch the partition has seen
    assert high_watermark(broker.bootstrap, topic) == 1


def test_list_and_describe_transactions(broker) -> None:
    txn_id = unique("listed")
    topic = unique("listed-topic")
    create_topic(broker.bootstrap, topic)
    with RawClient(broker.bootstrap) as client:
        init = _init(client, txn_id)
        Topic = AddPartitionsToTxnRequest.AddPartitionsToTxnTopic
        client.call(
            AddPartitionsToTxnRequest(
                v3_and_below_transactional_id=txn_id,
                v3_and_below_producer_id=init.producer_id,
                v3_and_below_producer_epoch=0,
                v3_and_below_topics=[Topic(name=topic, partitions=[0])],
            ),
            3,
        )
        listed = client.call(ListTransactionsRequest(state_filters=["Ongoing", "Nope"], producer_id_filters=[]), 0)
        assert listed.unknown_state_filters == ["Nope"]
        assert (txn_id, init.producer_id, "Ongoing") in [
            (t.transactional_id, t.producer_id, t.transaction_state) for t in listed.transaction_states
        ]
        state = client.call(DescribeTransactionsRequest(transactional_ids=[txn_id, unique("ghost")]), 0)
        found, ghost = state.transaction_states
        assert (found.transaction_state, found.transaction_timeout_ms) == ("Ongoing", 60_000)
        assert [(t.topic, t.partitions) for t in found.topics] == [(topic, [0])]
        assert ghost.error_code == 105  # TRANSACTIONAL_ID_NOT_FOUND
        client.call(
            EndTxnRequest(transactional_id=txn_id, producer_id=init.producer_id, producer_epoch=0, committed=False), 3
        )


def test_pending_offsets_are_unstable_for_require_stable(broker) -> None:
    """KIP-447: while a transaction holds a group's offset, OffsetFetch with require_stable answers
    UNSTABLE_OFFSET_COMMIT (88) for it; without, the last committed offset (none here). After EndTxn(commit)
    the offset is the transaction's."""
    from kafka.protocol.consumer import OffsetFetchRequest

    topic = unique("stable")
    create_topic(broker.bootstrap, topic)
    txn_id, group = unique("stable-tx"), unique("stable-group")
    Topic = TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic
    Partition = Topic.TxnOffsetCommitRequestPartition
    FetchTopic = OffsetFetchRequest.OffsetFetchRequestTopic
    with RawClient(broker.bootstrap) as client:
        init = _init(client, txn_id)
        pid = init.producer_id
        add = AddOffsetsToTxnRequest(transactional_id=txn_id, producer_id=pid, producer_epoch=0, group_id=group)
        assert client.call(add, 3).error_code == 0
        commit = TxnOffsetCommitRequest(
            transactional_id=txn_id,
            group_id=group,
            producer_id=pid,
            producer_epoch=0,
            generation_id=-1,
            member_id="",
            group_instance_id=None,
            topics=[Topic(name=topic, partitions=[Partition(partition_index=0, committed_offset=42)])],
        )
        assert [p.error_code for t in client.call(commit, 3).topics for p in t.partitions] == [0]

        def fetch(require_stable: bool) -> tuple[int, int]:
            response = client.call(
                OffsetFetchRequest(
                    group_id=group,
                    topics=[FetchTopic(name=topic, partition_indexes=[0])],
                    require_stable=require_stable,
                ),
                7,
            )
            part = response.topics[0].partitions[0]
            return part.committed_offset, part.error_code

        assert fetch(True) == (-1, 88)
        assert fetch(False) == (-1, 0)
        end = EndTxnRequest(transactional_id=txn_id, producer_id=pid, producer_epoch=0, committed=True)
        assert client.call(end, 3).error_code == 0
        assert fetch(True) == (42, 0)


def test_exactly_once_across_broker_sigkills(tmp_path) -> None:
    """A consume-transform-produce worker (separate process, read_committed, send_offsets_to_transaction) while the
    broker is SIGKILLed twice and restarted on the same port: every input appears in the output exactly once."""
    import random
    import subprocess
    import sys
    from collections import Counter
    from pathlib import Path

    rng = random.Random(21)
    logs = tmp_path / "logs"
    overrides = dict(OVERRIDES, **{"group.min.session.timeout.ms": "500"})
    server = BrokerProcess(logs, overrides).start()
    overrides["listeners"] = f"PLAINTEXT://127.0.0.1:{server.port}"  # restarts keep the clients' address
    count = 300
    worker = None
    try:
        admin = KafkaAdminClient(bootstrap_servers=server.bootstrap)
        admin.create_topics([NewTopic("in", 2, 1), NewTopic("out", 1, 1)])
        admin.close()
        source = Producer(quiet(bs=server))
        for i in range(count):
            source.produce("in", b"%d" % i, partition=i % 2)
        source.flush(30)
        script = Path(__file__).with_name("txn_worker.py")
        worker = subprocess.Popen(
            [sys.executable, str(script), server.bootstrap], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        for _ in range(2):
            time.sleep(rng.uniform(1.5, 3.0))
            server.proc.kill()
            server.proc.wait()
            server = BrokerProcess(logs, overrides).start()
        output, _ = worker.communicate(timeout=300)
        assert worker.returncode == 0 and "worker done" in output, output[-3000:]
        values = [int(v) for v in consume_all(server.bootstrap, "out", "read_committed", count, timeout=30)]
        counts = Counter(values)
        assert sorted(counts) == list(range(count))
        assert max(counts.values()) == 1
    finally:
        if worker is not None and worker.poll() is None:
            worker.kill()
            worker.wait()
        assert server.stop() == 0


def test_add_partitions_v4_broker_path(broker) -> None:
    """AddPartitionsToTxn v4 (Kafka's broker-to-coordinator form): several transactions per request, VerifyOnly
    answering per partition whether it is in the transaction (INVALID_TXN_STATE when not)."""
    topic = unique("v4")
    create_topic(broker.bootstrap, topic, 2)
    txn_id = unique("v4-tx")
    Txn = AddPartitionsToTxnRequest.AddPartitionsToTxnTransaction
    with RawClient(broker.bootstrap) as client:
        init = _init(client, txn_id)

        def call(verify_only: bool, epoch: int = 0) -> list[tuple[str, int, int]]:
            response = client.call(
                AddPartitionsToTxnRequest(
                    transactions=[
                        Txn(
                            transactional_id=txn_id,
                            producer_id=init.producer_id,
                            producer_epoch=epoch,
                            verify_only=verify_only,
                            topics=[Txn.AddPartitionsToTxnTopic(name=topic, partitions=[0, 1])],
                        )
                    ]
                ),
                4,
            )
            assert response.error_code == 0
            (result,) = response.results_by_transaction
            assert result.transactional_id == txn_id
            return [
                (t.name, p.partition_index, p.partition_error_code)
                for t in result.topic_results
                for p in t.results_by_partition
            ]

        assert call(True) == [(topic, 0, INVALID_TXN_STATE), (topic, 1, INVALID_TXN_STATE)]
        assert call(False) == [(topic, 0, 0), (topic, 1, 0)]
        assert call(True) == [(topic, 0, 0), (topic, 1, 0)]
        assert call(True, epoch=1) == [(topic, 0, PRODUCER_FENCED), (topic, 1, PRODUCER_FENCED)]
        end = EndTxnRequest(transactional_id=txn_id, producer_id=init.producer_id, producer_epoch=0, committed=False)
        assert client.call(end, 3).error_code == 0


def test_a_zookeeper_cluster_too_small_for_the_state_topic(tmp_path) -> None:
    """A one-broker ZooKeeper cluster with Kafka's transaction.state.log.replication.factor (3): the state topic
    cannot be created, so FindCoordinator(TRANSACTION) answers COORDINATOR_NOT_AVAILABLE (15) as Kafka does, and
    InitProducerId with a transactional id NOT_COORDINATOR (16: this broker leads no partition of it);
    idempotent producers still get their ids. (Transactions across brokers: tests/test_cluster_transactions.py.)"""
    from tools.cluster import zookeeper

    missing = zookeeper.available()
    if missing is not None:
        pytest.skip(f"no ZooKeeper: {missing}")
    from tools.cluster.brokers import LocalCluster

    with LocalCluster(tmp_path / "cluster", size=1) as cluster, RawClient(cluster.bootstrap) as client:
        assert client.call(FindCoordinatorRequest(key="tx", key_type=1), 3).error_code == 15
        assert _init(client, "tx").error_code == 16
        idempotent = client.call(InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000), 4)
        assert idempotent.error_code == 0
        assert any("does not meet the required replication factor '3'" in line for line in cluster.brokers[1].lines)
