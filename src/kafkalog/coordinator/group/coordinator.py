"""Kafka's group coordinator for classic groups: membership, rebalances, committed offsets, in __consumer_offsets.

What it does, as Kafka's GroupCoordinator (classic protocol) and GroupMetadataManager:

* A group lives on the ``__consumer_offsets`` partition ``abs(groupId.hashCode) % partitions`` (Java's
  String.hashCode; Kafka's Utils.abs maps Integer.MIN_VALUE to 0). The topic is created compacted on the
  first FindCoordinator, with offsets.topic.num.partitions partitions (default 50) and Kafka's internal-topic
  configs (cleanup.policy=compact, segment.bytes=offsets.topic.segment.bytes, compression.type=producer).
* JoinGroup / SyncGroup / Heartbeat / LeaveGroup drive the rebalance state machine (Empty,
  PreparingRebalance, CompletingRebalance, Stable, Dead), with KIP-394 member ids (MEMBER_ID_REQUIRED),
  static membership (KIP-345: group.instance.id, FENCED_INSTANCE_ID), session timeouts (a member that stops
  heartbeating is removed), rebalance timeouts (members that do not rejoin in time are dropped) and
  group.initial.rebalance.delay.ms for an empty group's first rebalance.
* ConsumerGroupHeartbeat (KIP-848) runs KIP-848 groups with server-side assignment (consumer_protocol.py,
  consumer_group.py); their state is persisted as Kafka's ConsumerGroup* records and replayed by ``load``.
* Every state change that Kafka persists is persisted here the same way, through the replica manager (the
  partition layer) as one batch per call: group metadata after a completed sync or an emptied group, offsets
  on commit, tombstones on OffsetDelete, DeleteGroups and expiry. ``load`` rebuilds everything from those
  partitions on start, including partitions a real Kafka broker wrote.

Threading: every public method and every timer runs on one thread (the broker's event loop); nothing here
locks. Responses that wait (JoinGroup until the rebalance completes, SyncGroup until the leader's
assignment) are callbacks: the broker turns them into futures. Time is the ``clock``'s, timers are the
``scheduler``'s (``schedule_once(name, fn, delay_ms)`` returning a task with ``cancel()``), so unit tests run
under MockTime.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ...errors import UnknownTopicOrPartitionError
from ...manager import TopicPartition
from ...partition import READ_UNCOMMITTED
from ...partition.partition import DEFAULT_FETCH_BYTES
from ...record.builder import RecordBatchBuilder
from ...record.types import ControlRecordType
from ...storage.producer_state import AppendOrigin
from ..internal_topic import Coordination, InternalTopicMixin
from . import records as rec
from .consumer_group import ConsumerGroup
from .consumer_protocol import ConsumerProtocolMixin
from .errors import Errors, append_error
from .group import ClassicGroup, GroupState, JoinResult, Member, OffsetAndMetadata, SyncResult

log = logging.getLogger("org.apache.kafka.coordinator.group.GroupCoordinatorService")

GROUP_METADATA_TOPIC_NAME = "__consumer_offsets"

_COORDINATION_ERRORS = {
    Coordination.HERE: Errors.NONE,
    Coordination.LOADING: Errors.COORDINATOR_LOAD_IN_PROGRESS,
    Coordination.ELSEWHERE: Errors.NOT_COORDINATOR,
}
UNKNOWN_MEMBER_ID = ""
NO_GENERATION = -1
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000  # Kafka's ClassicGroupMember / GroupCoordinator constant
EMPTY, PREPARING, COMPLETING, STABLE, DEAD = (
    GroupState.EMPTY,
    GroupState.PREPARING_REBALANCE,
    GroupState.COMPLETING_REBALANCE,
    GroupState.STABLE,
    GroupState.DEAD,
)


def _offset_and_metadata(value: dict) -> OffsetAndMetadata:
    """An OffsetCommitValue (decoded) as the group keeps it."""
    return OffsetAndMetadata(
        value["offset"],
        value.get("leaderEpoch", -1),
        value["metadata"] or "",
        value["commitTimestamp"],
        value.get("expireTimestamp"),
    )


def _replay(replica) -> Iterator[tuple[Any, int | None, bool | None]]:
    """Every record of a partition up to its high watermark, in log order, as (record, producer id, marker):
    producer id set for the records of transactional batches, marker True/False (record None) for a COMMIT/ABORT
    control batch of that producer. Kafka's loader reads the same way, so offsets of undecided transactions
    can be held back until their marker."""
    offset = replica.log_start_offset
    while True:
        data = replica.fetch_records(offset, DEFAULT_FETCH_BYTES, READ_UNCOMMITTED, True, False)
        batches = list(data.records.batches())
        if not batches:
            return
        for batch in batches:
            if batch.is_control:
                if batch.is_transactional and batch.producer_id >= 0:
                    try:
                        marker = batch.end_transaction_marker()
                    except Exception:  # an empty control batch (the cleaner removed its record)
                        continue
                    yield None, batch.producer_id, marker.type == ControlRecordType.COMMIT
                continue
            producer_id = batch.producer_id if batch.is_transactional else None
            for record in batch:
                if record.offset >= offset:
                    yield record, producer_id, None
        next_offset = batches[-1].next_offset
        if next_offset <= offset:
            return
        offset = next_offset


def _int(props, key: str, default: int, minimum: int | None = None) -> int:
    from ...errors import InvalidConfigurationError

    raw = props.get(key)
    if raw is None:
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise InvalidConfigurationError(f"Invalid value {raw} for configuration {key}: Not a number") from None
    if minimum is not None and value < minimum:
        raise InvalidConfigurationError(
            f"Invalid value {value} for configuration {key}: Value must be at least {minimum}"
        )
    return value


@dataclass(frozen=True)
class GroupCoordinatorConfig:
    """The group coordinator's broker configs, with Kafka's names and defaults.

    offsets.topic.replication.factor defaults to 1 here (Kafka's default is 3, which its own sample
    server.properties lowers to 1 for a single broker): this broker has one node, so a larger value could
    never be met and the offsets topic would never be created.
    """

    offsets_topic_num_partitions: int = 50
    offsets_topic_replication_factor: int = 1
    offsets_topic_segment_bytes: int = 100 * 1024 * 1024
    offsets_topic_compression_codec: int = 0
    offsets_retention_minutes: int = 7 * 24 * 60
    offsets_retention_check_interval_ms: int = 600_000
    offset_metadata_max_bytes: int = 4096
    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1_800_000
    group_initial_rebalance_delay_ms: int = 3000
    group_max_size: int = 2**31 - 1
    consumer_session_timeout_ms: int = 45_000
    consumer_heartbeat_interval_ms: int = 5_000

    @classmethod
    def from_properties(cls, props) -> GroupCoordinatorConfig:
        return cls(
            offsets_topic_num_partitions=_int(props, "offsets.topic.num.partitions", 50, 1),
            offsets_topic_replication_factor=_int(props, "offsets.topic.replication.factor", 1, 1),
            offsets_topic_segment_bytes=_int(props, "offsets.topic.segment.bytes", 100 * 1024 * 1024, 1),
            offsets_topic_compression_codec=_int(props, "offsets.topic.compression.codec", 0, 0),
            offsets_retention_minutes=_int(props, "offsets.retention.minutes", 7 * 24 * 60, 1),
            offsets_retention_check_interval_ms=_int(props, "offsets.retention.check.interval.ms", 600_000, 1),
            offset_metadata_max_bytes=_int(props, "offset.metadata.max.bytes", 4096, 0),
            group_min_session_timeout_ms=_int(props, "group.min.session.timeout.ms", 6000, 0),
            group_max_session_timeout_ms=_int(props, "group.max.session.timeout.ms", 1_800_000, 0),
            group_initial_rebalance_delay_ms=_int(props, "group.initial.rebalance.delay.ms", 3000, 0),
            group_max_size=_int(props, "group.max.size", 2**31 - 1, 1),
            consumer_session_timeout_ms=_int(props, "group.consumer.session.timeout.ms", 45_000, 1),
            consumer_heartbeat_interval_ms=_int(props, "group.consumer.heartbeat.interval.ms", 5_000, 1),
        )


@dataclass(frozen=True)
class GroupOverview:
    group_id: str
    protocol_type: str
    state: str
    group_type: str = "classic"


@dataclass(frozen=True)
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: list[tuple[str, str | None, str, str, bytes, bytes]]  # id, instance id, client, host, metadata, assignment


class GroupCoordinator(ConsumerProtocolMixin, InternalTopicMixin):
    """The classic group coordinator of one broker (it leads every __consumer_offsets partition).

    Invariants: every group in ``groups`` is on a partition of the offsets topic; a Dead group is no longer in
    ``groups``; a member's heartbeat timer is scheduled while it is a member and cancelled when it leaves.
    """

    TOPIC = GROUP_METADATA_TOPIC_NAME
    TOPIC_DESCRIPTION = "offsets topic"
    REPLICATION_FACTOR_CONFIG = "offsets.topic.replication.factor"
    LOG = log

    def __init__(self, log_manager, config: GroupCoordinatorConfig, clock, scheduler) -> None:
        self.log_manager = log_manager
        self.replica_manager = log_manager.replica_manager
        self.config = config
        self.clock = clock
        self.scheduler = scheduler
        self.groups: dict[str, ClassicGroup] = {}
        self.consumer_groups: dict[str, ConsumerGroup] = {}  # KIP-848 groups (their offsets are in ``groups``)
        self._retention_task = None
        self._active = False
        # Transactional offset commits written but not yet decided (producer id -> group -> partition -> offset):
        # made visible by a COMMIT marker in the group's partition, dropped by an ABORT (Kafka's
        # pendingTransactionalOffsetCommits).
        self.pending_txn_offsets: dict[int, dict[str, dict[tuple[str, int], OffsetAndMetadata]]] = {}
        # The offsets-topic partitions this broker coordinates: None = all of them (a single node); in a cluster,
        # those whose leader it is (on_election / on_resignation), minus those still loading.
        self.owned: set[int] | None = None
        self.loading: set[int] = set()
        # In a cluster, the offsets topic's partition count as ZooKeeper has it (this broker may not host all).
        self.cluster_partition_count: int | None = None
        # In a cluster, whether a topic partition exists anywhere (the cluster's view), for offset commits.
        self.cluster_partition_exists: Callable[[str, int], bool] | None = None

    # ================================================================ lifecycle
    def startup(self, *, clustered: bool = False) -> None:
        """Load the groups and offsets of every offsets-topic partition, then start the expiry checks. In a cluster
        nothing is loaded here: each partition is loaded when this broker becomes its leader (``on_election``)."""
        if clustered:
            self.owned = set()
        else:
            self.load()
        self._active = True
        self._schedule_retention()

    # ================================================================ partitions coordinated here (a cluster)
    def group_status(self, group_id: str) -> Errors:
        """Kafka's validateGroupStatus: NOT_COORDINATOR when another broker leads the group's partition,
        COORDINATOR_LOAD_IN_PROGRESS while this one loads it (both send the client to FindCoordinator again)."""
        return _COORDINATION_ERRORS[self.coordination(group_id)]

    def on_election(self, partition: int) -> None:
        """Kafka's onElection: load the groups and offsets of ``partition`` and coordinate them from now on."""
        if self.owned is None:
            return
        self._drop_groups_of(partition)
        try:
            self._load_partition(partition)
        finally:
            self.loading.discard(partition)
        self.owned.add(partition)

    def on_resignation(self, partition: int) -> None:
        """Kafka's onResignation: another broker leads ``partition`` now; its groups leave this coordinator (their
        waiting members are answered NOT_COORDINATOR and find the new coordinator)."""
        if self.owned is None:
            return
        self.loading.discard(partition)
        if partition in self.owned:
            self.owned.discard(partition)
            self._drop_groups_of(partition)
            log.info("Unloaded the groups of %s-%d", GROUP_METADATA_TOPIC_NAME, partition)

    def _drop_groups_of(self, partition: int) -> None:
        for group_id in [g for g in self.groups if self.partition_for(g) == partition]:
            group = self.groups.pop(group_id)
            self._cancel(group.join_task)
            for task in group.pending_members.values():
                self._cancel(task)
            for member in group.members.values():
                self._cancel(member.heartbeat_task)
                self._answer_join(member, JoinResult(Errors.NOT_COORDINATOR, member.member_id))
                self._answer_sync(member, SyncResult(Errors.NOT_COORDINATOR))
        for group_id in [g for g in self.consumer_groups if self.partition_for(g) == partition]:
            self._drop_consumer_group(group_id)

    def _owns(self, group_id: str) -> bool:
        return self.owned is None or self.partition_for(group_id) in self.owned

    def shutdown(self) -> None:
        """Cancel every timer and answer every waiting JoinGroup / SyncGroup with NOT_COORDINATOR (as Kafka does
        when it resigns a partition); the state on disk is complete, so nothing is written."""
        self._active = False
        if self._retention_task is not None:
            self._retention_task.cancel()
        self._shutdown_consumer_groups()
        for group in self.groups.values():
            self._cancel(group.join_task)
            for task in group.pending_members.values():
                self._cancel(task)
            for member in group.members.values():
                self._cancel(member.heartbeat_task)
                self._answer_join(member, JoinResult(Errors.NOT_COORDINATOR, member.member_id))
                self._answer_sync(member, SyncResult(Errors.NOT_COORDINATOR))

    def now(self) -> int:
        return self.clock.milliseconds()

    @staticmethod
    def _cancel(task) -> None:
        if task is not None:
            task.cancel()

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
        codec = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}.get(
            self.config.offsets_topic_compression_codec, "none"
        )
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

    # ================================================================ loading
    def load(self) -> None:
        """Replay every __consumer_offsets partition: the last record of each key wins, tombstones delete."""
        for partition in self.offsets_topic_partitions() or []:
            self._load_partition(partition)

    def _load_partition(self, partition: int) -> None:
        replica = self.replica_manager.get_partition(GROUP_METADATA_TOPIC_NAME, partition)
        offsets: dict[str, dict[tuple[str, int], OffsetAndMetadata]] = {}
        metadata: dict[str, dict | None] = {}
        consumer: dict[str, dict[bytes, bytes]] = {}  # KIP-848 group -> its live records
        skipped = 0
        pending: dict[int, list] = {}  # producer id -> its undecided transactional records, in log order
        for record, producer_id, marker in _replay(replica):
            if marker is not None and producer_id is not None:  # COMMIT: apply the producer's records; ABORT: drop
                stashed = pending.pop(producer_id, [])
                if marker:
                    for kept in stashed:
                        skipped += self._load_record(partition, kept, offsets, metadata, consumer)
                continue
            if producer_id is not None:
                pending.setdefault(producer_id, []).append(record)
                continue
            skipped += self._load_record(partition, record, offsets, metadata, consumer)
        for producer_id, stashed in pending.items():
            self._load_pending(producer_id, stashed)
        self._finish_load(partition, offsets, metadata, consumer, skipped)

    def _load_record(self, partition: int, record, offsets: dict, metadata: dict, consumer: dict) -> int:
        """Apply one record being loaded (the last record of a key wins, a tombstone deletes); 1 when skipped."""
        if record.key is None:
            return 1
        try:
            record_type, key = rec.decode_key(record.key)
            value = None if record.value is None else rec.decode_value(record_type, record.value)[1]
        except rec.UnknownRecordType:
            return 1  # share- and streams-group records, ConsumerGroupPartitionMetadata: not built
        except (ValueError, IndexError) as e:
            log.warning(
                "Skipping unreadable record at offset %d of %s-%d: %s",
                record.offset,
                GROUP_METADATA_TOPIC_NAME,
                partition,
                e,
            )
            return 1
        if record_type >= rec.CONSUMER_GROUP_METADATA_KEY_TYPE:  # a KIP-848 group's record: replayed later
            group_records = consumer.setdefault(key.get("groupId") or "", {})
            if record.value is None:
                group_records.pop(bytes(record.key), None)
            else:
                group_records[bytes(record.key)] = bytes(record.value)
        elif record_type in (0, 1):
            group_offsets = offsets.setdefault(key["group"], {})
            tp = (key["topic"], key["partition"])
            if value is None:
                group_offsets.pop(tp, None)
            else:
                group_offsets[tp] = _offset_and_metadata(value)
        else:
            metadata[key["group"]] = value
        return 0

    def _load_pending(self, producer_id: int, records: list) -> None:
        """Keep the offset commits of a transaction with no marker yet as pending (its coordinator decides)."""
        for record in records:
            try:
                record_type, key = rec.decode_key(record.key)
                if record_type not in (0, 1) or record.value is None:
                    continue
                value = rec.decode_value(record_type, record.value)[1]
            except (rec.UnknownRecordType, ValueError, IndexError):
                continue
            group = self.pending_txn_offsets.setdefault(producer_id, {}).setdefault(key["group"], {})
            group[(key["topic"], key["partition"])] = _offset_and_metadata(value)

    def _finish_load(self, partition: int, offsets: dict, metadata: dict, consumer: dict, skipped: int) -> None:
        for group_id, group_records in consumer.items():
            self.consumer_groups.pop(group_id, None)
            if group_records:
                self._load_consumer_group(group_id, group_records)
        for group_id in set(offsets) | set(metadata):
            value = metadata.get(group_id)
            group_offsets = offsets.get(group_id, {})
            if value is None and not group_offsets:
                self.groups.pop(group_id, None)
                continue
            self.groups[group_id] = self._loaded_group(group_id, value, group_offsets)
        log.info(
            "Finished loading offsets and group metadata from %s-%d (%d groups so far, %d records skipped)",
            GROUP_METADATA_TOPIC_NAME,
            partition,
            len(self.groups),
            skipped,
        )

    def _loaded_group(self, group_id: str, value: dict | None, offsets) -> ClassicGroup:
        group = ClassicGroup(group_id, self.now())
        group.offsets = dict(offsets)
        if value is None:
            return group
        group.protocol_type = value["protocolType"] or None
        group.generation_id = value["generation"]
        group.protocol_name = value["protocol"]
        group.current_state_timestamp = value.get("currentStateTimestamp")
        for m in value["members"]:
            protocols = [(group.protocol_name, m["subscription"] or b"")] if group.protocol_name else []
            member = Member(
                m["memberId"],
                m.get("groupInstanceId"),
                m["clientId"] or "",
                m["clientHost"] or "",
                m.get("rebalanceTimeout", m["sessionTimeout"]),
                m["sessionTimeout"],
                group.protocol_type or "",
                protocols,
                assignment=m["assignment"] or b"",
            )
            group.add(member)
        group.leader_id = value["leader"] if value["leader"] in group.members else group.leader_id
        if group.members:
            group.state = STABLE
            for member in group.members.values():
                self._schedule_heartbeat(group, member, member.session_timeout_ms)
        return group

    # ================================================================ timers
    def _schedule_heartbeat(self, group: ClassicGroup, member: Member, timeout_ms: int) -> None:
        self._cancel(member.heartbeat_task)
        member_id = member.member_id
        member.heartbeat_task = self.scheduler.schedule_once(
            f"heartbeat-{group.group_id}-{member_id}",
            lambda: self._on_heartbeat_expired(group.group_id, member_id),
            timeout_ms,
        )

    def _on_heartbeat_expired(self, group_id: str, member_id: str) -> None:
        group = self.groups.get(group_id)
        member = group.members.get(member_id) if group else None
        if group is None or member is None:
            return
        member.heartbeat_task = None
        if member.awaiting_sync or (member.awaiting_join and not member.is_new):
            # Kept alive while its JoinGroup / SyncGroup waits (Kafka's shouldKeepAlive); checked again later.
            self._schedule_heartbeat(group, member, member.session_timeout_ms)
            return
        log.info("Member %s in group %s has failed, removing it from the group", member_id, group_id)
        self._remove_member_and_update(group, member, "removing member on heartbeat expiration")

    def _on_pending_member_expired(self, group_id: str, member_id: str) -> None:
        group = self.groups.get(group_id)
        if group is None or member_id not in group.pending_members:
            return
        del group.pending_members[member_id]
        log.info("Pending member %s in group %s has been removed after session timeout expiration", member_id, group_id)
        if group.is_in(PREPARING):
            self._maybe_complete_join(group)

    def _schedule_retention(self) -> None:
        if not self._active:
            return
        self._retention_task = self.scheduler.schedule_once(
            "delete-expired-group-metadata", self._retention_tick, self.config.offsets_retention_check_interval_ms
        )

    def _retention_tick(self) -> None:
        self.expire_offsets()
        self._schedule_retention()

    # ================================================================ JoinGroup
    def join_group(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        callback: Callable[[JoinResult], None],
        *,
        require_known_member_id: bool = True,
        supports_skip_assignment: bool = False,
    ) -> None:
        """Handle one JoinGroup; ``callback`` gets the answer now or when the rebalance completes."""

        def fail(error: Errors) -> None:
            callback(JoinResult(error, member_id))

        if not group_id:
            return fail(Errors.INVALID_GROUP_ID)
        if (status := self.group_status(group_id)) is not Errors.NONE:
            return fail(status)
        if self.offsets_topic_partitions() is None:
            return fail(Errors.COORDINATOR_NOT_AVAILABLE)
        if not (
            self.config.group_min_session_timeout_ms <= session_timeout_ms <= self.config.group_max_session_timeout_ms
        ):
            return fail(Errors.INVALID_SESSION_TIMEOUT)
        if rebalance_timeout_ms < 0:
            rebalance_timeout_ms = session_timeout_ms  # JoinGroup v0 has none: Kafka uses the session timeout
        consumer_group = self.consumer_groups.get(group_id)
        if consumer_group is not None and consumer_group.members:
            return fail(Errors.INCONSISTENT_GROUP_PROTOCOL)  # a KIP-848 group with members
        group = self.groups.get(group_id)
        if group is None:
            if member_id != UNKNOWN_MEMBER_ID:
                return fail(Errors.UNKNOWN_MEMBER_ID)
            group = self.groups[group_id] = ClassicGroup(group_id, self.now())
        if group.is_in(DEAD):
            return fail(Errors.COORDINATOR_NOT_AVAILABLE)  # being deleted; the client finds the coordinator again
        names = [name for name, _ in protocols]
        if not group.supports_protocols(protocol_type, names, ignore=member_id or None):
            return fail(Errors.INCONSISTENT_GROUP_PROTOCOL)
        member = Member(
            member_id,
            group_instance_id,
            client_id,
            client_host,
            rebalance_timeout_ms,
            session_timeout_ms,
            protocol_type,
            list(protocols),
            join_callback=callback,
            supports_skip_assignment=supports_skip_assignment,
        )
        if member_id == UNKNOWN_MEMBER_ID:
            self._join_unknown_member(group, member, require_known_member_id)
        else:
            self._join_known_member(group, member)
        if (
            not group.members
            and group.is_in(EMPTY)
            and group.generation_id == 0
            and not group.offsets
            and not group.pending_members
        ):
            self.groups.pop(group_id, None)  # nothing joined (an error answer): do not keep an empty shell

    def _join_unknown_member(self, group: ClassicGroup, member: Member, require_known_member_id: bool) -> None:
        if len(group.members) >= self.config.group_max_size:
            return self._answer_join(member, JoinResult(Errors.GROUP_MAX_SIZE_REACHED, UNKNOWN_MEMBER_ID))
        new_id = f"{member.client_id}-{uuid.uuid4()}"
        instance_id = member.group_instance_id
        if instance_id is not None and instance_id in group.static_members:
            return self._rejoin_static_member(group, member, new_id)
        member.member_id = new_id
        if instance_id is None and require_known_member_id:
            # KIP-394: hand out the id and wait for the member to join with it; drop it after a session timeout.
            group.pending_members[new_id] = self.scheduler.schedule_once(
                f"pending-member-{group.group_id}-{new_id}",
                lambda: self._on_pending_member_expired(group.group_id, new_id),
                member.session_timeout_ms,
            )
            return self._answer_join(member, JoinResult(Errors.MEMBER_ID_REQUIRED, new_id))
        self._add_member_and_rebalance(group, member)

    def _join_known_member(self, group: ClassicGroup, joining: Member) -> None:
        member_id = joining.member_id
        if member_id in group.pending_members:
            self._cancel(group.pending_members.pop(member_id))
            return self._add_member_and_rebalance(group, joining)
        error = self._validate_member(group, member_id, joining.group_instance_id)
        if error is not Errors.NONE:
            return self._answer_join(joining, JoinResult(error, member_id))
        member = group.members[member_id]
        if group.is_in(PREPARING):
            self._update_member_and_rebalance(group, member, joining)
        elif group.is_in(COMPLETING):
            if member.matches(joining.protocols):
                # The member lost the JoinGroup response: give it again.
                self._answer_join(joining, self._join_result(group, member, member_id))
            else:
                self._update_member_and_rebalance(group, member, joining)
        elif group.is_in(STABLE):
            if group.is_leader(member_id) or not member.matches(joining.protocols):
                self._update_member_and_rebalance(group, member, joining)
            else:
                self._answer_join(joining, self._join_result(group, member, member_id, with_members=False))
        else:
            self._answer_join(joining, JoinResult(Errors.UNKNOWN_MEMBER_ID, member_id))

    def _rejoin_static_member(self, group: ClassicGroup, joining: Member, new_id: str) -> None:
        """A static member restarted (KIP-345): it takes over its instance's slot under a new member id."""
        instance_id = joining.group_instance_id
        assert instance_id is not None
        old_id = group.static_members[instance_id]
        old = group.members[old_id]
        self._answer_join(old, JoinResult(Errors.FENCED_INSTANCE_ID, old_id))
        self._answer_sync(old, SyncResult(Errors.FENCED_INSTANCE_ID))
        member = group.replace_static_member(instance_id, old_id, new_id)
        joining.member_id = new_id
        log.info(
            "Static member %s of group %s with instance id %s rejoins as %s",
            old_id,
            group.group_id,
            instance_id,
            new_id,
        )
        if group.is_in(STABLE) and member.matches(joining.protocols):
            # Nothing changed for the group: no rebalance, the member gets its current generation back. A restarted
            # leader gets the members with skipAssignment (JoinGroup v9+, KIP-814) so it knows the group without
            # assigning again; an older client is told the old leader id, so it syncs as a follower (as Kafka).
            member.client_id, member.client_host = joining.client_id, joining.client_host
            member.session_timeout_ms, member.rebalance_timeout_ms = (
                joining.session_timeout_ms,
                joining.rebalance_timeout_ms,
            )
            error = self._store_group(group)
            if error is not Errors.NONE:
                group.replace_static_member(instance_id, new_id, old_id)
                return self._answer_join(joining, JoinResult(error, UNKNOWN_MEMBER_ID))
            self._schedule_heartbeat(group, member, member.session_timeout_ms)
            result = self._join_result(group, member, new_id, with_members=joining.supports_skip_assignment)
            if group.is_leader(new_id):
                if joining.supports_skip_assignment:
                    result.skip_assignment = True
                else:
                    result.leader = old_id
            return self._answer_join(joining, result)
        self._update_member_and_rebalance(group, member, joining)

    def _add_member_and_rebalance(self, group: ClassicGroup, member: Member) -> None:
        member.is_new = True
        if group.is_in(PREPARING) and group.generation_id == 0:
            group.new_member_added = True  # extends the initial rebalance delay
        group.add(member)
        # A new member has Kafka's new-member join timeout (5 minutes) to complete its first join.
        self._schedule_heartbeat(group, member, NEW_MEMBER_JOIN_TIMEOUT_MS)
        self._maybe_prepare_rebalance(group, f"Adding new member {member.member_id}")
        if group.is_in(PREPARING):
            self._maybe_complete_join(group)

    def _update_member_and_rebalance(self, group: ClassicGroup, member: Member, joining: Member) -> None:
        member.protocols = joining.protocols
        member.protocol_type = joining.protocol_type
        member.client_id, member.client_host = joining.client_id, joining.client_host
        member.session_timeout_ms, member.rebalance_timeout_ms = (
            joining.session_timeout_ms,
            joining.rebalance_timeout_ms,
        )
        member.supports_skip_assignment = joining.supports_skip_assignment
        self._answer_join(member, JoinResult(Errors.REBALANCE_IN_PROGRESS, member.member_id))  # a stale waiting join
        member.join_callback = joining.join_callback
        self._maybe_prepare_rebalance(group, f"Updating metadata for member {member.member_id}")
        if group.is_in(PREPARING):
            self._maybe_complete_join(group)

    def _maybe_prepare_rebalance(self, group: ClassicGroup, reason: str) -> None:
        if group.is_in(STABLE, COMPLETING, EMPTY):
            self._prepare_rebalance(group, reason)

    def _prepare_rebalance(self, group: ClassicGroup, reason: str) -> None:
        if group.is_in(COMPLETING):
            for m in group.members.values():
                m.assignment = b""
                self._answer_sync(m, SyncResult(Errors.REBALANCE_IN_PROGRESS))
        initial = self.config.group_initial_rebalance_delay_ms
        timeout = group.rebalance_timeout_ms()
        self._cancel(group.join_task)
        if group.is_in(EMPTY) and initial > 0:
            delay = min(initial, timeout)
            group.initial_delay_remaining_ms = max(timeout - initial, 0)
            group.new_member_added = False
            group.in_initial_delay = True
            group.join_task = self.scheduler.schedule_once(
                f"initial-join-{group.group_id}", lambda: self._on_initial_join_expired(group), delay
            )
        else:
            group.in_initial_delay = False
            group.join_task = self.scheduler.schedule_once(
                f"join-{group.group_id}", lambda: self._on_join_expired(group), timeout
            )
        log.info(
            "Preparing to rebalance group %s in state %s with old generation %d (reason: %s)",
            group.group_id,
            group.state.value,
            group.generation_id,
            reason,
        )
        group.transition_to(PREPARING, self.now())
        self._maybe_complete_join(group)  # Kafka's tryCompleteElseWatch: e.g. the last member just left

    def _on_initial_join_expired(self, group: ClassicGroup) -> None:
        group.join_task = None
        if group.new_member_added and group.initial_delay_remaining_ms > 0:
            group.new_member_added = False
            delay = min(self.config.group_initial_rebalance_delay_ms, group.initial_delay_remaining_ms)
            group.initial_delay_remaining_ms = max(
                group.initial_delay_remaining_ms - self.config.group_initial_rebalance_delay_ms, 0
            )
            group.join_task = self.scheduler.schedule_once(
                f"initial-join-{group.group_id}", lambda: self._on_initial_join_expired(group), delay
            )
            return
        self._complete_join(group)

    def _on_join_expired(self, group: ClassicGroup) -> None:
        group.join_task = None
        self._complete_join(group)

    def _maybe_complete_join(self, group: ClassicGroup) -> None:
        """Complete the join phase as soon as every member has rejoined (not during the initial delay)."""
        if group.is_in(PREPARING) and not group.in_initial_delay and group.has_all_members_joined():
            self._complete_join(group)

    def _complete_join(self, group: ClassicGroup) -> None:
        if not group.is_in(PREPARING):
            return
        self._cancel(group.join_task)
        group.join_task = None
        group.in_initial_delay = False
        for member in [m for m in group.members.values() if not m.awaiting_join]:
            log.info(
                "Group %s removed member %s that did not rejoin before the rebalance timeout",
                group.group_id,
                member.member_id,
            )
            self._cancel(member.heartbeat_task)
            group.remove(member.member_id)
        group.generation_id += 1
        if not group.members:
            group.protocol_name = None
            group.transition_to(EMPTY, self.now())
            log.info("Group %s with generation %d is now empty", group.group_id, group.generation_id)
            error = self._store_group(group)
            if error is not Errors.NONE:
                log.warning("Failed to write the empty group metadata of %s: %s", group.group_id, error.name)
            return
        group.protocol_name = group.select_protocol()
        group.transition_to(COMPLETING, self.now())
        log.info(
            "Stabilized group %s generation %d with %d members", group.group_id, group.generation_id, len(group.members)
        )
        for member in list(group.members.values()):
            member.is_new = False
            self._answer_join(member, self._join_result(group, member, member.member_id))
            self._schedule_heartbeat(group, member, member.session_timeout_ms)

    def _join_result(
        self, group: ClassicGroup, member: Member, member_id: str, with_members: bool = True
    ) -> JoinResult:
        members = []
        if with_members and group.is_leader(member_id):
            members = [
                (m.member_id, m.group_instance_id, m.metadata(group.protocol_name or ""))
                for m in group.members.values()
            ]
        return JoinResult(
            Errors.NONE,
            member_id,
            group.generation_id,
            group.protocol_type,
            group.protocol_name,
            group.leader_id or "",
            members,
        )

    @staticmethod
    def _answer_join(member: Member, result: JoinResult) -> None:
        callback, member.join_callback = member.join_callback, None
        if callback is not None:
            callback(result)

    @staticmethod
    def _answer_sync(member: Member, result: SyncResult) -> None:
        callback, member.sync_callback = member.sync_callback, None
        if callback is not None:
            callback(result)

    # ================================================================ membership checks
    @staticmethod
    def _validate_member(group: ClassicGroup, member_id: str, instance_id: str | None) -> Errors:
        """Kafka's validateMember: a static member whose instance id now belongs to another member id is fenced."""
        if instance_id is not None:
            current = group.static_members.get(instance_id)
            if current is not None and current != member_id:
                return Errors.FENCED_INSTANCE_ID
        if member_id not in group.members:
            return Errors.UNKNOWN_MEMBER_ID
        return Errors.NONE

    def _remove_member_and_update(self, group: ClassicGroup, member: Member, reason: str) -> None:
        self._cancel(member.heartbeat_task)
        self._answer_join(member, JoinResult(Errors.UNKNOWN_MEMBER_ID, member.member_id))
        self._answer_sync(member, SyncResult(Errors.UNKNOWN_MEMBER_ID))
        group.remove(member.member_id)
        if group.is_in(STABLE, COMPLETING):
            self._prepare_rebalance(group, reason)
        elif group.is_in(PREPARING):
            self._maybe_complete_join(group)

    # ================================================================ SyncGroup
    def sync_group(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: dict[str, bytes],
        callback: Callable[[SyncResult], None],
    ) -> None:
        if (status := self.group_status(group_id)) is not Errors.NONE:
            return callback(SyncResult(status))
        group = self.groups.get(group_id)
        if group is None:
            return callback(SyncResult(Errors.UNKNOWN_MEMBER_ID))
        if group.is_in(DEAD):
            return callback(SyncResult(Errors.COORDINATOR_NOT_AVAILABLE))
        error = self._validate_member(group, member_id, group_instance_id)
        if error is not Errors.NONE:
            return callback(SyncResult(error))
        if generation_id != group.generation_id:
            return callback(SyncResult(Errors.ILLEGAL_GENERATION))
        if (protocol_type is not None and protocol_type != group.protocol_type) or (
            protocol_name is not None and protocol_name != group.protocol_name
        ):
            return callback(SyncResult(Errors.INCONSISTENT_GROUP_PROTOCOL))
        member = group.members[member_id]
        if group.is_in(PREPARING):
            return callback(SyncResult(Errors.REBALANCE_IN_PROGRESS))
        if group.is_in(STABLE):
            self._schedule_heartbeat(group, member, member.session_timeout_ms)
            return callback(SyncResult(Errors.NONE, group.protocol_type, group.protocol_name, member.assignment))
        if not group.is_in(COMPLETING):
            return callback(SyncResult(Errors.UNKNOWN_MEMBER_ID))
        self._answer_sync(member, SyncResult(Errors.REBALANCE_IN_PROGRESS))  # a duplicate SyncGroup replaces the old
        member.sync_callback = callback
        self._schedule_heartbeat(group, member, member.session_timeout_ms)
        if group.is_leader(member_id):
            for m in group.members.values():
                m.assignment = assignments.get(m.member_id, b"")
            error = self._store_group(group)
            if error is not Errors.NONE:
                for m in group.members.values():
                    m.assignment = b""
                    self._answer_sync(m, SyncResult(error))
                self._prepare_rebalance(group, f"Error {error.name} when storing the group assignment")
                return
            group.transition_to(STABLE, self.now())
            log.info(
                "Assignment received from leader %s for group %s for generation %d. The group has %d members.",
                member_id,
                group.group_id,
                group.generation_id,
                len(group.members),
            )
            for m in group.members.values():
                self._answer_sync(m, SyncResult(Errors.NONE, group.protocol_type, group.protocol_name, m.assignment))

    # ================================================================ Heartbeat / LeaveGroup
    def heartbeat(self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int) -> Errors:
        if (status := self.group_status(group_id)) is not Errors.NONE:
            return status
        group = self.groups.get(group_id)
        if group is None or group.is_in(EMPTY):
            return Errors.UNKNOWN_MEMBER_ID
        if group.is_in(DEAD):
            return Errors.COORDINATOR_NOT_AVAILABLE
        error = self._validate_member(group, member_id, group_instance_id)
        if error is not Errors.NONE:
            return error
        if generation_id != group.generation_id:
            return Errors.ILLEGAL_GENERATION
        member = group.members[member_id]
        self._schedule_heartbeat(group, member, member.session_timeout_ms)
        if group.is_in(PREPARING):
            return Errors.REBALANCE_IN_PROGRESS
        return Errors.NONE

    def leave_group(
        self, group_id: str, leaving: list[tuple[str, str | None]]
    ) -> tuple[Errors, list[tuple[str, str | None, Errors]]]:
        """Remove each (member id, instance id); a static member may leave by instance id alone (KIP-345)."""
        if (status := self.group_status(group_id)) is not Errors.NONE:
            return status, []
        group = self.groups.get(group_id)
        if group is None:
            return Errors.NONE, [(m, i, Errors.UNKNOWN_MEMBER_ID) for m, i in leaving]
        if group.is_in(DEAD):
            return Errors.COORDINATOR_NOT_AVAILABLE, []
        results: list[tuple[str, str | None, Errors]] = []
        for member_id, instance_id in leaving:
            if instance_id is not None:
                current = group.static_members.get(instance_id)
                if current is None:
                    results.append((member_id, instance_id, Errors.UNKNOWN_MEMBER_ID))
                    continue
                if member_id != UNKNOWN_MEMBER_ID and member_id != current:
                    results.append((member_id, instance_id, Errors.FENCED_INSTANCE_ID))
                    continue
                member_id = current
            if member_id in group.pending_members:
                self._cancel(group.pending_members.pop(member_id))
                results.append((member_id, instance_id, Errors.NONE))
                if group.is_in(PREPARING):
                    self._maybe_complete_join(group)
                continue
            member = group.members.get(member_id)
            if member is None:
                results.append((member_id, instance_id, Errors.UNKNOWN_MEMBER_ID))
                continue
            log.info("Member %s has left group %s through explicit LeaveGroup request", member_id, group_id)
            self._remove_member_and_update(group, member, f"removing member {member_id} on LeaveGroup")
            results.append((member_id, instance_id, Errors.NONE))
        return Errors.NONE, results

    # ================================================================ offsets
    def commit_offsets(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        offsets: dict[tuple[str, int], tuple[int, int, str | None]],
        retention_time_ms: int = -1,
    ) -> dict[tuple[str, int], Errors]:
        """OffsetCommit: ``offsets`` maps (topic, partition) to (offset, leader epoch, metadata)."""

        def all_fail(error: Errors) -> dict[tuple[str, int], Errors]:
            return {tp: error for tp in offsets}

        if not group_id:
            return all_fail(Errors.INVALID_GROUP_ID)
        if (status := self.group_status(group_id)) is not Errors.NONE:
            return all_fail(status)
        if self.offsets_topic_partitions() is None:
            return all_fail(Errors.COORDINATOR_NOT_AVAILABLE)
        consumer_check = self._validate_consumer_commit(group_id, member_id, generation_id)
        group = self.groups.get(group_id)
        if consumer_check is not None:  # a KIP-848 group: its member and epoch were checked
            if consumer_check is not Errors.NONE:
                return all_fail(consumer_check)
            if group is None:
                group = self.groups[group_id] = ClassicGroup(group_id, self.now())  # holds the group's offsets
        else:
            if group is None:
                if generation_id >= 0 or member_id != UNKNOWN_MEMBER_ID or group_instance_id is not None:
                    return all_fail(Errors.ILLEGAL_GENERATION)
                group = self.groups[group_id] = ClassicGroup(group_id, self.now())  # a simple consumer's commit
            error = self._validate_commit(group, member_id, group_instance_id, generation_id)
            if error is not Errors.NONE:
                return all_fail(error)
        if group.is_in(STABLE, PREPARING) and member_id in group.members:
            member = group.members[member_id]
            self._schedule_heartbeat(group, member, member.session_timeout_ms)
        results: dict[tuple[str, int], Errors] = {}
        entries = []
        accepted: dict[tuple[str, int], OffsetAndMetadata] = {}
        now = self.now()
        # Kafka: no expiry for -1 (DEFAULT_RETENTION_TIME), else now + retention as a Java long (which wraps).
        expire = None if retention_time_ms == -1 else ((now + retention_time_ms + 2**63) % 2**64) - 2**63
        for (topic, partition), (offset, leader_epoch, metadata) in offsets.items():
            if not self._partition_exists(topic, partition):
                results[(topic, partition)] = Errors.UNKNOWN_TOPIC_OR_PARTITION
                continue
            metadata = metadata or ""
            if len(metadata.encode("utf-8")) > self.config.offset_metadata_max_bytes:
                results[(topic, partition)] = Errors.OFFSET_METADATA_TOO_LARGE
                continue
            committed = OffsetAndMetadata(offset, leader_epoch, metadata, now, expire)
            accepted[(topic, partition)] = committed
            entries.append(
                (
                    rec.offset_commit_key(group_id, topic, partition),
                    rec.offset_commit_value(offset, leader_epoch, metadata, now, expire),
                )
            )
        error = self._append(group_id, entries, for_offsets=True)
        for tp, committed in accepted.items():
            results[tp] = error
            if error is Errors.NONE:
                group.offsets[tp] = committed
        if not group.offsets and not group.members and group.is_in(EMPTY) and group.generation_id == 0:
            self.groups.pop(group_id, None)
        return results

    def commit_transactional_offsets(
        self,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        offsets: dict[tuple[str, int], tuple[int, int, str | None]],
    ) -> dict[tuple[str, int], Errors]:
        """TxnOffsetCommit: the offsets are written as a transactional batch of the producer and stay pending
        (invisible to OffsetFetch) until the transaction's marker reaches the group's partition
        (``complete_transaction``). The member and generation are checked only when given (KIP-447)."""

        def all_fail(error: Errors) -> dict[tuple[str, int], Errors]:
            return {tp: error for tp in offsets}

        if not group_id:
            return all_fail(Errors.INVALID_GROUP_ID)
        if self.offsets_topic_partitions() is None:
            return all_fail(Errors.COORDINATOR_NOT_AVAILABLE)
        if member_id != UNKNOWN_MEMBER_ID or generation_id >= 0:
            consumer_check = self._validate_consumer_commit(group_id, member_id, generation_id)
            if consumer_check is not None and consumer_check is not Errors.NONE:
                return all_fail(consumer_check)
            group = self.groups.get(group_id)
            if consumer_check is None:
                if group is None:
                    return all_fail(Errors.ILLEGAL_GENERATION)
                error = self._validate_commit(group, member_id, group_instance_id, generation_id)
                if error is not Errors.NONE:
                    return all_fail(error)
        results: dict[tuple[str, int], Errors] = {}
        entries = []
        accepted: dict[tuple[str, int], OffsetAndMetadata] = {}
        now = self.now()
        for (topic, partition), (offset, leader_epoch, metadata) in offsets.items():
            if not self._partition_exists(topic, partition):
                results[(topic, partition)] = Errors.UNKNOWN_TOPIC_OR_PARTITION
                continue
            metadata = metadata or ""
            if len(metadata.encode("utf-8")) > self.config.offset_metadata_max_bytes:
                results[(topic, partition)] = Errors.OFFSET_METADATA_TOO_LARGE
                continue
            accepted[(topic, partition)] = OffsetAndMetadata(offset, leader_epoch, metadata, now, None)
            entries.append(
                (
                    rec.offset_commit_key(group_id, topic, partition),
                    rec.offset_commit_value(offset, leader_epoch, metadata, now),
                )
            )
        error = self._append(group_id, entries, for_offsets=True, producer=(producer_id, producer_epoch))
        for tp, committed in accepted.items():
            results[tp] = error
            if error is Errors.NONE:
                self.pending_txn_offsets.setdefault(producer_id, {}).setdefault(group_id, {})[tp] = committed
        return results

    def complete_transaction(self, producer_id: int, offsets_partition: int, committed: bool) -> None:
        """A COMMIT/ABORT marker of ``producer_id`` was written to ``__consumer_offsets-offsets_partition``: its
        pending offsets of the groups on that partition become visible, or are dropped (Kafka's
        GroupMetadataManager.handleTxnCompletion)."""
        by_group = self.pending_txn_offsets.get(producer_id)
        if not by_group:
            return
        for group_id in [g for g in by_group if self.partition_for(g) == offsets_partition]:
            pending = by_group.pop(group_id)
            if not committed:
                continue
            group = self.groups.get(group_id)
            if group is None:
                group = self.groups[group_id] = ClassicGroup(group_id, self.now())
            group.offsets.update(pending)
        if not by_group:
            del self.pending_txn_offsets[producer_id]

    def has_pending_offsets(self, group_id: str, topic: str, partition: int) -> bool:
        """Whether a transaction holds an undecided offset for this partition (OffsetFetch's require_stable)."""
        return any((topic, partition) in groups.get(group_id, {}) for groups in self.pending_txn_offsets.values())

    def _validate_commit(self, group: ClassicGroup, member_id: str, instance_id: str | None, generation: int) -> Errors:
        """Kafka's ClassicGroup.validateOffsetCommit."""
        if group.is_in(DEAD):
            return Errors.COORDINATOR_NOT_AVAILABLE
        if generation < 0 and group.is_in(EMPTY):
            return Errors.NONE  # a commit from outside the group (admin, manual assignment)
        if group.is_in(COMPLETING):
            return Errors.REBALANCE_IN_PROGRESS
        error = self._validate_member(group, member_id, instance_id)
        if error is not Errors.NONE:
            return error
        if generation != group.generation_id:
            return Errors.ILLEGAL_GENERATION
        return Errors.NONE

    def _partition_exists(self, topic: str, partition: int) -> bool:
        if self.cluster_partition_exists is not None:  # a cluster: this broker may host no replica of it
            return self.cluster_partition_exists(topic, partition)
        try:
            self.log_manager.get_log(topic, partition)
            return True
        except UnknownTopicOrPartitionError:
            return False

    def fetch_offsets(
        self, group_id: str, partitions: Iterable[tuple[str, int]] | None
    ) -> tuple[Errors, dict[tuple[str, int], OffsetAndMetadata | None]]:
        """OffsetFetch: the committed offset of each partition (None: nothing committed); all of them for None."""
        if (status := self.group_status(group_id)) is not Errors.NONE:
            return status, {}
        if self.offsets_topic_partitions() is None:
            return Errors.COORDINATOR_NOT_AVAILABLE, {}
        group = self.groups.get(group_id)
        if group is None:
            return Errors.NONE, {tp: None for tp in partitions or ()}
        if group.is_in(DEAD):
            return Errors.COORDINATOR_NOT_AVAILABLE, {}
        if partitions is None:
            return Errors.NONE, dict(sorted(group.offsets.items()))
        return Errors.NONE, {tp: group.offsets.get(tp) for tp in partitions}

    def delete_offsets(
        self, group_id: str, partitions: list[tuple[str, int]]
    ) -> tuple[Errors, dict[tuple[str, int], Errors]]:
        """OffsetDelete: remove committed offsets of partitions whose topic the group does not consume."""
        if (status := self.group_status(group_id)) is not Errors.NONE:
            return status, {}
        group = self.groups.get(group_id)
        if group is None or group.is_in(DEAD):
            return Errors.GROUP_ID_NOT_FOUND, {}
        if not group.is_in(EMPTY) and group.protocol_type != "consumer" and group.members:
            return Errors.NON_EMPTY_GROUP, {}
        subscribed = group.subscribed_topics() if group.members else set()
        results: dict[tuple[str, int], Errors] = {}
        entries = []
        for topic, partition in partitions:
            if subscribed is None or topic in subscribed:
                results[(topic, partition)] = Errors.GROUP_SUBSCRIBED_TO_TOPIC
                continue
            results[(topic, partition)] = Errors.NONE
            if (topic, partition) in group.offsets:
                entries.append((rec.offset_commit_key(group_id, topic, partition), None))
        error = self._append(group_id, entries, for_offsets=True)
        if error is not Errors.NONE:
            return error, {}
        for key, _ in entries:
            _, k = rec.decode_key(key)
            group.offsets.pop((k["topic"], k["partition"]), None)
        return Errors.NONE, results

    def expire_offsets(self) -> int:
        """offsets.retention.minutes (KIP-211): drop the offsets of empty groups after the retention since the group
        became empty, those of topics an active consumer group no longer subscribes to after the retention since
        their commit, and explicitly expiring (v1) offsets at their time; an empty group left without offsets
        dies. Returns the number of offsets removed."""
        now = self.now()
        retention = self.config.offsets_retention_minutes * 60_000
        removed = 0
        for group in list(self.groups.values()):
            consumer_group = self.consumer_groups.get(group.group_id)
            if group.is_in(DEAD) or (consumer_group is not None and consumer_group.members):
                continue  # an active KIP-848 group keeps its offsets
            if group.is_in(EMPTY):
                base = group.current_state_timestamp
                subscribed: set[str] | None = set()
            elif group.protocol_type == "consumer" and group.is_in(STABLE):
                base = None
                subscribed = group.subscribed_topics()
                if subscribed is None:
                    continue
            else:
                continue
            expired = []
            for tp, om in group.offsets.items():
                if om.expire_timestamp is not None:
                    due = now >= om.expire_timestamp
                elif tp[0] in (subscribed or set()):
                    due = False
                else:
                    start = base if base is not None and group.is_in(EMPTY) else om.commit_timestamp
                    due = now - start >= retention
                if due:
                    expired.append(tp)
            entries = [(rec.offset_commit_key(group.group_id, t, p), None) for t, p in expired]
            if group.is_in(EMPTY) and len(expired) == len(group.offsets):
                entries.append((rec.group_metadata_key(group.group_id), None))
            if not entries or self._append(group.group_id, entries, for_offsets=True) is not Errors.NONE:
                continue
            for tp in expired:
                del group.offsets[tp]
            removed += len(expired)
            if group.is_in(EMPTY) and not group.offsets:
                group.transition_to(DEAD, now)
                del self.groups[group.group_id]
                log.info("Group %s transitioned to Dead in generation %d", group.group_id, group.generation_id)
        if removed:
            log.info("Removed %d expired offsets", removed)
        return removed

    # ================================================================ admin
    def list_groups(self, states: Iterable[str] = (), types: Iterable[str] = ()) -> list[GroupOverview]:
        wanted_states = {s.lower() for s in states}
        wanted_types = {t.lower() for t in types}
        found = [
            GroupOverview(g.group_id, g.protocol_type or "", g.state.value)
            for g in self.groups.values()
            if g.group_id not in self.consumer_groups and self._owns(g.group_id)
        ]
        found += [
            GroupOverview(g.group_id, "consumer", g.state, "consumer")
            for g in self.consumer_groups.values()
            if self._owns(g.group_id)
        ]
        return [
            g
            for g in found
            if (not wanted_states or g.state.lower() in wanted_states)
            and (not wanted_types or g.group_type in wanted_types)
        ]

    def describe_group(self, group_id: str) -> tuple[Errors, GroupDescription | None]:
        if (status := self.group_status(group_id)) is not Errors.NONE:
            return status, None
        group = self.groups.get(group_id)
        if group is None or group_id in self.consumer_groups:  # as Kafka's classicGroup(): KIP-848 groups are not
            return Errors.GROUP_ID_NOT_FOUND, None
        stable = group.is_in(STABLE)
        members = [
            (
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                m.metadata(group.protocol_name) if stable and group.protocol_name else b"",
                m.assignment if stable else b"",
            )
            for m in group.members.values()
        ]
        return Errors.NONE, GroupDescription(
            group.group_id,
            group.state.value,
            group.protocol_type or "",
            (group.protocol_name or "") if stable else "",
            members,
        )

    def delete_groups(self, group_ids: list[str]) -> dict[str, Errors]:
        results: dict[str, Errors] = {}
        for group_id in group_ids:
            if (status := self.group_status(group_id)) is not Errors.NONE:
                results[group_id] = status
                continue
            consumer_group = self.consumer_groups.get(group_id)
            if consumer_group is not None:
                if consumer_group.members:
                    results[group_id] = Errors.NON_EMPTY_GROUP
                    continue
                error = self._persist_consumer_group(consumer_group, deleted=True)
                if error is not Errors.NONE:
                    results[group_id] = error
                    continue
                del self.consumer_groups[group_id]
                if group_id not in self.groups:
                    results[group_id] = Errors.NONE
                    continue
            group = self.groups.get(group_id)
            if group is None or group.is_in(DEAD):
                results[group_id] = Errors.GROUP_ID_NOT_FOUND
                continue
            if not group.is_in(EMPTY):
                results[group_id] = Errors.NON_EMPTY_GROUP
                continue
            entries = [(rec.offset_commit_key(group_id, t, p), None) for t, p in group.offsets]
            entries.append((rec.group_metadata_key(group_id), None))
            error = self._append(group_id, entries, for_offsets=False)
            if error is not Errors.NONE:
                results[group_id] = error
                continue
            for task in group.pending_members.values():
                self._cancel(task)
            group.transition_to(DEAD, self.now())
            del self.groups[group_id]
            results[group_id] = Errors.NONE
            log.info("Deleted group %s and its %d offsets", group_id, len(group.offsets))
        return results
