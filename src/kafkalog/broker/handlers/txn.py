"""The transaction APIs (AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, TxnOffsetCommit, WriteTxnMarkers,
DescribeTransactions, ListTransactions) over kafkalog.coordinator.transaction; InitProducerId and FindCoordinator
(key type 1) live with their other halves in producer_id.py and group.py.

Each handler checks the ACLs Kafka's KafkaApis checks, reads the decoded request, asks the broker's
TransactionCoordinator (or, for TxnOffsetCommit, the group coordinator after the transaction coordinator has
verified the producer) and encodes the answer. The decisions and error codes are the coordinators'; the only
rewrite here is Kafka's: PRODUCER_FENCED becomes INVALID_PRODUCER_EPOCH for request versions older than KIP-588.
"""

from __future__ import annotations

from kafka.protocol.admin.transactions import DescribeTransactionsResponse, ListTransactionsResponse
from kafka.protocol.producer.transaction import (
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnResponse,
    EndTxnResponse,
    TxnOffsetCommitResponse,
    WriteTxnMarkersResponse,
)

from ...coordinator.group import GROUP_METADATA_TOPIC_NAME
from ...coordinator.group import Errors as GroupErrors
from ...coordinator.transaction import Errors, TransactionDescription
from ...coordinator.transaction.coordinator import append_marker
from ...manager import TopicPartition
from ..protocol import CLUSTER_AUTHORIZATION_FAILED, Response, error_code
from ..security.acl import allowed, cluster_allowed
from .common import describe_each

TOPIC_AUTHORIZATION_FAILED = 29
GROUP_AUTHORIZATION_FAILED = 30
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53

ApResult = AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult
ApPartition = ApResult.AddPartitionsToTxnPartitionResult
TocTopic = TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic
TocPartition = TocTopic.TxnOffsetCommitResponsePartition
WtmResult = WriteTxnMarkersResponse.WritableTxnMarkerResult
WtmTopic = WtmResult.WritableTxnMarkerTopicResult
WtmPartition = WtmTopic.WritableTxnMarkerPartitionResult
DtState = DescribeTransactionsResponse.TransactionState
LtState = ListTransactionsResponse.TransactionState


async def replicated(broker, transactional_id: str, code: int) -> int:
    """The answer to a client after the coordinator accepted its request: on a ZooKeeper cluster, given once the
    id's __transaction_state partition is replicated (Kafka appends transaction state with acks=-1); NOT_COORDINATOR
    or COORDINATOR_NOT_AVAILABLE when it could not be. On one node, ``code`` as it is."""
    txn_cluster = getattr(broker, "txn_cluster", None)
    if txn_cluster is None or code != 0:
        return code
    return await txn_cluster.replicated_answer(transactional_id, code)


def fenced_for(version: int, first_fenced_version: int, error: int) -> int:
    """KIP-588: clients older than ``first_fenced_version`` do not know PRODUCER_FENCED; Kafka answers them
    INVALID_PRODUCER_EPOCH, which they handle the same way."""
    if error == Errors.PRODUCER_FENCED and version < first_fenced_version:
        return int(Errors.INVALID_PRODUCER_EPOCH)
    return int(error)


# ----- AddPartitionsToTxn (24) ---------------------------------------------------------------------------------
async def handle_add_partitions(broker, header, request) -> Response:
    """v0-3: a client adds partitions to its transaction. v4: Kafka's broker path, several transactions per
    request, each added or only verified (VerifyOnly); it needs CLUSTER_ACTION."""
    version = header.api_version
    if version < 4:
        results = _add_partitions(
            broker,
            version,
            request.v3_and_below_transactional_id,
            request.v3_and_below_producer_id,
            request.v3_and_below_producer_epoch,
            [(t.name, p) for t in request.v3_and_below_topics for p in t.partitions],
            False,
        )
        results = await _replicated_results(broker, request.v3_and_below_transactional_id, results)
        response = AddPartitionsToTxnResponse(
            version=version, throttle_time_ms=0, results_by_topic_v3_and_below=_topic_results(results)
        )
        return Response.of(response, version)
    if not cluster_allowed(broker, "CLUSTER_ACTION"):
        response = AddPartitionsToTxnResponse(
            version=version, throttle_time_ms=0, error_code=CLUSTER_AUTHORIZATION_FAILED, results_by_transaction=[]
        )
        return Response.of(response, version)
    by_transaction = []
    for txn in request.transactions:
        wanted = [(t.name, p) for t in txn.topics for p in t.partitions]
        results = _add_partitions(
            broker, version, txn.transactional_id, txn.producer_id, txn.producer_epoch, wanted, bool(txn.verify_only)
        )
        if not txn.verify_only:
            results = await _replicated_results(broker, txn.transactional_id, results)
        by_transaction.append(
            AddPartitionsToTxnResponse.AddPartitionsToTxnResult(
                transactional_id=txn.transactional_id, topic_results=_topic_results(results)
            )
        )
    response = AddPartitionsToTxnResponse(
        version=version, throttle_time_ms=0, error_code=0, results_by_transaction=by_transaction
    )
    return Response.of(response, version)


def _add_partitions(
    broker, version: int, txn_id: str, producer_id: int, producer_epoch: int, wanted: list, verify_only: bool
) -> dict[tuple[str, int], int]:
    """Each partition's error code for one transaction: added (or verified) by the coordinator, after Kafka's
    checks (WRITE on the transactional id and on each topic, existing partitions)."""
    if not allowed(broker, "WRITE", "TRANSACTIONAL_ID", txn_id):
        return dict.fromkeys(wanted, TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if verify_only:
        verified = broker.txn_coordinator.verify_partitions(txn_id, producer_id, producer_epoch, wanted)
        return {tp: int(code) for tp, code in verified.items()}
    # Kafka: unauthorized topics and unknown partitions fail; then every other partition is OPERATION_NOT_ATTEMPTED
    failed: dict[tuple[str, int], int] = {}
    for topic, partition in wanted:
        if not allowed(broker, "WRITE", "TOPIC", topic):
            failed[(topic, partition)] = TOPIC_AUTHORIZATION_FAILED
        elif not _partition_exists(broker, topic, partition):
            failed[(topic, partition)] = int(Errors.UNKNOWN_TOPIC_OR_PARTITION)
    if failed:
        return {tp: failed.get(tp, int(Errors.OPERATION_NOT_ATTEMPTED)) for tp in wanted}
    error = broker.txn_coordinator.add_partitions(txn_id, producer_id, producer_epoch, wanted)
    return dict.fromkeys(wanted, fenced_for(version, 2, error))


async def _replicated_results(broker, txn_id: str, results: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
    if not results or any(code != 0 for code in results.values()):
        return results
    code = await replicated(broker, txn_id, 0)
    return dict.fromkeys(results, code)


def _topic_results(results: dict[tuple[str, int], int]) -> list:
    by_topic: dict[str, list] = {}
    for (topic, partition), code in results.items():
        by_topic.setdefault(topic, []).append(ApPartition(partition_index=partition, partition_error_code=code))
    return [ApResult(name=name, results_by_partition=parts) for name, parts in by_topic.items()]


def _partition_exists(broker, topic: str, partition: int) -> bool:
    try:
        broker.replica_manager.get_partition(topic, partition)
        return True
    except Exception:
        return False


# ----- AddOffsetsToTxn (25) ------------------------------------------------------------------------------------
async def handle_add_offsets(broker, header, request) -> Response:
    version = header.api_version
    if not allowed(broker, "WRITE", "TRANSACTIONAL_ID", request.transactional_id):
        code = TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif not allowed(broker, "READ", "GROUP", request.group_id):
        code = GROUP_AUTHORIZATION_FAILED
    else:
        # One node creates __consumer_offsets here; a cluster's is created by the group's FindCoordinator (Kafka
        # only computes the partition).
        clustered = getattr(broker, "cluster", None) is not None
        group_error = GroupErrors.NONE if clustered else broker.group_coordinator.ensure_offsets_topic()
        if group_error != GroupErrors.NONE:
            code = int(group_error)
        else:
            offsets_partition = broker.group_coordinator.partition_for(request.group_id)
            error = broker.txn_coordinator.add_partitions(
                request.transactional_id,
                request.producer_id,
                request.producer_epoch,
                [(GROUP_METADATA_TOPIC_NAME, offsets_partition)],
            )
            code = fenced_for(version, 2, await replicated(broker, request.transactional_id, int(error)))
    return Response.of(AddOffsetsToTxnResponse(version=version, throttle_time_ms=0, error_code=code), version)


# ----- EndTxn (26) ---------------------------------------------------------------------------------------------
async def handle_end_txn(broker, header, request) -> Response:
    version = header.api_version
    if not allowed(broker, "WRITE", "TRANSACTIONAL_ID", request.transactional_id):
        code = TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    else:
        error = broker.txn_coordinator.end_transaction(
            request.transactional_id, request.producer_id, request.producer_epoch, bool(request.committed)
        )
        code = fenced_for(version, 2, await replicated(broker, request.transactional_id, int(error)))
    return Response.of(EndTxnResponse(version=version, throttle_time_ms=0, error_code=code), version)


# ----- TxnOffsetCommit (28) ------------------------------------------------------------------------------------
async def handle_txn_offset_commit(broker, header, request) -> Response:
    """Kafka: READ on the group, WRITE on the transactional id, READ on each topic; the producer's epoch and the
    group's partition being in its transaction are verified with the transaction coordinator before the write
    (an unverified write would leave a transaction nobody ends)."""
    version = header.api_version
    wanted = [(t.name, p.partition_index) for t in request.topics for p in t.partitions]
    results: dict[tuple[str, int], int] = {}
    if not allowed(broker, "READ", "GROUP", request.group_id):
        results = dict.fromkeys(wanted, GROUP_AUTHORIZATION_FAILED)
    elif not allowed(broker, "WRITE", "TRANSACTIONAL_ID", request.transactional_id):
        results = dict.fromkeys(wanted, TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    else:
        group_coordinator = broker.group_coordinator
        txn_cluster = getattr(broker, "txn_cluster", None)
        offsets_tp = (GROUP_METADATA_TOPIC_NAME, group_coordinator.partition_for(request.group_id))
        error: int
        if txn_cluster is not None:
            # A cluster: the id's coordinator may be another broker (asked over the wire); a fenced epoch is
            # INVALID_PRODUCER_EPOCH here as with the local check.
            code = (
                await txn_cluster.verify(
                    request.transactional_id, request.producer_id, request.producer_epoch, [offsets_tp]
                )
            )[offsets_tp]
            if code == Errors.PRODUCER_FENCED:
                code = int(Errors.INVALID_PRODUCER_EPOCH)
            elif code == 13:  # NETWORK_EXCEPTION: the coordinator did not answer; the client retries
                code = int(Errors.COORDINATOR_NOT_AVAILABLE)
            error = code
        else:
            error = int(group_coordinator.ensure_offsets_topic())
            if error == GroupErrors.NONE:
                error = int(
                    broker.txn_coordinator.verify(
                        request.transactional_id, request.producer_id, request.producer_epoch, offsets_tp
                    )
                )
        if error != 0:
            results = dict.fromkeys(wanted, int(error))
        else:
            offsets = {}
            for topic in request.topics:
                topic_ok = allowed(broker, "READ", "TOPIC", topic.name)
                for p in topic.partitions:
                    if not topic_ok:
                        results[(topic.name, p.partition_index)] = TOPIC_AUTHORIZATION_FAILED
                        continue
                    epoch = p.committed_leader_epoch if version >= 2 else -1
                    offsets[(topic.name, p.partition_index)] = (p.committed_offset, epoch, p.committed_metadata)
            if offsets:
                committed = group_coordinator.commit_transactional_offsets(
                    request.group_id,
                    request.producer_id,
                    request.producer_epoch,
                    request.member_id if version >= 3 else "",
                    request.group_instance_id if version >= 3 else None,
                    request.generation_id if version >= 3 else -1,
                    offsets,
                )
                results.update({tp: int(code) for tp, code in committed.items()})
    by_topic: dict[str, list] = {}
    for topic, partition in wanted:
        by_topic.setdefault(topic, []).append(
            TocPartition(partition_index=partition, error_code=results[(topic, partition)])
        )
    response = TxnOffsetCommitResponse(
        version=version, throttle_time_ms=0, topics=[TocTopic(name=n, partitions=ps) for n, ps in by_topic.items()]
    )
    return Response.of(response, version)


# ----- WriteTxnMarkers (27) ------------------------------------------------------------------------------------
async def handle_write_txn_markers(broker, header, request) -> Response:
    """A coordinator's markers for partitions this broker leads (Kafka: CLUSTER_ACTION on the cluster), appended
    with origin coordinator and acks=-1: on a ZooKeeper cluster each is answered once the partition's in-sync
    replicas have it (Kafka's appendRecords with requiredAcks -1), as a produce is. A written marker in
    __consumer_offsets settles the transaction's pending offsets (Kafka's scheduleHandleTxnCompletion); long polls
    of the partition wake (its last stable offset moved). One node's own coordinator writes its markers in process."""
    version = header.api_version
    permitted = cluster_allowed(broker, "CLUSTER_ACTION")
    now = broker.log_manager.clock.milliseconds()
    cluster = getattr(broker, "cluster", None)
    results = []
    for marker in request.markers:
        commit = bool(marker.transaction_result)
        appended: dict[TopicPartition, object] = {}
        codes: dict[TopicPartition, int] = {}
        for topic in marker.topics:
            for partition in topic.partition_indexes:
                tp = TopicPartition(topic.name, partition)
                if not permitted:
                    codes[tp] = CLUSTER_AUTHORIZATION_FAILED
                    continue
                appended[tp] = append_marker(
                    broker.replica_manager,
                    tp,
                    marker.producer_id,
                    marker.producer_epoch,
                    marker.coordinator_epoch,
                    commit,
                    now,
                )
        if cluster is not None and appended:
            for tp, result in appended.items():
                if result.error is None:  # type: ignore[attr-defined]
                    broker.purgatory.notify(tp)  # followers' long-polling fetches wait for new records too
            timeout_ms = int(broker.config.props.get("request.timeout.ms", 30000))
            appended = await cluster.wait_for_acks(appended, timeout_ms)
        for tp, result in appended.items():
            error = result.error  # type: ignore[attr-defined]
            codes[tp] = error_code(error)
            if error is None:
                _marker_written(broker, tp, marker.producer_id, commit)
        topics = []
        for topic in marker.topics:
            partitions = [
                WtmPartition(partition_index=p, error_code=codes[TopicPartition(topic.name, p)])
                for p in topic.partition_indexes
            ]
            topics.append(WtmTopic(name=topic.name, partitions=partitions))
        results.append(WtmResult(producer_id=marker.producer_id, topics=topics))
    return Response.of(WriteTxnMarkersResponse(version=version, markers=results), version)


def _marker_written(broker, tp: TopicPartition, producer_id: int, commit: bool) -> None:
    if broker.purgatory is not None:
        broker.purgatory.notify(tp)  # read_committed long polls: the last stable offset moved
    if tp.topic == GROUP_METADATA_TOPIC_NAME:
        broker.group_coordinator.complete_transaction(producer_id, tp.partition, commit)


# ----- DescribeTransactions (65) -------------------------------------------------------------------------------
# DescribeTransactions' fields of one id and the TransactionDescription attributes they report
_DESCRIBED = (
    ("transaction_state", "state"),
    ("transaction_timeout_ms", "timeout_ms"),
    ("transaction_start_time_ms", "start_time_ms"),
    ("producer_id", "producer_id"),
    ("producer_epoch", "producer_epoch"),
)
# what an id without a description (refused, unknown, not coordinated here) reports: Kafka's empty values
_UNDESCRIBED = TransactionDescription("", "", -1, -1, 0, -1, [])


def _state(txn_id: str, code: int, desc: TransactionDescription = _UNDESCRIBED, topics=()) -> object:
    """One DescribeTransactions entry: the id's transaction, or ``code`` with Kafka's empty values."""
    reported = {field: getattr(desc, attribute) for field, attribute in _DESCRIBED}
    return DtState(error_code=code, transactional_id=txn_id, topics=list(topics), **reported)


async def handle_describe_transactions(broker, header, request) -> Response:
    version = header.api_version

    def describe(txn_id: str) -> object:
        error, desc = broker.txn_coordinator.describe(txn_id)
        if desc is None:
            return _state(txn_id, int(error))
        by_topic: dict[str, list[int]] = {}
        for topic, partition in desc.partitions:
            by_topic.setdefault(topic, []).append(partition)
        # Kafka leaves out the topics the caller may not describe
        topics = [
            DtState.TopicData(topic=t, partitions=ps)
            for t, ps in by_topic.items()
            if allowed(broker, "DESCRIBE", "TOPIC", t, log_denied=False)
        ]
        return _state(txn_id, 0, desc, topics)

    denied = TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    states = describe_each(broker, "TRANSACTIONAL_ID", request.transactional_ids, denied, describe, _state)
    response = DescribeTransactionsResponse(version=version, throttle_time_ms=0, transaction_states=states)
    return Response.of(response, version)


# ----- ListTransactions (66) -----------------------------------------------------------------------------------
async def handle_list_transactions(broker, header, request) -> Response:
    version = header.api_version
    error, unknown, listings = broker.txn_coordinator.list_transactions(
        request.state_filters,
        request.producer_id_filters,
        request.duration_filter if version >= 1 else -1,
        request.transactional_id_pattern if version >= 2 else None,
    )
    states = [
        LtState(transactional_id=t.transactional_id, producer_id=t.producer_id, transaction_state=t.state)
        for t in listings
        if allowed(broker, "DESCRIBE", "TRANSACTIONAL_ID", t.transactional_id, log_denied=False)
    ]
    response = ListTransactionsResponse(
        version=version,
        throttle_time_ms=0,
        error_code=int(error),
        unknown_state_filters=unknown,
        transaction_states=states,
    )
    return Response.of(response, version)
