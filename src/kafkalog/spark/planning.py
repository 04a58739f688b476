"""Planning a batch read: which topic-partitions, which offset ranges, cut into how many input partitions.

``select_partitions`` applies assign / subscribe / subscribePattern to the partitions found; ``PushedFilters``
narrows the ranges by the filters Spark pushes (topic, partition, offset, timestamp); ``offset_ranges`` splits a
range as Spark's KafkaOffsetRangeCalculator does, and the cuts move to batch boundaries known from the ``.index``.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from dataclasses import dataclass

import numpy as np
from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)

from ..errors import InvalidConfigurationError, UnknownTopicOrPartitionError
from ..partition import readonly as logfiles
from .options import MAX_PUSHED_OFFSETS, ReadOptions, format_partitions


@dataclass(frozen=True)
class KafkaLogInputPartition(InputPartition):
    """One offset range [start, end) of a topic-partition, resolved when the query was planned."""

    topic: str
    partition: int
    directory: str
    start: int
    end: int


def select_partitions(
    options: ReadOptions, found: dict[tuple[str, int], logfiles.PartitionDir]
) -> list[tuple[str, int]]:
    where = ", ".join(options.paths)
    if options.strategy == "subscribe":
        known = {t for t, _ in found}
        missing = [t for t in options.topics if t not in known]
        if missing:
            raise UnknownTopicOrPartitionError(
                f"Topic(s) {', '.join(missing)} given in option 'subscribe' do not exist in the log dirs {where}"
            )
        return sorted(tp for tp in found if tp[0] in options.topics)
    if options.strategy == "subscribePattern":
        pattern = re.compile(options.pattern)
        return sorted(
            tp for tp in found if tp[0] not in logfiles.INTERNAL_TOPICS and pattern.fullmatch(tp[0]) is not None
        )
    missing = [f"{t}-{p}" for t, p in options.assign if (t, p) not in found]
    if missing:
        raise UnknownTopicOrPartitionError(
            f"Partition(s) {', '.join(missing)} given in option 'assign' do not exist in the log dirs {where}"
        )
    return sorted(options.assign)


def check_specific_offsets(name: str, offsets: dict, selected: list[tuple[str, int]]) -> None:
    if set(offsets) != set(selected):
        fmt = ", ".join
        raise InvalidConfigurationError(
            f"If {name} contains specific offsets, you must specify all TopicPartitions.\n"
            "Use -1 for latest, -2 for earliest.\n"
            f"Specified: {{{fmt(f'{t}-{p}' for t, p in sorted(offsets))}}} "
            f"Assigned: {{{fmt(f'{t}-{p}' for t, p in selected)}}}"
        )


def check_offsets_by_timestamp(name: str, position: str, timestamps: dict, selected: list[tuple[str, int]]) -> None:
    if set(timestamps) != set(selected):  # KAFKA_TIMESTAMP_OFFSET_DOES_NOT_MATCH_ASSIGNED
        raise InvalidConfigurationError(
            f"Partitions specified for Kafka {position} offsets by timestamp ({name}) must match the assigned "
            f"partitions. Specified: {format_partitions(timestamps)} Assigned: {format_partitions(selected)}"
        )


# ----- filter pushdown ----------------------------------------------------------------------------------


def _ms_at_or_below(value: object) -> int | None:
    """A filter's timestamp literal as epoch milliseconds rounded down, or None when it is not a zone-aware
    datetime (Spark passes TIMESTAMP literals as UTC datetimes; anything else is not narrowed on)."""
    if not isinstance(value, dt.datetime) or value.tzinfo is None:
        return None
    delta = value - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


@dataclass
class PushedFilters:
    """What the filters pushed to a reader allow: conditions on topic, partition and offset (exact) and a
    lower bound on the timestamp (used to narrow only). ``None`` means unconstrained."""

    topics: frozenset[str] | None = None
    partitions: frozenset[int] | None = None
    partition_low: int | None = None  # inclusive
    partition_high: int | None = None  # exclusive
    offsets: frozenset[int] | None = None
    offset_low: int | None = None  # inclusive
    offset_high: int | None = None  # exclusive
    timestamp_low: int | None = None  # ms, inclusive

    @property
    def active(self) -> bool:
        return any(
            v is not None
            for v in (
                self.topics,
                self.partitions,
                self.partition_low,
                self.partition_high,
                self.offsets,
                self.offset_low,
                self.offset_high,
                self.timestamp_low,
            )
        )

    def push(self, f: Filter) -> bool:
        """Take ``f`` into account if it says something about topic, partition, offset or timestamp; True when
        the ranges planned from now on hold exactly the rows it accepts (Spark need not apply it again)."""
        attribute = getattr(f, "attribute", None)
        if not isinstance(attribute, tuple) or len(attribute) != 1:
            return False
        column = attribute[0]
        if isinstance(f, EqualTo | EqualNullSafe):
            values, op = [f.value], "in"
        elif isinstance(f, In):
            values, op = list(f.value), "in"
        elif isinstance(f, GreaterThan | GreaterThanOrEqual | LessThan | LessThanOrEqual):
            values, op = [f.value], type(f).__name__
        else:
            return False
        if not values:
            return False
        if column == "topic":
            if op != "in" or not all(isinstance(v, str) for v in values):
                return False
            self.topics = frozenset(values) if self.topics is None else self.topics & frozenset(values)
            return True
        if column in ("partition", "offset"):
            if not all(type(v) is int for v in values):
                return False
            exact = True
            if op == "in" and column == "offset" and len(set(values)) > MAX_PUSHED_OFFSETS:
                op, exact = "hull", False
            prefix = "partition" if column == "partition" else "offset"
            points_name = "partitions" if column == "partition" else "offsets"
            low, high = getattr(self, f"{prefix}_low"), getattr(self, f"{prefix}_high")
            if op == "in":
                points = getattr(self, points_name)
                setattr(self, points_name, frozenset(values) if points is None else points & frozenset(values))
            elif op == "hull":
                low = max(low if low is not None else min(values), min(values))
                high = min(high if high is not None else max(values) + 1, max(values) + 1)
            else:
                v = values[0]
                bound = {"GreaterThan": v + 1, "GreaterThanOrEqual": v, "LessThan": v, "LessThanOrEqual": v + 1}[op]
                if op.startswith("Greater"):
                    low = bound if low is None else max(low, bound)
                else:
                    high = bound if high is None else min(high, bound)
            setattr(self, f"{prefix}_low", low)
            setattr(self, f"{prefix}_high", high)
            return exact
        if column == "timestamp" and op in ("in", "GreaterThan", "GreaterThanOrEqual"):
            bounds = [_ms_at_or_below(v) for v in values]
            if any(b is None for b in bounds):
                return False
            low = min(bounds)
            if low > 0:  # records without a timestamp (-1) match bounds at or below 0: never narrow on those
                self.timestamp_low = low if self.timestamp_low is None else max(self.timestamp_low, low)
            return False
        return False

    def keeps_partition(self, topic: str, partition: int) -> bool:
        return (
            (self.topics is None or topic in self.topics)
            and (self.partitions is None or partition in self.partitions)
            and (self.partition_low is None or partition >= self.partition_low)
            and (self.partition_high is None or partition < self.partition_high)
        )

    def offset_ranges(self, start: int, end: int) -> list[tuple[int, int]]:
        """[start, end) cut down to the offsets the offset conditions accept: non-empty ranges, ascending."""
        if self.offset_low is not None:
            start = max(start, self.offset_low)
        if self.offset_high is not None:
            end = min(end, self.offset_high)
        if start >= end:
            return []
        if self.offsets is None:
            return [(start, end)]
        ranges: list[tuple[int, int]] = []
        for offset in sorted(o for o in self.offsets if start <= o < end):
            if ranges and ranges[-1][1] == offset:
                ranges[-1] = (ranges[-1][0], offset + 1)
            else:
                ranges.append((offset, offset + 1))
        return ranges


# ----- splitting ----------------------------------------------------------------------------------------


def _divide(piece: tuple, parts: int) -> list[tuple]:
    """KafkaOffsetRangeCalculator.getDividedPartition: ``parts`` consecutive pieces, the last taking the rest."""
    key, start, end = piece
    remaining = end - start
    out = []
    for part in range(parts):
        this = remaining // (parts - part)
        remaining -= this
        stop = min(start + this, end)
        out.append((key, start, stop))
        start = stop
    return out


def _part_count(size: int, total: int, min_parts: int) -> int:
    # Scala's math.round: half up.
    return max(math.floor(size / total * min_parts + 0.5), 1)


def offset_ranges(
    ranges: list[tuple], min_partitions: int | None, max_records_per_partition: int | None
) -> list[tuple]:
    """Spark's KafkaOffsetRangeCalculator over (key, start, end) ranges, the key naming the topic-partition.

    No split unless there are fewer ranges than ``min_partitions`` or one above ``max_records_per_partition``
    offsets; then empty ranges go, ranges above ``max_records_per_partition`` are cut into equal pieces, and
    if there are still fewer than ``min_partitions`` the large ones are divided in proportion to their sizes
    (a range whose share rounds to one piece is left whole, and left out of the proportions).
    """
    min_parts, max_records = min_partitions, max_records_per_partition
    if not (
        (min_parts is not None and min_parts > len(ranges))
        or (max_records is not None and any(e - s > max_records for _, s, e in ranges))
    ):
        return list(ranges)
    pieces = [r for r in ranges if r[2] - r[1] > 0]
    if max_records is not None:
        pieces = [p for r in pieces for p in _divide(r, -(-(r[2] - r[1]) // max_records)) if p[2] > p[1]]
    if min_parts is not None and min_parts > len(pieces):
        total = sum(e - s for _, s, e in pieces)
        unsplit = [r for r in pieces if _part_count(r[2] - r[1], total, min_parts) == 1]
        unsplit_keys = {r[0] for r in unsplit}
        split_total = total - sum(e - s for _, s, e in unsplit)
        split_min = max(min_parts - len(unsplit), 1)
        pieces = [
            p
            for r in pieces
            for p in _divide(r, 1 if r[0] in unsplit_keys else _part_count(r[2] - r[1], split_total, split_min))
            if p[2] > p[1]
        ]
    return pieces


def snap_to_batches(directory: str, bases: list[int], bounds: list[int], max_records: int | None) -> list[int]:
    """Move each inner cut of a range cut at ``bounds`` to the nearest batch boundary from the ``.index``
    (``logfiles.batch_boundaries``) within a quarter of its neighbouring pieces, keeping every piece non-empty
    and, with ``max_records``, no longer than it; a cut with no such boundary stays where it is."""
    out = [bounds[0]]
    for j in range(1, len(bounds) - 1):
        cut, previous, following = bounds[j], out[-1], bounds[j + 1]
        slack = min(cut - bounds[j - 1], following - cut) // 4
        candidates = logfiles.batch_boundaries(directory, bases, cut)
        ok = (candidates > previous) & (candidates < following) & (np.abs(candidates - cut) <= slack)
        if max_records is not None:
            ok &= (candidates - previous <= max_records) & (following - candidates <= max_records)
        good = candidates[ok]
        out.append(int(good[np.argmin(np.abs(good - cut))]) if len(good) else cut)
    out.append(bounds[-1])
    return out
