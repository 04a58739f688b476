"""Fuzzing the broker's request path: header parser, schema decoders, router and handlers, in process.

Thousands of frames -- random bodies under every API key and version, and valid Produce, Fetch, Metadata,
ListOffsets and CreateTopics frames with bytes flipped, cut or inserted -- go through the router of a real
KafkaServer on a temporary log dir. Each must end in a response that encodes, no response (acks=0), a close
of its connection (InvalidRequestError / CLOSE) or a long poll still waiting; any other exception is a bug.
Hypothesis runs derandomized, so the cases are the same on every run.
"""

from __future__ import annotations

import asyncio
import struct
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.protocol.admin import CreateTopicsRequest
from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.producer import ProduceRequest

from brokertools import encode_request, frame
from kafkalog.broker.apis import RequestRouter
from kafkalog.broker.config import KafkaConfig
from kafkalog.broker.network import CLOSE, Connection
from kafkalog.broker.protocol import APIS, FileRegion, InvalidRequestError
from kafkalog.broker.server import KafkaServer
from kafkalog.record import RecordBatchBuilder

# A real Connection on a plaintext listener (the router reads its principal, SASL state and addresses); the
# socket ends are never touched by the router, so a writer that knows no addresses stands in for them.
CONN = Connection(SimpleNamespace(get_extra_info=lambda name: None), 0)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    loop = asyncio.new_event_loop()
    config = KafkaConfig(
        {
            "listeners": "PLAINTEXT://127.0.0.1:0",
            "log.dirs": str(tmp_path_factory.mktemp("broker-fuzz")),
            "auto.create.topics.enable": "false",
        }
    )
    server = KafkaServer(config)
    loop.run_until_complete(server.startup())
    server.log_manager.create_topic("fuzz", 2)
    router = RequestRouter(server)
    yield loop, router, server
    loop.run_until_complete(server.shutdown())
    loop.close()


def serve(env, data: bytes) -> str:
    """Run one frame (without its size prefix) through the router; return how it ended."""
    loop, router, _ = env
    try:
        result = loop.run_until_complete(asyncio.wait_for(router(CONN, memoryview(data)), 0.5))
    except InvalidRequestError:
        return "closed"
    except TimeoutError:
        return "waiting"  # a well-formed long poll
    if result is None:
        return "no-response"
    if result is CLOSE:
        return "closed"
    header, response = result
    try:
        size = len(header)
        for part in response.parts:
            size += len(part.read()) if isinstance(part, FileRegion) else len(part)
        assert size == len(header) + response.size
    finally:
        response.close()
    return "answered"


def _batch(values) -> bytes:
    builder = RecordBatchBuilder("gzip")
    for v in values:
        builder.append(b"k", v)
    return builder.build()


def _valid_frames() -> list[bytes]:
    P = ProduceRequest.TopicProduceData
    produce = ProduceRequest(
        transactional_id=None,
        acks=1,
        timeout_ms=100,
        topic_data=[P(name="fuzz", partition_data=[P.PartitionProduceData(index=0, records=_batch([b"a", b"bb"]))])],
    )
    T = FetchRequest.FetchTopic
    fetch = FetchRequest(
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=0,
        max_bytes=1 << 20,
        isolation_level=1,
        session_id=0,
        session_epoch=-1,
        forgotten_topics_data=[],
        rack_id="",
        topics=[
            T(
                topic="fuzz",
                partitions=[
                    T.FetchPartition(
                        partition=0,
                        current_leader_epoch=-1,
                        fetch_offset=0,
                        last_fetched_epoch=-1,
                        log_start_offset=-1,
                        partition_max_bytes=1000,
                    )
                ],
            )
        ],
    )
    L = ListOffsetsRequest.ListOffsetsTopic
    offsets = ListOffsetsRequest(
        replica_id=-1,
        isolation_level=0,
        topics=[
            L(
                name="fuzz",
                partitions=[L.ListOffsetsPartition(partition_index=1, current_leader_epoch=-1, timestamp=-1)],
            )
        ],
    )
    metadata = MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(name="fuzz")], allow_auto_topic_creation=False
    )
    C = CreateTopicsRequest.CreatableTopic
    create = CreateTopicsRequest(
        topics=[C(name="made", num_partitions=1, replication_factor=1, assignments=[], configs=[])],
        timeout_ms=100,
        validate_only=True,
    )
    frames = []
    for message, versions in (
        (produce, (3, 8, 9, 11)),
        (fetch, (4, 7, 11, 12)),
        (offsets, (1, 5, 7)),
        (metadata, (0, 4, 9, 12)),
        (create, (2, 5, 7)),
    ):
        for v in versions:
            frames.append(encode_request(message, v)[4:])
    return frames


VALID = _valid_frames()


def test_every_valid_seed_frame_is_answered(env):
    assert [serve(env, f) for f in VALID] == ["answered"] * len(VALID)


@settings(max_examples=2500, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(
    api_key=st.sampled_from([*sorted(APIS), -1, 7, 99, 32767]),
    version=st.integers(-2, 20),
    body=st.binary(max_size=120),
)
def test_random_bodies_never_break_the_router(env, api_key, version, body):
    assert serve(env, frame(api_key, version, body)[4:]) in {"answered", "no-response", "closed", "waiting"}


@settings(max_examples=3000, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.sampled_from(VALID),
    edits=st.lists(
        st.tuples(st.sampled_from(["flip", "cut", "insert", "int32"]), st.integers(0, 400), st.integers(0, 255)),
        min_size=1,
        max_size=4,
    ),
)
def test_mutated_valid_frames_never_break_the_router(env, seed, edits):
    data = bytearray(seed)
    for kind, position, value in edits:
        at = position % (len(data) + 1)
        if kind == "flip" and at < len(data):
            data[at] ^= value or 1
        elif kind == "cut":
            del data[at:]
        elif kind == "insert":
            data[at:at] = bytes([value])
        elif kind == "int32" and at + 4 <= len(data):
            data[at : at + 4] = struct.pack(">i", [-1, 0, 0x7FFFFFFF, -(1 << 31), value][value % 5])
    assert serve(env, bytes(data)) in {"answered", "no-response", "closed", "waiting"}
