"""Fetch (key 1): sessionless fetches with long polling, read_committed, and zero-copy record bytes.

The replica manager reads each partition up to its high watermark (read_uncommitted) or last stable offset
(read_committed); a fetch offset inside a batch returns that whole batch, and the first batch is returned
whole even over the size limits (KIP-74) -- both the storage read's rules. When fewer than ``min_bytes`` are
available and ``max_wait_ms`` allows, the request waits in the purgatory until a high watermark it watches
advances (the replica manager's hook) or the wait runs out; then it reads again and answers.

The response is encoded here by hand, because its record sets are not Python bytes: each is a region of a
segment file that the socket server sends with sendfile. Incremental fetch sessions (KIP-227, v7+) are kept by
broker/fetch_session.py: the request's session id and epoch choose a context, which says which partitions to read
(an incremental request reads every partition of its session) and which answers the response carries.
"""

from __future__ import annotations

import asyncio
import struct
import time

from ...manager import TopicPartition
from ...storage.file_records import EMPTY_SLICE
from ..fetch_session import (
    INVALID_SESSION_ID,
    FetchContext,
    IncrementalFetchContext,
    PartitionRequest,
    SessionlessFetchContext,
)
from ..protocol import NONE, TOPIC_AUTHORIZATION_FAILED, FileRegion, Response, compact_length, error_code
from ..replica_access import READ_COMMITTED, READ_UNCOMMITTED
from ..security.acl import allowed, cluster_allowed
from ..security.context import CURRENT, throttle

LOG_END = "log_end"

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PARTITION_FIXED = struct.Struct(">ihqqq")  # index, error, high watermark, last stable offset, log start offset
_ABORTED = struct.Struct(">qq")


class PartitionAnswer:
    """What one partition of a Fetch response says."""

    __slots__ = ("aborted", "error", "high_watermark", "last_stable_offset", "log_start_offset", "partition", "records")

    def __init__(self, partition, error, high_watermark, last_stable_offset, log_start_offset, aborted, records):
        self.partition = partition
        self.error = error
        self.high_watermark = high_watermark
        self.last_stable_offset = last_stable_offset
        self.log_start_offset = log_start_offset
        self.aborted = aborted  # None (read_uncommitted) or [(producer id, first offset)]
        self.records = records  # RecordsSlice (possibly empty)


def encode_response(
    version: int,
    topics: list[tuple[str, list[PartitionAnswer]]],
    top_error: int = NONE,
    throttle_ms: int = 0,
    session_id: int = INVALID_SESSION_ID,
) -> Response:
    """The Fetch response body (v4-v12), record sets as file regions; flexible (compact, tagged) from v12."""
    parts: list[bytes | FileRegion] = []
    try:
        _encode(version, topics, top_error, parts, throttle_ms, session_id)
    except BaseException:
        Response(parts).close()
        raise
    return Response(parts)


def _encode(version: int, topics, top_error: int, parts: list, throttle_ms: int = 0, session_id: int = 0) -> None:
    flexible = version >= 12
    buf = bytearray(_I32.pack(throttle_ms))
    if version >= 7:
        buf += _I16.pack(top_error) + _I32.pack(session_id)
    buf += compact_length(len(topics)) if flexible else _I32.pack(len(topics))
    for name, answers in topics:
        encoded = name.encode("utf-8")
        buf += compact_length(len(encoded)) if flexible else _I16.pack(len(encoded))
        buf += encoded
        buf += compact_length(len(answers)) if flexible else _I32.pack(len(answers))
        for a in answers:
            buf += _PARTITION_FIXED.pack(
                a.partition, a.error, a.high_watermark, a.last_stable_offset, a.log_start_offset
            )
            if version < 5:
                del buf[-8:]  # log_start_offset is v5+
            if a.aborted is None:
                buf += b"\x00" if flexible else _I32.pack(-1)
            else:
                buf += compact_length(len(a.aborted)) if flexible else _I32.pack(len(a.aborted))
                for producer_id, first_offset in a.aborted:
                    buf += _ABORTED.pack(producer_id, first_offset)
                    if flexible:
                        buf += b"\x00"
            if version >= 11:
                buf += _I32.pack(-1)  # preferred_read_replica
            size = a.records.size
            # Never a null record set (librdkafka rejects one): an empty partition has zero bytes.
            buf += compact_length(size) if flexible else _I32.pack(size)
            if size:
                parts.append(bytes(buf))
                parts.append(FileRegion(a.records))
                buf = bytearray()
            if flexible:
                buf += b"\x00"  # partition tagged fields
        if flexible:
            buf += b"\x00"  # topic tagged fields
    if flexible:
        buf += b"\x00"  # response tagged fields
    parts.append(bytes(buf))


def _read(broker, fetch_infos, isolation: str, max_bytes: int):
    return broker.replica_manager.fetch_messages(fetch_infos, isolation, max_bytes, True)


def _answer(partition: int, r, committed: bool) -> PartitionAnswer:
    if r.error is not None:
        code = error_code(r.error)
        return PartitionAnswer(
            partition, code, r.high_watermark, r.last_stable_offset, r.log_start_offset, None, EMPTY_SLICE
        )
    aborted = None
    if committed:
        aborted = [(t.producer_id, t.first_offset) for t in (r.info.aborted_transactions or [])]
    return PartitionAnswer(
        partition, NONE, r.high_watermark, r.last_stable_offset, r.log_start_offset, aborted, r.info.records
    )


def _answers(results, order, denied, isolation: str) -> list[tuple[TopicPartition, PartitionAnswer]]:
    """Every partition's answer in the context's order (``order`` lists read and denied partitions)."""
    committed = isolation == READ_COMMITTED
    out: list[tuple[TopicPartition, PartitionAnswer]] = []
    for tp in order:
        if tp in denied:
            answer = PartitionAnswer(tp.partition, TOPIC_AUTHORIZATION_FAILED, -1, -1, -1, None, EMPTY_SLICE)
        else:
            r = results.get(tp)
            if r is None:  # a caught-up partition of a session, not read: it has nothing to say
                continue
            answer = _answer(tp.partition, r, committed)
        out.append((tp, answer))
    return out


def _by_topic(answers: list[tuple[TopicPartition, PartitionAnswer]]) -> list[tuple[str, list[PartitionAnswer]]]:
    by_topic: dict[str, list[PartitionAnswer]] = {}
    for tp, answer in answers:
        by_topic.setdefault(tp.topic, []).append(answer)
    return list(by_topic.items())


def _total_bytes(results) -> int:
    return sum(r.info.records.size for r in results.values() if r.error is None and r.info is not None)


def _context(broker, version: int, request, from_follower: bool) -> FetchContext:
    """The request's fetch context: sessions from v7 (a broker without a session cache answers sessionless)."""
    fetch_data: dict[TopicPartition, PartitionRequest] = {}
    for topic in request.topics:
        name = topic.topic
        for p in topic.partitions:
            fetch_data[TopicPartition(name, p.partition)] = PartitionRequest(
                p.fetch_offset,
                max(0, p.partition_max_bytes),
                getattr(p, "current_leader_epoch", -1),
                getattr(p, "log_start_offset", -1),
            )
    manager = getattr(broker, "fetch_manager", None)
    if version < 7 or manager is None:
        return SessionlessFetchContext(fetch_data)
    forgotten = [
        TopicPartition(t.topic, p) for t in (request.forgotten_topics_data or ()) for p in (t.partitions or ())
    ]
    return manager.new_context(request.session_id, request.session_epoch, fetch_data, forgotten, from_follower)


async def handle(broker, header, request) -> Response:
    version = header.api_version
    from_follower = request.replica_id >= 0
    context = _context(broker, version, request, from_follower)
    if context.error != NONE:
        return encode_response(version, [], context.error)
    isolation = READ_COMMITTED if request.isolation_level == 1 else READ_UNCOMMITTED
    fetch_infos: dict[TopicPartition, tuple[int, int]] = {}
    epochs: dict[TopicPartition, int] = {}
    order: list[TopicPartition] = []
    # Kafka: a consumer's fetch needs READ on each topic, a follower's CLUSTER_ACTION on the cluster.
    denied: set[TopicPartition] = set()
    follower_allowed = from_follower and cluster_allowed(broker, "CLUSTER_ACTION")
    readable: dict[str, bool] = {}
    for tp, req in context.partitions():
        order.append(tp)
        may_read = readable.get(tp.topic)
        if may_read is None:
            may_read = follower_allowed if from_follower else allowed(broker, "READ", "TOPIC", tp.topic)
            readable[tp.topic] = may_read
        if not may_read:
            denied.add(tp)
            continue
        fetch_infos[tp] = (req.fetch_offset, req.max_bytes)
        if req.leader_epoch >= 0:
            epochs[tp] = req.leader_epoch
    max_bytes = request.max_bytes if request.max_bytes > 0 else 0
    cluster = getattr(broker, "cluster", None)
    if from_follower and cluster is not None:
        # A follower's fetch (Kafka's ReplicaFetcherThread): read to the log end at its leader epoch; its fetch
        # offset is its log end offset, which may move the high watermark and the ISR.
        for tp, (offset, _) in fetch_infos.items():
            cluster.on_follower_fetch(tp, request.replica_id, offset)

        def read():
            return _read_follower(broker, fetch_infos, epochs, max_bytes)

        isolation = LOG_END
    else:
        idle = _caught_up(broker, context, isolation) if isinstance(context, IncrementalFetchContext) else None

        def read():
            infos = fetch_infos if idle is None else {tp: i for tp, i in fetch_infos.items() if not idle(tp)}
            return _read(broker, infos, isolation, max_bytes)

    results = read()
    wait_ms = request.max_wait_ms
    if (
        wait_ms > 0
        and fetch_infos
        and _total_bytes(results) < request.min_bytes
        and not any(r.error is not None for r in results.values())
    ):
        results = await _wait(broker, fetch_infos, read, request.min_bytes, wait_ms)
    answers = _answers(results, order, denied, isolation)
    # The session changes only with the response that is sent (not with a throttled one): select, size, commit.
    selected = context.select(answers)
    response = encode_response(version, _by_topic(selected))
    quota = broker.fetch_quota
    if quota is not None and not from_follower:  # client quotas do not apply to replication
        ctx = CURRENT.get()
        throttle_ms = quota.record(ctx.user, ctx.client_id, response.size)
        if throttle_ms > 0:
            # Kafka: a throttled fetch is answered without records, and its bytes are not counted.
            quota.unrecord(ctx.user, ctx.client_id, response.size)
            response.close()
            throttle(throttle_ms)
            session_id = context.throttled_session_id()
            return encode_response(version, [], context.error, throttle_ms, session_id)
    session_id = context.commit(answers)
    if context.error != NONE:  # the session moved on while this request waited
        response.close()
        return encode_response(version, [], context.error, 0, session_id)
    if session_id != INVALID_SESSION_ID:
        _set_session_id(response, session_id)
    if broker.metrics is not None:
        broker.metrics.fetched(results, from_follower)
    return response


def _caught_up(broker, context: IncrementalFetchContext, isolation: str):
    """A test of whether reading a partition of the session can tell the consumer nothing new, so it need not be
    read: its fetch offset is at the bound of its isolation (high watermark or last stable offset), its high
    watermark and log start offset are the ones last sent, and it would not fail (this broker leads it, its log is
    online). Such a read returns no records and the session would leave it out of the response (Kafka reads it all
    the same); with it skipped, an idle incremental fetch costs a few attribute reads per partition."""
    cached_parts = context.session.partitions
    partition_of = broker.replica_manager.partition
    committed = isolation == READ_COMMITTED

    def idle(tp: TopicPartition) -> bool:
        cached = cached_parts.get(tp)
        if cached is None or cached.high_watermark < 0:
            return False
        p = partition_of(tp)
        if p is None:
            return False
        hw = p.high_watermark
        offset = cached.fetch_offset
        return (
            hw == cached.high_watermark
            and offset == (p.last_stable_offset if committed else hw)
            and p.log_start_offset == cached.local_log_start_offset
            and offset >= cached.local_log_start_offset
            and p.is_leader
            and not p.log.is_offline
        )

    return idle


def _set_session_id(response: Response, session_id: int) -> None:
    """Write ``session_id`` into an encoded v7+ response (its first part starts with throttle, error, session)."""
    head = response.parts[0]
    assert isinstance(head, bytes) and len(head) >= 10
    response.parts[0] = head[:6] + _I32.pack(session_id) + head[10:]


def _read_follower(broker, fetch_infos, epochs, max_bytes: int):
    """A follower's read: up to the log end, only from the leader, at the follower's leader epoch."""
    return broker.replica_manager.fetch_messages(fetch_infos, LOG_END, max_bytes, True, True, epochs)


async def _wait(broker, fetch_infos, read, min_bytes, wait_ms):
    """Sleep until a watched partition is notified (high watermark or, for followers, new records) with enough
    bytes, or ``wait_ms`` has passed."""
    deadline = time.monotonic() + wait_ms / 1000.0
    partitions = list(fetch_infos)
    purgatory = broker.purgatory
    while True:
        event = purgatory.watch(partitions)
        try:
            # Re-read once after registering: data that arrived in between must not be waited for.
            results = read()
            if _total_bytes(results) >= max(1, min_bytes) or any(r.error is not None for r in results.values()):
                return results
            remaining = deadline - time.monotonic()
            if remaining <= 0 or broker.stopping:
                return results
            try:
                await asyncio.wait_for(event.wait(), remaining)
            except TimeoutError:
                return read()
        finally:
            purgatory.unwatch(partitions, event)
