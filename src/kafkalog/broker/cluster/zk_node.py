"""A broker's ZooKeeper session (Kafka's KafkaZkClient, as one node uses it): the client, Kafka's top-level paths
and the cluster id, this broker's registration, the watches that mark the view stale, and the reads of the view
(brokers, topics, partition states, the controller).

``ZkNode`` holds the node's state; the leadership changes (``leadership.py``), the topic admin
(``topic_admin.py``) and the node itself (``node.py``: lifecycle, reconcile, the controller's election pass) build
on it. ZooKeeper calls block: they run in worker threads (``asyncio.to_thread``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from ...logdir import new_uuid
from ...manager import TopicPartition
from . import zkdata as zk
from .controller import ControllerActions
from .fetcher import ReplicaFetcher
from .interbroker import InterBrokerSecurity
from .state import ClusterSettings, ClusterView, LeaderState, StampedViewHolder

log = logging.getLogger("kafka.cluster")


class ZkNode(StampedViewHolder):
    """This broker's ZooKeeper session and what it last read. Invariant: ``view`` is the last complete read;
    a watch or a reconnect only marks it stale (``request_resync``), the reconcile task re-reads it."""

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

    def _address(self, broker_id: int) -> tuple[str, int] | None:
        info = self.view.brokers.get(broker_id)
        return None if info is None else (info.host, info.port)

    def high_watermark_moved(self, tp: TopicPartition) -> None:
        purgatory = self.server.purgatory
        if purgatory is not None:
            purgatory.notify(tp)
