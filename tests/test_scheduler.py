"""KafkaScheduler: a real thread pool running delayed, periodic and one-shot tasks."""

from __future__ import annotations

import itertools
import logging
import threading
import time

import pytest

from kafkalog.scheduler import KafkaScheduler, ScheduledTask, SchedulerNotRunningError
from kafkalog.testing import MockScheduler

TIMEOUT = 5.0  # seconds; generous, only reached when a test is about to fail


@pytest.fixture
def scheduler():
    s = KafkaScheduler(threads=2)
    s.startup()
    yield s
    s.shutdown()


def test_same_methods_as_mock_scheduler():
    for name in ("schedule", "schedule_once", "shutdown"):
        assert callable(getattr(KafkaScheduler, name)), name
        assert callable(getattr(MockScheduler, name)), name


def test_schedule_once_runs_on_a_named_daemon_thread(scheduler):
    ran = threading.Event()
    seen = {}

    def task():
        seen["thread"] = threading.current_thread()
        ran.set()

    handle = scheduler.schedule_once("one", task)
    assert isinstance(handle, ScheduledTask)
    assert ran.wait(TIMEOUT)
    assert seen["thread"].name.startswith("kafka-scheduler-")
    assert seen["thread"].daemon
    assert handle.wait(TIMEOUT)
    assert handle.is_done and not handle.is_cancelled and handle.runs == 1


def test_thread_names_and_count():
    s = KafkaScheduler(threads=3, thread_name_prefix="test-sched-")
    s.startup()
    try:
        names = sorted(t.name for t in threading.enumerate() if t.name.startswith("test-sched-"))
        assert names == ["test-sched-0", "test-sched-1", "test-sched-2"]
    finally:
        s.shutdown()
    assert not any(t.name.startswith("test-sched-") for t in threading.enumerate())


def test_delay_is_respected(scheduler):
    ran = threading.Event()
    start = time.monotonic()
    scheduler.schedule("delayed", ran.set, delay_ms=50)
    assert ran.wait(TIMEOUT)
    assert time.monotonic() - start >= 0.045


def test_tasks_run_in_due_order():
    s = KafkaScheduler(threads=1)
    s.startup()
    order = []
    done = threading.Event()
    try:
        gate, holding = threading.Event(), threading.Event()
        s.schedule("gate", lambda: (holding.set(), gate.wait(TIMEOUT)))  # hold the only thread
        assert holding.wait(TIMEOUT)
        s.schedule("c", lambda: order.append("c"), delay_ms=30)
        s.schedule("a", lambda: order.append("a"), delay_ms=10)
        s.schedule("b", lambda: order.append("b"), delay_ms=20)
        s.schedule("end", done.set, delay_ms=40)
        assert s.pending() == ["a", "b", "c", "end"]
        gate.set()
        assert done.wait(TIMEOUT)
        assert order == ["a", "b", "c"]
    finally:
        s.shutdown()


def test_periodic_task_repeats_until_cancelled(scheduler):
    count = 0
    reached = threading.Event()

    def tick():
        nonlocal count
        count += 1
        if count == 5:
            reached.set()

    task = scheduler.schedule("periodic", tick, delay_ms=0, period_ms=10)
    assert reached.wait(TIMEOUT)
    assert task.cancel() is True
    assert task.cancel() is False  # second cancel is a no-op
    assert task.is_cancelled and task.cancelled and task.is_done
    settled = count
    time.sleep(0.05)  # five periods: a cancelled task must not run again
    assert count in (settled, settled + 1)  # one run may have been in flight when cancel() was called
    assert "periodic" not in scheduler.pending()


def test_periodic_is_fixed_rate_from_the_scheduled_time():
    s = KafkaScheduler()
    s.startup()
    try:
        due_times = []
        hit = threading.Event()

        def slow():
            due_times.append(task._due_ns)
            time.sleep(0.03)  # longer than the period: runs follow back to back, never overlap
            if len(due_times) == 3:
                hit.set()

        task = s.schedule("slow", slow, delay_ms=0, period_ms=10)
        assert hit.wait(TIMEOUT)
        task.cancel()
        # Each run was due exactly one period after the previous due time, however long a run took.
        assert [b - a for a, b in itertools.pairwise(due_times[:3])] == [10_000_000, 10_000_000]
    finally:
        s.shutdown()


def test_periodic_task_never_runs_concurrently_with_itself():
    s = KafkaScheduler(threads=4)
    s.startup()
    active = 0
    overlap = False
    runs = 0
    done = threading.Event()
    lock = threading.Lock()

    def task():
        nonlocal active, overlap, runs
        with lock:
            active += 1
            overlap |= active > 1
        time.sleep(0.01)
        with lock:
            active -= 1
            runs += 1
            if runs == 5:
                done.set()

    try:
        handle = s.schedule("p", task, period_ms=1)
        assert done.wait(TIMEOUT)
        handle.cancel()
        assert not overlap
    finally:
        s.shutdown()


def test_exception_is_logged_and_does_not_kill_the_thread_or_the_periodic_task(scheduler, caplog):
    calls = 0
    third = threading.Event()

    def flaky():
        nonlocal calls
        calls += 1
        if calls == 4:  # the third failure has been logged: runs of one task never overlap
            third.set()
        raise RuntimeError(f"boom {calls}")

    with caplog.at_level(logging.ERROR, logger="kafkalog.scheduler"):
        task = scheduler.schedule("flaky", flaky, period_ms=10)
        assert third.wait(TIMEOUT)
        task.cancel()
        # The thread survived: a later task still runs.
        after = threading.Event()
        scheduler.schedule_once("after", after.set)
        assert after.wait(TIMEOUT)
    errors = [r for r in caplog.records if "Uncaught exception in scheduled task 'flaky'" in r.getMessage()]
    assert len(errors) >= 3
    assert errors[0].exc_info and "boom 1" in str(errors[0].exc_info[1])


def test_one_shot_exception_marks_done(scheduler, caplog):
    with caplog.at_level(logging.ERROR, logger="kafkalog.scheduler"):
        task = scheduler.schedule_once("bad", lambda: 1 / 0)
        assert task.wait(TIMEOUT)
    assert task.runs == 1 and not task.is_cancelled
    assert any("'bad'" in r.getMessage() for r in caplog.records)


def test_cancel_before_due_prevents_the_run(scheduler):
    ran = threading.Event()
    task = scheduler.schedule_once("later", ran.set, delay_ms=200)
    task.cancel()
    assert scheduler.pending() == []
    witness = threading.Event()
    scheduler.schedule_once("witness", witness.set, delay_ms=250)  # due after 'later' would have been
    assert witness.wait(TIMEOUT)
    assert not ran.is_set() and task.runs == 0


def test_schedule_before_startup_raises():
    s = KafkaScheduler()
    assert not s.is_started
    with pytest.raises(SchedulerNotRunningError, match="Kafka scheduler is not running"):
        s.schedule("x", lambda: None)
    with pytest.raises(RuntimeError, match="not running"):
        s.schedule_once("x", lambda: None)


def test_schedule_after_shutdown_raises(scheduler):
    scheduler.shutdown()
    assert not scheduler.is_started
    with pytest.raises(SchedulerNotRunningError):
        scheduler.schedule_once("x", lambda: None)


def test_double_startup_raises(scheduler):
    with pytest.raises(RuntimeError, match="already been started"):
        scheduler.startup()


def test_shutdown_is_idempotent_and_allowed_before_startup():
    s = KafkaScheduler()
    s.shutdown()
    s.startup()
    s.shutdown()
    s.shutdown()
    assert not s.is_started


def test_shutdown_waits_for_running_tasks_and_drops_pending_ones():
    s = KafkaScheduler(threads=1)
    s.startup()
    started = threading.Event()
    finished = threading.Event()
    pending_ran = threading.Event()

    def long_task():
        started.set()
        deadline = time.monotonic() + TIMEOUT
        while s.is_started and time.monotonic() < deadline:  # hold the only thread until shutdown begins
            time.sleep(0.001)
        time.sleep(0.02)
        finished.set()

    s.schedule_once("long", long_task)
    pending = s.schedule_once("pending", pending_ran.set, delay_ms=20)
    periodic = s.schedule("periodic", pending_ran.set, delay_ms=20, period_ms=10)
    assert started.wait(TIMEOUT)
    s.shutdown()
    assert finished.is_set()  # shutdown returned only after the running task completed
    assert pending.is_cancelled and periodic.is_cancelled
    time.sleep(0.05)
    assert not pending_ran.is_set()
    assert not any(t.name.startswith("kafka-scheduler-") and t.is_alive() for t in s._workers)


def test_shutdown_from_inside_a_task_does_not_deadlock():
    s = KafkaScheduler(threads=1)
    s.startup()
    returned = threading.Event()

    def stop():
        s.shutdown()
        returned.set()

    s.schedule_once("stop", stop)
    assert returned.wait(TIMEOUT)
    assert not s.is_started


def test_a_task_can_schedule_another(scheduler):
    second = threading.Event()
    scheduler.schedule_once("first", lambda: scheduler.schedule_once("second", second.set, delay_ms=5))
    assert second.wait(TIMEOUT)


def test_restart_after_shutdown():
    s = KafkaScheduler()
    s.startup()
    s.shutdown()
    s.startup()
    try:
        ran = threading.Event()
        s.schedule_once("again", ran.set)
        assert ran.wait(TIMEOUT)
    finally:
        s.shutdown()


def test_many_threads_run_tasks_in_parallel():
    s = KafkaScheduler(threads=3)
    s.startup()
    barrier = threading.Barrier(3, timeout=TIMEOUT)
    passed = []
    try:
        tasks = [s.schedule_once(f"t{i}", lambda: passed.append(barrier.wait())) for i in range(3)]
        assert all(t.wait(TIMEOUT) for t in tasks)
        assert sorted(passed) == [0, 1, 2]  # all three met at the barrier: they ran at the same time
    finally:
        s.shutdown()


def test_bad_thread_count():
    with pytest.raises(ValueError):
        KafkaScheduler(threads=0)


def test_negative_delay_runs_now(scheduler):
    ran = threading.Event()
    scheduler.schedule_once("past", ran.set, delay_ms=-100)
    assert ran.wait(TIMEOUT)


def test_wait_times_out_for_a_far_task(scheduler):
    task = scheduler.schedule_once("far", lambda: None, delay_ms=60_000)
    assert not task.wait(0.01)
    assert scheduler.pending() == ["far"]
    assert "far" in repr(task) and "scheduled" in repr(task)
    task.cancel()
    assert task.wait(0) and "cancelled" in repr(task)
