"""ConsumerGroupHeartbeat (KIP-848) for the GroupCoordinator: the heartbeat, reconciliation and timers.

A mixin of GroupCoordinator (it shares the coordinator's clock, scheduler, log manager and offsets): the group
model and the assignors are in ``consumer_group``; the rules are documented there.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from ...errors import UnknownTopicOrPartitionError
from ...logdir import parse_uuid
from . import records as rec
from .consumer_group import (
    ASSIGNORS,
    DEFAULT_ASSIGNOR,
    FENCED_MEMBER_EPOCH,
    INVALID_REGULAR_EXPRESSION,
    LEAVE_GROUP_EPOCH,
    LEAVE_GROUP_STATIC_EPOCH,
    UNRELEASED_INSTANCE_ID,
    UNSUPPORTED_ASSIGNOR,
    ConsumerGroup,
    ConsumerMember,
    HeartbeatResult,
    MemberState,
    TopicPartitions,
    _intersect,
    _minus,
    _union,
    new_member_id,
)
from .errors import Errors
from .metadata_manager import GroupMetadataManager

MEMBER_STATE_BYTES = {  # Kafka's MemberState values, as ConsumerGroupCurrentMemberAssignmentValue stores them
    MemberState.STABLE: 0,
    MemberState.UNREVOKED_PARTITIONS: 1,
    MemberState.UNRELEASED_PARTITIONS: 2,
}
BYTE_MEMBER_STATES = {v: k for k, v in MEMBER_STATE_BYTES.items()}

log = logging.getLogger("org.apache.kafka.coordinator.group.GroupMetadataManager")


def _subset(a: TopicPartitions, b: TopicPartitions) -> bool:
    return all(ps <= b.get(t, set()) for t, ps in a.items())


@dataclass(frozen=True)
class ConsumerHeartbeat:
    """One ConsumerGroupHeartbeat request's member fields (None: not sent, i.e. unchanged)."""

    member_id: str
    member_epoch: int
    instance_id: str | None
    rack_id: str | None
    rebalance_timeout_ms: int
    topic_names: list[str] | None
    regex: str | None
    assignor: str | None
    owned: TopicPartitions | None
    client_id: str
    client_host: str

    @property
    def is_full(self) -> bool:
        """Kafka's rule for sending the assignment even when unchanged: a join, or a client resending everything
        after an error (rebalance timeout, subscription and owned partitions all set)."""
        return self.member_epoch == 0 or (
            self.rebalance_timeout_ms is not None
            and self.rebalance_timeout_ms != -1
            and self.topic_names is not None
            and self.owned is not None
        )

    def fail(self, code: int, message: str | None = None) -> HeartbeatResult:
        """The answer refusing this request: the member id and epoch it sent, back."""
        return HeartbeatResult(int(code), message, self.member_id or None, self.member_epoch)


class ConsumerProtocolMixin(GroupMetadataManager):
    """The KIP-848 half of the coordinator. Invariant: a group id is either a classic group with members or a
    consumer group, never both; a consumer group's committed offsets live with the classic offsets store."""

    # ----- the heartbeat ----------------------------------------------------------------------------------
    def consumer_group_heartbeat(
        self,
        group_id: str,
        member_id: str,
        member_epoch: int,
        instance_id: str | None,
        rack_id: str | None,
        rebalance_timeout_ms: int,
        subscribed_topic_names: list[str] | None,
        subscribed_topic_regex: str | None,
        server_assignor: str | None,
        owned: TopicPartitions | None,
        client_id: str = "",
        client_host: str = "",
        version: int = 1,
    ) -> HeartbeatResult:
        request = ConsumerHeartbeat(
            member_id,
            member_epoch,
            instance_id,
            rack_id,
            rebalance_timeout_ms,
            subscribed_topic_names,
            subscribed_topic_regex,
            server_assignor,
            owned,
            client_id,
            client_host,
        )
        error = self._invalid_heartbeat(group_id, request, version)
        if error is not None:
            return error
        group = self.consumer_groups.get(group_id)
        if group is None:
            if member_epoch != 0:
                return request.fail(Errors.UNKNOWN_MEMBER_ID, f"Group {group_id} not found.")
            group = self.consumer_groups[group_id] = ConsumerGroup(group_id)
        if member_epoch in (LEAVE_GROUP_EPOCH, LEAVE_GROUP_STATIC_EPOCH):
            result = self._consumer_leave(group, member_id, instance_id, member_epoch)
        else:
            result = self._consumer_heartbeat(group, request)
        self._persist_consumer_group(group)
        return result

    def _invalid_heartbeat(self, group_id: str, request: ConsumerHeartbeat, version: int) -> HeartbeatResult | None:
        """Kafka's throwIfConsumerGroupHeartbeatRequestIsInvalid, then whether the group may be heartbeated here
        (coordinated here, the offsets topic present, not a classic group with members); None when it may."""
        fail = request.fail
        if not group_id:
            return fail(Errors.INVALID_REQUEST, "GroupId can't be empty.")
        if (status := self.group_status(group_id)) is not Errors.NONE:
            return fail(status)
        if version >= 1 and not request.member_id:
            return fail(Errors.INVALID_REQUEST, "MemberId can't be empty.")
        if request.member_epoch < LEAVE_GROUP_STATIC_EPOCH:
            return fail(Errors.INVALID_REQUEST, f"MemberEpoch {request.member_epoch} is invalid.")
        if request.member_epoch == 0 and request.topic_names is None and request.regex is None:
            return fail(
                Errors.INVALID_REQUEST, "SubscribedTopicNames or SubscribedTopicRegex must be set in first request."
            )
        if request.assignor is not None and request.assignor not in ASSIGNORS:
            return fail(
                UNSUPPORTED_ASSIGNOR,
                f"ServerAssignor {request.assignor} is not supported. Supported assignors: {', '.join(ASSIGNORS)}.",
            )
        if request.regex is not None:
            try:
                re.compile(request.regex)
            except re.error as e:
                return fail(INVALID_REGULAR_EXPRESSION, f"SubscribedTopicRegex {request.regex} is invalid: {e}")
        if self.offsets_topic_partitions() is None:
            return fail(Errors.COORDINATOR_NOT_AVAILABLE)
        classic = self.groups.get(group_id)
        if classic is not None and classic.members:
            return fail(Errors.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")
        return None

    def _consumer_leave(
        self, group: ConsumerGroup, member_id: str, instance_id: str | None, epoch: int
    ) -> HeartbeatResult:
        if not member_id and instance_id is not None:
            member_id = group.static_members.get(instance_id, "")
        member = group.members.get(member_id)
        if member is None:
            return HeartbeatResult(
                int(Errors.UNKNOWN_MEMBER_ID),
                f"Member {member_id} is not a member of group {group.group_id}.",
                member_id or None,
                epoch,
            )
        log.info("[GroupId %s] Member %s left the consumer group.", group.group_id, member_id)
        self._remove_consumer_member(group, member)
        return HeartbeatResult(int(Errors.NONE), None, member_id, epoch, 0)

    def _consumer_heartbeat(self, group: ConsumerGroup, request: ConsumerHeartbeat) -> HeartbeatResult:
        """A member's heartbeat (not a leave): join or check its epoch, take what it sends, bump the group epoch
        when the subscriptions or the partition counts changed, then reconcile it towards the target assignment."""
        joining = request.member_epoch == 0
        found = self._join_consumer(group, request) if joining else self._known_member(group, request)
        if isinstance(found, HeartbeatResult):
            return found
        member = found
        bump = self._update_consumer(member, request) or joining
        counts = self._partition_counts(group)
        if bump or counts != group.partition_counts:
            group.group_epoch += 1
        if group.assignment_epoch < group.group_epoch:
            self._compute_target(group, counts)
        before = (member.member_epoch, {t: set(p) for t, p in member.assigned.items()})
        self._reconcile(group, member, request.owned)
        self._schedule_session(group, member)
        changed = before != (member.member_epoch, member.assigned)
        send = changed or request.is_full
        return HeartbeatResult(
            int(Errors.NONE),
            None,
            member.member_id,
            member.member_epoch,
            self.config.consumer_heartbeat_interval_ms,
            {t: set(p) for t, p in member.assigned.items()} if send else None,
        )

    @staticmethod
    def _join_consumer(group: ConsumerGroup, request: ConsumerHeartbeat) -> ConsumerMember | HeartbeatResult:
        """Member epoch 0: a new member joins (v0: the coordinator names it), or a known one starts over owning
        nothing; a static member's instance id must be free (UNRELEASED_INSTANCE_ID)."""
        member_id = request.member_id or new_member_id()
        instance_id = request.instance_id
        if instance_id is not None:
            holder = group.static_members.get(instance_id)
            if holder is not None and holder != member_id:
                return HeartbeatResult(
                    int(UNRELEASED_INSTANCE_ID),
                    f"Static member {holder} with instance id {instance_id} is still in group {group.group_id}.",
                    member_id,
                    request.member_epoch,
                )
        member = group.members.get(request.member_id) if request.member_id else None
        if member is None:
            member = ConsumerMember(
                member_id,
                instance_id,
                request.rack_id,
                request.client_id,
                request.client_host,
                request.rebalance_timeout_ms,
            )
            group.members[member_id] = member
            if instance_id is not None:
                group.static_members[instance_id] = member_id
            log.info("[GroupId %s] Member %s joined the consumer group.", group.group_id, member_id)
        else:  # a known member starting over (it was fenced or restarted): it owns nothing now
            member.assigned, member.pending_revocation = {}, {}
            member.member_epoch, member.previous_member_epoch, member.state = 0, -1, MemberState.STABLE
        return member

    @staticmethod
    def _known_member(group: ConsumerGroup, request: ConsumerHeartbeat) -> ConsumerMember | HeartbeatResult:
        """A member heartbeating at its epoch: UNKNOWN_MEMBER_ID when it is not in the group; FENCED_MEMBER_EPOCH for
        a newer epoch, or an older one that is not its previous epoch (or with owned partitions it was not given)."""
        member_id, epoch, owned = request.member_id, request.member_epoch, request.owned
        member = group.members.get(member_id) if member_id else None
        if member is None:
            return HeartbeatResult(
                int(Errors.UNKNOWN_MEMBER_ID),
                f"Member {member_id} is not a member of group {group.group_id}.",
                member_id,
                epoch,
            )
        if epoch > member.member_epoch or (
            epoch < member.member_epoch
            and (epoch != member.previous_member_epoch or (owned is not None and not _subset(owned, member.assigned)))
        ):
            relation = "greater" if epoch > member.member_epoch else "smaller"
            message = (
                f"The consumer group member has a {relation} member epoch ({epoch}) than the one known "
                f"by the group coordinator ({member.member_epoch})."
            )
            return HeartbeatResult(int(FENCED_MEMBER_EPOCH), message, member_id, epoch)
        return member

    @staticmethod
    def _update_consumer(member: ConsumerMember, request: ConsumerHeartbeat) -> bool:
        """What may change with any heartbeat; True when the subscription or the assignor changed (a new group
        epoch)."""
        if request.rebalance_timeout_ms is not None and request.rebalance_timeout_ms >= 0:
            member.rebalance_timeout_ms = request.rebalance_timeout_ms
        if request.rack_id is not None:
            member.rack_id = request.rack_id
        member.client_id = request.client_id or member.client_id
        member.client_host = request.client_host or member.client_host
        bump = False
        if request.topic_names is not None and sorted(request.topic_names) != sorted(member.subscribed_topics):
            member.subscribed_topics, bump = list(request.topic_names), True
        if request.regex is not None and request.regex != (member.subscribed_regex or ""):
            member.subscribed_regex, bump = request.regex or None, True
        if request.assignor is not None and request.assignor != member.server_assignor:
            member.server_assignor, bump = request.assignor, True
        return bump

    # ----- assignment -----------------------------------------------------------------------------------------
    def _partition_counts(self, group: ConsumerGroup) -> dict[str, int]:
        topics = self.log_manager.topics()
        counts = {}
        for topic in group.subscribed_topics(topics):
            try:
                counts[topic] = len(self.log_manager.topic_id_and_partitions(topic)[1])  # no log read, per heartbeat
            except UnknownTopicOrPartitionError:
                continue
        return counts

    def _compute_target(self, group: ConsumerGroup, counts: dict[str, int]) -> None:
        topics = list(counts)
        subscriptions = {}
        for m in group.members.values():
            wanted = set(m.subscribed_topics)
            if m.subscribed_regex:
                pattern = re.compile(m.subscribed_regex)
                wanted |= {t for t in topics if pattern.fullmatch(t)}
            subscriptions[m.member_id] = sorted(t for t in wanted if t in counts)
        name = self.preferred_assignor(group)
        group.target = ASSIGNORS[name](subscriptions, counts, group.target)
        group.partition_counts = counts
        group.assignment_epoch = group.group_epoch
        log.info(
            "[GroupId %s] Computed a new target assignment for epoch %d with %s: %s",
            group.group_id,
            group.group_epoch,
            name,
            {m: {t: sorted(p) for t, p in a.items()} for m, a in group.target.items()},
        )

    def _reconcile(self, group: ConsumerGroup, member: ConsumerMember, owned: TopicPartitions | None) -> None:
        """Kafka's CurrentAssignmentBuilder: revoke first, then take the new epoch, then wait for released ones."""
        target = group.target.get(member.member_id, {})
        if member.state == MemberState.UNREVOKED_PARTITIONS:
            if owned is None or _intersect(owned, member.pending_revocation):
                return  # still revoking
            member.pending_revocation = {}
            self._cancel(member.revocation_task)
            member.revocation_task = None
            member.state = MemberState.STABLE
        if member.member_epoch != group.assignment_epoch:
            revoke = _minus(member.assigned, target)
            if revoke:
                member.assigned = _intersect(member.assigned, target)
                member.pending_revocation = revoke
                member.state = MemberState.UNREVOKED_PARTITIONS
                self._schedule_revocation(group, member)
                return
            member.previous_member_epoch, member.member_epoch = member.member_epoch, group.assignment_epoch
        unreleased = _intersect(target, group.owned_by_others(member.member_id))
        member.assigned = _union(member.assigned, _minus(target, unreleased))
        member.assigned = _intersect(member.assigned, target)
        member.state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE

    def _remove_consumer_member(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        self._cancel(member.session_task)
        self._cancel(member.revocation_task)
        group.members.pop(member.member_id, None)
        if member.instance_id is not None and group.static_members.get(member.instance_id) == member.member_id:
            del group.static_members[member.instance_id]
        group.target.pop(member.member_id, None)
        group.group_epoch += 1

    # ----- timers ---------------------------------------------------------------------------------------------
    def _schedule_session(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        self._cancel(member.session_task)
        member.session_task = self.scheduler.schedule_once(
            f"consumer-session-{group.group_id}-{member.member_id}",
            lambda: self._on_consumer_expired(group.group_id, member.member_id, "session timeout"),
            self.config.consumer_session_timeout_ms,
        )

    def _schedule_revocation(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        self._cancel(member.revocation_task)
        member.revocation_task = self.scheduler.schedule_once(
            f"consumer-revocation-{group.group_id}-{member.member_id}",
            lambda: self._on_consumer_expired(group.group_id, member.member_id, "rebalance timeout"),
            max(member.rebalance_timeout_ms, 0),
        )

    def _on_consumer_expired(self, group_id: str, member_id: str, why: str) -> None:
        group = self.consumer_groups.get(group_id)
        member = group.members.get(member_id) if group else None
        if group is None or member is None:
            return
        log.info("[GroupId %s] Member %s fenced from the group because of its %s.", group_id, member_id, why)
        self._remove_consumer_member(group, member)
        self._persist_consumer_group(group)

    def _drop_consumer_group(self, group_id: str) -> None:
        """Forget a KIP-848 group whose partition this broker no longer coordinates (its timers cancelled)."""
        self._stop_consumer_timers(self.consumer_groups.pop(group_id))

    def _stop_consumer_timers(self, group: ConsumerGroup) -> None:
        for member in group.members.values():
            self._cancel(member.session_task)
            self._cancel(member.revocation_task)

    # ----- persistence (Kafka's ConsumerGroup* records in __consumer_offsets) -----------------------------------
    def _topic_ids(self) -> dict[str, bytes]:
        """Every topic's id (16 raw bytes): KIP-848's records name topics by id, as Kafka's."""
        out = {}
        for name in self.log_manager.topics():
            try:
                out[name] = parse_uuid(self.log_manager.topic_id_and_partitions(name)[0])
            except (UnknownTopicOrPartitionError, ValueError):
                continue
        return out

    def _consumer_records(self, group: ConsumerGroup) -> dict[bytes, bytes]:
        """The records that describe ``group`` now, key -> value (the last of each key is the group's state)."""
        ids = self._topic_ids()

        def by_id(partitions: TopicPartitions) -> dict[bytes, set[int]]:
            return {ids[t]: ps for t, ps in partitions.items() if t in ids}

        gid = group.group_id
        out = {
            rec.consumer_group_metadata_key(gid): rec.consumer_group_metadata_value(group.group_epoch),
            rec.target_assignment_metadata_key(gid): rec.target_assignment_metadata_value(group.assignment_epoch),
        }
        for m in group.members.values():
            out[rec.consumer_member_key(rec.CONSUMER_GROUP_MEMBER_METADATA_KEY_TYPE, gid, m.member_id)] = (
                rec.consumer_member_metadata_value(
                    m.instance_id,
                    m.rack_id,
                    m.client_id,
                    m.client_host,
                    list(m.subscribed_topics),
                    m.subscribed_regex,
                    m.rebalance_timeout_ms,
                    m.server_assignor,
                )
            )
            out[rec.consumer_member_key(rec.CONSUMER_TARGET_ASSIGNMENT_MEMBER_KEY_TYPE, gid, m.member_id)] = (
                rec.target_assignment_member_value(by_id(group.target.get(m.member_id, {})))
            )
            out[rec.consumer_member_key(rec.CONSUMER_CURRENT_ASSIGNMENT_KEY_TYPE, gid, m.member_id)] = (
                rec.current_assignment_value(
                    m.member_epoch,
                    m.previous_member_epoch,
                    MEMBER_STATE_BYTES[m.state],
                    by_id(m.assigned),
                    by_id(m.pending_revocation),
                )
            )
        return out

    def _persist_consumer_group(self, group: ConsumerGroup, deleted: bool = False) -> Errors:
        """Write what changed in ``group`` since it was last written (tombstones for what is gone), as one batch."""
        records = {} if deleted else self._consumer_records(group)
        previous = group.persisted
        entries: list[tuple[bytes, bytes | None]] = [(k, v) for k, v in records.items() if previous.get(k) != v]
        entries += [(k, None) for k in previous if k not in records]
        error = self._append(group.group_id, entries, for_offsets=False)
        if error is Errors.NONE:
            group.persisted = records
        else:
            log.warning("[GroupId %s] Could not persist the group's state: %s", group.group_id, error.name)
        return error

    def _load_consumer_group(self, group_id: str, records: dict[bytes, bytes]) -> None:
        """Rebuild a group from its records (Kafka's replay), then start its members' session timers (onLoaded)."""
        names = {v: k for k, v in self._topic_ids().items()}

        def by_name(partitions: list) -> TopicPartitions:
            out: TopicPartitions = {}
            for tp in partitions:
                name = names.get(parse_uuid(tp["topicId"]))
                if name is not None and tp["partitions"]:
                    out[name] = set(tp["partitions"])
            return out

        decoded = []
        for key, raw in records.items():
            record_type, key_data = rec.decode_key(key)
            decoded.append((record_type, key_data, rec.decode_value(record_type, raw)[1]))
        if not any(t == rec.CONSUMER_GROUP_METADATA_KEY_TYPE for t, _, _ in decoded):
            return  # members without their group: a partly deleted group, as Kafka ignores it
        group = ConsumerGroup(group_id)
        members: dict[str, dict[int, dict]] = {}
        for record_type, key_data, fields in decoded:
            if record_type == rec.CONSUMER_GROUP_METADATA_KEY_TYPE:
                group.group_epoch = fields["epoch"]
            elif record_type == rec.CONSUMER_TARGET_ASSIGNMENT_METADATA_KEY_TYPE:
                group.assignment_epoch = fields["assignmentEpoch"]
            else:
                members.setdefault(key_data["memberId"], {})[record_type] = fields
        for member_id, parts in members.items():
            meta = parts.get(rec.CONSUMER_GROUP_MEMBER_METADATA_KEY_TYPE)
            if meta is None:
                continue
            member = ConsumerMember(
                member_id,
                meta["instanceId"],
                meta["rackId"],
                meta["clientId"] or "",
                meta["clientHost"] or "",
                meta["rebalanceTimeoutMs"],
                subscribed_topics=[t for t in meta["subscribedTopicNames"] if t is not None],
                subscribed_regex=meta["subscribedTopicRegex"],
                server_assignor=meta["serverAssignor"],
            )
            current = parts.get(rec.CONSUMER_CURRENT_ASSIGNMENT_KEY_TYPE)
            if current is not None:
                member.member_epoch = current["memberEpoch"]
                member.previous_member_epoch = current["previousMemberEpoch"]
                member.state = BYTE_MEMBER_STATES.get(current["state"], MemberState.STABLE)
                member.assigned = by_name(current["assignedPartitions"])
                member.pending_revocation = by_name(current["partitionsPendingRevocation"])
            target = parts.get(rec.CONSUMER_TARGET_ASSIGNMENT_MEMBER_KEY_TYPE)
            if target is not None:
                group.target[member_id] = by_name(target["topicPartitions"])
            group.members[member_id] = member
            if member.instance_id is not None:
                group.static_members[member.instance_id] = member_id
        group.partition_counts = self._partition_counts(group)
        group.persisted = dict(records)
        self.consumer_groups[group_id] = group
        for member in group.members.values():
            self._schedule_session(group, member)
            if member.state == MemberState.UNREVOKED_PARTITIONS:
                self._schedule_revocation(group, member)

    # ----- admin ----------------------------------------------------------------------------------------------
    def describe_consumer_group(self, group_id: str) -> tuple[Errors, str | None, ConsumerGroup | None]:
        """ConsumerGroupDescribe of one group (Kafka's GroupMetadataManager.consumerGroupDescribe): the group, or
        GROUP_ID_NOT_FOUND with Kafka's message when there is no group or it is a classic group."""
        if (status := self.group_status(group_id)) is not Errors.NONE:
            return status, None, None
        group = self.consumer_groups.get(group_id)
        if group is not None:
            return Errors.NONE, None, group
        if group_id in self.groups:
            return Errors.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.", None
        return Errors.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.", None

    @staticmethod
    def preferred_assignor(group: ConsumerGroup) -> str:
        """Kafka's ConsumerGroup.preferredServerAssignor: the server assignor most members ask for (the one used),
        else the default (group.consumer.assignors' first)."""
        return next((m.server_assignor for m in group.members.values() if m.server_assignor), DEFAULT_ASSIGNOR)

    # ----- offsets --------------------------------------------------------------------------------------------
    def _validate_consumer_commit(self, group_id: str, member_id: str, epoch: int) -> Errors | None:
        """None when ``group_id`` is not an active consumer group; else the commit's error (Kafka's
        ConsumerGroup.validateOffsetCommit): a member's epoch must be its current one (STALE_MEMBER_EPOCH)."""
        group = self.consumer_groups.get(group_id)
        if group is None or (not group.members and epoch < 0 and not member_id):
            return None
        member = group.members.get(member_id)
        if member is None:
            return Errors.UNKNOWN_MEMBER_ID
        if epoch != member.member_epoch:
            return Errors.STALE_MEMBER_EPOCH
        return Errors.NONE
