"""Replica fetchers (Kafka's ReplicaFetcherThread): a follower copies its leaders' logs by fetching.

One fetcher per leader broker, an asyncio task on the broker's event loop with its own connection. Each
partition it copies first truncates (KIP-101/KIP-279): it asks the leader with OffsetForLeaderEpoch for the end
offset of its own latest leader epoch and cuts its log where the two histories diverge; then it fetches from
its log end offset with its ``replica_id``, appends what comes as a follower (``append_as_follower``: the
leader's offsets and epochs kept) and takes the leader's high watermark, capped at its own log end. Its fetch
offset is what tells the leader how far it has come.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass

from kafka.protocol.consumer import (
    FetchRequest,
    FetchResponse,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
)

from ...errors import KafkaLogError, UnknownTopicOrPartitionError
from ...manager import TopicPartition
from ..protocol import (
    FENCED_LEADER_EPOCH,
    NONE,
    NOT_LEADER_OR_FOLLOWER,
    OFFSET_OUT_OF_RANGE,
    UNKNOWN_LEADER_EPOCH,
    UNKNOWN_TOPIC_OR_PARTITION,
)
from .interbroker import InterBrokerAuthenticationError

log = logging.getLogger("kafka.server.ReplicaFetcherThread")

FETCH_VERSION = 11  # the last Fetch version with replica_id in the body and no tagged fields
EPOCH_VERSION = 3  # OffsetForLeaderEpoch v3: replica_id, current_leader_epoch, not flexible
FETCH_KEY, EPOCH_KEY = 1, 23
_FETCH_TOPIC = FetchRequest.FetchTopic
_FETCH_PARTITION = _FETCH_TOPIC.FetchPartition
_EPOCH_TOPIC = OffsetForLeaderEpochRequest.OffsetForLeaderTopic
_EPOCH_PARTITION = _EPOCH_TOPIC.OffsetForLeaderPartition
_BATCH_LENGTH = struct.Struct(">qi")


class BrokerConnection:
    """One client connection to another broker: requests one at a time (a fetcher waits for each answer)."""

    def __init__(self, host: str, port: int, client_id: str, security=None, *, receive_buffer_bytes: int = -1) -> None:
        self.host, self.port, self.client_id = host, port, client_id.encode()
        self.security = security  # InterBrokerSecurity (TLS and/or SASL of the inter-broker listener), or None
        self.receive_buffer_bytes = receive_buffer_bytes  # SO_RCVBUF, set before connecting; -1: the OS's
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._correlation = 0

    async def connect(self, timeout: float) -> None:
        """Open the connection; over TLS and authenticated by SASL when the inter-broker listener says so."""
        context = getattr(self.security, "ssl_context", None)
        self._reader, self._writer = await asyncio.wait_for(self._open(context), timeout)
        if self.security is not None and self.security.mechanism is not None:
            try:
                # The base class's request (a v1 header): SaslHandshake v1 and SaslAuthenticate v1 are not flexible.
                await self.security.authenticate(functools.partial(BrokerConnection.request, self), timeout)
            except BaseException:
                self.close()
                raise

    async def _open(self, context) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        tls = {"ssl": context, "server_hostname": self.host} if context is not None else {}
        if self.receive_buffer_bytes == -1:
            return await asyncio.open_connection(self.host, self.port, **tls)
        # SO_RCVBUF before connect(), as Kafka's Selector sets it: the window scale is agreed at the SYN
        loop = asyncio.get_running_loop()
        failure: OSError = OSError(f"{self.host} resolved to no address")
        for family, kind, proto, _, address in await loop.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM):
            sock = socket.socket(family, kind, proto)
            try:
                sock.setblocking(False)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.receive_buffer_bytes)
                await loop.sock_connect(sock, address)
            except OSError as e:
                sock.close()
                failure = e
                continue
            except BaseException:
                sock.close()
                raise
            return await asyncio.open_connection(sock=sock, **tls)
        raise failure

    async def request(self, api_key: int, version: int, body: bytes, timeout: float) -> bytes:
        """Send one non-flexible request and return its response body (after the correlation id)."""
        assert self._reader is not None and self._writer is not None
        self._correlation += 1
        header = struct.pack(">hhih", api_key, version, self._correlation, len(self.client_id)) + self.client_id
        frame = header + bytes(body)
        self._writer.write(struct.pack(">i", len(frame)) + frame)
        await self._writer.drain()
        size_bytes = await asyncio.wait_for(self._reader.readexactly(4), timeout)
        (size,) = struct.unpack(">i", size_bytes)
        payload = await asyncio.wait_for(self._reader.readexactly(size), timeout)
        (correlation,) = struct.unpack_from(">i", payload)
        if correlation != self._correlation:
            raise ConnectionError(f"Correlation id {correlation} does not match the request's {self._correlation}")
        return payload[4:]

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None


@dataclass
class FetchState:
    """One partition a fetcher copies: the leader epoch it follows, and whether it must truncate first."""

    leader_epoch: int
    truncating: bool = True


def whole_batches(records: bytes) -> bytes:
    """The complete batches at the start of ``records`` (a fetch may end in a partial batch, as Kafka's may)."""
    pos, end = 0, len(records)
    while pos + 12 <= end:
        (_, length) = _BATCH_LENGTH.unpack_from(records, pos)
        if pos + 12 + length > end:
            break
        pos += 12 + length
    return records[:pos]


class ReplicaFetcher:
    """Copies the partitions this broker follows from one leader broker.

    Invariant: a partition is fetched only after its truncation for the current leader epoch is done, and
    only at that epoch; a change of leader or epoch (``add``/``remove`` by the cluster node) starts it over.
    """

    def __init__(
        self,
        node,  # ClusterNode (no import: it imports this module)
        leader_id: int,
        address: Callable[[int], tuple[str, int] | None],
    ) -> None:
        self.node = node
        self.leader_id = leader_id
        self.address = address
        self.partitions: dict[TopicPartition, FetchState] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopped = False
        self._conn: BrokerConnection | None = None
        cfg = node.settings
        self.max_wait_ms = cfg.replica_fetch_wait_max_ms
        self.min_bytes = cfg.replica_fetch_min_bytes
        self.max_bytes = cfg.replica_fetch_response_max_bytes
        self.partition_max_bytes = cfg.replica_fetch_max_bytes
        self.backoff = cfg.replica_fetch_backoff_ms / 1000.0
        self.timeout = cfg.replica_socket_timeout_ms / 1000.0

    # ----- membership -----------------------------------------------------------------------------------
    def add(self, tp: TopicPartition, leader_epoch: int) -> None:
        self.partitions[tp] = FetchState(leader_epoch, True)
        self._wake.set()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"fetcher-{self.leader_id}")

    def remove(self, tp: TopicPartition) -> None:
        self.partitions.pop(tp, None)

    async def stop(self) -> None:
        self._stopped = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            # Bounded, and the loop checks ``_stopped``: Python 3.11's wait_for may swallow a cancellation that
            # races a fetch answer (fixed in 3.12), which would leave this await waiting for ever.
            await asyncio.wait({task}, timeout=5.0)
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    # ----- the loop --------------------------------------------------------------------------------------
    async def _run(self) -> None:
        while not self._stopped:
            if not self.partitions:
                self._wake.clear()
                await self._wake.wait()
                continue
            try:
                conn = await self._connection()
                if conn is None:
                    await asyncio.sleep(self.backoff)
                    continue
                await self._truncate(conn)
                await self._fetch(conn)
            except asyncio.CancelledError:
                raise
            except InterBrokerAuthenticationError as e:  # wrong credentials: said plainly, retried after a pause
                log.error(
                    "[ReplicaFetcher leader=%d] Connection to node %d failed authentication due to: %s",
                    self.leader_id,
                    self.leader_id,
                    e,
                )
                self._drop_connection()
                await asyncio.sleep(max(self.backoff, 1.0))
            except (OSError, ConnectionError, asyncio.IncompleteReadError, TimeoutError) as e:
                log.info("[ReplicaFetcher leader=%d] connection failed: %s; retrying", self.leader_id, e)
                self._drop_connection()
                await asyncio.sleep(self.backoff)
            except Exception:
                log.exception("[ReplicaFetcher leader=%d] error", self.leader_id)
                self._drop_connection()
                await asyncio.sleep(self.backoff)

    async def _connection(self) -> BrokerConnection | None:
        if self._conn is not None:
            return self._conn
        address = self.address(self.leader_id)
        if address is None:
            return None
        client_id = f"broker-{self.node.broker_id}-fetcher-{self.leader_id}"
        conn = BrokerConnection(
            address[0],
            address[1],
            client_id,
            self.node.inter_broker,
            receive_buffer_bytes=self.node.settings.replica_socket_receive_buffer_bytes,
        )
        await conn.connect(self.timeout)
        self._conn = conn
        return conn

    def _drop_connection(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _local(self, tp: TopicPartition):
        try:
            return self.node.replica_manager.get_partition(tp.topic, tp.partition)
        except UnknownTopicOrPartitionError:
            self.partitions.pop(tp, None)
            return None

    async def _truncate(self, conn: BrokerConnection) -> None:
        """OffsetForLeaderEpoch for every partition still to truncate, then truncate each (KIP-279)."""
        pending = {tp: st for tp, st in self.partitions.items() if st.truncating}
        if not pending:
            return
        by_topic: dict[str, list] = {}
        asked: dict[TopicPartition, int] = {}
        for tp, st in pending.items():
            partition = self._local(tp)
            if partition is None:
                continue
            latest = partition.log.leader_epoch_cache.latest_epoch
            asked[tp] = latest if latest is not None else -1
            by_topic.setdefault(tp.topic, []).append(
                _EPOCH_PARTITION(partition=tp.partition, current_leader_epoch=st.leader_epoch, leader_epoch=asked[tp])
            )
        if not by_topic:
            return
        request = OffsetForLeaderEpochRequest(
            version=EPOCH_VERSION,
            replica_id=self.node.broker_id,
            topics=[_EPOCH_TOPIC(topic=t, partitions=ps) for t, ps in by_topic.items()],
        )
        body = await conn.request(EPOCH_KEY, EPOCH_VERSION, request.encode(version=EPOCH_VERSION), self.timeout)
        response = OffsetForLeaderEpochResponse[EPOCH_VERSION].decode(body)
        for topic in response.topics:
            for p in topic.partitions:
                tp = TopicPartition(topic.topic, p.partition)
                st = self.partitions.get(tp)
                partition = self._local(tp)
                if st is None or partition is None or st is not pending.get(tp):
                    continue  # the partition changed leader or epoch meanwhile: its new state truncates again
                if p.error_code != NONE:
                    self._partition_error(tp, p.error_code)
                    continue
                if asked[tp] < 0:
                    # No epoch known here (an empty or pre-KIP-101 log): truncate to the high watermark.
                    target = partition.truncate_to_epoch_end(-1, -1)
                else:
                    target = partition.truncate_to_epoch_end(p.leader_epoch, p.end_offset)
                st.truncating = False
                log.info(
                    "[ReplicaFetcher leader=%d] %s truncated to %d (leader's epoch %d ends at %d)",
                    self.leader_id,
                    tp,
                    target,
                    p.leader_epoch,
                    p.end_offset,
                )

    async def _fetch(self, conn: BrokerConnection) -> None:
        by_topic: dict[str, list] = {}
        sent: dict[TopicPartition, FetchState] = {}
        for tp, st in list(self.partitions.items()):
            if st.truncating:
                continue
            partition = self._local(tp)
            if partition is None:
                continue
            sent[tp] = st
            by_topic.setdefault(tp.topic, []).append(
                _FETCH_PARTITION(
                    partition=tp.partition,
                    current_leader_epoch=st.leader_epoch,
                    fetch_offset=partition.log_end_offset,
                    log_start_offset=partition.log_start_offset,
                    partition_max_bytes=self.partition_max_bytes,
                )
            )
        if not by_topic:
            await asyncio.sleep(self.backoff)
            return
        request = FetchRequest(
            version=FETCH_VERSION,
            replica_id=self.node.broker_id,
            max_wait_ms=self.max_wait_ms,
            min_bytes=self.min_bytes,
            max_bytes=self.max_bytes,
            isolation_level=0,
            session_id=0,
            session_epoch=-1,
            topics=[_FETCH_TOPIC(topic=t, partitions=ps) for t, ps in by_topic.items()],
            forgotten_topics_data=[],
            rack_id="",
        )
        wait = self.timeout + self.max_wait_ms / 1000.0
        body = await conn.request(FETCH_KEY, FETCH_VERSION, request.encode(version=FETCH_VERSION), wait)
        response = FetchResponse[FETCH_VERSION].decode(body)
        backoff = False
        for topic in response.responses:
            for p in topic.partitions:
                tp = TopicPartition(topic.topic, p.partition_index)
                if self.partitions.get(tp) is not sent.get(tp):
                    continue  # re-added at a new epoch while this fetch was out
                if p.error_code != NONE:
                    self._partition_error(tp, p.error_code)
                    backoff = True
                    continue
                self._append(tp, p.records or b"", p.high_watermark)
        if backoff:
            await asyncio.sleep(self.backoff)

    def _append(self, tp: TopicPartition, records: bytes, leader_hw: int) -> None:
        partition = self._local(tp)
        if partition is None:
            return
        data = whole_batches(bytes(records))
        if data:
            try:
                partition.log.append_as_follower(data)
            except KafkaLogError as e:
                log.error("[ReplicaFetcher leader=%d] %s: append failed: %s", self.leader_id, tp, e)
                self.partitions[tp].truncating = True
                return
        old_hw = partition.high_watermark
        new_hw = partition.update_follower_high_watermark(leader_hw)
        if new_hw > old_hw:
            self.node.high_watermark_moved(tp)

    def _partition_error(self, tp: TopicPartition, code: int) -> None:
        st = self.partitions.get(tp)
        if st is None:
            return
        if code == OFFSET_OUT_OF_RANGE:
            st.truncating = True  # our log end is past the leader's: truncate again before fetching
        elif code in (FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH, NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION):
            # The leader is at another epoch than ours (one of us has not seen the last state yet): the state
            # watch brings the new epoch; until then this partition backs off.
            self.node.request_resync()
        else:
            log.warning("[ReplicaFetcher leader=%d] %s: error code %d", self.leader_id, tp, code)
