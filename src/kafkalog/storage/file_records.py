"""A segment's ``.log`` file (Kafka's FileRecords): a logical size, positional appends, and batch scans.

The logical size can be smaller than the file when the file was preallocated (``preallocate``);
``trim`` cuts the file to it. Reads return ``RecordsSlice`` objects that read no bytes until asked,
like Kafka's FileRecords.slice.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import CorruptRecordError, KafkaStorageError
from ..layout import INT32_MAX
from ..record.batch import HEADER_SIZE_UP_TO_MAGIC, MAGIC_OFFSET, RecordBatch
from ..record.legacy import LegacyBatch
from ..record.scan import AnyBatch, batch_size_at, iter_batches
from ..record.types import BytesLike, Record
from .fileio import file_io

SCAN_CHUNK = 1 << 20  # bytes read at a time while walking batches
_JOIN_BELOW = 64 * 1024  # appends smaller than this are joined and written with one pwrite
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _libc_sync_file_range() -> Any:
    """libc's sync_file_range (Linux), or None."""
    if not sys.platform.startswith("linux"):
        return None
    function = getattr(ctypes.CDLL(None, use_errno=True), "sync_file_range", None)
    if function is not None:
        function.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
        function.restype = ctypes.c_int
    return function


_sync_file_range = _libc_sync_file_range()
_SYNC_FILE_RANGE_WRITE = 2  # start writeback of the range's dirty pages, do not wait


_HEADER_READ = 61  # a v2 header; legacy messages need only the first 17 bytes of it


@dataclass(frozen=True)
class BatchHeader:
    """What a batch header says, read without the records: position, size, offsets, max timestamp, and (v2)
    the attributes and producer id (what a transaction scan needs; a legacy message has 0 and -1)."""

    position: int
    size: int
    magic: int
    base_offset: int
    last_offset: int
    max_timestamp: int
    attributes: int = 0
    producer_id: int = -1

    @classmethod
    def parse(cls, head: bytes, position: int, size: int) -> BatchHeader:
        offset = int.from_bytes(head[0:8], "big", signed=True)
        magic = head[16]
        if magic >= 2 and len(head) >= 43:
            last = offset + int.from_bytes(head[23:27], "big", signed=True)
            max_ts = int.from_bytes(head[35:43], "big", signed=True)
            attributes = int.from_bytes(head[21:23], "big", signed=True)
            producer_id = int.from_bytes(head[43:51], "big", signed=True) if len(head) >= 51 else -1
            return cls(position, size, magic, offset, last, max_ts, attributes, producer_id)
        # A legacy message: its offset is its last offset; the timestamp (v1) follows the attributes.
        max_ts = int.from_bytes(head[18:26], "big", signed=True) if magic == 1 and len(head) >= 26 else -1
        return cls(position, size, magic, offset, offset, max_ts)


class FileRecords:
    """The records file of one segment.

    Invariants: the logical ``size`` never exceeds the file's length (a preallocated file is longer) nor
    Int32.MAX; bytes below it are whole batches once an append returns, and a reader never sees bytes past it.
    An append that fails leaves the size as it was: its bytes are cut off again before anyone can read them.
    """

    def __init__(self, path: Path, fd: int, size: int, mutable: bool) -> None:
        self.path = Path(path)
        self._fd = fd
        self._size = size
        self.mutable = mutable
        self._lock = threading.RLock()

    @classmethod
    def open(
        cls,
        path: Path,
        *,
        file_already_exists: bool = False,
        init_file_size: int = 0,
        preallocate: bool = False,
        mutable: bool = True,
    ) -> FileRecords:
        """Open or create the file; a new preallocated file is sized to ``init_file_size`` with logical size 0."""
        path = Path(path)
        flags = os.O_RDWR | os.O_CREAT if mutable else os.O_RDONLY
        try:
            fd = os.open(path, flags, 0o644)
        except OSError as e:
            raise KafkaStorageError(f"Cannot open {path}: {e.strerror}", path=str(path)) from e
        length = os.fstat(fd).st_size
        if preallocate and not file_already_exists and length == 0 and init_file_size > 0:
            os.ftruncate(fd, init_file_size)
            length = 0
        if length > INT32_MAX:
            os.close(fd)
            raise KafkaStorageError(
                f"The size of segment {path} ({length}) is larger than the maximum allowed", path=str(path)
            )
        return cls(path, fd, length, mutable)

    # ----- size and bytes ------------------------------------------------------------------
    @property
    def size(self) -> int:
        return self._size

    def file_length(self) -> int:
        return os.fstat(self._fd).st_size

    def append(
        self,
        data: BytesLike | list[BytesLike],
        size: int | None = None,
    ) -> int:
        """Write ``data`` (a buffer, or a list of buffers written in order) at the logical end; return its size.

        The logical size moves only once every byte is written, so readers never see part of an append; if
        the write fails, what it wrote is cut off again and the error propagates."""
        parts = data if isinstance(data, list) else [data]
        n = sum(map(len, parts)) if size is None else size  # bytes or byte memoryviews: len counts bytes
        if len(parts) > 1 and n < _JOIN_BELOW:
            parts = [b"".join(parts)]  # one small copy is cheaper than a vectored write
        with self._lock:
            if self._size > INT32_MAX - n:
                raise KafkaStorageError(
                    f"Append of size {n} bytes is too large for segment with current file position at {self._size}",
                    path=str(self.path),
                )
            io = file_io()
            try:
                if len(parts) == 1:
                    written = io.pwrite(self._fd, parts[0], self._size, self.path)
                else:
                    written = io.pwritev(self._fd, parts, self._size, self.path)
                if written < n:  # a short write: finish the rest from where it stopped
                    rest = memoryview(b"".join(parts))[written:]
                    while rest:
                        step = io.pwrite(self._fd, rest, self._size + written, self.path)
                        written += step
                        rest = rest[step:]
            except OSError as e:
                raise self._failed_append(e, n) from e
            except BaseException:
                self._cut_uncommitted(n)
                raise
            self._size += n
            return n

    def _cut_uncommitted(self, n: int) -> None:
        """Cut off bytes written past the logical size by an append that was then refused."""
        try:
            self.trim()
        except OSError as e:
            raise self._failed_append(e, n) from e

    def _failed_append(self, error: OSError, n: int) -> KafkaStorageError:
        """An append that hit an I/O error: cut the file back to the logical size so that no partial batch
        stays behind, and say whether that worked (``rolled_back``) on the returned KafkaStorageError."""
        rolled_back = True
        try:
            self.trim()
        except OSError:
            rolled_back = False
        exc = KafkaStorageError(
            f"Error while appending {n} bytes to {self.path} in dir {self.path.parent.parent}: "
            f"{error.strerror or error}",
            path=str(self.path),
        )
        exc.io_error = error
        exc.rolled_back = rolled_back
        return exc

    def read(self, position: int, size: int) -> bytes:
        """``size`` bytes from ``position`` (fewer only at the end of the file).

        Reads are ``pread`` calls through the file-operations layer (so read faults can be injected); an
        I/O error comes back as OSError naming the file and the position, for the log to turn into
        KafkaStorageError and take its dir offline (Kafka's LocalLog.read in maybeHandleIOException).
        """
        size = max(0, min(size, self._size - position))
        if self._fd < 0:
            self._closed_error()
        try:
            return self._pread_fully(position, size)
        except OSError as e:
            raise _read_error(e, self.path, position, size) from e

    def _pread_fully(self, position: int, size: int) -> bytes:
        """``size`` bytes from ``position`` by as many pread calls as it takes (fewer at the end of the file)."""
        io = file_io()
        parts = []
        while size > 0:
            chunk = io.pread(self._fd, size, position, self.path)
            if not chunk:
                break
            parts.append(chunk)
            position += len(chunk)
            size -= len(chunk)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def _closed_error(self) -> None:
        """A read of a closed file (its segment was deleted or its log closed): not a disk failure."""
        raise KafkaStorageError(f"The segment file {self.path} is closed", path=str(self.path))

    def slice(self, position: int, size: int) -> RecordsSlice:
        """A lazy view of ``[position, position + size)``, clipped to the logical end."""
        end = min(self._size, position + size)
        return RecordsSlice(self, position, max(0, end - position))

    # ----- scanning ------------------------------------------------------------------------
    def batches(self, start: int = 0, end: int | None = None) -> Iterator[tuple[int, AnyBatch]]:
        """Yield (file position, batch view) from ``start``, with Kafka's scan rules; a partial tail ends it."""
        end = self._size if end is None else min(end, self._size)
        pos = start
        while end - pos >= HEADER_SIZE_UP_TO_MAGIC:
            buf = memoryview(self.read(pos, min(SCAN_CHUNK, end - pos)))
            offset_in_buf = 0
            while len(buf) - offset_in_buf >= HEADER_SIZE_UP_TO_MAGIC:
                try:
                    total = batch_size_at(buf, offset_in_buf, len(buf))
                except CorruptRecordError as e:
                    raise CorruptRecordError(
                        e.reason, position=pos + offset_in_buf, offset=e.offset, path=str(self.path)
                    ) from None
                if total is None:  # runs past this chunk
                    break
                magic = buf[offset_in_buf + MAGIC_OFFSET]
                batch = RecordBatch(buf, offset_in_buf) if magic == 2 else LegacyBatch(buf, offset_in_buf)
                yield pos + offset_in_buf, batch
                offset_in_buf += total
            if offset_in_buf == 0:
                # A batch larger than the chunk: read it whole, or stop at a partial tail.
                head = self.read(pos, 12)
                total = 12 + int.from_bytes(head[8:12], "big", signed=True)
                if pos + total > end:
                    return
                big = memoryview(self.read(pos, total))
                for _, batch in zip(range(1), iter_batches(big), strict=False):
                    yield pos, batch
                offset_in_buf = total
            pos += offset_in_buf

    def batch_headers(self, start: int = 0, end: int | None = None) -> Iterator[BatchHeader]:
        """Walk batch headers only (one small read per batch), with the scan rules of ``batches``."""
        end = self._size if end is None else min(end, self._size)
        pos = start
        if self._fd < 0 and end - pos >= HEADER_SIZE_UP_TO_MAGIC:
            self._closed_error()
        pread = file_io().pread
        while end - pos >= HEADER_SIZE_UP_TO_MAGIC:
            try:
                head = pread(self._fd, _HEADER_READ, pos, self.path)
            except OSError as e:
                raise _read_error(e, self.path, pos, _HEADER_READ) from e
            try:
                total = batch_size_at(head, 0, end - pos)
            except CorruptRecordError as e:
                raise CorruptRecordError(e.reason, position=pos, offset=e.offset, path=str(self.path)) from None
            if total is None:
                return
            yield BatchHeader.parse(head, pos, total)
            pos += total

    def search_for_offset_with_size(self, target_offset: int, starting_position: int) -> tuple[int, int, int] | None:
        """(last offset, position, size) of the first batch at or after ``starting_position`` whose last
        offset is >= ``target_offset`` (Kafka's searchForOffsetWithSize, reading headers only)."""
        for header in self.batch_headers(starting_position):
            if header.last_offset >= target_offset:
                return header.last_offset, header.position, header.size
        return None

    def read_batch(self, header: BatchHeader) -> AnyBatch:
        """The full batch view for a header found by ``batch_headers``."""
        (batch,) = iter_batches(self.read(header.position, header.size))
        return batch

    # ----- lifecycle -----------------------------------------------------------------------
    def truncate_to(self, target_size: int) -> int:
        """Cut the file to ``target_size`` bytes; return how many were removed."""
        with self._lock:
            if target_size > self._size or target_size < 0:
                raise KafkaStorageError(
                    f"Attempt to truncate log segment {self.path} to {target_size} bytes failed, "
                    f"size of this log segment is {self._size} bytes.",
                    path=str(self.path),
                )
            removed = self._size - target_size
            if target_size < self.file_length():
                file_io().ftruncate(self._fd, target_size, self.path)
            self._size = target_size
            return removed

    def trim(self) -> None:
        """Cut a preallocated file down to its logical size."""
        with self._lock:
            if self.file_length() > self._size:
                file_io().ftruncate(self._fd, self._size, self.path)

    def flush(self) -> None:
        file_io().fsync(self._fd, self.path)

    def start_writeback(self, start: int, end: int) -> None:
        """Have the kernel start writing the pages holding bytes ``start`` to ``end`` to disk, without waiting
        (Linux's sync_file_range; elsewhere nothing), so that a flush later has less to wait for. The last page, which
        the next append writes into, is left alone: writing into a page under writeback can wait for it."""
        first = start - start % _PAGE
        last = end - end % _PAGE
        fd = self._fd
        if _sync_file_range is None or fd < 0 or last <= first:
            return
        _sync_file_range(fd, first, last - first, _SYNC_FILE_RANGE_WRITE)  # advice only: a failure changes nothing

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                if self.mutable:
                    self.trim()
                os.close(self._fd)
                self._fd = -1

    def read_region(self, position: int, size: int) -> bytes | None:
        """``size`` bytes from ``position`` read under the lock, so that a close cannot pull the descriptor from
        under the read (fewer bytes only if the file was truncated); None once closed. For small regions: it
        holds appends to this file back while it reads."""
        with self._lock:
            return None if self._fd < 0 else self._pread_fully(position, size)

    def duplicate_fd(self) -> int | None:
        """A descriptor of its own on this file (a dup, taken under the lock so it never races a close), for a
        send that may outlive this object's descriptor (the broker's zero-copy fetch answers); None once closed."""
        with self._lock:
            return os.dup(self._fd) if self._fd >= 0 else None

    def close_handlers(self) -> None:
        """Close the file without trimming it."""
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

    def rename_to(self, new_path: Path) -> None:
        os.rename(self.path, new_path)
        self.path = new_path if isinstance(new_path, Path) else Path(new_path)  # a Path is immutable: no copy

    def delete_if_exists(self) -> bool:
        self.close_handlers()
        try:
            os.unlink(self.path)
            return True
        except FileNotFoundError:
            return False

    def last_modified_ms(self) -> int:
        return int(os.stat(self.path).st_mtime * 1000)

    def set_last_modified_ms(self, ms: int) -> None:
        os.utime(self.path, ns=(ms * 1_000_000, ms * 1_000_000))

    def __repr__(self) -> str:
        return f"FileRecords({self.path}, size={self._size})"


@dataclass(frozen=True)
class RecordsSlice:
    """Bytes ``[position, position + size)`` of a segment file, read only when asked (FileRecords.slice)."""

    file: FileRecords | None
    position: int
    size: int

    @property
    def size_in_bytes(self) -> int:
        return self.size

    def tobytes(self) -> bytes:
        return b"" if self.file is None or self.size == 0 else self.file.read(self.position, self.size)

    def batches(self) -> Iterator[AnyBatch]:
        """The complete batches in the slice (a partial batch at its end is left out, as Kafka's reader does)."""
        return iter_batches(self.tobytes())

    def records(self) -> Iterator[Record]:
        for batch in self.batches():
            yield from batch


EMPTY_SLICE = RecordsSlice(None, 0, 0)


def _read_error(error: OSError, path: Path, position: int, size: int) -> OSError:
    """The OSError of a failed read, naming the file and the position (the kernel's names neither)."""
    return OSError(error.errno, f"{error.strerror or error} (reading {size} bytes at position {position})", str(path))
