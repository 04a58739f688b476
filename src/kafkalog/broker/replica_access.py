"""The broker's only door to storage: the partition-layer contract (ReplicaManager, Partition), over a LogManager.

The partition layer (kafkalog.partition: Partition, ReplicaManager) is being built against the contract in
the session plan. Until it lands, this module implements the names the broker calls -- ``get_partition``,
``append_records``, ``fetch_messages``, ``add_listener`` -- on the storage Log for a single node that leads
every partition with itself as the only in-sync replica. Swapping in the real ReplicaManager changes this
file only: nothing else in kafkalog.broker touches a Log.

Invariant: reads never go past the high watermark (read_uncommitted) or the last stable offset
(read_committed); every append that may move a high watermark fires the listeners afterwards.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import KafkaLogError, OffsetOutOfRangeError, UnknownTopicOrPartitionError
from ..manager import LogManager, TopicPartition
from ..storage.log import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, Log
from ..storage.segment import FetchDataInfo, TimestampAndOffset
from ..storage.validator import LogAppendInfo

log = logging.getLogger(__name__)

__all__ = ["AppendResult", "FetchResult", "PartitionView", "ReplicaManager", "TopicPartition"]


class NotEnoughReplicasError(KafkaLogError):
    """Kafka's NotEnoughReplicasException: acks=-1 while the ISR is smaller than min.insync.replicas."""


class InvalidRequiredAcksError(KafkaLogError):
    """Kafka's InvalidRequiredAcksException: acks other than 0, 1 or -1."""


@dataclass(frozen=True)
class AppendResult:
    error: BaseException | None
    info: LogAppendInfo | None


@dataclass(frozen=True)
class FetchResult:
    error: BaseException | None
    info: FetchDataInfo | None
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1


class PartitionView:
    """The leader replica of one partition on this single node (the contract's Partition, reduced).

    Its ISR is this broker alone, so the high watermark is the log end offset after every append (the storage
    Log's auto high watermark).
    """

    def __init__(self, tp: TopicPartition, log_obj: Log, broker_id: int, min_insync_replicas: int) -> None:
        self.topic, self.partition = tp.topic, tp.partition
        self.log = log_obj
        self.leader_epoch = 0
        self.isr = {broker_id}
        self._min_isr = min_insync_replicas

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def last_stable_offset(self) -> int:
        return self.log.last_stable_offset

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    def append_records_to_leader(self, records: bytes, required_acks: int) -> LogAppendInfo:
        if required_acks not in (0, 1, -1):
            raise InvalidRequiredAcksError(f"Invalid required acks {required_acks}: must be 0, 1 or -1")
        min_isr = int(self.log.config.min_insync_replicas)
        if required_acks == -1 and len(self.isr) < min_isr:
            raise NotEnoughReplicasError(
                f"The size of the current ISR {sorted(self.isr)} is insufficient to satisfy the min.isr requirement "
                f"of {min_isr} for partition {self.topic}-{self.partition}"
            )
        return self.log.append(records, leader_epoch=self.leader_epoch)

    def fetch_records(self, fetch_offset: int, max_bytes: int, isolation: str, min_one_message: bool) -> FetchDataInfo:
        return self.log.read(fetch_offset, max_bytes, isolation, min_one_message)

    def fetch_offset_for_timestamp(self, timestamp: int, isolation: str | None) -> TimestampAndOffset | None:
        """ListOffsets: earliest, latest (bounded by the isolation's offset), or the first offset at a timestamp."""
        bound = self.log_end_offset
        if isolation == "read_committed":
            bound = self.last_stable_offset
        elif isolation == "read_uncommitted":
            bound = self.high_watermark
        if timestamp == LATEST_TIMESTAMP:
            return TimestampAndOffset(-1, bound, self.leader_epoch)
        if timestamp == EARLIEST_TIMESTAMP:
            return TimestampAndOffset(-1, self.log_start_offset, self.leader_epoch)
        found = self.log.offset_for_timestamp(timestamp)
        if found is None or found.offset >= bound:
            return None
        return TimestampAndOffset(found.timestamp, found.offset, self.leader_epoch)

    def last_offset_for_leader_epoch(self, epoch: int) -> tuple[int, int]:
        """(epoch, end offset): this node has had one leader epoch (0), which ends at the log end."""
        if epoch > self.leader_epoch:
            return -1, -1
        return self.leader_epoch, self.log_end_offset


class ReplicaManager:
    """The partitions of one LogManager, all led by ``broker_id`` (Kafka's ReplicaManager, single node)."""

    def __init__(self, log_manager: LogManager, broker_id: int = 0, min_insync_replicas: int = 1) -> None:
        self.log_manager = log_manager
        self.broker_id = broker_id
        self.min_insync_replicas = min_insync_replicas
        self._partitions: dict[TopicPartition, PartitionView] = {}
        self._listeners: list[Callable[[TopicPartition], None]] = []
        self._lock = threading.Lock()

    def get_partition(self, topic: str, partition: int) -> PartitionView:
        tp = TopicPartition(topic, partition)
        log_obj = self.log_manager.get_log(topic, partition)
        with self._lock:
            view = self._partitions.get(tp)
            if view is None or view.log is not log_obj:  # a topic deleted and made again has a new Log
                view = PartitionView(tp, log_obj, self.broker_id, self.min_insync_replicas)
                self._partitions[tp] = view
            return view

    def delete_records(self, tp: TopicPartition, offset: int) -> int:
        """DeleteRecords: move the log start offset to ``offset`` (-1: the high watermark); the new low watermark.

        As Kafka's Partition.deleteRecordsOnLeader, an offset beyond the high watermark is OFFSET_OUT_OF_RANGE.
        """
        partition = self.get_partition(tp.topic, tp.partition)
        hw = partition.high_watermark
        target = hw if offset == -1 else offset
        if target < 0 or target > hw:
            raise OffsetOutOfRangeError(
                f"Cannot increment the log start offset to {offset} of partition {tp} since it is larger than the "
                f"high watermark {hw}",
                offset=offset,
            )
        return partition.log.delete_records(target)

    def add_listener(self, callback: Callable[[TopicPartition], None]) -> None:
        """Call ``callback(tp)`` after the high watermark of ``tp`` may have advanced (wakes delayed fetches)."""
        self._listeners.append(callback)

    def _fire(self, tp: TopicPartition) -> None:
        for callback in self._listeners:
            try:
                callback(tp)
            except Exception:
                log.exception("High-watermark listener failed for %s", tp)

    def append_records(
        self, entries: dict[TopicPartition, bytes], required_acks: int
    ) -> dict[TopicPartition, AppendResult]:
        results: dict[TopicPartition, AppendResult] = {}
        for tp, records in entries.items():
            try:
                partition = self.get_partition(tp.topic, tp.partition)
                before = partition.high_watermark
                info = partition.append_records_to_leader(records, required_acks)
                results[tp] = AppendResult(None, info)
                if partition.high_watermark != before:
                    self._fire(tp)
            except Exception as e:  # each partition answers with its own error, as Kafka's appendToLocalLog
                if not isinstance(e, KafkaLogError):
                    log.exception("Error processing append operation on partition %s", tp)
                results[tp] = AppendResult(e, None)
        return results

    def fetch_messages(
        self,
        fetch_infos: dict[TopicPartition, tuple[int, int]],
        isolation: str,
        max_bytes: int,
        min_one_message: bool = True,
    ) -> dict[TopicPartition, FetchResult]:
        """Read each partition from its fetch offset, within its own max bytes and what is left of ``max_bytes``.

        As Kafka's readFromLog: only the first partition that returns data may exceed the limits (KIP-74), so a
        response is never empty because one batch is bigger than a limit.
        """
        results: dict[TopicPartition, FetchResult] = {}
        remaining = max_bytes
        for tp, (offset, partition_max) in fetch_infos.items():
            try:
                partition = self.get_partition(tp.topic, tp.partition)
                info = partition.fetch_records(
                    offset, max(0, min(partition_max, remaining)), isolation, min_one_message
                )
                size = info.records.size
                if size > 0:
                    min_one_message = False
                remaining = max(0, remaining - size)
                results[tp] = FetchResult(
                    None, info, partition.high_watermark, partition.last_stable_offset, partition.log_start_offset
                )
            except UnknownTopicOrPartitionError as e:
                results[tp] = FetchResult(e, None)
            except Exception as e:
                if not isinstance(e, KafkaLogError):
                    log.exception("Error processing fetch operation on partition %s, offset %d", tp, offset)
                view = self._partitions.get(tp)
                if view is None:
                    results[tp] = FetchResult(e, None)
                else:
                    results[tp] = FetchResult(
                        e, None, view.high_watermark, view.last_stable_offset, view.log_start_offset
                    )
        return results
