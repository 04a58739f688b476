"""Explaining compaction: is this log dirty enough to clean, what holds the cleaner back, what would be left.

``explain_compaction`` applies the log cleaner's own selection rules (``policy.cleanable_offsets``,
``LogToClean``, ``max_compaction_delay``) to one partition, says which bound ends the dirty section, and
estimates the size after one clean by running the clean dry (the offset map is built, nothing is written).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..layout import CLEANER_OFFSET_CHECKPOINT
from .cleaner import Cleaner
from .log_cleaner import LogCleaner, LogCleaningStatus
from .offset_map import SkimpyOffsetMap
from .policy import LogToClean, cleanable_offsets, max_compaction_delay


@dataclass(frozen=True)
class SegmentSection:
    """Where one segment stands for the cleaner: 'clean', 'dirty' (cleanable now), 'uncleanable' or 'active'."""

    base_offset: int
    next_offset: int
    size_bytes: int
    largest_timestamp: int
    section: str


@dataclass
class CompactionExplanation:
    """Why a partition will or will not be cleaned now, and what a clean would leave."""

    topic: str
    partition: int
    cleanup_policy: tuple[str, ...]
    compacted: bool
    log_start_offset: int
    log_end_offset: int
    first_dirty_offset: int
    first_dirty_source: str
    first_uncleanable_offset: int
    uncleanable_bound: str
    clean_bytes: int
    cleanable_bytes: int
    dirty_ratio: float
    min_cleanable_dirty_ratio: float
    max_compaction_delay_ms: int
    need_compaction_now: bool
    state: str
    eligible: bool
    reasons: list[str] = field(default_factory=list)
    expected_size_after: int | None = None
    expected_records_kept: int | None = None
    expected_records_read: int | None = None
    map_complete: bool | None = None
    last_clean: LogCleaningStatus | None = None
    segments: list[SegmentSection] = field(default_factory=list)

    @property
    def size_now(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def summary(self) -> str:
        verdict = "will be cleaned on the next cleaner pass" if self.eligible else "is not eligible for cleaning now"
        text = f"{self.topic}-{self.partition} {verdict}: " + "; ".join(self.reasons)
        if self.expected_size_after is not None:
            text += f". A clean now would leave about {self.expected_size_after} bytes"
        return text + "."


def _first_dirty_source(log_obj, checkpoint: int | None) -> str:
    if checkpoint is None:
        return "log start offset (no cleaner checkpoint yet)"
    if checkpoint < log_obj.log_start_offset:
        return f"log start offset (checkpoint {checkpoint} is below it and will be reset)"
    if checkpoint > log_obj.log_end_offset:
        return f"log start offset (checkpoint {checkpoint} is past the log end and will be reset)"
    return CLEANER_OFFSET_CHECKPOINT


def _uncleanable_bound(log_obj, first_dirty: int, first_uncleanable: int, now: int) -> str:
    """Which of Kafka's three bounds ends the dirty section."""
    reasons = []
    if log_obj.last_stable_offset == first_uncleanable:
        reasons.append("the last stable offset (an open transaction, or the high watermark)")
    if log_obj.active_segment.base_offset == first_uncleanable:
        reasons.append("the active segment, which is never cleaned")
    lag = max(log_obj.config.min_compaction_lag_ms, 0)
    if lag > 0:
        for segment in log_obj.non_active_segments_from(first_dirty):
            if segment.largest_timestamp > now - lag:
                if segment.base_offset == first_uncleanable:
                    reasons.append(
                        f"min.compaction.lag.ms={lag}: segment {segment.base_offset} has a record "
                        f"{now - segment.largest_timestamp} ms old"
                    )
                break
    return " and ".join(reasons) if reasons else "the first dirty offset (nothing is dirty)"


def _sections(log_obj, first_dirty: int, first_uncleanable: int) -> list[SegmentSection]:
    segments = list(log_obj.segments)
    active = log_obj.active_segment
    out = []
    for i, segment in enumerate(segments):
        following = segments[i + 1].base_offset if i + 1 < len(segments) else log_obj.log_end_offset
        if segment is active:
            section = "active"
        elif segment.base_offset >= first_uncleanable:
            section = "uncleanable"
        elif following <= first_dirty:
            section = "clean"
        else:
            section = "dirty"
        out.append(SegmentSection(segment.base_offset, following, segment.size, segment.largest_timestamp, section))
    return out


def explain_compaction(cleaner: LogCleaner, tp, log_obj, *, estimate: bool = True) -> CompactionExplanation:
    """Explain the cleaner's view of one partition now (see the module docstring)."""
    now = cleaner.clock.milliseconds()
    config = log_obj.config
    checkpoint = cleaner.all_cleaner_checkpoints().get((tp.topic, tp.partition))
    offsets = cleanable_offsets(log_obj, checkpoint, now)
    delay = max_compaction_delay(log_obj, offsets.first_dirty_offset, now)
    to_clean = LogToClean(tp, log_obj, offsets.first_dirty_offset, offsets.first_uncleanable_dirty_offset, delay > 0)
    state = cleaner.state_of(tp)
    reasons: list[str] = []
    ratio = to_clean.cleanable_ratio
    threshold = config.min_cleanable_dirty_ratio
    if not config.compact:
        reasons.append(f"cleanup.policy={','.join(config.cleanup_policy)} does not include compact")
    if state != "idle":
        reasons.append(f"the partition is {state}")
    if to_clean.total_bytes == 0:
        reasons.append("the log is empty")
    if ratio > threshold:
        reasons.append(f"dirty ratio {ratio:.3f} is above min.cleanable.dirty.ratio {threshold}")
    else:
        reasons.append(f"dirty ratio {ratio:.3f} is not above min.cleanable.dirty.ratio {threshold}")
    if delay > 0:
        reasons.append(
            f"max.compaction.lag.ms={config.max_compaction_lag_ms} passed {delay} ms ago for the oldest dirty "
            "segment, which forces a clean"
        )
    eligible = config.compact and state == "idle" and to_clean.total_bytes > 0 and to_clean.eligible(threshold)
    explanation = CompactionExplanation(
        topic=tp.topic,
        partition=tp.partition,
        cleanup_policy=tuple(config.cleanup_policy),
        compacted=config.compact,
        log_start_offset=log_obj.log_start_offset,
        log_end_offset=log_obj.log_end_offset,
        first_dirty_offset=offsets.first_dirty_offset,
        first_dirty_source=_first_dirty_source(log_obj, checkpoint),
        first_uncleanable_offset=to_clean.first_uncleanable_offset,
        uncleanable_bound=_uncleanable_bound(
            log_obj, offsets.first_dirty_offset, offsets.first_uncleanable_dirty_offset, now
        ),
        clean_bytes=to_clean.clean_bytes,
        cleanable_bytes=to_clean.cleanable_bytes,
        dirty_ratio=ratio,
        min_cleanable_dirty_ratio=threshold,
        max_compaction_delay_ms=delay,
        need_compaction_now=delay > 0,
        state=state,
        eligible=eligible,
        reasons=reasons,
        last_clean=cleaner.status.get(tp),
        segments=_sections(log_obj, offsets.first_dirty_offset, to_clean.first_uncleanable_offset),
    )
    if estimate and config.compact and to_clean.cleanable_bytes > 0:
        dry = Cleaner(SkimpyOffsetMap(cleaner.memory_per_thread, cleaner.load_factor), cleaner.clock)
        size_after, stats = dry.estimate(to_clean, now)
        explanation.expected_size_after = size_after
        explanation.expected_records_kept = stats.messages_written
        explanation.expected_records_read = stats.messages_read
        explanation.map_complete = dry.offset_map.latest_offset + 1 >= to_clean.first_uncleanable_offset
        if not explanation.map_complete:
            reasons.append(
                "the dedupe buffer cannot hold every dirty key: one clean covers offsets up to "
                f"{dry.offset_map.latest_offset} and the next continues from there"
            )
    return explanation
