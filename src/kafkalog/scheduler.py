"""A real background scheduler, as Kafka's ``org.apache.kafka.server.util.KafkaScheduler``.

A pool of daemon threads named ``<prefix><n>`` takes tasks from a heap ordered by due time. Periodic tasks
run at a fixed rate: the next run is due one period after the previous *scheduled* time, not after the run
finished, and a periodic task never runs twice at once. An exception in a task is logged and swallowed, so
it neither kills the thread nor stops a periodic task (Kafka wraps every task in a catch-all that logs).

Its methods match ``kafkalog.testing.MockScheduler``: ``schedule``, ``schedule_once``, ``shutdown``.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
from collections.abc import Callable

from .clock import SYSTEM_TIME, Time

log = logging.getLogger(__name__)

__all__ = ["KafkaScheduler", "ScheduledTask", "SchedulerNotRunningError"]


class SchedulerNotRunningError(RuntimeError):
    """A task was scheduled on a scheduler that was never started or has been shut down."""


class ScheduledTask:
    """A handle on a scheduled task: ``cancel()`` stops future runs (a run in progress completes)."""

    def __init__(self, name: str, fn: Callable[[], object], due_ns: int, period_ms: int, seq: int) -> None:
        self.name = name
        self.fn = fn
        self.period_ms = period_ms
        self._due_ns = due_ns
        self._seq = seq
        self._cancelled = False
        self._done = threading.Event()
        self.runs = 0
        """How many times the task has run (successfully or not)."""

    def __lt__(self, other: ScheduledTask) -> bool:
        return (self._due_ns, self._seq) < (other._due_ns, other._seq)

    @property
    def is_periodic(self) -> bool:
        return self.period_ms > 0

    def cancel(self) -> bool:
        """Stop the task from running again; True if it had not been cancelled before."""
        was = self._cancelled
        self._cancelled = True
        self._done.set()  # it will not run again: whoever waits on it may stop waiting
        return not was

    @property
    def is_cancelled(self) -> bool:
        return self._cancelled

    cancelled = is_cancelled
    """Alias of ``is_cancelled``, the attribute name MockScheduler's tasks use."""

    @property
    def is_done(self) -> bool:
        """True once a one-shot task has run, or once any task is cancelled."""
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until ``is_done`` (or the timeout in seconds passes); return ``is_done``."""
        return self._done.wait(timeout)

    def __repr__(self) -> str:
        state = "cancelled" if self._cancelled else ("done" if self._done.is_set() else "scheduled")
        return f"ScheduledTask(name={self.name!r}, period_ms={self.period_ms}, runs={self.runs}, {state})"


class KafkaScheduler:
    """Runs named tasks on ``threads`` daemon threads, after a delay and optionally periodically.

    ``clock`` provides ``nanoseconds()``, a monotonic clock that must advance in real time (the threads wait
    on a condition variable with real timeouts); tests that need simulated time use ``MockTime.scheduler``.
    """

    def __init__(
        self, threads: int = 1, thread_name_prefix: str = "kafka-scheduler-", clock: Time = SYSTEM_TIME
    ) -> None:
        if threads < 1:
            raise ValueError(f"A scheduler needs at least one thread, not {threads}")
        self.threads = threads
        self.thread_name_prefix = thread_name_prefix
        self.clock = clock
        self._cond = threading.Condition(threading.Lock())
        self._heap: list[ScheduledTask] = []
        self._workers: list[threading.Thread] = []
        self._running = False
        self._thread_ids = itertools.count()
        self._seq = itertools.count()
        self._generation = 0  # bumped by each shutdown, so an old worker never serves a restarted scheduler

    # ----- lifecycle -----------------------------------------------------------------------------
    def startup(self) -> None:
        """Start the worker threads. Raises RuntimeError if the scheduler is already running."""
        log.debug("Initializing task scheduler.")
        with self._cond:
            if self._running:
                raise RuntimeError("This scheduler has already been started.")
            self._running = True
            generation = self._generation
            self._workers = [
                threading.Thread(
                    target=self._work,
                    args=(generation,),
                    name=f"{self.thread_name_prefix}{next(self._thread_ids)}",
                    daemon=True,
                )
                for _ in range(self.threads)
            ]
            workers = list(self._workers)
        for worker in workers:
            worker.start()

    @property
    def is_started(self) -> bool:
        return self._running

    def shutdown(self) -> None:
        """Stop the threads: pending tasks are dropped (and cancelled), running ones are waited for.

        Idempotent; calling it from inside a task does not wait for that task's own thread.
        """
        log.debug("Shutting down task scheduler.")
        with self._cond:
            if not self._running:
                return
            self._running = False
            self._generation += 1
            dropped, self._heap = self._heap, []
            workers, self._workers = self._workers, []
            self._cond.notify_all()
        for task in dropped:
            task.cancel()
        current = threading.current_thread()
        for worker in workers:
            if worker is not current:
                worker.join()

    # ----- scheduling ----------------------------------------------------------------------------
    def schedule(self, name: str, fn: Callable[[], object], delay_ms: int = 0, period_ms: int = -1) -> ScheduledTask:
        """Run ``fn`` after ``delay_ms``, then every ``period_ms`` (fixed rate) when that is positive."""
        log.debug("Scheduling task %s with initial delay %d ms and period %d ms.", name, delay_ms, period_ms)
        with self._cond:
            if not self._running:
                raise SchedulerNotRunningError(f"Kafka scheduler is not running; cannot schedule task '{name}'.")
            due_ns = self.clock.nanoseconds() + max(0, int(delay_ms)) * 1_000_000
            task = ScheduledTask(name, fn, due_ns, int(period_ms), next(self._seq))
            heapq.heappush(self._heap, task)
            self._cond.notify()
        return task

    def schedule_once(self, name: str, fn: Callable[[], object], delay_ms: int = 0) -> ScheduledTask:
        """Run ``fn`` once, after ``delay_ms``."""
        return self.schedule(name, fn, delay_ms, -1)

    def pending(self) -> list[str]:
        """Names of the tasks waiting to run (not those running now), soonest first."""
        with self._cond:
            return [t.name for t in sorted(self._heap) if not t.is_cancelled]

    # ----- workers -------------------------------------------------------------------------------
    def _next_task(self, generation: int) -> ScheduledTask | None:
        """Wait for a due task and take it off the heap; None when this worker's scheduler was shut down."""
        with self._cond:
            while True:
                if self._generation != generation:
                    return None
                while self._heap and self._heap[0].is_cancelled:
                    heapq.heappop(self._heap)
                if not self._heap:
                    self._cond.wait()
                    continue
                wait_ns = self._heap[0]._due_ns - self.clock.nanoseconds()
                if wait_ns > 0:
                    self._cond.wait(wait_ns / 1e9)
                    continue
                return heapq.heappop(self._heap)

    def _work(self, generation: int) -> None:
        while (task := self._next_task(generation)) is not None:
            self._run(task)
            if task.is_periodic:
                with self._cond:
                    if self._generation == generation and not task.is_cancelled:
                        task._due_ns += task.period_ms * 1_000_000
                        task._seq = next(self._seq)
                        heapq.heappush(self._heap, task)
                        self._cond.notify()
                        continue
                task._done.set()  # cancelled while running, or the scheduler shut down
            else:
                task._done.set()

    @staticmethod
    def _run(task: ScheduledTask) -> None:
        log.debug("Beginning execution of scheduled task '%s'.", task.name)
        try:
            task.fn()
        except Exception:
            log.exception("Uncaught exception in scheduled task '%s'", task.name)
        finally:
            task.runs += 1
            log.debug("Completed execution of scheduled task '%s'.", task.name)
