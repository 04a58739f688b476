"""Consumer groups on ``kafkalog serve``: real group consumers (librdkafka in separate processes, kafka-python,
aiokafka), a broker restart, the records the coordinator wrote as ``kafkalog dump --offsets-decoder`` prints
them, and Kafka's error codes for bad requests on a raw connection.

The broker runs with small group timeouts (group.initial.rebalance.delay.ms=0, group.min.session.timeout.ms
lowered so members may use 3 s sessions; KIP-848's group.consumer.session.timeout.ms 3 s) and a 5-partition
offsets topic, so the tests stay fast.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from kafka.protocol.admin import DeleteGroupsRequest, DescribeGroupsRequest, ListGroupsRequest
from kafka.protocol.consumer import (
    HeartbeatRequest,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)
from kafka.protocol.metadata import FindCoordinatorRequest

from brokertools import REPO, BrokerProcess, RawClient, encode_request, knows_its_topic, wait_until
from conftest import fixture_path

GROUP_OVERRIDES = {
    "num.partitions": "1",
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "500",
    "offsets.topic.num.partitions": "5",
    "group.consumer.session.timeout.ms": "3000",
    "group.consumer.heartbeat.interval.ms": "300",
}
TESTS = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    server = BrokerProcess(tmp_path_factory.mktemp("broker-groups"), GROUP_OVERRIDES).start()
    yield server
    assert server.stop() == 0, server.log


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)


def produce(bootstrap: str, topic: str, partitions: int, start: int, count: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(start, start + count):
        producer.produce(topic, value=str(i).encode(), partition=i % partitions)
    assert producer.flush(30) == 0


def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "end-offsets-probe"})
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
    finally:
        consumer.close()


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """Committed offsets read back with librdkafka's OffsetFetch (an independent client)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=15)
        return {tp.partition: tp.offset for tp in found}
    finally:
        consumer.close()


class Member:
    """group_member.py in its own process; ``events`` reads what it has written so far."""

    def __init__(self, tmp: Path, name: str, bootstrap: str, group: str, topic: str, assignor: str) -> None:
        self.name = name
        self.path = tmp / f"{name}.jsonl"
        env = dict(os.environ)
        env["PYTHONPATH"] = str(REPO / "src") + os.pathsep + env.get("PYTHONPATH", "")
        self.proc = subprocess.Popen(
            [sys.executable, str(TESTS / "group_member.py"), bootstrap, group, topic, str(self.path), assignor],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.killed_at: float | None = None

    def events(self) -> list[dict]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines() if line.strip()]

    def owned(self) -> set[int]:
        """The partitions it holds now, from its assign/revoke events."""
        owned: set[int] = set()
        for e in self.events():
            if e["event"] == "assign":
                owned |= set(e["partitions"])
            elif e["event"] == "revoke":
                owned -= set(e["partitions"])
        return owned

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(30)

    def kill(self) -> None:
        self.killed_at = time.time()
        self.proc.kill()
        self.proc.wait(30)

    def cleanup(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)

    def intervals(self) -> dict[int, list[tuple[float, float]]]:
        """Per partition, the times it held it: (assigned at, revoked at / killed at / still held)."""
        held: dict[int, float] = {}
        out: dict[int, list[tuple[float, float]]] = {}
        for e in self.events():
            if e["event"] == "assign":
                for p in e["partitions"]:
                    held.setdefault(p, e["t"])
            elif e["event"] == "revoke":
                for p in e["partitions"]:
                    if p in held:
                        out.setdefault(p, []).append((held.pop(p), e["t"]))
        end = self.killed_at if self.killed_at is not None else float("inf")
        for p, start in held.items():
            out.setdefault(p, []).append((start, end))
        return out


def consumed(members: list[Member]) -> dict[tuple[int, int], list[str]]:
    seen: dict[tuple[int, int], list[str]] = {}
    for m in members:
        for e in m.events():
            if e["event"] == "msg":
                seen.setdefault((e["partition"], e["offset"]), []).append(m.name)
    return seen


@pytest.mark.parametrize("assignor", ["range", "cooperative-sticky", "consumer"])
def test_librdkafka_members_share_a_topic_through_leave_join_and_kill(broker, tmp_path, assignor):
    """Classic groups with librdkafka's range and cooperative-sticky assignors, and KIP-848's consumer protocol
    (group.protocol=consumer: the broker's uniform assignor, incremental reconciliation)."""
    topic, group, partitions = f"shared-{assignor}", f"group-{assignor}", 6
    create_topic(broker.bootstrap, topic, partitions)
    produce(broker.bootstrap, topic, partitions, 0, 300)
    members = {n: Member(tmp_path, n, broker.bootstrap, group, topic, assignor) for n in ("a", "b", "c")}
    try:
        assert wait_until(lambda: all(m.owned() for m in members.values()), 60), "three members never all got work"
        # Each partition owned by exactly one member once the rebalance settles: with cooperative-sticky the first
        # member can still hold partitions it is about to give up when the others get their first ones.
        settled = lambda: sorted(p for m in members.values() for p in m.owned()) == list(range(partitions))  # noqa: E731
        assert wait_until(settled, 60), [sorted(m.owned()) for m in members.values()]
        assert wait_until(lambda: len(consumed(list(members.values()))) >= 300, 60)
        midway = committed(broker.bootstrap, group, topic, partitions)
        assert sum(midway.values()) == 300  # every record consumed so far is committed

        members["a"].stop()  # leaves the group (LeaveGroup)
        members["d"] = Member(tmp_path, "d", broker.bootstrap, group, topic, assignor)  # joins
        assert wait_until(lambda: bool(members["d"].owned()), 60), "the new member never got a partition"
        members["c"].kill()  # no LeaveGroup: the coordinator notices after its session timeout
        produce(broker.bootstrap, topic, partitions, 300, 300)
        alive = [members["b"], members["d"]]
        assert wait_until(lambda: sorted(p for m in alive for p in m.owned()) == list(range(partitions)), 60)
        assert wait_until(lambda: len(consumed(list(members.values()))) >= 600, 60)
    finally:
        for m in members.values():
            m.cleanup()

    seen = consumed(list(members.values()))
    ends = end_offsets(broker.bootstrap, topic, partitions)
    assert sum(ends.values()) == 600
    assert set(seen) == {(p, o) for p in range(partitions) for o in range(ends[p])}  # every record, once or more
    # Each partition was held by one member at a time.
    for p in range(partitions):
        spans = sorted(span for m in members.values() for span in m.intervals().get(p, []))
        for (_, end), (start, _) in itertools.pairwise(spans):
            assert start >= end, f"partition {p} held by two members at once: {spans}"
    final = committed(broker.bootstrap, group, topic, partitions)
    assert final == ends  # the committed offsets moved to the end of every partition
    assert any(final[p] > midway[p] for p in range(partitions))
    with RawClient(broker.bootstrap) as client:
        listed = client.call(ListGroupsRequest(version=5, states_filter=[], types_filter=[]), 5)
    (kind,) = [g.group_type for g in listed.groups if g.group_id == group]
    assert kind == ("consumer" if assignor == "consumer" else "classic")  # the protocol the members really used


def test_kafka_python_group_consumers_split_partitions_and_commit(broker):
    from kafka import KafkaConsumer
    from kafka.errors import KafkaError

    topic, group, partitions = "kp-shared", "kp-group", 4
    create_topic(broker.bootstrap, topic, partitions)
    produce(broker.bootstrap, topic, partitions, 0, 200)

    def consumer() -> KafkaConsumer:
        c = KafkaConsumer(
            topic,
            bootstrap_servers=broker.bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=10000,  # nobody is killed here: no need for a short session on a loaded machine
            heartbeat_interval_ms=500,
        )
        # The topic known before the first poll (see knows_its_topic: the flake this test had). This also checks
        # the broker's answer right after CreateTopics and a produce: every partition.
        assert knows_its_topic(c, topic) == set(range(partitions))
        return c

    got: dict[tuple[int, int], int] = {}
    owners: list[set[int]] = [set(), set()]
    stop = threading.Event()

    def run(i: int) -> None:  # one consumer per thread: a kafka-python poll blocks while its group rebalances
        c = consumer()
        try:
            while not stop.is_set():
                for records in c.poll(timeout_ms=200).values():
                    for r in records:
                        got[(r.partition, r.offset)] = i
                with contextlib.suppress(KafkaError):  # e.g. a rebalance started: the next poll rejoins
                    c.commit()
                owners[i] = {tp.partition for tp in c.assignment()}
        finally:
            c.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    try:
        ends = end_offsets(broker.bootstrap, topic, partitions)
        wait_until(
            lambda: (
                len(got) == 200
                and all(owners)
                and len(owners[0] | owners[1]) == partitions
                and committed(broker.bootstrap, group, topic, partitions) == ends
            ),  # commits may fail in a rebalance
            60,
        )
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert len(got) == 200
    assert owners[0] and owners[1] and not owners[0] & owners[1] and owners[0] | owners[1] == set(range(partitions))
    assert committed(broker.bootstrap, group, topic, partitions) == end_offsets(broker.bootstrap, topic, partitions)


def test_aiokafka_group_consumers_split_partitions_and_commit(broker):
    from aiokafka import AIOKafkaConsumer
    from aiokafka.errors import KafkaError as AioKafkaError

    topic, group, partitions = "aio-shared", "aio-group", 4
    create_topic(broker.bootstrap, topic, partitions)
    produce(broker.bootstrap, topic, partitions, 0, 200)

    ends = end_offsets(broker.bootstrap, topic, partitions)

    async def run() -> tuple[dict, list[set[int]]]:
        consumers = [
            AIOKafkaConsumer(
                topic,
                bootstrap_servers=broker.bootstrap,
                group_id=group,
                auto_offset_reset="earliest",
                enable_auto_commit=False,
                session_timeout_ms=10000,
                heartbeat_interval_ms=500,
            )
            for _ in range(2)
        ]
        for c in consumers:
            await c.start()
        got: dict[tuple[int, int], int] = {}
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                for i, c in enumerate(consumers):
                    batches = await c.getmany(timeout_ms=200)
                    for records in batches.values():
                        for r in records:
                            got[(r.partition, r.offset)] = i
                    if batches:
                        with contextlib.suppress(AioKafkaError):  # e.g. a rebalance started: getmany rejoins
                            await c.commit()
                owners = [{tp.partition for tp in c.assignment()} for c in consumers]
                if len(got) == 200 and all(owners) and committed(broker.bootstrap, group, topic, partitions) == ends:
                    break
            return got, owners
        finally:
            for c in consumers:
                await c.stop()

    got, owners = asyncio.run(run())
    assert len(got) == 200
    assert owners[0] and owners[1] and not owners[0] & owners[1] and owners[0] | owners[1] == set(range(partitions))
    assert committed(broker.bootstrap, group, topic, partitions) == end_offsets(broker.bootstrap, topic, partitions)


# ----- restart ----------------------------------------------------------------------------------------------------
def describe_group(bootstrap: str, group: str):
    with RawClient(bootstrap) as client:
        return client.call(DescribeGroupsRequest(version=5, groups=[group], include_authorized_operations=False), 5)


def describe_consumer_group(bootstrap: str, group: str):
    from kafkalog.broker.messages import ConsumerGroupDescribeRequest

    with RawClient(bootstrap) as client:
        request = ConsumerGroupDescribeRequest(group_ids=[group], include_authorized_operations=False)
        (described,) = client.call(request, 0).groups
    assert described.error_code == 0, described.error_message
    return described


@pytest.mark.parametrize("protocol", ["range", "consumer"])
def test_a_broker_restart_keeps_committed_offsets_and_group_state(tmp_path, protocol):
    """A running member across a broker restart. Classic: the group comes back Stable from __consumer_offsets
    with the same member. KIP-848: the group comes back from its ConsumerGroup* records with the same member id
    and epoch (ConsumerGroupDescribe), the member heartbeating on without rejoining. Both: the committed offsets
    come back and consumption resumes from them."""
    topic, group, partitions = "restart-topic", "restart-group", 3
    server = BrokerProcess(tmp_path / "logs", GROUP_OVERRIDES).start()
    member = None
    try:
        create_topic(server.bootstrap, topic, partitions)
        produce(server.bootstrap, topic, partitions, 0, 90)
        member = Member(tmp_path, "m", server.bootstrap, group, topic, protocol)
        assert wait_until(lambda: len(consumed([member])) >= 90, 60)
        assert wait_until(
            lambda: committed(server.bootstrap, group, topic, partitions) == {p: 30 for p in range(3)}, 30
        )
        before = describe_group(server.bootstrap, group).groups[0]
        assert before.group_state == ("Stable" if protocol == "range" else "Dead")  # DescribeGroups: classic only
        if protocol == "consumer":
            before_848 = describe_consumer_group(server.bootstrap, group)
            assert before_848.group_state == "Stable" and len(before_848.members) == 1
        port = server.port
        assert server.stop() == 0, server.log
        # Same port, so the running member finds its coordinator again.
        server = BrokerProcess(
            tmp_path / "logs", {**GROUP_OVERRIDES, "listeners": f"PLAINTEXT://127.0.0.1:{port}"}
        ).start()
        if protocol == "range":
            after = describe_group(server.bootstrap, group).groups[0]
            assert after.group_state == "Stable"  # loaded from __consumer_offsets, with its member
            assert [m.member_id for m in after.members] == [m.member_id for m in before.members]
        else:
            after_848 = describe_consumer_group(server.bootstrap, group)
            assert after_848.group_epoch == before_848.group_epoch
            assert [(m.member_id, m.member_epoch) for m in after_848.members] == [
                (m.member_id, m.member_epoch) for m in before_848.members
            ]
        assert committed(server.bootstrap, group, topic, partitions) == {p: 30 for p in range(partitions)}
        produce(server.bootstrap, topic, partitions, 90, 30)
        assert wait_until(lambda: len(consumed([member])) >= 120, 60)
        offsets = sorted(k for k in consumed([member]))
        assert offsets == sorted((p, o) for p in range(partitions) for o in range(40))
    finally:
        if member is not None:
            member.cleanup()
        server.stop()


# ----- what the coordinator wrote, as kafkalog dump prints it -----------------------------------------------------
_LINE = re.compile(r"key: (\{.*\}) payload: (.*)$")


def test_dump_offsets_decoder_prints_what_the_coordinator_wrote(tmp_path):
    from kafka import KafkaConsumer

    from kafkalog.cli import main as cli
    from kafkalog.coordinator.group import partition_for

    server = BrokerProcess(tmp_path / "logs", GROUP_OVERRIDES).start()
    try:
        create_topic(server.bootstrap, "dumped", 1)
        produce(server.bootstrap, "dumped", 1, 0, 5)
        consumer = KafkaConsumer(
            "dumped",
            bootstrap_servers=server.bootstrap,
            group_id="dump-group",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            consumer_timeout_ms=5000,
        )
        knows_its_topic(consumer, "dumped")
        assert len(list(consumer)) == 5
        consumer.commit()
        consumer.close()
    finally:
        assert server.stop() == 0
    partition = partition_for("dump-group", 5)
    segment = tmp_path / "logs" / f"__consumer_offsets-{partition}" / "00000000000000000000.log"
    result = CliRunner().invoke(cli, ["dump", "--offsets-decoder", "--print-data-log", "--files", str(segment)])
    assert result.exit_code == 0, result.output
    records = [(json.loads(m.group(1)), m.group(2)) for line in result.output.splitlines() if (m := _LINE.search(line))]
    group_records = [json.loads(v) for k, v in records if k == {"type": "2", "data": {"group": "dump-group"}}]
    offset_records = [
        json.loads(v)
        for k, v in records
        if k == {"type": "1", "data": {"group": "dump-group", "topic": "dumped", "partition": 0}}
    ]
    assert offset_records and offset_records[-1]["version"] == "3"
    assert offset_records[-1]["data"]["offset"] == 5 and offset_records[-1]["data"]["metadata"] == ""
    # The last generation with the member (an earlier one may predate the client's metadata of the topic).
    stable = [g for g in group_records if g["data"]["members"]][-1]
    assert stable["version"] == "3" and stable["data"]["protocolType"] == "consumer"
    (member,) = stable["data"]["members"]
    assert member["subscription"]["topics"] == ["dumped"]  # the consumer protocol, decoded as Kafka's tool does
    assert member["assignment"]["assignedPartitions"] == [{"topic": "dumped", "partitions": [0]}]
    assert member["clientHost"] == "/127.0.0.1"
    emptied = group_records[-1]  # the member left: an empty generation, as the fixtures' Kafka brokers wrote
    assert emptied["data"]["members"] == [] and emptied["data"]["protocol"] is None
    assert emptied["data"]["generation"] == stable["data"]["generation"] + 1
    # The same shape as a real broker's record in the fixtures (same keys, in the same order).
    real_segment = fixture_path(
        "broker-logs", "itumelengmogase-cp77-kraft", "kafka-data", "__consumer_offsets-29", "00000000000000000000.log"
    )
    real = CliRunner().invoke(cli, ["dump", "--offsets-decoder", "--print-data-log", "--files", str(real_segment)])
    real_group = next(json.loads(m.group(2)) for line in real.output.splitlines() if (m := _LINE.search(line)))
    assert list(real_group["data"]) == list(stable["data"])
    assert list(real_group["data"]["members"][0]) == list(member)


# ----- bad input on a raw connection: Kafka's error codes -----------------------------------------------------------
def _join(client, group, member_id="", protocols=(("range", b"x"),), ptype="consumer", version=5, instance=None):
    request = JoinGroupRequest(
        version=version,
        group_id=group,
        session_timeout_ms=3000,
        rebalance_timeout_ms=3000,
        member_id=member_id,
        group_instance_id=instance,
        protocol_type=ptype,
        protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name=n, metadata=m) for n, m in protocols],
    )
    return client.call(request, version)


def test_bad_group_requests_get_kafkas_error_codes(broker):
    create_topic(broker.bootstrap, "raw-topic", 1)
    with RawClient(broker.bootstrap, timeout=30) as c:
        found = c.call(FindCoordinatorRequest(version=1, key="raw-group", key_type=0), 1)
        assert found.error_code == 0 and found.port == broker.port
        multi = c.call(FindCoordinatorRequest(version=4, key_type=0, coordinator_keys=["a", "b"]), 4)
        assert [x.error_code for x in multi.coordinators] == [0, 0]
        # key type 1 (TRANSACTION) is the transaction coordinator's (test_broker_transactions.py); 2 is unknown
        assert c.call(FindCoordinatorRequest(version=1, key="t", key_type=1), 1).error_code == 0
        assert c.call(FindCoordinatorRequest(version=1, key="t", key_type=2), 1).error_code == 42  # INVALID_REQUEST

        first = _join(c, "raw-group")
        assert first.error_code == 79 and first.member_id  # MEMBER_ID_REQUIRED (KIP-394)
        joined = _join(c, "raw-group", first.member_id)
        assert joined.error_code == 0 and joined.generation_id == 1 and joined.leader == first.member_id
        member, gen = first.member_id, joined.generation_id
        assignment = SyncGroupRequest.SyncGroupRequestAssignment(member_id=member, assignment=b"A")
        synced = c.call(
            SyncGroupRequest(
                version=3,
                group_id="raw-group",
                generation_id=gen,
                member_id=member,
                group_instance_id=None,
                assignments=[assignment],
            ),
            3,
        )
        assert synced.error_code == 0 and synced.assignment == b"A"

        assert _join(c, "raw-group", protocols=(("other", b""),)).error_code == 23  # INCONSISTENT_GROUP_PROTOCOL
        assert _join(c, "raw-group", ptype="connect").error_code == 23
        assert _join(c, "raw-group", "ghost").error_code == 25  # UNKNOWN_MEMBER_ID
        hb = HeartbeatRequest(
            version=3, group_id="raw-group", generation_id=gen + 5, member_id=member, group_instance_id=None
        )
        assert c.call(hb, 3).error_code == 22  # ILLEGAL_GENERATION
        hb = HeartbeatRequest(
            version=3, group_id="raw-group", generation_id=gen, member_id="ghost", group_instance_id=None
        )
        assert c.call(hb, 3).error_code == 25
        sync = SyncGroupRequest(
            version=3,
            group_id="raw-group",
            generation_id=gen,
            member_id="ghost",
            group_instance_id=None,
            assignments=[],
        )
        assert c.call(sync, 3).error_code == 25

        Topic = OffsetCommitRequest.OffsetCommitRequestTopic
        Partition = Topic.OffsetCommitRequestPartition

        def commit(partition, generation=gen, member_id=member, topic="raw-topic"):
            request = OffsetCommitRequest(
                version=8,
                group_id="raw-group",
                generation_id_or_member_epoch=generation,
                member_id=member_id,
                group_instance_id=None,
                topics=[
                    Topic(
                        name=topic,
                        partitions=[
                            Partition(
                                partition_index=partition,
                                committed_offset=0,
                                committed_leader_epoch=-1,
                                committed_metadata="",
                            )
                        ],
                    )
                ],
            )
            return c.call(request, 8).topics[0].partitions[0].error_code

        assert commit(0) == 0
        assert commit(7) == 3  # UNKNOWN_TOPIC_OR_PARTITION
        assert commit(0, topic="no-such-topic") == 3
        assert commit(0, generation=gen + 1) == 22
        assert commit(0, member_id="ghost") == 25

        fetch = c.call(
            OffsetFetchRequest(
                version=8,
                groups=[
                    OffsetFetchRequest.OffsetFetchRequestGroup(group_id="raw-group", topics=None),
                    OffsetFetchRequest.OffsetFetchRequestGroup(group_id="never-seen", topics=None),
                ],
                require_stable=False,
            ),
            8,
        )
        assert [(g.group_id, g.error_code) for g in fetch.groups] == [("raw-group", 0), ("never-seen", 0)]
        assert [(t.name, [p.committed_offset for p in t.partitions]) for t in fetch.groups[0].topics] == [
            ("raw-topic", [0])
        ]
        v1 = c.call(
            OffsetFetchRequest(
                version=1,
                group_id="raw-group",
                topics=[OffsetFetchRequest.OffsetFetchRequestTopic(name="raw-topic", partition_indexes=[0, 5])],
            ),
            1,
        )
        assert [(p.partition_index, p.committed_offset) for p in v1.topics[0].partitions] == [(0, 0), (5, -1)]

        deleted = c.call(DeleteGroupsRequest(version=2, groups_names=["raw-group", "never-seen"]), 2)
        assert [(r.group_id, r.error_code) for r in deleted.results] == [("raw-group", 68), ("never-seen", 69)]
        od = OffsetDeleteRequest(version=0, group_id="never-seen", topics=[])
        assert c.call(od, 0).error_code == 69  # GROUP_ID_NOT_FOUND

        listed = c.call(ListGroupsRequest(version=4, states_filter=["Stable"]), 4)
        assert ("raw-group", "consumer", "Stable") in [
            (g.group_id, g.protocol_type, g.group_state) for g in listed.groups
        ]

        leave = c.call(
            LeaveGroupRequest(
                version=3,
                group_id="raw-group",
                members=[
                    LeaveGroupRequest.MemberIdentity(member_id=member, group_instance_id=None),
                    LeaveGroupRequest.MemberIdentity(member_id="ghost", group_instance_id=None),
                ],
            ),
            3,
        )
        assert [(m.member_id, m.error_code) for m in leave.members] == [(member, 0), ("ghost", 25)]
        assert describe_group(broker.bootstrap, "raw-group").groups[0].group_state == "Empty"
        deleted = c.call(DeleteGroupsRequest(version=2, groups_names=["raw-group"]), 2)
        assert [(r.group_id, r.error_code) for r in deleted.results] == [("raw-group", 0)]
        assert describe_group(broker.bootstrap, "raw-group").groups[0].group_state == "Dead"


def test_static_members_are_fenced_and_rejoin_without_rebalance(broker):
    with RawClient(broker.bootstrap, timeout=30) as c:
        assert c.call(FindCoordinatorRequest(version=1, key="static-group", key_type=0), 1).error_code == 0
        joined = _join(c, "static-group", instance="pod-1")  # static: no MEMBER_ID_REQUIRED round trip
        assert joined.error_code == 0 and joined.generation_id == 1
        old = joined.member_id
        sync = SyncGroupRequest(
            version=3,
            group_id="static-group",
            generation_id=1,
            member_id=old,
            group_instance_id="pod-1",
            assignments=[SyncGroupRequest.SyncGroupRequestAssignment(member_id=old, assignment=b"")],
        )
        assert c.call(sync, 3).error_code == 0
        again = _join(c, "static-group", instance="pod-1")  # the same instance restarts with no member id
        # No rebalance: the same generation; a v5 client is told the old leader id, so it syncs as a follower.
        assert again.error_code == 0 and again.member_id != old and again.generation_id == 1 and again.leader == old
        hb = HeartbeatRequest(
            version=3,
            group_id="static-group",
            generation_id=again.generation_id,
            member_id=old,
            group_instance_id="pod-1",
        )
        assert c.call(hb, 3).error_code == 82  # FENCED_INSTANCE_ID
        leave = c.call(
            LeaveGroupRequest(
                version=3,
                group_id="static-group",
                members=[LeaveGroupRequest.MemberIdentity(member_id=old, group_instance_id="pod-1")],
            ),
            3,
        )
        assert leave.members[0].error_code == 82


def test_join_group_v3_joins_without_member_id_required_and_waits_for_the_others(broker):
    """JoinGroup before v4 knows no KIP-394; a second member's join waits until the first rejoins."""
    with RawClient(broker.bootstrap, timeout=30) as c1, RawClient(broker.bootstrap, timeout=30) as c2:
        c1.call(FindCoordinatorRequest(version=1, key="v3-group", key_type=0), 1)
        first = _join(c1, "v3-group", version=3)
        assert first.error_code == 0 and first.generation_id == 1
        sync = SyncGroupRequest(
            version=2, group_id="v3-group", generation_id=1, member_id=first.member_id, assignments=[]
        )
        assert c1.call(sync, 2).error_code == 0
        waiting_join = JoinGroupRequest(
            version=3,
            group_id="v3-group",
            session_timeout_ms=3000,
            rebalance_timeout_ms=3000,
            member_id="",
            protocol_type="consumer",
            protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"y")],
        )
        c2.send(encode_request(waiting_join, 3, correlation_id=9))  # its answer comes after the rebalance
        hb = HeartbeatRequest(version=2, group_id="v3-group", generation_id=1, member_id=first.member_id)
        assert c1.call(hb, 2).error_code == 27  # REBALANCE_IN_PROGRESS: rejoin
        rejoined = _join(c1, "v3-group", first.member_id, version=3)
        assert rejoined.error_code == 0 and rejoined.generation_id == 2 and len(rejoined.members) == 2
        body = c2.receive()
        assert int.from_bytes(body[:4], "big") == 9
        second = JoinGroupResponse[3].decode(body[4:])
        assert second.error_code == 0 and second.generation_id == 2 and second.members == []
