"""The controller's APIs of a ZooKeeper cluster: ControlledShutdown (key 7, from a stopping broker) and ElectLeaders
(key 43, from kafka-leader-election.sh / ``kafkalog leader-election``), which need the active controller (any other
broker, or a single node, answers NOT_CONTROLLER so that the caller looks it up again); and StopReplica (key 5),
the controller's order to a replica broker to delete its replicas of a topic being deleted."""

from __future__ import annotations

from ...errors import NotControllerError
from ...manager import TopicPartition
from ..messages import ControlledShutdownResponse, StopReplicaResponse
from ..protocol import (
    CLUSTER_AUTHORIZATION_FAILED,
    NONE,
    NOT_CONTROLLER,
    ElectLeadersResponse,
    Response,
    error_code,
    error_message,
)
from ..security.acl import cluster_allowed
from .common import log

_Result = ElectLeadersResponse.ReplicaElectionResult
_PartitionResult = _Result.PartitionResult


def _is_controller(broker) -> bool:
    cluster = getattr(broker, "cluster", None)
    return cluster is not None and cluster.view.controller_id == broker.node_id


async def handle_controlled_shutdown(broker, header, request) -> Response:
    version = header.api_version

    def answer(code: int, remaining: list[TopicPartition]) -> Response:
        parts = [
            ControlledShutdownResponse.RemainingPartition(topic_name=tp.topic, partition_index=tp.partition)
            for tp in remaining
        ]
        return Response.of(ControlledShutdownResponse(error_code=code, remaining_partitions=parts), version)

    if not cluster_allowed(broker, "CLUSTER_ACTION"):
        return answer(CLUSTER_AUTHORIZATION_FAILED, [])
    if not _is_controller(broker):
        return answer(NOT_CONTROLLER, [])
    epoch = request.broker_epoch if version >= 2 else -1
    try:
        remaining = await broker.cluster.handle_controlled_shutdown(request.broker_id, epoch)
    except Exception as e:
        log.info("Controlled shutdown of broker %d refused: %s", request.broker_id, e)
        return answer(error_code(e), [])
    return answer(NONE, remaining)


async def handle_elect_leaders(broker, header, request) -> Response:
    version = header.api_version
    election_type = request.election_type if version >= 1 else 0
    wanted = (
        None
        if request.topic_partitions is None
        else [TopicPartition(t.topic, p) for t in request.topic_partitions for p in t.partitions]
    )

    def whole(code: int, message: str) -> Response:
        # Every asked partition with the same error (v0 has no top-level error code).
        by_topic: dict[str, list] = {}
        for tp in wanted or []:
            by_topic.setdefault(tp.topic, []).append(
                _PartitionResult(partition_id=tp.partition, error_code=code, error_message=message)
            )
        results = [_Result(topic=t, partition_result=ps) for t, ps in by_topic.items()]
        body = ElectLeadersResponse(throttle_time_ms=0, error_code=code, replica_election_results=results)
        return Response.of(body, version)

    if not cluster_allowed(broker, "ALTER"):
        return whole(CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
    if not _is_controller(broker):
        return whole(NOT_CONTROLLER, str(NotControllerError("This broker is not the controller")))
    try:
        outcome = await broker.cluster.elect_leaders(election_type, wanted, request.timeout_ms)
    except NotControllerError as e:
        return whole(NOT_CONTROLLER, str(e))
    by_topic = {}
    for tp, error in outcome.items():
        code, message = error_code(error), error_message(error)
        by_topic.setdefault(tp.topic, []).append(
            _PartitionResult(partition_id=tp.partition, error_code=code, error_message=message)
        )
    results = [_Result(topic=t, partition_result=ps) for t, ps in sorted(by_topic.items())]
    body = ElectLeadersResponse(throttle_time_ms=0, error_code=NONE, replica_election_results=results)
    return Response.of(body, version)


async def handle_stop_replica(broker, header, request) -> Response:
    """StopReplica from the controller (the deletion of a topic's replicas): v0 lists partitions ungrouped."""
    version = header.api_version

    def answer(code: int, errors: list) -> Response:
        return Response.of(StopReplicaResponse(error_code=code, partition_errors=errors), version)

    if not cluster_allowed(broker, "CLUSTER_ACTION"):
        return answer(CLUSTER_AUTHORIZATION_FAILED, [])
    if getattr(broker, "cluster", None) is None:
        return answer(NOT_CONTROLLER, [])  # a single node has no controller to take orders from
    topics: dict[str, list[int]] = {}
    if version == 0:
        for p in request.ungrouped_partitions:
            topics.setdefault(p.topic_name, []).append(p.partition_index)
    else:
        for t in request.topics:
            topics.setdefault(t.name, []).extend(t.partition_indexes)
    if not request.delete_partitions:
        # Without deletion, StopReplica only stops fetching; the state znodes already tell the broker that.
        return answer(NONE, [_stop_error(topic, p, None) for topic, ps in topics.items() for p in ps])
    epoch = request.broker_epoch if version >= 1 else -1
    try:
        results = await broker.cluster.stop_replicas(request.controller_epoch, epoch, topics)
    except Exception as e:
        log.info("StopReplica from controller %d refused: %s", request.controller_id, e)
        return answer(error_code(e), [])
    return answer(NONE, [_stop_error(tp.topic, tp.partition, e) for tp, e in results.items()])


def _stop_error(topic: str, partition: int, error: BaseException | None):
    return StopReplicaResponse.StopReplicaPartitionError(
        topic_name=topic, partition_index=partition, error_code=error_code(error)
    )
