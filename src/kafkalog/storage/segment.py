"""One segment of a partition log (Kafka's LogSegment): the .log file and its three indexes.

Index entries follow LogSegment.append: an entry is added only once more than ``index.interval.bytes``
were appended since the last one; it holds the last offset of the append and the position where the
append starts. Indexes are opened lazily, as Kafka's LazyIndex does, so a missing index can be detected.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from ..clock import Time
from ..errors import (
    CorruptRecordError,
    InvalidRecordError,
    LogSegmentOffsetOverflowError,
)
from ..layout import (
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    INT32_MAX,
    INT64_MAX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    segment_file,
)
from ..record.scan import AnyBatch
from ..record.types import BytesLike
from .file_records import EMPTY_SLICE, FileRecords, RecordsSlice
from .files import delete_if_exists
from .index import OffsetIndex, TimeIndex, TimestampOffset
from .leader_epoch import LeaderEpochFileCache
from .producer_state import AppendOrigin, CompletedTxn, ProducerStateManager
from .txn_index import AbortedTxn, TransactionIndex, TxnIndexSearchResult

log = logging.getLogger(__name__)

UNKNOWN_TIMESTAMP_OFFSET = TimestampOffset(-1, -1)


@dataclass(frozen=True)
class LogOffsetMetadata:
    """An offset, and where it sits: the segment's base offset and the byte position in it (-1 unknown)."""

    message_offset: int
    segment_base_offset: int = -1
    relative_position_in_segment: int = -1

    @property
    def message_offset_only(self) -> bool:
        return self.segment_base_offset == -1


@dataclass(frozen=True)
class FetchDataInfo:
    """What a read returns: where it started, the bytes, and for read_committed the aborted transactions."""

    fetch_offset_metadata: LogOffsetMetadata
    records: RecordsSlice
    first_entry_incomplete: bool = False
    aborted_transactions: list[AbortedTxn] | None = None


@dataclass(frozen=True)
class TimestampAndOffset:
    """A ListOffsets answer: a record's timestamp and offset (and the leader epoch when known)."""

    timestamp: int
    offset: int
    leader_epoch: int | None = None


class LogSegment:
    """A segment: records file, offset index, time index, transaction index, all named by ``base_offset``.

    Invariants: every batch in the ``.log`` has offsets in ``[base_offset, base_offset + Int32.MAX]``, in
    increasing order; the offset index holds at most one entry per ``index.interval.bytes`` of records, each
    naming the position of a batch that starts at or before its offset; the time index's timestamps only grow,
    and each names the largest timestamp so far with the offset of the batch that carried it; the indexes never
    point past the ``.log``'s logical size. The ``.txnindex`` lists the aborted transactions completed in this
    segment, in the order of their ABORT markers.
    """

    def __init__(
        self,
        records: FileRecords,
        directory: Path,
        base_offset: int,
        index_interval_bytes: int,
        max_index_size: int,
        rolling_jitter_ms: int,
        clock: Time,
        suffix: str = "",
    ) -> None:
        self.log = records
        self.directory = Path(directory)
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.max_index_size = max_index_size
        self.rolling_jitter_ms = rolling_jitter_ms
        self._clock = clock
        self._suffix = suffix
        self._offset_index: OffsetIndex | None = None
        self._time_index: TimeIndex | None = None
        self.txn_index = TransactionIndex(segment_file(directory, base_offset, TXN_INDEX_SUFFIX, suffix), base_offset)
        self.bytes_since_last_index_entry = 0
        self.rolling_based_timestamp: int | None = None
        self._max_ts_and_offset: TimestampOffset | None = None  # loaded lazily from the time index
        self.created_ms = clock.milliseconds()

    @classmethod
    def open(
        cls,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        max_index_size: int,
        clock: Time,
        file_already_exists: bool = False,
        init_file_size: int = 0,
        preallocate: bool = False,
        rolling_jitter_ms: int = 0,
        suffix: str = "",
    ) -> LogSegment:
        records = FileRecords.open(
            segment_file(directory, base_offset, LOG_SUFFIX, suffix),
            file_already_exists=file_already_exists,
            init_file_size=init_file_size,
            preallocate=preallocate,
        )
        return cls(
            records, directory, base_offset, index_interval_bytes, max_index_size, rolling_jitter_ms, clock, suffix
        )

    # ----- files ---------------------------------------------------------------------------
    def offset_index_path(self) -> Path:
        return segment_file(self.directory, self.base_offset, INDEX_SUFFIX, self._suffix)

    def time_index_path(self) -> Path:
        return segment_file(self.directory, self.base_offset, TIME_INDEX_SUFFIX, self._suffix)

    @property
    def offset_index(self) -> OffsetIndex:
        if self._offset_index is None:
            self._offset_index = OffsetIndex(self.offset_index_path(), self.base_offset, self.max_index_size)
        return self._offset_index

    @property
    def time_index(self) -> TimeIndex:
        if self._time_index is None:
            self._time_index = TimeIndex(self.time_index_path(), self.base_offset, self.max_index_size)
        return self._time_index

    @property
    def size(self) -> int:
        return self.log.size

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size={self.size}, path={self.log.path})"

    # ----- timestamps ----------------------------------------------------------------------
    def _max_timestamp_and_offset(self) -> TimestampOffset:
        if self._max_ts_and_offset is None:
            self._max_ts_and_offset = self.time_index.last_entry
        return self._max_ts_and_offset

    @property
    def max_timestamp_so_far(self) -> int:
        return self._max_timestamp_and_offset().timestamp

    @property
    def shallow_offset_of_max_timestamp_so_far(self) -> int:
        return self._max_timestamp_and_offset().offset

    @property
    def largest_timestamp(self) -> int:
        """The largest record timestamp, or the file's last-modified time when there is none (retention)."""
        ts = self.max_timestamp_so_far
        return ts if ts >= 0 else self.log.last_modified_ms()

    def _load_first_batch_timestamp(self) -> None:
        if self.rolling_based_timestamp is None:
            for header in self.log.batch_headers():
                self.rolling_based_timestamp = header.max_timestamp
                break

    def first_batch_timestamp(self) -> int:
        """The first batch's max timestamp, Long.MAX for an empty segment (LogSegment.getFirstBatchTimestamp)."""
        self._load_first_batch_timestamp()
        return self.rolling_based_timestamp if self.rolling_based_timestamp is not None else INT64_MAX

    def time_waited_for_roll(self, now: int, message_timestamp: int) -> int:
        """How long this segment has been open for rolling purposes (LogSegment.timeWaitedForRoll)."""
        self._load_first_batch_timestamp()
        ts = self.rolling_based_timestamp
        if ts is not None and ts >= 0:
            return message_timestamp - ts
        return now - self.created_ms

    def should_roll_for(
        self,
        max_segment_ms: int,
        max_segment_bytes: int,
        max_timestamp: int,
        max_offset: int,
        messages_size: int,
        now: int,
    ) -> bool:
        """Kafka's five roll conditions (LogSegment.shouldRoll), in Kafka's order: the segment is too big for the
        messages, too old, its indexes are full, or the messages' last offset does not fit a relative offset."""
        size = self.log.size
        if size > max_segment_bytes - messages_size:
            return True
        if size > 0 and self.time_waited_for_roll(now, max_timestamp) > max_segment_ms - self.rolling_jitter_ms:
            return True
        offset_index = self._offset_index if self._offset_index is not None else self.offset_index
        time_index = self._time_index if self._time_index is not None else self.time_index
        return offset_index.is_full() or time_index.is_full() or not 0 <= max_offset - self.base_offset <= INT32_MAX

    def can_convert_to_relative_offset(self, offset: int) -> bool:
        return 0 <= offset - self.base_offset <= INT32_MAX

    def _ensure_offset_in_range(self, offset: int) -> None:
        if not self.can_convert_to_relative_offset(offset):
            error = LogSegmentOffsetOverflowError(
                f"Detected offset overflow at offset {offset} in segment {self}", offset=offset, path=str(self.log.path)
            )
            error.segment = self  # the loader splits this segment and retries (splitOverflowedSegment)
            raise error

    def has_overflow(self) -> bool:
        """Offsets beyond base + 2^31-1 (legacy segments written before KAFKA-6264 was fixed)."""
        next_offset = self.read_next_offset()
        return next_offset > self.base_offset and not self.can_convert_to_relative_offset(next_offset - 1)

    # ----- append --------------------------------------------------------------------------
    def append(
        self,
        largest_offset: int,
        largest_timestamp: int,
        shallow_offset_of_max_timestamp: int,
        records: BytesLike | list[BytesLike],
        size: int | None = None,
    ) -> None:
        """Append validated batches (bytes, or a list of buffers written in order) whose last offset is
        ``largest_offset`` (LogSegment.append). ``size`` saves recounting when the caller knows it."""
        if size is None:
            size = sum(map(len, records)) if isinstance(records, list) else len(records)
        if size == 0:
            return
        position = self.log.size
        if not 0 <= largest_offset - self.base_offset <= INT32_MAX:
            self._ensure_offset_in_range(largest_offset)
        # an I/O error leaves the segment as it was (FileRecords rolls back)
        self.log.append(records, size)
        self._appended(position, size, largest_offset, largest_timestamp, shallow_offset_of_max_timestamp)

    def append_in_parts(self, records: BytesLike, parts: list[tuple[int, int, int, int]]) -> None:
        """Append ``records`` in one write, as if each part were appended on its own (:meth:`append`): ``parts`` are
        (where the part ends in ``records``, its largest offset, largest timestamp, shallow offset of that
        timestamp), in order. The index entries land where those appends would put them: the cleaner appends what
        each read buffer kept, as Kafka does, and several buffers' worth at once."""
        size = parts[-1][0] if parts else 0
        if size == 0:
            return
        starts = [0, *(part[0] for part in parts[:-1])]
        # an empty part is no append at all
        spans = [(start, *part) for start, part in zip(starts, parts, strict=True) if part[0] > start]
        for _, _, largest_offset, _, _ in spans:
            if not 0 <= largest_offset - self.base_offset <= INT32_MAX:
                self._ensure_offset_in_range(largest_offset)
        position = self.log.size
        self.log.append(records, size)  # an I/O error leaves the segment as it was (FileRecords rolls back)
        if not self._appended_all(position, spans):
            for start, end, largest_offset, largest_timestamp, shallow_offset in spans:
                self._appended(position + start, end - start, largest_offset, largest_timestamp, shallow_offset)

    def _appended_all(self, position: int, parts: list[tuple[int, int, int, int, int]]) -> bool:
        """:meth:`_appended` of every (start, end, largest offset, largest timestamp, its shallow offset) part
        written at ``position``, with each index written once, if every entry fits and is in order; False (and
        nothing changed) otherwise."""
        current = self._max_ts_and_offset if self._max_ts_and_offset is not None else self._max_timestamp_and_offset()
        max_ts, max_ts_offset = current.timestamp, current.offset
        rolling = self.rolling_based_timestamp
        since = self.bytes_since_last_index_entry
        interval = self.index_interval_bytes
        offset_rows, time_rows = [], []
        for start, end, largest_offset, largest_timestamp, shallow_offset in parts:
            if position + start == 0:
                rolling = largest_timestamp
            if largest_timestamp > max_ts:
                max_ts, max_ts_offset = largest_timestamp, shallow_offset
            if since > interval:
                offset_rows.append((largest_offset, position + start))
                time_rows.append((max_ts, max_ts_offset))
                since = 0
            since += end - start
        offset_plan = self.offset_index.plan_all(offset_rows)
        time_plan = self.time_index.plan_all(time_rows)
        if offset_plan is None or time_plan is None:
            return False
        self.offset_index.write_plan(offset_plan)
        self.time_index.write_plan(time_plan)
        self.rolling_based_timestamp = rolling
        if max_ts > current.timestamp:
            self._max_ts_and_offset = TimestampOffset(max_ts, max_ts_offset)
        self.bytes_since_last_index_entry = since
        return True

    def _appended(self, position: int, size: int, largest_offset: int, largest_timestamp: int,
                  shallow_offset_of_max_timestamp: int) -> None:  # fmt: skip
        """The bookkeeping of an append of ``size`` bytes written at ``position``: timestamps and index entries."""
        if position == 0:
            self.rolling_based_timestamp = largest_timestamp
        current = self._max_ts_and_offset if self._max_ts_and_offset is not None else self._max_timestamp_and_offset()
        if largest_timestamp > current.timestamp:
            self._max_ts_and_offset = TimestampOffset(largest_timestamp, shallow_offset_of_max_timestamp)
        if self.bytes_since_last_index_entry > self.index_interval_bytes:
            self.offset_index.append(largest_offset, position)
            self.time_index.maybe_append(self.max_timestamp_so_far, self.shallow_offset_of_max_timestamp_so_far)
            self.bytes_since_last_index_entry = 0
        self.bytes_since_last_index_entry += size

    def update_txn_index(self, completed_txn: CompletedTxn, last_stable_offset: int) -> None:
        """Record a completed transaction in the .txnindex when it was aborted."""
        if completed_txn.is_aborted:
            self.txn_index.append(
                AbortedTxn(
                    completed_txn.producer_id, completed_txn.first_offset, completed_txn.last_offset, last_stable_offset
                )
            )

    # ----- reads ---------------------------------------------------------------------------
    def translate_offset(self, offset: int, starting_position: int = 0) -> tuple[int, int, int] | None:
        """(last offset, position, size) of the first batch whose last offset >= ``offset``."""
        mapping = self.offset_index.lookup(offset)
        return self.log.search_for_offset_with_size(offset, max(mapping.position, starting_position))

    def read(
        self, start_offset: int, max_size: int, max_position: int | None = None, min_one_message: bool = False
    ) -> FetchDataInfo | None:
        """Bytes from the start of the batch holding ``start_offset``; None when no batch here reaches it."""
        if max_size < 0:
            raise ValueError(f"Invalid max size {max_size} for log read from segment {self.log}")
        found = self.translate_offset(start_offset)
        if found is None:
            return None
        _, start_position, batch_size = found
        metadata = LogOffsetMetadata(start_offset, self.base_offset, start_position)
        adjusted_max_size = max(max_size, batch_size) if min_one_message else max_size
        if adjusted_max_size == 0 or max_position is None:
            return FetchDataInfo(metadata, EMPTY_SLICE)
        fetch_size = min(max_position - start_position, adjusted_max_size)
        return FetchDataInfo(
            metadata,
            self.log.slice(start_position, max(0, fetch_size)),
            first_entry_incomplete=adjusted_max_size < batch_size,
        )

    def read_next_offset(self) -> int:
        """The offset after the last batch (stepping through headers from the last index entry)."""
        start = self.offset_index.lookup(self.offset_index.last_offset).position
        next_offset = self.base_offset
        for header in self.log.batch_headers(start):
            next_offset = header.last_offset + 1
        return next_offset

    def read_next_offset_and_whole_tail(self) -> tuple[int, bool]:
        """``read_next_offset`` and, from the same walk, whether those batches end exactly at the end of the .log
        (False for a torn last batch, trailing garbage, or an index entry past the end of the file)."""
        end = self.offset_index.lookup(self.offset_index.last_offset).position
        next_offset = self.base_offset
        try:
            for header in self.log.batch_headers(end):
                next_offset = header.last_offset + 1
                end = header.position + header.size
        except CorruptRecordError:
            return next_offset, False
        return next_offset, end == self.log.size

    def has_whole_tail(self) -> bool:
        return self.read_next_offset_and_whole_tail()[1]

    def find_offset_by_timestamp(self, timestamp: int, starting_offset: int) -> TimestampAndOffset | None:
        """The first record at or after ``starting_offset`` whose timestamp >= ``timestamp``."""
        entry = self.time_index.lookup(timestamp)
        position = self.offset_index.lookup(max(entry.offset, starting_offset)).position
        for header in self.log.batch_headers(position):
            if header.max_timestamp >= timestamp:
                batch = self.log.read_batch(header)
                for record in batch:
                    if record.timestamp >= timestamp and record.offset >= starting_offset:
                        epoch = batch.partition_leader_epoch
                        return TimestampAndOffset(record.timestamp, record.offset, epoch if epoch >= 0 else None)
        return None

    def largest_timestamp_after(self, position: int) -> TimestampOffset:
        best = UNKNOWN_TIMESTAMP_OFFSET
        for header in self.log.batch_headers(position):
            if header.max_timestamp > best.timestamp:
                best = TimestampOffset(header.max_timestamp, header.last_offset)
        return best

    def collect_aborted_txns(self, fetch_offset: int, upper_bound_offset: int) -> TxnIndexSearchResult:
        return self.txn_index.collect_aborted_txns(fetch_offset, upper_bound_offset)

    def fetch_upper_bound_offset(self, start_position: int, fetch_size: int) -> int | None:
        found = self.offset_index.fetch_upper_bound_offset(start_position, fetch_size)
        return None if found is None else found.offset

    # ----- recovery and truncation ---------------------------------------------------------
    def recover(
        self,
        producer_state: ProducerStateManager | None = None,
        leader_epoch_cache: LeaderEpochFileCache | None = None,
    ) -> int:
        """Rebuild the indexes from the .log, stopping at the first invalid batch; return the bytes cut.
        The leader epoch cache (when given) learns each batch's epoch newer than its latest, as in Kafka, in
        memory (``assign(..., flush=False)``): its loader writes the cache once, when the load is done."""
        self.offset_index.reset()
        self.time_index.reset()
        self.txn_index.reset()
        valid_bytes = 0
        last_index_entry = 0
        self._max_ts_and_offset = UNKNOWN_TIMESTAMP_OFFSET
        try:
            for position, batch in self.log.batches():
                batch.ensure_valid()
                self._ensure_offset_in_range(batch.last_offset)
                if batch.max_timestamp > self.max_timestamp_so_far:
                    self._max_ts_and_offset = TimestampOffset(batch.max_timestamp, batch.last_offset)
                if valid_bytes - last_index_entry > self.index_interval_bytes:
                    self.offset_index.append(batch.last_offset, valid_bytes)
                    self.time_index.maybe_append(self.max_timestamp_so_far, self.shallow_offset_of_max_timestamp_so_far)
                    last_index_entry = valid_bytes
                if batch.magic >= 2:
                    if leader_epoch_cache is not None:
                        epoch, latest = batch.partition_leader_epoch, leader_epoch_cache.latest_epoch
                        if epoch >= 0 and (latest is None or epoch > latest):
                            leader_epoch_cache.assign(epoch, batch.base_offset, flush=False)
                    if producer_state is not None:
                        update_producer_state(producer_state, batch, self)
                valid_bytes += batch.size_in_bytes
                assert position + batch.size_in_bytes == valid_bytes
        except (CorruptRecordError, InvalidRecordError) as e:
            log.warning("Found invalid messages in log segment %s at byte offset %d: %s", self.log.path, valid_bytes, e)
        truncated = self.log.size - valid_bytes
        if truncated > 0:
            log.debug("Truncated %d invalid bytes at the end of segment %s during recovery", truncated, self.log.path)
            self.log.truncate_to(valid_bytes)
        self.offset_index.trim_to_valid_size()
        self.time_index.maybe_append(
            self.max_timestamp_so_far, self.shallow_offset_of_max_timestamp_so_far, skip_full_check=True
        )
        self.time_index.trim_to_valid_size()
        return truncated

    def truncate_to(self, offset: int) -> int:
        """Remove every batch holding offsets >= ``offset``; return the bytes removed."""
        found = self.translate_offset(offset)
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        self.offset_index.resize(self.offset_index.max_index_size)
        self.time_index.resize(self.time_index.max_index_size)
        if found is None:
            return 0
        removed = self.log.truncate_to(found[1])
        if self.log.size == 0:
            self.created_ms = self._clock.milliseconds()
            self.rolling_based_timestamp = None
        self.bytes_since_last_index_entry = 0
        if self.max_timestamp_so_far >= 0:
            self._load_largest_timestamp()
        return removed

    def _load_largest_timestamp(self) -> None:
        last = self.time_index.last_entry
        self._max_ts_and_offset = last
        after = self.largest_timestamp_after(self.offset_index.lookup(last.offset).position)
        if after.timestamp > last.timestamp:
            self._max_ts_and_offset = after

    def sanity_check(self, time_index_newly_created: bool) -> None:
        """Kafka's LogSegment.sanityCheck: the offset index must exist; the txn index must be sane."""
        if not self.offset_index_path().exists():
            raise FileNotFoundError(f"Offset index file {self.offset_index_path()} does not exist")
        if time_index_newly_created:
            self.time_index.resize(0)
        self.offset_index.sanity_check()
        self.time_index.sanity_check()
        self.txn_index.sanity_check()

    def reset_index_sizes(self) -> None:
        """Give the active segment's indexes their full size again (after load or truncation)."""
        self.offset_index.resize(self.max_index_size)
        self.time_index.resize(self.max_index_size)

    # ----- lifecycle -----------------------------------------------------------------------
    def on_become_inactive_segment(self) -> None:
        """On roll: the final time index entry, then trim both indexes and the .log."""
        self.time_index.maybe_append(
            self.max_timestamp_so_far, self.shallow_offset_of_max_timestamp_so_far, skip_full_check=True
        )
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()
        self.log.trim()

    def flush(self) -> None:
        self.log.flush()
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def close(self) -> None:
        if self._max_ts_and_offset is not None and self._max_ts_and_offset != UNKNOWN_TIMESTAMP_OFFSET:
            self.time_index.maybe_append(
                self.max_timestamp_so_far, self.shallow_offset_of_max_timestamp_so_far, skip_full_check=True
            )
        for index in self._opened_indexes():
            index.close()
        self.log.close()
        self.txn_index.close()

    def close_handlers(self) -> None:
        """Close the files without trimming the indexes (Kafka's closeHandlers)."""
        for index in self._opened_indexes():
            index.close_handler()
        self.log.close_handlers()
        self.txn_index.close()

    def _opened_indexes(self) -> list[OffsetIndex | TimeIndex]:
        """The offset and time indexes opened so far (both open lazily)."""
        return [index for index in (self._offset_index, self._time_index) if index is not None]

    def _files(self) -> list[Path]:
        return [self.log.path, self.offset_index_path(), self.time_index_path(), self.txn_index.path]

    def change_file_suffixes(self, old_suffix: str, new_suffix: str) -> None:
        """Rename every file of the segment (e.g. '' → '.deleted', '.swap' → '')."""

        def renamed(path: Path) -> Path:
            name = path.name[: -len(old_suffix)] if old_suffix else path.name
            return path.with_name(name + new_suffix)

        self.log.rename_to(renamed(self.log.path))
        # An unopened index's path is built only when needed: a retention pass renames thousands of segments, and
        # each Path costs microseconds.
        for index, path_of in ((self._offset_index, self.offset_index_path), (self._time_index, self.time_index_path)):
            if index is not None:
                index.rename_to(renamed(index.path))
            elif (path := path_of()).exists():  # not opened yet: move the file itself
                os.rename(path, renamed(path))
        self.txn_index.rename_to(renamed(self.txn_index.path))
        base = self._suffix[: -len(old_suffix)] if old_suffix else self._suffix
        self._suffix = base + new_suffix

    def has_suffix(self, suffix: str) -> bool:
        return self.log.path.name.endswith(suffix)

    def delete_if_exists(self) -> None:
        """Close and delete every file of the segment."""
        self.close_handlers()
        for path in self._files():
            delete_if_exists(path)

    def rename_to_deleted(self) -> None:
        self.change_file_suffixes("", DELETED_SUFFIX)

    def last_modified_ms(self) -> int:
        return self.log.last_modified_ms()


def update_producer_state(producer_state: ProducerStateManager, batch: AnyBatch, segment: LogSegment | None) -> None:
    """Replay one batch into the producer state (LogSegment.updateProducerState)."""
    if batch.has_producer_id:
        info = producer_state.prepare_update(batch.producer_id, origin=AppendOrigin.REPLICATION)
        completed = info.append(batch)
        producer_state.update(info)
        if completed is not None:
            lso = producer_state.last_stable_offset(completed)
            if segment is not None:
                segment.update_txn_index(completed, lso)
            producer_state.complete_txn(completed)
    producer_state.update_map_end_offset(batch.last_offset + 1)
