"""Metadata answers joined from cached topic entries (broker/handlers/metadata_encoding.py) are byte for byte what
kafka-python's generic encoder writes for the same MetadataResponse, at every version the broker serves; and the
handler's cached entries follow every change of a topic (in-process broker, real LogManager)."""

from __future__ import annotations

import asyncio
import dataclasses
import random
import types
import uuid

import pytest

from kafkalog.broker.handlers import metadata as handler
from kafkalog.broker.handlers.metadata_encoding import (
    TopicEntries,
    encode_response,
    encode_topic,
    flexible,
    with_operations,
)
from kafkalog.broker.protocol import APIS, MetadataResponse
from kafkalog.testing import MockTime
from tests.metadatatools import by_id, local_broker

SPEC = APIS[3]
VERSIONS = list(range(SPEC.min_version, SPEC.max_version + 1))
Broker = MetadataResponse.MetadataResponseBroker
Topic = MetadataResponse.MetadataResponseTopic
Partition = Topic.MetadataResponsePartition


def _partition(rng: random.Random, index: int) -> Partition:
    replicas = rng.sample(range(5), rng.randint(0, 3))
    return Partition(
        error_code=rng.choice((0, 0, 5, 9)),
        partition_index=index,
        leader_id=replicas[0] if replicas else -1,
        leader_epoch=rng.randint(-1, 1 << 20),
        replica_nodes=replicas,
        isr_nodes=replicas[: rng.randint(0, len(replicas))],
        offline_replicas=replicas[len(replicas) // 2 :] if rng.random() < 0.3 else [],
    )


def _topic(rng: random.Random, i: int, version: int, operations: bool) -> Topic:
    error = rng.choice((0, 0, 0, 3, 29, 100))
    name: str | None = rng.choice((f"topic-{i}", f"tøpic-ü-{i}", "t" * 249))
    if error == 100 and version >= 12:
        name = None  # an unknown topic asked by id: nullable name from v12
    return Topic(
        error_code=error,
        name=name,
        topic_id=uuid.UUID(int=rng.getrandbits(128)) if rng.random() < 0.7 else uuid.UUID(int=0),
        is_internal=rng.random() < 0.1,
        partitions=[_partition(rng, p) for p in range(rng.choice((0, 1, 3, 40)))],
        authorized_operations=set(rng.sample(range(3, 12), rng.randint(0, 5))) if operations else None,
    )


def _response(rng: random.Random, version: int, topics: list[Topic], cluster_ops: bool) -> MetadataResponse:
    brokers = [
        Broker(node_id=n, host=rng.choice(("localhost", "broker-ä.example", "10.0.0.1")), port=9092 + n, rack=rack)
        for n, rack in zip(range(rng.randint(1, 3)), (None, "rack-a", None), strict=False)
    ]
    return MetadataResponse(
        version=version,
        throttle_time_ms=rng.choice((0, 1500)),
        brokers=brokers,
        cluster_id=rng.choice((None, "cluster-id-ABC")) if version >= 2 else None,
        controller_id=rng.choice((-1, 0, 2)),
        topics=topics,
        authorized_operations={4, 7, 9} if cluster_ops else None,
    )


def _fast(response: MetadataResponse, version: int) -> bytes:
    """The joined answer: cached-style entries (encoded one by one) around the response's own head and tail."""
    entries = [encode_topic(t, version) for t in response.topics]
    return encode_response(response, version, entries)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(
    "shape",
    ["no topics", "one topic", "many topics", "200 topics (two-byte array length)", "operations", "errors"],
)
def test_joined_answer_is_the_generic_encoders_bytes(version, shape):
    rng = random.Random(f"{version}-{shape}")
    count = {"no topics": 0, "one topic": 1, "200 topics (two-byte array length)": 200}.get(shape, 25)
    operations = shape == "operations"
    topics = [_topic(rng, i, version, operations) for i in range(count)]
    if shape == "errors":
        for t in topics:
            t.error_code, t.partitions = 3, []
    response = _response(rng, version, topics, cluster_ops=operations)
    generic = bytes(response.encode(version=version))
    fast = _fast(response, version)  # (leaves the response with no topics)
    assert fast == generic
    # and a client reads it back as what was meant
    decoded = MetadataResponse.decode(fast, version=version)
    assert [t.name for t in decoded.topics] == [t.name for t in topics]
    assert [len(t.partitions) for t in decoded.topics] == [len(t.partitions) for t in topics]


@pytest.mark.parametrize("version", [v for v in VERSIONS if v >= 8])
def test_authorized_operations_spliced_into_a_cached_entry(version):
    rng = random.Random(version)
    for i in range(20):
        topic = _topic(rng, i, version, operations=False)
        plain = encode_topic(topic, version)
        for ops in (None, set(), {3}, {3, 4, 5, 6, 7, 8, 10, 11}, {31}):
            topic.authorized_operations = ops
            assert with_operations(plain, ops, version) == encode_topic(topic, version)
        topic.authorized_operations = None


def test_compact_versions_are_the_flexible_ones():
    assert [flexible(v) for v in VERSIONS] == [v >= 9 for v in VERSIONS]
    assert SPEC.flexible_from == 9


def test_topic_entries_reencode_only_on_a_state_change():
    entries = TopicEntries()
    built = []

    def build(epoch):
        def make():
            built.append(epoch)
            return Topic(
                error_code=0,
                name="t",
                topic_id=uuid.UUID(int=1),
                is_internal=False,
                partitions=[Partition(0, 0, 0, epoch, [0], [0], [])],
            )

        return make

    first = entries.entry("t", ("s", 1), build(1), 12)
    assert entries.entry("t", ("s", 1), build(1), 12) is first
    assert entries.entry("t", ("s", 1), build(1), 7) != first  # another version: another encoding, same Topic
    assert built == [1]
    changed = entries.entry("t", ("s", 2), build(2), 12)
    assert built == [1, 2] and changed != first
    assert (
        MetadataResponse.decode(encode_response(_response(random.Random(0), 12, [], False), 12, [changed]), version=12)
        .topics[0]
        .partitions[0]
        .leader_epoch
        == 2
    )
    entries.retain(lambda name: name != "t")
    assert len(entries) == 0


# ----- the handler, on an in-process LogManager --------------------------------------------------------------


def _ask(broker, version: int, names: list[str] | None = None, operations: bool = False) -> MetadataResponse:
    """The broker's Metadata answer at ``version`` (all topics, or ``names``; with the authorized operations if
    ``operations``), decoded as a client reads it."""
    from kafka.protocol.metadata import MetadataRequest

    topics = None if names is None else [MetadataRequest.MetadataRequestTopic(name=n) for n in names]
    request = MetadataRequest(
        topics=topics,
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=operations,
        include_cluster_authorized_operations=operations,
    )
    response = asyncio.run(handler.handle(broker, types.SimpleNamespace(api_version=version), request))
    (body,) = response.parts
    return MetadataResponse.decode(bytes(body), version=version)


def _shape(answer: MetadataResponse) -> dict:
    return {
        t.name: [
            (p.partition_index, p.error_code, p.leader_id, p.leader_epoch, list(p.offline_replicas))
            for p in t.partitions
        ]
        for t in answer.topics
    }


def _generic(broker, version: int) -> bytes:
    """What the handler answered before entries were cached: the generic encoder over describe()'s Topics."""
    return bytes(
        MetadataResponse(
            version=version,
            throttle_time_ms=0,
            brokers=[Broker(node_id=0, host="localhost", port=9092, rack=None)],
            cluster_id="cid",
            controller_id=0,
            topics=[handler.describe(broker, n) for n in broker.log_manager.topics()],
        ).encode(version=version)
    )


def test_handler_answers_follow_every_change_of_a_topic(tmp_path):
    from kafkalog.manager import LogManager, TopicPartition

    with LogManager(tmp_path / "logs", clock=MockTime()) as manager:
        broker = local_broker(manager)
        manager.create_topic("a", 3)
        manager.create_topic("b", 2)
        for version in VERSIONS:  # cached and joined == the generic encoder's answer, at every version
            answer = asyncio.run(handler.handle(broker, types.SimpleNamespace(api_version=version), _all()))
            assert bytes(answer.parts[0]) == _generic(broker, version)
        assert sorted(_shape(_ask(broker, 12))) == ["a", "b"]
        # partitions added
        manager.create_partitions("a", 5)
        assert [p[0] for p in _shape(_ask(broker, 12))["a"]] == [0, 1, 2, 3, 4]
        # a new leader epoch
        broker.replica_manager.partition(TopicPartition("a", 1)).make_leader(7)
        assert _shape(_ask(broker, 12))["a"][1][3] == 7
        assert _shape(_ask(broker, 6))["a"][1][3] == -1  # v6 has no epoch: default on decode
        assert _shape(_ask(broker, 7, ["a"]))["a"][1][3] == 7
        # deleted, then made again under the same name (a new topic id)
        old_id = _ask(broker, 12).topics[0].topic_id
        manager.delete_topic("a")
        assert sorted(_shape(_ask(broker, 12))) == ["b"]
        assert _ask(broker, 12, ["a"]).topics[0].error_code == 3
        manager.create_topic("a", 1)
        again = {t.name: t for t in _ask(broker, 12).topics}
        assert again["a"].topic_id != old_id and len(again["a"].partitions) == 1
        # an offline log dir: its partitions have no leader
        manager.handle_log_dir_failure(manager.log_dirs[0], OSError(5, "Input/output error"))
        offline = _shape(_ask(broker, 12))
        assert all(p[1] == 5 and p[2] == -1 and p[4] == [0] for parts in offline.values() for p in parts)
        for version in VERSIONS:
            answer = asyncio.run(handler.handle(broker, types.SimpleNamespace(api_version=version), _all()))
            assert bytes(answer.parts[0]) == _generic(broker, version)


def _all():
    from kafka.protocol.metadata import MetadataRequest

    return MetadataRequest(topics=None, allow_auto_topic_creation=False)


def test_cached_entries_do_not_carry_the_listener_or_the_principal(tmp_path):
    """The broker list is the request's listener's (its advertised host), and a topic the principal may not
    DESCRIBE is left out of an all-topics answer, whatever another request cached before."""
    from kafkalog.manager import LogManager

    class Authorizer:
        """admin may do anything; alice only READ and DESCRIBE topic "public"."""

        def authorize(self, principal, host, operation, resource_type, name, log_denied):
            if principal == "User:admin":
                return True
            return resource_type == "TOPIC" and name == "public" and operation in ("READ", "DESCRIBE")

    with LogManager(tmp_path / "logs", clock=MockTime()) as manager:
        broker = local_broker(manager)
        broker.authorizer = Authorizer()
        manager.create_topic("public", 2)
        manager.create_topic("secret", 2)
        from kafkalog.broker.security.context import CURRENT

        def ask_as(principal: str, host: str, version: int = 12, operations: bool = False, names=None):
            broker.advertised_endpoint = lambda: (host, 9092)
            token = CURRENT.set(dataclasses.replace(CURRENT.get(), principal=principal))
            try:
                return _ask(broker, version, names, operations)
            finally:
                CURRENT.reset(token)

        admin = ask_as("User:admin", "internal.example")
        assert sorted(t.name for t in admin.topics) == ["public", "secret"]
        assert [b.host for b in admin.brokers] == ["internal.example"]
        user = ask_as("User:alice", "external.example")
        assert [t.name for t in user.topics] == ["public"]
        assert [b.host for b in user.brokers] == ["external.example"]

        # authorized operations (v8+), asked for: the principal's own, on each topic it may describe
        every_topic_op = {3, 4, 5, 6, 7, 8, 10, 11}  # READ WRITE CREATE DELETE ALTER DESCRIBE (DESCRIBE|ALTER)_CONFIGS
        for version in (8, 9, 10, 11, 12):
            admin = ask_as("User:admin", "h", version, operations=True)
            assert {t.name: t.authorized_operations for t in admin.topics} == {
                "public": every_topic_op,
                "secret": every_topic_op,
            }
            alice = ask_as("User:alice", "h", version, operations=True)
            assert {t.name: t.authorized_operations for t in alice.topics} == {"public": {3, 8}}
            named = ask_as("User:alice", "h", version, operations=True, names=["public", "secret", "nope"])
            # refused: no operations; unknown but describable would get them (alice may not describe "nope")
            assert [(t.name, t.error_code, t.authorized_operations) for t in named.topics] == [
                ("public", 0, {3, 8}),
                ("secret", 29, None),
                ("nope", 29, None),
            ]
            if version <= 10:  # the cluster's, v8-10 (none without DESCRIBE on the cluster)
                assert admin.authorized_operations == {5, 7, 8, 9, 10, 11, 12}
                assert alice.authorized_operations == set()
            # not asked for: Kafka's "omitted" value, whatever was cached or asked before
            plain = ask_as("User:admin", "h", version)
            assert {t.authorized_operations for t in plain.topics} == {None}
            assert plain.authorized_operations is None


def test_unchanged_topics_are_answered_without_reading_their_partitions(tmp_path, monkeypatch):
    """While no change is noted (storage/metadata_changes.py), an all-topics answer reuses every entry without
    reading a partition; a change noted by any of the places that make one is seen by the next answer."""
    from kafkalog.manager import LogManager, TopicPartition

    with LogManager(tmp_path / "logs", clock=MockTime()) as manager:
        broker = local_broker(manager)
        manager.create_topic("a", 4)
        manager.create_topic("b", 4)
        first = _ask(broker, 12)
        reads: list[str] = []
        original = handler._local_state

        def counting(broker_, name):
            reads.append(name)
            return original(broker_, name)

        monkeypatch.setattr(handler, "_local_state", counting)
        assert _shape(_ask(broker, 12)) == _shape(first) and reads == []
        assert _ask(broker, 11, ["a", "b"]).topics[1].name == "b" and reads == []
        partition = broker.replica_manager.partition(TopicPartition("b", 2))
        partition.make_leader(3)  # the leader epoch: noted by the partition
        assert _shape(_ask(broker, 12))["b"][2][3] == 3
        assert sorted(reads) == ["a", "b"]  # every topic's state compared once; only b's entry encoded anew
        reads.clear()
        partition.update_isr({0})  # the ISR: noted too
        _ask(broker, 12)
        assert sorted(reads) == ["a", "b"]
        reads.clear()
        partition.log.mark_offline("test")  # an offline log: noted by the log
        assert _shape(_ask(broker, 12))["b"][2][1:3] == (5, -1)
        assert sorted(reads) == ["a", "b"]


def test_authorized_operations_without_an_authorizer_are_every_supported_one(tmp_path):
    from kafkalog.manager import LogManager

    with LogManager(tmp_path / "logs", clock=MockTime()) as manager:
        broker = local_broker(manager)
        manager.create_topic("t", 1)
        answer = _ask(broker, 10, None, True)
        assert answer.topics[0].authorized_operations == {3, 4, 5, 6, 7, 8, 10, 11}
        assert answer.authorized_operations == {5, 7, 8, 9, 10, 11, 12}


def test_topics_asked_by_id_follow_creations_and_deletions(tmp_path):

    from kafkalog.manager import LogManager

    with LogManager(tmp_path / "logs", clock=MockTime()) as manager:
        broker = local_broker(manager)
        manager.create_topic("x", 2)
        manager.create_topic("y", 3)
        ids = {t.name: t.topic_id for t in _ask(broker, 12).topics}
        unknown = uuid.UUID(int=12345)
        assert by_id(broker, ids["y"], unknown, ids["x"]) == [(0, "y", 3), (100, None, 0), (0, "x", 2)]
        manager.delete_topic("x")
        manager.create_topic("x", 1)
        new_x = {t.name: t.topic_id for t in _ask(broker, 12).topics}["x"]
        assert new_x != ids["x"]
        assert by_id(broker, ids["x"], new_x) == [(100, None, 0), (0, "x", 1)]
