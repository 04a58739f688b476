"""The aborted-transaction index (``.txnindex``), as Kafka's ``TransactionIndex`` and ``AbortedTxn`` keep it.

A plain append-only file of 34-byte big-endian entries (spec section 4.1), one per transaction whose ABORT marker
was written in the segment:

====== ==== =====================================================
offset size field
====== ==== =====================================================
0      2    version int16 (0)
2      8    producerId int64
10     8    firstOffset int64 (the transaction's first data offset)
18     8    lastOffset int64 (the offset of the ABORT marker)
26     8    lastStableOffset int64 (the LSO when the abort completed)
====== ==== =====================================================

The file is created lazily, on the first append. A trailing partial entry (fewer than 34 bytes) is ignored.

Kafka behaviour kept on purpose:

* The reader refuses an entry whose version is above 0, but reads only the *first byte* of the version field, as a
  signed byte: ``00 07`` and ``ff 00`` both pass as version 0 / -1. The refusal is Kafka's generic
  ``KafkaException``, here a plain :class:`~kafkalog.errors.KafkaLogError`, deliberately *not* a
  :class:`~kafkalog.errors.CorruptIndexError` (which log loading answers by rebuilding the index).
* The strictly-increasing check on ``append`` only compares with entries appended (or kept by ``truncate_to``)
  through this object: an index reopened from disk starts with no remembered last offset, like Kafka's.
* Kafka throws ``IllegalArgumentException`` for a non-increasing last offset; here it is
  :class:`TxnOrderError`, a subclass of both :class:`~kafkalog.errors.InvalidOffsetError` and :class:`ValueError`.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple

from kafkalog.errors import CorruptIndexError, InvalidOffsetError, KafkaLogError

from .fileio import file_io
from .files import delete_if_exists
from .index_file import SegmentIndexFile

__all__ = ["ABORTED_TXN_SIZE", "AbortedTxn", "TransactionIndex", "TxnIndexSearchResult", "TxnOrderError"]

CURRENT_VERSION = 0
_ENTRY = struct.Struct(">hqqqq")
ABORTED_TXN_SIZE = _ENTRY.size  # 34
_VERSION_BYTE = struct.Struct(">b")


class TxnOrderError(InvalidOffsetError, ValueError):
    """An appended aborted transaction whose last offset does not exceed the previous one."""


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """One aborted transaction: its producer, first data offset, ABORT marker offset, and the LSO at abort time."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def to_bytes(self) -> bytes:
        """The 34-byte version-0 entry."""
        return _ENTRY.pack(
            CURRENT_VERSION, self.producer_id, self.first_offset, self.last_offset, self.last_stable_offset
        )

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview, offset: int = 0) -> AbortedTxn:
        """Parse the entry at ``offset``; KafkaLogError if its first version byte (signed) is above 0."""
        if len(data) - offset < ABORTED_TXN_SIZE:
            raise ValueError(f"an aborted transaction entry needs {ABORTED_TXN_SIZE} bytes, got {len(data) - offset}")
        version = _VERSION_BYTE.unpack_from(data, offset)[0]
        if version > CURRENT_VERSION:
            raise KafkaLogError(
                f"Unexpected aborted transaction version {version}, current version is {CURRENT_VERSION}",
                position=offset,
            )
        _, producer_id, first_offset, last_offset, last_stable_offset = _ENTRY.unpack_from(data, offset)
        return cls(producer_id, first_offset, last_offset, last_stable_offset)


class TxnIndexSearchResult(NamedTuple):
    """The aborted transactions overlapping a fetch, and whether later segments need not be searched."""

    aborted: list[AbortedTxn]
    is_complete: bool


class TransactionIndex(SegmentIndexFile):
    """A segment's ``.txnindex``: aborted transactions in ABORT-marker order. The file is created on the first
    append (``CREATED_LAZILY``); ``_fd`` is its open descriptor, if any.

    Invariant: entries are appended only with a last offset above the previous entry's (``TxnOrderError``
    otherwise), so the file is sorted by the ABORT markers' offsets and a search can stop at the first entry
    past its range.
    """

    CREATED_LAZILY = True

    def __init__(self, path: str | os.PathLike[str], base_offset: int) -> None:
        super().__init__(path, base_offset)
        self._last_offset: int | None = None
        self._fd: int | None = None

    # ----------------------------------------------------------------- file handling

    def _channel(self) -> int:
        """The open descriptor, opening (and creating) the file if needed."""
        if self._fd is None:
            self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o644)
        return self._fd

    def _size(self) -> int:
        return os.fstat(self._channel()).st_size

    def _entries(self) -> Iterator[tuple[int, AbortedTxn]]:
        """(position, entry) for every whole entry; nothing if the file does not exist."""
        if not self._path.exists():
            return
        fd = self._channel()
        position = 0
        while self._size() - position >= ABORTED_TXN_SIZE:
            data = file_io().pread(fd, ABORTED_TXN_SIZE, position, self._path)
            if len(data) < ABORTED_TXN_SIZE:
                return
            try:
                txn = AbortedTxn.from_bytes(data)
            except KafkaLogError as exc:
                raise type(exc)(exc.reason, position=position, path=str(self._path)) from None
            yield position, txn
            position += ABORTED_TXN_SIZE

    # ----------------------------------------------------------------- writing

    def append(self, aborted_txn: AbortedTxn) -> None:
        """Add an entry, creating the file on first use; its last offset must exceed the previous one."""
        with self._lock:
            if self._last_offset is not None and self._last_offset >= aborted_txn.last_offset:
                raise TxnOrderError(
                    f"The last offset of appended transactions must increase sequentially, but "
                    f"{aborted_txn.last_offset} is not greater than current last offset {self._last_offset}",
                    offset=aborted_txn.last_offset,
                    path=str(self._path),
                )
            self._last_offset = aborted_txn.last_offset
            fd = self._channel()
            data = aborted_txn.to_bytes()
            position = self._size()
            while data:
                written = file_io().pwrite(fd, data, position, self._path)
                data = data[written:]
                position += written

    def truncate_to(self, offset: int) -> None:
        """Cut the file at the first entry whose last offset is >= ``offset``; no such entry → no change."""
        with self._lock:
            new_last: int | None = None
            for position, txn in self._entries():
                if txn.last_offset >= offset:
                    os.ftruncate(self._channel(), position)
                    self._last_offset = new_last
                    return
                new_last = txn.last_offset

    def reset(self) -> None:
        """Remove every entry (the file, if any, stays with 0 bytes)."""
        with self._lock:
            if self._path.exists():
                os.ftruncate(self._channel(), 0)
            self._last_offset = None

    def flush(self) -> None:
        """fsync the file if it is open."""
        with self._lock:
            if self._fd is not None:
                file_io().fsync(self._fd, self._path)

    def close(self) -> None:
        """Close the file; a later read or append reopens it."""
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def delete_if_exists(self) -> bool:
        """Close and delete the file; False if there was none."""
        with self._lock:
            self.close()
            return delete_if_exists(self._path)

    # ----------------------------------------------------------------- reading

    def all_aborted_txns(self) -> list[AbortedTxn]:
        """Every entry, in file order."""
        with self._lock:
            return [txn for _, txn in self._entries()]

    def is_empty(self) -> bool:
        """True when the file is absent or holds no whole entry."""
        with self._lock:
            return next(self._entries(), None) is None

    def collect_aborted_txns(self, fetch_offset: int, upper_bound_offset: int) -> TxnIndexSearchResult:
        """Aborted transactions overlapping [fetch_offset, upper_bound_offset).

        An entry is included when ``last_offset >= fetch_offset`` and ``first_offset < upper_bound_offset``. The
        search is complete (later segments need not be read) at the first entry whose ``last_stable_offset`` is
        >= ``upper_bound_offset``; that entry itself is included when it overlaps.
        """
        with self._lock:
            aborted: list[AbortedTxn] = []
            for _, txn in self._entries():
                if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound_offset:
                    aborted.append(txn)
                if txn.last_stable_offset >= upper_bound_offset:
                    return TxnIndexSearchResult(aborted, True)
            return TxnIndexSearchResult(aborted, False)

    def sanity_check(self) -> None:
        """CorruptIndexError if any entry's last offset is below the segment's base offset."""
        with self._lock:
            for position, txn in self._entries():
                if txn.last_offset < self._base_offset:
                    raise CorruptIndexError(
                        f"Last offset of aborted transaction {txn} in index is less than start offset "
                        f"{self._base_offset}",
                        position=position,
                        path=str(self._path),
                    )

    def __repr__(self) -> str:
        return f"TransactionIndex(path={str(self._path)!r}, base_offset={self._base_offset})"
