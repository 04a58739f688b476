"""The group APIs (FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch,
OffsetDelete, ListGroups, DescribeGroups, DeleteGroups, ConsumerGroupHeartbeat, ConsumerGroupDescribe) over
kafkalog.coordinator.group.

Each handler reads the decoded request, asks the broker's GroupCoordinator and encodes its answer; the
decisions (and the error codes) are the coordinator's. JoinGroup and SyncGroup may wait (for the other members
to rejoin, for the leader's assignment): the coordinator answers through a callback, which resolves an asyncio
future the handler awaits, so a waiting member holds no thread. ``LoopScheduler`` gives the coordinator its
timers on the event loop, where every handler also runs: the coordinator is only ever used from that thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextvars import ContextVar

from kafka.protocol.admin import (
    DeleteGroupsResponse,
    DescribeGroupsResponse,
    ListGroupsResponse,
)
from kafka.protocol.consumer import (
    HeartbeatResponse,
    JoinGroupResponse,
    LeaveGroupResponse,
    OffsetCommitResponse,
    OffsetDeleteResponse,
    OffsetFetchResponse,
    SyncGroupResponse,
)
from kafka.protocol.metadata import FindCoordinatorResponse

from ...coordinator.group import Errors, JoinResult, SyncResult
from ...coordinator.group.consumer_group import HeartbeatResult
from ...coordinator.group.coordinator import GROUP_METADATA_TOPIC_NAME
from ...errors import NotLeaderOrFollowerError, UnknownTopicOrPartitionError
from ..messages import ConsumerGroupDescribeResponse, ConsumerGroupHeartbeatResponse
from ..protocol import Response
from ..security.acl import allowed, cluster_allowed
from ..security.context import CURRENT
from .common import describe_each, log, same_named
from .metadata import topic_uuid

# The connection a request came on (set by the router): JoinGroup records the member's client host from it.
CLIENT_ADDRESS: ContextVar[str] = ContextVar("client_address", default="")

GROUP_KEY_TYPE, TRANSACTION_KEY_TYPE = 0, 1
NO_AUTHORIZED_OPERATIONS = None  # kafka-python encodes None as Kafka's "not requested" (INT32 MIN_VALUE)
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)  # the same, for the schemas kafkalog loads itself (broker/messages)


class LoopScheduler:
    """The coordinator's timers on the running event loop: ``schedule_once`` returns a handle with ``cancel()``."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop

    def schedule_once(self, name: str, fn: Callable[[], object], delay_ms: int = 0) -> asyncio.TimerHandle:
        return self.loop.call_later(max(delay_ms, 0) / 1000, self._run, name, fn)

    @staticmethod
    def _run(name: str, fn: Callable[[], object]) -> None:
        try:
            fn()
        except Exception:
            log.exception("Group coordinator task %s failed", name)


async def _wait(register: Callable[[Callable], None]):
    """Run ``register(callback)`` and await the value the coordinator passes to the callback."""
    future = asyncio.get_running_loop().create_future()

    def done(result) -> None:
        if not future.done():
            future.set_result(result)

    register(done)
    return await future


# ----- FindCoordinator (10) ------------------------------------------------------------------------------------
async def _find_in_cluster(broker, key: str) -> tuple[str, int, str | None, int, str, int]:
    """FindCoordinator in a cluster: the leader of the group's __consumer_offsets partition (the topic created on
    first use with offsets.topic.replication.factor replicas)."""
    coordinator = broker.group_coordinator
    cluster = broker.cluster
    config = coordinator.config
    topic_config = {
        "cleanup.policy": "compact",
        "segment.bytes": str(config.offsets_topic_segment_bytes),
        "compression.type": "producer",
    }
    try:
        await cluster.ensure_offsets_topic(
            config.offsets_topic_num_partitions, cluster.settings.offsets_topic_replication_factor, topic_config
        )
    except Exception as e:
        log.warning("FindCoordinator for %s: %s", key, e)
        return key, int(Errors.COORDINATOR_NOT_AVAILABLE), "The coordinator is not available.", -1, "", -1
    found = cluster.coordinator_of(coordinator.partition_for(key), CURRENT.get().listener)
    if found is None:
        return key, int(Errors.COORDINATOR_NOT_AVAILABLE), "The coordinator is not available.", -1, "", -1
    node, host, port = found
    return key, int(Errors.NONE), None, node, host, port


def _offsets_partition_offline(broker, group_id: str) -> bool:
    """Whether the group's __consumer_offsets partition is here and in a failed log dir: it then has no leader,
    and Kafka answers FindCoordinator with COORDINATOR_NOT_AVAILABLE until it has one again."""
    coordinator = broker.group_coordinator
    try:
        partition = broker.replica_manager.get_partition(GROUP_METADATA_TOPIC_NAME, coordinator.partition_for(group_id))
    except UnknownTopicOrPartitionError:
        return False
    return partition.log.is_offline


async def _find_transaction_coordinator(broker, key: str) -> tuple[str, int, str | None, int, str, int]:
    """FindCoordinator(TRANSACTION) on a ZooKeeper cluster: the leader of the id's __transaction_state partition
    (the topic created on first use with transaction.state.log.replication.factor replicas)."""
    txn_cluster = broker.txn_cluster
    try:
        await txn_cluster.ensure_state_topic()
    except Exception as e:
        log.warning("FindCoordinator for transactional id %s: %s", key, e)
        return key, int(Errors.COORDINATOR_NOT_AVAILABLE), "The coordinator is not available.", -1, "", -1
    found = txn_cluster.coordinator_of(key, CURRENT.get().listener)
    if found is None:
        return key, int(Errors.COORDINATOR_NOT_AVAILABLE), "The coordinator is not available.", -1, "", -1
    node, host, port = found
    return key, int(Errors.NONE), None, node, host, port


async def handle_find_coordinator(broker, header, request) -> Response:
    version = header.api_version
    key_type = request.key_type if version >= 1 else GROUP_KEY_TYPE
    keys = list(request.coordinator_keys) if version >= 4 else [request.key]
    host, port = broker.advertised_endpoint()
    answers = []
    for key in keys:
        if key_type == GROUP_KEY_TYPE and not allowed(broker, "DESCRIBE", "GROUP", key):
            answers.append((key, GROUP_AUTHORIZATION_FAILED, "Group authorization failed.", -1, "", -1))
            continue
        if key_type == GROUP_KEY_TYPE and getattr(broker, "cluster", None) is not None:
            answers.append(await _find_in_cluster(broker, key))
            continue
        if key_type == TRANSACTION_KEY_TYPE and not allowed(broker, "DESCRIBE", "TRANSACTIONAL_ID", key):
            denied = "Transactional Id authorization failed."
            answers.append((key, TRANSACTIONAL_ID_AUTHORIZATION_FAILED, denied, -1, "", -1))
            continue
        if key_type == GROUP_KEY_TYPE:
            # Off the event loop: the first one creates __consumer_offsets (50 partitions), as CreateTopics does.
            error = await asyncio.to_thread(broker.group_coordinator.ensure_offsets_topic)
            if error == Errors.NONE and _offsets_partition_offline(broker, key):
                error = Errors.COORDINATOR_NOT_AVAILABLE
            message = None if error == Errors.NONE else "The coordinator is not available."
        elif key_type == TRANSACTION_KEY_TYPE and getattr(broker, "txn_cluster", None) is not None:
            answers.append(await _find_transaction_coordinator(broker, key))
            continue
        elif key_type == TRANSACTION_KEY_TYPE:
            error = await asyncio.to_thread(broker.txn_coordinator.ensure_state_topic)  # created on first use
            message = None if error == 0 else "The coordinator is not available."
        else:
            error, message = Errors.INVALID_REQUEST, f"Unknown coordinator key type {key_type}"
        ok = error == Errors.NONE
        answers.append((key, int(error), message, broker.node_id if ok else -1, host if ok else "", port if ok else -1))
    if version >= 4:
        coordinators = [
            FindCoordinatorResponse.Coordinator(
                key=key, node_id=node, host=h, port=p, error_code=code, error_message=message
            )
            for key, code, message, node, h, p in answers
        ]
        response = FindCoordinatorResponse(version=version, throttle_time_ms=0, coordinators=coordinators)
    else:
        _, code, message, node, h, p = answers[0]
        response = FindCoordinatorResponse(
            version=version, throttle_time_ms=0, error_code=code, error_message=message, node_id=node, host=h, port=p
        )
    return Response.of(response, version)


GROUP_AUTHORIZATION_FAILED = 30
TOPIC_AUTHORIZATION_FAILED = 29
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53


# ----- JoinGroup (11) / SyncGroup (14) / Heartbeat (12) / LeaveGroup (13) --------------------------------------
def _join_response(version: int, result: JoinResult) -> Response:
    members = [
        JoinGroupResponse.JoinGroupResponseMember(member_id=m, group_instance_id=i, metadata=data)
        for m, i, data in result.members
    ]
    protocol_name = result.protocol_name
    if protocol_name is None and version < 7:
        protocol_name = ""  # not nullable before v7
    reported = same_named(result, ("generation_id", "protocol_type", "leader", "skip_assignment", "member_id"))
    response = JoinGroupResponse(
        version=version,
        throttle_time_ms=0,
        error_code=int(result.error),
        protocol_name=protocol_name,
        members=members,
        **reported,
    )
    return Response.of(response, version)


async def handle_join_group(broker, header, request) -> Response:
    version = header.api_version
    coordinator = broker.group_coordinator
    if not allowed(broker, "READ", "GROUP", request.group_id):  # answered as Kafka: the member's id, no generation
        return _join_response(version, JoinResult(GROUP_AUTHORIZATION_FAILED, request.member_id))
    result: JoinResult = await _wait(
        lambda callback: coordinator.join_group(
            request.group_id,
            request.member_id,
            request.group_instance_id if version >= 5 else None,
            header.client_id or "",
            CLIENT_ADDRESS.get(),
            request.rebalance_timeout_ms if version >= 1 else -1,
            request.session_timeout_ms,
            request.protocol_type,
            [(p.name, bytes(p.metadata)) for p in request.protocols],
            callback,
            require_known_member_id=version >= 4,
            supports_skip_assignment=version >= 9,
        )
    )
    return _join_response(version, result)


def _sync_response(version: int, result: SyncResult) -> Response:
    response = SyncGroupResponse(
        version=version,
        throttle_time_ms=0,
        error_code=int(result.error),
        assignment=result.assignment if result.error == Errors.NONE else b"",
        **same_named(result, ("protocol_type", "protocol_name")),
    )
    return Response.of(response, version)


async def handle_sync_group(broker, header, request) -> Response:
    version = header.api_version
    coordinator = broker.group_coordinator
    assignments = {a.member_id: bytes(a.assignment) for a in request.assignments}
    if not allowed(broker, "READ", "GROUP", request.group_id):
        return _sync_response(version, SyncResult(GROUP_AUTHORIZATION_FAILED))
    result: SyncResult = await _wait(
        lambda callback: coordinator.sync_group(
            request.group_id,
            request.generation_id,
            request.member_id,
            request.group_instance_id if version >= 3 else None,
            request.protocol_type if version >= 5 else None,
            request.protocol_name if version >= 5 else None,
            assignments,
            callback,
        )
    )
    return _sync_response(version, result)


async def handle_heartbeat(broker, header, request) -> Response:
    version = header.api_version
    if not allowed(broker, "READ", "GROUP", request.group_id):
        return Response.of(
            HeartbeatResponse(version=version, throttle_time_ms=0, error_code=GROUP_AUTHORIZATION_FAILED), version
        )
    error = broker.group_coordinator.heartbeat(
        request.group_id,
        request.member_id,
        request.group_instance_id if version >= 3 else None,
        request.generation_id,
    )
    return Response.of(HeartbeatResponse(version=version, throttle_time_ms=0, error_code=int(error)), version)


async def handle_leave_group(broker, header, request) -> Response:
    version = header.api_version
    if version >= 3:
        leaving = [(m.member_id, m.group_instance_id) for m in request.members]
    else:
        leaving = [(request.member_id, None)]
    if not allowed(broker, "READ", "GROUP", request.group_id):
        denied = LeaveGroupResponse(version=version, throttle_time_ms=0, error_code=GROUP_AUTHORIZATION_FAILED)
        if version >= 3:
            denied.members = []
        return Response.of(denied, version)
    top, results = broker.group_coordinator.leave_group(request.group_id, leaving)
    if version < 3:  # one member: its error is the response's
        code = int(top) if top != Errors.NONE or not results else int(results[0][2])
        return Response.of(LeaveGroupResponse(version=version, throttle_time_ms=0, error_code=code), version)
    members = [
        LeaveGroupResponse.MemberResponse(member_id=m, group_instance_id=i, error_code=int(e)) for m, i, e in results
    ]
    response = LeaveGroupResponse(version=version, throttle_time_ms=0, error_code=int(top), members=members)
    return Response.of(response, version)


# ----- OffsetCommit (8) / OffsetFetch (9) / OffsetDelete (47) ---------------------------------------------------
CommitTopic = OffsetCommitResponse.OffsetCommitResponseTopic
CommitPartition = CommitTopic.OffsetCommitResponsePartition


async def handle_offset_commit(broker, header, request) -> Response:
    version = header.api_version
    offsets = {}
    denied: dict[tuple[str, int], int] = {}
    group_ok = allowed(broker, "READ", "GROUP", request.group_id)
    for topic in request.topics:
        topic_ok = group_ok and allowed(broker, "READ", "TOPIC", topic.name)
        for p in topic.partitions:
            if not topic_ok:  # Kafka: READ on the group, then READ on each topic
                denied[(topic.name, p.partition_index)] = (
                    GROUP_AUTHORIZATION_FAILED if not group_ok else TOPIC_AUTHORIZATION_FAILED
                )
                continue
            epoch = p.committed_leader_epoch if version >= 6 else -1
            offsets[(topic.name, p.partition_index)] = (p.committed_offset, epoch, p.committed_metadata)
    results = (
        {}
        if not offsets
        else broker.group_coordinator.commit_offsets(
            request.group_id,
            request.member_id,
            request.group_instance_id if version >= 7 else None,
            request.generation_id_or_member_epoch,
            offsets,
            request.retention_time_ms if 2 <= version <= 4 else -1,
        )
    )
    if offsets and getattr(broker, "cluster", None) is not None and any(e == Errors.NONE for e in results.values()):
        results = await _replicated(broker, request.group_id, results)
    results = {**results, **denied}
    topics = [
        CommitTopic(
            name=topic.name,
            partitions=[
                CommitPartition(
                    partition_index=p.partition_index, error_code=int(results[(topic.name, p.partition_index)])
                )
                for p in topic.partitions
            ],
        )
        for topic in request.topics
    ]
    return Response.of(OffsetCommitResponse(version=version, throttle_time_ms=0, topics=topics), version)


async def _replicated(broker, group_id: str, results: dict) -> dict:
    """In a cluster, a commit is answered once the in-sync replicas of the group's partition have it (Kafka appends
    offset commits with acks=-1): COORDINATOR_NOT_AVAILABLE after offsets.commit.timeout.ms, NOT_COORDINATOR if
    leadership moved meanwhile (Kafka's mapping of the append's errors)."""
    from ...manager import TopicPartition

    coordinator = broker.group_coordinator
    tp = TopicPartition("__consumer_offsets", coordinator.partition_for(group_id))
    try:
        end = broker.replica_manager.get_partition(tp.topic, tp.partition).log_end_offset
    except UnknownTopicOrPartitionError:
        return results
    timeout_ms = int(broker.config.props.get("offsets.commit.timeout.ms", 5000))
    error = await broker.cluster.wait_for_replication(tp, end, timeout_ms)
    if error is None:
        return results
    moved = isinstance(error, NotLeaderOrFollowerError)
    failed = Errors.NOT_COORDINATOR if moved else Errors.COORDINATOR_NOT_AVAILABLE
    log.warning("Offset commit of group %s not replicated: %s", group_id, error)
    return {tp_: (failed if e == Errors.NONE else e) for tp_, e in results.items()}


def _fetch_group(
    broker, group_id: str, topics, require_stable: bool = False
) -> tuple[int, list[tuple[str, list[tuple[int, int, int, str, int]]]]]:
    """(group error, [(topic, [(partition, offset, leader epoch, metadata, error)])]) for one group. With
    ``require_stable`` (KIP-447, v7+), a partition whose offset a transaction has yet to decide answers
    UNSTABLE_OFFSET_COMMIT, so a read_committed consumer waits instead of starting from a stale offset."""
    wanted = None if topics is None else [(t.name, p) for t in topics for p in t.partition_indexes]
    if not allowed(broker, "DESCRIBE", "GROUP", group_id):
        return GROUP_AUTHORIZATION_FAILED, [
            (name, [(p, -1, -1, "", GROUP_AUTHORIZATION_FAILED) for p in [q for t, q in wanted or [] if t == name]])
            for name in dict.fromkeys(t for t, _ in wanted or [])
        ]
    error, found = broker.group_coordinator.fetch_offsets(group_id, wanted)
    by_topic: dict[str, list[tuple[int, int, int, str, int]]] = {}
    if error != Errors.NONE:
        for topic, partition in wanted or []:
            by_topic.setdefault(topic, []).append((partition, -1, -1, "", int(error)))
        return int(error), list(by_topic.items())
    for (topic, partition), om in found.items():
        if not allowed(broker, "DESCRIBE", "TOPIC", topic):
            if wanted is not None:  # named: TOPIC_AUTHORIZATION_FAILED; all offsets: left out
                by_topic.setdefault(topic, []).append((partition, -1, -1, "", TOPIC_AUTHORIZATION_FAILED))
            continue
        if require_stable and broker.group_coordinator.has_pending_offsets(group_id, topic, partition):
            by_topic.setdefault(topic, []).append((partition, -1, -1, "", int(Errors.UNSTABLE_OFFSET_COMMIT)))
        elif om is None:
            by_topic.setdefault(topic, []).append((partition, -1, -1, "", 0))
        else:
            by_topic.setdefault(topic, []).append((partition, om.offset, om.leader_epoch, om.metadata, 0))
    return 0, list(by_topic.items())


async def handle_offset_fetch(broker, header, request) -> Response:
    version = header.api_version
    if version >= 8:
        Group = OffsetFetchResponse.OffsetFetchResponseGroup
        Topic = Group.OffsetFetchResponseTopics
        Partition = Topic.OffsetFetchResponsePartitions
        groups = []
        for g in request.groups:
            code, topics = _fetch_group(broker, g.group_id, g.topics, bool(request.require_stable))
            groups.append(
                Group(
                    group_id=g.group_id,
                    error_code=code,
                    topics=[
                        Topic(
                            name=name,
                            partitions=[
                                Partition(
                                    partition_index=p,
                                    committed_offset=o,
                                    committed_leader_epoch=e,
                                    metadata=m,
                                    error_code=c,
                                )
                                for p, o, e, m, c in parts
                            ],
                        )
                        for name, parts in topics
                    ],
                )
            )
        return Response.of(OffsetFetchResponse(version=version, throttle_time_ms=0, groups=groups), version)
    Topic1 = OffsetFetchResponse.OffsetFetchResponseTopic
    Partition1 = Topic1.OffsetFetchResponsePartition
    code, topics = _fetch_group(broker, request.group_id, request.topics, version >= 7 and bool(request.require_stable))
    response = OffsetFetchResponse(
        version=version,
        throttle_time_ms=0,
        error_code=code,
        topics=[
            Topic1(
                name=name,
                partitions=[
                    Partition1(
                        partition_index=p,
                        committed_offset=o,
                        committed_leader_epoch=e,
                        metadata=m,
                        error_code=c if version >= 2 or c else code,
                    )
                    for p, o, e, m, c in parts
                ],
            )
            for name, parts in topics
        ],
    )
    return Response.of(response, version)


async def handle_offset_delete(broker, header, request) -> Response:
    version = header.api_version
    wanted = [(t.name, p.partition_index) for t in request.topics for p in t.partitions]
    if not allowed(broker, "DELETE", "GROUP", request.group_id):
        response = OffsetDeleteResponse(
            version=version, error_code=GROUP_AUTHORIZATION_FAILED, throttle_time_ms=0, topics=[]
        )
        return Response.of(response, version)
    error, results = broker.group_coordinator.delete_offsets(request.group_id, wanted)
    Topic = OffsetDeleteResponse.OffsetDeleteResponseTopic
    Partition = Topic.OffsetDeleteResponsePartition
    topics = []
    if error == Errors.NONE:
        topics = [
            Topic(
                name=t.name,
                partitions=[
                    Partition(partition_index=p.partition_index, error_code=int(results[(t.name, p.partition_index)]))
                    for p in t.partitions
                ],
            )
            for t in request.topics
        ]
    response = OffsetDeleteResponse(version=version, error_code=int(error), throttle_time_ms=0, topics=topics)
    return Response.of(response, version)


# ----- ListGroups (16) / DescribeGroups (15) / DeleteGroups (42) ------------------------------------------------
async def handle_list_groups(broker, header, request) -> Response:
    version = header.api_version
    states = list(request.states_filter or []) if version >= 4 else []
    types = list(request.types_filter or []) if version >= 5 else []
    groups = [
        ListGroupsResponse.ListedGroup(
            group_id=g.group_id, protocol_type=g.protocol_type, group_state=g.state, group_type=g.group_type
        )
        for g in broker.group_coordinator.list_groups(states, types)
        # Kafka: DESCRIBE on the cluster lists every group, else those the principal may DESCRIBE
        if cluster_allowed(broker, "DESCRIBE", False) or allowed(broker, "DESCRIBE", "GROUP", g.group_id, False)
    ]
    response = ListGroupsResponse(version=version, throttle_time_ms=0, error_code=0, groups=groups)
    return Response.of(response, version)


def _described(group_id: str, error: int = 0, state: str = "", protocol_type: str = "", protocol: str = "", members=()):
    """One DescribeGroups entry: the group with its members, or (``error``, or a Dead group) without them."""
    return DescribeGroupsResponse.DescribedGroup(
        error_code=error,
        group_id=group_id,
        group_state=state,
        protocol_type=protocol_type,
        protocol_data=protocol,
        members=[
            DescribeGroupsResponse.DescribedGroup.DescribedGroupMember(
                member_id=m, group_instance_id=i, client_id=c, client_host=h, member_metadata=meta, member_assignment=a
            )
            for m, i, c, h, meta, a in members
        ],
        authorized_operations=NO_AUTHORIZED_OPERATIONS,
    )


async def handle_describe_groups(broker, header, request) -> Response:
    version = header.api_version

    def describe(group_id: str):
        _, d = broker.group_coordinator.describe_group(group_id)
        if d is None:  # before v6, an unknown group is described as Dead, without error
            return _described(group_id, state="Dead")
        return _described(group_id, 0, d.state, d.protocol_type, d.protocol, d.members)

    groups = describe_each(broker, "GROUP", request.groups, GROUP_AUTHORIZATION_FAILED, describe, _described)
    return Response.of(DescribeGroupsResponse(version=version, throttle_time_ms=0, groups=groups), version)


async def handle_delete_groups(broker, header, request) -> Response:
    version = header.api_version
    names = list(request.groups_names)
    permitted = [g for g in names if allowed(broker, "DELETE", "GROUP", g)]
    results = broker.group_coordinator.delete_groups(permitted) if permitted else {}
    results = {g: results.get(g, GROUP_AUTHORIZATION_FAILED) for g in names}
    response = DeleteGroupsResponse(
        version=version,
        throttle_time_ms=0,
        results=[DeleteGroupsResponse.DeletableGroupResult(group_id=g, error_code=int(e)) for g, e in results.items()],
    )
    return Response.of(response, version)


# ----- ConsumerGroupHeartbeat (68, KIP-848) ---------------------------------------------------------------------
class _TopicIds:
    """Topic name <-> topic id, for the heartbeat's partitions (which name topics by id)."""

    def __init__(self, broker) -> None:
        self.log_manager = broker.log_manager
        self._names: dict | None = None

    def id_of(self, name: str):
        return topic_uuid(self.log_manager.topic_id_and_partitions(name)[0])  # no log read: every topic's, per call

    def name_of(self, topic_id) -> str | None:
        if self._names is None:
            self._names = {}
            for name in self.log_manager.topics():
                try:
                    self._names[self.id_of(name)] = name
                except UnknownTopicOrPartitionError:
                    continue
        return self._names.get(topic_id)


def _heartbeat_response(version: int, result: HeartbeatResult, ids: _TopicIds) -> Response:
    Assignment = ConsumerGroupHeartbeatResponse.Assignment
    assignment = None
    if result.assignment is not None:
        assignment = Assignment(
            topic_partitions=[
                Assignment.TopicPartitions(topic_id=ids.id_of(topic), partitions=sorted(partitions))
                for topic, partitions in sorted(result.assignment.items())
            ]
        )
    response = ConsumerGroupHeartbeatResponse(
        version=version,
        throttle_time_ms=0,
        error_code=int(result.error),
        error_message=result.message,
        assignment=assignment,
        **same_named(result, ("member_id", "member_epoch", "heartbeat_interval_ms")),
    )
    return Response.of(response, version)


async def handle_consumer_group_heartbeat(broker, header, request) -> Response:
    version = header.api_version
    ids = _TopicIds(broker)
    if not allowed(broker, "READ", "GROUP", request.group_id):  # as Kafka: READ on the group
        return _heartbeat_response(version, HeartbeatResult(GROUP_AUTHORIZATION_FAILED), ids)
    owned = None
    if request.topic_partitions is not None:
        owned = {}
        for tp in request.topic_partitions:
            name = ids.name_of(tp.topic_id)
            if name is not None and tp.partitions:
                owned.setdefault(name, set()).update(tp.partitions)
    result = broker.group_coordinator.consumer_group_heartbeat(
        request.group_id,
        request.member_id,
        request.member_epoch,
        request.instance_id,
        request.rack_id,
        request.rebalance_timeout_ms,
        request.subscribed_topic_names,
        request.subscribed_topic_regex if version >= 1 else None,
        request.server_assignor,
        owned,
        header.client_id or "",
        CLIENT_ADDRESS.get(),
        version,
    )
    return _heartbeat_response(version, result, ids)


# ----- ConsumerGroupDescribe (69, KIP-848) ----------------------------------------------------------------------
# a described member's fields that report the coordinator's member attributes of the same name
_MEMBER_FIELDS = ("member_id", "instance_id", "rack_id", "member_epoch", "client_id", "client_host")


async def handle_consumer_group_describe(broker, header, request) -> Response:
    """Each group as Kafka's ConsumerGroup.asDescribedGroup: epochs, the assignor, every member with its current
    and target assignment (topics named by id and name); GROUP_ID_NOT_FOUND for classic or unknown groups."""
    version = header.api_version
    Described = ConsumerGroupDescribeResponse.DescribedGroup
    Member = Described.Member
    Assignment = Member.Assignment
    ids = _TopicIds(broker)

    def assignment(partitions) -> object:
        out = []
        for topic, ps in sorted(partitions.items()):
            try:
                topic_id = ids.id_of(topic)
            except UnknownTopicOrPartitionError:
                continue  # as Kafka: a topic no longer in the metadata image is left out
            out.append(Assignment.TopicPartitions(topic_id=topic_id, topic_name=topic, partitions=sorted(ps)))
        return Assignment(topic_partitions=out)

    def failed(group_id: str, error: int, message: str | None = None) -> object:
        return Described(
            error_code=error,
            error_message=message,
            group_id=group_id,
            group_state="",
            group_epoch=0,
            assignment_epoch=0,
            assignor_name="",
            members=[],
            authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
        )

    coordinator = broker.group_coordinator

    def describe(group_id: str) -> object:
        if not group_id:
            return failed(group_id, int(Errors.INVALID_GROUP_ID))
        error, message, group = coordinator.describe_consumer_group(group_id)
        if group is None:
            return failed(group_id, int(error), message)
        members = [
            Member(
                **same_named(m, _MEMBER_FIELDS),
                subscribed_topic_names=list(m.subscribed_topics),
                subscribed_topic_regex=m.subscribed_regex,
                assignment=assignment(m.assigned),
                target_assignment=assignment(group.target.get(m.member_id, {})),
            )
            for m in group.members.values()
        ]
        return Described(
            error_code=0,
            error_message=None,
            group_id=group_id,
            group_state=group.state,
            group_epoch=group.group_epoch,
            assignment_epoch=group.assignment_epoch,
            assignor_name=coordinator.preferred_assignor(group),
            members=members,
            authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
        )

    groups = describe_each(broker, "GROUP", request.group_ids, GROUP_AUTHORIZATION_FAILED, describe, failed)
    return Response.of(ConsumerGroupDescribeResponse(version=version, throttle_time_ms=0, groups=groups), version)
