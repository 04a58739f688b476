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
    InvalidReplicationFactorError,
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
from .fetcher import ReplicaFetcher

log = logging.getLogger("kafka.cluster")


def _int(props: dict[str, str], key: str, default: int) -> int:
    raw = props.get(key)
    return default if raw is None else int(str(raw).strip())


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
        )


@dataclass
class ClusterView:
    """What this broker last read from ZooKeeper."""

    brokers: dict[int, zk.BrokerInfo] = field(default_factory=dict)
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
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._reconcile_loop(), name="cluster-reconcile"))
        self._tasks.append(loop.create_task(self._isr_expiration_loop(), name="isr-expiration"))
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
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for fetcher in list(self.fetchers.values()):
            await fetcher.stop()
        self.fetchers.clear()
        # Closing the session removes /brokers/ids/N (and /controller if held) at once: the controller moves
        # leadership off this broker now rather than after the session timeout.
        await asyncio.to_thread(self._close)

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
        while True:
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
        self._apply(view)
        if self.registered.is_set() and view.controller_id >= 0:
            self.ready.set()

    def _ensure_registered(self) -> bool:
        """Create /brokers/ids/N (ephemeral) unless this session holds it; False while an older session does."""
        from kazoo.exceptions import NodeExistsError

        path = zk.broker_path(self.broker_id)
        host, port = self.server.advertised_endpoint()
        stat = self.zk.exists(path)
        if stat is not None:
            if stat.ephemeralOwner == self.zk.client_id[0]:
                self.registered.set()
                return True
            if not self.registered.is_set():
                log.info("[Broker %d] %s is held by an older session; waiting for it to expire", self.broker_id, path)
            return False
        try:
            self.zk.create(path, zk.BrokerInfo(self.broker_id, host, port).encode(), ephemeral=True, makepath=True)
            log.info("[Broker %d] registered at %s:%d", self.broker_id, host, port)
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
                data, _ = self.zk.get(zk.broker_path(int(child)))
                view.brokers[int(child)] = zk.BrokerInfo.decode(int(child), data)
            except (NoNodeError, ValueError):
                continue
        for topic in self.zk.get_children(zk.BROKER_TOPICS):
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

        live = set(view.brokers)
        epoch = view.controller_epoch
        wrote = False
        for topic, assignment in view.topics.items():
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
        candidates = [r for r in replicas if r in live_isr]
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
        wanted: dict[int, dict[TopicPartition, int]] = {}
        for topic, assignment in view.topics.items():
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
                    if state.leader != zk.NO_LEADER and state.leader in view.brokers:
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
        now = time.monotonic() * 1000
        followers = {r: FollowerProgress(last_caught_up_ms=now) for r in replicas if r != self.broker_id}
        self.leaders[tp] = LeaderState(state, list(replicas), followers)
        partition.make_leader(state.leader_epoch, set(state.isr) | {self.broker_id})
        log.info("[Broker %d] %s: leader at epoch %d, isr %s", self.broker_id, tp, state.leader_epoch, state.isr)
        self.high_watermark_moved(tp)

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
        log.info("[Broker %d] %s: follower of %d at epoch %d", self.broker_id, tp, state.leader, state.leader_epoch)
        if was_leader:
            self.high_watermark_moved(tp)  # waiting acks=-1 produces answer NOT_LEADER_OR_FOLLOWER now

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
        while True:
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
        self, name: str, partitions: int, replication_factor: int, config: dict[str, str], validate_only: bool
    ) -> zk.TopicAssignment:
        """CreateTopics in ZooKeeper mode (Kafka's AdminZkClient.createTopic): the config, then the assignment;
        the controller then creates each partition's state, and the replicas their logs."""
        validate_topic_name(name)
        LogConfig(config, broker=self.server.config.log)  # InvalidConfigurationError before anything is written
        # The registered brokers now (not the last view, which may predate a broker's registration).
        brokers = sorted(int(b) for b in await asyncio.to_thread(self.zk.get_children, zk.BROKER_IDS))
        if replication_factor > len(brokers):
            raise InvalidReplicationFactorError(
                f"Unable to replicate the partition {replication_factor} time(s): The target replication factor of "
                f"{replication_factor} cannot be reached because only {len(brokers)} broker(s) are registered."
            )
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
