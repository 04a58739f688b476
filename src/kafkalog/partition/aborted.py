"""Aborted transactions, read from the segments' ``.txnindex`` files, and the filter a read_committed
consumer applies with them."""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Iterable

from ..errors import KafkaLogError
from ..layout import TXN_INDEX_SUFFIX
from ..storage.txn_index import ABORTED_TXN_SIZE, AbortedTxn
from .segment_files import segment_path


def read_txn_index(directory: str, base: int) -> list[AbortedTxn]:
    """The aborted transactions in a segment's ``.txnindex``, read-only (absent file: none; partial tail ignored)."""
    path = segment_path(directory, base, TXN_INDEX_SUFFIX)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return []
    whole = len(data) // ABORTED_TXN_SIZE * ABORTED_TXN_SIZE
    try:
        return [AbortedTxn.from_bytes(data, pos) for pos in range(0, whole, ABORTED_TXN_SIZE)]
    except KafkaLogError as e:
        raise e.located(path=path) from None


def collect_aborted_txns(directory: str, bases: list[int], start: int, end: int) -> list[AbortedTxn]:
    """The aborted transactions overlapping [start, end), as Kafka collects them for a fetch
    (UnifiedLog.collectAbortedTransactions): the ``.txnindex`` of the segment holding ``start`` and of the
    following ones, until an entry whose last stable offset reaches ``end`` (no transaction begun before
    ``end`` can be aborted after it)."""
    first = max(0, bisect.bisect_right(bases, start) - 1)
    aborted: list[AbortedTxn] = []
    for base in bases[first:]:
        for txn in read_txn_index(directory, base):
            if txn.last_offset >= start and txn.first_offset < end:
                aborted.append(txn)
            if txn.last_stable_offset >= end:
                return aborted
    return aborted


class AbortedFilter:
    """What a ``read_committed`` consumer drops (Kafka's CompletedFetch): fed every batch of a range in order,
    control batches included, it answers whether to keep it.

    An aborted transaction joins the aborting producers once a batch reaches its first offset; a
    transactional batch of an aborting producer is dropped, and its control batch (the ABORT marker) ends
    the transaction. The same logic as ``kafkalog.storage.log.filter_aborted``, one batch at a time.
    """

    def __init__(self, aborted: Iterable[AbortedTxn]) -> None:
        self._pending = [(t.first_offset, t.producer_id) for t in aborted]
        heapq.heapify(self._pending)
        self._aborting: set[int] = set()

    def keep(self, batch) -> bool:
        while self._pending and self._pending[0][0] <= batch.last_offset:
            self._aborting.add(heapq.heappop(self._pending)[1])
        if batch.is_transactional and batch.producer_id in self._aborting:
            if batch.is_control:
                self._aborting.discard(batch.producer_id)
            return False
        return True
