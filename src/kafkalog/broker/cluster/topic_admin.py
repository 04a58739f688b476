"""Topics in a ZooKeeper cluster (Kafka's AdminZkClient and the controller's topic deletion): CreateTopics with
Kafka's replica assignment, CreatePartitions, DeleteTopics marked under ``/admin/delete_topics``, and the
controller's StopReplica (delete) to each replica broker.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from ...coordinator.internal_topic import OFFSETS, InternalTopic
from ...errors import (
    CoordinatorNotAvailableError,
    InvalidReplicationFactorError,
    RequestTimedOutError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)
from ...logdir import new_uuid, validate_topic_name
from ...manager import TopicPartition
from ...storage.config import LogConfig
from . import zkdata as zk
from .assignment import assign_replicas
from .state import ClusterView
from .zk_node import ZkNode, log


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


class TopicAdminMixin(ZkNode):
    """Topic creation, growth and deletion through ZooKeeper. Invariant: a topic's znodes are written (config
    first, then the assignment) before this broker answers; a deleted topic's replicas are never re-created from an
    older view (``deleted_replicas``)."""

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

    # ----- the coordinators' internal topics (Kafka's AutoTopicCreationManager for FindCoordinator) ------------
    async def ensure_internal_topic(
        self, topic: InternalTopic, partitions: int, replication_factor: int, config: dict[str, str]
    ) -> None:
        """Create a coordinator's internal topic in ZooKeeper on first use: refused with CoordinatorNotAvailableError
        (Kafka's message) while fewer brokers are alive than its replication factor; returns once every partition
        has a leader state."""
        if topic.name in self.view.topics:
            return
        brokers = await asyncio.to_thread(self.zk.get_children, zk.BROKER_IDS)
        if len(brokers) < replication_factor:
            raise CoordinatorNotAvailableError(topic.too_few_brokers(len(brokers), replication_factor))
        with contextlib.suppress(TopicExistsError):
            await self.create_topic(topic.name, partitions, replication_factor, config, False)
            log.info("[Broker %d] created internal topic %s with %d partitions", self.broker_id, topic.name, partitions)
        await self.wait_for_topic(topic.name)

    async def ensure_offsets_topic(self, num_partitions: int, replication_factor: int, config: dict[str, str]) -> None:
        """Create __consumer_offsets on first use (the group coordinator's FindCoordinator)."""
        await self.ensure_internal_topic(OFFSETS, num_partitions, replication_factor, config)

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
