"""DescribeProducers (key 61, KIP-664): the active producers a replica of each partition knows.

Kafka's KafkaApis.handleDescribeProducersRequest: per topic, an invalid name is INVALID_TOPIC_EXCEPTION, a topic
the caller may not READ is TOPIC_AUTHORIZATION_FAILED, a topic the broker does not know is
UNKNOWN_TOPIC_OR_PARTITION; per partition, a replica hosted here answers from its log's producer state
(``Partition.active_producer_state``), a partition of a known topic that is not hosted here is
NOT_LEADER_OR_FOLLOWER (ReplicaManager.getPartitionOrError). ``kafkalog transactions describe-producers``,
``find-hanging`` and ``abort --start-offset`` read it.
"""

from __future__ import annotations

from kafka.protocol.admin.transactions import DescribeProducersResponse

from ...errors import InvalidTopicError, UnknownTopicOrPartitionError
from ...logdir import validate_topic_name
from ..protocol import (
    INVALID_TOPIC_EXCEPTION,
    NONE,
    NOT_LEADER_OR_FOLLOWER,
    TOPIC_AUTHORIZATION_FAILED,
    UNKNOWN_TOPIC_OR_PARTITION,
    Response,
    error_code,
    error_message,
)
from ..security.acl import allowed
from .common import same_named

TopicResponse = DescribeProducersResponse.TopicResponse
PartitionResponse = TopicResponse.PartitionResponse
ProducerState = PartitionResponse.ProducerState

# Kafka's default messages of these errors (an ApiError without a message of its own carries them).
_DENIED = "Topic authorization failed."
_UNKNOWN = "This server does not host this topic-partition."


def _topic_known(broker, name: str) -> bool:
    """The metadata knows the topic: the cluster's view in ZooKeeper mode, the log manager on a single node."""
    cluster = getattr(broker, "cluster", None)
    if cluster is not None:
        return name in cluster.view.topics
    return name in broker.log_manager.topics()


def _topic_error(broker, name: str) -> tuple[int, str | None] | None:
    try:
        validate_topic_name(name)
    except InvalidTopicError as e:
        return INVALID_TOPIC_EXCEPTION, str(e)
    if not allowed(broker, "READ", "TOPIC", name):
        return TOPIC_AUTHORIZATION_FAILED, _DENIED
    if not _topic_known(broker, name):
        return UNKNOWN_TOPIC_OR_PARTITION, _UNKNOWN
    return None


# an active producer's fields that report the producer state entry's attributes of the same name
_PRODUCER_FIELDS = ("producer_id", "producer_epoch", "last_timestamp", "coordinator_epoch")


def _partition(broker, topic: str, index: int) -> PartitionResponse:
    try:
        partition = broker.replica_manager.get_partition(topic, index)
        producers = partition.active_producer_state()
    except UnknownTopicOrPartitionError as e:
        # A partition of a topic the metadata knows, not hosted here (ReplicaManager.getPartitionOrError).
        return PartitionResponse(
            partition_index=index, error_code=NOT_LEADER_OR_FOLLOWER, error_message=str(e), active_producers=[]
        )
    except Exception as e:  # e.g. KafkaStorageError for a log in an offline dir
        return PartitionResponse(
            partition_index=index, error_code=error_code(e), error_message=error_message(e), active_producers=[]
        )
    return PartitionResponse(
        partition_index=index,
        error_code=NONE,
        error_message=None,
        active_producers=[
            ProducerState(
                **same_named(entry, _PRODUCER_FIELDS),
                last_sequence=entry.last_seq,
                current_txn_start_offset=-1
                if entry.current_txn_first_offset is None
                else entry.current_txn_first_offset,
            )
            for entry in producers
        ],
    )


async def handle(broker, header, request) -> Response:
    version = header.api_version
    topics = []
    for topic in request.topics:
        problem = _topic_error(broker, topic.name)
        if problem is not None:
            code, message = problem
            parts = [
                PartitionResponse(partition_index=i, error_code=code, error_message=message, active_producers=[])
                for i in topic.partition_indexes
            ]
        else:
            parts = [_partition(broker, topic.name, i) for i in topic.partition_indexes]
        topics.append(TopicResponse(name=topic.name, partitions=parts))
    return Response.of(DescribeProducersResponse(version=version, throttle_time_ms=0, topics=topics), version)
