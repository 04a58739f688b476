"""A broker's membership of a ZooKeeper-coordinated cluster (Kafka's KafkaZkClient, KafkaController, and the
replica manager's leader/follower transitions and ISR maintenance, ZooKeeper mode).

Everything runs on the broker's event loop. ZooKeeper calls (kazoo, blocking) run in worker threads; kazoo's
watch callbacks only mark the view stale (``request_resync``), and one reconcile task then re-reads the cluster
(brokers, topics, partition states, the controller) and brings this broker to it: registered, leading what the
state znodes say it leads, following the rest with a fetcher per leader, and, if it holds ``/controller``,
electing leaders. Level-triggered: a lost watch or a reconnect costs one more read, never a missed change; a
timer resyncs as well.

Leader-side state (which followers are caught up and since when) lives in ``LeaderState``: it decides ISR
shrinks (a follower not caught up for ``replica.lag.time.max.ms``) and expansions (a follower that reached the
high watermark), each a conditional write of the state znode on its version.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ...errors import (
    CoordinatorNotAvailableError,
    InvalidReplicationFactorError,
    NotControllerError,
    NotEnoughReplicasAfterAppendError,
    NotLeaderOrFollowerError,
    RequestTimedOutError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)
from ...logdir import new_uuid, validate_topic_name
from ...manager import TopicPartition
from ...storage.config import LogConfig
from . import zkdata as zk
from .assignment import assign_replicas
from .controller import ControllerActions
from .fetcher import ReplicaFetcher
from .interbroker import InterBrokerSecurity

log = logging.getLogger("kafka.cluster")

OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_STATE_TOPIC = "__transaction_state"


def _int(props: dict[str, str], key: str, default: int) -> int:
    raw = props.get(key)
    return default if raw is None else int(str(raw).strip())


def _bool(props: dict[str, str], key: str, default: bool) -> bool:
    raw = props.get(key)
    return default if raw is None else str(raw).strip().lower() == "true"


def _checked_assignment(given: dict[int, list[int]], brokers: list[int]) -> dict[int, list[int]]:
    """An explicit replica assignment as Kafka's AdminZkClient.validateTopicCreate checks it: partitions 0..n-1,
    one replication factor, no broker twice in a partition, every broker registered."""
    from ...errors import InvalidReplicaAssignmentError

    if sorted(given) != list(range(len(given))):
        raise InvalidReplicaAssignmentError("Partitions should be a consecutive 0-based integer sequence")
    sizes = {len(r) for r in given.values()}
    if len(sizes) != 1 or 0 in sizes:
        raise InvalidReplicaAssignmentError("All partitions should have the same number of replicas")
    for p, replicas in given.items():
        if len(set(replicas)) != len(replicas):
            raise InvalidReplicaAssignmentError(f"Duplicate replica assignment found: {p} -> {replicas}")
        unknown = sorted(set(replicas) - set(brokers))
        if unknown:
            raise InvalidReplicaAssignmentError(f"Unknown broker(s) in replica assignment: {unknown}.")
    return {p: list(r) for p, r in sorted(given.items())}


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
        session = _int(props, "zookeeper.session.timeout.ms", 18000)
        return cls(
            zookeeper_connect=connect,
            session_timeout_ms=session,
            connection_timeout_ms=_int(props, "zookeeper.connection.timeout.ms", session),
            replica_lag_time_max_ms=_int(props, "replica.lag.time.max.ms", 30000),
            replica_fetch_wait_max_ms=_int(props, "replica.fetch.wait.max.ms", 500),
            replica_fetch_min_bytes=_int(props, "replica.fetch.min.bytes", 1),
            replica_fetch_max_bytes=_int(props, "replica.fetch.max.bytes", 1048576),
            replica_fetch_response_max_bytes=_int(props, "replica.fetch.response.max.bytes", 10485760),
            replica_fetch_backoff_ms=_int(props, "replica.fetch.backoff.ms", 1000),
            replica_socket_timeout_ms=_int(props, "replica.socket.timeout.ms", 30000),
            unclean_leader_election_enable=str(props.get("unclean.leader.election.enable", "false")).strip().lower()
            == "true",
            default_replication_factor=_int(props, "default.replication.factor", 1),
            controlled_shutdown_enable=_bool(props, "controlled.shutdown.enable", True),
            controlled_shutdown_max_retries=_int(props, "controlled.shutdown.max.retries", 3),
            controlled_shutdown_retry_backoff_ms=_int(props, "controlled.shutdown.retry.backoff.ms", 5000),
            auto_leader_rebalance_enable=_bool(props, "auto.leader.rebalance.enable", True),
            leader_imbalance_check_interval_seconds=_int(props, "leader.imbalance.check.interval.seconds", 300),
            leader_imbalance_per_broker_percentage=_int(props, "leader.imbalance.per.broker.percentage", 10),
            delete_topic_enable=_bool(props, "delete.topic.enable", True),
            request_timeout_ms=_int(props, "controller.socket.timeout.ms", 30000),
            offsets_topic_replication_factor=_int(props, "offsets.topic.replication.factor", 3),
        )


@dataclass
class ClusterView:
    """What this broker last read from ZooKeeper."""

    brokers: dict[int, zk.BrokerInfo] = field(default_factory=dict)
    broker_epochs: dict[int, int] = field(default_factory=dict)  # the czxid of each registration (Kafka's)
    deleting: set[str] = field(default_factory=set)  # topics under /admin/delete_topics
    topics: dict[str, zk.TopicAssignment] = field(default_factory=dict)
    configs: dict[str, dict[str, str]] = field(default_factory=dict)
    states: dict[TopicPartition, zk.LeaderAndIsr] = field(default_factory=dict)
    controller_id: int = -1
    controller_epoch: int = 0


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


class ClusterNode:
    """This broker in a ZooKeeper cluster. Invariant: a local partition is leader exactly when the last state
    znode read says this broker leads it at that epoch; every other local replica is a follower (fetching if its
    leader is known)."""

    def __init__(self, server, settings: ClusterSettings) -> None:
        from kazoo.client import KazooClient

        self.server = server
        self.settings = settings
        self.broker_id: int = server.node_id
        self.inter_broker = InterBrokerSecurity.from_config(server.config)
        self.replica_manager = server.replica_manager
        self.view = ClusterView()
        self.leaders: dict[TopicPartition, LeaderState] = {}
        self.fetchers: dict[int, ReplicaFetcher] = {}
        self.zk = KazooClient(
            hosts=settings.zookeeper_connect,
            timeout=settings.session_timeout_ms / 1000.0,
            connection_retry={"max_tries": -1, "delay": 0.2, "max_delay": 2.0},
            command_retry={"max_tries": 3, "delay": 0.2, "max_delay": 1.0},
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self._dirty = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._watched_states: set[str] = set()
        self._watched_topics: set[str] = set()
        self._stopping = False
        self.controller = ControllerActions(self)
        self.broker_epoch = -1  # the czxid of this broker's registration znode (Kafka's broker epoch)
        # Set once this broker asked the controller to move its leaderships away: it starts no more fetchers,
        # so that it does not rejoin an ISR it is leaving.
        self.in_controlled_shutdown = False
        # (topic, topic id) of the replicas a StopReplica deleted here: never re-created from an older view.
        self.deleted_replicas: set[tuple[str, str | None]] = set()
        self._stop_replica_inflight: set[int] = set()
        self._side_tasks: set[asyncio.Task[None]] = set()
        self.registered = asyncio.Event()
        # Set after the first complete pass: until then the view is empty (no brokers, no controller), and a
        # client told "no controller" may not ask again for minutes (librdkafka's admin client waits).
        self.ready = asyncio.Event()

    # ----- lifecycle ------------------------------------------------------------------------------------
    async def connect(self) -> str:
        """Connect to ZooKeeper, create Kafka's top-level paths, and return the cluster id (made if new)."""
        self._loop = asyncio.get_running_loop()
        await asyncio.to_thread(self.zk.start, self.settings.connection_timeout_ms / 1000.0)
        return await asyncio.to_thread(self._init_paths)

    def _init_paths(self) -> str:
        from kazoo.exceptions import NodeExistsError

        for path in zk.PERSISTENT_PATHS:
            self.zk.ensure_path(path)
        with contextlib.suppress(NodeExistsError):
            self.zk.create(zk.CLUSTER_ID, zk.encode_cluster_id(new_uuid()), makepath=True)
        data, _ = self.zk.get(zk.CLUSTER_ID)
        return zk.decode_cluster_id(data)

    async def start(self) -> None:
        """Register this broker (after the socket server listens) and start following the cluster."""
        self.zk.add_listener(self._on_zk_state)
        self.zk.ChildrenWatch(zk.BROKER_IDS, self._watch_fired)
        self.zk.ChildrenWatch(zk.BROKER_TOPICS, self._watch_fired)
        self.zk.DataWatch(zk.CONTROLLER, self._watch_fired)
        self.zk.ChildrenWatch(zk.DELETE_TOPICS, self._watch_fired)
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._reconcile_loop(), name="cluster-reconcile"))
        self._tasks.append(loop.create_task(self._isr_expiration_loop(), name="isr-expiration"))
        if self.settings.auto_leader_rebalance_enable:
            self._tasks.append(loop.create_task(self._auto_rebalance_loop(), name="auto-leader-rebalance"))
        self.request_resync()
        # Startup waits for the registration (a killed predecessor's ephemeral node may linger for a session)
        # and for a first view of the cluster.
        await asyncio.wait_for(self.registered.wait(), self.settings.session_timeout_ms / 1000.0 * 3 + 30)
        await asyncio.wait_for(self.ready.wait(), self.settings.connection_timeout_ms / 1000.0 + 30)

    async def wait_ready(self, timeout: float = 10.0) -> None:
        """Wait (bounded) for the first view of the cluster: requests served before it would see none."""
        if not self.ready.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.ready.wait(), timeout)

    async def stop(self) -> None:
        self._stopping = True
        tasks = [*self._tasks, *self._side_tasks]
        for task in tasks:
            task.cancel()
        # Bounded: Python 3.11's wait_for can swallow a cancellation that races a completion (fixed in 3.12); the
        # loops also end on ``_stopping``.
        if tasks:
            await asyncio.wait(tasks, timeout=5.0)
        for fetcher in list(self.fetchers.values()):
            await fetcher.stop()
        self.fetchers.clear()
        # Closing the session removes /brokers/ids/N (and /controller if held) at once: the controller moves
        # leadership off this broker now rather than after the session timeout.
        await asyncio.to_thread(self._close)

    async def controlled_shutdown(self) -> None:
        """Kafka's KafkaServer.controlledShutdown: ask the controller to move this broker's leaderships to other ISR
        members (and take it out of the ISRs it follows in) while this broker still serves requests, so producers
        see only NOT_LEADER_OR_FOLLOWER, which they retry at the new leader. Up to controlled.shutdown.max.retries
        attempts, controlled.shutdown.retry.backoff.ms apart; after that the shutdown goes on regardless."""
        settings = self.settings
        if not settings.controlled_shutdown_enable or not self.registered.is_set() or not self.zk.connected:
            return
        log.info("[Broker %d] starting controlled shutdown", self.broker_id)
        self.in_controlled_shutdown = True
        for fetcher in list(self.fetchers.values()):
            await fetcher.stop()
        self.fetchers.clear()
        for attempt in range(1, settings.controlled_shutdown_max_retries + 1):
            if not any(b != self.broker_id for b in self.view.brokers):
                log.info("[Broker %d] no other broker is alive: nothing to move before shutting down", self.broker_id)
                return
            try:
                remaining = await self._ask_controller_to_shut_down()
            except Exception as e:
                log.warning("[Broker %d] controlled shutdown attempt %d failed: %s", self.broker_id, attempt, e)
                remaining = None
            if remaining == []:
                await self._wait_leaderships_moved()
                log.info("[Broker %d] controlled shutdown succeeded", self.broker_id)
                return
            if remaining:
                log.info(
                    "[Broker %d] remaining partitions to move: %s",
                    self.broker_id,
                    ",".join(f"{tp.topic}-{tp.partition}" for tp in remaining),
                )
            if attempt < settings.controlled_shutdown_max_retries:
                await asyncio.sleep(settings.controlled_shutdown_retry_backoff_ms / 1000.0)
                self.request_resync()
        log.warning(
            "[Broker %d] proceeding to do an unclean shutdown as all the controlled shutdown attempts failed",
            self.broker_id,
        )

    async def _ask_controller_to_shut_down(self) -> list[TopicPartition]:
        """One ControlledShutdown request (v2) to the controller: the partitions it says this broker still leads."""
        from ..messages import ControlledShutdownRequest, ControlledShutdownResponse
        from ..protocol import NONE
        from .fetcher import BrokerConnection

        controller, _ = await asyncio.to_thread(self._read_controller)
        address = self._address(controller)
        if controller < 0 or address is None:
            raise NotControllerError("No controller is known")
        client_id = f"broker-{self.broker_id}-controlled-shutdown"
        conn = BrokerConnection(address[0], address[1], client_id, self.inter_broker)
        timeout = self.settings.request_timeout_ms / 1000.0
        await conn.connect(timeout)
        try:
            body = ControlledShutdownRequest(broker_id=self.broker_id, broker_epoch=self.broker_epoch).encode(version=2)
            answer = ControlledShutdownResponse[2].decode(await conn.request(7, 2, body, timeout))
        finally:
            conn.close()
        if answer.error_code != NONE:
            raise NotControllerError(f"The controller {controller} answered error code {answer.error_code}")
        return [TopicPartition(r.topic_name, r.partition_index) for r in answer.remaining_partitions]

    async def _wait_leaderships_moved(self, timeout: float = 10.0) -> None:
        """Wait (bounded) until this broker has applied the new states: it leads no replicated partition."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(len(leader.replicas) <= 1 for leader in self.leaders.values()):
                return
            self.request_resync()
            await asyncio.sleep(0.05)

    async def handle_controlled_shutdown(self, broker_id: int, broker_epoch: int) -> list[TopicPartition]:
        """The controller's side of ControlledShutdown (NotControllerError elsewhere)."""
        return await asyncio.to_thread(self.controller.controlled_shutdown, broker_id, broker_epoch)

    async def elect_leaders(
        self, election_type: int, tps: list[TopicPartition] | None, timeout_ms: int
    ) -> dict[TopicPartition, BaseException | None]:
        """ElectLeaders on the controller; answered once this broker's view shows the elected leaders (or after
        ``timeout_ms``), as Kafka's DelayedElectLeader waits for the new leaders."""
        results = await asyncio.to_thread(self.controller.elect, election_type, tps)
        deadline = time.monotonic() + timeout_ms / 1000.0
        while time.monotonic() < deadline:
            self.view = await asyncio.to_thread(self._read_view)
            if election_type != 0 or all(
                (s := self.view.states.get(tp)) is not None
                and s.leader == self.view.topics[tp.topic].partitions[tp.partition][0]
                for tp, e in results.items()
                if e is None and tp.topic in self.view.topics
            ):
                break
            await asyncio.sleep(0.1)
        return results

    async def _auto_rebalance_loop(self) -> None:
        """Kafka's auto-leader-rebalance task: every leader.imbalance.check.interval.seconds, the controller moves
        leadership back to preferred replicas where a broker's imbalance exceeds the allowed percentage."""
        from kazoo.exceptions import KazooException

        interval = max(1, self.settings.leader_imbalance_check_interval_seconds)
        while not self._stopping:
            await asyncio.sleep(interval)
            if self.view.controller_id != self.broker_id or not self.zk.connected:
                continue
            try:
                moved = await asyncio.to_thread(
                    self.controller.auto_rebalance, self.settings.leader_imbalance_per_broker_percentage
                )
            except KazooException as e:
                log.info("[Controller id=%d] leader rebalance skipped: %s", self.broker_id, e)
                continue
            if moved:
                self.request_resync()

    def _close(self) -> None:
        try:
            self.zk.stop()
            self.zk.close()
        except Exception:
            log.exception("Closing the ZooKeeper client failed")

    # ----- watches ----------------------------------------------------------------------------------------
    def _watch_fired(self, *_args: Any) -> bool:
        self.request_resync()
        return not self._stopping  # False ends a kazoo watch

    def _on_zk_state(self, state: str) -> None:
        log.info("[Broker %d] ZooKeeper session %s", self.broker_id, state)
        self.request_resync()

    def request_resync(self) -> None:
        """Mark the view stale (callable from any thread): the reconcile task re-reads ZooKeeper."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(self._dirty.set)

    async def _reconcile_loop(self) -> None:
        from kazoo.exceptions import KazooException

        period = max(0.5, min(5.0, self.settings.replica_lag_time_max_ms / 4000.0))
        while not self._stopping:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._dirty.wait(), period)
            self._dirty.clear()
            try:
                await self.reconcile()
            except asyncio.CancelledError:
                raise
            except KazooException as e:
                log.info("[Broker %d] ZooKeeper unavailable (%s); retrying", self.broker_id, type(e).__name__)
                await asyncio.sleep(0.5)
                self._dirty.set()
            except Exception:
                log.exception("[Broker %d] reconcile failed", self.broker_id)
                await asyncio.sleep(0.5)
                self._dirty.set()

    # ----- one pass ----------------------------------------------------------------------------------------
    async def reconcile(self) -> None:
        if not self.zk.connected:
            return
        if not await asyncio.to_thread(self._ensure_registered):
            await asyncio.sleep(0.5)  # a killed predecessor's session still holds our id: look again shortly
            self._dirty.set()
        view = await asyncio.to_thread(self._read_view)
        self.view = view
        if view.controller_id == -1:
            await asyncio.to_thread(self._try_become_controller)
            view.controller_id, view.controller_epoch = await asyncio.to_thread(self._read_controller)
        if view.controller_id == self.broker_id:
            changed = await asyncio.to_thread(self._elect, view)
            if changed:
                self.view = view = await asyncio.to_thread(self._read_view)
            if view.deleting:
                await self._progress_deletions(view)
        self._apply(view)
        if self.registered.is_set() and view.controller_id >= 0:
            self.ready.set()

    def _ensure_registered(self) -> bool:
        """Create /brokers/ids/N (ephemeral) unless this session holds it; False while an older session does."""
        from kazoo.exceptions import NodeExistsError

        path = zk.broker_path(self.broker_id)
        endpoints = tuple(self.server.advertised_endpoints())  # the inter-broker listener's first
        name, _, host, port = endpoints[0]
        info = zk.BrokerInfo(self.broker_id, host, port, name, None, endpoints)
        stat = self.zk.exists(path)
        if stat is not None:
            if stat.ephemeralOwner == self.zk.client_id[0]:
                self.broker_epoch = stat.czxid
                self.registered.set()
                return True
            if not self.registered.is_set():
                log.info("[Broker %d] %s is held by an older session; waiting for it to expire", self.broker_id, path)
            return False
        try:
            self.zk.create(path, info.encode(), ephemeral=True, makepath=True)
            created = self.zk.exists(path)
            self.broker_epoch = created.czxid if created is not None else -1
            log.info("[Broker %d] registered at %s:%d (epoch %d)", self.broker_id, host, port, self.broker_epoch)
            self.registered.set()
            return True
        except NodeExistsError:
            return False

    def _read_controller(self) -> tuple[int, int]:
        from kazoo.exceptions import NoNodeError

        try:
            data, _ = self.zk.get(zk.CONTROLLER)
            controller = zk.decode_controller(data)
        except NoNodeError:
            controller = -1
        try:
            epoch_data, _ = self.zk.get(zk.CONTROLLER_EPOCH)
            epoch = int(epoch_data.decode())
        except NoNodeError:
            epoch = 0
        return controller, epoch

    def _read_view(self) -> ClusterView:
        from kazoo.exceptions import NoNodeError

        view = ClusterView()
        for child in self.zk.get_children(zk.BROKER_IDS):
            try:
                data, stat = self.zk.get(zk.broker_path(int(child)))
                view.brokers[int(child)] = zk.BrokerInfo.decode(int(child), data)
                view.broker_epochs[int(child)] = stat.czxid
            except (NoNodeError, ValueError):
                continue
        view.deleting = set(self.zk.get_children(zk.DELETE_TOPICS))
        for topic in self.zk.get_children(zk.BROKER_TOPICS):
            if topic not in self._watched_topics:  # partitions added (Kafka's PartitionModificationsListener)
                self._watched_topics.add(topic)
                self.zk.DataWatch(zk.topic_path(topic), self._watch_fired)
            try:
                data, _ = self.zk.get(zk.topic_path(topic))
            except NoNodeError:
                continue
            assignment = zk.TopicAssignment.decode(data)
            view.topics[topic] = assignment
            try:
                config_data, _ = self.zk.get(zk.topic_config_path(topic))
                view.configs[topic] = zk.decode_topic_config(config_data)
            except NoNodeError:
                view.configs[topic] = {}
            for p in assignment.partitions:
                path = zk.partition_state_path(topic, p)
                if path not in self._watched_states:
                    self._watched_states.add(path)
                    self.zk.DataWatch(path, self._watch_fired)
                try:
                    data, stat = self.zk.get(path)
                except NoNodeError:
                    continue
                view.states[TopicPartition(topic, p)] = zk.LeaderAndIsr.decode(data, stat.version)
        view.controller_id, view.controller_epoch = self._read_controller()
        return view

    # ----- controller ----------------------------------------------------------------------------------------
    def _try_become_controller(self) -> None:
        """Kafka's KafkaController.elect: whoever creates the ephemeral /controller first is the controller, and
        bumps /controller_epoch (a conditional write, so two controllers never share an epoch)."""
        from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

        try:
            self.zk.create(zk.CONTROLLER, zk.encode_controller(self.broker_id), ephemeral=True)
        except NodeExistsError:
            return
        while True:
            try:
                data, stat = self.zk.get(zk.CONTROLLER_EPOCH)
                self.zk.set(zk.CONTROLLER_EPOCH, str(int(data.decode()) + 1).encode(), version=stat.version)
                break
            except NoNodeError:
                try:
                    self.zk.create(zk.CONTROLLER_EPOCH, b"1")
                    break
                except NodeExistsError:
                    continue
            except BadVersionError:
                continue
        log.info("[Controller id=%d] elected controller", self.broker_id)

    def _unclean_allowed(self, topic: str, view: ClusterView) -> bool:
        value = view.configs.get(topic, {}).get("unclean.leader.election.enable")
        if value is None:
            return self.settings.unclean_leader_election_enable
        return value.strip().lower() == "true"

    def _elect(self, view: ClusterView) -> bool:
        """The controller's pass (Kafka's onBrokerStartup/onBrokerFailure/onNewPartitionCreation, level-triggered):
        create the state of new partitions, elect a leader from the live ISR where the leader is gone (outside
        it only with unclean.leader.election.enable), and drop dead brokers from ISRs. Return whether it wrote."""
        from kazoo.exceptions import BadVersionError, NodeExistsError

        self.controller.forget_departed(view.broker_epochs)
        live = set(view.brokers)
        epoch = view.controller_epoch
        wrote = False
        for topic, assignment in view.topics.items():
            if topic in view.deleting:
                continue  # the deletion pass takes its partitions offline
            for p, replicas in assignment.partitions.items():
                tp = TopicPartition(topic, p)
                state = view.states.get(tp)
                path = zk.partition_state_path(topic, p)
                if state is None:
                    alive = [r for r in replicas if r in live]
                    if not alive:
                        continue
                    new = zk.LeaderAndIsr(alive[0], 0, alive, epoch)
                    try:
                        self.zk.create(path, new.encode(), makepath=True)
                        wrote = True
                        log.info(
                            "[Controller id=%d] %s: new partition, leader %d isr %s",
                            self.broker_id,
                            tp,
                            new.leader,
                            new.isr,
                        )
                    except NodeExistsError:
                        pass
                    continue
                new_state = self._next_state(tp, state, replicas, live, epoch, view)
                if new_state is None:
                    continue
                try:
                    self.zk.set(path, new_state.encode(), version=state.zk_version)
                    wrote = True
                    log.info(
                        "[Controller id=%d] %s: leader %d -> %d, epoch %d, isr %s -> %s",
                        self.broker_id,
                        tp,
                        state.leader,
                        new_state.leader,
                        new_state.leader_epoch,
                        state.isr,
                        new_state.isr,
                    )
                except BadVersionError:
                    self.request_resync()
        return wrote

    def _next_state(
        self,
        tp: TopicPartition,
        state: zk.LeaderAndIsr,
        replicas: list[int],
        live: set[int],
        epoch: int,
        view: ClusterView,
    ) -> zk.LeaderAndIsr | None:
        live_isr = [r for r in state.isr if r in live]
        if state.leader in live:
            if len(live_isr) == len(state.isr):
                return None
            # A dead broker leaves the ISR (Kafka's removeReplicasFromIsr: the leader epoch moves too).
            return zk.LeaderAndIsr(state.leader, state.leader_epoch + 1, live_isr or [state.leader], epoch)
        candidates = [r for r in replicas if r in live_isr and r not in self.controller.shutting_down]
        if candidates:
            return zk.LeaderAndIsr(candidates[0], state.leader_epoch + 1, live_isr, epoch)
        alive = [r for r in replicas if r in live]
        if alive and self._unclean_allowed(tp.topic, view):
            log.warning(
                "[Controller id=%d] %s: unclean leader election of %d (ISR %s is offline): records it lacks are lost",
                self.broker_id,
                tp,
                alive[0],
                state.isr,
            )
            return zk.LeaderAndIsr(alive[0], state.leader_epoch + 1, [alive[0]], epoch)
        if state.leader == zk.NO_LEADER:
            return None
        # No eligible replica: the partition goes offline, keeping its last ISR member(s) so that one of them is
        # elected when it returns (rather than losing acknowledged records to a lagging replica).
        return zk.LeaderAndIsr(zk.NO_LEADER, state.leader_epoch + 1, state.isr, epoch)

    # ----- broker side: becoming leader / follower ------------------------------------------------------------
    def _apply(self, view: ClusterView) -> None:
        coordinator = self.server.group_coordinator
        offsets = view.topics.get(OFFSETS_TOPIC)
        if coordinator is not None and offsets is not None:
            coordinator.cluster_partition_count = len(offsets.partitions)
        wanted: dict[int, dict[TopicPartition, int]] = {}
        for topic, assignment in view.topics.items():
            if topic in view.deleting or (topic, assignment.topic_id) in self.deleted_replicas:
                continue  # being deleted: no log is created again, no fetcher started
            for p, replicas in assignment.partitions.items():
                if self.broker_id not in replicas:
                    continue
                tp = TopicPartition(topic, p)
                state = view.states.get(tp)
                if state is None:
                    continue
                partition = self._local_partition(tp, assignment, view.configs.get(topic, {}))
                if partition is None:
                    continue
                if state.leader == self.broker_id:
                    self._become_leader(tp, partition, state, replicas)
                else:
                    self._become_follower(tp, partition, state)
                    known = state.leader != zk.NO_LEADER and state.leader in view.brokers
                    if known and not self.in_controlled_shutdown:
                        wanted.setdefault(state.leader, {})[tp] = state.leader_epoch
        for leader_id, fetcher in list(self.fetchers.items()):
            keep = wanted.get(leader_id, {})
            for tp in list(fetcher.partitions):
                if keep.get(tp) != fetcher.partitions[tp].leader_epoch:
                    fetcher.remove(tp)
        for leader_id, tps in wanted.items():
            fetcher = self.fetchers.get(leader_id)
            if fetcher is None:
                fetcher = self.fetchers[leader_id] = ReplicaFetcher(self, leader_id, self._address)
            for tp, leader_epoch in tps.items():
                current = fetcher.partitions.get(tp)
                if current is None or current.leader_epoch != leader_epoch:
                    fetcher.add(tp, leader_epoch)

    def _address(self, broker_id: int) -> tuple[str, int] | None:
        info = self.view.brokers.get(broker_id)
        return None if info is None else (info.host, info.port)

    def _local_partition(self, tp: TopicPartition, assignment: zk.TopicAssignment, config: dict[str, str]):
        try:
            return self.replica_manager.get_partition(tp.topic, tp.partition)
        except UnknownTopicOrPartitionError:
            pass
        topic_id = assignment.topic_id or new_uuid()
        try:
            self.server.log_manager.get_or_create_log(tp, topic_id, config)
        except Exception:
            log.exception("[Broker %d] cannot create the log of %s", self.broker_id, tp)
            return None
        partition = self.replica_manager.get_partition(tp.topic, tp.partition)
        # A new log registers as a single-node leader; here it waits for its state (applied by the caller).
        partition.make_follower(zk.NO_LEADER, -1)
        return partition

    def _become_leader(self, tp: TopicPartition, partition, state: zk.LeaderAndIsr, replicas: list[int]) -> None:
        current = self.leaders.get(tp)
        if partition.is_leader and current is not None and partition.leader_epoch == state.leader_epoch:
            if state.zk_version > current.state.zk_version:
                current.state = state
                current.replicas = replicas
                if set(state.isr) != partition.isr:
                    leos = {r: f.log_end_offset for r, f in current.followers.items() if f.log_end_offset >= 0}
                    if partition.update_isr(set(state.isr), leos):
                        self.high_watermark_moved(tp)
            return
        for fetcher in self.fetchers.values():
            fetcher.remove(tp)
        newly_led = tp not in self.leaders
        now = time.monotonic() * 1000
        followers = {r: FollowerProgress(last_caught_up_ms=now) for r in replicas if r != self.broker_id}
        self.leaders[tp] = LeaderState(state, list(replicas), followers)
        partition.make_leader(state.leader_epoch, set(state.isr) | {self.broker_id})
        log.info("[Broker %d] %s: leader at epoch %d, isr %s", self.broker_id, tp, state.leader_epoch, state.isr)
        self.high_watermark_moved(tp)
        if newly_led and tp.topic == OFFSETS_TOPIC:
            self._elected_offsets_partition(tp, partition)
        txn = getattr(self.server, "txn_cluster", None)
        if newly_led and tp.topic == TRANSACTION_STATE_TOPIC and txn is not None:
            txn.elected(tp, partition)  # the transaction coordinator loads the partition's ids

    def _become_follower(self, tp: TopicPartition, partition, state: zk.LeaderAndIsr) -> None:
        if (
            not partition.is_leader
            and partition.leader_replica_id == state.leader
            and partition.leader_epoch == state.leader_epoch
        ):
            return
        was_leader = partition.is_leader
        self.leaders.pop(tp, None)
        partition.make_follower(state.leader, state.leader_epoch)
        if tp.topic == OFFSETS_TOPIC and self.server.group_coordinator is not None:
            self.server.group_coordinator.on_resignation(tp.partition)
        txn = getattr(self.server, "txn_cluster", None)
        if tp.topic == TRANSACTION_STATE_TOPIC and txn is not None:
            txn.resigned(tp)  # its ids answer NOT_COORDINATOR here from now on
        log.info("[Broker %d] %s: follower of %d at epoch %d", self.broker_id, tp, state.leader, state.leader_epoch)
        if was_leader:
            self.high_watermark_moved(tp)  # waiting acks=-1 produces answer NOT_LEADER_OR_FOLLOWER now

    # ----- the group coordinator's partitions (Kafka's onLeadershipChange for __consumer_offsets) ----------------
    def _elected_offsets_partition(self, tp: TopicPartition, partition) -> None:
        """This broker now leads a __consumer_offsets partition: its groups load (answering
        COORDINATOR_LOAD_IN_PROGRESS meanwhile) once the high watermark has reached the log end this leader
        started with, so that everything its predecessor acknowledged is read (bounded: 10 s)."""
        coordinator = self.server.group_coordinator
        if coordinator is None:
            return
        coordinator.begin_loading(tp.partition)
        target = partition.log_end_offset
        task = asyncio.get_running_loop().create_task(self._load_offsets_partition(tp, partition, target))
        self._side_tasks.add(task)
        task.add_done_callback(self._side_tasks.discard)

    async def _load_offsets_partition(self, tp: TopicPartition, partition, target: int) -> None:
        deadline = time.monotonic() + 10.0
        while partition.high_watermark < target and time.monotonic() < deadline and tp in self.leaders:
            await asyncio.sleep(0.05)
        coordinator = self.server.group_coordinator
        if tp not in self.leaders or coordinator is None:
            return
        coordinator.on_election(tp.partition)

    def partition_exists(self, topic: str, partition: int) -> bool:
        assignment = self.view.topics.get(topic)
        return assignment is not None and partition in assignment.partitions and topic not in self.view.deleting

    def coordinator_of(self, partition: int, listener: str) -> tuple[int, str, int] | None:
        """(broker id, host, port on ``listener``) of the leader of __consumer_offsets' ``partition``, None while
        it has none (or that broker has no such listener)."""
        state = self.view.states.get(TopicPartition(OFFSETS_TOPIC, partition))
        if state is None or state.leader == zk.NO_LEADER:
            return None
        info = self.view.brokers.get(state.leader)
        endpoint = None if info is None else info.endpoint_for(listener)
        return None if endpoint is None else (state.leader, *endpoint)

    async def wait_for_replication(self, tp: TopicPartition, end_offset: int, timeout_ms: int) -> BaseException | None:
        """Wait until the high watermark of ``tp`` (led here) reaches ``end_offset`` (a coordinator's acks=-1
        write): None when it did, NotLeaderOrFollowerError if leadership moved, RequestTimedOutError otherwise."""
        deadline = time.monotonic() + timeout_ms / 1000.0
        while True:
            try:
                partition = self.replica_manager.get_partition(tp.topic, tp.partition)
            except UnknownTopicOrPartitionError as e:
                return e
            if not partition.is_leader:
                return NotLeaderOrFollowerError(f"Leadership of {tp} moved while waiting for the replicas")
            if partition.high_watermark >= end_offset:
                return None
            if time.monotonic() >= deadline:
                return RequestTimedOutError(f"Timed out waiting for the in-sync replicas of {tp}")
            await asyncio.sleep(0.01)

    async def ensure_offsets_topic(self, num_partitions: int, replication_factor: int, config: dict[str, str]) -> None:
        """Create __consumer_offsets in ZooKeeper on first use (Kafka's auto-creation by FindCoordinator): refused
        while fewer brokers are alive than offsets.topic.replication.factor, as Kafka refuses."""
        if OFFSETS_TOPIC in self.view.topics:
            return
        brokers = await asyncio.to_thread(self.zk.get_children, zk.BROKER_IDS)
        if len(brokers) < replication_factor:
            raise CoordinatorNotAvailableError(
                f"Number of alive brokers '{len(brokers)}' does not meet the required replication factor "
                f"'{replication_factor}' for the offsets topic (configured via 'offsets.topic.replication.factor'). "
                "This error can be ignored if the cluster is starting up and not all brokers are up yet."
            )
        with contextlib.suppress(TopicExistsError):
            await self.create_topic(OFFSETS_TOPIC, num_partitions, replication_factor, config, False)
            log.info("[Broker %d] created %s with %d partitions", self.broker_id, OFFSETS_TOPIC, num_partitions)
        await self.wait_for_topic(OFFSETS_TOPIC)

    def high_watermark_moved(self, tp: TopicPartition) -> None:
        purgatory = self.server.purgatory
        if purgatory is not None:
            purgatory.notify(tp)

    # ----- leader side: follower fetches and the ISR ------------------------------------------------------
    def on_follower_fetch(self, tp: TopicPartition, replica_id: int, fetch_offset: int) -> None:
        """A follower fetched from ``fetch_offset``: that is its log end offset (Kafka's updateFollowerFetchState).
        Moves the high watermark if it is in the ISR, and asks to add it to the ISR once it has caught up."""
        leader = self.leaders.get(tp)
        if leader is None:
            return
        progress = leader.followers.get(replica_id)
        if progress is None:
            return
        try:
            partition = self.replica_manager.get_partition(tp.topic, tp.partition)
        except UnknownTopicOrPartitionError:
            return
        now = time.monotonic() * 1000
        leader_leo = partition.log_end_offset
        if fetch_offset >= leader_leo:
            progress.last_caught_up_ms = now
        elif fetch_offset >= progress.last_fetch_leader_leo >= 0:
            progress.last_caught_up_ms = max(progress.last_caught_up_ms, progress.last_fetch_ms)
        progress.log_end_offset = fetch_offset
        progress.last_fetch_leader_leo = leader_leo
        progress.last_fetch_ms = now
        if partition.update_follower_log_end_offset(replica_id, fetch_offset):
            self.high_watermark_moved(tp)
        if (
            replica_id not in partition.isr
            and fetch_offset >= partition.high_watermark
            and not leader.isr_write_pending
        ):
            self._change_isr(tp, leader, set(partition.isr) | {replica_id}, f"follower {replica_id} caught up")

    async def _isr_expiration_loop(self) -> None:
        """Kafka's isr-expiration task: every replica.lag.time.max.ms / 2, drop followers not caught up for longer
        than replica.lag.time.max.ms from the ISR of each partition led here."""
        lag = self.settings.replica_lag_time_max_ms
        while not self._stopping:
            await asyncio.sleep(lag / 2000.0)
            now = time.monotonic() * 1000
            for tp, leader in list(self.leaders.items()):
                try:
                    partition = self.replica_manager.get_partition(tp.topic, tp.partition)
                except UnknownTopicOrPartitionError:
                    continue
                if not partition.is_leader or leader.isr_write_pending:
                    continue
                out = {
                    r
                    for r in partition.isr
                    if r != self.broker_id
                    and (f := leader.followers.get(r)) is not None
                    and now - f.last_caught_up_ms > lag
                    and f.log_end_offset < partition.log_end_offset
                }
                if out:
                    self._change_isr(tp, leader, set(partition.isr) - out, f"out of sync: {sorted(out)}")

    def _change_isr(self, tp: TopicPartition, leader: LeaderState, new_isr: set[int], why: str) -> None:
        leader.isr_write_pending = True
        asyncio.get_running_loop().create_task(self._write_isr(tp, leader, new_isr, why))

    async def _write_isr(self, tp: TopicPartition, leader: LeaderState, new_isr: set[int], why: str) -> None:
        """The ISR change as a conditional write on the state znode's version; applied locally only once
        ZooKeeper took it (Kafka's zkVersion check, then the partition's ISR)."""
        from kazoo.exceptions import BadVersionError, KazooException, NoNodeError

        state = leader.state
        ordered = [r for r in leader.replicas if r in new_isr]
        new = zk.LeaderAndIsr(state.leader, state.leader_epoch, ordered, state.controller_epoch)
        path = zk.partition_state_path(tp.topic, tp.partition)
        try:
            stat = await asyncio.to_thread(self.zk.set, path, new.encode(), state.zk_version)
        except (BadVersionError, NoNodeError):
            log.info("[Broker %d] %s: ISR change (%s) lost a race; re-reading", self.broker_id, tp, why)
            self.request_resync()
            return
        except KazooException as e:
            log.info("[Broker %d] %s: ISR change failed: %s", self.broker_id, tp, e)
            return
        finally:
            leader.isr_write_pending = False
        if self.leaders.get(tp) is not leader:
            return
        leader.state = zk.LeaderAndIsr(new.leader, new.leader_epoch, new.isr, new.controller_epoch, stat.version)
        partition = self.replica_manager.get_partition(tp.topic, tp.partition)
        leos = {r: f.log_end_offset for r, f in leader.followers.items() if f.log_end_offset >= 0}
        log.info("[Broker %d] %s: ISR %s -> %s (%s)", self.broker_id, tp, state.isr, ordered, why)
        if partition.update_isr(new_isr, leos):
            self.high_watermark_moved(tp)

    # ----- topic deletion ----------------------------------------------------------------------------------------
    async def _progress_deletions(self, view: ClusterView) -> None:
        """The controller's deletion step: StopReplica (delete) to each live replica broker still to confirm, each
        in a task of its own so that a slow broker never holds up elections."""
        sends = await asyncio.to_thread(self.controller.deletion_pass, view)
        for broker_id, topics in sends.items():
            if broker_id in self._stop_replica_inflight:
                continue
            self._stop_replica_inflight.add(broker_id)
            task = asyncio.get_running_loop().create_task(
                self._send_stop_replica(broker_id, topics, view.controller_epoch)
            )
            self._side_tasks.add(task)
            task.add_done_callback(self._side_tasks.discard)

    async def _send_stop_replica(self, broker_id: int, topics: dict[str, list[int]], controller_epoch: int) -> None:
        from ..messages import StopReplicaRequest, StopReplicaResponse
        from ..protocol import NONE
        from .fetcher import BrokerConnection

        try:
            address = self._address(broker_id)
            if address is None:
                return
            request = StopReplicaRequest(
                controller_id=self.broker_id,
                controller_epoch=controller_epoch,
                broker_epoch=self.view.broker_epochs.get(broker_id, -1),
                delete_partitions=True,
                topics=[StopReplicaRequest.StopReplicaTopic(name=t, partition_indexes=ps) for t, ps in topics.items()],
            )
            timeout = self.settings.request_timeout_ms / 1000.0
            client_id = f"controller-{self.broker_id}-stop-replica"
            conn = BrokerConnection(address[0], address[1], client_id, self.inter_broker)
            await conn.connect(timeout)
            try:
                body = await conn.request(5, 1, request.encode(version=1), timeout)
            finally:
                conn.close()
            answer = StopReplicaResponse[1].decode(body)
            if answer.error_code != NONE:
                log.info("[Controller id=%d] StopReplica to %d: error %d", self.broker_id, broker_id, answer.error_code)
                return
            failed = {e.topic_name for e in answer.partition_errors if e.error_code != NONE}
            for topic in topics:
                if topic not in failed:
                    self.controller.deletion_acks.setdefault(topic, set()).add(broker_id)
            log.info("[Controller id=%d] broker %d deleted its replicas of %s", self.broker_id, broker_id, list(topics))
        except Exception as e:
            log.info("[Controller id=%d] StopReplica to broker %d failed: %s", self.broker_id, broker_id, e)
            await asyncio.sleep(0.5)
        finally:
            self._stop_replica_inflight.discard(broker_id)
            self.request_resync()

    async def stop_replicas(
        self, controller_epoch: int, broker_epoch: int, topics: dict[str, list[int]]
    ) -> dict[TopicPartition, BaseException | None]:
        """StopReplica with deletion, from the controller: stop following or leading the partitions and delete
        their logs (Kafka renames them ``-delete`` and removes them after file.delete.delay.ms)."""
        from ...errors import StaleBrokerEpochError, StaleControllerEpochError

        self.view = fresh = await asyncio.to_thread(self._read_view)
        if controller_epoch < fresh.controller_epoch:
            raise StaleControllerEpochError(
                f"StopReplica from controller epoch {controller_epoch}, older than {fresh.controller_epoch}"
            )
        if broker_epoch not in (-1, self.broker_epoch):
            raise StaleBrokerEpochError(f"StopReplica for broker epoch {broker_epoch}, not {self.broker_epoch}")
        results: dict[TopicPartition, BaseException | None] = {}
        for topic, partitions in topics.items():
            assignment = fresh.topics.get(topic)
            self.deleted_replicas.add((topic, assignment.topic_id if assignment is not None else None))
            tps = [TopicPartition(topic, p) for p in partitions]
            for tp in tps:
                for fetcher in self.fetchers.values():
                    fetcher.remove(tp)
                self.leaders.pop(tp, None)
            error: BaseException | None = None
            if topic in self.server.log_manager.topics():
                try:
                    self.server.log_manager.delete_topic(topic)
                    log.info("[Broker %d] deleted its replicas of %s", self.broker_id, topic)
                except UnknownTopicOrPartitionError:
                    pass
                except Exception as e:
                    log.exception("[Broker %d] deleting %s failed", self.broker_id, topic)
                    error = e
            for tp in tps:
                self.high_watermark_moved(tp)  # waiting produces answer now
                results[tp] = error
        return results

    async def delete_topics(self, names: list[str], timeout_ms: int) -> dict[str, BaseException | None]:
        """DeleteTopics in ZooKeeper mode (Kafka's AdminZkClient.deleteTopic): mark each topic under
        /admin/delete_topics; answered once the controller finished deleting it, or REQUEST_TIMED_OUT."""
        from ...errors import TopicDeletionDisabledError

        results: dict[str, BaseException | None] = {}
        marked = []
        for name in names:
            if not self.settings.delete_topic_enable:
                results[name] = TopicDeletionDisabledError("Topic deletion is disabled.")
                continue
            try:
                await asyncio.to_thread(self._mark_for_deletion, name)
                marked.append(name)
            except UnknownTopicOrPartitionError as e:
                results[name] = e
        self.request_resync()
        deadline = time.monotonic() + timeout_ms / 1000.0
        while marked and time.monotonic() < deadline:
            exists = await asyncio.to_thread(self._existing_topics, marked)
            for name in set(marked) - set(exists):
                results[name] = None
            marked = exists
            if marked:
                await asyncio.sleep(0.1)
        for name in marked:
            results[name] = RequestTimedOutError(f"Timed out after {timeout_ms} ms waiting for {name} to be deleted")
        return results

    def _existing_topics(self, names: list[str]) -> list[str]:
        return [n for n in names if self.zk.exists(zk.topic_path(n))]

    def _mark_for_deletion(self, name: str) -> None:
        from kazoo.exceptions import NodeExistsError

        if not self.zk.exists(zk.topic_path(name)):
            raise UnknownTopicOrPartitionError(f"Topic `{name}` to delete does not exist")
        with contextlib.suppress(NodeExistsError):  # already marked: wait for the same deletion, as Kafka does
            self.zk.create(f"{zk.DELETE_TOPICS}/{name}", b"", makepath=True)
        log.info("[Broker %d] topic %s marked for deletion", self.broker_id, name)

    # ----- partitions added to a topic (Kafka's AdminZkClient.addPartitions) -------------------------------------
    async def create_partitions(
        self, name: str, count: int, assignments: list[list[int]] | None, validate_only: bool
    ) -> None:
        await asyncio.to_thread(self._add_partitions, name, count, assignments, validate_only)
        if not validate_only:
            self.request_resync()
            await self.wait_for_topic(name)

    def _add_partitions(self, name: str, count: int, assignments: list[list[int]] | None, validate_only: bool) -> None:
        from kazoo.exceptions import BadVersionError, NoNodeError

        from ...errors import InvalidPartitionsError, InvalidReplicaAssignmentError

        try:
            data, stat = self.zk.get(zk.topic_path(name))
        except NoNodeError:
            raise UnknownTopicOrPartitionError(f"The topic '{name}' does not exist.") from None
        if self.zk.exists(f"{zk.DELETE_TOPICS}/{name}"):
            raise InvalidPartitionsError(f"The topic '{name}' is marked for deletion.")
        existing = zk.TopicAssignment.decode(data)
        current = len(existing.partitions)
        if count < current:
            raise InvalidPartitionsError(
                f"Topic currently has {current} partitions, which is higher than the requested {count}."
            )
        if count == current:
            raise InvalidPartitionsError(f"Topic already has {current} partitions.")
        brokers = sorted(int(b) for b in self.zk.get_children(zk.BROKER_IDS))
        replication = len(existing.partitions[0])
        added = count - current
        if assignments:
            if len(assignments) != added:
                raise InvalidReplicaAssignmentError(
                    f"Increasing the number of partitions by {added} but {len(assignments)} assignments provided."
                )
            new = {}
            for i, replicas in enumerate(assignments):
                unknown = sorted(set(replicas) - set(brokers))
                if unknown:
                    raise InvalidReplicaAssignmentError(f"Unknown broker(s) in replica assignment: {unknown}.")
                if len(replicas) != replication or len(set(replicas)) != len(replicas):
                    raise InvalidReplicaAssignmentError(
                        f"Inconsistent replication factor between partitions, partition 0 has {replication} "
                        f"while partition {current + i} has replicas {replicas}."
                    )
                new[current + i] = list(replicas)
        else:
            first = existing.partitions[0][0]
            start = max(0, next((i for i, b in enumerate(brokers) if b >= first), 0))
            new = assign_replicas(brokers, added, replication, fixed_start_index=start, start_partition_id=current)
        if validate_only:
            return
        updated = zk.TopicAssignment({**existing.partitions, **new}, existing.topic_id)
        try:
            self.zk.set(zk.topic_path(name), updated.encode(), version=stat.version)
        except BadVersionError:
            raise InvalidPartitionsError(f"The topic '{name}' changed meanwhile; try again.") from None
        log.info("[Broker %d] topic %s: partitions %s added", self.broker_id, name, new)

    # ----- acks=-1 -------------------------------------------------------------------------------------------
    async def wait_for_acks(self, results: dict, timeout_ms: int) -> dict:
        """Kafka's DelayedProduce: answer each appended partition once the high watermark passed its last offset;
        NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR then is below min.insync.replicas, REQUEST_TIMED_OUT after
        ``timeout_ms``, NOT_LEADER_OR_FOLLOWER if leadership moved meanwhile (the records may then be gone)."""
        from ..replica_access import AppendResult

        pending = {tp: r for tp, r in results.items() if r.error is None and r.info is not None}
        if not pending:
            return results
        out = dict(results)
        deadline = time.monotonic() + timeout_ms / 1000.0
        purgatory = self.server.purgatory
        while pending:
            event = purgatory.watch(list(pending))
            try:
                for tp in list(pending):
                    error, done = self._ack_state(tp, pending[tp])
                    if done:
                        out[tp] = AppendResult(error, pending[tp].info if error is None else None)
                        del pending[tp]
                if not pending:
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self.server.stopping:
                    break
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(event.wait(), remaining)
            finally:
                purgatory.unwatch(list(pending) or [], event)
        for tp in pending:
            out[tp] = AppendResult(
                RequestTimedOutError(
                    f"Timed out after {timeout_ms} ms waiting for the in-sync replicas of {tp} to replicate"
                ),
                None,
            )
        return out

    def _ack_state(self, tp: TopicPartition, result) -> tuple[BaseException | None, bool]:
        try:
            partition = self.replica_manager.get_partition(tp.topic, tp.partition)
        except UnknownTopicOrPartitionError as e:
            return e, True
        if not partition.is_leader:
            return NotLeaderOrFollowerError(f"Leadership of {tp} moved while waiting for the replicas"), True
        required = result.info.last_offset + 1
        if partition.high_watermark < required:
            return None, False
        min_isr = partition.min_insync_replicas
        if len(partition.isr) < min_isr:
            return (
                NotEnoughReplicasAfterAppendError(
                    f"The ISR {sorted(partition.isr)} of {tp} is below min.insync.replicas {min_isr} after the append"
                ),
                True,
            )
        return None, True

    def watched_for_acks(self, results: dict) -> Iterable[TopicPartition]:
        return [tp for tp, r in results.items() if r.error is None]

    # ----- topics ----------------------------------------------------------------------------------------------
    async def create_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        config: dict[str, str],
        validate_only: bool,
        replica_assignment: dict[int, list[int]] | None = None,
    ) -> zk.TopicAssignment:
        """CreateTopics in ZooKeeper mode (Kafka's AdminZkClient.createTopic): the config, then the assignment
        (Kafka's rack-unaware one, or ``replica_assignment`` as given, checked as Kafka checks it); the controller
        then creates each partition's state, and the replicas their logs."""
        validate_topic_name(name)
        LogConfig(config, broker=self.server.config.log)  # InvalidConfigurationError before anything is written
        # The registered brokers now (not the last view, which may predate a broker's registration).
        brokers = sorted(int(b) for b in await asyncio.to_thread(self.zk.get_children, zk.BROKER_IDS))
        if replica_assignment:
            assignment = zk.TopicAssignment(_checked_assignment(replica_assignment, brokers), new_uuid())
        elif replication_factor > len(brokers):
            raise InvalidReplicationFactorError(
                f"Unable to replicate the partition {replication_factor} time(s): The target replication factor of "
                f"{replication_factor} cannot be reached because only {len(brokers)} broker(s) are registered."
            )
        else:
            assignment = zk.TopicAssignment(assign_replicas(brokers, partitions, replication_factor), new_uuid())
        if validate_only:
            if await asyncio.to_thread(self.zk.exists, zk.topic_path(name)):
                raise TopicExistsError(f"Topic '{name}' already exists.")
            return assignment
        await asyncio.to_thread(self._write_topic, name, assignment, config)
        self.request_resync()
        return assignment

    def _write_topic(self, name: str, assignment: zk.TopicAssignment, config: dict[str, str]) -> None:
        from kazoo.exceptions import NodeExistsError

        if self.zk.exists(zk.topic_path(name)):
            raise TopicExistsError(f"Topic '{name}' already exists.")
        if self.zk.exists(zk.topic_config_path(name)):
            self.zk.set(zk.topic_config_path(name), zk.encode_topic_config(config))
        else:
            self.zk.create(zk.topic_config_path(name), zk.encode_topic_config(config), makepath=True)
        try:
            self.zk.create(zk.topic_path(name), assignment.encode(), makepath=True)
        except NodeExistsError:
            raise TopicExistsError(f"Topic '{name}' already exists.") from None

    async def wait_for_topic(self, name: str, timeout: float = 10.0) -> bool:
        """Wait until every partition of ``name`` has a state (so Metadata can answer with leaders)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assignment = self.view.topics.get(name)
            if assignment and all(TopicPartition(name, p) in self.view.states for p in assignment.partitions):
                return True
            self.request_resync()
            await asyncio.sleep(0.05)
        return False
