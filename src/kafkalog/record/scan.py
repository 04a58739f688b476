"""Walking a buffer or file of batches exactly as Kafka's FileLogInputStream / ByteBufferLogInputStream do.

Fewer than 17 bytes left, or a batch running past the end, stops the scan quietly (a partial tail).
A size field below 14 is corruption (that is how a zero-filled preallocated tail shows up), and so
is a magic outside 0..2.
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Iterator
from typing import TYPE_CHECKING

from ..errors import CorruptRecordError
from .batch import HEADER_SIZE_UP_TO_MAGIC, LOG_OVERHEAD, MAGIC_OFFSET, RecordBatch
from .legacy import RECORD_OVERHEAD_V0, LegacyBatch
from .types import BytesLike

if TYPE_CHECKING:
    from typing_extensions import Buffer

_PREFIX = struct.Struct(">qi")
AnyBatch = RecordBatch | LegacyBatch


def iter_batches(
    buffer: Buffer, start: int = 0, end: int | None = None, *, max_message_size: int | None = None
) -> Iterator[AnyBatch]:
    """Yield a view of each batch in ``buffer[start:end]``: RecordBatch for v2, LegacyBatch for v0/v1.

    ``max_message_size`` adds the in-memory reader's check (a size above it is corruption).
    """
    view = buffer if isinstance(buffer, memoryview) else memoryview(buffer)
    if view.ndim != 1 or view.itemsize != 1:
        view = view.cast("B")
    end = len(view) if end is None else min(end, len(view))
    pos = start
    while end - pos >= HEADER_SIZE_UP_TO_MAGIC:
        batch_size = batch_size_at(view, pos, end, max_message_size)
        if batch_size is None:
            return
        magic = view[pos + MAGIC_OFFSET]
        if magic == 2:
            yield RecordBatch(view, pos)
        else:
            yield LegacyBatch(view, pos)
        pos += batch_size


def batch_positions(buffer: Buffer, start: int = 0, end: int | None = None) -> Iterator[tuple[int, int, int]]:
    """Yield (position, size, magic) of each complete batch, applying the same rules as iter_batches."""
    view = buffer if isinstance(buffer, memoryview) else memoryview(buffer)
    end = len(view) if end is None else min(end, len(view))
    pos = start
    while end - pos >= HEADER_SIZE_UP_TO_MAGIC:
        batch_size = batch_size_at(view, pos, end)
        if batch_size is None:
            return
        yield pos, batch_size, view[pos + MAGIC_OFFSET]
        pos += batch_size


def batch_size_at(view: BytesLike, pos: int, end: int, max_message_size: int | None = None) -> int | None:
    """Total size of the batch at ``pos``, None for a partial tail; raise on corruption."""
    offset: int
    size: int
    offset, size = _PREFIX.unpack_from(view, pos)
    if size < RECORD_OVERHEAD_V0:
        raise CorruptRecordError(
            f"Record size {size} is less than the minimum record overhead ({RECORD_OVERHEAD_V0})",
            position=pos,
        )
    if max_message_size is not None and size > max_message_size:
        raise CorruptRecordError(
            f"Record size {size} exceeds the largest allowable message size ({max_message_size}).",
            position=pos,
        )
    if size > end - pos - LOG_OVERHEAD:
        return None
    magic = view[pos + MAGIC_OFFSET]
    if magic > 2:
        raise CorruptRecordError(f"Invalid magic found in record: {magic}", position=pos, offset=offset)
    return LOG_OVERHEAD + size


def map_file(path: str | os.PathLike[str]) -> memoryview:
    """Memory-map a file read-only and return a byte view of it (empty for an empty file)."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            return memoryview(b"")
        return memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))


def iter_file_batches(path: str | os.PathLike[str], *, start: int = 0) -> Iterator[AnyBatch]:
    """Scan a segment file through a read-only memory map; a view keeps the map alive."""
    try:
        yield from iter_batches(map_file(path), start)
    except CorruptRecordError as e:
        raise e.located(path=os.fspath(path)) from None
