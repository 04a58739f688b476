"""Which logs the cleaner cleans and how far: Kafka's ``LogCleanerManager.cleanableOffsets``, ``LogToClean`` and
the grouping of segments into cleaned segments.

The dirty section of a compacted log runs from its first dirty offset (the cleaner checkpoint, reset to the log start
when out of range) to its first uncleanable offset (the smallest of the last stable offset, the active segment's base
and the first segment younger than ``min.compaction.lag.ms``). Its dirty ratio is the cleanable bytes over the clean
plus cleanable bytes; a log is cleaned when that ratio exceeds ``min.cleanable.dirty.ratio`` or a dirty segment is
older than ``max.compaction.lag.ms``. Everything here reads a log and writes nothing.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..layout import INT32_MAX, INT64_MAX
from ..storage.segment import LogSegment

log = logging.getLogger(__name__)


# ----- choosing what to clean -----------------------------------------------------------------
@dataclass(frozen=True)
class OffsetsToClean:
    """The dirty range of a log: ``[first_dirty_offset, first_uncleanable_dirty_offset)``.

    Invariants: ``first_dirty_offset`` lies in ``[log start, log end]``; ``first_uncleanable_dirty_offset`` is the
    smallest of the last stable offset, the active segment's base offset and the base offset of the first
    segment still within ``min.compaction.lag.ms`` (or the first dirty offset when that is larger: an empty
    range), so a clean never touches the active segment, an open transaction or too-recent records.
    ``force_update_checkpoint`` says the checkpointed offset was invalid and was reset to the log start offset.
    """

    first_dirty_offset: int
    first_uncleanable_dirty_offset: int
    force_update_checkpoint: bool = False


def cleanable_offsets(log_obj, last_clean_offset: int | None, now: int) -> OffsetsToClean:
    """The dirty range of a log (LogCleanerManager.cleanableOffsets)."""
    start = log_obj.log_start_offset
    checkpoint = start if last_clean_offset is None else last_clean_offset
    force = False
    if checkpoint < start:
        if not (log_obj.config.compact and log_obj.config.delete):
            log.warning(
                "Resetting first dirty offset of %s to log start offset %d since the checkpointed offset %d is invalid",
                log_obj.directory.name,
                start,
                checkpoint,
            )
        first_dirty, force = start, True
    elif checkpoint > log_obj.log_end_offset:
        log.warning(
            "The last checkpoint dirty offset for partition %s is %d, which is larger than the log end offset %d. "
            "Resetting to the log start offset %d.",
            log_obj.directory.name,
            checkpoint,
            log_obj.log_end_offset,
            start,
        )
        first_dirty, force = start, True
    else:
        first_dirty = checkpoint
    bounds = [log_obj.last_stable_offset, log_obj.active_segment.base_offset]
    min_lag = max(log_obj.config.min_compaction_lag_ms, 0)
    if min_lag > 0:
        for segment in log_obj.non_active_segments_from(first_dirty):
            if segment.largest_timestamp > now - min_lag:
                bounds.append(segment.base_offset)
                break
    return OffsetsToClean(first_dirty, max(first_dirty, min(bounds)), force)


def max_compaction_delay(log_obj, first_dirty_offset: int, now: int) -> int:
    """How far past max.compaction.lag.ms the oldest dirty segment is (0 when it is not)."""
    first_timestamps = []
    for segment in log_obj.non_active_segments_from(first_dirty_offset):
        ts = segment.first_batch_timestamp()
        if ts > 0:
            first_timestamps.append(ts)
    earliest = min(first_timestamps) if first_timestamps else None
    clean_until = now - max(log_obj.config.max_compaction_lag_ms, 0)
    return clean_until - earliest if earliest is not None and earliest < clean_until else 0


def _between(bases: Sequence[int], start: int, end: int) -> range:
    """Indexes of the segments that may hold offsets in [start, end): from floor(start) to the last base < end
    (``LogSegments.values``); empty when start == end."""
    if start == end:
        return range(0)
    return range(max(bisect.bisect_right(bases, start) - 1, 0), bisect.bisect_left(bases, end))


def dirty_section_bytes(
    bases: Sequence[int], sizes: Sequence[int], first_dirty_offset: int, uncleanable_offset: int
) -> tuple[int, int, int]:
    """(clean bytes, first uncleanable offset, cleanable bytes) of a log whose segments start at ``bases`` (sorted)
    and hold ``sizes`` bytes: the clean bytes are the segments below the first dirty offset, the cleanable bytes the
    segments from the one holding it up to the one holding the uncleanable offset, whose base is the first
    uncleanable offset (``LogToClean`` and ``LogCleanerManager.calculateCleanableBytes``)."""
    clean = sum(sizes[i] for i in _between(bases, -1, first_dirty_offset))
    holding = bisect.bisect_right(bases, uncleanable_offset) - 1
    first_uncleanable = bases[holding] if holding >= 0 else uncleanable_offset
    cleanable = sum(sizes[i] for i in _between(bases, min(first_dirty_offset, first_uncleanable), first_uncleanable))
    return clean, first_uncleanable, cleanable


def cleanable_ratio(clean_bytes: int, cleanable_bytes: int) -> float:
    """The dirty ratio: cleanable bytes over clean plus cleanable bytes (0 for an empty log)."""
    total = clean_bytes + cleanable_bytes
    return cleanable_bytes / total if total else 0.0


def segment_dirty_ratio(
    bases: Sequence[int], sizes: Sequence[int], checkpoint: int | None, active_base_offset: int
) -> float:
    """The dirty ratio of a log read from its files: first dirty at the cleaner checkpoint (the log start when
    there is none), uncleanable from the active segment (a live log's last stable offset and min.compaction.lag.ms
    may end the dirty section earlier; files alone do not say)."""
    first_dirty = checkpoint if checkpoint is not None else (bases[0] if bases else 0)
    clean, _, cleanable = dirty_section_bytes(bases, sizes, first_dirty, max(first_dirty, active_base_offset))
    return cleanable_ratio(clean, cleanable)


@dataclass
class LogToClean:
    """A compacted log with its dirty range and sizes (Kafka's LogToClean); ordered by ``cleanable_ratio``."""

    topic_partition: object
    log: object
    first_dirty_offset: int
    uncleanable_offset: int
    need_compaction_now: bool = False
    clean_bytes: int = field(init=False)
    first_uncleanable_offset: int = field(init=False)
    cleanable_bytes: int = field(init=False)

    def __post_init__(self) -> None:
        segments = self.log.log_segments(-1, INT64_MAX)  # one snapshot, under the log's lock
        self.clean_bytes, self.first_uncleanable_offset, self.cleanable_bytes = dirty_section_bytes(
            [s.base_offset for s in segments], [s.size for s in segments], self.first_dirty_offset,
            self.uncleanable_offset,
        )  # fmt: skip

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleanable_ratio(self) -> float:
        return cleanable_ratio(self.clean_bytes, self.cleanable_bytes)

    def eligible(self, min_cleanable_dirty_ratio: float) -> bool:
        """Cleaned on the next pass (not being cleaned, paused or uncleanable): dirty enough, or a dirty segment is
        past max.compaction.lag.ms (grabFilthiestCompactedLog)."""
        return (
            self.need_compaction_now and self.cleanable_bytes > 0
        ) or self.cleanable_ratio > min_cleanable_dirty_ratio


def group_segments_by_size(
    segments: list[LogSegment], max_size: int, max_index_size: int, first_uncleanable_offset: int
) -> list[list[LogSegment]]:
    """Consecutive segments that fit in one cleaned segment: size, both index sizes, 2^31 offsets."""
    groups: list[list[LogSegment]] = []
    rest = list(segments)
    while rest:
        group = [rest.pop(0)]
        log_size = group[0].size
        index_size = group[0].offset_index.size_in_bytes
        time_index_size = group[0].time_index.size_in_bytes
        while rest:
            following = rest[0]
            last_offset = rest[1].base_offset - 1 if len(rest) > 1 else first_uncleanable_offset - 1
            if not (
                log_size + following.size <= max_size
                and index_size + following.offset_index.size_in_bytes <= max_index_size
                and time_index_size + following.time_index.size_in_bytes <= max_index_size
                and (following.size == 0 or last_offset - group[0].base_offset <= INT32_MAX)
            ):
                break
            group.append(rest.pop(0))
            log_size += following.size
            index_size += following.offset_index.size_in_bytes
            time_index_size += following.time_index.size_in_bytes
        groups.append(group)
    return groups
