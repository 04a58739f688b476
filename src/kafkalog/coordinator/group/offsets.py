"""Committed offsets for the GroupCoordinator (Kafka's OffsetMetadataManager): OffsetCommit, TxnOffsetCommit and
the transaction markers that decide them, OffsetFetch, OffsetDelete, and offsets.retention.minutes expiry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from ...errors import UnknownTopicOrPartitionError
from . import records as rec
from .classic_protocol import ClassicProtocolMixin
from .consumer_protocol import ConsumerProtocolMixin
from .errors import Errors
from .group import ClassicGroup, OffsetAndMetadata
from .metadata_manager import COMPLETING, DEAD, EMPTY, PREPARING, STABLE, UNKNOWN_MEMBER_ID, log

TopicPartitionKey = tuple[str, int]
OffsetCommits = dict[TopicPartitionKey, tuple[int, int, str | None]]  # (offset, leader epoch, metadata)


def _answer_all(offsets: OffsetCommits) -> Callable[[Errors], dict[TopicPartitionKey, Errors]]:
    """A commit's answer when one error refuses it whole: that error for every partition."""
    return lambda error: dict.fromkeys(offsets, error)


class OffsetsMixin(ClassicProtocolMixin, ConsumerProtocolMixin):
    """The offsets of both kinds of group (a KIP-848 group's offsets are kept with the classic store). Invariant:
    an offset is in a group's ``offsets`` only once its record is in the group's partition; a transactional one is
    in ``pending_txn_offsets`` until its transaction's marker decides it."""

    # ================================================================ offsets
    def commit_offsets(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        offsets: OffsetCommits,
        retention_time_ms: int = -1,
    ) -> dict[TopicPartitionKey, Errors]:
        """OffsetCommit: ``offsets`` maps (topic, partition) to (offset, leader epoch, metadata)."""
        all_fail = _answer_all(offsets)

        if (error := self._group_request_error(group_id)) is not Errors.NONE:
            return all_fail(error)
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
        now = self.now()
        # Kafka: no expiry for -1 (DEFAULT_RETENTION_TIME), else now + retention as a Java long (which wraps).
        expire = None if retention_time_ms == -1 else ((now + retention_time_ms + 2**63) % 2**64) - 2**63
        results, written = self._write_offsets(group_id, offsets, now, expire)
        group.offsets.update(written)
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
        offsets: OffsetCommits,
    ) -> dict[TopicPartitionKey, Errors]:
        """TxnOffsetCommit: the offsets are written as a transactional batch of the producer and stay pending
        (invisible to OffsetFetch) until the transaction's marker reaches the group's partition
        (``complete_transaction``). The member and generation are checked only when given (KIP-447)."""
        all_fail = _answer_all(offsets)

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
        results, written = self._write_offsets(group_id, offsets, self.now(), None, (producer_id, producer_epoch))
        if written:
            self.pending_txn_offsets.setdefault(producer_id, {}).setdefault(group_id, {}).update(written)
        return results

    def _write_offsets(
        self,
        group_id: str,
        offsets: OffsetCommits,
        now: int,
        expire: int | None,
        producer: tuple[int, int] | None = None,
    ) -> tuple[dict[TopicPartitionKey, Errors], dict[TopicPartitionKey, OffsetAndMetadata]]:
        """Write the acceptable offsets of a commit as one batch (a transactional batch of ``producer``, if given):
        each partition's answer, and the offsets written (none when the write failed). A partition that does not
        exist or whose metadata is over offset.metadata.max.bytes is refused; the others share the write's fate."""
        results: dict[TopicPartitionKey, Errors] = {}
        entries = []
        accepted: dict[TopicPartitionKey, OffsetAndMetadata] = {}
        for (topic, partition), (offset, leader_epoch, metadata) in offsets.items():
            if not self._partition_exists(topic, partition):
                results[(topic, partition)] = Errors.UNKNOWN_TOPIC_OR_PARTITION
                continue
            metadata = metadata or ""
            if len(metadata.encode("utf-8")) > self.config.offset_metadata_max_bytes:
                results[(topic, partition)] = Errors.OFFSET_METADATA_TOO_LARGE
                continue
            accepted[(topic, partition)] = OffsetAndMetadata(offset, leader_epoch, metadata, now, expire)
            value = rec.offset_commit_value(offset, leader_epoch, metadata, now, expire)
            entries.append((rec.offset_commit_key(group_id, topic, partition), value))
        error = self._append(group_id, entries, for_offsets=True, producer=producer)
        results.update(dict.fromkeys(accepted, error))
        return results, (accepted if error is Errors.NONE else {})

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
        return self._validate_generation(group, member_id, instance_id, generation)

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

    def _schedule_retention(self) -> None:
        if not self._active:
            return
        self._retention_task = self.scheduler.schedule_once(
            "delete-expired-group-metadata", self._retention_tick, self.config.offsets_retention_check_interval_ms
        )

    def _retention_tick(self) -> None:
        self.expire_offsets()
        self._schedule_retention()

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
