"""DescribeProducers (API key 61, KIP-664) against ``kafkalog serve``, with kafka-python's admin client and raw
requests; and the partition layer's ``active_producer_state`` it answers from.

Expected values come from what the producers sent (their producer id and epoch, the sequences and timestamps
of their records) and from Kafka's rules (KafkaApis.handleDescribeProducersRequest, Partition.activeProducerState,
UnifiedLog.activeProducers), never from the broker's own answer.
"""

from __future__ import annotations

import pytest

from brokertools import BrokerProcess, RawClient
from kafkalog.manager import LogManager
from kafkalog.record import RecordBatchBuilder
from kafkalog.testing import MockTime


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    server = BrokerProcess(tmp_path_factory.mktemp("broker-producers"), {"num.partitions": "1"}).start()
    yield server
    assert server.stop() == 0, server.log


# ----- the partition layer ------------------------------------------------------------------------------------
def _batch(pid: int, epoch: int, seq: int, n: int, ts: int, transactional: bool = False) -> bytes:
    builder = RecordBatchBuilder(
        producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=transactional
    )
    for i in range(n):
        builder.append(b"k%d" % i, b"v%d" % i, timestamp=ts + i)
    return builder.build()


def test_active_producer_state_of_idempotent_and_transactional_producers(tmp_path):
    clock = MockTime()
    with LogManager([tmp_path], {"log.dirs": str(tmp_path)}, clock=clock) as manager:
        manager.create_topic("t", 1)
        partition = manager.replica_manager.get_partition("t", 0)
        assert partition.active_producer_state() == []
        partition.append_records_to_leader(_batch(7, 2, 0, 3, 1_000), -1)  # offsets 0-2, sequences 0-2
        partition.append_records_to_leader(_batch(9, 0, 0, 2, 2_000, transactional=True), -1)  # offsets 3-4
        partition.append_records_to_leader(_batch(7, 2, 3, 1, 3_000), -1)  # offset 5, sequence 3
        state = {e.producer_id: e for e in partition.active_producer_state()}
        assert set(state) == {7, 9}
        idem, txn = state[7], state[9]
        assert (idem.producer_epoch, idem.last_seq, idem.last_timestamp) == (2, 3, 3_000)
        assert idem.current_txn_first_offset is None and idem.coordinator_epoch == -1
        assert (txn.producer_epoch, txn.last_seq, txn.last_timestamp) == (0, 1, 2_001)
        assert txn.current_txn_first_offset == 3
        # Copies: changing one does not touch the log's producer state.
        txn.current_txn_first_offset = 99
        assert {e.producer_id: e for e in partition.active_producer_state()}[9].current_txn_first_offset == 3


# ----- over the wire --------------------------------------------------------------------------------------------
def test_describe_producers_with_kafka_python_admin(broker):
    from kafka import KafkaProducer
    from kafka import TopicPartition as KTP
    from kafka.admin import KafkaAdminClient

    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, enable_idempotence=True, acks="all", linger_ms=0)
    try:
        for i in range(5):
            producer.send("idem", value=b"v%d" % i, partition=0, timestamp_ms=1_700_000_000_000 + i).get(timeout=30)
        pid_epoch = producer._transaction_manager.producer_id_and_epoch
    finally:
        producer.close()
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        result = admin.describe_producers([KTP("idem", 0)])
        (state,) = result[KTP("idem", 0)].active_producers
        assert state.producer_id == pid_epoch.producer_id >= 0
        assert state.producer_epoch == pid_epoch.epoch
        assert state.last_sequence == 4  # five records sent one at a time: sequences 0..4
        assert state.last_timestamp == 1_700_000_000_004  # the last batch's max timestamp
        assert state.coordinator_epoch == -1  # no marker ever written for it
        assert state.current_transaction_start_offset == -1  # no open transaction
        # Asking the one broker by id (the tool's --broker-id) gives the same answer.
        assert admin.describe_producers([KTP("idem", 0)], broker_id=0) == result
    finally:
        admin.close()


def test_describe_producers_errors_over_the_wire(broker):
    from kafka import KafkaAdminClient, KafkaProducer
    from kafka.admin import NewTopic
    from kafka.protocol.admin.transactions import DescribeProducersRequest

    Topic = DescribeProducersRequest.TopicRequest
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.create_topics([NewTopic("exists", 1, 1)])
    admin.close()
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, enable_idempotence=False)
    producer.send("exists", b"x", partition=0).get(timeout=30)
    producer.close()
    request = DescribeProducersRequest(
        topics=[
            Topic(name="exists", partition_indexes=[0, 5]),
            Topic(name="no-such-topic", partition_indexes=[0]),
            Topic(name="bad/name", partition_indexes=[1]),
        ]
    )
    with RawClient(broker.bootstrap) as client:
        response = client.call(request, 0)
    got = {
        (t.name, p.partition_index): (p.error_code, p.active_producers) for t in response.topics for p in t.partitions
    }
    assert got[("exists", 0)] == (0, [])  # a plain producer has no producer id: no active producer
    assert got[("exists", 5)][0] == 6  # NOT_LEADER_OR_FOLLOWER: a known topic, a partition not hosted here
    assert got[("no-such-topic", 0)][0] == 3  # UNKNOWN_TOPIC_OR_PARTITION
    assert got[("bad/name", 1)][0] == 17  # INVALID_TOPIC_EXCEPTION
    assert [t.name for t in response.topics] == ["exists", "no-such-topic", "bad/name"]


def test_describe_producers_shows_an_open_transaction(broker):
    """A transactional batch with no marker yet: its producer's CurrentTxnStartOffset is the batch's offset."""
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic
    from kafka.protocol.admin.transactions import DescribeProducersRequest
    from kafka.protocol.producer import InitProducerIdRequest, ProduceRequest

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.create_topics([NewTopic("open-txn", 1, 1)])
    admin.close()
    from kafka.protocol.producer.transaction import AddPartitionsToTxnRequest

    with RawClient(broker.bootstrap) as client:
        # the transaction coordinator's producer: a transactional write must go to a partition added to its
        # transaction (the broker verifies it, as Kafka's KIP-890 verification does)
        init = client.call(InitProducerIdRequest(transactional_id="raw-txn", transaction_timeout_ms=60000), 1)
        assert init.error_code == 0
        pid, epoch = init.producer_id, init.producer_epoch
        Added = AddPartitionsToTxnRequest.AddPartitionsToTxnTopic
        added = client.call(
            AddPartitionsToTxnRequest(
                v3_and_below_transactional_id="raw-txn",
                v3_and_below_producer_id=pid,
                v3_and_below_producer_epoch=epoch,
                v3_and_below_topics=[Added(name="open-txn", partitions=[0])],
            ),
            3,
        )
        assert added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0
        plain = _batch(pid, epoch, 0, 2, 1_700_000_001_000)  # offsets 0-1, not transactional
        txn = _batch(pid, epoch, 2, 3, 1_700_000_002_000, transactional=True)  # offsets 2-4
        Data = ProduceRequest.TopicProduceData
        for records in (plain, txn):
            part = Data.PartitionProduceData(index=0, records=records)
            produced = client.call(
                ProduceRequest(
                    transactional_id="raw-txn",
                    acks=-1,
                    timeout_ms=10000,
                    topic_data=[Data(name="open-txn", partition_data=[part])],
                ),
                9,
            )
            assert produced.responses[0].partition_responses[0].error_code == 0
        Topic = DescribeProducersRequest.TopicRequest
        response = client.call(DescribeProducersRequest(topics=[Topic(name="open-txn", partition_indexes=[0])]), 0)
    (part,) = response.topics[0].partitions
    assert part.error_code == 0
    (state,) = part.active_producers
    assert (state.producer_id, state.producer_epoch, state.last_sequence) == (pid, epoch, 4)
    assert state.last_timestamp == 1_700_000_002_002
    assert state.current_txn_start_offset == 2
