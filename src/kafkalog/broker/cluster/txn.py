"""The transaction coordinator on a ZooKeeper cluster (Kafka 3.x, ZooKeeper mode).

* ``__transaction_state`` is an ordinary replicated topic, created in ZooKeeper on the first FindCoordinator for a
  transactional id with ``transaction.state.log.replication.factor`` replicas (Kafka's default 3, min.insync 2),
  refused (COORDINATOR_NOT_AVAILABLE) while fewer brokers are alive, as Kafka's AutoTopicCreationManager refuses.
* The leader of partition ``partitionFor(transactional.id)`` is that id's coordinator: FindCoordinator answers it;
  the broker loads the partition's ids when it becomes the leader (``TransactionCoordinator.on_election``, with
  the leader epoch as coordinator epoch) and unloads them when it stops leading it (``on_resignation``).
* Markers travel as WriteTxnMarkers (key 27) requests to the leader of each partition of the transaction (this
  broker included, as Kafka's TransactionMarkerChannelManager sends them), grouped per broker, after the Prepare
  record is replicated; NOT_LEADER_OR_FOLLOWER and the like are retried after a fresh look at ZooKeeper. The
  transaction stays PrepareCommit/PrepareAbort (CONCURRENT_TRANSACTIONS to its producer) until every marker is in.
* A coordinator answers its clients once the state partition's in-sync replicas have the write (Kafka appends
  transaction state with acks=-1): the node's ``wait_for_replication``.

Everything runs on the broker's event loop. The state topic is created by the node's ``ensure_internal_topic``, as
``__consumer_offsets`` is.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from typing import Any

from ...coordinator.internal_topic import TRANSACTION_STATE
from ...coordinator.transaction import TRANSACTION_STATE_TOPIC_NAME
from ...coordinator.transaction.coordinator import MarkerSend
from ...errors import (
    NotLeaderOrFollowerError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
)
from ...manager import TopicPartition
from ..protocol import InvalidRequestError, skip_tagged_fields
from . import zkdata as zk
from .fetcher import BrokerConnection
from .state import int_property

log = logging.getLogger("kafka.coordinator.transaction.TransactionMarkerChannelManager")

WRITE_TXN_MARKERS = 27
WRITE_TXN_MARKERS_VERSION = 1  # flexible: request header v2, response header v1
MARKER_RETRY_BACKOFF_MS = 100
# WriteTxnMarkers answers per partition (Kafka's TransactionMarkerRequestCompletionHandler)
NONE = 0
UNKNOWN_TOPIC_OR_PARTITION = 3
NETWORK_EXCEPTION = 13
CLUSTER_AUTHORIZATION_FAILED = 31
INVALID_TXN_STATE = 48
UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
INVALID_PRODUCER_EPOCH = 47
TRANSACTION_COORDINATOR_FENCED = 52
DROPPED = {INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED, UNSUPPORTED_FOR_MESSAGE_FORMAT}


class TransactionCluster:
    """The transaction coordinator's ties to the cluster: the state topic, ownership of its partitions, replication
    waits, and the marker channel. Invariant: the coordinator owns exactly the state partitions this broker leads
    (minus, briefly, one being loaded)."""

    def __init__(self, node, coordinator, props: dict[str, Any]) -> None:
        self.node = node
        self.coordinator = coordinator
        config = coordinator.config
        self.num_partitions = config.transaction_state_log_num_partitions
        # Kafka's defaults (3 and 2): on a cluster they can be met; a single node lowers them to 1.
        self.replication_factor = int_property(props, "transaction.state.log.replication.factor", 3)
        self.min_isr = int_property(props, "transaction.state.log.min.isr", 2)
        self.request_timeout_ms = int_property(props, "request.timeout.ms", 30000)
        self.topic_config = {
            "cleanup.policy": "compact",
            "compression.type": "uncompressed",
            "min.insync.replicas": str(self.min_isr),
            "segment.bytes": str(config.transaction_state_log_segment_bytes),
            "unclean.leader.election.enable": "false",
        }
        self.channel = TransactionMarkerChannel(self)
        coordinator.marker_channel = self.channel

    # ----- the state topic and who coordinates an id -----------------------------------------------------
    async def ensure_state_topic(self) -> None:
        await self.node.ensure_internal_topic(
            TRANSACTION_STATE, self.num_partitions, self.replication_factor, self.topic_config
        )
        self.refresh_partition_count()

    def refresh_partition_count(self) -> None:
        assignment = self.node.view.topics.get(TRANSACTION_STATE_TOPIC_NAME)
        if assignment is not None:
            self.coordinator.cluster_partition_count = len(assignment.partitions)

    def coordinator_of(self, transactional_id: str, listener: str | None = None) -> tuple[int, str, int] | None:
        """(broker id, host, port) of the leader of the id's state partition, None while it has none: its endpoint
        on ``listener`` (a client's FindCoordinator), else its inter-broker endpoint."""
        self.refresh_partition_count()
        tp = TopicPartition(TRANSACTION_STATE_TOPIC_NAME, self.coordinator.partition_for(transactional_id))
        state = self.node.view.states.get(tp)
        if state is None or state.leader == zk.NO_LEADER:
            return None
        info = self.node.view.brokers.get(state.leader)
        if info is None:
            return None
        endpoint = (info.host, info.port) if listener is None else info.endpoint_for(listener)
        return None if endpoint is None else (state.leader, *endpoint)

    # ----- verification with the id's coordinator (Kafka's AddPartitionsToTxnManager) ------------------------------
    async def verify(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: list[tuple[str, int]]
    ) -> dict[tuple[str, int], int]:
        """Whether each partition is in the producer's ongoing transaction, asked of the id's coordinator: this
        broker's own, or another broker's with AddPartitionsToTxn v4 VerifyOnly (Kafka's AddPartitionsToTxnManager).
        Error codes per partition: COORDINATOR_NOT_AVAILABLE when the coordinator is unknown, NETWORK_EXCEPTION when
        it cannot be reached (as Kafka's manager answers)."""
        if self.coordinator.status(transactional_id) != 16:  # coordinated here (or loading here)
            local = self.coordinator.verify_partitions(transactional_id, producer_id, producer_epoch, partitions)
            return {tp: int(code) for tp, code in local.items()}
        found = self.coordinator_of(transactional_id)
        if found is None or found[0] == self.node.broker_id:
            return dict.fromkeys(partitions, 15)
        from kafka.protocol.producer.transaction import AddPartitionsToTxnRequest, AddPartitionsToTxnResponse

        by_topic: dict[str, list[int]] = {}
        for topic, partition in partitions:
            by_topic.setdefault(topic, []).append(partition)
        txn = AddPartitionsToTxnRequest.AddPartitionsToTxnTransaction(
            transactional_id=transactional_id,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            verify_only=True,
            topics=[
                AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=t, partitions=ps) for t, ps in by_topic.items()
            ],
        )
        body = AddPartitionsToTxnRequest(transactions=[txn]).encode(version=4)
        timeout = self.request_timeout_ms / 1000.0
        client_id = f"broker-{self.node.broker_id}-txn-verifier"
        conn = FlexibleConnection(found[1], found[2], client_id, self.node.inter_broker)
        try:
            await conn.connect(timeout)
            response = AddPartitionsToTxnResponse.decode(await conn.request(24, 4, body, timeout), version=4)
        except (OSError, TimeoutError, ConnectionError, asyncio.IncompleteReadError, ValueError, struct.error) as e:
            log.info("Verifying %s with broker %d failed: %s", transactional_id, found[0], e)
            return dict.fromkeys(partitions, NETWORK_EXCEPTION)
        finally:
            conn.close()
        if response.error_code != NONE:
            # Kafka: the client never sees CLUSTER_AUTHORIZATION_FAILED for the brokers' own request
            code = INVALID_TXN_STATE if response.error_code == CLUSTER_AUTHORIZATION_FAILED else response.error_code
            return dict.fromkeys(partitions, int(code))
        codes = dict.fromkeys(partitions, 15)
        for result in response.results_by_transaction:
            for topic in result.topic_results:
                for p in topic.results_by_partition:
                    codes[(topic.name, p.partition_index)] = int(p.partition_error_code)
        return codes

    # ----- leadership of state partitions (Kafka's onLeadershipChange for __transaction_state) ------------
    def elected(self, tp: TopicPartition, partition) -> None:
        """This broker now leads state partition ``tp``: load its ids (reading to the log end: a new leader keeps
        every record it has) with its leader epoch as coordinator epoch."""
        self.refresh_partition_count()
        self.coordinator.begin_loading(tp.partition)
        try:
            self.coordinator.on_election(tp.partition, int(partition.leader_epoch))
        except Exception:
            self.coordinator.loading.discard(tp.partition)
            log.exception("Loading the transactions of %s failed", tp)

    def resigned(self, tp: TopicPartition) -> None:
        self.coordinator.on_resignation(tp.partition)

    # ----- acks=-1 for the coordinator's writes ----------------------------------------------------------------
    async def replicated_answer(self, transactional_id: str, error: int) -> int:
        """What to answer a client after a successful coordinator call: NONE once the id's state partition is
        replicated up to its log end; NOT_COORDINATOR if leadership moved meanwhile, COORDINATOR_NOT_AVAILABLE if
        the replicas did not follow in time (Kafka's mapping of a failed transaction log append)."""
        if error != NONE:
            return error
        tp = TopicPartition(TRANSACTION_STATE_TOPIC_NAME, self.coordinator.partition_for(transactional_id))
        try:
            end = self.node.replica_manager.get_partition(tp.topic, tp.partition).log_end_offset
        except UnknownTopicOrPartitionError:
            return error
        failed = await self.node.wait_for_replication(tp, end, self.request_timeout_ms)
        if failed is None:
            return error
        log.warning("Transaction state of %s not replicated: %s", transactional_id, failed)
        return 16 if isinstance(failed, NotLeaderOrFollowerError) else 15  # NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE


class TransactionMarkerChannel:
    """Kafka's TransactionMarkerChannelManager: delivers each transaction's markers to the partitions' leaders with
    WriteTxnMarkers and reports each written marker to the coordinator. One delivery task per transaction; a
    resigned state partition's deliveries are cancelled (its new coordinator sends them again)."""

    def __init__(self, owner: TransactionCluster) -> None:
        self.owner = owner
        self.node = owner.node
        self._deliveries: dict[str, tuple[MarkerSend, asyncio.Task[None]]] = {}

    def send(self, entry: MarkerSend) -> None:
        previous = self._deliveries.pop(entry.transactional_id, None)
        if previous is not None:
            previous[1].cancel()
        name = f"txn-markers-{entry.transactional_id}"
        task = asyncio.get_running_loop().create_task(self._deliver(entry), name=name)
        self._deliveries[entry.transactional_id] = (entry, task)
        task.add_done_callback(lambda t, txn_id=entry.transactional_id: self._done(txn_id, t))

    def _done(self, txn_id: str, task: asyncio.Task[None]) -> None:
        current = self._deliveries.get(txn_id)
        if current is not None and current[1] is task:
            del self._deliveries[txn_id]
        if not task.cancelled() and task.exception() is not None:
            log.error("Delivering the markers of %s failed", txn_id, exc_info=task.exception())

    def drop_partition(self, state_partition: int) -> None:
        for txn_id, (entry, task) in list(self._deliveries.items()):
            if entry.state_partition == state_partition:
                task.cancel()
                del self._deliveries[txn_id]

    def pending(self) -> int:
        return len(self._deliveries)

    async def _deliver(self, entry: MarkerSend) -> None:
        coordinator = self.owner.coordinator
        state_tp = TopicPartition(TRANSACTION_STATE_TOPIC_NAME, entry.state_partition)
        while True:
            failed = await self.node.wait_for_replication(
                state_tp, entry.state_end_offset, self.owner.request_timeout_ms
            )
            if failed is None:
                break
            if not isinstance(failed, RequestTimedOutError):
                log.info("Not sending the markers of %s: %s", entry.transactional_id, failed)
                return  # resigned: the new coordinator completes the transaction from its log
        remaining = set(entry.partitions)
        kind = "COMMIT" if entry.commit else "ABORT"
        backoff_ms = MARKER_RETRY_BACKOFF_MS
        while remaining:
            before = len(remaining)
            view = self.node.view
            by_broker: dict[int, list[tuple[str, int]]] = {}
            for topic, partition in sorted(remaining):
                assignment = view.topics.get(topic)
                if assignment is None or partition not in assignment.partitions or topic in view.deleting:
                    log.info(
                        "Not writing the %s marker of %s to %s-%d: the partition is gone",
                        kind,
                        entry.transactional_id,
                        topic,
                        partition,
                    )
                    remaining.discard((topic, partition))
                    coordinator.marker_written(entry.transactional_id, entry.coordinator_epoch, (topic, partition))
                    continue
                state = view.states.get(TopicPartition(topic, partition))
                if state is None or state.leader == zk.NO_LEADER or state.leader not in view.brokers:
                    continue  # no leader now: try again after the next look at ZooKeeper
                by_broker.setdefault(state.leader, []).append((topic, partition))
            answers = await asyncio.gather(*(self._send(b, entry, tps) for b, tps in by_broker.items()))
            for answer in answers:
                for tp, code in answer.items():
                    if code == NONE or code in DROPPED:
                        if code != NONE:
                            log.warning(
                                "Dropping the %s marker of %s for %s-%d: error %d",
                                kind,
                                entry.transactional_id,
                                tp[0],
                                tp[1],
                                code,
                            )
                        remaining.discard(tp)
                        coordinator.marker_written(entry.transactional_id, entry.coordinator_epoch, tp)
            if remaining:
                # Retried after a fresh look at ZooKeeper; the wait doubles (to 1 s) while nothing gets through, so
                # an offline partition does not make this broker re-read ZooKeeper ten times a second.
                backoff_ms = MARKER_RETRY_BACKOFF_MS if len(remaining) < before else min(backoff_ms * 2, 1000)
                log.debug("Markers of %s still to write to %s; retrying", entry.transactional_id, sorted(remaining))
                self.node.request_resync()
                await asyncio.sleep(backoff_ms / 1000.0)

    async def _send(self, broker_id: int, entry: MarkerSend, tps: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """One WriteTxnMarkers request to ``broker_id``; each partition's error code (-1 for a failed exchange)."""
        from kafka.protocol.producer.transaction import WriteTxnMarkersRequest, WriteTxnMarkersResponse

        address = self.node._address(broker_id)
        if address is None:
            return dict.fromkeys(tps, -1)
        by_topic: dict[str, list[int]] = {}
        for topic, partition in tps:
            by_topic.setdefault(topic, []).append(partition)
        marker = WriteTxnMarkersRequest.WritableTxnMarker(
            producer_id=entry.producer_id,
            producer_epoch=entry.producer_epoch,
            transaction_result=entry.commit,
            topics=[
                WriteTxnMarkersRequest.WritableTxnMarker.WritableTxnMarkerTopic(name=t, partition_indexes=ps)
                for t, ps in by_topic.items()
            ],
            coordinator_epoch=entry.coordinator_epoch,
        )
        body = WriteTxnMarkersRequest(markers=[marker]).encode(version=WRITE_TXN_MARKERS_VERSION)
        timeout = self.owner.request_timeout_ms / 1000.0 + 5
        client_id = f"broker-{self.node.broker_id}-txn-marker-sender"
        conn = FlexibleConnection(address[0], address[1], client_id, self.node.inter_broker)
        try:
            await conn.connect(timeout)
            payload = await conn.request(WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION, body, timeout)
            response = WriteTxnMarkersResponse.decode(payload, version=WRITE_TXN_MARKERS_VERSION)
        except (OSError, TimeoutError, ConnectionError, asyncio.IncompleteReadError, ValueError, struct.error) as e:
            log.info("WriteTxnMarkers to broker %d failed: %s", broker_id, e)
            return dict.fromkeys(tps, -1)
        finally:
            conn.close()
        codes: dict[tuple[str, int], int] = dict.fromkeys(tps, -1)
        for result in response.markers:
            for topic in result.topics:
                for p in topic.partitions:
                    codes[(topic.name, p.partition_index)] = p.error_code
        return codes


class FlexibleConnection(BrokerConnection):
    """A BrokerConnection for flexible request versions: request header v2 (an empty tag buffer after the client
    id) and response header v1 (a tag buffer after the correlation id)."""

    async def request(self, api_key: int, version: int, body: bytes, timeout: float) -> bytes:
        assert self._reader is not None and self._writer is not None
        self._correlation += 1
        header = struct.pack(">hhih", api_key, version, self._correlation, len(self.client_id)) + self.client_id
        frame = header + b"\x00" + bytes(body)
        self._writer.write(struct.pack(">i", len(frame)) + frame)
        await self._writer.drain()
        (size,) = struct.unpack(">i", await asyncio.wait_for(self._reader.readexactly(4), timeout))
        payload = await asyncio.wait_for(self._reader.readexactly(size), timeout)
        (correlation,) = struct.unpack_from(">i", payload)
        if correlation != self._correlation:
            raise ConnectionError(f"Correlation id {correlation} does not match the request's {self._correlation}")
        try:
            return payload[skip_tagged_fields(payload, 4, "response") :]
        except InvalidRequestError as e:
            raise ConnectionError(str(e)) from None
