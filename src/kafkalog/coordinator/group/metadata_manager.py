"""Kafka's GroupMetadataManager, the part every group protocol shares: the groups this broker coordinates, the
``__consumer_offsets`` topic they live in (created on first use, partitions owned in a cluster), and the one way
state is written there (``_append``: one batch per call, through the replica manager).

The classic protocol (``classic_protocol.py``), the consumer protocol (``consumer_protocol.py``), the offsets
(``offsets.py``) and the coordinator (``coordinator.py``) build on it. Threading as the coordinator's: one thread,
no locks.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from ...manager import TopicPartition
from ...record.builder import RecordBatchBuilder
from ...storage.producer_state import AppendOrigin
from ..internal_topic import OFFSETS, InternalTopicMixin
from . import records as rec
from .config import GroupCoordinatorConfig
from .consumer_group import ConsumerGroup
from .errors import Errors, append_error
from .group import ClassicGroup, GroupState, OffsetAndMetadata

log = logging.getLogger("org.apache.kafka.coordinator.group.GroupCoordinatorService")

GROUP_METADATA_TOPIC_NAME = OFFSETS.name
UNKNOWN_MEMBER_ID = ""
NO_GENERATION = -1
EMPTY, PREPARING, COMPLETING, STABLE, DEAD = (
    GroupState.EMPTY,
    GroupState.PREPARING_REBALANCE,
    GroupState.COMPLETING_REBALANCE,
    GroupState.STABLE,
    GroupState.DEAD,
)
COMPRESSION_CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}  # offsets.topic.compression.codec


class GroupMetadataManager(InternalTopicMixin):
    """The groups of this broker's offsets-topic partitions and their writes.

    Invariants: every group in ``groups`` is on a partition of the offsets topic; a Dead group is no longer in
    ``groups``; a group id is either a classic group with members or a consumer group, never both.
    """

    INTERNAL_TOPIC = OFFSETS
    LOG = log

    config: GroupCoordinatorConfig

    def __init__(self, log_manager, config: GroupCoordinatorConfig, clock, scheduler) -> None:
        super().__init__(log_manager, config, clock, scheduler)
        self.groups: dict[str, ClassicGroup] = {}
        self.consumer_groups: dict[str, ConsumerGroup] = {}  # KIP-848 groups (their offsets are in ``groups``)
        self._retention_task = None
        # Transactional offset commits written but not yet decided (producer id -> group -> partition -> offset):
        # made visible by a COMMIT marker in the group's partition, dropped by an ABORT (Kafka's
        # pendingTransactionalOffsetCommits).
        self.pending_txn_offsets: dict[int, dict[str, dict[tuple[str, int], OffsetAndMetadata]]] = {}
        # In a cluster, whether a topic partition exists anywhere (the cluster's view), for offset commits.
        self.cluster_partition_exists: Callable[[str, int], bool] | None = None

    @staticmethod
    def _cancel(task) -> None:
        if task is not None:
            task.cancel()

    def group_status(self, group_id: str) -> Errors:
        """Kafka's validateGroupStatus: NOT_COORDINATOR when another broker leads the group's partition,
        COORDINATOR_LOAD_IN_PROGRESS while this one loads it (both send the client to FindCoordinator again)."""
        return self.coordination_error(group_id)

    def _group_request_error(self, group_id: str) -> Errors:
        """The checks a JoinGroup or an OffsetCommit starts with: INVALID_GROUP_ID for an empty id, then the
        coordination errors (``group_status``), then COORDINATOR_NOT_AVAILABLE while the offsets topic is missing."""
        if not group_id:
            return Errors.INVALID_GROUP_ID
        if (status := self.group_status(group_id)) is not Errors.NONE:
            return status
        if self.offsets_topic_partitions() is None:
            return Errors.COORDINATOR_NOT_AVAILABLE
        return Errors.NONE

    def _owns(self, group_id: str) -> bool:
        return self.owned is None or self.partition_for(group_id) in self.owned

    # ================================================================ the offsets topic
    def _internal_topic_settings(self) -> tuple[int, int, dict[str, str]]:
        configs = {
            "cleanup.policy": "compact",
            "segment.bytes": str(self.config.offsets_topic_segment_bytes),
            "compression.type": "producer",
        }
        return self.config.offsets_topic_num_partitions, self.config.offsets_topic_replication_factor, configs

    def offsets_topic_partitions(self) -> list[int] | None:
        """The partitions of __consumer_offsets present here, None when the topic does not exist."""
        return self.internal_topic_partitions()

    def ensure_offsets_topic(self) -> Errors:
        """Create __consumer_offsets on first use (FindCoordinator); COORDINATOR_NOT_AVAILABLE if it cannot be."""
        return Errors.NONE if self.create_internal_topic() else Errors.COORDINATOR_NOT_AVAILABLE

    def _append(
        self,
        group_id: str,
        entries: Sequence[tuple[bytes, bytes | None]],
        for_offsets: bool,
        producer: tuple[int, int] | None = None,
    ) -> Errors:
        """Write ``entries`` (key, value or None for a tombstone) as one batch to the group's partition; with
        ``producer`` (id, epoch), as a transactional batch of that producer (a TxnOffsetCommit, as Kafka writes it)."""
        if not entries:
            return Errors.NONE
        if self.offsets_topic_partitions() is None:
            return Errors.COORDINATOR_NOT_AVAILABLE
        codec = COMPRESSION_CODECS.get(self.config.offsets_topic_compression_codec, "none")
        if producer is None:
            builder = RecordBatchBuilder(compression=codec, clock=self.clock)
        else:
            builder = RecordBatchBuilder(
                compression=codec,
                producer_id=producer[0],
                producer_epoch=producer[1],
                base_sequence=0,
                is_transactional=True,
                clock=self.clock,
            )
        now = self.now()
        for key, value in entries:
            builder.append(key, value, now)
        tp = TopicPartition(GROUP_METADATA_TOPIC_NAME, self.partition_for(group_id))
        result = self.replica_manager.append_records({tp: builder.build()}, -1, AppendOrigin.COORDINATOR)[tp]
        if result.error is not None:
            log.warning("Failed to write %d record(s) of group %s to %s: %s", len(entries), group_id, tp, result.error)
            return append_error(result.error, for_offsets)
        return Errors.NONE

    def _group_metadata_record(self, group: ClassicGroup) -> tuple[bytes, bytes]:
        members = [
            rec.MemberRecord(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                m.rebalance_timeout_ms,
                m.session_timeout_ms,
                m.metadata(group.protocol_name) if group.protocol_name else b"",
                m.assignment,
            )
            for m in group.members.values()
        ]
        value = rec.group_metadata_value(
            group.protocol_type or "",
            group.generation_id,
            group.protocol_name,
            group.leader_id,
            group.current_state_timestamp if group.current_state_timestamp is not None else -1,
            members,
        )
        return rec.group_metadata_key(group.group_id), value

    def _store_group(self, group: ClassicGroup) -> Errors:
        return self._append(group.group_id, [self._group_metadata_record(group)], for_offsets=False)
