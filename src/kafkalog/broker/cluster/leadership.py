"""The broker side of a partition's leadership in a ZooKeeper cluster (Kafka's ReplicaManager.becomeLeaderOrFollower,
Partition's ISR maintenance and DelayedProduce, ZooKeeper mode), and the coordinators' partitions that follow it
(Kafka's onLeadershipChange for ``__consumer_offsets``).

Leader-side state (which followers are caught up and since when) lives in ``LeaderState``: it decides ISR
shrinks (a follower not caught up for ``replica.lag.time.max.ms``) and expansions (a follower that reached the
high watermark), each a conditional write of the state znode on its version.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterable

from ...errors import (
    NotEnoughReplicasAfterAppendError,
    NotLeaderOrFollowerError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
)
from ...logdir import new_uuid
from ...manager import TopicPartition
from . import zkdata as zk
from .fetcher import ReplicaFetcher
from .state import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, ClusterView, FollowerProgress, LeaderState
from .zk_node import ZkNode, log


class LeadershipMixin(ZkNode):
    """Applies the partition states of the view to the local replicas. Invariant: a local partition is leader
    exactly when the last state znode read says this broker leads it at that epoch, with a ``LeaderState`` in
    ``leaders``; every other local replica is a follower (fetching if its leader is known)."""

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
        write): None when it did, NotLeaderOrFollowerError if leadership moved, RequestTimedOutError after
        ``timeout_ms`` (or once the broker stops)."""
        deadline = time.monotonic() + timeout_ms / 1000.0
        purgatory = self.server.purgatory
        purgatory.notify(tp)  # the followers' long-polling fetches wait for the coordinator's new records too
        while True:
            try:
                partition = self.replica_manager.get_partition(tp.topic, tp.partition)
            except UnknownTopicOrPartitionError as e:
                return e
            if not partition.is_leader:
                return NotLeaderOrFollowerError(f"Leadership of {tp} moved while waiting for the replicas")
            if partition.high_watermark >= end_offset:
                return None
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self.server.stopping:
                return RequestTimedOutError(f"Timed out waiting for the in-sync replicas of {tp}")
            event = purgatory.watch([tp])
            try:
                if partition.high_watermark >= end_offset or not partition.is_leader:
                    continue
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(event.wait(), min(remaining, 0.5))
            finally:
                purgatory.unwatch([tp], event)

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
