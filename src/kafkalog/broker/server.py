"""KafkaServer: the log manager, the replica manager, the socket server and the request router of one node.

``startup`` loads the log dirs (recovering after an unclean shutdown), then listens; ``shutdown`` stops
accepting, lets in-flight requests finish, and shuts the log manager down, which flushes and writes the
clean-shutdown marker so that the next start skips recovery.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import logging
import signal
import sys
import threading
from pathlib import Path

from ..clock import SYSTEM_TIME
from ..coordinator.group import GROUP_METADATA_TOPIC_NAME, GroupCoordinator
from ..coordinator.transaction import TRANSACTION_STATE_TOPIC_NAME, TransactionCoordinator
from ..errors import InconsistentClusterIdError, KafkaStorageError
from ..logdir import MetaProperties
from ..manager import LogManager
from ..storage.validator import warm_up
from .apis import RequestRouter
from .cluster.node import ClusterNode, ClusterSettings
from .cluster.producer_ids import ZkProducerIdManager
from .cluster.security_zk import ZkAclStore, ZkCredentialStore
from .cluster.txn import TransactionCluster
from .config import KafkaConfig
from .fetch_session import FetchManager, FetchSessionCache
from .handlers.group import LoopScheduler
from .metrics import BrokerMetrics, MetricsEndpoint
from .network import SocketSecurity, SocketServer
from .producer_ids import ProducerIdManager
from .purgatory import FetchPurgatory
from .quota import CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE, QuotaManager, QuotaStore, request_quota
from .replica_access import ReplicaManager, prepare_replica_manager
from .security.acl import Authorizer
from .security.context import CURRENT
from .security.sasl import SaslAuthenticator, listener_sasl
from .security.scram import CredentialStore
from .security.tls import principal_mapper, server_context

log = logging.getLogger("kafka.server.KafkaServer")


def _meta_properties(config: KafkaConfig, cluster_id: str | None = None) -> MetaProperties:
    """The cluster id and node id of the log dirs, created on first start; a node id mismatch is refused.

    ``cluster_id`` is ZooKeeper's ``/cluster/id`` for a broker of a ZooKeeper cluster: log dirs of another
    cluster are refused (Kafka's InconsistentClusterIdException), and new dirs take it."""
    found = [(d, m) for d in config.log_dirs if (m := MetaProperties.read(d)) is not None]
    for directory, meta in found:
        if meta.node_id is not None and meta.node_id != config.node_id:
            raise KafkaStorageError(
                f"Stored node id {meta.node_id} doesn't match the configured node.id {config.node_id} "
                f"in meta.properties of {directory}. If you moved your data, make sure your configured node id "
                "matches. If you intend to create a new node, you should remove all data in your data directories."
            )
    cluster_ids = {m.cluster_id for _, m in found if m.cluster_id}
    if len(cluster_ids) > 1:
        raise KafkaStorageError(f"The log dirs belong to different clusters: {sorted(cluster_ids)}")
    if cluster_id is not None:
        if cluster_ids and cluster_ids != {cluster_id}:
            raise InconsistentClusterIdError(
                f"The Cluster ID {cluster_id} doesn't match stored clusterId {sorted(cluster_ids)} in meta.properties. "
                "The broker is trying to join the wrong cluster. Configured zookeeper.connect may be wrong."
            )
        cluster_ids = {cluster_id}
    template = MetaProperties.generate(cluster_id=next(iter(cluster_ids), None), node_id=config.node_id)
    for directory in config.log_dirs:
        meta = MetaProperties.read(directory)
        if meta is None:
            Path(directory).mkdir(parents=True, exist_ok=True)
            MetaProperties.generate(cluster_id=template.cluster_id, node_id=config.node_id).write(directory)
        elif meta.cluster_id is None:
            # A ZooKeeper-era v0 file may lack cluster.id (the cluster id lived in ZooKeeper); Kafka itself then
            # writes the id into the v0 file, so it stays the same across restarts.
            dataclasses.replace(meta, cluster_id=template.cluster_id).write(directory)
    return template


def settle_heap() -> None:
    """Move every object alive after startup out of the garbage collector's reach (``gc.freeze``).

    The broker's heap after startup (the protocol schemas, numba and llvmlite, the loaded logs: about 140,000
    tracked objects) is mostly permanent, yet each full collection walks all of it with the event loop stopped,
    a pause every waiting client request shares: ``gc.collect()`` in a started broker took 250-520 ms at load
    14 on the shared 2 cores, and 0.0 ms once frozen (issue 23). A frozen heap's full pass walks only what was
    allocated since; cyclic garbage made later is still collected. Called once startup is done, after one
    collection so that startup's own garbage is not frozen with it, and only by the process that is the broker
    (``serve_forever``): freezing is process-wide, and a test or an embedding application keeps its collector.
    """
    gc.collect()
    gc.freeze()


# How long a thread may hold the GIL while another waits for it (CPython's default: 5 ms).
SWITCH_INTERVAL_S = 0.0005


def shorten_gil_switch_interval() -> None:
    """Let the event loop take the GIL back from a busy background thread within 0.5 ms rather than 5 ms.

    The loop shares the GIL with the scheduler's threads (checkpoints every few seconds, retention, the log
    cleaner's passes, partition.metadata writes). When one of them runs Python code while a request is ready,
    CPython lets it keep the GIL for the whole switch interval before handing it over: a stall of up to 5 ms
    for every client waiting on the loop, which is the size of issue 23's latency goal (p99 <= 5 ms). Half a
    millisecond bounds that wait; the price, more GIL hand-offs when two threads both run Python, is paid only
    while a background task runs. Process-wide, so set only by the broker process (``serve_forever``).
    """
    sys.setswitchinterval(SWITCH_INTERVAL_S)


class KafkaServer:
    """One broker. Invariant: requests are served only between a completed startup and the start of shutdown."""

    def __init__(self, config: KafkaConfig, *, zero_copy: bool = True) -> None:
        self.config = config
        self.node_id = config.node_id
        self.zero_copy = zero_copy
        self.log_manager: LogManager | None = None
        self.replica_manager: ReplicaManager | None = None
        self.producer_ids: ProducerIdManager | ZkProducerIdManager | None = None
        self.purgatory: FetchPurgatory | None = None
        self.socket_server: SocketServer | None = None
        self.group_coordinator: GroupCoordinator | None = None
        self.txn_coordinator: TransactionCoordinator | None = None
        self.txn_cluster: TransactionCluster | None = None  # the transaction coordinator's ties to a ZK cluster
        self.cluster_id: str | None = None
        # ZooKeeper mode (zookeeper.connect set): this broker's membership of the cluster; None = a single node.
        self.cluster_settings = ClusterSettings.from_properties(config.props)
        self.cluster: ClusterNode | None = None
        self.credential_store: CredentialStore | None = None
        self.authorizer: Authorizer | None = None
        self.quota_store: QuotaStore | None = None
        self.produce_quota: QuotaManager | None = None
        self.fetch_quota: QuotaManager | None = None
        self.request_quota: QuotaManager | None = None
        # The request path's counters (always kept: a few integer adds per request); served over HTTP when
        # metrics.port is set (broker/metrics.py).
        self.metrics = BrokerMetrics()
        # Incremental fetch sessions (KIP-227), used on the event loop's thread only.
        self.fetch_manager = FetchManager(
            FetchSessionCache(
                config.max_incremental_fetch_session_cache_slots,
                config.min_incremental_fetch_session_eviction_ms,
                SYSTEM_TIME,
            )
        )
        self.metrics_endpoint: MetricsEndpoint | None = None
        self.stopping = False
        self._shutdown_started = False
        self._stopped = asyncio.Event()

    # ----- lifecycle --------------------------------------------------------------------------------
    def _socket_security(self) -> SocketSecurity:
        """TLS contexts and SASL settings of the listeners, checked before anything is loaded or bound."""
        props = self.config.props
        contexts = {e.name: server_context(props, e) for e in self.config.listeners if e.tls}
        mappers = {e.name: principal_mapper(props, e) for e in self.config.listeners if e.tls}
        sasl = {e.name: listener_sasl(props, e) for e in self.config.listeners if e.sasl}
        reauth_ms = self.config.connections_max_reauth_ms

        def factory(endpoint) -> SaslAuthenticator:
            return SaslAuthenticator(sasl[endpoint.name], self.credential_store, reauth_ms)

        return SocketSecurity(
            ssl_contexts=contexts,
            principal_mappers=mappers,
            sasl_factory=factory,
            max_connections=self.config.max_connections,
            max_connections_per_ip=self.config.max_connections_per_ip,
            max_connections_per_ip_overrides=self.config.max_connections_per_ip_overrides,
            connections_max_idle_ms=self.config.connections_max_idle_ms,
        )

    async def startup(self) -> None:
        log.info("[KafkaServer id=%d] starting", self.node_id)
        # The record kernel's one-off load (about a second) overlaps the log loading, not the first produce.
        warming = threading.Thread(target=warm_up, name="kafkalog-warm-up", daemon=True)
        warming.start()
        security = self._socket_security()
        zk_cluster_id = await self._open_stores()
        self._load_logs(zk_cluster_id)
        self._start_quotas()
        self._start_group_coordinator()
        await asyncio.get_running_loop().run_in_executor(None, warming.join)
        self._start_txn_coordinator()
        await self._listen(security)
        log.info("[KafkaServer id=%d] started (cluster id %s)", self.node_id, self.cluster_id)

    async def _open_stores(self) -> str | None:
        """The ACL, SCRAM and quota stores; on a ZooKeeper cluster, joins it first and returns its cluster id.

        A single node keeps its ACLs and SCRAM credentials in the first log dir; a broker of a ZooKeeper cluster
        keeps them where Kafka's ZooKeeper mode does, shared by every broker (cluster/security_zk.py)."""
        props, first_dir = self.config.props, self.config.log_dirs[0]
        if self.cluster_settings is None:
            self.authorizer = Authorizer.from_config(props, first_dir)
            self.credential_store = CredentialStore(first_dir)
        self.quota_store = QuotaStore(first_dir)
        if self.cluster_settings is None:
            return None
        self.cluster = ClusterNode(self, self.cluster_settings)
        zk_cluster_id = await self.cluster.connect()
        zk_client = self.cluster.zk
        acl_store = None
        if props.get("authorizer.class.name", "").strip():
            acl_store = await asyncio.to_thread(ZkAclStore, zk_client)
        self.authorizer = Authorizer.from_config(props, first_dir, store=acl_store)
        self.credential_store = await asyncio.to_thread(ZkCredentialStore, zk_client)
        return zk_cluster_id

    def _load_logs(self, zk_cluster_id: str | None) -> None:
        """meta.properties checked (or written), the log dirs loaded, the purgatory listening to high watermarks."""
        meta = _meta_properties(self.config, zk_cluster_id)
        self.cluster_id = meta.cluster_id
        self.log_manager = LogManager(self.config.log_dirs, self.config.log)
        self.replica_manager = prepare_replica_manager(
            self.log_manager, self.node_id, epochs_from_controller=self.cluster is not None
        )
        self.log_manager.startup()
        if self.cluster is not None:
            self.cluster.replica_manager = self.replica_manager
            for tp, partition in self.replica_manager.partitions.items():
                # Lead nothing until ZooKeeper's state says so: a restarted broker may no longer be the leader.
                # __consumer_offsets and __transaction_state are replicated like any topic.
                if not tp.topic.startswith("__") or tp.topic in ("__consumer_offsets", TRANSACTION_STATE_TOPIC_NAME):
                    partition.make_follower(-1, partition.leader_epoch)
        self.purgatory = FetchPurgatory(asyncio.get_running_loop())
        self.replica_manager.add_listener(self.purgatory.notify)

    def _start_quotas(self) -> None:
        """The producer id source and the client quotas (byte rates and request percentage)."""
        self.producer_ids = ProducerIdManager(self.log_manager.log_dirs[0])
        if self.cluster is not None:
            # Every broker of a cluster hands out ids: they come from ZooKeeper's block, never a local file.
            self.producer_ids = ZkProducerIdManager(self.cluster.zk, self.node_id)
        samples, window_ms = self.config.quota_window_num, self.config.quota_window_size_seconds * 1000
        self.produce_quota = QuotaManager(self.quota_store, PRODUCER_BYTE_RATE, samples, window_ms)
        self.fetch_quota = QuotaManager(self.quota_store, CONSUMER_BYTE_RATE, samples, window_ms)
        self.request_quota = request_quota(self.quota_store, samples, window_ms)

    def _start_group_coordinator(self) -> None:
        """A single node loads the groups and offsets of __consumer_offsets now; a broker of a cluster loads each
        partition when it becomes its leader."""
        self.group_coordinator = GroupCoordinator(
            self.log_manager,
            self.config.group_coordinator,
            self.log_manager.clock,
            LoopScheduler(asyncio.get_running_loop()),
        )
        if self.cluster is not None:
            self.group_coordinator.cluster_partition_exists = self.cluster.partition_exists
        self.group_coordinator.startup(clustered=self.cluster is not None)

    def _start_txn_coordinator(self) -> None:
        """The transaction coordinator, after the group coordinator (it settles pending transactional offsets)."""
        self.txn_coordinator = TransactionCoordinator(
            self.log_manager,
            self.config.transaction_coordinator,
            self.log_manager.clock,
            LoopScheduler(asyncio.get_running_loop()),
            self.producer_ids.generate_producer_id,
        )
        self.txn_coordinator.add_marker_listener(self._on_txn_marker)
        if self.cluster is not None:
            # Each __transaction_state partition is loaded when this broker becomes its leader; markers go over the
            # wire to the partitions' leaders.
            self.txn_cluster = TransactionCluster(self.cluster, self.txn_coordinator, self.config.props)
        # loads __transaction_state; transactions caught in PrepareCommit/PrepareAbort get their markers now (and
        # the group coordinator, loaded first, makes their pending offsets visible or drops them)
        self.txn_coordinator.startup(clustered=self.cluster is not None)

    async def _listen(self, security: SocketSecurity) -> None:
        """Bind the listeners, join the cluster's control plane and serve metrics; on failure, undo what started."""
        self.socket_server = SocketServer(
            self.config.listeners,
            RequestRouter(self),
            max_request_bytes=self.config.socket_request_max_bytes,
            zero_copy=self.zero_copy,
            security=security,
            metrics=self.metrics,
            send_buffer_bytes=self.config.socket_send_buffer_bytes,
            receive_buffer_bytes=self.config.socket_receive_buffer_bytes,
            listen_backlog=self.config.socket_listen_backlog_size,
        )
        try:
            await self.socket_server.start()
            if self.cluster is not None:
                await self.cluster.start()
            if self.config.metrics_port is not None:
                self.metrics_endpoint = MetricsEndpoint(self, self.config.metrics_host, self.config.metrics_port)
        except BaseException:
            if self.cluster is not None:
                await self.cluster.stop()
            self.log_manager.shutdown()
            raise

    async def shutdown(self) -> None:
        if self.stopping or self._shutdown_started:
            return
        self._shutdown_started = True
        log.info("[KafkaServer id=%d] shutting down", self.node_id)
        if self.cluster is not None:
            # Kafka's controlled shutdown: leadership moves to other replicas while requests are still served.
            await self.cluster.controlled_shutdown()
        self.stopping = True
        if self.purgatory is not None:
            self.purgatory.wake_all()  # long polls answer now rather than at their max wait
        if self.txn_coordinator is not None:
            self.txn_coordinator.shutdown()
        if self.group_coordinator is not None:
            self.group_coordinator.shutdown()  # waiting JoinGroup / SyncGroup answer NOT_COORDINATOR now
        if self.cluster is not None:
            await self.cluster.stop()  # leaves ZooKeeper first: the controller moves leadership off this broker
        if self.socket_server is not None:
            await self.socket_server.stop()
        if self.metrics_endpoint is not None:
            self.metrics_endpoint.close()
        if self.log_manager is not None:
            self.log_manager.shutdown()
        log.info("[KafkaServer id=%d] shut down completed", self.node_id)
        self._stopped.set()

    async def serve_forever(self) -> None:
        """Start, run until SIGTERM or SIGINT, then shut down cleanly (the ``kafkalog serve`` process)."""
        await self.startup()
        settle_heap()
        shorten_gil_switch_interval()
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        signals = (signal.SIGTERM, signal.SIGINT)
        previous = {sig: signal.getsignal(sig) for sig in signals}
        for sig in signals:
            loop.add_signal_handler(sig, self._on_stop_signal, sig, stop)
        try:
            await stop.wait()
        finally:
            # The handlers stay for the whole shutdown: a second SIGTERM or Ctrl-C while the logs are being
            # flushed is logged and ignored, as Kafka's broker goes on with its shutdown once it started (asyncio
            # would put back the default action, which kills the process before the clean-shutdown marker).
            try:
                await self.shutdown()
            finally:
                for sig in signals:
                    loop.remove_signal_handler(sig)
                    if previous[sig] is not None:
                        signal.signal(sig, previous[sig])

    def _on_stop_signal(self, signum: int, stop: asyncio.Event) -> None:
        if stop.is_set():
            log.info(
                "[KafkaServer id=%d] %s ignored: shutdown already in progress",
                self.node_id,
                signal.Signals(signum).name,
            )
            return
        stop.set()

    def _on_txn_marker(self, tp, producer_id: int, committed: bool) -> None:
        """A transaction marker reached a partition: wake its long polls (the LSO moved) and, in
        __consumer_offsets, settle the transaction's pending offsets (Kafka's onTransactionCompleted)."""
        if self.purgatory is not None:
            self.purgatory.notify(tp)
        if tp.topic == GROUP_METADATA_TOPIC_NAME and self.group_coordinator is not None:
            self.group_coordinator.complete_transaction(producer_id, tp.partition, committed)

    # ----- what the handlers use ----------------------------------------------------------------------
    @property
    def bound_addresses(self) -> list[tuple[str, int]]:
        return list(self.socket_server.bound) if self.socket_server else []

    def advertised_endpoints(self) -> list[tuple[str, str, str, int]]:
        """(listener, security protocol, host, port) of every advertised listener, the inter-broker one first
        (what a broker of a cluster registers in ZooKeeper)."""
        inter = self.config.inter_broker_listener
        ordered = sorted(self.config.advertised, key=lambda e: e.name != inter)
        return [(e.name, e.security_protocol, *self._resolved(e)) for e in ordered]

    def advertised_endpoint(self) -> tuple[str, int]:
        """(host, port) clients are told to connect to: the advertised listener of the request's listener (as
        Kafka answers with the endpoints of the listener a request came in on), else the first one."""
        listener = CURRENT.get().listener
        endpoint = next((e for e in self.config.advertised if e.name == listener), self.config.advertised[0])
        return self._resolved(endpoint)

    def _resolved(self, endpoint) -> tuple[str, int]:
        """An advertised endpoint with port 0 or no host resolved to where its listener is bound."""
        host, port = endpoint.host, endpoint.port
        if port == 0 or not host or host == "0.0.0.0":
            bound = self.socket_server.bound_by_listener.get(endpoint.name) if self.socket_server else None
            if bound is None:
                bound = self.bound_addresses[0] if self.bound_addresses else ("127.0.0.1", port)
            bound_host, bound_port = bound
            if port == 0:
                port = bound_port
            if not host or host == "0.0.0.0":
                host = bound_host if bound_host not in ("0.0.0.0", "::") else "127.0.0.1"
        return host, port

    def auto_create_topic(self, name: str) -> None:
        self.log_manager.create_topic(name, self.config.num_partitions)
        log.info("Auto-created topic %s with %d partition(s)", name, self.config.num_partitions)
