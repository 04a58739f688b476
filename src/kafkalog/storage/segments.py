"""The ordered map of a log's segments by base offset (Kafka's LogSegments)."""

from __future__ import annotations

import bisect
from collections.abc import Iterator

from .segment import LogSegment


class LogSegments:
    """Segments sorted by base offset, with floor/higher lookups.

    Invariant: at most one segment per base offset, and the base offsets listed are exactly the keys of the
    segments held, in increasing order.
    """

    def __init__(self) -> None:
        self._bases: list[int] = []
        self._by_base: dict[int, LogSegment] = {}

    def add(self, segment: LogSegment) -> None:
        if segment.base_offset not in self._by_base:
            bisect.insort(self._bases, segment.base_offset)
        self._by_base[segment.base_offset] = segment

    def remove(self, base_offset: int) -> None:
        if self._by_base.pop(base_offset, None) is not None:
            self._bases.remove(base_offset)

    def clear(self) -> None:
        self._bases.clear()
        self._by_base.clear()

    def get(self, base_offset: int) -> LogSegment | None:
        return self._by_base.get(base_offset)

    def __contains__(self, base_offset: int) -> bool:
        return base_offset in self._by_base

    def __len__(self) -> int:
        return len(self._bases)

    def __iter__(self) -> Iterator[LogSegment]:
        return iter([self._by_base[b] for b in self._bases])

    @property
    def base_offsets(self) -> list[int]:
        return list(self._bases)

    def first(self) -> LogSegment | None:
        return self._by_base[self._bases[0]] if self._bases else None

    def last(self) -> LogSegment | None:
        return self._by_base[self._bases[-1]] if self._bases else None

    def floor(self, offset: int) -> LogSegment | None:
        """The segment with the greatest base offset <= ``offset``."""
        i = bisect.bisect_right(self._bases, offset)
        return self._by_base[self._bases[i - 1]] if i else None

    def higher(self, base_offset: int) -> LogSegment | None:
        """The segment after the one at ``base_offset``."""
        i = bisect.bisect_right(self._bases, base_offset)
        return self._by_base[self._bases[i]] if i < len(self._bases) else None

    def values_from(self, offset: int) -> list[LogSegment]:
        """The segment holding ``offset`` (its floor) and every later one."""
        i = max(bisect.bisect_right(self._bases, offset) - 1, 0)
        return [self._by_base[b] for b in self._bases[i:]]

    def values_between(self, start: int, end: int) -> list[LogSegment]:
        """Segments that may hold offsets in [start, end): from floor(start) to the last base < end."""
        i = max(bisect.bisect_right(self._bases, start) - 1, 0)
        j = bisect.bisect_left(self._bases, end)
        return [self._by_base[b] for b in self._bases[i:j]]

    def next_base_offset(self, segment: LogSegment, log_end_offset: int) -> int:
        following = self.higher(segment.base_offset)
        return following.base_offset if following is not None else log_end_offset
