"""A whole file as bytes in memory for the indexes: a shared mapping that keeps no descriptor open
(``FileMapping``, as Java's MappedByteBuffer), or a copy read with ``pread`` for read-only tools (``FileCopy``)."""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import sys
from pathlib import Path

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int64]
_libc.munmap.restype = ctypes.c_int
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.msync.restype = ctypes.c_int
_libc.msync.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_libc.madvise.restype = ctypes.c_int
_libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_MADV_RANDOM = getattr(mmap, "MADV_RANDOM", None)
_MAP_FAILED = ctypes.c_void_p(-1).value
_MS_SYNC = 4 if sys.platform.startswith("linux") else 0x10  # Linux; the BSDs and macOS use 0x10


def _os_error(path: Path, what: str) -> OSError:
    code = ctypes.get_errno()
    return OSError(code, f"{what}: {os.strerror(code)}", str(path))


class FileMapping:
    """A shared mapping of a whole file that, like Java's MappedByteBuffer, keeps no file descriptor open.

    CPython's ``mmap.mmap`` (before 3.13's ``trackfd=False``) dups the descriptor and holds the copy for as long as
    the mapping lives, so every mapped index cost an open file besides its segment's ``.log``: three descriptors
    per segment instead of Kafka's one, and a broker with 10,000 partitions ran out of descriptors. Here the file
    is mapped with libc's ``mmap`` and the caller closes its descriptor at once. ``view`` is a byte memoryview of
    the mapping (read-only unless ``writable``); ``close`` releases it before unmapping, so a use after close
    raises ValueError instead of touching unmapped memory.

    The mapping is advised ``MADV_RANDOM``: a page fault then reads that one page, not the kernel's read-ahead
    window. An index is preallocated as a sparse file (``segment.index.bytes``, 10 MiB by default) and searched
    by bisection, so read-ahead only fills the page cache with zeroed pages of the file's hole: with a read-ahead
    of 8 MiB (this machine's disk), the first touch of a preallocated index's page cost about 1.6 ms instead of
    0.03 ms, and the truncation that trims the index afterwards had to drop those pages again. Recovering a
    partition after a crash touches such pages a few times (issue 23: 15 ms per one-record partition).
    """

    def __init__(self, fd: int, length: int, writable: bool, path: Path) -> None:
        prot = mmap.PROT_READ | (mmap.PROT_WRITE if writable else 0)
        address = _libc.mmap(None, length, prot, mmap.MAP_SHARED, fd, 0)
        if address is None or address == _MAP_FAILED:
            raise _os_error(path, "mmap failed")
        if _MADV_RANDOM is not None:
            _libc.madvise(address, length, _MADV_RANDOM)  # advice only: a refusal changes nothing but speed
        self._address: int | None = address
        self._length = length
        self._path = path
        view = memoryview((ctypes.c_char * length).from_address(address)).cast("B")
        self.view = view if writable else view.toreadonly()

    def __len__(self) -> int:
        return self._length

    def flush(self) -> None:
        """msync(MS_SYNC) the whole mapping."""
        if self._address is not None and _libc.msync(self._address, self._length, _MS_SYNC) != 0:
            raise _os_error(self._path, "msync failed")

    def close(self) -> None:
        """Release the view and unmap (idempotent)."""
        if self._address is not None:
            self.view.release()
            _libc.munmap(self._address, self._length)
            self._address = None

    @property
    def closed(self) -> bool:
        return self._address is None

    def __del__(self) -> None:  # an index dropped without close() must not leave its mapping behind
        with contextlib.suppress(Exception):  # at interpreter exit the module's globals may be gone
            self.close()


class FileCopy:
    """The bytes of a whole file read with ``pread``, in the shape of a read-only ``FileMapping``.

    A read-only index (the tools' ``verify``, ``dump`` and ``recover --dry-run``) reads its file instead of
    mapping it: a memory map of a file another process truncates, or of a preallocated (sparse) index on a full
    tmpfs, raises SIGBUS on access, which kills the process with no message; a read returns what is there.
    The copy is taken once, at open, so a reader sees the file as it was then."""

    def __init__(self, fd: int, path: Path) -> None:
        size = os.fstat(fd).st_size
        parts, position = [], 0
        while position < size:
            chunk = os.pread(fd, min(size - position, 1 << 24), position)
            if not chunk:  # the file shrank under us: keep what was there
                break
            parts.append(chunk)
            position += len(chunk)
        self._path = path
        self.view: memoryview | None = memoryview(b"".join(parts)).toreadonly()

    def __len__(self) -> int:
        return len(self.view) if self.view is not None else 0

    def flush(self) -> None:
        """Nothing to write back: a copy is never written."""

    def close(self) -> None:
        if self.view is not None:
            self.view.release()
            self.view = None

    @property
    def closed(self) -> bool:
        return self.view is None
