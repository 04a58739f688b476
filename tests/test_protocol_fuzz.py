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
    outcomes = {(key, version): broker.check(frame) for key, version, frame in seeds}
    # JoinGroup v0-v3 admit a member with an empty member id at once, so the next version's seed joins a group
    # with a member that must rejoin first: that join parks until the first member's rebalance timeout.
    waiting = {k for k, outcome in outcomes.items() if outcome == "parked"}
    assert waiting <= {(11, v) for v in range(4)}
    assert all(outcome == "answered" for k, outcome in outcomes.items() if k not in waiting)


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
