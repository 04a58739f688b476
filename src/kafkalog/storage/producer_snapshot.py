"""Producer snapshot files (``<offset>.snapshot``): their names, their bytes, and writing them durably.

The layout is that of Kafka's ``ProducerSnapshot.json`` version 1 (spec 4.2), read and written as
ProducerStateManager.readSnapshot/writeSnapshot do::

    int16 version (= 1) | uint32 crc32c(bytes[6:]) | int32 count | count x 46-byte entries
    entry = int64 producerId, int16 epoch, int32 lastSequence, int64 lastOffset, int32 offsetDelta,
            int64 timestamp, int32 coordinatorEpoch, int64 currentTxnFirstOffset (-1 = none)

Nothing here knows the producer state manager (``storage/producer_state.py``), which decides when a snapshot
is taken, loaded or deleted.
"""

from __future__ import annotations

import contextlib
import os
import struct
from collections.abc import Iterable
from pathlib import Path

from ..errors import CorruptSnapshotError
from ..layout import SNAPSHOT_SUFFIX, segment_file
from ..record.checksums import crc32c
from .fileio import file_io
from .producer_entry import BatchMetadata, ProducerStateEntry, metadata_deque

PRODUCER_SNAPSHOT_VERSION = 1
VERSION_OFFSET = 0
CRC_OFFSET = 2
PRODUCER_ENTRIES_OFFSET = 6
_HEADER = struct.Struct(">hIi")  # version, crc, entry count
_ENTRY = struct.Struct(">qhiqiqiq")
SNAPSHOT_HEADER_SIZE = _HEADER.size  # 10
SNAPSHOT_ENTRY_SIZE = _ENTRY.size  # 46
assert SNAPSHOT_HEADER_SIZE == 10 and SNAPSHOT_ENTRY_SIZE == 46


def snapshot_path(directory: str | os.PathLike[str], offset: int) -> Path:
    """``<dir>/<20-digit offset>.snapshot`` (LogFileUtils.producerSnapshotFile)."""
    return segment_file(directory, offset, SNAPSHOT_SUFFIX)


def _offset_from_name(name: str) -> int | None:
    stem = name.split(".", 1)[0]
    return int(stem) if stem.isdigit() else None


def list_snapshots(directory: str | os.PathLike[str]) -> list[tuple[int, Path]]:
    """Every regular ``*.snapshot`` file in ``directory`` as (offset, path), sorted by offset.

    Kafka would fail on a ``.snapshot`` name whose prefix is not a number; those are skipped here.
    """
    directory = Path(directory)
    found = []
    try:
        with os.scandir(directory) as entries:  # one listing, no stat per file (the entries know their type)
            for entry in entries:
                if not entry.name.endswith(SNAPSHOT_SUFFIX) or not entry.is_file():
                    continue
                offset = _offset_from_name(entry.name)
                if offset is not None:
                    found.append((offset, directory / entry.name))
    except (FileNotFoundError, NotADirectoryError):
        return []
    found.sort()
    return found


def encode_snapshot(entries: Iterable[ProducerStateEntry]) -> bytes:
    """The bytes of a version-1 snapshot holding ``entries`` (in the order given)."""
    body = bytearray()
    count = 0
    for entry in entries:
        body += _ENTRY.pack(
            entry.producer_id,
            entry.producer_epoch,
            entry.last_seq,
            entry.last_data_offset,
            entry.last_offset_delta,
            entry.last_timestamp,
            entry.coordinator_epoch,
            -1 if entry.current_txn_first_offset is None else entry.current_txn_first_offset,
        )
        count += 1
    tail = struct.pack(">i", count) + bytes(body)
    return struct.pack(">hI", PRODUCER_SNAPSHOT_VERSION, crc32c(tail)) + tail


def decode_snapshot(data: bytes | bytearray | memoryview, path: str | None = None) -> list[ProducerStateEntry]:
    """Parse snapshot bytes as ProducerStateManager.readSnapshot does: schema, then version, then CRC.

    Bytes after the last entry are ignored (as Kafka's schema reader does) but covered by the CRC.
    """
    data = bytes(data)
    size = len(data)
    if size < SNAPSHOT_HEADER_SIZE:
        raise CorruptSnapshotError(
            f"Snapshot failed schema validation: {size} bytes is shorter than the {SNAPSHOT_HEADER_SIZE}-byte header",
            path=path,
        )
    version, crc, count = _HEADER.unpack_from(data, 0)
    remaining = size - SNAPSHOT_HEADER_SIZE
    if count < 0:
        raise CorruptSnapshotError(
            f"Snapshot failed schema validation: Error reading field 'producer_entries': "
            f"Array size {count} cannot be negative",
            path=path,
        )
    if count * SNAPSHOT_ENTRY_SIZE > remaining:
        raise CorruptSnapshotError(
            f"Snapshot failed schema validation: Error reading field 'producer_entries': {count} entries need "
            f"{count * SNAPSHOT_ENTRY_SIZE} bytes, only {remaining} bytes available",
            path=path,
        )
    if version != PRODUCER_SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"Snapshot contained an unknown file version {version}", path=path)
    computed = crc32c(data[PRODUCER_ENTRIES_OFFSET:])
    if crc != computed:
        raise CorruptSnapshotError(
            f"Snapshot is corrupt (CRC is no longer valid). Stored crc: {crc}. Computed crc: {computed}", path=path
        )
    entries = []
    for producer_id, epoch, seq, offset, offset_delta, timestamp, coordinator_epoch, txn_first in _ENTRY.iter_unpack(
        data[SNAPSHOT_HEADER_SIZE : SNAPSHOT_HEADER_SIZE + count * SNAPSHOT_ENTRY_SIZE]
    ):
        batches = [BatchMetadata(seq, offset, offset_delta, timestamp)] if offset >= 0 else []
        entries.append(
            ProducerStateEntry(
                producer_id,
                epoch,
                coordinator_epoch,
                timestamp,
                txn_first if txn_first >= 0 else None,
                metadata_deque(batches),
            )
        )
    return entries


def read_snapshot(path: str | os.PathLike[str]) -> list[ProducerStateEntry]:
    """Read a producer snapshot file; CorruptSnapshotError (naming the file) when it cannot be trusted."""
    path = Path(path)
    return decode_snapshot(path.read_bytes(), str(path))


def write_snapshot(path: str | os.PathLike[str], entries: Iterable[ProducerStateEntry], sync: bool = True) -> None:
    """Write a producer snapshot file (in place, as Kafka's writeSnapshot does); fsync it when ``sync``.

    The write and the fsync go through the file-operations layer. When either fails, the partial file is
    removed (best effort) and the OSError is raised for the log to take its dir offline; a partial file
    that could not be removed is never loaded either: its schema or CRC check fails, and loading deletes
    it and rebuilds the state from the log (ProducerStateManager.loadFromSnapshot on CorruptSnapshotException).
    """
    data = memoryview(encode_snapshot(entries))
    io = file_io()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        written = 0
        while written < len(data):
            written += io.pwrite(fd, data[written:], written, path)
        if sync:
            io.fsync(fd, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise
    finally:
        os.close(fd)


def sync_snapshot_if_exists(path: str | os.PathLike[str]) -> None:
    """fsync a snapshot written without sync, unless it is gone (Kafka's Utils.flushFileIfExists)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        file_io().fsync(fd, path)
    finally:
        os.close(fd)
