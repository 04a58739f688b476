"""Time as the storage engine sees it: a clock object, so every time-based rule can be tested.

``SystemTime`` is the real clock; ``kafkalog.testing.MockTime`` is the one tests advance by hand.
Both give milliseconds (wall clock, for timestamps) and nanoseconds (monotonic, for durations).
"""

from __future__ import annotations

import time
from typing import Protocol


class Time(Protocol):
    """What kafkalog asks of a clock (Kafka's org.apache.kafka.common.utils.Time)."""

    def milliseconds(self) -> int: ...

    def nanoseconds(self) -> int: ...

    def sleep(self, ms: int) -> None: ...


class SystemTime:
    """The real clock."""

    def milliseconds(self) -> int:
        return time.time_ns() // 1_000_000

    def nanoseconds(self) -> int:
        return time.monotonic_ns()

    def sleep(self, ms: int) -> None:
        time.sleep(ms / 1000)


SYSTEM_TIME = SystemTime()
