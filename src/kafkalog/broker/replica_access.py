"""The broker's only door to storage: the LogManager's ReplicaManager (kafkalog.replica_manager).

Every append and read of the broker goes through the replica manager the LogManager owns, and so through
each partition's leader rules: acks and min.insync.replicas checked before writing, reads bounded by the high
watermark (read_uncommitted) or the last stable offset (read_committed), listeners told when a high
watermark advances. Nothing in kafkalog.broker touches a Log except ``delete_records`` below, which moves a
log start offset as Kafka's ReplicaManager.deleteRecords does, until the replica manager has that call.
"""

from __future__ import annotations

from ..errors import OffsetOutOfRangeError
from ..manager import LogManager, TopicPartition
from ..partition import READ_COMMITTED, READ_UNCOMMITTED
from ..replica_manager import AppendResult, FetchResult, ReplicaManager

__all__ = [
    "READ_COMMITTED",
    "READ_UNCOMMITTED",
    "AppendResult",
    "FetchResult",
    "ReplicaManager",
    "TopicPartition",
    "delete_records",
    "prepare_replica_manager",
]


def prepare_replica_manager(
    log_manager: LogManager, broker_id: int, *, epochs_from_controller: bool = False
) -> ReplicaManager:
    """The log manager's replica manager, set to lead as ``broker_id``; call before ``log_manager.startup()``.

    Its partitions are made at startup with this broker as their only in-sync replica, so the id must be the
    node's before any log is loaded (the metadata then names the same broker as leader and ISR).
    ``epochs_from_controller`` (a broker of a cluster): that leadership is provisional and records no leader
    epoch; the controller's state does.
    """
    replica_manager = log_manager.replica_manager
    replica_manager.broker_id = broker_id
    replica_manager.epochs_from_controller = epochs_from_controller
    return replica_manager


def delete_records(replica_manager: ReplicaManager, tp: TopicPartition, offset: int) -> int:
    """DeleteRecords: move the log start offset to ``offset`` (-1: the high watermark); the new low watermark.

    As Kafka's Partition.deleteRecordsOnLeader: only on a leader, and an offset beyond the high watermark is
    OFFSET_OUT_OF_RANGE.
    """
    partition = replica_manager.get_partition(tp.topic, tp.partition)
    hw = partition.high_watermark
    target = hw if offset == -1 else offset
    if target < 0 or target > hw:
        raise OffsetOutOfRangeError(
            f"Cannot increment the log start offset to {offset} of partition {tp} since it is larger than the "
            f"high watermark {hw}",
            offset=offset,
        )
    return partition.log.delete_records(target)
