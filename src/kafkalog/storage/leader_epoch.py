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
    log that has none writes nothing. The one exception to writing at once: ``assign(..., flush=False)`` (a new
    log's first epoch, written with the log's other new files) leaves the entries ``unflushed`` until ``flush``
    or ``flush_all``; the log that does so flushes them before any record is appended at that epoch.
    """

    def __init__(self, path: str | Path, *, entries: list[EpochEntry] | None = None) -> None:
        self._path = Path(path)
        self._checkpoint: LeaderEpochCheckpointFile | None = None
        self._lock = threading.RLock()
        self._epochs: list[int] = []
        self._offsets: list[int] = []
        self._unflushed = False  # entries assigned with flush=False and not written since
        self._changes = 0  # bumped by every change of the entries (flush_all's staleness check)
        if entries is None:  # every log opens one: read the file only when there is one
            entries = self.checkpoint.read() if os.path.exists(self._path) else []
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
        """Write the entries if some were assigned with ``flush=False`` since the last write (fsynced)."""
        if not self._unflushed:
            return
        with self._lock:
            if self._unflushed:
                self._write()

    @staticmethod
    def flush_all(caches: list[LeaderEpochFileCache]) -> None:
        """``flush`` each of ``caches`` (new partitions' first epochs), their files written in one phased pass
        (CheckpointFile.write_all) without holding the caches' locks meanwhile. A cache that changed during the
        pass is written again as it is now, so no file is left older than its cache."""
        snapshots = []
        for cache in caches:
            with cache._lock:
                if cache._unflushed and cache._path.parent.is_dir():
                    file = cache.checkpoint.checkpoint
                    snapshots.append((cache, cache._changes, (file, file.encode(cache.entries))))
                else:
                    cache._unflushed = False  # nothing to write, or its partition's dir is gone
        if not snapshots:
            return
        CheckpointFile.write_all([write for _, _, write in snapshots])
        for cache, changes, _ in snapshots:
            with cache._lock:
                if cache._changes == changes:
                    cache._unflushed = False
                else:  # changed while the pass wrote: our file may be older than the cache
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

    def truncate_from_end(self, end_offset: int) -> list[EpochEntry]:
        """Remove every entry whose start offset is >= ``end_offset`` (truncateFromEnd); return them."""
        with self._lock:
            removed = []
            if end_offset >= 0:
                while self._offsets and self._offsets[-1] >= end_offset:
                    removed.append(EpochEntry(self._epochs.pop(), self._offsets.pop()))
            if removed:
                self._latest = self._epochs[-1] if self._epochs else UNDEFINED_EPOCH
                self._changes += 1
                self._write(sync=False)
            return removed[::-1]

    def truncate_from_start(self, start_offset: int) -> list[EpochEntry]:
        """Drop the entries before ``start_offset``; the last of them moves up to start there (truncateFromStart,
        exclusive: an entry starting at ``start_offset`` stays as it is)."""
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
            self._write(sync=False)
            return removed

    def clear_and_flush(self) -> None:
        """Remove every entry and write the empty checkpoint (when there is a file or there were entries)."""
        with self._lock:
            had = bool(self._epochs)
            self._epochs.clear()
            self._offsets.clear()
            self._latest = UNDEFINED_EPOCH
            self._changes += 1
            if had or os.path.exists(self._path):
                self._write()

    def _write(self, sync: bool = True) -> None:
        if self._path.parent.is_dir():  # writeIfDirExists: a deleted partition's dir stays gone
            self.checkpoint.write(self.entries, sync)
        if sync:
            self._unflushed = False

    def __repr__(self) -> str:
        return f"LeaderEpochFileCache({self.entries})"


def _monotonic(entries: list[EpochEntry]) -> bool:
    """Entries a cache can take as they are: non-negative, strictly increasing in epoch and start offset."""
    if any(e.epoch < 0 or e.start_offset < 0 for e in entries):
        return False
    return all(a.epoch < b.epoch and a.start_offset < b.start_offset for a, b in itertools.pairwise(entries))
