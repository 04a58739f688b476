"""One background thread that checks a large batch while the appending thread writes it.

A 1 MiB append spends about a fifth of its time on the CRC-32C and the record walk, and the rest
copying the bytes into the page cache. Both release the GIL, so the log hands the checks to this
thread and writes at the same time. The write stays invisible until the check passes: the log's
logical size moves only then, and the batch header lands last (``FileRecords.append``'s
``before_commit``). One thread serves the whole process; when it is busy, the caller checks the batch
itself, so concurrent appenders never queue behind each other.
"""

from __future__ import annotations

import os
import queue
import sys
import threading
from collections.abc import Callable
from typing import Any

OVERLAP_MIN_BYTES = 256 * 1024  # below this the hand-off costs more than the overlap saves


class Check:
    """One check running on the background thread; ``result()`` waits for it."""

    __slots__ = ("_args", "_done", "_error", "_fn", "_value")

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self._fn = fn
        self._args = args
        self._value: Any = None
        self._error: BaseException | None = None
        self._done = threading.Lock()
        self._done.acquire()

    def _compute(self) -> None:
        try:
            self._value = self._fn(*self._args)
        except BaseException as e:  # handed to the waiting thread, which raises it
            self._error = e

    def result(self) -> Any:
        """The check's return value (or its exception), once it has finished."""
        self._done.acquire()  # released by the background thread once the check has finished
        self._done.release()  # and left released, so that result() can be asked again
        if self._error is not None:
            raise self._error
        return self._value


class BackgroundChecker:
    """A single daemon thread running one ``Check`` at a time, restarted lazily after a fork."""

    def __init__(self) -> None:
        self._reset()
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self._jobs: queue.SimpleQueue[Check] = queue.SimpleQueue()
        self._idle = threading.Lock()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()

    def start(self, fn: Callable[..., Any], *args: Any) -> Check | None:
        """Run ``fn(*args)`` on the background thread, or return None when it is busy with another check, or
        cannot run one (the interpreter is shutting down): then the caller checks the batch itself."""
        if sys.is_finalizing() or not self._idle.acquire(blocking=False):
            return None
        try:
            thread = self._thread
            if thread is None or not thread.is_alive():
                self._start_thread()
            check = Check(fn, args)
            self._jobs.put(check)
        except RuntimeError:  # "can't create new thread at interpreter shutdown"
            self._idle.release()
            return None
        except BaseException:
            self._idle.release()
            raise
        return check

    def _start_thread(self) -> None:
        with self._start_lock:
            if self._thread is None or not self._thread.is_alive():
                thread = threading.Thread(target=self._serve, args=(self._jobs,), name="kafkalog-check", daemon=True)
                thread.start()
                self._thread = thread

    def _serve(self, jobs: queue.SimpleQueue[Check]) -> None:
        while True:
            check = jobs.get()
            check._compute()
            self._idle.release()  # free for the next caller before this one wakes
            check._done.release()


checker = BackgroundChecker()
