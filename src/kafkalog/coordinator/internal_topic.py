"""The internal topic a coordinator keeps its state in (``__consumer_offsets`` for the group coordinator,
``__transaction_state`` for the transaction coordinator): which partition holds a key, the topic's creation on
first use, and which of its partitions this broker coordinates.

Both of Kafka's coordinators follow the same rules here (GroupMetadataManager / TransactionStateManager's
partitionFor, getTopicPartitionCount, the internal topic's creation by the broker that is asked first, and
onElection / onResignation in a cluster); kafkalog keeps them once, in ``InternalTopicMixin``.
"""

from __future__ import annotations

import enum
import logging
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

from ..errors import UnknownTopicOrPartitionError
from .errors import Errors


def java_string_hash(text: str) -> int:
    """Java's String.hashCode (over UTF-16 code units, 32-bit signed overflow)."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(key: str, partitions: int) -> int:
    """Kafka's partitionFor: ``Utils.abs(key.hashCode) % partitions`` (Utils.abs(MIN_VALUE) == 0)."""
    h = java_string_hash(key)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


@dataclass(frozen=True)
class InternalTopic:
    """A coordinator's internal topic: its name, and how Kafka's errors name it and its replication-factor config."""

    name: str
    description: str  # as Kafka's error message names it: "offsets topic", "transactions state topic"
    replication_factor_config: str

    def too_few_brokers(self, alive: int, replication_factor: int) -> str:
        """Kafka's message when the topic cannot be created because fewer brokers are alive than its replicas."""
        return (
            f"Number of alive brokers '{alive}' does not meet the required replication factor '{replication_factor}' "
            f"for the {self.description} (configured via '{self.replication_factor_config}'). This error can be "
            "ignored if the cluster is starting up and not all brokers are up yet."
        )


OFFSETS = InternalTopic("__consumer_offsets", "offsets topic", "offsets.topic.replication.factor")
TRANSACTION_STATE = InternalTopic(
    "__transaction_state", "transactions state topic", "transaction.state.log.replication.factor"
)


class Coordination(enum.Enum):
    """Whether this broker coordinates a key's partition: it does, it is loading it, or another broker does."""

    HERE = "here"
    LOADING = "loading"
    ELSEWHERE = "elsewhere"


_COORDINATION_ERRORS = {
    Coordination.HERE: Errors.NONE,
    Coordination.LOADING: Errors.COORDINATOR_LOAD_IN_PROGRESS,
    Coordination.ELSEWHERE: Errors.NOT_COORDINATOR,
}


class InternalTopicMixin(ABC):
    """A coordinator's internal topic and the partitions of it this broker coordinates.

    Invariants:
    - ``owned is None`` on a single node: every partition of the topic is coordinated here. In a cluster
      ``owned`` holds the partitions this broker leads and has loaded, and ``loading`` those it leads and is still
      loading; the two sets are disjoint (``on_election`` moves a partition from ``loading`` to ``owned``).
    - A key lives in partition ``partition_for(key, partition_count())``; the count is the cluster's (as ZooKeeper
      has it) when known, else the local topic's when its partitions are exactly 0..n-1, else the configured
      number of partitions (a copied broker log dir may hold only the partitions that had data).
    - The topic is created at most once, on first use, and only when one replica is asked for: on a single node
      a replication factor above 1 cannot be met, and the coordinator answers COORDINATOR_NOT_AVAILABLE.

    The class using it sets the ClassVars, and answers ``_internal_topic_settings``, ``_load_partition`` and
    ``_drop_partition``.
    """

    INTERNAL_TOPIC: ClassVar[InternalTopic]
    LOG: ClassVar[logging.Logger]

    def __init__(self, log_manager: Any, config: Any, clock: Any, scheduler: Any) -> None:
        self.log_manager = log_manager
        self.replica_manager = log_manager.replica_manager
        self.config = config
        self.clock = clock
        self.scheduler = scheduler
        self._active = False  # between startup and shutdown: timers run only then
        # The partitions this broker coordinates: None = all of them (a single node); in a cluster, those whose
        # leader it is (on_election / on_resignation), minus those still loading.
        self.owned: set[int] | None = None
        self.loading: set[int] = set()
        # In a cluster, the topic's partition count as ZooKeeper has it (this broker may host few of them).
        self.cluster_partition_count: int | None = None

    def now(self) -> int:
        return int(self.clock.milliseconds())

    @abstractmethod
    def _internal_topic_settings(self) -> tuple[int, int, dict[str, str]]:
        """The configured partition count, replication factor and topic configs of the internal topic."""

    @abstractmethod
    def _load_partition(self, partition: int) -> None:
        """Replay ``partition`` of the topic into memory (its keys are coordinated here afterwards)."""

    @abstractmethod
    def _drop_partition(self, partition: int) -> None:
        """Forget the keys of ``partition`` (another broker coordinates them, or they are about to be reloaded)."""

    def internal_topic_partitions(self) -> list[int] | None:
        """The partitions of the internal topic present here, None when the topic does not exist."""
        try:
            return [p.partition for p in self.log_manager.describe_topic(self.INTERNAL_TOPIC.name).partitions]
        except UnknownTopicOrPartitionError:
            return None

    def partition_count(self) -> int:
        """The topic's partition count (see the class invariants)."""
        if self.cluster_partition_count is not None:
            return self.cluster_partition_count
        present = self.internal_topic_partitions()
        if present and sorted(present) == list(range(len(present))):
            return len(present)
        return self._internal_topic_settings()[0]

    def partition_for(self, key: str) -> int:
        """The partition of the internal topic that holds ``key`` (a group id or a transactional id)."""
        return partition_for(key, self.partition_count())

    def create_internal_topic(self) -> bool:
        """Create the internal topic on first use; False when it does not exist and cannot be created."""
        if self.internal_topic_partitions() is not None:
            return True
        partitions, replication_factor, configs = self._internal_topic_settings()
        if replication_factor != 1:
            self.LOG.error("%s", self.INTERNAL_TOPIC.too_few_brokers(1, replication_factor))
            return False
        try:
            self.log_manager.create_topic(self.INTERNAL_TOPIC.name, partitions, configs)
            self.LOG.info("Created internal topic %s with %d partitions", self.INTERNAL_TOPIC.name, partitions)
        except Exception as e:  # a concurrent creation is fine; anything else is the client's retriable error
            if self.internal_topic_partitions() is None:
                self.LOG.warning("Creation of %s failed: %s", self.INTERNAL_TOPIC.name, e)
                return False
        return True

    def coordination(self, key: str) -> Coordination:
        """Whether this broker coordinates ``key``'s partition now."""
        if self.owned is None:
            return Coordination.HERE
        partition = self.partition_for(key)
        if partition in self.loading:
            return Coordination.LOADING
        if partition not in self.owned:
            return Coordination.ELSEWHERE
        return Coordination.HERE

    def coordination_error(self, key: str) -> Errors:
        """Kafka's validateGroupStatus / getTransactionState errors: NOT_COORDINATOR when another broker leads the
        key's partition, COORDINATOR_LOAD_IN_PROGRESS while this one loads it (both send the client to
        FindCoordinator again, or make it retry), NONE when it is coordinated here."""
        return _COORDINATION_ERRORS[self.coordination(key)]

    def _take_over(self, partition: int) -> None:
        """Kafka's onElection in a cluster: reload the keys of ``partition`` from its log and coordinate them from
        now on (COORDINATOR_LOAD_IN_PROGRESS until then)."""
        if self.owned is None:
            return
        self._drop_partition(partition)
        try:
            self._load_partition(partition)
        finally:
            self.loading.discard(partition)
        self.owned.add(partition)

    def on_resignation(self, partition: int) -> None:
        """Kafka's onResignation: another broker leads ``partition`` now; its keys leave this coordinator
        (NOT_COORDINATOR from now on, so the clients find the new coordinator)."""
        if self.owned is None:
            return
        self.loading.discard(partition)
        if partition in self.owned:
            self.owned.discard(partition)
            self._drop_partition(partition)
            self.LOG.info("Resigned as the coordinator of %s-%d", self.INTERNAL_TOPIC.name, partition)

    def begin_loading(self, partition: int) -> None:
        """This broker became the leader of ``partition``: its keys answer COORDINATOR_LOAD_IN_PROGRESS until
        ``on_election`` has loaded them."""
        if self.owned is not None and partition not in self.owned:
            self.loading.add(partition)
