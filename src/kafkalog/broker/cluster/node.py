"""A broker's membership of a ZooKeeper-coordinated cluster (Kafka's KafkaZkClient, KafkaController, and the
replica manager's leader/follower transitions and ISR maintenance, ZooKeeper mode).

Everything runs on the broker's event loop. ZooKeeper calls (kazoo, blocking) run in worker threads; kazoo's
watch callbacks only mark the view stale (``request_resync``), and one reconcile task then re-reads the cluster
(brokers, topics, partition states, the controller) and brings this broker to it: registered, leading what the
state znodes say it leads, following the rest with a fetcher per leader, and, if it holds ``/controller``,
electing leaders. Level-triggered: a lost watch or a reconnect costs one more read, never a missed change; a
timer resyncs as well.
The node's parts: ``zk_node`` (the session, registration and reads), ``leadership`` (leader/follower transitions,
ISR, acks=-1, the coordinators' partitions), ``topic_admin`` (CreateTopics, CreatePartitions, DeleteTopics), and
here the lifecycle, the reconcile pass and the controller's election pass.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from ...errors import NotControllerError
from ...manager import TopicPartition
from . import zkdata as zk
from .leadership import LeadershipMixin
from .state import ClusterSettings, ClusterView
from .topic_admin import TopicAdminMixin
from .zk_node import log

__all__ = ["ClusterNode", "ClusterSettings"]


class ClusterNode(LeadershipMixin, TopicAdminMixin):
    """This broker in a ZooKeeper cluster. Invariant: a local partition is leader exactly when the last state
    znode read says this broker leads it at that epoch; every other local replica is a follower (fetching if its
    leader is known)."""

    # ----- lifecycle ------------------------------------------------------------------------------------
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
