"""The log cleaner's numba kernels compiled in a child process, so that a broker never compiles them itself.

numba compiles a kernel at its first call in a process unless its on-disk cache (``cache=True``) already holds
it. The cleaner's kernels take over a minute to compile on a cold cache (77 s at load 13 on the shared 2 cores;
0.6 s for the same first clean once cached), holding the GIL for most of it, and a broker's event loop needs the
GIL for every request: a first clean stalled every client of ``kafkalog serve`` (issue 23). So before a process's
first clean, the cleaner thread runs ``python -m kafkalog.cleaner.warm`` and waits for it, which releases the
GIL: the child cleans a small log in a temp dir, compiling every kernel such a clean runs into the cache, and the
process's own first clean loads them from there. Should the child fail (a cache it cannot write, no interpreter),
the clean compiles them in process, as before: slower for the others, never wrong.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from ..clock import SYSTEM_TIME
from ..storage.log import Log
from .cleaner import Cleaner
from .offset_map import SkimpyOffsetMap
from .policy import LogToClean

log = logging.getLogger(__name__)

CHILD_TIMEOUT_S = 900.0  # a cold compile on a loaded machine; past this the clean compiles in process
_SAMPLE_CONFIG = {"cleanup.policy": "compact", "segment.bytes": "1024"}
_lock = threading.Lock()
_compiled = False  # this process has run (or given up on) the child: once per process


def compile_in_child(stop: threading.Event | None = None, timeout: float = CHILD_TIMEOUT_S) -> bool:
    """Run the child that fills numba's cache with the cleaner's kernels, once per process; whether it succeeded.
    Later calls (any thread) return at once; a call made while the child runs waits for it. ``stop`` (the
    cleaner's shutdown) ends the wait and the child at once, so a broker's shutdown never waits for a compile."""
    global _compiled
    with _lock:
        if _compiled:
            return True
        ok = _run_child(stop or threading.Event(), timeout)
        _compiled = ok or not (stop is not None and stop.is_set())  # a stopped child leaves it to the next try
        return ok


def child_command() -> list[str]:
    """The child: this interpreter running this module."""
    return [sys.executable, "-m", "kafkalog.cleaner.warm"]


def _run_child(stop: threading.Event, timeout: float) -> bool:
    package_root = str(Path(__file__).resolve().parents[2])  # the directory that holds this kafkalog
    env = dict(os.environ)
    env["PYTHONPATH"] = package_root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    command = child_command()
    with tempfile.TemporaryFile("w+") as errors:  # a file, not a pipe: a chatty child never blocks on it
        try:
            child = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=errors, text=True)
        except OSError as e:
            log.warning("Could not compile the log cleaner's kernels in a child process (%s); compiling them here", e)
            return False
        deadline = time.monotonic() + timeout
        while child.poll() is None:
            if stop.is_set() or time.monotonic() > deadline:
                child.kill()
                child.wait()
                if not stop.is_set():
                    log.warning("Compiling the log cleaner's kernels in a child process took over %.0f s", timeout)
                return False
            stop.wait(0.1)  # the wait releases the GIL: the event loop runs meanwhile
        errors.seek(0)
        error_text = errors.read()
    if child.returncode != 0:
        log.warning(
            "Compiling the log cleaner's kernels in a child process failed (exit %d: %s); compiling them here",
            child.returncode,
            error_text.strip()[-500:],
        )
        return False
    return True


def clean_sample_log(directory: Path) -> int:
    """Clean a small compacted log in ``directory`` (60 records of 5 keys over several segments), running every
    kernel of an ordinary clean; the number of records left (one per key below the active segment, and the
    active segment's)."""
    log_obj = Log.open(directory / "kafkalog-cleaner-warm-0", dict(_SAMPLE_CONFIG), SYSTEM_TIME)
    try:
        for i in range(60):
            log_obj.append([(b"key-%d" % (i % 5), b"value-%d" % i)])
        cleanable = LogToClean(None, log_obj, 0, log_obj.active_segment.base_offset)
        Cleaner(SkimpyOffsetMap(1 << 20, 0.9), SYSTEM_TIME).clean(cleanable)
        return sum(1 for _ in log_obj.records(0))
    finally:
        log_obj.close()


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="kafkalog-cleaner-warm-") as directory:
        clean_sample_log(Path(directory))
    return 0


if __name__ == "__main__":
    sys.exit(main())
