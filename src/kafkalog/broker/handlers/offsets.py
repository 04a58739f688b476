"""ListOffsets (key 2) and OffsetForLeaderEpoch (key 23): offsets by time and by leader epoch."""

from __future__ import annotations

from ..protocol import (
    NONE,
    UNKNOWN_TOPIC_OR_PARTITION,
    ListOffsetsResponse,
    OffsetForLeaderEpochResponse,
    Response,
    error_code,
)
from ..replica_access import READ_COMMITTED, READ_UNCOMMITTED
from ..security.acl import require

ListTopic = ListOffsetsResponse.ListOffsetsTopicResponse
ListPartition = ListTopic.ListOffsetsPartitionResponse
EpochTopic = OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult
EpochPartition = EpochTopic.EpochEndOffset


async def handle_list_offsets(broker, header, request) -> Response:
    version = header.api_version
    isolation = None  # v0-v1: up to the log end, as Kafka's
    if version >= 2:
        isolation = READ_COMMITTED if request.isolation_level == 1 else READ_UNCOMMITTED
    topics = []
    for topic in request.topics:
        parts = []
        for p in topic.partitions:
            try:
                require(broker, "DESCRIBE", "TOPIC", topic.name)
                partition = broker.replica_manager.get_partition(topic.name, p.partition_index)
                current = p.current_leader_epoch if version >= 4 and p.current_leader_epoch >= 0 else None
                found = partition.fetch_offset_for_timestamp(p.timestamp, isolation, current)
                if found is None:
                    parts.append(
                        ListPartition(
                            partition_index=p.partition_index, error_code=NONE, timestamp=-1, offset=-1, leader_epoch=-1
                        )
                    )
                else:
                    epoch = found.leader_epoch if found.leader_epoch is not None else -1
                    parts.append(
                        ListPartition(
                            partition_index=p.partition_index,
                            error_code=NONE,
                            timestamp=found.timestamp,
                            offset=found.offset,
                            leader_epoch=epoch,
                        )
                    )
            except Exception as e:
                parts.append(
                    ListPartition(
                        partition_index=p.partition_index,
                        error_code=error_code(e),
                        timestamp=-1,
                        offset=-1,
                        leader_epoch=-1,
                    )
                )
        topics.append(ListTopic(name=topic.name, partitions=parts))
    return Response.of(ListOffsetsResponse(version=version, throttle_time_ms=0, topics=topics), version)


async def handle_offset_for_leader_epoch(broker, header, request) -> Response:
    version = header.api_version
    topics = []
    for topic in request.topics:
        parts = []
        for p in topic.partitions:
            try:
                require(broker, "DESCRIBE", "TOPIC", topic.topic)
                partition = broker.replica_manager.get_partition(topic.topic, p.partition)
                current = p.current_leader_epoch if p.current_leader_epoch >= 0 else None
                epoch, end_offset = partition.last_offset_for_leader_epoch(p.leader_epoch, current)
                parts.append(
                    EpochPartition(error_code=NONE, partition=p.partition, leader_epoch=epoch, end_offset=end_offset)
                )
            except Exception as e:
                code = error_code(e)
                parts.append(
                    EpochPartition(
                        error_code=code if code else UNKNOWN_TOPIC_OR_PARTITION,
                        partition=p.partition,
                        leader_epoch=-1,
                        end_offset=-1,
                    )
                )
        topics.append(EpochTopic(topic=topic.topic, partitions=parts))
    return Response.of(OffsetForLeaderEpochResponse(version=version, throttle_time_ms=0, topics=topics), version)
