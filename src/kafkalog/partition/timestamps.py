"""Offsets by timestamp from a partition's files: what ListOffsets answers (``offset_for_timestamp``), and
a lower bound for a pushed-down timestamp filter (``first_offset_at_or_after``).

Each segment's ``.timeindex`` (read with ``pread``) gives the position to scan from, so the log is never
read whole."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa

from ..layout import LOG_SUFFIX, TIME_INDEX_SUFFIX
from .read_path import decode_run
from .segment_files import (
    complete_headers,
    open_segment,
    read_used_entries,
    segment_bases,
    segment_path,
    start_position,
)

# ListOffsets' special timestamps (ListOffsetsRequest): earliest, latest, the record with the max timestamp,
# earliest local (the log start here: kafkalog has no remote tier).
EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP = -2, -1, -3, -4
SPECIAL_TIMESTAMPS = (EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP)
_TIME_ENTRY = np.dtype([("ts", ">i8"), ("rel", ">i4")])


def time_index_entries(directory: str, base: int) -> tuple[np.ndarray, np.ndarray]:
    """(timestamps, absolute offsets) of the trustworthy entries of a segment's ``.timeindex`` (maybe none).

    Entries are kept while timestamps strictly increase and offsets do not go down, which cuts the
    zero-filled preallocated tail of an active segment's time index; an all-zero first slot is that tail.
    """
    empty = np.empty(0, np.int64)
    used = read_used_entries(segment_path(directory, base, TIME_INDEX_SUFFIX), _TIME_ENTRY.itemsize)
    if not used:
        return empty, empty
    raw = np.frombuffer(used, dtype=_TIME_ENTRY)
    ts, rel = raw["ts"].astype(np.int64), raw["rel"].astype(np.int64)
    if rel[0] < 0 or (ts[0] == 0 and rel[0] == 0):
        return empty, empty
    bad = np.flatnonzero((np.diff(ts) <= 0) | (np.diff(rel) < 0))
    n = int(bad[0]) + 1 if len(bad) else len(ts)
    return ts[:n], rel[:n] + base


def _max_timestamp(directory: str, base: int, scan_tail: bool) -> tuple[int, int]:
    """(max timestamp, offset of its batch) of a segment: its time index's last entry, or (-1, base).

    With ``scan_tail`` the batches from that entry on are scanned too, as Kafka does for the active segment,
    whose time index gets an entry only every ``index.interval.bytes`` (LogSegment.loadLargestTimestamp).
    """
    ts, offsets = time_index_entries(directory, base)
    best = (int(ts[-1]), int(offsets[-1])) if len(ts) else (-1, base)
    if scan_tail:
        records = open_segment(directory, base)
        if records is not None:
            try:
                for header in complete_headers(records, start_position(directory, base, best[1])):
                    if header.max_timestamp > best[0]:
                        best = (header.max_timestamp, header.last_offset)
            finally:
                records.close()
    return best


def _search_segment(directory: str, base: int, timestamp: int, starting_offset: int) -> int | None:
    """The first record at or after ``starting_offset`` whose timestamp is >= ``timestamp`` in one segment
    (LogSegment.findOffsetByTimestamp): the scan starts at the batch of the time index entry with the
    largest timestamp <= ``timestamp``; records before it are older. Control records count, as in Kafka."""
    ts, offsets = time_index_entries(directory, base)
    slot = int(np.searchsorted(ts, timestamp, side="right")) - 1
    entry_offset = int(offsets[slot]) if slot >= 0 else base
    records = open_segment(directory, base)
    if records is None:
        return None
    try:
        for header in complete_headers(records, start_position(directory, base, max(entry_offset, starting_offset))):
            if header.max_timestamp < timestamp or header.last_offset < starting_offset:
                continue
            table = decode_run([records.read_batch(header)], None, None, records, include_control=True)
            found = table.column("offset").to_numpy()
            times = table.column("timestamp").cast(pa.int64()).to_numpy()
            hits = np.flatnonzero((times >= timestamp) & (found >= starting_offset))
            if len(hits):
                return int(found[hits[0]])
        return None
    finally:
        records.close()


def _largest_timestamp(directory: str, base: int, active: bool) -> int:
    """LogSegment.largestTimestamp: the max timestamp, or the ``.log`` file's mtime when it has none."""
    ts = _max_timestamp(directory, base, scan_tail=active)[0]
    if ts >= 0:
        return ts
    try:
        return int(os.stat(segment_path(directory, base, LOG_SUFFIX)).st_mtime * 1000)
    except FileNotFoundError:
        return -1


def _offset_of_max_timestamp(directory: str, bases: list[int]) -> int | None:
    """The offset of the first record with the partition's largest timestamp (ListOffsets MAX_TIMESTAMP)."""
    best: tuple[int, int, int] | None = None  # (max timestamp, its batch offset, segment base)
    for i, base in enumerate(bases):
        ts, offset = _max_timestamp(directory, base, scan_tail=i == len(bases) - 1)
        if best is None or ts > best[0]:
            best = (ts, offset, base)
    if best is None or best[0] < 0:
        return None
    max_ts, offset, base = best
    records = open_segment(directory, base)
    if records is None:
        return None
    try:
        for header in complete_headers(records, start_position(directory, base, offset)):
            if header.max_timestamp == max_ts:
                table = decode_run([records.read_batch(header)], None, None, records, include_control=True)
                times = table.column("timestamp").cast(pa.int64()).to_numpy()
                hits = np.flatnonzero(times == max_ts)
                if len(hits):
                    return int(table.column("offset")[int(hits[0])].as_py())
        return None
    finally:
        records.close()


def offset_for_timestamp(directory: str, timestamp: int, log_start: int, latest: int) -> int | None:
    """What ListOffsets answers for ``timestamp`` (Partition.fetchOffsetForTimestamp), from the files.

    -2 (and -4) is the log start and -1 is ``latest``; -3 is the offset of the record with the largest
    timestamp. Otherwise it is the earliest offset at or after the log start whose record's timestamp is at
    least ``timestamp``, searched as UnifiedLog.fetchOffsetByTimestamp does: only in the first segment whose
    largest timestamp reaches it, from its ``.timeindex`` entry on. None when nothing matches, or when the
    match is not below ``latest`` (the high watermark, or the last stable offset for read_committed): Kafka
    answers no offset then.
    """
    if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
        return log_start
    if timestamp == LATEST_TIMESTAMP:
        return latest
    bases = segment_bases(directory)
    if timestamp == MAX_TIMESTAMP:
        found = _offset_of_max_timestamp(directory, bases)
    else:  # any other timestamp, negative ones too, is searched, as Kafka's fetchOffsetByTimestamp does
        found = None
        for i, base in enumerate(bases):
            if _largest_timestamp(directory, base, active=i == len(bases) - 1) >= timestamp:
                found = _search_segment(directory, base, timestamp, log_start)
                break
    return found if found is not None and found < latest else None


def first_offset_at_or_after(directory: str, timestamp: int, start: int, end: int) -> int:
    """A lower bound for the offsets in [start, end) whose record timestamp is >= ``timestamp``: every such
    record is at or after the returned offset (``end`` when there is none).

    Unlike ``offset_for_timestamp`` every segment that may hold a match is searched, not only the first
    whose largest timestamp reaches it, and each segment's largest timestamp includes a scan after its last
    time index entry: a filter pushed down must never drop a matching row. Segments entirely outside the
    range are skipped without reading them.
    """
    bases = segment_bases(directory)
    for i, base in enumerate(bases):
        following = bases[i + 1] if i + 1 < len(bases) else None
        if following is not None and following <= start:
            continue
        if base >= end:
            break
        if _max_timestamp(directory, base, scan_tail=True)[0] < timestamp:
            continue
        found = _search_segment(directory, base, timestamp, start)
        if found is not None:
            return min(found, end)
    return end
