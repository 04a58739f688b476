"""The broker's protocol, request by request, against a ``kafkalog serve`` subprocess (raw frames).

Each Kafka-compatible-broker trap of issue 18 has a test here: a fetch offset inside a batch returns the
whole batch, the first batch is returned whole over the size limits (KIP-74), empty record sets are never
null, ListOffsets by timestamp, auto topic creation, max.message.bytes, compression attributes kept as sent;
plus read_committed with an aborted transaction, long polling woken by a produce, pipelining, acks=0, and
bad frames closing only their own connection.
"""

from __future__ import annotations

import struct
import threading
import time

import pytest
from kafka.protocol.admin import CreateTopicsRequest, DeleteTopicsRequest
from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest, OffsetForLeaderEpochRequest
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest
from kafka.protocol.producer import InitProducerIdRequest, ProduceRequest

from brokertools import BrokerProcess, RawClient, api_versions_ok, fetch_request, frame
from kafkalog.broker.protocol import APIS
from kafkalog.manager import LogManager
from kafkalog.record import RecordBatchBuilder, iter_batches
from kafkalog.record.types import ControlRecordType

PID = 4242


def batch(values, *, compression="none", timestamp=None, producer_id=-1, sequence=-1, transactional=False) -> bytes:
    builder = RecordBatchBuilder(
        compression,
        producer_id=producer_id,
        producer_epoch=0 if producer_id >= 0 else -1,
        base_sequence=sequence,
        is_transactional=transactional,
    )
    for i, value in enumerate(values):
        builder.append(b"k%d" % i, value, timestamp)
    return builder.build()


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """One server for the module; its log dir is prepared offline with an aborted transaction on 'txn'."""
    log_dir = tmp_path_factory.mktemp("broker-protocol")
    with LogManager([log_dir]) as manager:
        manager.create_topic("txn", 1)
        lg = manager.get_log("txn", 0)
        lg.append(batch([b"committed-0", b"committed-1"]))
        lg.append(batch([b"aborted-0", b"aborted-1"], producer_id=PID, sequence=0, transactional=True))
        lg.append_end_txn_marker(ControlRecordType.ABORT, PID, 0, 0)
        lg.append(batch([b"after"]))
    with BrokerProcess(log_dir, {"num.partitions": "1", "message.max.bytes": "200000"}) as server:
        yield server


def produce(client, topic, records, partition=0, acks=-1, version=9, correlation_id=1):
    P = ProduceRequest.TopicProduceData
    request = ProduceRequest(
        transactional_id=None,
        acks=acks,
        timeout_ms=5000,
        topic_data=[P(name=topic, partition_data=[P.PartitionProduceData(index=partition, records=records)])],
    )
    if acks == 0:
        from brokertools import encode_request

        client.send(encode_request(request, version, correlation_id))
        return None
    response = client.call(request, version, correlation_id)
    return response.responses[0].partition_responses[0]


def fetch(
    client,
    topic,
    offset,
    *,
    version=12,
    partition_max=1 << 20,
    max_bytes=50 << 20,
    max_wait=0,
    min_bytes=0,
    isolation=0,
    partition=0,
):
    request = fetch_request(
        topic,
        {partition: offset},
        partition_max_bytes=partition_max,
        max_bytes=max_bytes,
        max_wait_ms=max_wait,
        min_bytes=min_bytes,
        isolation_level=isolation,
    )
    response = client.call(request, version)
    return response, response.responses[0].partitions[0]


def create_topic(client, name, partitions=1, configs=()):
    C = CreateTopicsRequest.CreatableTopic
    request = CreateTopicsRequest(
        topics=[
            C(
                name=name,
                num_partitions=partitions,
                replication_factor=-1,
                assignments=[],
                configs=[C.CreatableTopicConfig(name=k, value=v) for k, v in configs],
            )
        ],
        timeout_ms=5000,
        validate_only=False,
    )
    return client.call(request, 7).topics[0]


# ----- ApiVersions, Metadata ---------------------------------------------------------------------------
@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_api_versions_lists_every_api(broker, version):
    with RawClient(broker.bootstrap) as c:
        response = c.call(ApiVersionsRequest(client_software_name="t", client_software_version="1"), version)
    assert response.error_code == 0
    listed = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert listed == {s.key: (s.min_version, s.max_version) for s in APIS.values()}
    assert listed[0] == (3, 11) and listed[1] == (4, 12) and listed[3] == (0, 12)


def test_unknown_api_versions_version_gets_the_v0_error_reply(broker):
    with RawClient(broker.bootstrap) as c:
        c.send(frame(18, 99, b"\x00garbage", correlation_id=7))
        body = c.receive()
    assert struct.unpack_from(">i", body)[0] == 7
    response = ApiVersionsResponse[0].decode(body[4:])
    assert response.error_code == 35  # UNSUPPORTED_VERSION
    assert {k.api_key for k in response.api_keys} == set(APIS)


@pytest.mark.parametrize("version", [0, 1, 4, 7, 9, 10, 12])
def test_metadata_names_this_broker_leader_and_the_cluster_id(broker, version):
    cluster_id = (broker.log_dir / "meta.properties").read_text().split("cluster.id=")[1].split()[0]
    with RawClient(broker.bootstrap) as c:
        kwargs = {"allow_auto_topic_creation": False} if version >= 4 else {}
        response = c.call(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="txn")], **kwargs), version)
    assert [(b.node_id, b.host, b.port) for b in response.brokers] == [(0, broker.host, broker.port)]
    if version >= 2:
        assert response.cluster_id == cluster_id
    topic = response.topics[0]
    assert (topic.error_code, topic.name) == (0, "txn")
    assert [(p.partition_index, p.leader_id, p.replica_nodes, p.isr_nodes) for p in topic.partitions] == [
        (0, 0, [0], [0])
    ]


def test_metadata_auto_creates_a_topic_only_when_allowed(broker):
    with RawClient(broker.bootstrap) as c:
        refused = c.call(
            MetadataRequest(
                topics=[MetadataRequest.MetadataRequestTopic(name="auto-no")], allow_auto_topic_creation=False
            ),
            9,
        )
        created = c.call(
            MetadataRequest(
                topics=[MetadataRequest.MetadataRequestTopic(name="auto-yes")], allow_auto_topic_creation=True
            ),
            9,
        )
        bad = c.call(
            MetadataRequest(
                topics=[MetadataRequest.MetadataRequestTopic(name="bad/name")], allow_auto_topic_creation=True
            ),
            9,
        )
    assert refused.topics[0].error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION
    assert created.topics[0].error_code == 0 and len(created.topics[0].partitions) == 1
    assert bad.topics[0].error_code == 17  # INVALID_TOPIC_EXCEPTION
    assert (broker.log_dir / "auto-yes-0").is_dir() and not (broker.log_dir / "auto-no-0").exists()


# ----- Produce -----------------------------------------------------------------------------------------
def test_produce_appends_the_batch_as_sent_and_keeps_its_compression(broker):
    with RawClient(broker.bootstrap) as c:
        assert create_topic(c, "keep-codec").error_code == 0
        sent = batch([b"x" * 100, b"y" * 100], compression="lz4")
        answer = produce(c, "keep-codec", sent)
        assert (answer.error_code, answer.base_offset) == (0, 0)
        _, part = fetch(c, "keep-codec", 0)
    stored = next(iter_batches(bytes(part.records)))
    sent_batch = next(iter_batches(sent))
    assert stored.compression == sent_batch.compression
    assert [r.value for r in stored] == [b"x" * 100, b"y" * 100]
    # The stored batch is the sent one but for the broker's fields (base offset, leader epoch, CRC).
    assert bytes(part.records)[61:] == sent[61:]


def test_produce_errors_use_kafkas_codes(broker):
    with RawClient(broker.bootstrap) as c:
        assert create_topic(c, "errors", configs=[("max.message.bytes", "1000")]).error_code == 0
        assert produce(c, "no-such-topic", batch([b"v"])).error_code == 3
        assert produce(c, "errors", batch([b"v"]), partition=5).error_code == 3
        assert produce(c, "errors", batch([b"v" * 5000])).error_code == 10  # MESSAGE_TOO_LARGE
        assert produce(c, "errors", batch([b"a"]) + batch([b"b"])).error_code == 87  # two batches: INVALID_RECORD
        magic1 = bytearray(batch([b"a"]))
        magic1[16] = 1
        assert produce(c, "errors", bytes(magic1)).error_code == 87
        corrupt = bytearray(batch([b"a"]))
        corrupt[-1] ^= 0xFF
        assert produce(c, "errors", bytes(corrupt)).error_code == 2  # CORRUPT_MESSAGE (CRC)
        assert produce(c, "errors", batch([b"a"]), acks=2).error_code == 21  # INVALID_REQUIRED_ACKS
        assert produce(c, "errors", batch([b"ok"])).error_code == 0  # nothing above was written
        _, part = fetch(c, "errors", 0)
    assert [r.value for b in iter_batches(bytes(part.records)) for r in b] == [b"ok"]


def test_idempotent_duplicate_gets_the_original_offset_and_a_gap_is_refused(broker):
    with RawClient(broker.bootstrap) as c:
        pid = c.call(InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000), 4)
        assert pid.error_code == 0 and pid.producer_id >= 0
        create_topic(c, "idem")
        first = produce(c, "idem", batch([b"a", b"b"], producer_id=pid.producer_id, sequence=0))
        again = produce(c, "idem", batch([b"a", b"b"], producer_id=pid.producer_id, sequence=0))
        gap = produce(c, "idem", batch([b"c"], producer_id=pid.producer_id, sequence=5))
        other = c.call(InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000), 4)
    assert (first.error_code, first.base_offset) == (0, 0)
    assert (again.error_code, again.base_offset) == (0, 0)
    assert gap.error_code == 45  # OUT_OF_ORDER_SEQUENCE_NUMBER
    assert other.producer_id != pid.producer_id


def test_acks_zero_gets_no_response_and_pipelined_requests_answer_in_order(broker):
    with RawClient(broker.bootstrap) as c:
        create_topic(c, "pipe")
        P = ProduceRequest.TopicProduceData
        data = b""
        for corr in range(1, 6):
            acks = 0 if corr % 2 else 1
            request = ProduceRequest(
                transactional_id=None,
                acks=acks,
                timeout_ms=5000,
                topic_data=[
                    P(name="pipe", partition_data=[P.PartitionProduceData(index=0, records=batch([b"%d" % corr]))])
                ],
            )
            from brokertools import encode_request

            data += encode_request(request, 9, corr)
        c.send(data)  # five requests in one write
        corrs = [struct.unpack_from(">i", c.receive())[0] for _ in range(2)]
        assert corrs == [2, 4]
        _, part = fetch(c, "pipe", 0)
    values = [r.value for b in iter_batches(bytes(part.records)) for r in b]
    assert values == [b"1", b"2", b"3", b"4", b"5"]


def test_failed_acks_zero_produce_closes_the_connection(broker):
    with RawClient(broker.bootstrap) as c:
        produce(c, "no-such-topic-0", batch([b"v"]), acks=0)
        assert c.closed_by_peer()
    assert api_versions_ok(broker.bootstrap)


# ----- Fetch -------------------------------------------------------------------------------------------
def test_fetch_offset_inside_a_batch_returns_the_whole_batch(broker):
    with RawClient(broker.bootstrap) as c:
        create_topic(c, "mid-batch")
        produce(c, "mid-batch", batch([b"a", b"b", b"c", b"d"], compression="gzip"))
        _, part = fetch(c, "mid-batch", 2)
    batches = list(iter_batches(bytes(part.records)))
    assert [(b.base_offset, b.last_offset) for b in batches] == [(0, 3)]
    assert part.high_watermark == 4 and part.log_start_offset == 0


def test_fetch_returns_the_first_batch_whole_over_the_limits_kip74(broker):
    with RawClient(broker.bootstrap) as c:
        create_topic(c, "kip74")
        big = batch([b"z" * 5000])
        produce(c, "kip74", big)
        produce(c, "kip74", batch([b"small"]))
        _, part = fetch(c, "kip74", 0, partition_max=100, max_bytes=100)
    records = bytes(part.records)
    assert len(records) == len(big) and records[61:] == big[61:]


def test_fetch_response_max_bytes_spans_partitions(broker):
    with RawClient(broker.bootstrap) as c:
        create_topic(c, "two-parts", partitions=2)
        for p in (0, 1):
            produce(c, "two-parts", batch([b"q" * 3000]), partition=p)
        T = FetchRequest.FetchTopic
        parts = [
            T.FetchPartition(
                partition=p,
                current_leader_epoch=-1,
                fetch_offset=0,
                last_fetched_epoch=-1,
                log_start_offset=-1,
                partition_max_bytes=1 << 20,
            )
            for p in (0, 1)
        ]
        request = FetchRequest(
            replica_id=-1,
            max_wait_ms=0,
            min_bytes=0,
            max_bytes=1000,
            isolation_level=0,
            session_id=0,
            session_epoch=-1,
            topics=[T(topic="two-parts", partitions=parts)],
            forgotten_topics_data=[],
            rack_id="",
        )
        response = c.call(request, 12)
    sizes = [len(p.records or b"") for p in response.responses[0].partitions]
    assert sizes[0] > 1000 and sizes[1] == 0  # the first whole, nothing more once the response limit is spent
    assert response.responses[0].partitions[1].records is not None  # never a null record set


def test_fetch_out_of_range_and_unknown_partition(broker):
    with RawClient(broker.bootstrap) as c:
        _, part = fetch(c, "txn", 1000)
        assert part.error_code == 1
        _, part = fetch(c, "txn", 0, partition=7)
        assert part.error_code == 3


@pytest.mark.parametrize("version", [4, 5, 7, 11, 12])
def test_read_committed_stops_at_the_lso_and_lists_aborted_transactions(broker, version):
    with RawClient(broker.bootstrap) as c:
        _, committed = fetch(c, "txn", 0, isolation=1, version=version)
        _, uncommitted = fetch(c, "txn", 0, isolation=0, version=version)
    assert committed.error_code == 0
    assert committed.high_watermark == 6 and committed.last_stable_offset == 6
    assert [(t.producer_id, t.first_offset) for t in committed.aborted_transactions] == [(PID, 2)]
    assert uncommitted.aborted_transactions is None
    assert bytes(committed.records) == bytes(uncommitted.records)


def test_long_poll_is_answered_when_data_arrives(broker):
    with RawClient(broker.bootstrap) as c:
        create_topic(c, "long-poll")

    def later():
        time.sleep(0.4)
        with RawClient(broker.bootstrap) as p:
            produce(p, "long-poll", batch([b"wake"]))

    threading.Thread(target=later).start()
    start = time.monotonic()
    with RawClient(broker.bootstrap, timeout=30) as c:
        _, part = fetch(c, "long-poll", 0, max_wait=20000, min_bytes=1)
    elapsed = time.monotonic() - start
    assert [r.value for b in iter_batches(bytes(part.records)) for r in b] == [b"wake"]
    assert 0.3 < elapsed < 5, elapsed


def test_long_poll_without_data_waits_max_wait(broker):
    start = time.monotonic()
    with RawClient(broker.bootstrap) as c:
        _, part = fetch(c, "txn", 6, max_wait=600, min_bytes=1)
    elapsed = time.monotonic() - start
    assert part.error_code == 0 and not part.records
    assert 0.5 < elapsed < 5


# ----- ListOffsets, OffsetForLeaderEpoch, topics ----------------------------------------------------------
def test_list_offsets_earliest_latest_timestamp_and_max(broker):
    with RawClient(broker.bootstrap) as c:
        create_topic(c, "times")
        for i, ts in enumerate([1000, 2000, 3000]):
            produce(c, "times", batch([b"t%d" % i], timestamp=ts))
        T = ListOffsetsRequest.ListOffsetsTopic

        def lookup(timestamp, version=7, isolation=0):
            request = ListOffsetsRequest(
                replica_id=-1,
                isolation_level=isolation,
                topics=[
                    T(
                        name="times",
                        partitions=[
                            T.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=timestamp)
                        ],
                    )
                ],
            )
            p = c.call(request, version).topics[0].partitions[0]
            return p.error_code, p.timestamp, p.offset

        assert lookup(-2) == (0, -1, 0)
        assert lookup(-1) == (0, -1, 3)
        assert lookup(1500) == (0, 2000, 1)
        assert lookup(3000, version=1) == (0, 3000, 2)
        assert lookup(9999) == (0, -1, -1)
        assert lookup(-3) == (0, 3000, 2)


def test_offset_for_leader_epoch(broker):
    T = OffsetForLeaderEpochRequest.OffsetForLeaderTopic
    request = OffsetForLeaderEpochRequest(
        replica_id=-1,
        topics=[
            T(topic="txn", partitions=[T.OffsetForLeaderPartition(partition=0, current_leader_epoch=0, leader_epoch=0)])
        ],
    )
    with RawClient(broker.bootstrap) as c:
        p = c.call(request, 4).topics[0].partitions[0]
    assert (p.error_code, p.leader_epoch, p.end_offset) == (0, 0, 6)


def test_create_and_delete_topics(broker):
    with RawClient(broker.bootstrap) as c:
        created = create_topic(c, "made", partitions=3)
        again = create_topic(c, "made")
        replicated = c.call(
            CreateTopicsRequest(
                topics=[
                    CreateTopicsRequest.CreatableTopic(
                        name="rf3", num_partitions=1, replication_factor=3, assignments=[], configs=[]
                    )
                ],
                timeout_ms=1000,
            ),
            7,
        )
        deleted = c.call(DeleteTopicsRequest(topic_names=["made", "never"], timeout_ms=1000), 5)
    assert (created.error_code, created.num_partitions) == (0, 3)
    assert again.error_code == 36  # TOPIC_ALREADY_EXISTS
    assert replicated.topics[0].error_code == 38  # INVALID_REPLICATION_FACTOR
    assert [(r.name, r.error_code) for r in deleted.responses] == [("made", 0), ("never", 3)]


# ----- bad frames ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "data",
    [
        struct.pack(">i", 200 * 1024 * 1024) + b"x",  # over socket.request.max.bytes
        struct.pack(">i", -5),  # negative size
        frame(9999, 0, b""),  # unknown API key
        frame(0, 1, b""),  # Produce v1: not enabled
        frame(1, 12, b"\x00\x01\x02"),  # a Fetch body that does not parse
        struct.pack(">i", 3) + b"abc",  # shorter than a header
    ],
    ids=["too-large", "negative", "unknown-api", "old-version", "garbage-body", "short-header"],
)
def test_bad_frames_close_only_their_connection(broker, data):
    with RawClient(broker.bootstrap) as healthy, RawClient(broker.bootstrap) as bad:
        bad.send(data)
        assert bad.closed_by_peer()
        assert healthy.call(ApiVersionsRequest(), 0).error_code == 0
    assert broker.proc.poll() is None


def test_truncated_frame_then_disconnect_leaves_the_broker_serving(broker):
    with RawClient(broker.bootstrap) as c:
        c.send(frame(3, 9, b"\x00\x00")[:-1][:8])
    assert api_versions_ok(broker.bootstrap)


def test_delete_records_moves_the_log_start_and_refuses_past_the_high_watermark(broker):
    from kafka.protocol.admin import DeleteRecordsRequest

    T = DeleteRecordsRequest.DeleteRecordsTopic

    def delete(offset):
        request = DeleteRecordsRequest(
            timeout_ms=1000,
            topics=[T(name="trim", partitions=[T.DeleteRecordsPartition(partition_index=0, offset=offset)])],
        )
        p = c.call(request, 2).topics[0].partitions[0]
        return p.error_code, p.low_watermark

    with RawClient(broker.bootstrap) as c:
        create_topic(c, "trim")
        for i in range(5):
            produce(c, "trim", batch([b"%d" % i]))
        assert delete(9) == (1, -1)  # OFFSET_OUT_OF_RANGE: beyond the high watermark
        assert delete(2) == (0, 2)
        assert delete(-1) == (0, 5)  # -1: up to the high watermark
        _, part = fetch(c, "trim", 0)
    assert part.error_code == 1 and part.log_start_offset == 5


def test_describe_configs_of_the_broker(broker):
    from kafka.protocol.admin import DescribeConfigsRequest

    R = DescribeConfigsRequest.DescribeConfigsResource
    with RawClient(broker.bootstrap) as c:
        request = DescribeConfigsRequest(
            resources=[R(resource_type=4, resource_name="0", configuration_keys=["message.max.bytes"])],
            include_synonyms=False,
            include_documentation=False,
        )
        result = c.call(request, 4).results[0]
    assert result.error_code == 0
    assert [(e.name, e.value, e.config_source) for e in result.configs] == [("message.max.bytes", "200000", 4)]


def test_acks_all_needs_min_insync_replicas_and_produce_reports_the_log_start(broker):
    with RawClient(broker.bootstrap) as c:
        assert create_topic(c, "min-isr", configs=[("min.insync.replicas", "2")]).error_code == 0
        refused = produce(c, "min-isr", batch([b"a"]), acks=-1)
        accepted = produce(c, "min-isr", batch([b"b"]), acks=1)
        _, part = fetch(c, "min-isr", 0)
    assert refused.error_code == 19  # NOT_ENOUGH_REPLICAS, and nothing written
    assert (accepted.error_code, accepted.base_offset, accepted.log_start_offset) == (0, 0, 0)
    assert [r.value for b in iter_batches(bytes(part.records)) for r in b] == [b"b"]


def test_log_append_time_topics_report_the_broker_timestamp(broker):
    with RawClient(broker.bootstrap) as c:
        create_topic(c, "append-time", configs=[("message.timestamp.type", "LogAppendTime")])
        before = int(time.time() * 1000)
        answer = produce(c, "append-time", batch([b"a"], timestamp=5))
    assert answer.error_code == 0 and answer.log_append_time_ms >= before - 5000


def test_describe_log_dirs(broker):
    from kafka.protocol.admin import DescribeLogDirsRequest

    T = DescribeLogDirsRequest.DescribableLogDirTopic
    with RawClient(broker.bootstrap) as c:
        everything = c.call(DescribeLogDirsRequest(topics=None), 4)
        one = c.call(DescribeLogDirsRequest(topics=[T(topic="txn", partitions=[0])]), 1)
    [result] = everything.results
    assert result.error_code == 0 and result.log_dir == str(broker.log_dir.resolve())
    assert result.total_bytes > 0 and 0 <= result.usable_bytes <= result.total_bytes
    sizes = {(t.name, p.partition_index): p.partition_size for t in result.topics for p in t.partitions}
    assert sizes[("txn", 0)] == (broker.log_dir / "txn-0" / "00000000000000000000.log").stat().st_size
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in one.results[0].topics] == [("txn", [0])]
