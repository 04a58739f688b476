"""What one clean did (Kafka's ``CleanerStats``) and the cleaner's I/O throttle (Kafka's ``Throttler``)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ..clock import Time

log = logging.getLogger(__name__)


# ----- statistics and throttling --------------------------------------------------------------
@dataclass
class CleanerStats:
    """What one clean read, wrote and kept (Kafka's CleanerStats); times are the clock's milliseconds."""

    bytes_read: int = 0
    bytes_written: int = 0
    map_bytes_read: int = 0
    map_messages_read: int = 0
    messages_read: int = 0
    messages_written: int = 0
    invalid_messages_read: int = 0
    buffer_utilization: float = 0.0
    start_ms: int = 0
    map_complete_ms: int = 0
    end_ms: int = 0
    wall_seconds: float = 0.0
    map_wall_seconds: float = 0.0

    def elapsed_secs(self) -> float:
        return (self.end_ms - self.start_ms) / 1000

    def elapsed_indexing_secs(self) -> float:
        return (self.map_complete_ms - self.start_ms) / 1000

    def add(self, other: CleanerStats) -> None:
        """Sum the counters of another clean into this one (for a cleaning pass over several logs)."""
        for name in (
            "bytes_read",
            "bytes_written",
            "map_bytes_read",
            "map_messages_read",
            "messages_read",
            "messages_written",
            "invalid_messages_read",
        ):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.buffer_utilization = max(self.buffer_utilization, other.buffer_utilization)
        self.wall_seconds += other.wall_seconds
        self.map_wall_seconds += other.map_wall_seconds


class Throttler:
    """Sleep to hold an observed byte rate under ``desired_rate_per_sec`` (Kafka's Throttler, 300 ms periods)."""

    def __init__(self, desired_rate_per_sec: float, clock: Time, check_interval_ms: int = 300) -> None:
        self.desired_rate_per_sec = float(desired_rate_per_sec)
        self.clock = clock
        self.check_interval_ns = check_interval_ms * 1_000_000
        self._period_start_ns = clock.nanoseconds()
        self._observed = 0.0
        self.slept_ms = 0

    def maybe_throttle(self, observed: float) -> None:
        self._observed += observed
        now = self.clock.nanoseconds()
        elapsed_ns = now - self._period_start_ns
        if elapsed_ns > self.check_interval_ns and self._observed > 0:
            rate = self._observed * 1e9 / elapsed_ns
            if rate > self.desired_rate_per_sec:
                desired_rate_ms = self.desired_rate_per_sec / 1000
                sleep_ms = round(self._observed / desired_rate_ms - elapsed_ns / 1e6)
                if sleep_ms > 0:
                    self.clock.sleep(sleep_ms)
                    self.slept_ms += sleep_ms
            self._period_start_ns = self.clock.nanoseconds()
            self._observed = 0.0
