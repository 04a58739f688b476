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

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from ...partition import READ_UNCOMMITTED
from ...partition.partition import DEFAULT_FETCH_BYTES
from ...record.types import ControlRecordType
from . import records as rec
from .config import GroupCoordinatorConfig
from .errors import Errors
from .group import ClassicGroup, Member, OffsetAndMetadata
from .metadata_manager import DEAD, EMPTY, GROUP_METADATA_TOPIC_NAME, STABLE, log
from .offsets import OffsetsMixin

__all__ = [
    "GROUP_METADATA_TOPIC_NAME",
    "GroupCoordinator",
    "GroupCoordinatorConfig",
    "GroupDescription",
    "GroupOverview",
]


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


class GroupCoordinator(OffsetsMixin):
    """The group coordinator of one broker (it leads every __consumer_offsets partition on one node; in a cluster,
    those it is the leader of): lifecycle, ownership, loading, and the admin APIs, over the protocols' mixins.

    Invariants: those of ``GroupMetadataManager`` (groups and their partitions), ``ClassicProtocolMixin`` (timers
    and waiting answers) and ``OffsetsMixin`` (offsets written before they are visible).
    """

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

    def on_election(self, partition: int) -> None:
        """Kafka's onElection: load the groups and offsets of ``partition`` and coordinate them from now on."""
        self._take_over(partition)

    def _drop_partition(self, partition: int) -> None:
        """Forget the groups of ``partition``: their timers stop, their waiting members are answered NOT_COORDINATOR
        (and find the new coordinator)."""
        for group_id in [g for g in self.groups if self.partition_for(g) == partition]:
            self._unload_group(self.groups.pop(group_id))
        for group_id in [g for g in self.consumer_groups if self.partition_for(g) == partition]:
            self._drop_consumer_group(group_id)

    def shutdown(self) -> None:
        """Cancel every timer and answer every waiting JoinGroup / SyncGroup with NOT_COORDINATOR (as Kafka does
        when it resigns a partition); the state on disk is complete, so nothing is written."""
        self._active = False
        if self._retention_task is not None:
            self._retention_task.cancel()
        for consumer_group in self.consumer_groups.values():
            self._stop_consumer_timers(consumer_group)
        for group in self.groups.values():
            self._unload_group(group)

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
