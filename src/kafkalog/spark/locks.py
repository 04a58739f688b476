"""Who owns a log dir: the sink refuses a log dir a running LogManager or Kafka broker holds (its ``.lock``), and
its tasks take ``flock`` locks (``.kafkalog-write.lock``) on the partitions they append to and on the root
checkpoints they update, waiting up to ``max.block.ms``."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import time
from collections.abc import Iterable

from ..errors import (
    KafkaStorageError,
)
from ..layout import (
    LOCK_FILE,
)

log = logging.getLogger(__name__)

# ----- log dir ownership ------------------------------------------------------------------------------------


def _lock_holders(path: str) -> list[str]:
    """The processes holding a lock on ``path``, from /proc/locks (Linux; empty when unknown)."""
    try:
        st = os.stat(path)
        with open("/proc/locks", encoding="ascii", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    wanted = (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)
    holders: dict[int, str] = {}
    for line in lines:
        parts = line.split()
        if len(parts) < 6 or parts[1] == "->":  # '->' lines are waiters, not holders
            continue
        try:
            major, minor, inode = parts[5].split(":")
            where = (int(major, 16), int(minor, 16), int(inode))
            pid = int(parts[4])
        except ValueError:
            continue
        if where != wanted or pid in holders:
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
        except OSError:
            cmd = ""
        cmd = cmd if len(cmd) <= 160 else cmd[:157] + "..."
        holders[pid] = f"pid {pid} ({parts[1]} lock{', ' + cmd if cmd else ''})"
    return list(holders.values())


def _dir_in_use(log_dir: str) -> KafkaStorageError:
    path = os.path.join(log_dir, LOCK_FILE)
    holders = _lock_holders(path)
    who = "; ".join(holders) if holders else "another process"
    return KafkaStorageError(
        f"Log dir {os.path.abspath(log_dir)} is owned by a running LogManager or Kafka broker: its {LOCK_FILE} is "
        f"held by {who}. The kafkalog sink writes only log dirs that no LogManager holds; produce through "
        "that LogManager, or shut it down first.",
        path=log_dir,
    )


def _lock_shared(log_dir: str) -> int:
    """An fd holding a shared flock and a shared POSIX lock on ``<log_dir>/.lock``; KafkaStorageError if owned."""
    path = os.path.join(log_dir, LOCK_FILE)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        raise KafkaStorageError(f"Failed to open lock file {path}: {e}", path=log_dir) from e
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as e:
        os.close(fd)
        if e.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
            raise _dir_in_use(log_dir) from None
        raise KafkaStorageError(f"Failed to lock {path}: {e}", path=log_dir) from e
    return fd


def check_log_dirs_free(paths: Iterable[str]) -> None:
    """Fail (KafkaStorageError naming the dir and the holder) if a LogManager or broker holds a log dir."""
    for log_dir in paths:
        if not os.path.isdir(log_dir):
            raise KafkaStorageError(f"Log directory {log_dir} given in option 'path' does not exist", path=log_dir)
        os.close(_lock_shared(log_dir))


class DirLocks:
    """The shared ``.lock`` locks of the log dirs a task writes into, held until the task is done.

    POSIX locks belong to the process and go when any of its fds on the file closes, so each dir is opened
    once and kept.
    """

    def __init__(self) -> None:
        self._fds: dict[str, int] = {}

    def hold(self, log_dir: str) -> None:
        if log_dir not in self._fds:
            self._fds[log_dir] = _lock_shared(log_dir)

    def release(self) -> None:
        fds, self._fds = self._fds, {}
        for fd in fds.values():
            with contextlib.suppress(OSError):
                os.close(fd)


def flock_wait(fd: int, timeout_ms: int, what: str) -> None:
    """Take an exclusive flock on ``fd``, waiting up to ``timeout_ms``."""
    deadline = time.monotonic() + timeout_ms / 1000
    delay = 0.002
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise KafkaStorageError(
                    f"Timed out after {timeout_ms} ms waiting for the write lock of {what}: another writer holds "
                    "it (option 'max.block.ms')"
                ) from None
            time.sleep(delay)
            delay = min(delay * 2, 0.05)
