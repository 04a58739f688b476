"""A partition's leader epoch cache (Kafka's LeaderEpochFileCache), kept in ``leader-epoch-checkpoint``.

Each entry says: leader epoch E wrote its first record at offset S. Followers ask the leader for the end
offset of their latest epoch (OffsetForLeaderEpoch) and truncate to it; consumers ask it to detect a log
that was truncated under them. Kafka keeps the cache in UnifiedLog (storage), and so does kafkalog: the
Log owns one, assigns epochs as batches are appended, and truncates it with the log.
"""

from __future__ import annotations

import bisect
import itertools
import logging
import os
import threading
from pathlib import Path

from .checkpoints import CheckpointFile, EpochEntry, LeaderEpochCheckpointFile

log = logging.getLogger(__name__)

UNDEFINED_EPOCH = -1  # OffsetsForLeaderEpochResponse.UNDEFINED_EPOCH
UNDEFINED_EPOCH_OFFSET = -1  # OffsetsForLeaderEpochResponse.UNDEFINED_EPOCH_OFFSET


class LeaderEpochFileCache:
    """(epoch → start offset) entries of one partition replica, written through to its checkpoint file.

    Invariant: entries are strictly increasing both in epoch and in start offset (an assignment that would
    break that first removes the entries it conflicts with, as Kafka's maybeTruncateNonMonotonicEntries).
    Assignments are written (and fsynced) at once, so the file never misses an entry; truncations are
    written without an fsync (Kafka flushes those asynchronously: a stale file is corrected at the next
    load, which truncates the cache to the log). The file is created on the first write, not on open, so opening a
    log that has none writes nothing. Exceptions to writing at once:

    - ``assign(..., flush=False)`` (a new log's first epoch, written with the log's other new files; the epochs
      recovery learns while a log loads) leaves the entries ``unflushed`` until ``flush`` or ``flush_all``; whoever
      does so flushes them before any record is appended at that epoch (and the loader before the load returns,
      so before the recovery point can move past the batches they came from).
    - ``truncate_from_end/_from_start(..., flush=False)`` (the loader's, Kafka's truncateFrom*AsyncFlush) changes
      the entries in memory only and leaves the file ``stale`` until the next write or ``flush``.

    No write whose bytes equal the file's: the cache, its file's only writer (as in Kafka), knows the bytes the file
    holds (read at open, or its own last write) and skips a write that would put the same bytes back. That is what
    lets a restart write nothing: an empty partition's ``0 0`` entry, dropped by the loader's truncation at the log
    end (offset 0), is assigned again when the partition is made leader, and the file already holds exactly that.

    Why a crash at any point leaves a correct state after the next load (the file itself is always whole: every
    write is ``<file>.tmp`` then rename):

    - A stale file holds what the cache held before the truncation: the same entries plus entries at or past the
      log end, or before the log start. The next load reads it and truncates again, to the log as it is on disk,
      which removes exactly those (Kafka's argument for its asynchronous flush).
    - An entry assigned at the log end (a new leader's) and not yet written starts at or past the log end as
      long as no record follows it, so the next load would remove it anyway; the log writes it before the first
      record at its epoch (``Log.flush_metadata``). Records appended at the cache's latest epoch while the file
      is stale are appended only after that same flush, so the file never names a newer epoch for them.
    - The bytes found at open are taken as durable: they were fsynced by their writer, or are a truncation
      written without fsync, whose loss in a power failure brings back the fsynced, longer file (the first case).
    """

    def __init__(self, path: str | Path, *, entries: list[EpochEntry] | None = None) -> None:
        self._path = Path(path)
        self._checkpoint: LeaderEpochCheckpointFile | None = None
        self._lock = threading.RLock()
        self._epochs: list[int] = []
        self._offsets: list[int] = []
        self._unflushed = False  # entries assigned with flush=False and not written since
        self._stale = False  # entries truncated with flush=False and not written since
        self._changes = 0  # bumped by every change of the entries (flush_all's staleness check)
        # The bytes the file holds as far as this cache knows (read at open or last written by it; None: unknown
        # or no file), and whether they are durable (fsynced, or found at open: see the class comment).
        self._file_bytes: bytes | None = None
        self._file_synced = False
        if entries is None:  # every log opens one: read the file only when there is one
            entries = []
            if os.path.exists(self._path):
                entries, self._file_bytes = self.checkpoint.read_with_bytes()
                self._file_synced = True
        if _monotonic(entries):
            self._epochs = [e.epoch for e in entries]  # monotonic already: no assignment to replay
            self._offsets = [e.start_offset for e in entries]
        else:
            for entry in entries:
                self._assign(entry.epoch, entry.start_offset)
        self._latest = self._epochs[-1] if self._epochs else UNDEFINED_EPOCH

    @property
    def checkpoint(self) -> LeaderEpochCheckpointFile:
        if self._checkpoint is None:
            self._checkpoint = LeaderEpochCheckpointFile(self._path, create=False)
        return self._checkpoint

    # ----- reading ------------------------------------------------------------------------------
    @property
    def latest_epoch(self) -> int | None:
        """The epoch of the last entry (the one being written to), or None when the cache is empty."""
        return self._epochs[-1] if self._epochs else None

    @property
    def entries(self) -> list[EpochEntry]:
        with self._lock:
            return [EpochEntry(e, o) for e, o in zip(self._epochs, self._offsets, strict=True)]

    def __len__(self) -> int:
        return len(self._epochs)

    def earliest_entry(self) -> EpochEntry | None:
        with self._lock:
            return EpochEntry(self._epochs[0], self._offsets[0]) if self._epochs else None

    def latest_entry(self) -> EpochEntry | None:
        with self._lock:
            return EpochEntry(self._epochs[-1], self._offsets[-1]) if self._epochs else None

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) for ``requested_epoch`` (Kafka's endOffsetFor, OffsetForLeaderEpoch's answer).

        The epoch returned is the largest known epoch <= the one requested; its end offset is the start
        offset of the next known epoch, or the log end offset for the latest epoch. An undefined or
        unknown-and-newer epoch gives (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET); an epoch older than every
        known one gives (requested, start offset of the first known epoch).
        """
        with self._lock:
            if requested_epoch == UNDEFINED_EPOCH:
                return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
            if self._epochs and self._epochs[-1] == requested_epoch:
                return requested_epoch, log_end_offset
            higher = bisect.bisect_right(self._epochs, requested_epoch)
            if higher == len(self._epochs):
                return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
            if higher == 0:
                return requested_epoch, self._offsets[0]
            return self._epochs[higher - 1], self._offsets[higher]

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch that wrote ``offset`` (the last entry starting at or before it), None before the first."""
        with self._lock:
            i = bisect.bisect_right(self._offsets, offset)
            return self._epochs[i - 1] if i else None

    # ----- changing -----------------------------------------------------------------------------
    @property
    def unflushed(self) -> bool:
        """Whether entries were assigned with ``flush=False`` and are not in the file yet."""
        return self._unflushed

    @property
    def stale(self) -> bool:
        """Whether entries were truncated with ``flush=False`` and the file may still hold them."""
        return self._stale

    @property
    def pending(self) -> bool:
        """Whether ``flush`` has something to write (``unflushed`` or ``stale``); it may still find the file
        holding the same bytes and write nothing."""
        return self._unflushed or self._stale

    def assign(self, epoch: int, start_offset: int, *, flush: bool = True) -> None:
        """Record that ``epoch`` starts at ``start_offset``; written to the file at once (fsynced) when it changes
        anything, or with ``flush=False`` left for ``flush`` (the caller's promise: before any record of the
        epoch). A repeat of the latest epoch at a later offset changes nothing (Kafka's isUpdateNeeded)."""
        if epoch == self._latest and epoch >= 0 and start_offset >= self._offsets[-1]:
            return  # the append path's common case, without the lock
        with self._lock:
            if self._assign(epoch, start_offset):
                if flush:
                    self._write()
                else:
                    self._unflushed = True

    def flush(self) -> None:
        """Write the entries (fsynced) if some were assigned or truncated with ``flush=False`` since the last
        write, unless the file holds their bytes already."""
        if not (self._unflushed or self._stale):
            return
        with self._lock:
            if self._unflushed or self._stale:
                self._write()

    @staticmethod
    def flush_all(caches: list[LeaderEpochFileCache]) -> None:
        """``flush`` each of ``caches`` (new partitions' first epochs), their files written in one phased pass
        (CheckpointFile.write_all) without holding the caches' locks meanwhile. A cache that changed during the
        pass is written again as it is now, so no file is left older than its cache."""
        snapshots = []
        for cache in caches:
            with cache._lock:
                if not (cache._unflushed or cache._stale):
                    continue
                data = cache.checkpoint.encode(cache.entries)
                if not cache._path.parent.is_dir() or cache._holds(data, sync=True):
                    cache._unflushed = cache._stale = False  # its partition's dir is gone, or nothing to change
                else:
                    snapshots.append((cache, cache._changes, data))
        if not snapshots:
            return
        CheckpointFile.write_all([(cache.checkpoint.checkpoint, data) for cache, _, data in snapshots])
        for cache, changes, data in snapshots:
            with cache._lock:
                if cache._changes == changes:
                    cache._file_bytes, cache._file_synced = data, True
                    cache._unflushed = cache._stale = False
                else:  # changed while the pass wrote: our file may be older than the cache (or newer: re-read)
                    cache._file_bytes = None
                    cache._write()

    def maybe_assign(self, epoch: int, start_offset: int) -> None:
        """``assign`` for a batch's partition leader epoch: negative (unknown) epochs are ignored."""
        if epoch >= 0 and epoch != self._latest:
            self.assign(epoch, start_offset)

    def _assign(self, epoch: int, start_offset: int) -> bool:
        if epoch < 0 or start_offset < 0:
            raise ValueError(
                f"Received invalid partition leader epoch entry EpochEntry(epoch={epoch}, startOffset={start_offset})"
            )
        if self._epochs and epoch == self._epochs[-1] and start_offset >= self._offsets[-1]:
            return False
        removed = []
        while self._epochs and (self._epochs[-1] >= epoch or self._offsets[-1] >= start_offset):
            removed.append(EpochEntry(self._epochs.pop(), self._offsets.pop()))
        if len(removed) > 1 or (removed and removed[0].start_offset != start_offset):
            log.warning(
                "New epoch entry %s caused truncation of conflicting entries %s. Cache now contains %d entries.",
                EpochEntry(epoch, start_offset),
                removed[::-1],
                len(self._epochs),
            )
        self._epochs.append(epoch)
        self._offsets.append(start_offset)
        self._latest = epoch
        self._changes += 1
        return True

    def truncate_from_end(self, end_offset: int, *, flush: bool = True) -> list[EpochEntry]:
        """Remove every entry whose start offset is >= ``end_offset`` (truncateFromEnd); return them. Written at
        once without fsync, or with ``flush=False`` left ``stale`` (see the class comment)."""
        with self._lock:
            removed = []
            if end_offset >= 0:
                while self._offsets and self._offsets[-1] >= end_offset:
                    removed.append(EpochEntry(self._epochs.pop(), self._offsets.pop()))
            if removed:
                self._latest = self._epochs[-1] if self._epochs else UNDEFINED_EPOCH
                self._changes += 1
                self._after_truncation(flush)
            return removed[::-1]

    def truncate_from_start(self, start_offset: int, *, flush: bool = True) -> list[EpochEntry]:
        """Drop the entries before ``start_offset``; the last of them moves up to start there (truncateFromStart,
        exclusive: an entry starting at ``start_offset`` stays as it is). Written as ``truncate_from_end``."""
        with self._lock:
            cut = bisect.bisect_right(self._offsets, start_offset)
            if cut == 0 or (cut == 1 and self._offsets[0] == start_offset):
                return []  # nothing before start_offset
            removed = [EpochEntry(e, o) for e, o in zip(self._epochs[:cut], self._offsets[:cut], strict=True)]
            kept_epoch = self._epochs[cut - 1]
            del self._epochs[:cut]
            del self._offsets[:cut]
            self._epochs.insert(0, kept_epoch)
            self._offsets.insert(0, start_offset)
            self._changes += 1
            self._after_truncation(flush)
            return removed

    def _after_truncation(self, flush: bool) -> None:
        if flush:
            self._write(sync=False)
        else:
            self._stale = True

    def clear_and_flush(self) -> None:
        """Remove every entry and write the empty checkpoint (when there is a file or there were entries)."""
        with self._lock:
            had = bool(self._epochs)
            self._epochs.clear()
            self._offsets.clear()
            self._latest = UNDEFINED_EPOCH
            self._changes += 1
            if had or self._file_bytes is not None or os.path.exists(self._path):
                self._write()

    def _holds(self, data: bytes, sync: bool) -> bool:
        """Whether the file holds ``data`` already (durably, for a ``sync`` write)."""
        return data == self._file_bytes and (self._file_synced or not sync)

    def _write(self, sync: bool = True) -> None:
        """Put the entries in the file (under ``_lock``), unless it holds their bytes already."""
        data = self.checkpoint.encode(self.entries)
        if not self._holds(data, sync) and self._path.parent.is_dir():  # writeIfDirExists: a deleted dir stays gone
            self.checkpoint.write_bytes(data, sync)
            self._file_bytes, self._file_synced = data, sync
        self._stale = False
        if sync:
            self._unflushed = False

    def __repr__(self) -> str:
        return f"LeaderEpochFileCache({self.entries})"


def _monotonic(entries: list[EpochEntry]) -> bool:
    """Entries a cache can take as they are: non-negative, strictly increasing in epoch and start offset."""
    if any(e.epoch < 0 or e.start_offset < 0 for e in entries):
        return False
    return all(a.epoch < b.epoch and a.start_offset < b.start_offset for a, b in itertools.pairwise(entries))
