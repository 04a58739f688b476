"""The classic group protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) for the GroupCoordinator: Kafka's
classic rebalance state machine (Empty, PreparingRebalance, CompletingRebalance, Stable, Dead), with KIP-394 member
ids, KIP-345 static membership, session and rebalance timeouts and group.initial.rebalance.delay.ms.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

from .errors import Errors
from .group import ClassicGroup, JoinResult, Member, SyncResult
from .metadata_manager import (
    COMPLETING,
    DEAD,
    EMPTY,
    PREPARING,
    STABLE,
    UNKNOWN_MEMBER_ID,
    GroupMetadataManager,
    log,
)

NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000  # Kafka's ClassicGroupMember / GroupCoordinator constant


class ClassicProtocolMixin(GroupMetadataManager):
    """The classic half of the coordinator. Invariant: a member's heartbeat timer is scheduled while it is a member
    and cancelled when it leaves; a waiting JoinGroup / SyncGroup is answered exactly once."""

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

        if (error := self._group_request_error(group_id)) is not Errors.NONE:
            return fail(error)
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

    @classmethod
    def _validate_generation(
        cls, group: ClassicGroup, member_id: str, instance_id: str | None, generation_id: int
    ) -> Errors:
        """``_validate_member``, then the member's generation must be the group's (ILLEGAL_GENERATION)."""
        error = cls._validate_member(group, member_id, instance_id)
        if error is Errors.NONE and generation_id != group.generation_id:
            return Errors.ILLEGAL_GENERATION
        return error

    def _unload_group(self, group: ClassicGroup) -> None:
        """The group leaves this coordinator (resignation, shutdown): its timers stop and its waiting JoinGroup /
        SyncGroup are answered NOT_COORDINATOR (the members find the coordinator again)."""
        self._cancel(group.join_task)
        for task in group.pending_members.values():
            self._cancel(task)
        for member in group.members.values():
            self._cancel(member.heartbeat_task)
            self._answer_join(member, JoinResult(Errors.NOT_COORDINATOR, member.member_id))
            self._answer_sync(member, SyncResult(Errors.NOT_COORDINATOR))

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
        error = self._validate_generation(group, member_id, group_instance_id, generation_id)
        if error is not Errors.NONE:
            return callback(SyncResult(error))
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
        error = self._validate_generation(group, member_id, group_instance_id, generation_id)
        if error is not Errors.NONE:
            return error
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
