"""The group coordinator's state machine, offsets and __consumer_offsets records, under MockTime (no broker).

Expected values come from Kafka's rules (the KIP or Kafka's code path named in each test), from the
``__consumer_offsets`` partitions real Kafka brokers wrote (fixtures/broker-logs), or from Java itself
(``"polygenelubricants".hashCode() == Integer.MIN_VALUE``), never from this coordinator's own output.
"""

from __future__ import annotations

import shutil

import pytest

from conftest import fixture_path
from kafkalog.coordinator.group import (
    GROUP_METADATA_TOPIC_NAME,
    Errors,
    GroupCoordinator,
    GroupCoordinatorConfig,
    java_string_hash,
    partition_for,
)
from kafkalog.coordinator.group.consumer_group import range_assign, uniform_assign
from kafkalog.coordinator.group.records import decode_offsets_record
from kafkalog.manager import LogManager, TopicPartition
from kafkalog.testing import MockTime

SESSION = 10_000
REBALANCE = 30_000


class Harness:
    """A LogManager and a GroupCoordinator on one MockTime; ``restart`` reopens both on the same dirs."""

    def __init__(self, path, **config) -> None:
        self.path = path
        config.setdefault("offsets_topic_num_partitions", 3)
        config.setdefault("group_initial_rebalance_delay_ms", 0)
        self.config = GroupCoordinatorConfig(**config)
        self.clock = MockTime()
        self._open()
        assert self.coordinator.ensure_offsets_topic() is Errors.NONE

    def _open(self) -> None:
        self.manager = LogManager(self.path, clock=self.clock)
        self.manager.startup()
        self.coordinator = GroupCoordinator(self.manager, self.config, self.clock, self.clock.scheduler)
        self.coordinator.startup()

    def restart(self) -> None:
        self.coordinator.shutdown()
        self.manager.shutdown()
        self._open()

    def close(self) -> None:
        self.coordinator.shutdown()
        self.manager.shutdown()

    def join(self, group="g", member_id="", instance=None, protocols=None, session=SESSION, ptype="consumer", v9=False):
        """Send a JoinGroup; returns a list that receives the result when the coordinator answers."""
        box: list = []
        self.coordinator.join_group(
            group,
            member_id,
            instance,
            "client",
            "/127.0.0.1",
            REBALANCE,
            session,
            ptype,
            protocols if protocols is not None else [("range", b"sub")],
            box.append,
            supports_skip_assignment=v9,
        )
        return box

    def join_new(self, group="g", **kw):
        """KIP-394: the first JoinGroup gets MEMBER_ID_REQUIRED and an id; rejoin with it."""
        first = self.join(group, **kw)
        assert first[0].error == Errors.MEMBER_ID_REQUIRED and first[0].member_id
        return self.join(group, member_id=first[0].member_id, **kw)

    def sync(self, group, generation, member_id, assignments=None, instance=None):
        box: list = []
        self.coordinator.sync_group(group, generation, member_id, instance, None, None, assignments or {}, box.append)
        return box


@pytest.fixture
def h(tmp_path):
    harness = Harness(tmp_path / "logs")
    yield harness
    harness.close()


def stable_group_of_one(h, group="g"):
    joined = h.join_new(group)[0]
    assert joined.error == Errors.NONE
    synced = h.sync(group, joined.generation_id, joined.member_id, {joined.member_id: b"assign-1"})[0]
    assert synced.error == Errors.NONE and synced.assignment == b"assign-1"
    return joined.member_id


# ----- placement ---------------------------------------------------------------------------------------------
def test_partition_for_is_javas_string_hash_code_with_kafkas_abs():
    assert java_string_hash("") == 0
    assert java_string_hash("a") == 97
    assert java_string_hash("polygenelubricants") == -(2**31)  # Integer.MIN_VALUE, a known Java example
    assert partition_for("polygenelubricants", 50) == 0  # Utils.abs(MIN_VALUE) == 0, not negative
    # Where real Kafka brokers put these groups (fixtures/broker-logs): __consumer_offsets-39 and -29.
    assert partition_for("console-consumer-65070", 50) == 39
    assert partition_for("schema-registry", 50) == 29


def test_offsets_topic_is_created_compacted_with_kafkas_configs(tmp_path):
    h = Harness(tmp_path / "logs", offsets_topic_num_partitions=50)
    try:
        topic = h.manager.describe_topic(GROUP_METADATA_TOPIC_NAME)
        assert len(topic.partitions) == 50
        log_config = h.manager.get_log(GROUP_METADATA_TOPIC_NAME, 0).config
        assert log_config.cleanup_policy == ["compact"] or "compact" in str(log_config.cleanup_policy)
        assert int(log_config.segment_bytes) == 100 * 1024 * 1024
    finally:
        h.close()


# ----- join / sync / heartbeat -------------------------------------------------------------------------------
def test_kip394_member_id_required_then_a_one_member_generation(h):
    first = h.join()[0]
    assert first.error == Errors.MEMBER_ID_REQUIRED and first.member_id.startswith("client-")
    assert first.generation_id == -1
    joined = h.join(member_id=first.member_id)[0]
    assert (joined.error, joined.generation_id, joined.leader, joined.protocol_name) == (
        Errors.NONE,
        1,
        first.member_id,
        "range",
    )
    assert joined.members == [(first.member_id, None, b"sub")]  # the leader gets every member's metadata
    assert h.coordinator.groups["g"].state.value == "CompletingRebalance"
    assert h.coordinator.heartbeat("g", first.member_id, None, 1) == Errors.NONE
    synced = h.sync("g", 1, first.member_id, {first.member_id: b"a"})[0]
    assert synced.error == Errors.NONE and synced.assignment == b"a"
    assert h.coordinator.groups["g"].state.value == "Stable"


def test_a_second_member_triggers_a_rebalance_both_rejoin_and_followers_wait_for_the_leaders_sync(h):
    leader = stable_group_of_one(h)
    second = h.join_new()
    assert second == []  # waits: the leader has not rejoined yet
    assert h.coordinator.heartbeat("g", leader, None, 1) == Errors.REBALANCE_IN_PROGRESS
    rejoined = h.join(member_id=leader)[0]
    assert rejoined.generation_id == 2 and len(rejoined.members) == 2 and rejoined.leader == leader
    follower = second[0]
    assert follower.error == Errors.NONE and follower.generation_id == 2 and follower.members == []
    waiting = h.sync("g", 2, follower.member_id)
    assert waiting == []  # the follower's SyncGroup waits for the leader's assignment
    h.sync("g", 2, leader, {leader: b"L", follower.member_id: b"F"})
    assert waiting[0].error == Errors.NONE and waiting[0].assignment == b"F"


def test_session_timeout_removes_a_silent_member_and_rebalances(h):
    leader = stable_group_of_one(h)
    other = h.join_new()
    h.join(member_id=leader)
    follower = other[0].member_id
    h.sync("g", 2, leader, {leader: b"L", follower: b"F"})
    h.sync("g", 2, follower)
    group = h.coordinator.groups["g"]
    for _ in range(4):  # the leader heartbeats, the follower is silent
        h.clock.advance(SESSION // 3)
        h.coordinator.heartbeat("g", leader, None, 2)
    assert follower not in group.members
    assert group.state.value == "PreparingRebalance"
    rejoined = h.join(member_id=leader)[0]
    assert rejoined.generation_id == 3 and [m[0] for m in rejoined.members] == [leader]


def test_a_member_that_does_not_rejoin_is_dropped_at_the_rebalance_timeout(h):
    leader = stable_group_of_one(h)
    newcomer = h.join_new()
    for _ in range(REBALANCE // 2000 + 1):  # the old leader keeps heartbeating but never rejoins
        h.clock.advance(2000)
        if newcomer:
            break
        h.coordinator.heartbeat("g", leader, None, 1)
    assert newcomer and newcomer[0].generation_id == 2
    assert leader not in h.coordinator.groups["g"].members
    assert newcomer[0].leader == newcomer[0].member_id


def test_initial_rebalance_delay_waits_and_extends_for_new_members(tmp_path):
    h = Harness(tmp_path / "logs", group_initial_rebalance_delay_ms=3000)
    try:
        a = h.join_new()
        h.clock.advance(2000)
        b = h.join_new()  # joins during the delay: the delay is extended
        h.clock.advance(1000)
        assert a == [] and b == []
        h.clock.advance(3000)
        assert a[0].generation_id == b[0].generation_id == 1
        assert {m[0] for m in (a[0].members or b[0].members)} == {a[0].member_id, b[0].member_id}
    finally:
        h.close()


def test_protocol_is_chosen_by_votes_among_those_every_member_supports(h):
    a_protocols = [("range", b"a1"), ("roundrobin", b"a2")]
    a = h.join_new(protocols=a_protocols)[0]  # generation 1, alone
    b = h.join_new(protocols=[("roundrobin", b"b2"), ("range", b"b1")])
    c = h.join_new(protocols=[("cooperative-sticky", b"c0"), ("roundrobin", b"c2"), ("range", b"c1")])
    a2 = h.join(member_id=a.member_id, protocols=a_protocols)
    # Common to all: range, roundrobin. Votes: a -> range, b -> roundrobin, c -> roundrobin.
    results = [a2[0], b[0], c[0]]
    assert {r.generation_id for r in results} == {2}
    assert {r.protocol_name for r in results} == {"roundrobin"}
    assert {m[2] for m in a2[0].members} == {b"a2", b"b2", b"c2"}  # each member's metadata for roundrobin


def test_inconsistent_protocols_and_types_are_refused(h):
    stable_group_of_one(h)
    assert h.join(protocols=[("nothing-in-common", b"")])[0].error == Errors.INCONSISTENT_GROUP_PROTOCOL
    assert h.join(ptype="connect")[0].error == Errors.INCONSISTENT_GROUP_PROTOCOL
    assert h.join(group="fresh", protocols=[])[0].error == Errors.INCONSISTENT_GROUP_PROTOCOL
    assert h.join(group="fresh2", ptype="")[0].error == Errors.INCONSISTENT_GROUP_PROTOCOL
    assert h.coordinator.groups["g"].generation_id == 1  # nothing changed


def test_bad_member_ids_generations_and_timeouts_get_kafkas_codes(h):
    member = stable_group_of_one(h)
    assert h.coordinator.heartbeat("g", "nobody", None, 1) == Errors.UNKNOWN_MEMBER_ID
    assert h.coordinator.heartbeat("g", member, None, 7) == Errors.ILLEGAL_GENERATION
    assert h.coordinator.heartbeat("nogroup", member, None, 1) == Errors.UNKNOWN_MEMBER_ID
    assert h.sync("g", 7, member)[0].error == Errors.ILLEGAL_GENERATION
    assert h.sync("g", 1, "nobody")[0].error == Errors.UNKNOWN_MEMBER_ID
    assert h.join(member_id="nobody")[0].error == Errors.UNKNOWN_MEMBER_ID
    assert h.join(group="other", member_id="nobody")[0].error == Errors.UNKNOWN_MEMBER_ID
    assert h.join(session=10)[0].error == Errors.INVALID_SESSION_TIMEOUT  # below group.min.session.timeout.ms
    assert h.join(group="")[0].error == Errors.INVALID_GROUP_ID
    assert h.coordinator.groups["g"].state.value == "Stable" and h.coordinator.groups["g"].generation_id == 1


def test_static_member_rejoins_without_a_rebalance_and_the_old_id_is_fenced(h):
    leader = stable_group_of_one(h)
    first = h.join(instance="instance-1")
    assert first == []  # a static member needs no KIP-394 round trip; the group rebalances for it
    h.join(member_id=leader)
    static_id = first[0].member_id
    h.sync("g", 2, leader, {leader: b"L", static_id: b"S"})
    assert h.sync("g", 2, static_id, instance="instance-1")[0].assignment == b"S"
    again = h.join(instance="instance-1")[0]  # the static member restarted
    assert again.error == Errors.NONE and again.generation_id == 2 and again.member_id != static_id
    assert h.coordinator.groups["g"].state.value == "Stable"
    assert h.coordinator.heartbeat("g", static_id, "instance-1", 2) == Errors.FENCED_INSTANCE_ID
    assert h.coordinator.heartbeat("g", again.member_id, "instance-1", 2) == Errors.NONE
    top, results = h.coordinator.leave_group("g", [(static_id, "instance-1")])
    assert top == Errors.NONE
    assert results == [(static_id, "instance-1", Errors.FENCED_INSTANCE_ID)]
    _, results = h.coordinator.leave_group("g", [("", "instance-1"), ("ghost", None)])
    assert [r[2] for r in results] == [Errors.NONE, Errors.UNKNOWN_MEMBER_ID]
    assert h.coordinator.groups["g"].state.value == "PreparingRebalance"


def test_batched_leave_empties_the_group_and_delete_groups(h):
    leader = stable_group_of_one(h)
    assert h.coordinator.delete_groups(["g"]) == {"g": Errors.NON_EMPTY_GROUP}
    top, results = h.coordinator.leave_group("g", [(leader, None)])
    assert top == Errors.NONE and results == [(leader, None, Errors.NONE)]
    group = h.coordinator.groups["g"]
    assert group.state.value == "Empty" and group.generation_id == 2
    assert h.coordinator.delete_groups(["g", "missing"]) == {"g": Errors.NONE, "missing": Errors.GROUP_ID_NOT_FOUND}
    h.restart()
    assert "g" not in h.coordinator.groups


# ----- offsets -----------------------------------------------------------------------------------------------
def test_commit_fetch_and_reload_after_restart(h):
    h.manager.create_topic("t", 2)
    member = stable_group_of_one(h)
    result = h.coordinator.commit_offsets("g", member, None, 1, {("t", 0): (42, 3, "meta"), ("t", 9): (1, -1, "")})
    assert result == {("t", 0): Errors.NONE, ("t", 9): Errors.UNKNOWN_TOPIC_OR_PARTITION}
    assert h.coordinator.commit_offsets("g", member, None, 5, {("t", 1): (1, -1, "")}) == {
        ("t", 1): Errors.ILLEGAL_GENERATION
    }
    assert h.coordinator.commit_offsets("g", "x", None, 1, {("t", 1): (1, -1, "")}) == {
        ("t", 1): Errors.UNKNOWN_MEMBER_ID
    }
    too_big = "x" * 5000
    assert h.coordinator.commit_offsets("g", member, None, 1, {("t", 1): (1, -1, too_big)}) == {
        ("t", 1): Errors.OFFSET_METADATA_TOO_LARGE
    }
    error, offsets = h.coordinator.fetch_offsets("g", [("t", 0), ("t", 1)])
    assert error == Errors.NONE and offsets[("t", 1)] is None
    assert (offsets[("t", 0)].offset, offsets[("t", 0)].leader_epoch, offsets[("t", 0)].metadata) == (42, 3, "meta")
    h.restart()
    group = h.coordinator.groups["g"]
    assert group.state.value == "Stable" and group.generation_id == 1 and member in group.members
    assert group.members[member].assignment == b"assign-1"
    assert h.coordinator.fetch_offsets("g", None)[1][("t", 0)].offset == 42
    assert h.coordinator.heartbeat("g", member, None, 1) == Errors.NONE  # the loaded member is still known


def test_records_written_are_kafkas_key_and_value_versions(h):
    h.manager.create_topic("t", 1)
    member = stable_group_of_one(h)
    h.coordinator.commit_offsets("g", member, None, 1, {("t", 0): (7, 0, "m")})
    partition = h.coordinator.partition_for("g")
    records = list(h.manager.replica_manager.get_partition(GROUP_METADATA_TOPIC_NAME, partition).records())
    decoded = [decode_offsets_record(r.key, r.value) for r in records]
    group_key, group_value = decoded[0]
    assert group_key == {"type": "2", "data": {"group": "g"}}
    assert group_value["version"] == "3"
    assert group_value["data"]["generation"] == 1 and group_value["data"]["protocol"] == "range"
    assert group_value["data"]["members"][0]["memberId"] == member
    offset_key, offset_value = decoded[1]
    assert offset_key == {"type": "1", "data": {"group": "g", "topic": "t", "partition": 0}}
    assert offset_value["version"] == "3"
    assert offset_value["data"]["offset"] == 7 and offset_value["data"]["leaderEpoch"] == 0
    assert offset_value["data"]["commitTimestamp"] == h.clock.milliseconds()


def test_commit_during_completing_rebalance_and_simple_consumer_commits(h):
    h.manager.create_topic("t", 1)
    joined = h.join_new()[0]
    assert h.coordinator.commit_offsets("g", joined.member_id, None, 1, {("t", 0): (1, -1, "")}) == {
        ("t", 0): Errors.REBALANCE_IN_PROGRESS
    }
    # A consumer outside any group (generation -1, no member id) may commit to a group that does not exist.
    assert h.coordinator.commit_offsets("manual", "", None, -1, {("t", 0): (5, -1, "")}) == {("t", 0): Errors.NONE}
    assert h.coordinator.groups["manual"].state.value == "Empty"
    assert h.coordinator.commit_offsets("nogroup", "m", None, 3, {("t", 0): (5, -1, "")}) == {
        ("t", 0): Errors.ILLEGAL_GENERATION
    }


def test_offset_delete_refuses_subscribed_topics_and_tombstones_others(h):
    h.manager.create_topic("t", 1)
    h.manager.create_topic("u", 1)
    h.coordinator.commit_offsets("simple", "", None, -1, {("t", 0): (5, -1, ""), ("u", 0): (6, -1, "")})
    assert h.coordinator.delete_offsets("missing", [("t", 0)]) == (Errors.GROUP_ID_NOT_FOUND, {})
    error, results = h.coordinator.delete_offsets("simple", [("t", 0)])
    assert error == Errors.NONE and results == {("t", 0): Errors.NONE}
    h.restart()
    assert set(h.coordinator.groups["simple"].offsets) == {("u", 0)}


def test_offsets_of_an_empty_group_expire_after_the_retention_and_the_group_dies(tmp_path):
    h = Harness(tmp_path / "logs", offsets_retention_minutes=1, offsets_retention_check_interval_ms=10_000)
    try:
        h.manager.create_topic("t", 1)
        h.coordinator.commit_offsets("simple", "", None, -1, {("t", 0): (5, -1, "")})
        h.clock.advance(50_000)
        assert "simple" in h.coordinator.groups
        h.clock.advance(20_000)  # past one minute since the group became empty, at a retention check
        assert "simple" not in h.coordinator.groups
        h.restart()
        assert "simple" not in h.coordinator.groups
    finally:
        h.close()


def test_list_and_describe_groups(h):
    member = stable_group_of_one(h)
    h.manager.create_topic("t", 1)
    h.coordinator.commit_offsets("simple", "", None, -1, {("t", 0): (5, -1, "")})
    listed = {(g.group_id, g.protocol_type, g.state) for g in h.coordinator.list_groups()}
    assert listed == {("g", "consumer", "Stable"), ("simple", "", "Empty")}
    assert [g.group_id for g in h.coordinator.list_groups(states=["empty"])] == ["simple"]
    assert h.coordinator.list_groups(types=["consumer"]) == []
    _, description = h.coordinator.describe_group("g")
    assert description.state == "Stable" and description.protocol == "range"
    assert description.members[0][0] == member and description.members[0][5] == b"assign-1"
    assert h.coordinator.describe_group("missing")[0] == Errors.GROUP_ID_NOT_FOUND


# ----- fixtures: __consumer_offsets written by real Kafka brokers -----------------------------------------------
@pytest.mark.parametrize(
    ("fixture", "group", "state", "generation", "protocol_type", "offsets"),
    [
        # A group with a member (GroupMetadataValue v2, Kafka 2.0) and offsets in OffsetCommitValue v2.
        ("william0423-kafka/kafka-logs", "debug-consumer-group", "Stable", 1, "consumer", {("debug_topic", 0): 40}),
        # Empty consumer group (GroupMetadataValue v2) with offsets (v3 values), Confluent Platform 5.1.2.
        (
            "mscaldas-cp512-lz4/kafka-data",
            "_confluent-controlcenter-5-1-2-1-command",
            "Empty",
            3,
            "consumer",
            {("_confluent-command", 0): 2},
        ),
        # Groups with members at the last record: Stable, in their generation, with their protocol.
        ("mscaldas-cp512-lz4/kafka-data", "schema-registry", "Stable", 73, "sr", {}),
        ("itumelengmogase-cp77-kraft/kafka-data", "schema-registry", "Stable", 25, "sr", {}),
        ("itumelengmogase-cp77-kraft/kafka-data", "compose-connect-group", "Empty", 44, "connect", {}),
        # Offsets and group tombstoned by Kafka (expired): nothing comes back.
        ("donaldy-kafka271/kafka-logs", "console-consumer-65070", None, None, None, {}),
        ("yuanliubei-kafka-src/kafka-logs", "DemoConsumer", None, None, None, {}),
    ],
)
def test_loads_groups_and_offsets_kafka_wrote(tmp_path, fixture, group, state, generation, protocol_type, offsets):
    source = fixture_path("broker-logs", *fixture.split("/"))
    target = tmp_path / "logs"
    shutil.copytree(source, target)
    clock = MockTime()
    manager = LogManager(target, clock=clock)
    manager.startup()
    try:
        coordinator = GroupCoordinator(manager, GroupCoordinatorConfig(), clock, clock.scheduler)
        coordinator.startup()
        loaded = coordinator.groups.get(group)
        if state is None:
            assert loaded is None
            assert coordinator.fetch_offsets(group, None) == (Errors.NONE, {})
        else:
            assert (loaded.state.value, loaded.generation_id, loaded.protocol_type or "") == (
                state,
                generation,
                protocol_type,
            )
            error, found = coordinator.fetch_offsets(group, None)
            assert error == Errors.NONE and {tp: om.offset for tp, om in found.items()} == offsets
        coordinator.shutdown()
    finally:
        manager.shutdown()


def test_members_loaded_from_kafkas_records_expire_and_the_group_empties(tmp_path):
    """schema-registry's last record (fixture, Kafka 2.x) has one member; nobody heartbeats for it here, so after
    its session timeout (10 s in the record) it is removed, the group rebalances to an empty generation 74 and
    that is written, so a restart loads the group Empty."""
    source = fixture_path("broker-logs", "mscaldas-cp512-lz4", "kafka-data")
    target = tmp_path / "logs"
    shutil.copytree(source, target)
    clock = MockTime()
    manager = LogManager(target, clock=clock)
    manager.startup()
    try:
        coordinator = GroupCoordinator(manager, GroupCoordinatorConfig(), clock, clock.scheduler)
        coordinator.startup()
        group = coordinator.groups["schema-registry"]
        (member,) = group.members.values()
        assert member.session_timeout_ms == 10_000 and group.state.value == "Stable"
        clock.advance(9_999)
        assert group.state.value == "Stable"
        clock.advance(1)
        assert group.state.value == "Empty" and group.generation_id == 74 and not group.members
        coordinator.shutdown()
        reloaded = GroupCoordinator(manager, GroupCoordinatorConfig(), clock, clock.scheduler)
        reloaded.startup()
        again = reloaded.groups["schema-registry"]
        assert (again.state.value, again.generation_id, again.protocol_type) == ("Empty", 74, "sr")
        reloaded.shutdown()
    finally:
        manager.shutdown()


@pytest.mark.parametrize("v9", [False, True])
def test_a_restarted_static_leader_rejoins_without_a_rebalance(h, v9):
    """Kafka's staticMemberRejoinWithLeaderIdAndUnknownMemberId: same generation, no rebalance; with JoinGroup v9
    (KIP-814) the new leader gets the members and skipAssignment, before it the old leader id."""
    leader = h.join(instance="leader-pod")[0]
    h.sync("g", 1, leader.member_id, {leader.member_id: b"L"}, instance="leader-pod")
    again = h.join(instance="leader-pod", v9=v9)[0]
    assert again.error == Errors.NONE and again.generation_id == 1 and again.member_id != leader.member_id
    assert h.coordinator.groups["g"].state.value == "Stable"
    assert h.coordinator.groups["g"].leader_id == again.member_id
    if v9:
        assert again.skip_assignment and again.leader == again.member_id
        assert [m[0] for m in again.members] == [again.member_id]
    else:
        assert not again.skip_assignment and again.leader == leader.member_id and again.members == []
    assert h.sync("g", 1, again.member_id, instance="leader-pod")[0].assignment == b"L"


# ----- KIP-848: ConsumerGroupHeartbeat ----------------------------------------------------------------------------
def beat(h, member, epoch, topics=None, owned=None, assignor=None, group="cg"):
    return h.coordinator.consumer_group_heartbeat(
        group, member, epoch, None, None, 30_000, topics, None, assignor, owned, "client", "/127.0.0.1", 1
    )


def test_kip848_assignors_split_as_kafkas():
    # RangeAssignor: 7 partitions over 3 members -> 3, 2, 2 contiguous, members sorted.
    ranged = range_assign({"a": ["t"], "b": ["t"], "c": ["t"]}, {"t": 7}, {})
    assert ranged == {"a": {"t": {0, 1, 2}}, "b": {"t": {3, 4}}, "c": {"t": {5, 6}}}
    # Uniform: balanced within one, and sticky: a member keeps what it had up to its quota.
    uniform = uniform_assign(
        {"a": ["t"], "b": ["t"], "c": ["t"]}, {"t": 6}, {"a": {"t": {0, 1, 2, 3}}, "b": {"t": {4, 5}}}
    )
    assert sorted(len(uniform[m]["t"]) for m in "abc") == [2, 2, 2]
    assert uniform["a"]["t"] <= {0, 1, 2, 3} and uniform["b"]["t"] == {4, 5}
    only_u = uniform_assign({"a": ["t"], "b": ["u"]}, {"t": 2, "u": 2}, {})
    assert only_u == {"a": {"t": {0, 1}}, "b": {"u": {0, 1}}}  # a member only gets topics it subscribes to


def test_kip848_revocation_comes_before_reassignment(h):
    h.manager.create_topic("t", 4)
    a = beat(h, "A", 0, ["t"])
    assert (a.error, a.member_epoch, a.assignment) == (0, 1, {"t": {0, 1, 2, 3}})
    b = beat(h, "B", 0, ["t"])
    assert b.error == 0 and b.member_epoch == 2 and b.assignment == {}  # its partitions are still A's
    a = beat(h, "A", 1, owned={"t": {0, 1, 2, 3}})
    assert a.member_epoch == 1 and len(a.assignment["t"]) == 2  # A must first give up two partitions
    revoked = {0, 1, 2, 3} - a.assignment["t"]
    assert beat(h, "B", 2, owned={}).assignment is None  # nothing released yet: no change for B
    a = beat(h, "A", 1, owned=a.assignment)  # A confirms: it owns only what it kept
    assert a.member_epoch == 2
    b = beat(h, "B", 2, owned={})
    assert b.assignment == {"t": revoked} and h.coordinator.consumer_groups["cg"].state in ("Stable", "Reconciling")
    assert beat(h, "B", 2, owned=b.assignment).assignment is None
    assert h.coordinator.consumer_groups["cg"].state == "Stable"


def test_kip848_errors_fencing_and_timeouts(h):
    h.manager.create_topic("t", 2)
    assert beat(h, "A", 0, None).error == Errors.INVALID_REQUEST  # a join must say what it subscribes to
    assert beat(h, "A", 0, ["t"], assignor="sticky").error == Errors.UNSUPPORTED_ASSIGNOR
    assert beat(h, "A", 3, ["t"], group="nope").error == Errors.UNKNOWN_MEMBER_ID
    assert beat(h, "A", 0, ["t"]).member_epoch == 1
    assert beat(h, "A", 5).error == Errors.FENCED_MEMBER_EPOCH
    assert beat(h, "X", 1).error == Errors.UNKNOWN_MEMBER_ID
    # Offsets of a KIP-848 member are checked against its epoch.
    assert h.coordinator.commit_offsets("cg", "A", None, 0, {("t", 0): (1, -1, "")}) == {
        ("t", 0): Errors.STALE_MEMBER_EPOCH
    }
    assert h.coordinator.commit_offsets("cg", "A", None, 1, {("t", 0): (1, -1, "")}) == {("t", 0): Errors.NONE}
    assert [(g.group_id, g.group_type, g.state) for g in h.coordinator.list_groups(types=["consumer"])] == [
        ("cg", "consumer", "Stable")
    ]
    assert h.join(group="cg")[0].error == Errors.INCONSISTENT_GROUP_PROTOCOL  # a classic member cannot join it
    assert h.coordinator.delete_groups(["cg"]) == {"cg": Errors.NON_EMPTY_GROUP}
    h.clock.advance(h.config.consumer_session_timeout_ms)  # A stops heartbeating
    assert not h.coordinator.consumer_groups["cg"].members
    assert h.coordinator.fetch_offsets("cg", [("t", 0)])[1][("t", 0)].offset == 1  # offsets outlive members
    assert h.coordinator.delete_groups(["cg"]) == {"cg": Errors.NONE}


def test_kip848_a_member_that_does_not_revoke_in_its_rebalance_timeout_is_fenced(h):
    h.manager.create_topic("t", 2)
    beat(h, "A", 0, ["t"])
    beat(h, "B", 0, ["t"])
    beat(h, "A", 1, owned={"t": {0, 1}})  # told to revoke one partition
    for _ in range(4):  # A keeps heartbeating but never confirms the revocation; B heartbeats too
        h.clock.advance(10_000)
        beat(h, "A", 1)
        beat(h, "B", 2, owned={})
    assert "A" not in h.coordinator.consumer_groups["cg"].members
    b = beat(h, "B", 2, owned={})
    assert beat(h, "B", b.member_epoch, owned=b.assignment or {}).error == 0
    assert h.coordinator.consumer_groups["cg"].members["B"].assigned == {"t": {0, 1}}


# ----- the log cleaner on __consumer_offsets -----------------------------------------------------------------------
def test_the_cleaner_compacts_consumer_offsets_and_the_coordinator_reloads_the_same_state(tmp_path):
    """Kafka keeps __consumer_offsets small by compaction alone (cleanup.policy=compact): only the last record of
    each key survives a clean. Many commits of the same group and partitions, over segments rolled by a small
    offsets.topic.segment.bytes, must shrink to one record per key, and a restart must load exactly the committed
    offsets and group the coordinator held before (the test keeps its own copy of what it committed)."""
    h = Harness(tmp_path / "logs", offsets_topic_num_partitions=1, offsets_topic_segment_bytes=2048)
    try:
        h.manager.create_topic("t", 3)
        member = stable_group_of_one(h)
        expected: dict[tuple[str, int], int] = {}
        for i in range(150):
            tp = ("t", i % 3)
            expected[tp] = 1000 + i
            assert h.coordinator.commit_offsets("g", member, None, 1, {tp: (1000 + i, 0, f"m{i}")}) == {tp: Errors.NONE}
            h.clock.advance(10)
        log = h.manager.get_log(GROUP_METADATA_TOPIC_NAME, 0)
        assert log.config.compact and len(log.segments) > 5  # rolled by offsets.topic.segment.bytes
        records_before = sum(
            1
            for _ in h.coordinator.replica_manager.get_partition(GROUP_METADATA_TOPIC_NAME, 0).records(
                None, "read_committed"
            )
        )
        assert records_before == 151  # one group metadata record and 150 commits
        stats = h.manager.clean_once()
        assert stats.logs_cleaned == 1
        keys = []
        for record in h.coordinator.replica_manager.get_partition(GROUP_METADATA_TOPIC_NAME, 0).records(
            None, "read_committed"
        ):
            key, _ = decode_offsets_record(record.key, record.value)
            keys.append((key["type"], tuple(sorted(key["data"].items()))))
        # The active segment is never cleaned, so a few commits there may repeat a key; everything below it is
        # one record per key, and far fewer than the 151 written.
        assert len(keys) < 40
        assert len(set(keys)) == 4  # the group metadata key and three offset keys
        h.restart()
        group = h.coordinator.groups["g"]
        assert group.state.value == "Stable" and group.generation_id == 1 and member in group.members
        error, offsets = h.coordinator.fetch_offsets("g", None)
        assert error == Errors.NONE
        assert {tp: om.offset for tp, om in offsets.items()} == expected
        assert offsets[("t", 2)].metadata == "m149"
        assert h.coordinator.heartbeat("g", member, None, 1) == Errors.NONE
    finally:
        h.close()


def test_kip848_members_and_epochs_survive_a_restart_in_kafkas_records(h):
    """KIP-848 state is replayed from Kafka's ConsumerGroup* records (key version = record type 3, 5, 6, 7, 8;
    values v0), so after a restart the members keep their ids, epochs and partitions and heartbeat on without
    rejoining; a deleted group leaves tombstones, so it stays deleted."""
    h.manager.create_topic("t", 4)
    a = beat(h, "A", 0, ["t"], assignor="range")
    b = beat(h, "B", 0, ["t"])
    a = beat(h, "A", a.member_epoch, owned=a.assignment)  # A revokes two partitions
    a = beat(h, "A", a.member_epoch, owned=a.assignment)
    b = beat(h, "B", b.member_epoch, owned={})
    b = beat(h, "B", b.member_epoch, owned=b.assignment)
    group = h.coordinator.consumer_groups["cg"]
    assert group.state == "Stable" and group.group_epoch == 2
    before = {m.member_id: (m.member_epoch, m.assigned) for m in group.members.values()}
    assert before == {"A": (2, {"t": {0, 1}}), "B": (2, {"t": {2, 3}})}  # range: contiguous halves

    tp = TopicPartition(GROUP_METADATA_TOPIC_NAME, h.coordinator.partition_for("cg"))
    types = set()
    for record in h.coordinator.replica_manager.get_partition(tp.topic, tp.partition).records(None, "read_committed"):
        key, value = decode_offsets_record(record.key, record.value)
        types.add(key["type"])
        if key["type"] == "8" and key["data"]["memberId"] == "A" and value is not None:
            last_a = value
    assert types == {"3", "5", "6", "7", "8"}
    topic_id = h.manager.describe_topic("t").topic_id
    assert last_a["version"] == "0" and last_a["data"]["memberEpoch"] == 2 and last_a["data"]["state"] == 0
    assert last_a["data"]["assignedPartitions"] == [{"topicId": topic_id, "partitions": [0, 1]}]

    # kafkalog dump --offsets-decoder prints them as kafka-dump-log.sh: key {"type","data"}, value {"version","data"}.
    from click.testing import CliRunner

    from kafkalog.cli import main as cli

    segment = next(h.manager.get_log(tp.topic, tp.partition).directory.glob("*.log"))
    dumped = CliRunner().invoke(cli, ["dump", "--offsets-decoder", "--print-data-log", "--files", str(segment)])
    assert dumped.exit_code == 0, dumped.output
    assert 'key: {"type":"3","data":{"groupId":"cg"}} payload: {"version":"0","data":{"epoch":2}}' in dumped.stdout
    assert '"type":"5","data":{"groupId":"cg","memberId":"A"}' in dumped.stdout and '"serverAssignor":"range"' in (
        dumped.stdout
    )
    assert "Unknown record type" not in dumped.stdout

    h.restart()
    group = h.coordinator.consumer_groups["cg"]
    assert (group.group_epoch, group.assignment_epoch, group.state) == (2, 2, "Stable")
    assert {m.member_id: (m.member_epoch, m.assigned) for m in group.members.values()} == before
    assert group.members["A"].server_assignor == "range" and group.members["B"].subscribed_topics == ["t"]
    assert beat(h, "A", 2).error == 0 and beat(h, "B", 2).error == 0  # no rejoin, no new epoch
    assert h.coordinator.consumer_groups["cg"].group_epoch == 2
    h.clock.advance(h.config.consumer_session_timeout_ms)  # loaded members' sessions run again (Kafka's onLoaded)
    assert not h.coordinator.consumer_groups["cg"].members
    assert h.coordinator.delete_groups(["cg"]) == {"cg": Errors.NONE}
    h.restart()
    assert "cg" not in h.coordinator.consumer_groups


# ----- transactional offset commits (TxnOffsetCommit) ------------------------------------------------------------
def _write_marker(h: Harness, group: str, producer_id: int, epoch: int, commit: bool) -> None:
    from kafkalog.record.builder import control_batch
    from kafkalog.record.types import ControlRecordType
    from kafkalog.storage.producer_state import AppendOrigin

    tp = TopicPartition(GROUP_METADATA_TOPIC_NAME, h.coordinator.partition_for(group))
    control = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
    batch = control_batch(control, producer_id, epoch, 0, h.clock.milliseconds())
    assert h.manager.replica_manager.append_records({tp: batch}, -1, AppendOrigin.COORDINATOR)[tp].error is None


def test_transactional_offsets_stay_pending_until_the_commit_marker(h):
    """Kafka writes a TxnOffsetCommit as a transactional batch of the producer and shows it only once the COMMIT
    marker reaches the group's partition (GroupMetadataManager.handleTxnCompletion); an ABORT drops it."""
    h.manager.create_topic("t", 2)
    results = h.coordinator.commit_transactional_offsets("g", 77, 0, "", None, -1, {("t", 0): (5, -1, "m")})
    assert results == {("t", 0): Errors.NONE}
    assert h.coordinator.fetch_offsets("g", [("t", 0)]) == (Errors.NONE, {("t", 0): None})
    assert h.coordinator.has_pending_offsets("g", "t", 0)
    # the batch on disk is transactional, of producer 77
    part = h.manager.replica_manager.get_partition(GROUP_METADATA_TOPIC_NAME, h.coordinator.partition_for("g"))
    batch = list(part.fetch_records(0, 1 << 20, "log_end").records.batches())[-1]
    assert batch.is_transactional and batch.producer_id == 77 and batch.producer_epoch == 0
    _write_marker(h, "g", 77, 0, commit=True)
    h.coordinator.complete_transaction(77, h.coordinator.partition_for("g"), committed=True)
    _, found = h.coordinator.fetch_offsets("g", [("t", 0)])
    assert found[("t", 0)].offset == 5 and not h.coordinator.has_pending_offsets("g", "t", 0)
    h.coordinator.commit_transactional_offsets("g", 77, 0, "", None, -1, {("t", 0): (9, -1, "")})
    _write_marker(h, "g", 77, 0, commit=False)
    h.coordinator.complete_transaction(77, h.coordinator.partition_for("g"), committed=False)
    assert h.coordinator.fetch_offsets("g", [("t", 0)])[1][("t", 0)].offset == 5


def test_transactional_offsets_reloaded_as_kafka_reads_them(h):
    """After a restart: a transaction with its COMMIT marker in the log is visible, an aborted one is not, and one
    without a marker yet stays pending until its coordinator decides."""
    h.manager.create_topic("t", 3)
    for pid, partition in ((1, 0), (2, 1), (3, 2)):
        h.coordinator.commit_transactional_offsets("g", pid, 0, "", None, -1, {("t", partition): (10 + pid, -1, "")})
    _write_marker(h, "g", 1, 0, commit=True)
    _write_marker(h, "g", 2, 0, commit=False)
    h.restart()
    _, found = h.coordinator.fetch_offsets("g", [("t", 0), ("t", 1), ("t", 2)])
    assert found[("t", 0)].offset == 11 and found[("t", 1)] is None and found[("t", 2)] is None
    assert h.coordinator.has_pending_offsets("g", "t", 2) and not h.coordinator.has_pending_offsets("g", "t", 1)
    _write_marker(h, "g", 3, 0, commit=True)
    h.coordinator.complete_transaction(3, h.coordinator.partition_for("g"), committed=True)
    assert h.coordinator.fetch_offsets("g", [("t", 2)])[1][("t", 2)].offset == 13
