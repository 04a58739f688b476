"""The log cleaner's kernels compiled in a child process before a process's first clean (cleaner/warm.py)."""

from __future__ import annotations

import sys
import threading

from brokertools import wait_until
from kafkalog import LogManager
from kafkalog.cleaner import log_cleaner, warm
from kafkalog.storage.log import Log


def test_the_sample_clean_keeps_the_latest_record_of_each_key_below_the_active_segment(tmp_path):
    left = warm.clean_sample_log(tmp_path)
    log_obj = Log.open(tmp_path / "kafkalog-cleaner-warm-0")
    try:
        active = log_obj.active_segment.base_offset
        records = list(log_obj.records(0))
        assert len(records) == left < 60
        cleaned = [r for r in records if r.offset < active]
        assert sorted(r.key for r in cleaned) == [b"key-%d" % k for k in range(5)]
        for r in cleaned:  # the latest value written below the active segment, for its key
            last = max(i for i in range(active) if i % 5 == int(r.key[4:]))
            assert r.value == b"value-%d" % last
    finally:
        log_obj.close()


def test_the_child_runs_once_per_process(monkeypatch):
    runs: list[list[str]] = []
    command = [sys.executable, "-c", "pass"]
    monkeypatch.setattr(warm, "child_command", lambda: runs.append(command) or command)
    monkeypatch.setattr(warm, "_compiled", False)
    assert warm.compile_in_child() is True
    assert warm.compile_in_child() is True
    assert len(runs) == 1


def test_a_failed_child_is_reported_and_leaves_the_kernels_to_the_process(monkeypatch, caplog):
    monkeypatch.setattr(warm, "child_command", lambda: [sys.executable, "-c", "raise SystemExit('no cache')"])
    monkeypatch.setattr(warm, "_compiled", False)
    assert warm.compile_in_child() is False
    assert "exit 1: no cache" in caplog.text
    assert warm.compile_in_child() is True  # not tried again: the process compiles them itself


def test_the_cleaners_stop_ends_the_child_and_a_later_clean_tries_again(monkeypatch):
    monkeypatch.setattr(warm, "child_command", lambda: [sys.executable, "-c", "import time; time.sleep(600)"])
    monkeypatch.setattr(warm, "_compiled", False)
    stop = threading.Event()
    threading.Timer(0.5, stop.set).start()
    assert warm.compile_in_child(stop) is False  # back when stopped, not after the child's 600 s
    assert warm._compiled is False


def test_the_cleaner_thread_compiles_in_the_child_before_its_first_clean(tmp_path, monkeypatch):
    checkpoints_at_call: list[dict] = []

    def compile_in_child(stop=None):
        checkpoints_at_call.append(manager.cleaner.all_cleaner_checkpoints())
        return True

    monkeypatch.setattr(log_cleaner, "compile_in_child", compile_in_child)
    manager = LogManager([tmp_path], {"log.cleaner.backoff.ms": 50})
    manager.startup()
    try:
        config = {"cleanup.policy": "compact", "segment.bytes": "1024", "min.cleanable.dirty.ratio": "0.01"}
        manager.create_topic("compacted", 1, config)
        log_obj = manager.get_log("compacted")
        for i in range(60):
            log_obj.append([(b"key-%d" % (i % 5), b"value-%d" % i)])
        assert wait_until(lambda: sum(manager.cleaner.all_cleaner_checkpoints().values()) > 0, timeout=120)
        assert checkpoints_at_call and not any(checkpoints_at_call[0].values())  # called before anything was cleaned
    finally:
        manager.shutdown()
