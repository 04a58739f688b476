"""Transactions as the cleaner meets them (Kafka's ``CleanedTransactionMetadata``, spec section 12).

While the cleaner copies a log it tracks which transactions are aborted (from the ``.txnindex``) and which are
still ongoing, so that it drops the data of aborted transactions and removes a transaction's marker only once no
data of that transaction is left before it.
"""

from __future__ import annotations

import heapq
import logging
import struct
from collections.abc import Iterable

from ..record.batch import RecordBatch
from ..record.types import ControlRecordType
from ..storage.txn_index import AbortedTxn

log = logging.getLogger(__name__)

_CONTROL_KEY = struct.Struct(">hh")


# ----- transactions seen while cleaning -------------------------------------------------------
class CleanedTransactionMetadata:
    """Transactions met in cleaning order: which batches are aborted, which markers may go (Kafka's class)."""

    def __init__(self) -> None:
        self._ongoing_committed: set[int] = set()
        self._ongoing_aborted: dict[int, list] = {}  # pid → [AbortedTxn, last observed batch offset or None]
        self._aborted: list[tuple[int, int, AbortedTxn]] = []  # min-heap by first offset
        self._seq = 0
        self.cleaned_index = None  # the TransactionIndex of the segment being written, if any

    def add_aborted_transactions(self, aborted: Iterable[AbortedTxn]) -> None:
        for txn in aborted:
            self._seq += 1
            heapq.heappush(self._aborted, (txn.first_offset, self._seq, txn))

    def consume_aborted_up_to(self, offset: int) -> None:
        """Start tracking every aborted transaction beginning at or before ``offset`` (as reading a batch does)."""
        self._consume_aborted_up_to(offset)

    def _consume_aborted_up_to(self, offset: int) -> None:
        while self._aborted and self._aborted[0][0] <= offset:
            txn = heapq.heappop(self._aborted)[2]
            self._ongoing_aborted.setdefault(txn.producer_id, [txn, None])

    def on_control_batch_read(self, batch: RecordBatch) -> bool:
        """True when the marker may be discarded (no batch of its transaction remains to be cleaned)."""
        self._consume_aborted_up_to(batch.last_offset)
        kind = control_type(batch)
        if kind is None:
            return True  # an empty control batch was already cleaned
        pid = batch.producer_id
        if kind == ControlRecordType.ABORT:
            state = self._ongoing_aborted.pop(pid, None)
            if state is not None and state[1] is not None:
                if self.cleaned_index is not None:
                    self.cleaned_index.append(state[0])
                return False
            return True
        if kind == ControlRecordType.COMMIT:
            if pid in self._ongoing_committed:
                self._ongoing_committed.discard(pid)
                return False
            return True
        return False

    def on_batch_read(self, batch) -> bool:
        """True when the data batch belongs to an aborted transaction."""
        self._consume_aborted_up_to(batch.last_offset)
        if batch.is_transactional:
            state = self._ongoing_aborted.get(batch.producer_id)
            if state is not None:
                state[1] = batch.last_offset
                return True
            self._ongoing_committed.add(batch.producer_id)
        return False


def control_type(batch: RecordBatch) -> int | None:
    """The control record type of a control batch (None when the batch is empty)."""
    if batch.record_count <= 0:
        return None
    first = next(iter(batch), None)
    if first is None or first.key is None or len(first.key) < 4:
        return -1
    return _CONTROL_KEY.unpack_from(first.key)[1]


def is_last_of_producer(batch, active_producers: dict) -> bool:
    """The batch holds an active producer's last sequence, or is its last marker (kept for fencing)."""
    last = active_producers.get(batch.producer_id)
    if last is None:
        return False
    last_data_offset, epoch = last
    if last_data_offset is not None:
        return batch.last_offset == last_data_offset
    return batch.is_control and batch.producer_epoch == epoch
