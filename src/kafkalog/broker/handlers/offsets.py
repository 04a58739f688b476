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
from .common import each_partition

ListTopic = ListOffsetsResponse.ListOffsetsTopicResponse
ListPartition = ListTopic.ListOffsetsPartitionResponse
EpochTopic = OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult
EpochPartition = EpochTopic.EpochEndOffset


def _listed(index: int, code: int = NONE, timestamp: int = -1, offset: int = -1, leader_epoch: int = -1):
    return ListPartition(
        partition_index=index, error_code=code, timestamp=timestamp, offset=offset, leader_epoch=leader_epoch
    )


async def handle_list_offsets(broker, header, request) -> Response:
    version = header.api_version
    isolation = None  # v0-v1: up to the log end, as Kafka's
    if version >= 2:
        isolation = READ_COMMITTED if request.isolation_level == 1 else READ_UNCOMMITTED

    def answer(name: str, p) -> ListPartition:
        partition = broker.replica_manager.get_partition(name, p.partition_index)
        current = p.current_leader_epoch if version >= 4 and p.current_leader_epoch >= 0 else None
        found = partition.fetch_offset_for_timestamp(p.timestamp, isolation, current)
        if found is None:
            return _listed(p.partition_index)
        epoch = found.leader_epoch if found.leader_epoch is not None else -1
        return _listed(p.partition_index, NONE, found.timestamp, found.offset, epoch)

    answers = each_partition(
        broker, request.topics, "DESCRIBE", answer, lambda p, e: _listed(p.partition_index, error_code(e))
    )
    topics = [ListTopic(name=name, partitions=parts) for name, parts in answers]
    return Response.of(ListOffsetsResponse(version=version, throttle_time_ms=0, topics=topics), version)


async def handle_offset_for_leader_epoch(broker, header, request) -> Response:
    version = header.api_version

    def answer(name: str, p) -> EpochPartition:
        partition = broker.replica_manager.get_partition(name, p.partition)
        current = p.current_leader_epoch if p.current_leader_epoch >= 0 else None
        epoch, end_offset = partition.last_offset_for_leader_epoch(p.leader_epoch, current)
        return EpochPartition(error_code=NONE, partition=p.partition, leader_epoch=epoch, end_offset=end_offset)

    def failed(p, e: BaseException) -> EpochPartition:
        code = error_code(e)
        return EpochPartition(
            error_code=code if code else UNKNOWN_TOPIC_OR_PARTITION,
            partition=p.partition,
            leader_epoch=-1,
            end_offset=-1,
        )

    answers = each_partition(broker, request.topics, "DESCRIBE", answer, failed, name_field="topic")
    topics = [EpochTopic(topic=name, partitions=parts) for name, parts in answers]
    return Response.of(OffsetForLeaderEpochResponse(version=version, throttle_time_ms=0, topics=topics), version)
