"""CreateTopics (key 19), DeleteTopics (key 20) and CreatePartitions (key 37), through the log manager."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from ...errors import UnknownTopicOrPartitionError
from ...logdir import validate_topic_name
from ..protocol import (
    INVALID_PARTITIONS,
    INVALID_REPLICATION_FACTOR,
    INVALID_REQUEST,
    NONE,
    POLICY_VIOLATION,
    TOPIC_AUTHORIZATION_FAILED,
    UNKNOWN_TOPIC_ID,
    CreatePartitionsResponse,
    CreateTopicsResponse,
    DeleteTopicsResponse,
    Response,
    error_code,
    error_message,
)
from ..security.acl import allowed, cluster_allowed
from .common import log
from .metadata import ZERO_UUID, topic_uuid

_DENIED = "Authorization failed."

Created = CreateTopicsResponse.CreatableTopicResult
Deleted = DeleteTopicsResponse.DeletableTopicResult


def _refused(name: str, code: int, message: str) -> Created:
    """A CreateTopics answer for a topic refused with ``code``: no id, no partitions, no configs."""
    return Created(
        name=name,
        topic_id=ZERO_UUID,
        error_code=code,
        error_message=message,
        num_partitions=-1,
        replication_factor=-1,
        configs=None,
    )


def _create_one(broker, topic, validate_only: bool) -> Created:
    partitions = topic.num_partitions if topic.num_partitions != -1 else broker.config.num_partitions
    replication = (
        topic.replication_factor if topic.replication_factor != -1 else broker.config.default_replication_factor
    )

    def failed(code: int, message: str) -> Created:
        return _refused(topic.name, code, message)

    if not (cluster_allowed(broker, "CREATE") or allowed(broker, "CREATE", "TOPIC", topic.name)):
        return failed(TOPIC_AUTHORIZATION_FAILED, _DENIED)
    if topic.assignments:
        return failed(INVALID_REQUEST, "Replica assignments are not supported by this single-node broker")
    if replication != 1:
        return failed(
            INVALID_REPLICATION_FACTOR,
            f"Unable to replicate the partition {replication} time(s): The target replication factor of "
            f"{replication} cannot be reached because only 1 broker(s) are registered.",
        )
    configs = {c.name: c.value for c in topic.configs}
    try:
        validate_topic_name(topic.name)
        if validate_only:
            from ...storage.config import LogConfig

            LogConfig(configs, broker=broker.config.log)
            if topic.name in broker.log_manager.topics():
                from ...errors import TopicExistsError

                raise TopicExistsError(f"Topic '{topic.name}' already exists.")
            topic_id = ZERO_UUID
        else:
            description = broker.log_manager.create_topic(topic.name, partitions, configs)
            topic_id = topic_uuid(description.topic_id)
            log.info("Created topic %s with %d partition(s) and configs %s", topic.name, partitions, configs)
    except Exception as e:
        return failed(error_code(e), error_message(e))
    return Created(
        name=topic.name,
        topic_id=topic_id,
        error_code=NONE,
        error_message=None,
        num_partitions=partitions,
        replication_factor=1,
        configs=[],
    )


async def _create_in_cluster(broker, topic, validate_only: bool) -> Created:
    """CreateTopics in ZooKeeper mode: Kafka's rack-unaware assignment over the registered brokers, written to
    ZooKeeper; answered once the controller has elected every partition's leader (or after 10 s regardless)."""
    partitions = topic.num_partitions if topic.num_partitions != -1 else broker.config.num_partitions
    replication = (
        topic.replication_factor
        if topic.replication_factor != -1
        else broker.cluster.settings.default_replication_factor
    )
    configs = {c.name: c.value for c in topic.configs}

    def failed(code: int, message: str) -> Created:
        return _refused(topic.name, code, message)

    if not (cluster_allowed(broker, "CREATE") or allowed(broker, "CREATE", "TOPIC", topic.name)):
        return failed(TOPIC_AUTHORIZATION_FAILED, _DENIED)
    given = {a.partition_index: list(a.broker_ids) for a in topic.assignments} if topic.assignments else None
    if given and (topic.num_partitions != -1 or topic.replication_factor != -1):
        return failed(
            INVALID_REQUEST,
            "Both numPartitions or replicationFactor and replicasAssignments were set. Both cannot be used at the "
            "same time.",
        )
    if given:
        partitions, replication = len(given), len(next(iter(given.values())))
    try:
        assignment = await broker.cluster.create_topic(
            topic.name, partitions, replication, configs, validate_only, given
        )
        if not validate_only:
            log.info("Created topic %s: assignment %s, configs %s", topic.name, assignment.partitions, configs)
            await broker.cluster.wait_for_topic(topic.name)
    except Exception as e:
        return failed(error_code(e), error_message(e))
    return Created(
        name=topic.name,
        topic_id=topic_uuid(assignment.topic_id) if not validate_only else ZERO_UUID,
        error_code=NONE,
        error_message=None,
        num_partitions=partitions,
        replication_factor=replication,
        configs=[],
    )


# Kafka's controller refuses a request that would create more partitions than this (ReplicationControlManager.
# MAX_PARTITIONS_PER_BATCH, QuorumController's MAX_RECORDS_PER_USER_OP): one request asking for 2^31 partitions
# must not hold the broker while it creates their logs.
MAX_PARTITIONS_PER_BATCH = 10_000


def _partitions_requested(broker, topics) -> int:
    """How many partitions a CreateTopics request asks for (Kafka's validateTotalNumberOfPartitions)."""
    total = 0
    for topic in topics:
        if topic.assignments:
            total += len(topic.assignments)
        elif topic.num_partitions == -1:
            total += broker.config.num_partitions
        elif topic.num_partitions > 0:
            total += topic.num_partitions
    return total


def _partitions_added(broker, topics) -> int:
    """How many new partitions a CreatePartitions request asks for (the topics' growth; unknown topics count 0)."""
    total = 0
    for topic in topics:
        if getattr(broker, "cluster", None) is not None:
            assignment = broker.cluster.view.topics.get(topic.name)
            current = len(assignment.partitions) if assignment is not None else topic.count
        else:
            try:
                current = len(broker.log_manager.describe_topic(topic.name).partitions)
            except UnknownTopicOrPartitionError:
                current = topic.count
        total += max(0, topic.count - current)
    return total


async def _each_topic(broker, request, local: Callable, clustered: Callable) -> list:
    """One answer per topic of a CreateTopics or CreatePartitions request: through ZooKeeper on a cluster
    (``clustered``, awaited), through the log manager on a single node (``local``, in a worker thread: the thread
    runs in a copy of this request's context, so the ACL checks see its principal)."""
    validate_only = bool(request.validate_only)
    if getattr(broker, "cluster", None) is not None:
        return [await clustered(broker, t, validate_only) for t in request.topics]
    return [await asyncio.to_thread(local, broker, t, validate_only) for t in request.topics]


async def handle_create(broker, header, request) -> Response:
    version = header.api_version
    if _partitions_requested(broker, request.topics) > MAX_PARTITIONS_PER_BATCH:
        message = "Excessively large number of partitions per request."
        results = [_refused(t.name, POLICY_VIOLATION, message) for t in request.topics]
        return Response.of(CreateTopicsResponse(version=version, throttle_time_ms=0, topics=results), version)
    # Off the event loop on a single node (Kafka's controller creates topics on a thread of its own): a topic's
    # directories, files and state take file-system calls and fsyncs, and other clients' requests must not wait.
    results = await _each_topic(broker, request, _create_one, _create_in_cluster)
    return Response.of(CreateTopicsResponse(version=version, throttle_time_ms=0, topics=results), version)


async def _delete_in_cluster(broker, request, version: int, names: list[str | None]) -> list[Deleted]:
    """DeleteTopics in ZooKeeper mode: each topic marked under /admin/delete_topics, answered once the controller
    has had every replica deleted (or REQUEST_TIMED_OUT after the request's timeout, the deletion going on)."""
    view = broker.cluster.view
    ids = {topic_uuid(a.topic_id): t for t, a in view.topics.items() if a.topic_id}
    if version >= 6:  # a topic may be named by its id alone
        names = [t.name if t.name is not None else ids.get(t.topic_id) for t in request.topics]
    answers: dict[int, Deleted] = {}
    wanted: dict[str, int] = {}
    for i, name in enumerate(names):
        if name is None:
            answers[i] = Deleted(
                name=None, topic_id=ZERO_UUID, error_code=UNKNOWN_TOPIC_ID, error_message="This topic id is unknown."
            )
        elif not allowed(broker, "DELETE", "TOPIC", name):
            answers[i] = Deleted(
                name=name, topic_id=ZERO_UUID, error_code=TOPIC_AUTHORIZATION_FAILED, error_message=_DENIED
            )
        else:
            wanted[name] = i
    outcome = await broker.cluster.delete_topics(list(wanted), request.timeout_ms)
    for name, i in wanted.items():
        error = outcome.get(name)
        assignment = view.topics.get(name)
        topic_id = topic_uuid(assignment.topic_id) if assignment is not None and assignment.topic_id else ZERO_UUID
        if error is None:
            log.info("Deleted topic %s", name)
        code, message = error_code(error), error_message(error)
        answers[i] = Deleted(name=name, topic_id=topic_id, error_code=code, error_message=message)
    return [answers[i] for i in range(len(names))]


def _delete_one(broker, name: str | None) -> Deleted:
    if name is None:
        return Deleted(
            name=None,
            topic_id=ZERO_UUID,
            error_code=error_code(UnknownTopicOrPartitionError("")),
            error_message="Deleting topics by id is not supported yet",
        )
    if not allowed(broker, "DELETE", "TOPIC", name):
        return Deleted(name=name, topic_id=ZERO_UUID, error_code=TOPIC_AUTHORIZATION_FAILED, error_message=_DENIED)
    try:
        topic_id = topic_uuid(broker.log_manager.describe_topic(name).topic_id)
        broker.log_manager.delete_topic(name)
        log.info("Deleted topic %s", name)
        return Deleted(name=name, topic_id=topic_id, error_code=NONE, error_message=None)
    except Exception as e:
        return Deleted(name=name, topic_id=ZERO_UUID, error_code=error_code(e), error_message=error_message(e))


async def handle_delete(broker, header, request) -> Response:
    version = header.api_version
    names = [t.name for t in request.topics] if version >= 6 else list(request.topic_names)
    if getattr(broker, "cluster", None) is not None:
        results = await _delete_in_cluster(broker, request, version, names)
        return Response.of(DeleteTopicsResponse(version=version, throttle_time_ms=0, responses=results), version)
    results = [_delete_one(broker, name) for name in names]
    return Response.of(DeleteTopicsResponse(version=version, throttle_time_ms=0, responses=results), version)


INVALID_REPLICA_ASSIGNMENT = 39


def _grow_one(broker, topic, validate_only: bool):
    Result = CreatePartitionsResponse.CreatePartitionsTopicResult
    if not allowed(broker, "ALTER", "TOPIC", topic.name):
        return Result(name=topic.name, error_code=TOPIC_AUTHORIZATION_FAILED, error_message=_DENIED)
    try:
        if topic.assignments and any(ids != [broker.node_id] for ids in (a.broker_ids for a in topic.assignments)):
            return Result(
                name=topic.name,
                error_code=INVALID_REPLICA_ASSIGNMENT,
                error_message=f"Every new partition must be assigned to this broker alone ({broker.node_id})",
            )
        if validate_only:
            current = len(broker.log_manager.describe_topic(topic.name).partitions)
            if topic.count <= current:
                return Result(
                    name=topic.name,
                    error_code=INVALID_PARTITIONS,
                    error_message=f"Topic currently has {current} partitions; {topic.count} is not an increase.",
                )
        else:
            broker.log_manager.create_partitions(topic.name, topic.count)
            log.info("Topic %s now has %d partitions", topic.name, topic.count)
    except Exception as e:
        return Result(name=topic.name, error_code=error_code(e), error_message=error_message(e))
    return Result(name=topic.name, error_code=NONE, error_message=None)


async def _grow_in_cluster(broker, topic, validate_only: bool):
    """CreatePartitions in ZooKeeper mode: the new partitions' replicas (given, or Kafka's assignment continuing
    the topic's) added to /brokers/topics/T; the controller elects their leaders and the replicas create logs."""
    Result = CreatePartitionsResponse.CreatePartitionsTopicResult
    if not allowed(broker, "ALTER", "TOPIC", topic.name):
        return Result(name=topic.name, error_code=TOPIC_AUTHORIZATION_FAILED, error_message=_DENIED)
    assignments = [list(a.broker_ids) for a in topic.assignments] if topic.assignments else None
    try:
        await broker.cluster.create_partitions(topic.name, topic.count, assignments, validate_only)
    except Exception as e:
        return Result(name=topic.name, error_code=error_code(e), error_message=error_message(e))
    if not validate_only:
        log.info("Topic %s now has %d partitions", topic.name, topic.count)
    return Result(name=topic.name, error_code=NONE, error_message=None)


async def handle_create_partitions(broker, header, request) -> Response:
    version = header.api_version
    if _partitions_added(broker, request.topics) > MAX_PARTITIONS_PER_BATCH:
        Result = CreatePartitionsResponse.CreatePartitionsTopicResult
        message = "Unable to perform excessively large batch operation."
        results = [Result(name=t.name, error_code=POLICY_VIOLATION, error_message=message) for t in request.topics]
        return Response.of(CreatePartitionsResponse(version=version, throttle_time_ms=0, results=results), version)
    # Off the event loop, as CreateTopics: the new partitions' directories and files take file-system calls and
    # fsyncs (10,000 of them hold a loaded machine for minutes; the protocol fuzzer found 4,099 holding it 90 s).
    results = await _each_topic(broker, request, _grow_one, _grow_in_cluster)
    return Response.of(CreatePartitionsResponse(version=version, throttle_time_ms=0, results=results), version)
