"""The retention planner: which segments one retention check deletes, and by which rule (Kafka's
``UnifiedLog.deleteOldSegments``, spec section 8). A pure function of the segments, the log's offsets, its config
and the time; ``Log.delete_old_segments`` carries the plan out, ``kafkalog explain retention`` explains it, and the
Spark report counts it, so the three agree.

The check runs three walks in this order, each over what the previous one left:

1. the log-start-offset rule: a segment goes when the *next* segment's base offset is at or below the log start;
2. with ``delete`` in cleanup.policy, the size rule: while the log is at least ``retention.bytes``, oldest first,
   a segment goes while the bytes over the limit still cover it;
3. with ``delete``, the time rule: a segment goes when ``now - largest timestamp > retention.ms`` (strictly).

Each walk goes oldest first and stops at the first segment it keeps. A segment goes only when the high watermark
is at or past its upper bound (the next segment's base offset, or the log end offset for the last one), and an
empty last segment never goes. When a walk would delete every segment, a new empty segment is rolled at the log end
offset first, so the active segment goes too. After each walk the log start offset moves to the first segment left.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from .config import LogConfig

RULE_LOG_START = "log-start-offset"
RULE_SIZE = "retention.bytes"
RULE_TIME = "retention.ms"


class RetentionSegment(Protocol):
    """What the planner reads of a segment (``LogSegment`` has it; ``largest_timestamp`` is read only when the
    time walk reaches the segment, as Kafka reads it)."""

    @property
    def base_offset(self) -> int: ...

    @property
    def size(self) -> int: ...

    @property
    def largest_timestamp(self) -> int: ...


@dataclass(frozen=True)
class Deletion:
    """One segment a check deletes: its index in the planned segments, the rule, and (size rule) the log's bytes
    when the walk started and the bytes over ``retention.bytes`` left before this segment went."""

    index: int
    rule: str
    log_bytes: int = 0
    excess_bytes: int = 0


@dataclass
class RetentionPlan:
    """What one retention check does, in order. ``rolled_by`` is the rule whose walk would delete every segment,
    so that a new empty segment is rolled at the log end offset first (None when no roll is needed); the rolled
    segment is ``segments[len(segments)]`` in the walks that follow and is never deleted."""

    deletions: list[Deletion] = field(default_factory=list)
    rolled_by: str | None = None
    log_start_offset: int = 0

    def by_rule(self) -> list[tuple[str, list[int]]]:
        """(rule, indexes of the segments it deletes), in the order the walks run, walks deleting nothing left out."""
        groups: list[tuple[str, list[int]]] = []
        for deletion in self.deletions:
            if not groups or groups[-1][0] != deletion.rule:
                groups.append((deletion.rule, []))
            groups[-1][1].append(deletion.index)
        return groups


@dataclass
class _Walks:
    segments: Sequence[RetentionSegment]
    log_end_offset: int
    high_watermark: int
    plan: RetentionPlan
    left: list[int]  # indexes of the segments still there; len(segments) is a rolled empty segment

    def base(self, i: int) -> int:
        return self.segments[i].base_offset if i < len(self.segments) else self.log_end_offset

    def size(self, i: int) -> int:
        return self.segments[i].size if i < len(self.segments) else 0

    def run(self, rule: str, breaches: Callable[[int], Deletion | None]) -> None:
        """deletableSegments then deleteSegments: walk oldest first, stop at the first segment kept."""
        doomed: list[Deletion] = []
        for position, i in enumerate(self.left):
            last = position + 1 == len(self.left)
            upper = self.log_end_offset if last else self.base(self.left[position + 1])
            if self.high_watermark < upper or (last and self.size(i) == 0):
                break
            deletion = breaches(i)
            if deletion is None:
                break
            doomed.append(deletion)
        if not doomed:
            return
        if len(doomed) == len(self.left):  # every segment would go: roll a new empty active segment first
            self.left.append(len(self.segments))
            self.plan.rolled_by = rule
        self.plan.deletions.extend(doomed)
        self.left = self.left[len(doomed) :]
        self.plan.log_start_offset = max(self.plan.log_start_offset, self.base(self.left[0]))


def plan_retention(
    segments: Sequence[RetentionSegment],
    *,
    log_start_offset: int,
    log_end_offset: int,
    high_watermark: int,
    delete_policy: bool,
    retention_bytes: int,
    retention_ms: int,
    now_ms: int,
) -> RetentionPlan:
    """The segments (oldest first) one retention check at ``now_ms`` deletes, rule by rule (see the module
    docstring). ``delete_policy``: cleanup.policy includes ``delete``. Nothing is read but the segments' base
    offsets, sizes and, for the time rule, largest timestamps."""
    plan = RetentionPlan(log_start_offset=log_start_offset)
    walks = _Walks(segments, log_end_offset, high_watermark, plan, list(range(len(segments))))

    def log_start(i: int) -> Deletion | None:
        position = walks.left.index(i)
        following = walks.left[position + 1] if position + 1 < len(walks.left) else None
        ok = following is not None and walks.base(following) <= plan.log_start_offset
        return Deletion(i, RULE_LOG_START) if ok else None

    walks.run(RULE_LOG_START, log_start)
    if not delete_policy:
        return plan
    # The log's size only under a size limit: summing it costs a pass over every segment, which the steady
    # check of a log without retention.bytes (the default) would pay on every pass for nothing.
    log_bytes = sum(walks.size(i) for i in walks.left) if retention_bytes >= 0 else 0
    if retention_bytes >= 0 and log_bytes >= retention_bytes:
        excess = [log_bytes - retention_bytes]

        def size(i: int) -> Deletion | None:
            if excess[0] - walks.size(i) < 0:
                return None
            deletion = Deletion(i, RULE_SIZE, log_bytes, excess[0])
            excess[0] -= walks.size(i)
            return deletion

        walks.run(RULE_SIZE, size)
    if retention_ms >= 0:

        def time(i: int) -> Deletion | None:
            if i >= len(segments) or now_ms - segments[i].largest_timestamp <= retention_ms:
                return None
            return Deletion(i, RULE_TIME)

        walks.run(RULE_TIME, time)
    return plan


def plan_topic_retention(
    segments: Sequence[RetentionSegment],
    config: LogConfig,
    *,
    log_start_offset: int,
    log_end_offset: int,
    high_watermark: int,
    now_ms: int,
) -> RetentionPlan:
    """``plan_retention`` under a topic's configs: its cleanup.policy (``delete`` or not), retention.bytes and
    retention.ms (what the log's own retention pass and the Spark sink's retention job both apply)."""
    return plan_retention(
        segments,
        log_start_offset=log_start_offset,
        log_end_offset=log_end_offset,
        high_watermark=high_watermark,
        delete_policy=config.delete,
        retention_bytes=config.retention_bytes,
        retention_ms=config.retention_ms,
        now_ms=now_ms,
    )
