"""One replica of one partition (Kafka's cluster.Partition): leadership, the ISR, the high watermark, acks.

The storage ``Log`` holds the records; this layer decides what is committed. As Kafka's leader does, a
``Partition`` stamps its leader epoch on every append, refuses an ``acks=-1`` append before writing anything
when the ISR is smaller than ``min.insync.replicas``, advances the high watermark to the smallest log end
offset over the ISR after every append and on becoming leader (``maybeIncrementLeaderHW``), and serves reads
only up to the high watermark (``read_uncommitted``) or the last stable offset (``read_committed``).

A single node leads every partition with an ISR of itself: its high watermark is its log end offset, so
after a restart (where the checkpointed high watermark may lag, e.g. after ``kill -9``) every record the log
holds becomes visible as soon as the partition is made leader.
"""

from __future__ import annotations

import logging
import operator
import threading
from collections.abc import Callable, Iterator
from typing import Any

from ..errors import (
    FencedLeaderEpochError,
    InvalidRequiredAcksError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    UnknownLeaderEpochError,
)
from ..record.types import Record
from ..storage import metadata_changes
from ..storage.leader_epoch import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
from ..storage.log import (
    DEFAULT_FETCH_BYTES,
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    Log,
    consumer_records,
)
from ..storage.producer_entry import ProducerStateEntry
from ..storage.producer_state import AppendOrigin
from ..storage.segment import FetchDataInfo, TimestampAndOffset
from ..storage.txn_index import AbortedTxn
from ..storage.validator import CLIENT, LogAppendInfo

log = logging.getLogger(__name__)

VALID_ACKS = (0, 1, -1)
READ_UNCOMMITTED = "read_uncommitted"
READ_COMMITTED = "read_committed"
LOG_END = "log_end"

HighWatermarkListener = Callable[["Partition", int], None]


def _of_log(name: str) -> Any:
    """A read-only attribute of a Partition that is its log's attribute ``name``: the offsets a partition reports
    (high watermark, last stable offset, log start and end) are its log's, read when asked. A property whose
    getter is an ``operator.attrgetter``, called without a Python frame."""
    return property(operator.attrgetter(f"log.{name}"), doc=f"The log's ``{name}``.")


class Partition:
    """The local replica of ``log``'s partition, on broker ``local_broker_id``.

    Invariants: the high watermark never exceeds the smallest log end offset over the ISR and never moves
    back except by truncation; reads for consumers never pass it (or the last stable offset); an ``acks=-1``
    append with ``|ISR| < min.insync.replicas`` writes nothing. The partition installs its high-watermark
    rule on the log (``Log.leader_hw_rule``), so every append to the log, through this class or not, moves
    the high watermark by that rule (under the log's lock, on the append's path: a comparison or two).
    """

    def __init__(self, log_obj: Log, local_broker_id: int = 0) -> None:
        self.log = log_obj
        self.topic = log_obj.topic
        self.partition = log_obj.partition
        self.local_broker_id = local_broker_id
        self.leader_replica_id: int | None = None
        self._leader_epoch = -1
        self._isr: frozenset[int] = frozenset()
        self._remote_leos: dict[int, int] = {}  # follower replica id -> its log end offset (replication)
        self._listeners: list[HighWatermarkListener] = []
        self._lock = threading.RLock()  # Kafka's leaderIsrUpdateLock: leadership and ISR changes

    # ----- state ------------------------------------------------------------------------------------
    @property
    def leader_epoch(self) -> int:
        return self._leader_epoch

    @property
    def isr(self) -> set[int]:
        return set(self._isr)

    @property
    def is_leader(self) -> bool:
        return self.leader_replica_id == self.local_broker_id

    high_watermark: int = _of_log("high_watermark")
    last_stable_offset: int = _of_log("last_stable_offset")
    log_start_offset: int = _of_log("log_start_offset")
    log_end_offset: int = _of_log("log_end_offset")

    @property
    def min_insync_replicas(self) -> int:
        return int(self.log.config.min_insync_replicas)

    def add_listener(self, callback: HighWatermarkListener) -> None:
        """Call ``callback(partition, new_high_watermark)`` after the high watermark advances (outside the log's
        lock; the broker's delayed fetches wait on it)."""
        self._listeners.append(callback)

    def _fire(self, high_watermark: int) -> None:
        for callback in self._listeners:
            try:
                callback(self, high_watermark)
            except Exception:
                log.exception("High watermark listener failed for %s-%s", self.topic, self.partition)

    # ----- leadership ---------------------------------------------------------------------------------
    def make_leader(
        self,
        leader_epoch: int | None = None,
        isr: set[int] | frozenset[int] | None = None,
        *,
        provisional: bool = False,
    ) -> bool:
        """Become the leader at ``leader_epoch`` with ``isr`` (Kafka's Partition.makeLeader); return whether
        the epoch is new.

        ``leader_epoch`` None keeps the log's latest epoch (a node restarting as the leader it was: 0 for a
        new log); ``isr`` None is this broker alone. As Kafka's makeLeader does, the epoch is recorded in the
        leader epoch cache at the log end offset before the partition serves as leader (maybeAssignEpochStartOffset:
        nothing is written when it is the cache's latest epoch already), so the first append at that epoch finds
        it current and writes no checkpoint. ``provisional`` (a cluster's broker registering a log before the
        controller's state names the leader) records no epoch: the controller's will be, when it comes. Then the
        high watermark is advanced (maybeIncrementLeaderHW).
        """
        with self._lock:
            if leader_epoch is None:
                latest = self.log.leader_epoch_cache.latest_epoch
                leader_epoch = max(latest if latest is not None else 0, self._leader_epoch, 0)
            if leader_epoch < 0:
                raise ValueError(f"Invalid leader epoch {leader_epoch} for partition {self.topic}-{self.partition}")
            isr = frozenset(isr) if isr is not None else frozenset((self.local_broker_id,))
            if self.local_broker_id not in isr:
                raise ValueError(f"The leader {self.local_broker_id} must be in the ISR {sorted(isr)}")
            latest = self.log.leader_epoch_cache.latest_epoch
            if not provisional and (latest is None or leader_epoch > latest):
                # Before leading: no append at this epoch may come first (one older than the cache's latest
                # epoch is never assigned, which would drop the newer entries).
                self.log.maybe_assign_epoch_start_offset(leader_epoch, self.log.log_end_offset)
            is_new_epoch = leader_epoch > self._leader_epoch
            self._leader_epoch = leader_epoch
            self._isr = isr
            self._remote_leos = {r: self._remote_leos.get(r, 0) for r in isr if r != self.local_broker_id}
            self.leader_replica_id = self.local_broker_id
            metadata_changes.note_change()
            self.log.leader_hw_rule = self._advance_high_watermark
        self.maybe_increment_leader_hw()
        return is_new_epoch

    def make_follower(self, leader_id: int, leader_epoch: int) -> None:
        """Follow ``leader_id`` at ``leader_epoch``: no appends as leader, no HW moves on local appends."""
        with self._lock:
            self._leader_epoch = leader_epoch
            self.leader_replica_id = leader_id
            self._isr = frozenset()
            self._remote_leos.clear()
            metadata_changes.note_change()
            if self.log.leader_hw_rule == self._advance_high_watermark:
                self.log.leader_hw_rule = _no_rule

    def update_follower_log_end_offset(self, replica_id: int, log_end_offset: int) -> bool:
        """A follower's fetch told us its log end offset: the high watermark may move (updateFollowerFetchState)."""
        with self._lock:
            if replica_id in self._remote_leos:
                self._remote_leos[replica_id] = log_end_offset
        return self.maybe_increment_leader_hw()

    def update_isr(self, isr: set[int] | frozenset[int], known_leos: dict[int, int] | None = None) -> bool:
        """The leader's ISR after a committed shrink or expansion (Kafka's Partition.sendAlterPartitionRequest
        outcome, here a ZooKeeper write): a new member starts from its last known log end offset
        (``known_leos``). Return whether the high watermark moved (a shrink may let it advance)."""
        with self._lock:
            if not self.is_leader:
                return False
            isr = frozenset(isr) | {self.local_broker_id}
            leos = known_leos or {}
            self._isr = isr
            self._remote_leos = {r: self._remote_leos.get(r, leos.get(r, 0)) for r in isr if r != self.local_broker_id}
            metadata_changes.note_change()
        return self.maybe_increment_leader_hw()

    def update_follower_high_watermark(self, leader_high_watermark: int) -> int:
        """A follower takes the leader's high watermark from a fetch response, capped at its own log end
        (Kafka's ReplicaFetcherThread.processPartitionData); return the new high watermark."""
        return self.log.update_high_watermark(min(leader_high_watermark, self.log.log_end_offset))

    def _candidate_high_watermark(self) -> int:
        new_hw = self.log.log_end_offset
        for leo in self._remote_leos.values():
            if leo < new_hw:
                new_hw = leo
        return new_hw

    def _advance_high_watermark(self) -> None:
        """The log's after-append rule, run under the log's lock: move the HW up to the ISR's smallest LEO."""
        lg = self.log
        new_hw = lg._log_end_offset if not self._remote_leos else self._candidate_high_watermark()
        if new_hw > lg._high_watermark:
            lg._set_high_watermark(new_hw)

    def maybe_increment_leader_hw(self) -> bool:
        """Move the high watermark up to the smallest log end offset over the ISR (Kafka's
        maybeIncrementLeaderHW); return whether it moved. Listeners hear of the new value."""
        if not self.is_leader:
            return False
        lg = self.log
        with lg._lock:
            old = lg.high_watermark
            new_hw = self._candidate_high_watermark()
            if new_hw <= old:
                return False
            current = lg.update_high_watermark(new_hw)
        if current > old:
            self._fire(current)
            return True
        return False

    # ----- appends ------------------------------------------------------------------------------------
    def append_records_to_leader(
        self, records, required_acks: int = -1, origin: AppendOrigin | str = CLIENT
    ) -> LogAppendInfo:
        """Append as the leader, stamping the leader epoch (Kafka's appendRecordsToLeader).

        ``required_acks`` is the producer's acks: 0, 1 or -1 (all in-sync replicas); anything else raises
        InvalidRequiredAcksError. With -1 and an ISR smaller than ``min.insync.replicas``, NotEnoughReplicasError
        is raised before anything is written. With this node the only replica, -1 is satisfied as soon as the
        append returns: the high watermark has moved past it.
        """
        if required_acks not in VALID_ACKS:
            raise InvalidRequiredAcksError(f"Invalid required acks {required_acks}: must be 0, 1 or -1 (all)")
        if self.leader_replica_id != self.local_broker_id:
            raise NotLeaderOrFollowerError(
                f"Leader not local for partition {self.topic}-{self.partition} on broker {self.local_broker_id}"
            )
        lg = self.log
        if required_acks == -1:
            min_isr = int(lg.config.min_insync_replicas)
            if len(self._isr) < min_isr:
                raise NotEnoughReplicasError(
                    f"The size of the current ISR {sorted(self._isr)} is insufficient to satisfy the min.isr "
                    f"requirement of {min_isr} for partition {self.topic}-{self.partition}"
                )
        before = lg._high_watermark
        info = lg.append(records, origin=origin, leader_epoch=self._leader_epoch)
        after = lg._high_watermark
        if after > before and self._listeners:
            self._fire(after)
        return info

    # ----- reads --------------------------------------------------------------------------------------
    def _check_epoch(self, current_leader_epoch: int | None, fetch_only_from_leader: bool) -> None:
        """Kafka's localLogWithEpochOrThrow: the requester's view of the leader epoch must be ours."""
        if current_leader_epoch is not None and current_leader_epoch >= 0:
            if current_leader_epoch < self._leader_epoch:
                raise FencedLeaderEpochError(
                    f"The leader epoch in the request {current_leader_epoch} is older than the current leader epoch "
                    f"{self._leader_epoch} of partition {self.topic}-{self.partition}"
                )
            if current_leader_epoch > self._leader_epoch:
                raise UnknownLeaderEpochError(
                    f"The leader epoch in the request {current_leader_epoch} is newer than the current leader epoch "
                    f"{self._leader_epoch} of partition {self.topic}-{self.partition}"
                )
        if fetch_only_from_leader and not self.is_leader:
            raise NotLeaderOrFollowerError(
                f"Leader not local for partition {self.topic}-{self.partition} on broker {self.local_broker_id}"
            )

    def fetch_records(
        self,
        fetch_offset: int,
        max_bytes: int = DEFAULT_FETCH_BYTES,
        isolation: str = READ_UNCOMMITTED,
        min_one_message: bool = True,
        fetch_only_from_leader: bool = True,
        current_leader_epoch: int | None = None,
    ) -> FetchDataInfo:
        """Read from ``fetch_offset``, bounded by the high watermark (``read_uncommitted``), the last stable offset
        (``read_committed``) or the log end (``log_end``: a follower's fetch). OffsetOutOfRangeError outside
        [log start, log end]."""
        self._check_epoch(current_leader_epoch, fetch_only_from_leader)
        return self.log.read(fetch_offset, max_bytes, isolation, min_one_message)

    def records(self, from_offset: int | None = None, isolation: str = READ_UNCOMMITTED) -> Iterator[Record]:
        """Every record from ``from_offset`` (default the log start) up to the isolation's bound, as a consumer
        sees them (control records out; with read_committed, aborted transactions out): fetch after fetch."""
        offset = self.log.log_start_offset if from_offset is None else from_offset

        def fetch(at: int) -> tuple[list, list[AbortedTxn] | None]:
            data = self.fetch_records(at, DEFAULT_FETCH_BYTES, isolation, True, False)
            return list(data.records.batches()), data.aborted_transactions

        yield from consumer_records(fetch, offset, committed=isolation in (READ_COMMITTED, "txn_committed"))

    def fetch_offset_for_timestamp(
        self,
        timestamp: int,
        isolation: str | None = None,
        current_leader_epoch: int | None = None,
        fetch_only_from_leader: bool = True,
    ) -> TimestampAndOffset | None:
        """ListOffsets (Kafka's fetchOffsetForTimestamp): LATEST is the last fetchable offset for the isolation
        (HW, LSO, or the log end for None); EARLIEST is the log start offset as it is, even when nothing is
        fetchable yet (an empty log answers 0, as Kafka's); answers by timestamp past the last fetchable offset
        are withheld (None)."""
        self._check_epoch(current_leader_epoch, fetch_only_from_leader)
        if isolation == READ_COMMITTED:
            last_fetchable = self.log.last_stable_offset
        elif isolation == READ_UNCOMMITTED:
            last_fetchable = self.log.high_watermark
        else:
            last_fetchable = self.log.log_end_offset
        if timestamp == LATEST_TIMESTAMP:
            return TimestampAndOffset(-1, last_fetchable, self._leader_epoch)
        found = self.log.offset_for_timestamp(timestamp)
        bounded = timestamp not in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP)
        if found is None or (bounded and isolation is not None and found.offset >= last_fetchable):
            return None
        if found.leader_epoch is None:
            epoch = self.log.leader_epoch_cache.epoch_for_offset(found.offset)
            found = TimestampAndOffset(found.timestamp, found.offset, epoch)
        return found

    def last_offset_for_leader_epoch(
        self, leader_epoch: int, current_leader_epoch: int | None = None, fetch_only_from_leader: bool = True
    ) -> tuple[int, int]:
        """(epoch, end offset) for ``leader_epoch`` (OffsetForLeaderEpoch): the largest known epoch <= it and the
        start of the next one, or the log end for the latest; (-1, -1) when unknown (UNDEFINED_EPOCH/_OFFSET)."""
        self._check_epoch(current_leader_epoch, fetch_only_from_leader)
        lg = self.log
        with lg._lock:
            epoch, end = lg.leader_epoch_cache.end_offset_for(leader_epoch, lg.log_end_offset)
        if end == UNDEFINED_EPOCH_OFFSET:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        return epoch, end

    def active_producer_state(self) -> list[ProducerStateEntry]:
        """The active producers of this replica (Kafka's Partition.activeProducerState, for DescribeProducers):
        copies of each producer's epoch, last sequence and timestamp, coordinator epoch and open transaction's
        first offset. Any replica holding the log answers, leader or follower, as Kafka's does (the tool's
        ``--broker-id`` asks a chosen replica)."""
        return self.log.active_producers()

    # ----- truncation ---------------------------------------------------------------------------------
    def truncate_to(self, offset: int) -> bool:
        """Remove every record at or after ``offset`` (a follower's truncation); the HW and the leader epoch cache
        follow. Return whether anything went."""
        return self.log.truncate_to(offset)

    def truncate_to_epoch_end(self, leader_epoch: int, leader_end_offset: int) -> int:
        """Truncate as a follower does with the leader's OffsetForLeaderEpoch answer (Kafka's
        AbstractFetcherThread.getOffsetTruncationState): to the smaller of the leader's and our end offset when we
        know the epoch, to our end of our largest epoch below it when we diverged, to the high watermark on an
        undefined answer. Return the offset truncated to."""
        if leader_epoch == UNDEFINED_EPOCH or leader_end_offset == UNDEFINED_EPOCH_OFFSET:
            target = self.log.high_watermark
        else:
            own_epoch, own_end = self.log.leader_epoch_cache.end_offset_for(leader_epoch, self.log.log_end_offset)
            if own_end == UNDEFINED_EPOCH_OFFSET:  # no epoch in common is known here
                target = leader_end_offset
            elif own_epoch != leader_epoch:  # diverged: our end of the largest epoch below the leader's
                target = own_end
            else:
                target = min(leader_end_offset, own_end)
        target = min(target, self.log.log_end_offset)
        self.log.truncate_to(target)
        return target

    def __repr__(self) -> str:
        return (
            f"Partition({self.topic}-{self.partition}, leader={self.leader_replica_id}, epoch={self._leader_epoch}, "
            f"isr={sorted(self._isr)}, hw={self.high_watermark}, leo={self.log_end_offset})"
        )


def _no_rule() -> None:
    """The after-append HW rule of a follower's log: appends move no high watermark."""
