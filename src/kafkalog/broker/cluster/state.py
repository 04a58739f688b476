"""What a broker in a ZooKeeper cluster knows: its settings (server.properties' ZooKeeper and replication keys),
its last view of ZooKeeper, and the leader-side state of each partition it leads (Kafka's Replica state)."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ...coordinator.internal_topic import OFFSETS, TRANSACTION_STATE
from ...manager import TopicPartition
from . import zkdata as zk

OFFSETS_TOPIC = OFFSETS.name
TRANSACTION_STATE_TOPIC = TRANSACTION_STATE.name


def int_property(props: Mapping[str, Any], key: str, default: int) -> int:
    """An int of server.properties (``default`` when absent); ValueError when it is not a number."""
    raw = props.get(key)
    return default if raw is None else int(str(raw).strip())


def _bool(props: Mapping[str, Any], key: str, default: bool) -> bool:
    raw = props.get(key)
    return default if raw is None else str(raw).strip().lower() == "true"


@dataclass(frozen=True)
class ClusterSettings:
    """The ZooKeeper and replication keys of server.properties, with Kafka 3.x's defaults."""

    zookeeper_connect: str
    session_timeout_ms: int = 18000
    connection_timeout_ms: int = 18000
    replica_lag_time_max_ms: int = 30000
    replica_fetch_wait_max_ms: int = 500
    replica_fetch_min_bytes: int = 1
    replica_fetch_max_bytes: int = 1048576
    replica_fetch_response_max_bytes: int = 10485760
    replica_fetch_backoff_ms: int = 1000
    replica_socket_timeout_ms: int = 30000
    replica_socket_receive_buffer_bytes: int = 65536  # SO_RCVBUF of a follower's fetch connection (-1: the OS's)
    unclean_leader_election_enable: bool = False
    default_replication_factor: int = 1
    controlled_shutdown_enable: bool = True
    controlled_shutdown_max_retries: int = 3
    controlled_shutdown_retry_backoff_ms: int = 5000
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_seconds: int = 300
    leader_imbalance_per_broker_percentage: int = 10
    delete_topic_enable: bool = True
    request_timeout_ms: int = 30000
    offsets_topic_replication_factor: int = 3  # Kafka's default; a single node's group coordinator uses 1

    @classmethod
    def from_properties(cls, props: dict[str, str]) -> ClusterSettings | None:
        connect = (props.get("zookeeper.connect") or "").strip()
        if not connect:
            return None
        session = int_property(props, "zookeeper.session.timeout.ms", 18000)
        return cls(
            zookeeper_connect=connect,
            session_timeout_ms=session,
            connection_timeout_ms=int_property(props, "zookeeper.connection.timeout.ms", session),
            replica_lag_time_max_ms=int_property(props, "replica.lag.time.max.ms", 30000),
            replica_fetch_wait_max_ms=int_property(props, "replica.fetch.wait.max.ms", 500),
            replica_fetch_min_bytes=int_property(props, "replica.fetch.min.bytes", 1),
            replica_fetch_max_bytes=int_property(props, "replica.fetch.max.bytes", 1048576),
            replica_fetch_response_max_bytes=int_property(props, "replica.fetch.response.max.bytes", 10485760),
            replica_fetch_backoff_ms=int_property(props, "replica.fetch.backoff.ms", 1000),
            replica_socket_timeout_ms=int_property(props, "replica.socket.timeout.ms", 30000),
            replica_socket_receive_buffer_bytes=int_property(props, "replica.socket.receive.buffer.bytes", 65536),
            unclean_leader_election_enable=str(props.get("unclean.leader.election.enable", "false")).strip().lower()
            == "true",
            default_replication_factor=int_property(props, "default.replication.factor", 1),
            controlled_shutdown_enable=_bool(props, "controlled.shutdown.enable", True),
            controlled_shutdown_max_retries=int_property(props, "controlled.shutdown.max.retries", 3),
            controlled_shutdown_retry_backoff_ms=int_property(props, "controlled.shutdown.retry.backoff.ms", 5000),
            auto_leader_rebalance_enable=_bool(props, "auto.leader.rebalance.enable", True),
            leader_imbalance_check_interval_seconds=int_property(props, "leader.imbalance.check.interval.seconds", 300),
            leader_imbalance_per_broker_percentage=int_property(props, "leader.imbalance.per.broker.percentage", 10),
            delete_topic_enable=_bool(props, "delete.topic.enable", True),
            request_timeout_ms=int_property(props, "controller.socket.timeout.ms", 30000),
            offsets_topic_replication_factor=int_property(props, "offsets.topic.replication.factor", 3),
        )


@dataclass
class ClusterView:
    """What this broker last read from ZooKeeper.

    ``stamp`` vouches for what Metadata answers show of the view (its ``topics``: partitions, replicas and topic
    ids; its partition ``states``: leaders, epochs, ISRs; its live ``brokers``, which make replicas offline and
    leaders unavailable): two views with the same stamp show the same, so the broker's cached Metadata entries
    (broker/handlers/metadata.py) are answered without walking a topic's partitions while the stamp is the one they
    were checked under. A view is stamped when it becomes a node's view (``stamped``) and is not changed after
    (but for its controller id and epoch, which no topic entry shows)."""

    brokers: dict[int, zk.BrokerInfo] = field(default_factory=dict)
    broker_epochs: dict[int, int] = field(default_factory=dict)  # the czxid of each registration (Kafka's)
    deleting: set[str] = field(default_factory=set)  # topics under /admin/delete_topics
    topics: dict[str, zk.TopicAssignment] = field(default_factory=dict)
    configs: dict[str, dict[str, str]] = field(default_factory=dict)
    states: dict[TopicPartition, zk.LeaderAndIsr] = field(default_factory=dict)
    controller_id: int = -1
    controller_epoch: int = 0
    stamp: int = field(default=0, compare=False)


_view_stamps = itertools.count(1)


def stamped(view: ClusterView, previous: ClusterView | None) -> ClusterView:
    """``view``, about to replace ``previous`` as a node's view, with its stamp: ``previous``'s when Metadata
    answers would show the same of both (the same topics, partition states and live brokers: the reconcile pass
    re-reads an unchanged ZooKeeper often), else a new one (never given before, from any thread).

    The comparison walks every partition state once per view read, which already read each one from ZooKeeper;
    the answers then walk none while nothing changed (they compared every topic's state on every request)."""
    if (
        previous is not None
        and previous.stamp
        and (
            view is previous
            or (view.brokers == previous.brokers and view.topics == previous.topics and view.states == previous.states)
        )
    ):
        view.stamp = previous.stamp
    else:
        view.stamp = next(_view_stamps)
    return view


class StampedViewHolder:
    """A holder of a node's cluster view that stamps each view set on it (``stamped``): ZkNode, and what stands in
    for one in tests. Invariant: ``view`` is never changed in place once set; a new read is set as a new view."""

    _view: ClusterView

    @property
    def view(self) -> ClusterView:
        """The last complete read of ZooKeeper (stamped for Metadata answers when it is set: ``stamped``)."""
        return self._view

    @view.setter
    def view(self, view: ClusterView) -> None:
        self._view = stamped(view, getattr(self, "_view", None))


@dataclass
class FollowerProgress:
    """What the leader knows of one follower (Kafka's Replica state): its log end offset and when it was last
    caught up (lastCaughtUpTimeMs), from its fetches."""

    log_end_offset: int = -1
    last_caught_up_ms: float = 0.0
    last_fetch_leader_leo: int = -1
    last_fetch_ms: float = 0.0


@dataclass
class LeaderState:
    """A partition this broker leads: the state znode it last wrote or read, and its followers' progress."""

    state: zk.LeaderAndIsr
    replicas: list[int]
    followers: dict[int, FollowerProgress]
    isr_write_pending: bool = False
