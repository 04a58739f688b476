"""The storage's file operations, behind one small layer so that I/O faults can be injected.

Every read, write, fsync and truncation of a segment's ``.log`` (FileRecords), every read of a transaction
index, every index flush, every checkpoint write and every producer-state snapshot write goes through
``file_io()``: by default ``OsFileIO``, which calls ``os.*``. Installing a
``FaultInjectingFileIO`` (``with injected(FaultInjectingFileIO(...)):``) makes the Nth matching call raise
``OSError`` (ENOSPC, EIO, EFBIG, ...) the way a full or failing disk does, optionally after writing part of
the data (a torn write). The storage sees exactly what it would see from the kernel; nothing is patched.
"""

from __future__ import annotations

import errno as _errno
import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Protocol, TypeAlias

if TYPE_CHECKING:
    from typing_extensions import Buffer

PathArg: TypeAlias = "str | os.PathLike[str]"  # a file's name, only used to match faults and in messages


class Flushable(Protocol):
    """A memory map (mmap.mmap, or an index's mapping) whose dirty pages ``flush()`` writes back."""

    def flush(self) -> object: ...


WRITE = "write"  # pwrite / pwritev of a segment's .log, checkpoint and producer snapshot file contents
FSYNC = "fsync"  # fsync of a .log, a checkpoint or a producer snapshot, msync of an index
TRUNCATE = "truncate"  # ftruncate of a .log
READ = "read"  # pread of a segment's .log or a transaction index
OPS = (WRITE, FSYNC, TRUNCATE, READ)

ERRNOS = {"ENOSPC": _errno.ENOSPC, "EIO": _errno.EIO, "EFBIG": _errno.EFBIG, "EDQUOT": _errno.EDQUOT}


class OsFileIO:
    """The real thing: each operation is one ``os`` call (``path`` only names the file for fault matching)."""

    def pread(self, fd: int, size: int, offset: int, path: PathArg) -> bytes:
        return os.pread(fd, size, offset)

    def pwrite(self, fd: int, data: Buffer, offset: int, path: PathArg) -> int:
        return os.pwrite(fd, data, offset)

    def pwritev(self, fd: int, buffers: Sequence[Buffer], offset: int, path: PathArg) -> int:
        return os.pwritev(fd, buffers, offset)

    def fsync(self, fd: int, path: PathArg) -> None:
        os.fsync(fd)

    def msync(self, mapping: Flushable, path: PathArg) -> None:
        mapping.flush()

    def ftruncate(self, fd: int, length: int, path: PathArg) -> None:
        os.ftruncate(fd, length)


class FaultInjectingFileIO(OsFileIO):
    """Raise ``OSError(errno)`` on the ``nth`` call (1-based) of ``op`` on a path containing ``path_contains``.

    ``sticky`` keeps failing every later matching call (a disk that stays full); ``torn`` makes a failing
    write first write half its bytes (what a write that runs out of space mid-way leaves behind).
    ``then_fail`` names operations that fail on every call once the first fault was raised (e.g.
    ``("truncate",)``: the disk dies, so the rollback of the torn write fails too).
    ``injected`` counts the faults raised; ``calls`` the matching calls seen.
    """

    def __init__(
        self,
        op: str,
        err: int | str = "EIO",
        *,
        nth: int = 1,
        path_contains: str | None = None,
        suffix: str | None = None,
        sticky: bool = False,
        torn: bool = False,
        then_fail: tuple[str, ...] = (),
    ) -> None:
        if op not in OPS:
            raise ValueError(f"Unknown file operation {op!r}: use one of {', '.join(OPS)}")
        self.op = op
        self.errno = ERRNOS[err] if isinstance(err, str) else int(err)
        self.nth = nth
        self.path_contains = path_contains
        self.suffix = suffix
        self.sticky = sticky
        self.torn = torn
        self.then_fail = tuple(then_fail)
        self.calls = 0
        self.injected = 0
        self._lock = threading.Lock()

    def _should_fail(self, op: str, path: PathArg) -> bool:
        if self.injected and op in self.then_fail:
            self.injected += 1
            return True
        if op != self.op:
            return False
        name = str(path)
        if self.path_contains is not None and self.path_contains not in name:
            return False
        if self.suffix is not None and not name.endswith(self.suffix):
            return False
        with self._lock:
            self.calls += 1
            fail = self.calls == self.nth or (self.sticky and self.calls > self.nth)
            if fail:
                self.injected += 1
            return fail

    def _error(self, path: PathArg) -> OSError:
        return OSError(self.errno, os.strerror(self.errno), str(path))

    def pread(self, fd: int, size: int, offset: int, path: PathArg) -> bytes:
        if self._should_fail(READ, path):
            raise self._error(path)
        return os.pread(fd, size, offset)

    def pwrite(self, fd: int, data: Buffer, offset: int, path: PathArg) -> int:
        if self._should_fail(WRITE, path):
            view = memoryview(data)
            if self.torn and len(view) > 1:
                os.pwrite(fd, view[: len(view) // 2], offset)
            raise self._error(path)
        return os.pwrite(fd, data, offset)

    def pwritev(self, fd: int, buffers: Sequence[Buffer], offset: int, path: PathArg) -> int:
        if self._should_fail(WRITE, path):
            if self.torn:
                joined = b"".join(buffers)
                if len(joined) > 1:
                    os.pwrite(fd, joined[: len(joined) // 2], offset)
            raise self._error(path)
        return os.pwritev(fd, buffers, offset)

    def fsync(self, fd: int, path: PathArg) -> None:
        if self._should_fail(FSYNC, path):
            raise self._error(path)
        os.fsync(fd)

    def msync(self, mapping: Flushable, path: PathArg) -> None:
        if self._should_fail(FSYNC, path):
            raise self._error(path)
        mapping.flush()

    def ftruncate(self, fd: int, length: int, path: PathArg) -> None:
        if self._should_fail(TRUNCATE, path):
            raise self._error(path)
        os.ftruncate(fd, length)


DEFAULT_FILE_IO = OsFileIO()
_current: OsFileIO = DEFAULT_FILE_IO


def file_io() -> OsFileIO:
    """The file-operations layer in use (process-wide)."""
    return _current


def set_file_io(io: OsFileIO | None) -> OsFileIO:
    """Install ``io`` (None: the default) process-wide; return the one it replaces."""
    global _current
    previous = _current
    _current = io if io is not None else DEFAULT_FILE_IO
    return previous


@contextmanager
def injected(io: OsFileIO) -> Iterator[OsFileIO]:
    """``with injected(FaultInjectingFileIO("write", "ENOSPC")):`` — the storage uses ``io`` inside the block."""
    previous = set_file_io(io)
    try:
        yield io
    finally:
        set_file_io(previous)
