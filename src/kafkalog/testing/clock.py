"""Deterministic time for tests: MockTime and its scheduler, as Kafka's MockTime / MockScheduler.

``MockTime.advance(ms)`` (or ``sleep``) moves the clock and runs, in due-time order and on the calling
thread, every task scheduled on ``clock.scheduler`` whose time has come, periodic ones repeatedly.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(order=True)
class _Task:
    due_ms: int
    seq: int
    name: str = field(compare=False)
    fn: Callable[[], object] = field(compare=False)
    period_ms: int = field(compare=False, default=-1)
    cancelled: bool = field(compare=False, default=False)

    def cancel(self) -> None:
        self.cancelled = True


class MockScheduler:
    """Tasks that run when the MockTime they belong to passes their due time."""

    def __init__(self, clock: MockTime) -> None:
        self._clock = clock
        self._tasks: list[_Task] = []
        self._seq = itertools.count()
        self._lock = threading.RLock()

    def schedule(self, name: str, fn: Callable[[], object], delay_ms: int = 0, period_ms: int = -1) -> _Task:
        """Run ``fn`` after ``delay_ms``, then every ``period_ms`` when that is positive."""
        with self._lock:
            task = _Task(self._clock.milliseconds() + delay_ms, next(self._seq), name, fn, period_ms)
            heapq.heappush(self._tasks, task)
        self.tick()
        return task

    def schedule_once(self, name: str, fn: Callable[[], object], delay_ms: int = 0) -> _Task:
        return self.schedule(name, fn, delay_ms, -1)

    def tick(self) -> None:
        """Run every task that is due now."""
        while True:
            with self._lock:
                if not self._tasks or self._tasks[0].due_ms > self._clock.milliseconds():
                    return
                task = heapq.heappop(self._tasks)
                if task.cancelled:
                    continue
                if task.period_ms > 0:
                    task.due_ms += task.period_ms
                    task.seq = next(self._seq)
                    heapq.heappush(self._tasks, task)
            task.fn()

    def pending(self) -> list[str]:
        """Names of the tasks still scheduled, soonest first."""
        with self._lock:
            return [t.name for t in sorted(self._tasks) if not t.cancelled]

    def shutdown(self) -> None:
        with self._lock:
            self._tasks.clear()


class MockTime:
    """A clock that only moves when told to; ``scheduler`` runs due tasks as it moves."""

    def __init__(self, start_ms: int = 1_700_000_000_000, start_ns: int = 0, auto_tick_ms: int = 0) -> None:
        self._ms = start_ms
        self._ns = start_ns
        self.auto_tick_ms = auto_tick_ms
        self.scheduler = MockScheduler(self)

    def milliseconds(self) -> int:
        if self.auto_tick_ms:
            self._advance_raw(self.auto_tick_ms)
        return self._ms

    def nanoseconds(self) -> int:
        return self._ns

    def _advance_raw(self, ms: int) -> None:
        self._ms += ms
        self._ns += ms * 1_000_000

    def advance(self, ms: int) -> None:
        """Move the clock forward (stepping through each due task) and run what became due."""
        if ms < 0:
            raise ValueError("MockTime only moves forward")
        target = self._ms + ms
        while True:
            with self.scheduler._lock:
                tasks = [t for t in self.scheduler._tasks if not t.cancelled]
                next_due = min((t.due_ms for t in tasks), default=None)
            if next_due is None or next_due > target:
                break
            if next_due > self._ms:
                self._advance_raw(next_due - self._ms)
            self.scheduler.tick()
        self._advance_raw(target - self._ms)
        self.scheduler.tick()

    def sleep(self, ms: int) -> None:
        self.advance(ms)

    def set_ms(self, ms: int) -> None:
        """Jump to an absolute time (forward only)."""
        self.advance(ms - self._ms)
