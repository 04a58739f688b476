"""A classic consumer group (Kafka's ClassicGroup / GroupMetadata) and its members: state, not behaviour.

The rebalance state machine lives in the coordinator; this module holds what it moves: the members, the
generation, the chosen protocol, the committed offsets, and the legal state transitions.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field


class GroupState(enum.Enum):
    """Kafka's classic group states; ``value`` is the name DescribeGroups and ListGroups report."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


# Kafka's validPreviousStates: a transition from any other state is a bug, not a client error.
_VALID_PREVIOUS = {
    GroupState.EMPTY: {GroupState.PREPARING_REBALANCE},
    GroupState.PREPARING_REBALANCE: {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY},
    GroupState.COMPLETING_REBALANCE: {GroupState.PREPARING_REBALANCE},
    GroupState.STABLE: {GroupState.COMPLETING_REBALANCE},
    GroupState.DEAD: set(GroupState),
}


@dataclass
class OffsetAndMetadata:
    """One committed offset (Kafka's OffsetAndMetadata); ``expire_timestamp`` only from OffsetCommit v1-4."""

    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    expire_timestamp: int | None = None


@dataclass
class JoinResult:
    """The answer to one JoinGroup (Kafka's JoinGroupResponseData, without encoding)."""

    error: int
    member_id: str
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)
    skip_assignment: bool = False


@dataclass
class SyncResult:
    error: int
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass
class Member:
    """One member of a classic group. Invariant: at most one of the join and sync callbacks is pending."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    join_callback: Callable[[JoinResult], None] | None = None
    sync_callback: Callable[[SyncResult], None] | None = None
    supports_skip_assignment: bool = False
    is_new: bool = False
    heartbeat_task: object | None = None

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata(self, protocol: str) -> bytes:
        for name, data in self.protocols:
            if name == protocol:
                return data
        raise ValueError(f"Member {self.member_id} does not support protocol {protocol}")

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        return self.protocols == protocols

    @property
    def awaiting_join(self) -> bool:
        return self.join_callback is not None

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_callback is not None


class ClassicGroup:
    """One classic group. Invariants: ``leader_id`` is a member (or None when there are none); every static
    member's instance id maps to its member id in ``static_members``; ``pending_members`` (KIP-394 ids handed
    out by MEMBER_ID_REQUIRED) are not members yet."""

    def __init__(self, group_id: str, now_ms: int, state: GroupState = GroupState.EMPTY) -> None:
        self.group_id = group_id
        self.state = state
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.generation_id = 0
        self.leader_id: str | None = None
        self.members: dict[str, Member] = {}
        self.static_members: dict[str, str] = {}
        self.pending_members: dict[str, object | None] = {}  # member id -> its expiration task
        self.offsets: dict[tuple[str, int], OffsetAndMetadata] = {}
        self.current_state_timestamp: int | None = now_ms
        self.new_member_added = False
        self.join_task: object | None = None
        self.in_initial_delay = False  # the join phase waits for group.initial.rebalance.delay.ms, not for members
        self.initial_delay_remaining_ms = 0

    # ----- state ------------------------------------------------------------------------------------
    def is_in(self, *states: GroupState) -> bool:
        return self.state in states

    def transition_to(self, state: GroupState, now_ms: int) -> None:
        if self.state not in _VALID_PREVIOUS[state]:
            raise RuntimeError(f"Group {self.group_id} should be in {_VALID_PREVIOUS[state]} to move to {state}")
        self.state = state
        self.current_state_timestamp = now_ms

    # ----- members ----------------------------------------------------------------------------------
    def add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        if member.group_instance_id is not None and self.static_members.get(member.group_instance_id) == member_id:
            del self.static_members[member.group_instance_id]
        if self.leader_id == member_id:
            awaiting = [m for m in self.members.values() if m.awaiting_join]
            nxt = awaiting[0] if awaiting else next(iter(self.members.values()), None)
            self.leader_id = nxt.member_id if nxt else None
        return member

    def replace_static_member(self, instance_id: str, old_id: str, new_id: str) -> Member:
        """Move the static member ``instance_id`` from ``old_id`` to ``new_id`` (a restarted static member)."""
        member = self.members.pop(old_id)
        member.member_id = new_id
        self.members[new_id] = member
        self.static_members[instance_id] = new_id
        if self.leader_id == old_id:
            self.leader_id = new_id
        return member

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def has_all_members_joined(self) -> bool:
        return all(m.awaiting_join for m in self.members.values()) and not self.pending_members

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    # ----- protocols --------------------------------------------------------------------------------
    def candidate_protocols(self) -> set[str]:
        """The protocols every member supports."""
        members = list(self.members.values())
        if not members:
            return set()
        common = set(members[0].protocol_names())
        for m in members[1:]:
            common &= set(m.protocol_names())
        return common

    def supports_protocols(self, protocol_type: str, protocols: list[str], ignore: str | None = None) -> bool:
        """Kafka's supportsProtocols: an empty group takes any non-empty type and list; a non-empty group needs
        the same type and one protocol every current member (other than ``ignore``) supports."""
        others = [m for m in self.members.values() if m.member_id != ignore]
        if not others:
            return bool(protocol_type) and bool(protocols)
        if protocol_type != self.protocol_type:
            return False
        common = set(others[0].protocol_names())
        for m in others[1:]:
            common &= set(m.protocol_names())
        return any(p in common for p in protocols)

    def select_protocol(self) -> str:
        """Kafka's selectProtocol: each member votes for its most preferred protocol among those every member
        supports; the most votes wins (ties: the protocol preferred earliest, for determinism)."""
        candidates = self.candidate_protocols()
        if not candidates:
            raise RuntimeError(f"No protocol is supported by every member of group {self.group_id}")
        votes: dict[str, int] = {}
        for m in self.members.values():
            choice = next(p for p in m.protocol_names() if p in candidates)
            votes[choice] = votes.get(choice, 0) + 1
        return max(votes, key=lambda p: votes[p])  # dicts keep first-vote order, so ties go to the earliest

    def subscribed_topics(self) -> set[str] | None:
        """Topics the members subscribe to (consumer protocol), None when unknown (other protocol types)."""
        from .records import subscribed_topics

        if self.protocol_type != "consumer" or self.protocol_name is None:
            return None if self.members else set()
        topics: set[str] = set()
        for m in self.members.values():
            try:
                found = subscribed_topics(m.metadata(self.protocol_name))
            except ValueError:
                found = None
            if found is None:
                return None
            topics |= found
        return topics
