"""Produce (key 0): client batches appended as they came, through the replica manager; Kafka's error codes.

acks=0 gets no response; an acks=0 request that failed closes the connection instead, as Kafka does, so
that the producer notices. A produce request of v3 or later carries exactly one magic-2 batch per
partition (Kafka's ProduceRequest.validateRecords); anything else is INVALID_RECORD without touching the log.
"""

from __future__ import annotations

import asyncio
import struct

from ...manager import TopicPartition
from ...storage.validator import NO_TIMESTAMP
from ..network import CLOSE
from ..protocol import (
    CORRUPT_MESSAGE,
    INVALID_RECORD,
    INVALID_TXN_STATE,
    NONE,
    TOPIC_AUTHORIZATION_FAILED,
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    Response,
    compact_length,
    error_code,
    error_message,
)
from ..security.acl import allowed
from ..security.context import CURRENT, throttle
from .common import log

_BATCH_HEAD = struct.Struct(">qib")  # base offset, batch length, (leader epoch...) magic at byte 16
MAGIC_OFFSET = 16
ATTRIBUTES_OFFSET = 21
PRODUCER_OFFSET = 43  # producer id (int64), then producer epoch (int16)
TRANSACTIONAL_FLAG = 0x10


def check_one_batch(records) -> str | None:
    """Why ``records`` is not exactly one magic-2 batch (None when it is)."""
    if len(records) < 61:
        return "Produce requests with version 3 and above must contain exactly one record batch"
    (length,) = struct.unpack_from(">i", records, 8)
    if length + 12 != len(records):
        return "Produce requests with version 3 and above are only allowed to contain exactly one record batch"
    if records[MAGIC_OFFSET] != 2:
        return "Produce requests with version 3 and above are only allowed to contain record batches with magic 2"
    return None


def _unverified_transactional_write(broker, transactional_id, tp: TopicPartition, records) -> tuple[int, str] | None:
    """Kafka's transaction verification (KIP-890 part 1) on one node: a transactional batch is written only to a
    partition its producer added to its ongoing transaction, with the producer's current epoch, so no write can
    open a transaction the coordinator would never end. (error, message) when refused."""
    (attributes,) = struct.unpack_from(">h", records, ATTRIBUTES_OFFSET)
    coordinator = getattr(broker, "txn_coordinator", None)
    if not attributes & TRANSACTIONAL_FLAG or coordinator is None or getattr(broker, "cluster", None) is not None:
        return None
    if not coordinator.config.partition_verification_enable:  # transaction.partition.verification.enable=false
        return None
    producer_id, producer_epoch = struct.unpack_from(">qh", records, PRODUCER_OFFSET)
    if transactional_id is None:
        return INVALID_TXN_STATE, "A transactional batch needs the producer's transactional id in the request"
    error = coordinator.verify(transactional_id, producer_id, producer_epoch, (tp.topic, tp.partition))
    if error == 0:
        return None
    return int(error), (
        f"Transactional write of producer {producer_id} (epoch {producer_epoch}, transactional id "
        f"{transactional_id}) to {tp} refused by the transaction coordinator: {error.name}"
    )


# Kafka's ReplicaManager: verification errors a producer could not retry become NOT_ENOUGH_REPLICAS (retriable, no
# metadata refresh); PRODUCER_FENCED is INVALID_PRODUCER_EPOCH for the producer (AddPartitionsToTxnManager).
NOT_ENOUGH_REPLICAS = 19
_RETRIABLE_VERIFICATION = {13, 14, 15, 16, 51}  # NETWORK_EXCEPTION, COORDINATOR_*, NOT_COORDINATOR, CONCURRENT_TXNS


def _ongoing_transaction(broker, tp: TopicPartition, producer_id: int, producer_epoch: int) -> bool:
    """Whether this partition's log already has an open transaction of the producer at this epoch (Kafka verifies
    only a producer's first transactional write to a partition)."""
    try:
        log_ = broker.replica_manager.get_partition(tp.topic, tp.partition).log
    except Exception:
        return False
    entry = log_.producer_state.active_producers.get(producer_id)
    return entry is not None and entry.producer_epoch == producer_epoch and entry.current_txn_first_offset is not None


def _error_name(code: int) -> str:
    from ...coordinator.transaction import Errors

    if code in Errors._value2member_map_:
        return Errors(code).name
    return "NETWORK_EXCEPTION" if code == 13 else str(code)


async def _verify_in_cluster(broker, transactional_id, entries: dict[TopicPartition, memoryview | bytes]) -> dict:
    """Kafka's transaction verification on a ZooKeeper cluster (KIP-890 part 1, AddPartitionsToTxnManager): the
    first transactional batch of a producer to a partition is written only once the id's coordinator, on whichever
    broker, confirms the partition is in the producer's ongoing transaction. (error, message) per refused one."""
    coordinator = broker.txn_coordinator
    if coordinator is None or not coordinator.config.partition_verification_enable:
        return {}
    wanted: dict[tuple[int, int], list[TopicPartition]] = {}
    refused: dict[TopicPartition, tuple[int, str]] = {}
    for tp, records in entries.items():
        (attributes,) = struct.unpack_from(">h", records, ATTRIBUTES_OFFSET)
        if not attributes & TRANSACTIONAL_FLAG:
            continue
        producer_id, producer_epoch = struct.unpack_from(">qh", records, PRODUCER_OFFSET)
        if transactional_id is None:
            refused[tp] = (
                INVALID_TXN_STATE,
                "A transactional batch needs the producer's transactional id in the request",
            )
        elif not _ongoing_transaction(broker, tp, producer_id, producer_epoch):
            wanted.setdefault((producer_id, producer_epoch), []).append(tp)
    for (producer_id, producer_epoch), tps in wanted.items():
        codes = await broker.txn_cluster.verify(
            transactional_id, producer_id, producer_epoch, [(tp.topic, tp.partition) for tp in tps]
        )
        for tp in tps:
            code = codes.get((tp.topic, tp.partition), 15)
            if code == 0:
                continue
            underlying = _error_name(code)
            if code in _RETRIABLE_VERIFICATION:
                code = NOT_ENOUGH_REPLICAS
            elif code == 90:  # PRODUCER_FENCED
                code = 47  # INVALID_PRODUCER_EPOCH
            refused[tp] = (
                code,
                f"Unable to verify the partition has been added to the transaction. Underlying error: {underlying}",
            )
    return refused


async def handle(broker, header, request):
    acks = request.acks
    entries: dict[TopicPartition, memoryview | bytes] = {}
    early: dict[TopicPartition, tuple[int, str]] = {}
    order: list[TopicPartition] = []
    transactional_id = getattr(request, "transactional_id", None)
    # Kafka: a transactional produce needs WRITE on its transactional id, else every partition fails.
    txn_denied = transactional_id is not None and not allowed(broker, "WRITE", "TRANSACTIONAL_ID", transactional_id)
    for topic in request.topic_data:
        may_write = not txn_denied and allowed(broker, "WRITE", "TOPIC", topic.name)
        for part in topic.partition_data:
            tp = TopicPartition(topic.name, part.index)
            order.append(tp)
            if txn_denied:
                early[tp] = (TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "Transactional Id authorization failed.")
                continue
            if not may_write:
                early[tp] = (TOPIC_AUTHORIZATION_FAILED, f"Not authorized to access topics: [{topic.name}]")
                continue
            records = part.records
            if records is None:
                early[tp] = (CORRUPT_MESSAGE, "The record set of a produce request must not be null")
                continue
            problem = check_one_batch(records)
            if problem is not None:
                early[tp] = (INVALID_RECORD, problem)
                continue
            refused = _unverified_transactional_write(broker, transactional_id, tp, records)
            if refused is not None:
                early[tp] = refused
                continue
            entries[tp] = records  # a view of the request's frame: the log reads it in place (produce_request)
    if entries and getattr(broker, "txn_cluster", None) is not None:
        early.update(await _verify_in_cluster(broker, transactional_id, entries))
        entries = {tp: records for tp, records in entries.items() if tp not in early}
    replicas = broker.replica_manager
    if entries and (new := replicas.files_pending(entries)):
        # New partitions whose partition.metadata / leader-epoch-checkpoint the creation's background pass has
        # not written yet: their first append would wait for it (fsyncs) on the event loop.
        await asyncio.to_thread(replicas.flush_pending_files, new)
    results = replicas.append_records(entries, acks) if entries else {}
    if broker.metrics is not None:
        broker.metrics.produced(entries, results)
    cluster = getattr(broker, "cluster", None)
    if cluster is not None and results:
        for tp, result in results.items():
            if result.error is None:
                broker.purgatory.notify(tp)  # followers' long-polling fetches wait for new records too
        if acks == -1:
            # Kafka's delayed produce: answer when the ISR has the records (or the timeout passes).
            results = await cluster.wait_for_acks(results, max(0, request.timeout_ms))
    ctx = CURRENT.get()
    throttle_ms = broker.produce_quota.record(ctx.user, ctx.client_id, ctx.request_size) if broker.produce_quota else 0
    throttle(throttle_ms)
    if acks == 0:
        failed = [tp for tp in order if tp in early or results[tp].error is not None]
        if failed:
            log.info(
                "Closing connection: a produce request with acks=0 failed for %s (%s)",
                ", ".join(map(str, failed)),
                "; ".join(early[tp][1] if tp in early else str(results[tp].error) for tp in failed),
            )
            return CLOSE
        return None
    by_topic: dict[str, list[PartitionAnswer]] = {}
    for tp in order:
        if tp in early:
            code, message = early[tp]
            part = (tp.partition, code, -1, -1, -1, message)
        else:
            result = results[tp]
            if result.error is not None:
                part = (tp.partition, error_code(result.error), -1, -1, -1, error_message(result.error))
            else:
                info = result.info
                append_time = info.log_append_time if info.log_append_time != NO_TIMESTAMP else -1
                part = (tp.partition, NONE, info.first_offset, append_time, info.log_start_offset, None)
        by_topic.setdefault(tp.topic, []).append(part)
    return Response([encode_response(header.api_version, by_topic, throttle_ms)])


# (partition, error code, base offset, log append time, log start offset, error message)
PartitionAnswer = tuple[int, int, int, int, int, str | None]
_PARTITION_HEAD = struct.Struct(">ihq")  # index, error code, base offset
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


def encode_response(version: int, by_topic: dict[str, list[PartitionAnswer]], throttle_ms: int = 0) -> bytes:
    """The Produce response body (v3-v11) in Kafka's ProduceResponse schema, encoded here by hand.

    kafka-python's generated encoder spent a third of a small produce request's CPU on the tagged fields of
    flexible versions (v9+); this writes the same bytes (tests/test_broker_produce_encoding.py checks them
    against that encoder for every version) with no tagged field set: this broker names no CurrentLeader
    and no NodeEndpoints.
    """
    flexible = version >= 9
    buf = bytearray(compact_length(len(by_topic)) if flexible else _I32.pack(len(by_topic)))
    for name, parts in by_topic.items():
        encoded = name.encode("utf-8")
        buf += compact_length(len(encoded)) if flexible else _I16.pack(len(encoded))
        buf += encoded
        buf += compact_length(len(parts)) if flexible else _I32.pack(len(parts))
        for partition, code, base_offset, append_time, log_start, message in parts:
            buf += _PARTITION_HEAD.pack(partition, code, base_offset)
            buf += _I64.pack(append_time)  # v2+
            if version >= 5:
                buf += _I64.pack(log_start)
            if version >= 8:
                buf += b"\x01" if flexible else _I32.pack(0)  # record_errors: none
                if message is None:
                    buf += b"\x00" if flexible else _I16.pack(-1)
                else:
                    text = message.encode("utf-8")
                    buf += compact_length(len(text)) if flexible else _I16.pack(len(text))
                    buf += text
            if flexible:
                buf += b"\x00"  # partition tagged fields
        if flexible:
            buf += b"\x00"  # topic tagged fields
    buf += _I32.pack(throttle_ms)
    if flexible:
        buf += b"\x00"  # response tagged fields
    return bytes(buf)
