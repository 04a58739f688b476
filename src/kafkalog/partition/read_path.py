"""Kafka's read path over a partition's segment files, and the last stable offset found along it.

``read_path`` lists the segments a consumer reading from the log start visits and the offset each is read
from (``LocalLog.read``); ``path_batches`` and ``read_range`` read batches and Arrow tables along it, so
overlapping segments (a cleaned segment beside the one it replaced) give each record once, in order.
``last_stable_offset`` scans batch headers along the same path from the newest producer snapshot.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa

from ..errors import CorruptSnapshotError, KafkaLogError, OffsetOutOfRangeError
from ..record.batch import CONTROL_MASK, TRANSACTIONAL_MASK
from ..record.columnar import batches_to_arrow
from ..storage.file_records import BatchHeader, FileRecords
from ..storage.producer_snapshot import list_snapshots, read_snapshot
from .aborted import AbortedFilter, collect_aborted_txns
from .segment_files import (
    RUN_BYTES,
    complete_batches,
    complete_headers,
    data_loss_message,
    open_segment,
    scan_from,
    segment_bases,
    segment_last_offset,
)

# ----- Kafka's read path ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReadRun:
    """One step of Kafka's read path: segment ``base`` is read from offset ``start`` to its end."""

    base: int
    start: int


def read_path(directory: str, bases: list[int], log_start: int) -> list[ReadRun]:
    """The segments a consumer reading from ``log_start`` visits, and the offset it reads each one from.

    As Kafka's ``LocalLog.read``: the fetch goes to the segment holding the fetch offset (the floor entry
    of the segment map) and returns the batches from the first one whose last offset reaches it; a segment
    with nothing there passes the fetch to the next segment. The next fetch starts one past the last batch
    read. Segments normally follow each other, and the path is then every segment in turn. When a cleaned
    segment sits beside the older segment it replaced (a cleaner swap cut short: segment 0 holding offsets
    153..473 beside segment 63 holding 63..473), the cleaned one is read to its end and the older one only
    from 474: each offset is read once, in increasing order, as Kafka serves it.

    A read from any offset is placed on this path (the run holding that offset), so a range split anywhere
    gives the records of a whole read. Where Kafka differs: a fetch that starts inside the older of two
    overlapping segments (offset 100 above) is served by Kafka from that older segment, here from the path.

    Finding the path reads the tail of every closed segment once (``segment_last_offset``); the path is then
    kept per directory while the directory's mtime and its segments stay the same (a roll, a deletion or a
    cleaner's swap adds, removes or renames files, which moves the mtime), so a reader splitting a
    partition into many small ranges pays one ``stat`` per range.
    """
    if not bases:
        return []
    try:
        key = (os.stat(directory).st_mtime_ns, tuple(bases), log_start)
    except FileNotFoundError:
        key = None
    cached = _PATHS.get(directory)
    if key is not None and cached is not None and cached[0] == key:
        return list(cached[1])
    runs = _walk_path(directory, bases, log_start)
    if key is not None:
        if len(_PATHS) > 4096:
            _PATHS.clear()
        _PATHS[directory] = (key, runs)
    return runs


_PATHS: dict[str, tuple[tuple, list[ReadRun]]] = {}  # directory -> (its mtime, bases, log start; the path)


def _walk_path(directory: str, bases: list[int], log_start: int) -> list[ReadRun]:
    runs: list[ReadRun] = []
    cursor = log_start
    i = max(0, bisect.bisect_right(bases, cursor) - 1)
    while i < len(bases):
        if i == len(bases) - 1:  # the last segment: read to its end, wherever that is now
            runs.append(ReadRun(bases[i], cursor))
            break
        last = segment_last_offset(directory, bases[i])
        if last is None or last < cursor:  # nothing at or after the fetch offset here: the next segment
            i += 1
            continue
        runs.append(ReadRun(bases[i], cursor))
        cursor = last + 1
        following = bisect.bisect_right(bases, cursor) - 1
        i = following if following > i else i + 1
    return runs


def runs_from(directory: str, bases: list[int], start: int) -> list[tuple[ReadRun, int]]:
    """The read path's runs that hold offsets at or after ``start``, each with the offset to read it from."""
    runs = read_path(directory, bases, bases[0])
    first = max(0, bisect.bisect_right([r.start for r in runs], start) - 1)
    return [(run, max(run.start, start)) for run in runs[first:]]


def path_batches(
    directory: str,
    name: str,
    start: int,
    end: int,
    *,
    fail_on_data_loss: bool,
    aborted: AbortedFilter | None = None,
) -> Iterator[tuple[FileRecords, object]]:
    """(segment file, batch) for every batch on Kafka's read path holding offsets in [start, end), in order.

    Batches of aborted transactions are left out when ``aborted`` is given (control batches are kept: the
    caller decides). A segment deleted since the segments were listed is data loss: raised, or skipped when
    ``fail_on_data_loss`` is false. A file is closed when its batches have been consumed.
    """
    if start >= end:
        return
    bases = segment_bases(directory)
    if not bases or bases[0] > start:
        available = bases[0] if bases else None
        if fail_on_data_loss:
            what = "" if available is not None else " (its segments are gone)"
            raise OffsetOutOfRangeError(
                data_loss_message(name, start, available if available is not None else end, what),
                offset=start,
                path=directory,
            )
        if available is None:
            return
        start = available
    runs = runs_from(directory, bases, start)
    for k, (run, read_from) in enumerate(runs):
        if read_from >= end:
            return
        records = open_segment(directory, run.base)
        if records is None:
            if fail_on_data_loss:
                following = runs[k + 1][0].start if k + 1 < len(runs) else end
                raise OffsetOutOfRangeError(
                    data_loss_message(
                        name, read_from, following, f" (segment {run.base} was deleted while it was read)"
                    ),
                    offset=read_from,
                    path=directory,
                )
            continue
        for batch in scan_from(complete_batches, records, directory, run.base, read_from):
            if batch.magic == 2 and batch.base_offset >= end:
                return
            if aborted is None or aborted.keep(batch):
                yield records, batch
            if batch.last_offset + 1 >= end:
                return


def read_range(
    directory: str,
    name: str,
    start: int,
    end: int,
    *,
    fail_on_data_loss: bool,
    run_bytes: int = RUN_BYTES,
    read_committed: bool = False,
) -> Iterator[pa.Table]:
    """Decode the records in [start, end) of one partition into tables of ``kafkalog.record.ARROW_SCHEMA``.

    The batches are those of Kafka's read path from the log start (``read_path``), so overlapping segments
    give each record once, in order, and a range split anywhere gives the same records as a whole read.
    Control records are left out. Segments are listed now, not at planning: one deleted since then is
    data loss (raised, or skipped when ``fail_on_data_loss`` is false). With ``read_committed`` the batches
    of aborted transactions are left out too (see ``AbortedFilter``); keeping ``end`` at or below the last
    stable offset is the caller's part.
    """
    if start >= end:
        return
    aborted = None
    if read_committed:
        bases = segment_bases(directory)
        aborted = AbortedFilter(collect_aborted_txns(directory, bases, start, end))
    run: list = []
    size = 0
    current: FileRecords | None = None
    for records, batch in path_batches(
        directory, name, start, end, fail_on_data_loss=fail_on_data_loss, aborted=aborted
    ):
        if current is not None and records is not current and run:
            yield decode_run(run, start, end, current)
            run, size = [], 0
        current = records
        run.append(batch)
        size += batch.size_in_bytes
        if size >= run_bytes:
            yield decode_run(run, start, end, records)
            run, size = [], 0
    if run and current is not None:
        yield decode_run(run, start, end, current)


def decode_run(run: list, start: int | None, end: int | None, records: FileRecords, **options) -> pa.Table:
    """``batches_to_arrow`` of a run of one segment's batches; a corrupt batch's error names the segment file."""
    try:
        return batches_to_arrow(run, start_offset=start, end_offset=end, **options)
    except KafkaLogError as e:
        raise e.located(path=str(records.path)) from None


# ----- the last stable offset -----------------------------------------------------------------------------


def _headers_between(directory: str, bases: list[int], start: int, end: int) -> Iterator[BatchHeader]:
    """The headers of the batches holding offsets in [start, end), along Kafka's read path (``read_path``;
    segments deleted under us are skipped)."""
    if not bases or start >= end:
        return
    for run, read_from in runs_from(directory, bases, max(start, bases[0])):
        if read_from >= end:
            return
        records = open_segment(directory, run.base)
        if records is None:
            continue
        for header in scan_from(complete_headers, records, directory, run.base, read_from):
            if header.base_offset >= end:
                return
            yield header


def _open_transactions_at(directory: str, first_base: int, upper: int) -> tuple[dict[int, int], int]:
    """Producer id → first offset of its open transaction, from the newest readable producer snapshot at an
    offset in [first_base, upper], and that offset; ({}, first_base) when there is none."""
    for offset, path in reversed(list_snapshots(directory)):
        if not first_base <= offset <= upper:
            continue
        try:
            entries = read_snapshot(path)
        except (CorruptSnapshotError, OSError):  # being written, or deleted under us: try an older one
            continue
        return {
            e.producer_id: e.current_txn_first_offset for e in entries if e.current_txn_first_offset is not None
        }, offset
    return {}, first_base


def last_stable_offset(directory: str, log_start: int, latest: int) -> int:
    """The last stable offset: the first offset of the earliest transaction still open below ``latest`` (the
    high watermark, or the log end), at least the log start; ``latest`` when none is open.

    A transaction is open from its first transactional data batch until its producer's control batch (COMMIT
    or ABORT); a marker at or after ``latest`` does not count yet, as Kafka keeps a decided transaction
    unstable until the high watermark passes its marker. The open transactions are taken from the newest
    producer snapshot (``<offset>.snapshot``, which Kafka and kafkalog write at every segment roll) at or
    below ``latest`` and not below the first segment, then batch headers are scanned from its offset. With
    no such snapshot the scan starts at the first segment, which misses a transaction begun before it (only
    possible after retention or delete_records) whose batches are all gone: then the LSO may be too high.
    """
    bases = segment_bases(directory)
    if not bases or latest <= log_start:
        return latest
    open_txns, scan_from = _open_transactions_at(directory, bases[0], latest)
    for header in _headers_between(directory, bases, scan_from, latest):
        if header.magic < 2 or not header.attributes & TRANSACTIONAL_MASK:
            continue
        if header.attributes & CONTROL_MASK:
            open_txns.pop(header.producer_id, None)
        else:
            open_txns.setdefault(header.producer_id, header.base_offset)
    if not open_txns:
        return latest
    return min(max(min(open_txns.values()), log_start), latest)
