"""Opening a partition directory (Kafka's LogLoader): temp files, swaps, segments, recovery, producer state.

The steps follow LogLoader.load: delete ``.deleted`` files and incomplete cleaner output; finish or roll
back interrupted ``.swap`` replacements; open every segment (rebuilding a missing or corrupt index);
after an unclean shutdown re-validate every segment from the recovery point on, deleting whatever
follows a truncated one; then settle the start offset and rebuild the producer state.
"""

from __future__ import annotations

import logging
import os
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from ..clock import Time
from ..errors import (
    CorruptIndexError,
    InvalidOffsetError,
    KafkaLogError,
    KafkaStorageError,
    LogSegmentOffsetOverflowError,
)
from ..layout import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    INT64_MIN,
    KRAFT_SNAPSHOT_SUFFIX,
    LOG_SUFFIX,
    SEGMENT_SUFFIXES,
    SNAPSHOT_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    filename_prefix,
    offset_from_filename,
    segment_file,
)
from .config import LogConfig
from .files import delete_if_exists, fsync_dir
from .leader_epoch import LeaderEpochFileCache
from .producer_state import ProducerStateManager
from .segment import LogSegment, update_producer_state
from .segments import LogSegments

_T = TypeVar("_T")

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LoadedOffsets:
    """What loading a partition directory found: its log start offset, recovery point and next offset."""

    log_start_offset: int
    recovery_point: int
    next_offset: int


SPLIT_CHUNK_BYTES = 1024 * 1024  # appendFromFile's read buffer


def open_segment(
    directory: Path,
    base: int,
    config: LogConfig,
    clock: Time,
    rng: random.Random,
    *,
    existing: bool = False,
    suffix: str = "",
) -> LogSegment:
    """A segment with the topic's index settings: an existing one, or a new one (preallocated when asked)."""
    return LogSegment.open(
        directory,
        base,
        index_interval_bytes=config.index_interval_bytes,
        max_index_size=config.segment_index_bytes,
        clock=clock,
        file_already_exists=existing,
        init_file_size=0 if existing else config.initial_file_size,
        preallocate=not existing and config.preallocate,
        rolling_jitter_ms=config.random_segment_jitter(rng),
        suffix=suffix,
    )


def _is_segment_file(name: str) -> bool:
    return any(name.endswith(s) for s in SEGMENT_SUFFIXES)


def _listing(directory: Path) -> tuple[list[str], set[str]]:
    """(the names of the regular files in ``directory``, symlinks followed, in name order; every name in it): one
    ``scandir``, whose entries know their type without a ``stat`` per file (loading 10,000 partitions listed
    each dir several times, with a ``stat`` per file and per existence check)."""
    with os.scandir(directory) as entries:
        files, names = [], set()
        for entry in entries:
            names.add(entry.name)
            if entry.is_file():
                files.append(entry.name)
    return sorted(files), names


def _regular_files(directory: Path) -> list[str]:
    return _listing(directory)[0]


def remove_temp_files_and_collect_swaps(directory: Path) -> list[Path]:
    """Step 1: delete .deleted files and .cleaned output (and swaps of an incomplete split); return swaps."""
    swaps, cleaned = [], []
    for name in _regular_files(directory):
        path = directory / name
        if name.endswith(DELETED_SUFFIX) and not name.endswith(KRAFT_SNAPSHOT_SUFFIX + DELETED_SUFFIX):
            log.debug("Deleting stray temporary file %s", path)
            delete_if_exists(path)
        elif name.endswith(CLEANED_SUFFIX):
            cleaned.append(path)
        elif name.endswith(SWAP_SUFFIX):
            swaps.append(path)
    if cleaned:
        min_cleaned = min(offset_from_filename(p.name) for p in cleaned)
        for swap in [s for s in swaps if offset_from_filename(s.name) >= min_cleaned]:
            log.info("Deleting invalid swap file %s (min cleaned offset %d)", swap, min_cleaned)
            delete_if_exists(swap)
            swaps.remove(swap)
        for path in cleaned:
            delete_if_exists(path)
    return swaps


def _swap_range(directory: Path, swap: Path, config: LogConfig, clock: Time, rng: random.Random) -> tuple[int, int]:
    """The offsets [base, next) a ``.log.swap`` file holds."""
    segment = open_segment(
        directory, offset_from_filename(swap.name), config, clock, rng, existing=True, suffix=SWAP_SUFFIX
    )
    try:
        return segment.base_offset, segment.read_next_offset()
    finally:
        segment.close_handlers()


def complete_swaps(directory: Path, swaps: list[Path], config: LogConfig, clock: Time, rng: random.Random) -> None:
    """Step 2: the swap completes: replaced files in [min swap, max swap) go, each .swap loses its suffix."""
    log_swaps = [s for s in swaps if s.name.endswith(LOG_SUFFIX + SWAP_SUFFIX)]
    if not log_swaps:
        for swap in swaps:
            os.rename(swap, swap.with_name(swap.name[: -len(SWAP_SUFFIX)]))
        return
    ranges = [_swap_range(directory, swap, config, clock, rng) for swap in log_swaps]
    low, high = min(start for start, _ in ranges), max(end for _, end in ranges)
    for path in directory.iterdir():
        name = path.name
        if name.endswith(SWAP_SUFFIX) or not _is_segment_file(name):
            continue
        if low <= offset_from_filename(name) < high:
            log.info("Deleting segment file %s replaced by the swap", path)
            delete_if_exists(path)
    for swap in swaps:
        os.rename(swap, swap.with_name(swap.name[: -len(SWAP_SUFFIX)]))


def load_segment_files(
    directory: Path, config: LogConfig, clock: Time, rng: random.Random, log_start_offset: int
) -> LogSegments:
    """Step 3: open every segment, deleting orphan indexes and rebuilding missing or corrupt ones."""
    segments = LogSegments()
    try:
        _load_segment_files_into(segments, directory, config, clock, rng, log_start_offset)
    except BaseException:
        # On an overflow the caller splits the overflowed segment and loads everything again; on any other
        # error the load fails: either way no descriptor or index map may stay behind.
        _close_all(segments)
        raise
    return segments


def _close_all(segments: LogSegments) -> None:
    for segment in segments:
        segment.close_handlers()


def _load_segment_files_into(
    segments: LogSegments, directory: Path, config: LogConfig, clock: Time, rng: random.Random, log_start_offset: int
) -> None:
    names, present = _listing(directory)
    # No step below creates a .log, nor another segment's .timeindex, so the listing answers both checks.
    for name in names:
        if name.endswith((INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)):
            if filename_prefix(offset_from_filename(name)) + LOG_SUFFIX not in present:
                path = directory / name
                log.warning("Found an orphaned index file %s, with no corresponding log file.", path)
                delete_if_exists(path)
        elif name.endswith(LOG_SUFFIX):
            base = offset_from_filename(name)
            time_index_existed = filename_prefix(base) + TIME_INDEX_SUFFIX in present
            segment = open_segment(directory, base, config, clock, rng, existing=True)
            try:
                try:
                    segment.sanity_check(not time_index_existed)
                except (FileNotFoundError, CorruptIndexError, KafkaLogError) as e:
                    log.warning("Could not use the index files of segment %s (%s); rebuilding them", segment, e)
                    recover_segment(directory, segment, segments, config, clock, log_start_offset)
            except LogSegmentOffsetOverflowError:
                raise  # the caller splits this segment (it carries it), so it stays open
            except BaseException:
                segment.close_handlers()
                raise
            segments.add(segment)


def recover_segment(
    directory: Path,
    segment: LogSegment,
    earlier: LogSegments,
    config: LogConfig,
    clock: Time,
    log_start_offset: int,
    leader_epoch_cache: LeaderEpochFileCache | None = None,
) -> int:
    """Rebuild one segment's indexes with the producer state as of its base offset; return bytes cut."""
    state = ProducerStateManager(directory, clock=clock)
    state.truncate_and_reload(log_start_offset, segment.base_offset, clock.milliseconds())
    replay_producer_state(state, earlier, log_start_offset, segment.base_offset)
    truncated = segment.recover(state, leader_epoch_cache)
    state.take_snapshot()
    return truncated


def replay_producer_state(
    state: ProducerStateManager, segments: LogSegments, log_start_offset: int, to_offset: int
) -> None:
    """Replay the batches between the producer state's map end and ``to_offset`` into it."""
    start = max(state.map_end_offset, log_start_offset)
    if start < to_offset:
        for segment in segments.values_between(start, to_offset):
            found = segment.translate_offset(start) if segment.base_offset < start else None
            position = found[1] if found is not None else 0
            for _, batch in segment.log.batches(position):
                if batch.base_offset >= to_offset:
                    break
                if batch.last_offset < start or batch.magic < 2:
                    continue
                if batch.has_producer_id:
                    update_producer_state(state, batch, None)
    state.update_map_end_offset(to_offset)


def recover_log(
    directory: Path,
    segments: LogSegments,
    config: LogConfig,
    clock: Time,
    log_start_offset: int,
    recovery_point: int,
    leader_epoch_cache: LeaderEpochFileCache | None = None,
) -> None:
    """Step 4: re-validate every segment from floor(recovery point); a truncation deletes all that follows.

    One producer state is carried from segment to segment (reloaded once, at the first one), so the cost
    stays linear in the number of segments.
    """
    state = None
    for segment in segments.values_from(recovery_point):
        if segment.base_offset not in segments:
            continue
        try:
            if state is None:
                state = ProducerStateManager(directory, clock=clock)
                state.truncate_and_reload(log_start_offset, segment.base_offset, clock.milliseconds())
                replay_producer_state(state, segments, log_start_offset, segment.base_offset)
            truncated = segment.recover(state, leader_epoch_cache)
            state.take_snapshot()
        except InvalidOffsetError as e:  # only this (LogLoader.recoverLog): an I/O error must not cut data
            log.warning("Found invalid offset during recovery of %s (%s); truncating it to its base offset", segment, e)
            truncated = segment.truncate_to(segment.base_offset)
            state = None
        if truncated > 0:
            doomed = [s for s in segments if s.base_offset > segment.base_offset]
            if doomed:
                log.warning("Deleting %d segments after the truncated segment %s", len(doomed), segment)
            for later in doomed:
                segments.remove(later.base_offset)
                later.delete_if_exists()
                delete_if_exists(segment_file(directory, later.base_offset, SNAPSHOT_SUFFIX))
            break


def _recover_torn_tail(
    directory: Path,
    segments: LogSegments,
    last: LogSegment,
    config: LogConfig,
    clock: Time,
    log_start_offset: int,
    leader_epoch_cache: LeaderEpochFileCache | None = None,
) -> None:
    """Recover the last segment of a log marked cleanly shut down whose tail is not whole.

    Kafka trusts the marker: it skips recovery and takes the next offset from the complete batches after
    the last index entry (LogSegment.readNextOffset), falling back to the segment's base offset when that
    entry points at the torn batch. Its next append then lands after the torn bytes, where no reader
    reaches it. Here the segment is recovered as after an unclean shutdown instead: the torn bytes go, the
    indexes are rebuilt, and the log ends after the last complete batch, where the next append is readable.
    """
    log.warning(
        "Segment %s of a cleanly shut down log does not end with a complete batch (size %d); recovering it",
        last,
        last.size,
    )
    try:
        recover_segment(directory, last, segments, config, clock, log_start_offset, leader_epoch_cache)
    except InvalidOffsetError as e:
        log.warning("Found invalid offset during recovery of %s (%s); truncating it to its base offset", last, e)
        last.truncate_to(last.base_offset)


def _retry_on_offset_overflow(
    directory: Path,
    config: LogConfig,
    clock: Time,
    rng: random.Random,
    segments: LogSegments | None,
    action: Callable[[], _T],
) -> _T:
    """Run a load step; on a segment whose offsets overflow, split it and run the step again (Kafka's
    retryOnOffsetOverflow). ``segments`` is the loaded set, or None when the step loads it afresh."""
    while True:
        try:
            return action()
        except LogSegmentOffsetOverflowError as e:
            segment = getattr(e, "segment", None)
            if segment is None:
                raise
            log.info("Caught segment overflow error: %s. Split segment and retry.", e.reason)
            split_overflowed_segment(directory, segment, segments, config, clock, rng)


def split_overflowed_segment(
    directory: Path,
    segment: LogSegment,
    segments: LogSegments | None,
    config: LogConfig,
    clock: Time,
    rng: random.Random,
) -> list[LogSegment]:
    """Copy an overflowed segment into ``.cleaned`` segments whose offsets fit, then swap them in
    (LocalLog.splitOverflowedSegment). With ``segments`` None the caller reloads every file afterwards."""
    if not segment.has_overflow():
        raise KafkaStorageError(f"Split operation is only permitted for segments with overflow: {segment.log.path}")
    log.info("Splitting overflowed segment %s", segment)
    new_segments: list[LogSegment] = []
    try:
        headers = list(segment.log.batch_headers())
        i = 0
        while i < len(headers):
            first = headers[i]
            target = open_segment(directory, first.base_offset, config, clock, rng, suffix=CLEANED_SUFFIX)
            new_segments.append(target)
            while i < len(headers) and target.can_convert_to_relative_offset(headers[i].last_offset):
                chunk_start, chunk_bytes = headers[i].position, 0
                max_ts, shallow = INT64_MIN, -1
                while (
                    i < len(headers)
                    and target.can_convert_to_relative_offset(headers[i].last_offset)
                    and (chunk_bytes == 0 or chunk_bytes + headers[i].size < SPLIT_CHUNK_BYTES)
                ):
                    if headers[i].max_timestamp > max_ts:
                        max_ts, shallow = headers[i].max_timestamp, headers[i].last_offset
                    chunk_bytes += headers[i].size
                    i += 1
                target.append(headers[i - 1].last_offset, max_ts, shallow, segment.log.read(chunk_start, chunk_bytes))
        total = 0
        for target in new_segments:
            target.on_become_inactive_segment()
            target.flush()
            target.log.set_last_modified_ms(segment.last_modified_ms())
            total += target.size
        if total != segment.size:
            raise KafkaStorageError(f"Inconsistent segment sizes after split before: {segment.size} after: {total}")
        log.info("Replacing overflowed segment %s with split segments %s", segment, new_segments)
        for target in reversed(new_segments):
            target.change_file_suffixes(CLEANED_SUFFIX, SWAP_SUFFIX)
        if segments is not None:
            for target in new_segments:
                segments.add(target)
            if segment.base_offset != new_segments[0].base_offset:
                segments.remove(segment.base_offset)
        segment.change_file_suffixes("", DELETED_SUFFIX)
        segment.delete_if_exists()
        for target in new_segments:
            target.change_file_suffixes(SWAP_SUFFIX, "")
        fsync_dir(directory)
        if segments is None:
            for target in new_segments:
                target.close()
        return new_segments
    except BaseException:
        for target in new_segments:
            target.close_handlers()
            target.delete_if_exists()
        raise


def load_log(
    directory: Path,
    config: LogConfig,
    clock: Time,
    producer_state: ProducerStateManager,
    *,
    rng: random.Random,
    log_start_offset: int,
    recovery_point: int,
    had_clean_shutdown: bool,
    leader_epoch_cache: LeaderEpochFileCache | None = None,
) -> tuple[LogSegments, LoadedOffsets]:
    """Load (and recover) a partition directory; return its segments and LoadedOffsets.

    ``leader_epoch_cache`` (a LeaderEpochFileCache read from the partition's checkpoint) learns the epochs
    of recovered batches and is truncated to the loaded log, as in Kafka's LogLoader.load."""

    swaps = remove_temp_files_and_collect_swaps(directory)
    complete_swaps(directory, swaps, config, clock, rng)
    segments = _retry_on_offset_overflow(
        directory, config, clock, rng, None, lambda: load_segment_files(directory, config, clock, rng, log_start_offset)
    )
    load = _Load(directory, config, clock, rng, producer_state, log_start_offset, recovery_point, had_clean_shutdown)
    try:
        return _recover_and_finish(load, segments, leader_epoch_cache)
    except BaseException:  # a load that fails (an I/O error, say) leaves no descriptor or map behind
        _close_all(segments)
        raise


@dataclass(frozen=True)
class _Load:
    """One load of a partition directory by ``load_log``: the directory with its configs, clock and segment
    jitter, the producer state to rebuild, and where the log stopped (the checkpointed log start offset and
    recovery point, and whether the broker shut down cleanly)."""

    directory: Path
    config: LogConfig
    clock: Time
    rng: random.Random
    producer_state: ProducerStateManager
    log_start_offset: int
    recovery_point: int
    had_clean_shutdown: bool


def _finish_epochs(cache: LeaderEpochFileCache, next_offset: int, log_start_offset: int) -> None:
    """The leader epoch cache after a load: entries at or past the log end and before the log start go (issue 25,
    Kafka's LogLoader: truncateFromEndAsyncFlush / truncateFromStartAsyncFlush), in memory only (the file is left
    ``stale``: the log writes it before its first append, or whatever writes the cache next does, and a crash
    before that is corrected by the next load's same truncation). So an empty partition, whose ``0 0`` entry
    goes here and comes back when it is made leader, has nothing rewritten. The epochs recovery learned are
    written now (once, and only if the file does not hold them), before the recovery point can pass them."""
    cache.truncate_from_end(next_offset, flush=False)
    cache.truncate_from_start(log_start_offset, flush=False)
    if cache.unflushed:
        cache.flush()


def _recover_and_finish(
    load: _Load, segments: LogSegments, leader_epoch_cache: LeaderEpochFileCache | None
) -> tuple[LogSegments, LoadedOffsets]:
    """Recovery from the recovery point, then the offsets and producer state of the loaded segments."""
    directory, config, clock, rng = load.directory, load.config, load.clock, load.rng
    producer_state, log_start_offset, recovery_point = load.producer_state, load.log_start_offset, load.recovery_point
    had_clean_shutdown = load.had_clean_shutdown

    if not had_clean_shutdown and len(segments):
        _retry_on_offset_overflow(
            directory,
            config,
            clock,
            rng,
            segments,
            lambda: recover_log(
                directory, segments, config, clock, log_start_offset, recovery_point, leader_epoch_cache
            ),
        )
    last = segments.last()
    if last is None:
        next_offset = log_start_offset
    elif had_clean_shutdown:
        next_offset, whole = last.read_next_offset_and_whole_tail()
        if not whole:
            _recover_torn_tail(directory, segments, last, config, clock, log_start_offset, leader_epoch_cache)
            next_offset = last.read_next_offset()
    else:
        next_offset = last.read_next_offset()
    if last is not None and next_offset < log_start_offset:
        log.warning(
            "Deleting all segments: the log end %d is below the checkpointed log start offset %d",
            next_offset,
            log_start_offset,
        )
        for segment in list(segments):
            segments.remove(segment.base_offset)
            segment.delete_if_exists()
        producer_state.truncate_fully_and_start_at(log_start_offset)
        if leader_epoch_cache is not None:
            leader_epoch_cache.clear_and_flush()
        next_offset = log_start_offset
    if not len(segments):
        segments.add(open_segment(directory, log_start_offset, config, clock, rng))
        next_offset = log_start_offset
    recovery = next_offset if had_clean_shutdown else min(recovery_point, next_offset)
    if leader_epoch_cache is not None:
        _finish_epochs(leader_epoch_cache, next_offset, log_start_offset)
    active, oldest = segments.last(), segments.first()
    assert active is not None and oldest is not None  # an empty log got its segment just above
    active.reset_index_sizes()
    start = max(log_start_offset, oldest.base_offset)
    producer_state.remove_stray_snapshots(segments.base_offsets)
    producer_state.truncate_and_reload(start, next_offset, clock.milliseconds())
    before = producer_state.map_end_offset
    replay_producer_state(producer_state, segments, start, next_offset)
    if before < next_offset:
        producer_state.take_snapshot()
    return segments, LoadedOffsets(start, recovery, next_offset)
