"""KIP-848 consumer groups: ConsumerGroupHeartbeat with server-side assignment (the ``uniform`` and ``range``
assignors), member epochs, and Kafka's reconciliation rules.

How a member moves (Kafka's CurrentAssignmentBuilder): the group epoch rises whenever membership or a
subscription (or a subscribed topic's partition count) changes; the target assignment is then recomputed
for that epoch. A member reaches the new epoch only after revoking what it must give up (state
UNREVOKED_PARTITIONS: it keeps only the partitions it is allowed to keep and is told so, and is fenced if it
does not confirm in its rebalance timeout), and it is given a partition only once no other member still owns
it (UNRELEASED_PARTITIONS). So a partition is never owned by two members at once.

The group's state is written to ``__consumer_offsets`` as Kafka's ConsumerGroupMetadata, ConsumerGroupMemberMetadata,
ConsumerGroupTargetAssignmentMetadata/Member and ConsumerGroupCurrentMemberAssignment records and replayed on load,
so members and epochs survive a restart. Not built: the (deprecated) ConsumerGroupPartitionMetadata record;
client-side assignors. ConsumerGroupDescribe is
``describe_consumer_group`` (consumer_protocol.py).
"""

from __future__ import annotations

import enum
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from .errors import Errors

FENCED_MEMBER_EPOCH = Errors.FENCED_MEMBER_EPOCH
UNRELEASED_INSTANCE_ID = Errors.UNRELEASED_INSTANCE_ID
UNSUPPORTED_ASSIGNOR = Errors.UNSUPPORTED_ASSIGNOR
STALE_MEMBER_EPOCH = Errors.STALE_MEMBER_EPOCH
INVALID_REGULAR_EXPRESSION = Errors.INVALID_REGULAR_EXPRESSION
LEAVE_GROUP_EPOCH = -1
LEAVE_GROUP_STATIC_EPOCH = -2

TopicPartitions = dict[str, set[int]]  # topic name -> partitions


class MemberState(enum.Enum):
    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    UNRELEASED_PARTITIONS = "unreleased_partitions"


@dataclass
class ConsumerMember:
    """One member. Invariant: ``assigned`` and ``pending_revocation`` are disjoint."""

    member_id: str
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    subscribed_topics: list[str] = field(default_factory=list)
    subscribed_regex: str | None = None
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: MemberState = MemberState.STABLE
    assigned: TopicPartitions = field(default_factory=dict)
    pending_revocation: TopicPartitions = field(default_factory=dict)
    session_task: object | None = None
    revocation_task: object | None = None


def _count(tps: TopicPartitions) -> int:
    return sum(len(p) for p in tps.values())


def _minus(a: TopicPartitions, b: TopicPartitions) -> TopicPartitions:
    out = {t: ps - b.get(t, set()) for t, ps in a.items()}
    return {t: ps for t, ps in out.items() if ps}


def _intersect(a: TopicPartitions, b: TopicPartitions) -> TopicPartitions:
    out = {t: ps & b.get(t, set()) for t, ps in a.items()}
    return {t: ps for t, ps in out.items() if ps}


def _union(a: TopicPartitions, b: TopicPartitions) -> TopicPartitions:
    out = {t: set(ps) for t, ps in a.items()}
    for t, ps in b.items():
        out.setdefault(t, set()).update(ps)
    return out


# ----- server-side assignors ---------------------------------------------------------------------------------
def range_assign(members: dict[str, list[str]], partitions: dict[str, int], current) -> dict[str, TopicPartitions]:
    """Kafka's server-side RangeAssignor: per topic, its subscribers (sorted) get contiguous ranges, the first
    ``count % members`` one partition more."""
    out: dict[str, TopicPartitions] = {m: {} for m in members}
    for topic, count in sorted(partitions.items()):
        subscribers = sorted(m for m, topics in members.items() if topic in topics)
        if not subscribers:
            continue
        per, extra = divmod(count, len(subscribers))
        start = 0
        for i, m in enumerate(subscribers):
            size = per + (1 if i < extra else 0)
            if size:
                out[m][topic] = set(range(start, start + size))
            start += size
    return out


def uniform_assign(members: dict[str, list[str]], partitions: dict[str, int], current) -> dict[str, TopicPartitions]:
    """Kafka's UniformAssignor, in its essentials: balanced (member counts differ by at most one among members that
    can take a partition) and sticky (a member keeps what it had, up to its quota)."""
    out: dict[str, TopicPartitions] = {m: {} for m in members}
    load = dict.fromkeys(members, 0)
    all_partitions = [(t, p) for t, count in sorted(partitions.items()) for p in range(count)]
    eligible = {tp: [m for m in sorted(members) if tp[0] in members[m]] for tp in all_partitions}
    total = sum(1 for tp in all_partitions if eligible[tp])
    quota = -(-total // len(members)) if members else 0  # ceil: nobody keeps more than this
    unassigned = []
    for tp in all_partitions:
        owners = [m for m in eligible[tp] if tp[1] in current.get(m, {}).get(tp[0], set()) and load[m] < quota]
        if owners:
            m = owners[0]
            out[m].setdefault(tp[0], set()).add(tp[1])
            load[m] += 1
        elif eligible[tp]:
            unassigned.append(tp)
    for tp in unassigned:
        m = min(eligible[tp], key=lambda x: (load[x], x))
        out[m].setdefault(tp[0], set()).add(tp[1])
        load[m] += 1
    # Rebalance stragglers: move from the most to the least loaded eligible member until within one.
    moved = True
    while moved:
        moved = False
        for m in sorted(members, key=lambda x: -load[x]):
            for t in sorted(out[m]):
                for p in sorted(out[m][t]):
                    candidates = [x for x in eligible[(t, p)] if load[x] + 1 < load[m]]
                    if candidates:
                        x = min(candidates, key=lambda y: (load[y], y))
                        out[m][t].discard(p)
                        out[x].setdefault(t, set()).add(p)
                        load[m] -= 1
                        load[x] += 1
                        moved = True
                        break
                if moved:
                    break
            if moved:
                break
    return {m: {t: ps for t, ps in a.items() if ps} for m, a in out.items()}


ASSIGNORS: dict[str, Callable] = {"uniform": uniform_assign, "range": range_assign}
DEFAULT_ASSIGNOR = "uniform"  # group.consumer.assignors' first entry in Kafka


class ConsumerGroup:
    """A KIP-848 group. Invariants: ``assignment_epoch <= group_epoch``; ``target`` is the assignment for
    ``assignment_epoch``; no partition is in two members' ``assigned`` sets."""

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, ConsumerMember] = {}
        self.static_members: dict[str, str] = {}
        self.target: dict[str, TopicPartitions] = {}
        self.partition_counts: dict[str, int] = {}  # of the subscribed topics, at the last epoch bump
        self.persisted: dict[bytes, bytes] = {}  # the records last written for this group, key -> value

    @property
    def state(self) -> str:
        """Kafka's consumer group states: Empty, Assigning, Reconciling, Stable."""
        if not self.members:
            return "Empty"
        if self.assignment_epoch < self.group_epoch:
            return "Assigning"
        if any(m.member_epoch != self.assignment_epoch or m.state != MemberState.STABLE for m in self.members.values()):
            return "Reconciling"
        return "Stable"

    def owned_by_others(self, member_id: str) -> TopicPartitions:
        out: TopicPartitions = {}
        for m in self.members.values():
            if m.member_id != member_id:
                out = _union(out, _union(m.assigned, m.pending_revocation))
        return out

    def subscribed_topics(self, topics: list[str]) -> set[str]:
        wanted: set[str] = set()
        for m in self.members.values():
            wanted |= set(m.subscribed_topics)
            if m.subscribed_regex:
                pattern = re.compile(m.subscribed_regex)
                wanted |= {t for t in topics if pattern.fullmatch(t) and not t.startswith("__")}
        return wanted


@dataclass
class HeartbeatResult:
    error: int
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = -1
    heartbeat_interval_ms: int = 0
    assignment: TopicPartitions | None = None


def new_member_id() -> str:
    """A member id as Kafka's Uuid.randomUuid().toString(): 22 URL-safe base64 characters."""
    import base64

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode("ascii").rstrip("=")
