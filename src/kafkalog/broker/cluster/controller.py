"""What the controller does on request or on a timer, beyond its election pass (Kafka's KafkaController, ZooKeeper
mode): controlled shutdown of a broker, preferred and unclean leader elections (the ElectLeaders API and the
auto-leader-rebalance task), and topic deletion.

Each action rewrites partition state znodes, each write conditional on the version just read (a concurrent ISR
change by a leader makes it re-read and decide again). Brokers watch those znodes and follow, as they follow
every other election. The methods here block on ZooKeeper: the node runs them in worker threads.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable
from typing import Any

from ...errors import (
    BrokerNotAvailableError,
    ElectionNotNeededError,
    EligibleLeadersNotAvailableError,
    KafkaLogError,
    NotControllerError,
    PreferredLeaderNotAvailableError,
    StaleBrokerEpochError,
    UnknownTopicOrPartitionError,
)
from ...manager import TopicPartition
from . import zkdata as zk

log = logging.getLogger("kafka.controller.KafkaController")

PREFERRED, UNCLEAN = 0, 1  # ElectLeaders' election types (Kafka's ElectionType)

# A choice of a partition's next state: the new state, None for "nothing to write", or a KafkaLogError raised.
Choice = Callable[[TopicPartition, zk.LeaderAndIsr, list[int]], zk.LeaderAndIsr | None]


class ControllerActions:
    """The controller's requested actions. Invariant: ``shutting_down`` maps each broker in controlled shutdown to
    the epoch (registration czxid) it asked with; such a broker is never chosen as a leader nor kept in an ISR it
    leaves, and the entry goes when that registration goes."""

    def __init__(self, node: Any) -> None:
        self.node = node
        self.shutting_down: dict[int, int] = {}
        # Topic under deletion -> the replica brokers that confirmed deleting their replicas (StopReplica).
        self.deletion_acks: dict[str, set[int]] = {}

    @property
    def zk(self) -> Any:
        return self.node.zk

    # ----- common --------------------------------------------------------------------------------------------
    def _require_controller(self) -> int:
        """The controller epoch, if this broker holds /controller now; NotControllerError otherwise."""
        controller, epoch = self.node._read_controller()
        if controller != self.node.broker_id:
            raise NotControllerError(
                f"Broker {self.node.broker_id} is not the controller (the controller is {controller})"
            )
        return int(epoch)

    def forget_departed(self, epochs: dict[int, int]) -> None:
        """Drop shutting-down entries whose registration is gone or was replaced (a restart)."""
        for broker_id, epoch in list(self.shutting_down.items()):
            if epochs.get(broker_id) != epoch:
                self.shutting_down.pop(broker_id, None)

    def rewrite(
        self, tps: Iterable[TopicPartition], choose: Choice, controller_epoch: int
    ) -> dict[TopicPartition, BaseException | None]:
        """Apply ``choose`` to each partition's current state and write the result conditionally, re-reading on a
        lost race. Returns each partition's outcome (None = done or nothing to do, else the error)."""
        from kazoo.exceptions import BadVersionError, NoNodeError

        view = self.node.view
        results: dict[TopicPartition, BaseException | None] = {}
        for tp in tps:
            path = zk.partition_state_path(tp.topic, tp.partition)
            assignment = view.topics.get(tp.topic)
            replicas = assignment.partitions.get(tp.partition) if assignment is not None else None
            if replicas is None:
                results[tp] = UnknownTopicOrPartitionError(f"The partition {tp} does not exist.")
                continue
            for _ in range(5):
                try:
                    data, stat = self.zk.get(path)
                except NoNodeError:
                    results[tp] = UnknownTopicOrPartitionError(f"The partition {tp} has no state yet.")
                    break
                state = zk.LeaderAndIsr.decode(data, stat.version)
                try:
                    new = choose(tp, state, replicas)
                except KafkaLogError as e:
                    results[tp] = e
                    break
                results[tp] = None
                if new is None:
                    break
                new = zk.LeaderAndIsr(new.leader, new.leader_epoch, new.isr, controller_epoch)
                try:
                    self.zk.set(path, new.encode(), version=stat.version)
                except BadVersionError:
                    continue
                log.info(
                    "[Controller id=%d] %s: leader %d -> %d, epoch %d, isr %s -> %s",
                    self.node.broker_id,
                    tp,
                    state.leader,
                    new.leader,
                    new.leader_epoch,
                    state.isr,
                    new.isr,
                )
                break
        if results:
            self.node.request_resync()
        return results

    def _live(self) -> set[int]:
        return set(self.node.view.brokers) - set(self.shutting_down)

    # ----- controlled shutdown (Kafka's KafkaController.doControlledShutdown) --------------------------------
    def controlled_shutdown(self, broker_id: int, broker_epoch: int) -> list[TopicPartition]:
        """Move the leadership of every replicated partition ``broker_id`` leads to another live ISR member, and take
        it out of the ISRs it follows in; return the partitions it still leads (no other ISR member is alive)."""
        controller_epoch = self._require_controller()
        stat = self.zk.exists(zk.broker_path(broker_id))
        if stat is None:
            raise BrokerNotAvailableError(f"Broker id {broker_id} does not exist.")
        if broker_epoch != -1 and broker_epoch < stat.czxid:
            raise StaleBrokerEpochError(
                f"Received controlled shutdown request from an old broker epoch {broker_epoch} of broker {broker_id}"
                f" (current epoch {stat.czxid})"
            )
        self.shutting_down[broker_id] = stat.czxid
        log.info("[Controller id=%d] shutting down broker %d", self.node.broker_id, broker_id)
        self.node.view = view = self.node._read_view()
        live = self._live()
        hosted = [
            TopicPartition(topic, p)
            for topic, assignment in view.topics.items()
            for p, replicas in assignment.partitions.items()
            if broker_id in replicas and len(replicas) > 1
        ]

        def choose(tp: TopicPartition, state: zk.LeaderAndIsr, replicas: list[int]) -> zk.LeaderAndIsr | None:
            if state.leader == broker_id:
                isr = [r for r in state.isr if r not in self.shutting_down]
                candidates = [r for r in replicas if r in isr and r in live]
                if not candidates:
                    return None  # stays here: reported as remaining
                return zk.LeaderAndIsr(candidates[0], state.leader_epoch + 1, isr, 0)
            if broker_id in state.isr and state.leader != zk.NO_LEADER and len(state.isr) > 1:
                # A follower leaves the ISR now rather than after replica.lag.time.max.ms (Kafka's OfflineReplica).
                isr = [r for r in state.isr if r != broker_id]
                return zk.LeaderAndIsr(state.leader, state.leader_epoch + 1, isr, 0)
            return None

        self.rewrite(hosted, choose, controller_epoch)
        remaining = []
        for tp in hosted:
            try:
                data, _ = self.zk.get(zk.partition_state_path(tp.topic, tp.partition))
            except Exception:
                continue
            if zk.LeaderAndIsr.decode(data).leader == broker_id:
                remaining.append(tp)
        log.info(
            "[Controller id=%d] controlled shutdown of broker %d: %d partition(s) still led there",
            self.node.broker_id,
            broker_id,
            len(remaining),
        )
        return remaining

    # ----- leader elections ------------------------------------------------------------------------------------
    def elect(self, election_type: int, tps: list[TopicPartition] | None) -> dict[TopicPartition, BaseException | None]:
        """ElectLeaders: PREFERRED moves leadership to each partition's first replica if it is alive and in the ISR;
        UNCLEAN elects a live replica for a partition without a live leader, from the ISR first."""
        controller_epoch = self._require_controller()
        self.node.view = view = self.node._read_view()
        if tps is None:
            tps = [TopicPartition(t, p) for t, a in view.topics.items() if t not in view.deleting for p in a.partitions]
        live = self._live()
        choose = self._preferred(live) if election_type == PREFERRED else self._unclean(live)
        deleting = {tp: UnknownTopicOrPartitionError(f"Topic {tp.topic} is marked for deletion.") for tp in tps}
        results: dict[TopicPartition, BaseException | None] = {
            tp: e for tp, e in deleting.items() if tp.topic in view.deleting
        }
        results.update(self.rewrite([tp for tp in tps if tp not in results], choose, controller_epoch))
        return results

    @staticmethod
    def _preferred(live: set[int]) -> Choice:
        def choose(tp: TopicPartition, state: zk.LeaderAndIsr, replicas: list[int]) -> zk.LeaderAndIsr | None:
            preferred = replicas[0]
            if state.leader == preferred:
                raise ElectionNotNeededError(f"Leader election not needed for topic partition {tp}")
            if preferred not in live or preferred not in state.isr:
                raise PreferredLeaderNotAvailableError(
                    f"Failed to elect leader for partition {tp} under strategy "
                    "PreferredReplicaPartitionLeaderElectionStrategy"
                )
            return zk.LeaderAndIsr(preferred, state.leader_epoch + 1, state.isr, 0)

        return choose

    @staticmethod
    def _unclean(live: set[int]) -> Choice:
        def choose(tp: TopicPartition, state: zk.LeaderAndIsr, replicas: list[int]) -> zk.LeaderAndIsr | None:
            if state.leader != zk.NO_LEADER and state.leader in live:
                raise ElectionNotNeededError(f"Leader election not needed for topic partition {tp}")
            in_sync = [r for r in replicas if r in state.isr and r in live]
            if in_sync:
                return zk.LeaderAndIsr(in_sync[0], state.leader_epoch + 1, [r for r in state.isr if r in live], 0)
            alive = [r for r in replicas if r in live]
            if not alive:
                raise EligibleLeadersNotAvailableError(
                    f"Failed to elect leader for partition {tp} under strategy OfflinePartitionLeaderElectionStrategy"
                )
            log.warning(
                "[Controller] %s: unclean leader election of %d (ISR %s is offline): records it lacks are lost",
                tp,
                alive[0],
                state.isr,
            )
            return zk.LeaderAndIsr(alive[0], state.leader_epoch + 1, [alive[0]], 0)

        return choose

    def auto_rebalance(self, imbalance_percentage: int) -> int:
        """Kafka's checkAndTriggerAutoLeaderRebalance: for each live broker, if more than
        ``leader.imbalance.per.broker.percentage`` of the partitions it is the preferred replica of are led
        elsewhere, elect it where it is in the ISR. Returns how many leaders moved."""
        try:
            controller_epoch = self._require_controller()
        except NotControllerError:
            return 0
        self.node.view = view = self.node._read_view()
        live = self._live()
        moved = 0
        deleting = view.deleting
        for broker in sorted(live):
            preferred_here = [
                (TopicPartition(t, p), replicas)
                for t, a in view.topics.items()
                if t not in deleting
                for p, replicas in a.partitions.items()
                if replicas and replicas[0] == broker and TopicPartition(t, p) in view.states
            ]
            if not preferred_here:
                continue
            elsewhere = [tp for tp, _ in preferred_here if view.states[tp].leader != broker]
            ratio = len(elsewhere) / len(preferred_here)
            if ratio <= imbalance_percentage / 100.0:
                continue
            candidates = [tp for tp in elsewhere if broker in view.states[tp].isr]
            if not candidates:
                continue
            log.info(
                "[Controller id=%d] leader imbalance ratio of broker %d is %.2f: electing it for %d partition(s)",
                self.node.broker_id,
                broker,
                ratio,
                len(candidates),
            )
            results = self.rewrite(candidates, self._preferred(live), controller_epoch)
            moved += sum(1 for e in results.values() if e is None)
        return moved

    # ----- topic deletion (Kafka's TopicDeletionManager) --------------------------------------------------------
    def deletion_pass(self, view: Any) -> dict[int, dict[str, list[int]]]:
        """One step of every deletion under /admin/delete_topics: take each partition offline (leader -1, so no
        one serves or re-elects it), finish the topics whose every replica broker confirmed the deletion (their
        znodes go: the assignment and partition states, the config, then the marker), and return the StopReplica
        requests still to send, broker -> topic -> partitions, to the live replica brokers. A replica on a broker
        that is down waits for it to come back, as in Kafka."""
        from kazoo.exceptions import BadVersionError, NoNodeError

        controller_epoch = view.controller_epoch
        sends: dict[int, dict[str, list[int]]] = {}
        for topic in sorted(view.deleting):
            assignment = view.topics.get(topic)
            if assignment is None:  # a marker for a topic that does not exist (or whose deletion finished)
                with contextlib.suppress(NoNodeError):
                    self.zk.delete(f"{zk.DELETE_TOPICS}/{topic}")
                self.deletion_acks.pop(topic, None)
                continue
            acked = self.deletion_acks.setdefault(topic, set())
            hosted: dict[int, list[int]] = {}
            for p, replicas in assignment.partitions.items():
                state = view.states.get(TopicPartition(topic, p))
                if state is not None and state.leader != zk.NO_LEADER:
                    offline = zk.LeaderAndIsr(zk.NO_LEADER, state.leader_epoch + 1, state.isr, controller_epoch)
                    try:
                        self.zk.set(zk.partition_state_path(topic, p), offline.encode(), version=state.zk_version)
                    except (BadVersionError, NoNodeError):
                        self.node.request_resync()
                for r in replicas:
                    hosted.setdefault(r, []).append(p)
            if set(hosted) <= acked:
                self._complete_deletion(topic)
                continue
            for broker, partitions in hosted.items():
                if broker not in acked and broker in view.brokers:
                    sends.setdefault(broker, {})[topic] = sorted(partitions)
        return sends

    def _complete_deletion(self, topic: str) -> None:
        from kazoo.exceptions import NoNodeError

        with contextlib.suppress(NoNodeError):
            self.zk.delete(zk.topic_path(topic), recursive=True)
        with contextlib.suppress(NoNodeError):
            self.zk.delete(zk.topic_config_path(topic))
        with contextlib.suppress(NoNodeError):
            self.zk.delete(f"{zk.DELETE_TOPICS}/{topic}")
        self.deletion_acks.pop(topic, None)
        log.info("[Controller id=%d] deletion of topic %s completed", self.node.broker_id, topic)
