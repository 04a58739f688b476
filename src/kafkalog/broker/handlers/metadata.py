"""Metadata (key 3): this broker, the cluster id, and every partition led by this broker; auto-creates topics."""

from __future__ import annotations

import functools
import uuid
from typing import TYPE_CHECKING

from ...errors import InvalidTopicError, TopicExistsError, UnknownTopicOrPartitionError
from ...logdir import parse_uuid, validate_topic_name
from ...manager import TopicPartition
from ...storage import metadata_changes
from ..protocol import (
    INVALID_TOPIC_EXCEPTION,
    LEADER_NOT_AVAILABLE,
    NONE,
    TOPIC_AUTHORIZATION_FAILED,
    UNKNOWN_TOPIC_ID,
    UNKNOWN_TOPIC_OR_PARTITION,
    MetadataResponse,
    Response,
    error_code,
)
from ..security.acl import CLUSTER_NAME, allowed, authorized_operations, cluster_allowed
from ..security.context import CURRENT
from .common import log
from .metadata_encoding import TopicEntries, encode_response, encode_topic, with_operations

if TYPE_CHECKING:
    from ..cluster.state import ClusterView

Broker = MetadataResponse.MetadataResponseBroker
Topic = MetadataResponse.MetadataResponseTopic
Partition = Topic.MetadataResponsePartition
ZERO_UUID = uuid.UUID(int=0)
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})


def topic_uuid(text: str | None) -> uuid.UUID:
    return uuid.UUID(bytes=parse_uuid(text)) if text else ZERO_UUID


@functools.lru_cache(maxsize=1 << 16)
def _partition_answer(
    node: int, index: int, leader_epoch: int, isr: tuple[int, ...], offline: bool, led: bool = True
) -> Partition:
    """One partition's answer. The same few values repeat across requests: an all-topics answer of a broker with
    10,000 partitions builds each message object once, not per request (they are only read by the encoder).

    A partition with no leader is LEADER_NOT_AVAILABLE with leader -1, as Kafka answers one (its metadata cache's
    getPartitionMetadata): a replica in a log dir that failed is offline, and with it the partition's only
    leader (Kafka's controller then lists the replica in offline_replicas, until a restart); a partition being
    added (its log registered, its replica not yet made leader) or deleted has no leader for that moment."""
    available = led and not offline
    return Partition(
        error_code=NONE if available else LEADER_NOT_AVAILABLE,
        partition_index=index,
        leader_id=node if available else -1,
        leader_epoch=leader_epoch,
        replica_nodes=[node],
        isr_nodes=list(isr),
        offline_replicas=[node] if offline else [],
    )


def _topic(name: str, topic_id: str | None, partitions: list) -> Topic:
    """A topic's metadata answer, from its stored id (text) and its partitions' answers."""
    return Topic(
        error_code=NONE,
        name=name,
        topic_id=topic_uuid(topic_id),
        is_internal=name in INTERNAL_TOPICS,
        partitions=partitions,
    )


def _local_state(broker, name: str) -> tuple:
    """What a topic's answer shows of this node's logs, as a comparable value: (node, topic id, each partition's
    (index, leader epoch, ISR, offline, led)). UnknownTopicOrPartitionError when the topic does not exist.

    A partition in the log manager's index whose replica is not (or no longer) in the replica manager is being
    added or deleted (LogManager registers a log before making its replica leader, and deletes the replica
    first): it is answered with no leader for that moment, not as a reason to call the whole topic unknown."""
    topic_id, tps = broker.log_manager.topic_id_and_partitions(name)
    node = broker.node_id
    single = (node,)
    get = broker.replica_manager.partition
    partitions = []
    for tp in tps:
        view = get(tp)
        if view is None:
            partitions.append((tp.partition, -1, (), False, False))
            continue
        isr = view.isr
        partitions.append(
            (
                tp.partition,
                view.leader_epoch,
                single if isr == {node} else tuple(sorted(isr)),
                view.log.is_offline,
                view.leader_replica_id == node,
            )
        )
    return node, topic_id, tuple(partitions)


def _local_topic_of(name: str, state: tuple) -> Topic:
    """The answer of a topic of this node's logs in ``state`` (``_local_state``): every partition led by this node,
    with itself as the only replica."""
    node, topic_id, partitions = state
    return _topic(name, topic_id, [_partition_answer(node, *p) for p in partitions])


def describe(broker, name: str) -> Topic:
    """One topic's metadata: every partition led by this node, with itself as the only replica."""
    return _local_topic_of(name, _local_state(broker, name))


def _topic_by_id(broker, topic_id, version: int, view: ClusterView | None = None) -> tuple[str | None, bytes | Topic]:
    """Metadata v10+ by topic id (KIP-516; KIP-848 consumers look up their assigned topics so): the topic's name
    and encoded entry (from the ZooKeeper cluster's ``view``, else, None, this node's logs), or no name and
    UNKNOWN_TOPIC_ID (TOPIC_AUTHORIZATION_FAILED without DESCRIBE on it)."""
    entries = topic_entries(broker)
    if view is None:
        stamp = metadata_changes.stamp()
        names = entries.names_by_id(stamp, lambda: _names_by_id(broker))
    else:
        stamp = view.stamp or None
        names = entries.names_by_id(stamp, lambda: _cluster_names_by_id(view)) if stamp else _cluster_names_by_id(view)
    name = names.get(topic_id)
    if name is not None and not allowed(broker, "DESCRIBE", "TOPIC", name):
        return None, Topic(
            error_code=TOPIC_AUTHORIZATION_FAILED, name=None, topic_id=topic_id, is_internal=False, partitions=[]
        )
    found = None if name is None else _entry(broker, name, view, version, stamp)
    if found is None:
        return None, Topic(
            error_code=UNKNOWN_TOPIC_ID, name=None, topic_id=topic_id or ZERO_UUID, is_internal=False, partitions=[]
        )
    return name, found


def _cluster_names_by_id(view: ClusterView) -> dict[uuid.UUID, str]:
    """Every topic of the ZooKeeper cluster's ``view`` with an id, by its id."""
    return {topic_uuid(a.topic_id): name for name, a in view.topics.items() if a.topic_id}


def _names_by_id(broker) -> dict[uuid.UUID, str]:
    """Every topic of this node's logs by its id (read from the topic index, no log)."""
    names = {}
    for name in broker.log_manager.topics():
        try:
            names[topic_uuid(broker.log_manager.topic_id_and_partitions(name)[0])] = name
        except UnknownTopicOrPartitionError:
            continue
    return names


def _error_topic(name: str, code: int) -> Topic:
    return Topic(error_code=code, name=name, topic_id=ZERO_UUID, is_internal=False, partitions=[])


def _cluster_state(view: ClusterView, name: str) -> tuple | None:
    """What a topic's answer shows of the ZooKeeper cluster's ``view``, as a comparable value: (topic id, each
    partition's (index, error, leader, epoch, replicas, ISR, offline replicas)); None if the topic is unknown.

    As Kafka's brokers answer from their metadata cache (ZkMetadataCache.getPartitionMetadata): a partition is
    known once it has a state (the controller sends it to the brokers after writing its state znode, which here
    the brokers watch), a topic once one of its partitions is (a topic whose partitions have no state yet, just
    created, is unknown: LEADER_NOT_AVAILABLE when Metadata may create it, as Kafka's auto-creation answers a
    topic that exists), and a partition whose leader is not a live broker is LEADER_NOT_AVAILABLE with leader
    -1 (its epoch, replicas and ISR as they are)."""
    assignment = view.topics.get(name)
    if assignment is None:
        return None
    live = view.brokers
    states = view.states
    partitions = []
    for p, replicas in sorted(assignment.partitions.items()):
        state = states.get(TopicPartition(name, p))
        if state is None:
            continue
        led = state.leader in live
        partitions.append(
            (
                p,
                NONE if led else LEADER_NOT_AVAILABLE,
                state.leader if led else -1,
                state.leader_epoch,
                tuple(replicas),
                tuple(state.isr),
                tuple(r for r in replicas if r not in live),
            )
        )
    if not partitions:
        return None
    return assignment.topic_id, tuple(partitions)


def _cluster_topic_of(name: str, state: tuple) -> Topic:
    """A topic as the ZooKeeper cluster has it (``_cluster_state``): each partition's leader, epoch, replicas and
    ISR, and the replicas on no live broker as offline (LEADER_NOT_AVAILABLE while a partition has no leader)."""
    topic_id, partitions = state
    return _topic(
        name,
        topic_id,
        [
            Partition(
                error_code=error,
                partition_index=p,
                leader_id=leader,
                leader_epoch=epoch,
                replica_nodes=list(replicas),
                isr_nodes=list(isr),
                offline_replicas=list(offline),
            )
            for p, error, leader, epoch, replicas, isr, offline in partitions
        ],
    )


def topic_entries(broker) -> TopicEntries:
    """The encoded topic entries of ``broker``'s Metadata answers (made at its first Metadata request, and kept
    on the broker object: they live and die with it)."""
    entries = getattr(broker, "metadata_topic_entries", None)
    if entries is None:
        entries = broker.metadata_topic_entries = TopicEntries()
    return entries


def _entry(broker, name: str, view: ClusterView | None, version: int, stamp: int | None = None) -> bytes | None:
    """Topic ``name``'s encoded entry at ``version`` (from the ZooKeeper cluster's ``view``, else, None, this
    node's logs), encoded anew only if its state changed since it was cached; None if it does not exist.

    An entry whose state was checked under the current stamp is answered without reading the topic's partitions
    again: the ``view``'s own stamp (cluster/state.ClusterView.stamp: 0, never stamped, checks every time), or
    ``stamp`` for this node's logs, metadata_changes.stamp() read at the start of the request."""
    entries = topic_entries(broker)
    if view is not None:
        stamp = view.stamp or None
    found = entries.current(name, stamp, version)
    if found is not None:
        return found
    if view is not None:
        cluster_state = _cluster_state(view, name)
        if cluster_state is None:
            entries.discard(name)
            return None
        return entries.entry(
            name, ("cluster", cluster_state), lambda: _cluster_topic_of(name, cluster_state), version, stamp
        )
    try:
        local_state = _local_state(broker, name)
    except UnknownTopicOrPartitionError:
        entries.discard(name)
        return None
    return entries.entry(name, ("local", local_state), lambda: _local_topic_of(name, local_state), version, stamp)


async def _topic_or_error(
    broker, name: str, allow_auto_create: bool, view: ClusterView | None, version: int
) -> bytes | Topic:
    """A topic named in the request: its encoded entry at ``version`` (from the ZooKeeper cluster's ``view``,
    else, None, this node's logs), created first when auto-creation is allowed, or the error Kafka answers (a
    Topic)."""
    # Kafka: a topic named in the request without DESCRIBE is TOPIC_AUTHORIZATION_FAILED, whether it exists or not.
    if not allowed(broker, "DESCRIBE", "TOPIC", name):
        return _error_topic(name, TOPIC_AUTHORIZATION_FAILED)
    try:
        validate_topic_name(name)
    except InvalidTopicError:
        return _error_topic(name, INVALID_TOPIC_EXCEPTION)
    found = _entry(broker, name, view, version, None if view is not None else metadata_changes.stamp())
    if found is not None:
        return found
    if not (allow_auto_create and broker.config.auto_create_topics_enable):
        return _error_topic(name, UNKNOWN_TOPIC_OR_PARTITION)
    if not (cluster_allowed(broker, "CREATE") or allowed(broker, "CREATE", "TOPIC", name)):
        return _error_topic(name, TOPIC_AUTHORIZATION_FAILED)
    try:
        if view is not None:
            replication = broker.cluster.settings.default_replication_factor
            await broker.cluster.create_topic(name, broker.config.num_partitions, replication, {}, False)
        else:
            broker.auto_create_topic(name)
    except TopicExistsError:
        pass
    except Exception as e:
        log.warning("Auto-creation of topic %s failed: %s", name, e)
        return _error_topic(name, error_code(e))
    # As Kafka answers a topic it just created on a cluster: LEADER_NOT_AVAILABLE until its leaders are elected.
    if view is not None:
        return _error_topic(name, LEADER_NOT_AVAILABLE)
    return _entry(broker, name, None, version) or _error_topic(name, UNKNOWN_TOPIC_OR_PARTITION)


async def _handle_cluster(broker, header, request) -> Response:
    version = header.api_version
    await broker.cluster.wait_ready()
    view = broker.cluster.view
    topics: list[tuple[str | None, bytes | Topic]]
    if request.topics is None or (version == 0 and not request.topics):
        names = sorted(view.topics)
        topics = [
            (name, t)
            for name in names
            if allowed(broker, "DESCRIBE", "TOPIC", name, False) and (t := _entry(broker, name, view, version))
        ]
        _forget_deleted(broker, names)
    else:
        allow = request.allow_auto_topic_creation if version >= 4 else True
        topics = [
            _topic_by_id(broker, t.topic_id, version, view)
            if t.name is None and version >= 10
            else (t.name, await _topic_or_error(broker, t.name or "", allow, view, version))
            for t in request.topics
        ]
    # Each broker's endpoint on the listener this request came in on (Kafka leaves out brokers without it).
    listener = CURRENT.get().listener
    brokers = [
        Broker(node_id=b.broker_id, host=endpoint[0], port=endpoint[1], rack=b.rack)
        for b in view.brokers.values()
        if (endpoint := b.endpoint_for(listener)) is not None
    ]
    if broker.node_id not in view.brokers:
        host, port = broker.advertised_endpoint()
        brokers.append(Broker(node_id=broker.node_id, host=host, port=port, rack=None))
    response = MetadataResponse(
        version=version,
        throttle_time_ms=0,
        brokers=sorted(brokers, key=lambda b: b.node_id),
        cluster_id=broker.cluster_id,
        controller_id=view.controller_id,
        topics=[],
    )
    return _answer(broker, request, response, version, topics)


async def handle(broker, header, request) -> Response:
    if getattr(broker, "cluster", None) is not None:
        return await _handle_cluster(broker, header, request)
    version = header.api_version
    topics: list[tuple[str | None, bytes | Topic]]
    if request.topics is None or (version == 0 and not request.topics):
        # Every topic the principal may DESCRIBE; the others are left out, as if they did not exist. A topic
        # deleted meanwhile (between the listing and its lookup) is left out too.
        stamp = metadata_changes.stamp()  # before anything is read
        names = broker.log_manager.topics()
        topics = [
            (n, t)
            for n in names
            if allowed(broker, "DESCRIBE", "TOPIC", n, False) and (t := _entry(broker, n, None, version, stamp))
        ]
        _forget_deleted(broker, names)
    else:
        allow = request.allow_auto_topic_creation if version >= 4 else True
        topics = [
            _topic_by_id(broker, t.topic_id, version)
            if t.name is None and version >= 10
            else (t.name, await _topic_or_error(broker, t.name or "", allow, None, version))
            for t in request.topics
        ]
    host, port = broker.advertised_endpoint()
    response = MetadataResponse(
        version=version,
        throttle_time_ms=0,
        brokers=[Broker(node_id=broker.node_id, host=host, port=port, rack=None)],
        cluster_id=broker.cluster_id,
        controller_id=broker.node_id,
        topics=[],
    )
    return _answer(broker, request, response, version, topics)


def _forget_deleted(broker, names: list[str]) -> None:
    """Drop the cached entries of topics not in ``names`` (every topic that exists), once there are more."""
    entries = topic_entries(broker)
    if len(entries) > len(names):
        entries.retain(set(names).__contains__)


def _answer(
    broker, request, response: MetadataResponse, version: int, topics: list[tuple[str | None, bytes | Topic]]
) -> Response:
    """``response`` (with no topic) at ``version`` with ``topics`` (each a topic's name, or None when asked by
    id, and its encoded entry or its Topic, encoded here), and the authorized operations the request asks for
    (v8+, as Kafka's handleTopicMetadataRequest): the principal's on each topic it may describe (not on a topic
    refused or unknown by id) and, in v8-10, on the cluster (none without DESCRIBE on it)."""
    operations = version >= 8 and request.include_topic_authorized_operations
    entries = []
    for name, answer in topics:
        if isinstance(answer, bytes):
            if operations and name is not None:
                answer = with_operations(answer, authorized_operations(broker, "TOPIC", name), version)
            entries.append(answer)
            continue
        if operations and answer.name is not None and answer.error_code not in _NO_OPERATIONS:
            answer.authorized_operations = authorized_operations(broker, "TOPIC", answer.name)
        entries.append(encode_topic(answer, version))
    if 8 <= version <= 10 and request.include_cluster_authorized_operations:
        response.authorized_operations = (
            authorized_operations(broker, "CLUSTER", CLUSTER_NAME) if cluster_allowed(broker, "DESCRIBE") else set()
        )
    return Response([encode_response(response, version, entries)])


# answers whose authorized operations Kafka leaves unset: topics the principal may not describe (or create), and
# topics asked by an id no topic has
_NO_OPERATIONS = frozenset({TOPIC_AUTHORIZATION_FAILED, UNKNOWN_TOPIC_ID})
