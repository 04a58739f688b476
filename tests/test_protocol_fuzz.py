"""The protocol fuzzer in CI: every API and version the broker advertises, thousands of seeded cases, the oracle
itself, and one regression test per input the long atheris runs found (fuzz/README.md, "The protocol fuzzer").

The target is ``kafkalog.testing.protocol_fuzz``: one request frame through a real broker's decoder, router and
handlers in process, answered with a response that decodes by its API/version's schema and echoes the
correlation id, or a closed connection; never another exception, an UNKNOWN_SERVER_ERROR, an error logged, a
held event loop, or a broker that then fails a valid ApiVersions/Metadata request. Cases are derived from a
fixed seed, so every run tries the same inputs.
"""

from __future__ import annotations

import struct

import pytest

from kafkalog.broker import apis
from kafkalog.broker.protocol import APIS, Response
from kafkalog.testing.fuzz import UnexpectedOutcome
from kafkalog.testing.protocol_fuzz import decode_response, fuzzer, judge, run_cases
from kafkalog.testing.protocol_messages import encode_frame, seed_requests, valid_request

pytestmark = pytest.mark.timeout(300)

CI_CASES = 2500


@pytest.fixture(scope="module")
def broker():
    with fuzzer(reset_every=10_000) as f:
        yield f


def test_a_valid_request_of_every_advertised_api_and_version_is_answered(broker) -> None:
    seeds = seed_requests()
    assert {(key, version) for key, version, _ in seeds} == {
        (spec.key, v) for spec in APIS.values() for v in range(spec.min_version, spec.max_version + 1)
    }
    for key, version, frame in seeds:
        outcome = broker.check(frame)
        if outcome == "parked":  # a join waiting for the group's other members, or a slow machine: let it finish
            broker.settle()
            assert not broker.parked
        assert outcome in ("answered", "parked"), (APIS[key].name, version, outcome)


def test_thousands_of_seeded_cases_keep_the_oracle() -> None:
    outcomes, failures = run_cases(CI_CASES, seed=0, reset_every=1000)
    assert failures == []
    assert sum(outcomes.values()) == CI_CASES
    # the mix reaches the handlers, not only the decoder's refusals
    assert outcomes["answered"] > CI_CASES // 4
    assert outcomes["closed"] > CI_CASES // 10


# ----- the oracle itself ------------------------------------------------------------------------------------


def _metadata_frame(correlation_id: int = 5) -> bytes:
    return encode_frame(APIS[3], 12, valid_request(APIS[3], 12), correlation_id)


def test_the_oracle_refuses_a_wrong_correlation_id_trailing_bytes_and_unknown_server_error() -> None:
    frame = _metadata_frame(5)
    metadata = APIS[3].response(version=12, throttle_time_ms=0, brokers=[], cluster_id=None, controller_id=0, topics=[])
    good = metadata.encode(version=12)
    assert judge(frame, (struct.pack(">i", 5) + b"\x00", Response([good]))) == "answered"
    with pytest.raises(UnexpectedOutcome, match="response header"):
        judge(frame, (struct.pack(">i", 6) + b"\x00", Response([good])))
    with pytest.raises(UnexpectedOutcome, match="does not decode"):
        judge(frame, (struct.pack(">i", 5) + b"\x00", Response([good + b"\x00"])))
    T = APIS[3].response.MetadataResponseTopic
    failing = APIS[3].response(
        version=12,
        throttle_time_ms=0,
        brokers=[],
        cluster_id=None,
        controller_id=0,
        topics=[T(error_code=-1, name="fuzz", topic_id=None, is_internal=False, partitions=[])],
    )
    with pytest.raises(UnexpectedOutcome, match="UNKNOWN_SERVER_ERROR"):
        judge(frame, (struct.pack(">i", 5) + b"\x00", Response([failing.encode(version=12)])))
    with pytest.raises(UnexpectedOutcome, match="no response"):
        judge(frame, None)
    assert decode_response(3, 12, good).controller_id == 0


def test_the_oracle_reports_a_handler_exception_and_recovers(broker, monkeypatch) -> None:
    async def broken(server, header, request):
        raise TypeError("a handler bug")

    monkeypatch.setitem(apis.HANDLERS, 60, broken)  # DescribeCluster
    frame = encode_frame(APIS[60], 1, valid_request(APIS[60], 1))
    with pytest.raises(UnexpectedOutcome, match="TypeError: a handler bug"):
        broker.check(frame)
    monkeypatch.undo()
    assert broker.check(frame) == "answered"


# ----- regressions: inputs the fuzzer found -----------------------------------------------------------------


def _list_offsets(timestamp: int, version: int = 7) -> bytes:
    request = valid_request(APIS[2], version)
    request.topics[0].partitions[0].timestamp = timestamp
    return encode_frame(APIS[2], version, request, 9)


@pytest.mark.parametrize("timestamp", [-64475, -72057570844116358, -6])
def test_list_offsets_with_a_negative_timestamp_searches_like_any_other(broker, timestamp) -> None:
    """Kafka's fetchOffsetByTimestamp checks no range: a timestamp below every record's finds the first record
    (the fuzzer found UNKNOWN_SERVER_ERROR here: the log raised ValueError)."""
    frame = _list_offsets(timestamp)
    result = broker.loop.run_until_complete(broker.router(broker.conn, memoryview(frame)))
    assert judge(frame, result) == "answered"
    response = decode_response(2, 7, b"".join(result[1].parts))
    partition = response.topics[0].partitions[0]
    assert (partition.error_code, partition.offset) == (0, 0)


def _answer(broker, frame: bytes):
    result = broker.loop.run_until_complete(broker.router(broker.conn, memoryview(frame)))
    body = b"".join(result[1].parts)
    assert judge(frame, result) == "answered"
    return body


@pytest.mark.parametrize("count", [2**31 - 1, 100_000, 10_003])
def test_create_partitions_refuses_more_than_kafkas_batch_limit_at_once(broker, count) -> None:
    """Kafka's controller refuses a request adding more than 10,000 partitions (POLICY_VIOLATION); the fuzzer found
    CreatePartitions count=2^31-1 holding the event loop while it created partition directories one by one."""
    request = valid_request(APIS[37], 3)
    request.topics[0].count = count
    request.topics[0].assignments = None
    response = decode_response(37, 3, _answer(broker, encode_frame(APIS[37], 3, request, 11)))
    assert [(r.name, r.error_code) for r in response.results] == [("fuzz", 44)]
    assert "excessively large" in response.results[0].error_message
    assert broker._server.log_manager.describe_topic("fuzz").partitions.__len__() == 2


def test_create_topics_refuses_more_than_kafkas_batch_limit_in_one_request(broker) -> None:
    request = valid_request(APIS[19], 7)
    request.topics[0].num_partitions = 2**31 - 1
    response = decode_response(19, 7, _answer(broker, encode_frame(APIS[19], 7, request, 12)))
    topic = response.topics[0]
    assert (topic.name, topic.error_code, topic.error_message) == (
        "fuzz-created",
        44,
        "Excessively large number of partitions per request.",
    )
    assert "fuzz-created" not in broker._server.log_manager.topics()


def test_a_null_element_in_an_array_of_strings_is_refused_while_decoding(broker) -> None:
    """Kafka's readers refuse a null element of a non-nullable string array; the fuzzer found
    ConsumerGroupHeartbeat's subscribed_topic_names [None, ...] reaching the coordinator (TypeError sorting)."""
    request = valid_request(APIS[68], 0)
    request.subscribed_topic_names = [None, "fuzz"]
    assert broker.check(encode_frame(APIS[68], 0, request, 13)) == "closed"
    describe = valid_request(APIS[15], 5)
    describe.groups = ["fuzz-group", None]
    assert broker.check(encode_frame(APIS[15], 5, describe, 14)) == "closed"


def test_offset_commit_retention_overflowing_a_long_is_stored_as_kafka_stores_it(broker) -> None:
    """OffsetCommit v2-v4 retention_time_ms: the expiry is now + retention as a Java long, which wraps (the fuzzer
    found 2^63-1 failing to encode the offset record: struct.error)."""
    request = valid_request(APIS[8], 2)
    request.group_id = "fuzz-retention"
    request.retention_time_ms = 2**63 - 1
    request.topics[0].partitions[0].committed_offset = 3
    response = decode_response(8, 2, _answer(broker, encode_frame(APIS[8], 2, request, 15)))
    assert [p.error_code for t in response.topics for p in t.partitions] == [0]
    fetch = valid_request(APIS[9], 1)
    fetch.group_id = "fuzz-retention"
    fetched = decode_response(9, 1, _answer(broker, encode_frame(APIS[9], 1, fetch, 16)))
    assert [(p.committed_offset, p.error_code) for t in fetched.topics for p in t.partitions] == [(3, 0)]


DOOMED_TOPIC_FOR_GROWTH = "fuzz-grown"


def test_create_partitions_runs_off_the_event_loop(broker) -> None:
    """Thousands of new partitions (below Kafka's 10,000 limit) take minutes of file-system work on a loaded
    machine; the fuzzer found CreatePartitions count=4099 holding the event loop 90 s. Other requests are
    answered meanwhile (as Kafka's controller creates them on a thread of its own)."""
    import asyncio

    request = valid_request(APIS[37], 3)
    request.topics[0].name = DOOMED_TOPIC_FOR_GROWTH
    request.topics[0].count = 400
    request.topics[0].assignments = None
    broker._server.log_manager.create_topic(DOOMED_TOPIC_FOR_GROWTH, 1)
    metadata = _metadata_frame(17)

    async def both():
        growing = asyncio.ensure_future(broker.router(broker.conn, memoryview(encode_frame(APIS[37], 3, request, 18))))
        await asyncio.sleep(0)  # the growth has started
        answered = await broker.router(broker._new_connection(), memoryview(metadata))
        return growing.done(), answered, await growing

    grown_first, answered, grown = broker.loop.run_until_complete(both())
    assert judge(metadata, answered) == "answered"
    assert not grown_first  # Metadata was answered while the partitions were still being created
    response = decode_response(37, 3, b"".join(grown[1].parts))
    assert [r.error_code for r in response.results] == [0]
    assert len(broker._server.log_manager.describe_topic(DOOMED_TOPIC_FOR_GROWTH).partitions) == 400


# ----- the atheris harness's inputs -----------------------------------------------------------------------


def test_the_atheris_corpus_starts_from_every_valid_request() -> None:
    from kafkalog.testing.protocol_fuzz import corpus, frame_for

    seeds = {frame for _, _, frame in seed_requests()}
    inputs = corpus()
    assert len(inputs) == 2 * len(seeds)
    assert {frame_for(data) for name, data in inputs.items() if name.endswith("-raw")} == seeds
    structured = [frame_for(data) for name, data in inputs.items() if name.endswith("-fields")]
    assert all(struct.unpack_from(">h", f)[0] in APIS for f in structured)
    assert frame_for(inputs["Metadata-v12-fields"]) == frame_for(inputs["Metadata-v12-fields"])  # deterministic


def test_keep_going_saves_each_distinct_failure_once(tmp_path, monkeypatch) -> None:
    from kafkalog.testing.protocol_fuzz import atheris_entry

    async def broken(server, header, request):
        raise TypeError("a handler bug")

    one_input = atheris_entry(keep_going=tmp_path)
    monkeypatch.setitem(apis.HANDLERS, 60, broken)
    frame = encode_frame(APIS[60], 1, valid_request(APIS[60], 1))
    one_input(b"\0" + frame)
    one_input(b"\0" + encode_frame(APIS[60], 1, valid_request(APIS[60], 1), 99))  # the same failure: not saved
    saved = sorted(p.name for p in tmp_path.iterdir())
    assert len(saved) == 2 and saved[1] == saved[0] + ".txt"
    assert "TypeError: a handler bug" in (tmp_path / saved[1]).read_text()
    assert (tmp_path / saved[0]).read_bytes() == b"\0" + frame
    one_input.fuzzer.__exit__(None, None, None)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("producer_byte_rate", float("nan"), "quotas must be positive"),
        ("consumer_byte_rate", float("inf"), "quotas must be positive"),
        ("producer_byte_rate", 1.5, "Configuration producer_byte_rate must be a Long value"),
    ],
)
def test_alter_client_quotas_refuses_values_the_throttle_cannot_use(broker, key, value, message) -> None:
    """The fuzzer set producer_byte_rate = NaN for the default client: every later Produce failed with
    ValueError (NaN to int) in the throttle. Kafka refuses a byte rate that is not a whole number (LONG)."""
    request = valid_request(APIS[49], 1)
    entry = request.entries[0]
    entry.entity[0].entity_name = None  # the default client id: the quota every client gets
    entry.ops[0].key, entry.ops[0].value = key, value
    response = decode_response(49, 1, _answer(broker, encode_frame(APIS[49], 1, request, 19)))
    assert [(e.error_code, message in e.error_message) for e in response.entries] == [(42, True)]
    produce = seed_requests()[[k for k, _, _ in seed_requests()].index(0)][2]  # a valid Produce v3
    assert broker.check(produce) == "answered"


def test_consumer_group_describe_reads_no_log(broker, monkeypatch) -> None:
    """The fuzzer found ConsumerGroupDescribe of ten copies of a group assigned a topic of thousands of partitions
    holding the event loop 20 s: each topic id was looked up through describe_topic, which sizes every partition's
    log (fixed on main meanwhile by LogManager.topic_id_and_partitions; this keeps it so)."""
    join = valid_request(APIS[68], 0)
    join.group_id, join.member_id = "fuzz-kip848", "fuzz-member-1"
    joined = decode_response(68, 0, _answer(broker, encode_frame(APIS[68], 0, join, 20)))
    assert joined.error_code == 0

    def sizing(name):
        raise AssertionError(f"describe_topic({name!r}) sizes every log of the topic")

    monkeypatch.setattr(broker._server.log_manager, "describe_topic", sizing)
    describe = valid_request(APIS[69], 0)
    describe.group_ids = ["fuzz-kip848"] * 10
    described = decode_response(69, 0, _answer(broker, encode_frame(APIS[69], 0, describe, 21)))
    members = [m for g in described.groups for m in g.members]
    assert len(members) == 10 and all(m.member_id == "fuzz-member-1" for m in members)
    assert {t.topic_name for m in members for t in m.target_assignment.topic_partitions} == {"fuzz"}
