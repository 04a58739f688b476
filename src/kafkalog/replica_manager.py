"""The partitions of a LogManager and the one path to them (Kafka's ReplicaManager, for one node).

Every append and every read of a LogManager's partitions goes through here: ``LogManager.produce`` and
``consume``, the CLI's ``produce``, and the broker. Each partition answers for itself (an error of one does
not fail the others), acks are checked as Kafka checks them, and reads stop at the high watermark or the
last stable offset. Listeners hear when a partition's high watermark advances (the broker's delayed fetches).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .errors import InvalidRequiredAcksError, KafkaLogError, UnknownTopicOrPartitionError
from .partition import READ_UNCOMMITTED, VALID_ACKS, Partition
from .partition.topic_partition import TopicPartition
from .storage import metadata_changes
from .storage.log import Log
from .storage.producer_state import AppendOrigin
from .storage.segment import FetchDataInfo
from .storage.validator import CLIENT, LogAppendInfo

if TYPE_CHECKING:
    from .manager import LogManager

log = logging.getLogger(__name__)

__all__ = ["AppendResult", "FetchResult", "ReplicaManager"]


@dataclass(frozen=True)
class AppendResult:
    """One partition's answer to an append: ``error`` (an exception, or None) or ``info`` (what was written)."""

    error: BaseException | None
    info: LogAppendInfo | None


@dataclass(frozen=True)
class FetchResult:
    """One partition's answer to a fetch: ``error`` or ``info`` (the records), with its offsets at read time."""

    error: BaseException | None
    info: FetchDataInfo | None
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1


class ReplicaManager:
    """The Partition of every log a LogManager holds, each led by ``broker_id`` with an ISR of itself.

    Invariant: one Partition per loaded log, made leader when the log is registered (so its high watermark is
    its log end offset from the start) and its leader epoch recorded then, as Kafka's makeLeader records it (a
    new log's epoch 0 at offset 0: the first produce writes no checkpoint); a deleted topic's partitions leave
    with its logs. With ``epochs_from_controller`` (a broker of a cluster) that leadership is provisional and
    records no epoch: the controller's state makes each partition leader or follower at its epoch.
    """

    def __init__(self, log_manager: LogManager, broker_id: int = 0) -> None:
        self.log_manager = log_manager
        self.broker_id = broker_id
        self.epochs_from_controller = False
        self._partitions: dict[TopicPartition, Partition] = {}
        self._listeners: list[Callable[[TopicPartition], None]] = []
        self._lock = threading.RLock()

    # ----- partitions (the LogManager tells us of its logs) -------------------------------------------------
    def add_partition(self, tp: TopicPartition, log_obj: Log) -> Partition:
        """Lead ``log_obj`` as ``tp`` (at its latest leader epoch, ISR {broker_id}); the HW moves to its LEO."""
        partition = Partition(log_obj, self.broker_id)
        partition.add_listener(lambda _p, _hw, tp=tp: self._fire(tp))
        with self._lock:
            self._partitions[tp] = partition
        metadata_changes.note_change()
        try:
            partition.make_leader(provisional=self.epochs_from_controller)
        except (OSError, KafkaLogError) as e:  # e.g. its dir failed while loading: it serves nothing, as the dir
            log.error("Could not make %s leader: %s", tp, e)
            if _caused_by_io(e):
                self.log_manager.handle_log_dir_failure(log_obj.directory.parent, e)
        return partition

    def remove_partition(self, tp: TopicPartition) -> None:
        with self._lock:
            partition = self._partitions.pop(tp, None)
        metadata_changes.note_change()
        if partition is not None and partition.log.leader_hw_rule is not None:
            partition.log.leader_hw_rule = None

    def clear(self) -> None:
        with self._lock:
            self._partitions.clear()
        metadata_changes.note_change()

    def get_partition(self, topic: str, partition: int) -> Partition:
        """The partition, or UnknownTopicOrPartitionError."""
        found = self._partitions.get(TopicPartition(topic, partition))
        if found is None:
            raise UnknownTopicOrPartitionError(f"Partition {topic}-{partition} does not exist.")
        return found

    def partition(self, tp: TopicPartition) -> Partition | None:
        """The partition, or None; no TopicPartition built (Metadata looks up every partition of the broker)."""
        return self._partitions.get(tp)

    @property
    def partitions(self) -> dict[TopicPartition, Partition]:
        with self._lock:
            return dict(self._partitions)

    # ----- listeners ------------------------------------------------------------------------------------
    def add_listener(self, callback: Callable[[TopicPartition], None]) -> None:
        """Call ``callback(tp)`` after the high watermark of ``tp`` advances (outside the log's lock)."""
        self._listeners.append(callback)

    def remove_listener(self, callback: Callable[[TopicPartition], None]) -> None:
        if callback in self._listeners:
            self._listeners.remove(callback)

    def _fire(self, tp: TopicPartition) -> None:
        for callback in self._listeners:
            try:
                callback(tp)
            except Exception:
                log.exception("High watermark listener failed for %s", tp)

    # ----- appends --------------------------------------------------------------------------------------
    def append_records(
        self, entries: dict[TopicPartition, object], required_acks: int = -1, origin: AppendOrigin | str = CLIENT
    ) -> dict[TopicPartition, AppendResult]:
        """Append each partition's batches as its leader (Kafka's appendRecords / appendToLocalLog).

        ``required_acks`` outside 0, 1, -1 fails every partition with InvalidRequiredAcksError and writes
        nothing. Otherwise each partition answers on its own: a NotEnoughReplicasError, a record error or an
        unknown partition fails that partition only. With one replica, every ack level is satisfied when this
        returns.
        """
        if required_acks not in VALID_ACKS:
            error = InvalidRequiredAcksError(f"Invalid required acks {required_acks}: must be 0, 1 or -1 (all)")
            return {tp: AppendResult(error, None) for tp in entries}
        results: dict[TopicPartition, AppendResult] = {}
        for tp, records in entries.items():
            try:
                partition = self.get_partition(tp.topic, tp.partition)
                results[tp] = AppendResult(None, partition.append_records_to_leader(records, required_acks, origin))
            except Exception as e:  # each partition answers with its own error
                if not isinstance(e, KafkaLogError | OSError | ValueError | TypeError):
                    log.exception("Error processing append operation on partition %s", tp)
                results[tp] = AppendResult(e, None)
        return results

    def files_pending(self, tps) -> list[TopicPartition]:
        """Those of ``tps`` whose log still waits for its deferred files (a new log's partition.metadata and first
        leader-epoch-checkpoint: DeferredPartitionMetadata; a loaded log's epoch truncation: Log._flush_loaded_epochs),
        which its first append would write first."""
        pending = []
        for tp in tps:
            partition = self._partitions.get(tp)
            if partition is not None and partition.log.metadata_flush is not None:
                pending.append(tp)
        return pending

    def flush_pending_files(self, tps) -> None:
        """Write the deferred files of ``tps`` now (blocking on the creation's background pass if it is running):
        a broker calls this from a worker thread before a produce, so that the appends on its event loop find
        them written. A failure is left for the append to meet and report (it tries again)."""
        for tp in tps:
            partition = self._partitions.get(tp)
            if partition is None:
                continue
            try:
                partition.log.flush_metadata()
            except (OSError, KafkaLogError) as e:
                log.debug("Deferred files of %s not written yet: %s", tp, e)

    # ----- reads ----------------------------------------------------------------------------------------
    def fetch_messages(
        self,
        fetch_infos: dict[TopicPartition, tuple[int, int]],
        isolation: str = READ_UNCOMMITTED,
        max_bytes: int = 50 * 1024 * 1024,
        min_one_message: bool = True,
        fetch_only_from_leader: bool = True,
        current_leader_epochs: Mapping[TopicPartition, int] | None = None,
    ) -> dict[TopicPartition, FetchResult]:
        """Read each partition from its (fetch offset, partition max bytes), within what is left of ``max_bytes``
        (Kafka's readFromLocalLog). Only the first partition that returns data may exceed the limits (KIP-74),
        so a fetch is never empty because one batch is larger than a limit. ``current_leader_epochs`` (a
        follower's fetch) fences each listed partition's read at that leader epoch (Kafka's currentLeaderEpoch)."""
        results: dict[TopicPartition, FetchResult] = {}
        remaining = max_bytes
        for tp, (offset, partition_max) in fetch_infos.items():
            partition = None
            try:
                partition = self.get_partition(tp.topic, tp.partition)
                info = partition.fetch_records(
                    offset,
                    max(0, min(partition_max, remaining)),
                    isolation,
                    min_one_message,
                    fetch_only_from_leader,
                    current_leader_epochs.get(tp) if current_leader_epochs else None,
                )
                size = info.records.size
                if size > 0:
                    min_one_message = False
                remaining = max(0, remaining - size)
                results[tp] = FetchResult(
                    None, info, partition.high_watermark, partition.last_stable_offset, partition.log_start_offset
                )
            except Exception as e:
                if not isinstance(e, KafkaLogError | OSError | ValueError):
                    log.exception("Error processing fetch operation on partition %s, offset %d", tp, offset)
                if partition is None:
                    results[tp] = FetchResult(e, None)
                else:
                    results[tp] = FetchResult(
                        e, None, partition.high_watermark, partition.last_stable_offset, partition.log_start_offset
                    )
        return results


def _caused_by_io(error: BaseException) -> bool:
    return isinstance(error, OSError) or isinstance(error.__cause__, OSError)
