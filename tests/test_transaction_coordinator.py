"""The transaction coordinator's state machine, markers and __transaction_state records, under MockTime (no broker).

Expected values follow Kafka's rules (TransactionCoordinator / TransactionMetadata, named in each test) and the
bytes of Kafka's schemas (test_transaction_records.py), never this coordinator's own output.
"""

from __future__ import annotations

import pytest

from kafkalog.coordinator.group import partition_for
from kafkalog.coordinator.transaction import (
    TRANSACTION_STATE_TOPIC_NAME,
    Errors,
    TransactionCoordinator,
    TransactionCoordinatorConfig,
    TransactionState,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from kafkalog.coordinator.transaction.records import value_from_state
from kafkalog.manager import LogManager, TopicPartition
from kafkalog.partition import READ_COMMITTED, READ_UNCOMMITTED
from kafkalog.record.builder import RecordBatchBuilder
from kafkalog.record.types import ControlRecordType
from kafkalog.storage.producer_state import AppendOrigin
from kafkalog.testing import MockTime

TOPIC = "t"
S = TransactionState


class Harness:
    """A LogManager (topic ``t`` with 2 partitions) and a coordinator on one MockTime; ``restart`` reopens both."""

    def __init__(self, path, **config) -> None:
        self.path = path
        config.setdefault("transaction_state_log_num_partitions", 3)
        self.config = TransactionCoordinatorConfig(**config)
        self.clock = MockTime()
        self.next_pid = 1000
        self.markers: list[tuple[TopicPartition, int, bool]] = []
        self._open()
        self.manager.create_topic(TOPIC, 2)

    def _pid(self) -> int:
        self.next_pid += 1
        return self.next_pid - 1

    def _open(self) -> None:
        self.manager = LogManager(self.path, clock=self.clock)
        self.manager.startup()
        self.coordinator = TransactionCoordinator(
            self.manager, self.config, self.clock, self.clock.scheduler, self._pid
        )
        self.coordinator.add_marker_listener(lambda tp, pid, commit: self.markers.append((tp, pid, commit)))
        self.coordinator.startup()

    def restart(self) -> None:
        self.coordinator.shutdown()
        self.manager.shutdown()
        self._open()

    def close(self) -> None:
        self.coordinator.shutdown()
        self.manager.shutdown()

    def partition(self, topic: str = TOPIC, p: int = 0):
        return self.manager.replica_manager.get_partition(topic, p)

    def produce_txn(self, pid: int, epoch: int, p: int = 0, seq: int = 0, value: bytes = b"v"):
        builder = RecordBatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=True)
        builder.append(b"k", value, self.clock.milliseconds())
        tp = TopicPartition(TOPIC, p)
        return self.manager.replica_manager.append_records({tp: builder.build()}, -1)[tp]

    def state_records(self, txn_id: str) -> list[tuple[int, object]]:
        """(value version, value or None) of every record of ``txn_id`` in its state partition."""
        part = self.partition(TRANSACTION_STATE_TOPIC_NAME, self.coordinator.partition_for(txn_id))
        out = []
        for record in part.records(None, READ_UNCOMMITTED):
            if decode_key(record.key) == txn_id:
                out.append(None if record.value is None else decode_value(record.value))
        return out

    def batches(self, p: int = 0) -> list:
        data = self.partition(TOPIC, p).fetch_records(0, 1 << 20, "log_end")
        return list(data.records.batches())


@pytest.fixture
def h(tmp_path):
    harness = Harness(tmp_path)
    yield harness
    harness.close()


def states(h: Harness, txn_id: str) -> list[TransactionState]:
    return [value.state for _, value in h.state_records(txn_id)]


def test_partition_for_matches_kafka() -> None:
    # Kafka 3.7 put ksqlDB's transactional id "default_" on __transaction_state-44 of 50 (fixture cp77-kraft)
    assert partition_for("default_", 50) == 44


def test_init_producer_id_creates_topic_and_bumps_epoch(h: Harness) -> None:
    first = h.coordinator.init_producer_id("tx", 60_000)
    assert (first.error, first.producer_id, first.producer_epoch) == (Errors.NONE, 1000, 0)
    assert h.coordinator.state_topic_partitions() == [0, 1, 2]
    again = h.coordinator.init_producer_id("tx", 60_000)
    assert (again.error, again.producer_id, again.producer_epoch) == (Errors.NONE, 1000, 1)
    records = h.state_records("tx")
    assert [(v, value.state, value.producer_epoch) for v, value in records] == [(1, S.EMPTY, 0), (1, S.EMPTY, 1)]
    assert records[0][1].partitions is None and records[0][1].transaction_start_timestamp_ms == -1
    assert records[0][1].transaction_timeout_ms == 60_000


def test_init_producer_id_bad_input(h: Harness) -> None:
    assert h.coordinator.init_producer_id("", 1000).error is Errors.INVALID_REQUEST
    assert h.coordinator.init_producer_id("tx", 0).error is Errors.INVALID_TRANSACTION_TIMEOUT
    # transaction.max.timeout.ms defaults to 900000 (15 minutes)
    assert h.coordinator.init_producer_id("tx", 900_001).error is Errors.INVALID_TRANSACTION_TIMEOUT
    assert h.coordinator.init_producer_id("tx", 900_000).error is Errors.NONE


def test_commit_writes_markers_and_moves_lso(h: Harness) -> None:
    init = h.coordinator.init_producer_id("tx", 60_000)
    pid, epoch = init.producer_id, init.producer_epoch
    assert h.coordinator.add_partitions("tx", pid, epoch, [(TOPIC, 0)]) is Errors.NONE
    assert h.produce_txn(pid, epoch).error is None
    assert h.partition().last_stable_offset == 0  # the open transaction holds the LSO
    assert list(h.partition().records(None, READ_COMMITTED)) == []
    assert h.coordinator.end_transaction("tx", pid, epoch, commit=True) is Errors.NONE
    marker = h.batches()[-1]
    assert marker.is_control and marker.producer_id == pid and marker.producer_epoch == epoch
    assert marker.end_transaction_marker().type == ControlRecordType.COMMIT
    assert h.partition().last_stable_offset == 2
    assert [r.value for r in h.partition().records(None, READ_COMMITTED)] == [b"v"]
    assert states(h, "tx") == [S.EMPTY, S.ONGOING, S.PREPARE_COMMIT, S.COMPLETE_COMMIT]
    ongoing = h.state_records("tx")[1][1]
    assert ongoing.topic_partitions() == {(TOPIC, 0)}
    assert h.state_records("tx")[3][1].partitions == ()  # Complete* keep no partitions (as Kafka 3.7 wrote)
    assert h.markers == [(TopicPartition(TOPIC, 0), pid, True)]
    # a retried EndTxn(commit) after completion is fine; an abort now is not
    assert h.coordinator.end_transaction("tx", pid, epoch, commit=True) is Errors.NONE
    assert h.coordinator.end_transaction("tx", pid, epoch, commit=False) is Errors.INVALID_TXN_STATE


def test_abort_hides_records(h: Harness) -> None:
    init = h.coordinator.init_producer_id("tx", 60_000)
    pid, epoch = init.producer_id, init.producer_epoch
    assert h.coordinator.add_partitions("tx", pid, epoch, [(TOPIC, 0), (TOPIC, 1)]) is Errors.NONE
    h.produce_txn(pid, epoch, 0)
    h.produce_txn(pid, epoch, 1)
    assert h.coordinator.end_transaction("tx", pid, epoch, commit=False) is Errors.NONE
    for p in (0, 1):
        assert h.batches(p)[-1].end_transaction_marker().type == ControlRecordType.ABORT
        assert list(h.partition(TOPIC, p).records(None, READ_COMMITTED)) == []
        assert len(list(h.partition(TOPIC, p).records(None, READ_UNCOMMITTED))) == 1
    assert h.coordinator.transactions["tx"].state is S.COMPLETE_ABORT


def test_end_txn_without_transaction_writes_nothing(h: Harness) -> None:
    init = h.coordinator.init_producer_id("tx", 60_000)
    state_leo = h.partition(TRANSACTION_STATE_TOPIC_NAME, h.coordinator.partition_for("tx")).log_end_offset
    # Kafka: EndTxn in state Empty is INVALID_TXN_STATE
    assert h.coordinator.end_transaction("tx", init.producer_id, 0, commit=True) is Errors.INVALID_TXN_STATE
    assert h.coordinator.end_transaction("tx", init.producer_id, 0, commit=False) is Errors.INVALID_TXN_STATE
    # an unknown id or another producer id: INVALID_PRODUCER_ID_MAPPING
    assert h.coordinator.end_transaction("nope", init.producer_id, 0, commit=True) is Errors.INVALID_PRODUCER_ID_MAPPING
    assert h.coordinator.end_transaction("tx", 7, 0, commit=True) is Errors.INVALID_PRODUCER_ID_MAPPING
    assert h.partition(TRANSACTION_STATE_TOPIC_NAME, h.coordinator.partition_for("tx")).log_end_offset == state_leo
    assert h.batches(0) == []


def test_wrong_epoch_is_fenced_and_writes_nothing(h: Harness) -> None:
    init = h.coordinator.init_producer_id("tx", 60_000)
    pid = init.producer_id
    state_tp = h.partition(TRANSACTION_STATE_TOPIC_NAME, h.coordinator.partition_for("tx"))
    leo = state_tp.log_end_offset
    assert h.coordinator.add_partitions("tx", pid, 5, [(TOPIC, 0)]) is Errors.PRODUCER_FENCED
    assert h.coordinator.add_partitions("tx", pid + 1, 0, [(TOPIC, 0)]) is Errors.INVALID_PRODUCER_ID_MAPPING
    assert state_tp.log_end_offset == leo
    assert h.coordinator.transactions["tx"].state is S.EMPTY


def test_zombie_is_fenced_and_its_transaction_aborted(h: Harness) -> None:
    """A second InitProducerId while a transaction is Ongoing: Kafka bumps the epoch, aborts the transaction with
    it (PrepareEpochFence -> PrepareAbort), answers CONCURRENT_TRANSACTIONS, and the retry bumps once more."""
    old = h.coordinator.init_producer_id("tx", 60_000)
    pid = old.producer_id
    assert h.coordinator.add_partitions("tx", pid, 0, [(TOPIC, 0)]) is Errors.NONE
    h.produce_txn(pid, 0)
    assert h.coordinator.init_producer_id("tx", 60_000).error is Errors.CONCURRENT_TRANSACTIONS
    marker = h.batches()[-1]
    assert marker.end_transaction_marker().type == ControlRecordType.ABORT and marker.producer_epoch == 1
    new = h.coordinator.init_producer_id("tx", 60_000)
    assert (new.error, new.producer_id, new.producer_epoch) == (Errors.NONE, pid, 2)
    assert states(h, "tx") == [S.EMPTY, S.ONGOING, S.PREPARE_ABORT, S.COMPLETE_ABORT, S.EMPTY]
    # the zombie: coordinator calls get PRODUCER_FENCED, its writes to the partition INVALID_PRODUCER_EPOCH
    assert h.coordinator.add_partitions("tx", pid, 0, [(TOPIC, 1)]) is Errors.PRODUCER_FENCED
    assert h.coordinator.end_transaction("tx", pid, 0, commit=True) is Errors.PRODUCER_FENCED
    assert type(h.produce_txn(pid, 0, seq=1).error).__name__ == "InvalidProducerEpochError"
    assert list(h.partition().records(None, READ_COMMITTED)) == []


def test_init_with_expected_epoch(h: Harness) -> None:
    """InitProducerId v3+: the producer's own (id, epoch) bumps; a stale one is PRODUCER_FENCED; a retry of a
    bump that worked gets the same epoch back (TransactionMetadata.prepareIncrementProducerEpoch)."""
    first = h.coordinator.init_producer_id("tx", 60_000)
    pid = first.producer_id
    bumped = h.coordinator.init_producer_id("tx", 60_000, (pid, 0))
    assert (bumped.error, bumped.producer_epoch) == (Errors.NONE, 1)
    retried = h.coordinator.init_producer_id("tx", 60_000, (pid, 0))
    assert (retried.error, retried.producer_epoch) == (Errors.NONE, 1)
    other = h.coordinator.init_producer_id("tx", 60_000)  # another producer: last epoch forgotten
    assert other.producer_epoch == 2
    assert h.coordinator.init_producer_id("tx", 60_000, (pid, 0)).error is Errors.PRODUCER_FENCED
    assert h.coordinator.init_producer_id("tx", 60_000, (pid + 50, 2)).error is Errors.PRODUCER_FENCED


def test_timed_out_transaction_is_aborted(tmp_path) -> None:
    h = Harness(tmp_path, abort_timed_out_transaction_cleanup_interval_ms=1000)
    try:
        init = h.coordinator.init_producer_id("tx", 5000)
        pid = init.producer_id
        assert h.coordinator.add_partitions("tx", pid, 0, [(TOPIC, 0)]) is Errors.NONE
        h.produce_txn(pid, 0)
        h.clock.advance(4000)
        assert h.coordinator.transactions["tx"].state is S.ONGOING
        assert h.partition().last_stable_offset == 0
        h.clock.advance(2000)  # start + 5000 < now at the check of 6000
        assert h.coordinator.transactions["tx"].state is S.COMPLETE_ABORT
        assert h.coordinator.transactions["tx"].producer_epoch == 1  # fenced
        assert h.batches()[-1].end_transaction_marker().type == ControlRecordType.ABORT
        assert h.partition().last_stable_offset == 2
        assert h.coordinator.end_transaction("tx", pid, 0, commit=True) is Errors.PRODUCER_FENCED
    finally:
        h.close()


def test_restart_completes_prepare_commit(tmp_path) -> None:
    """A log left as a coordinator that crashed after writing PrepareCommit and before its markers: on load Kafka
    sends the markers again and writes CompleteCommit; the LSO moves past the transaction."""
    h = Harness(tmp_path)
    try:
        assert h.coordinator.ensure_state_topic() is Errors.NONE
        pid = 4242
        h.produce_txn(pid, 3, 1, value=b"pending")
        assert h.partition(TOPIC, 1).last_stable_offset == 0
        now = h.clock.milliseconds()
        value = value_from_state(pid, 3, 60_000, S.PREPARE_COMMIT, [(TOPIC, 1)], now, now - 10)
        state_tp = TopicPartition(TRANSACTION_STATE_TOPIC_NAME, h.coordinator.partition_for("crashed"))
        builder = RecordBatchBuilder()
        builder.append(encode_key("crashed"), encode_value(value, 0), now)  # a Kafka 3.x (v0) record
        assert (
            h.manager.replica_manager.append_records({state_tp: builder.build()}, -1, AppendOrigin.COORDINATOR)[
                state_tp
            ].error
            is None
        )
        h.restart()
        metadata = h.coordinator.transactions["crashed"]
        assert metadata.state is S.COMPLETE_COMMIT and metadata.producer_epoch == 3
        marker = h.batches(1)[-1]
        assert marker.end_transaction_marker().type == ControlRecordType.COMMIT and marker.producer_id == pid
        assert [r.value for r in h.partition(TOPIC, 1).records(None, READ_COMMITTED)] == [b"pending"]
        assert states(h, "crashed") == [S.PREPARE_COMMIT, S.COMPLETE_COMMIT]
    finally:
        h.close()


def test_restart_keeps_ongoing_until_timeout(tmp_path) -> None:
    h = Harness(tmp_path, abort_timed_out_transaction_cleanup_interval_ms=1000)
    try:
        init = h.coordinator.init_producer_id("tx", 10_000)
        assert h.coordinator.add_partitions("tx", init.producer_id, 0, [(TOPIC, 0)]) is Errors.NONE
        h.produce_txn(init.producer_id, 0)
        h.restart()
        metadata = h.coordinator.transactions["tx"]
        assert metadata.state is S.ONGOING and metadata.topic_partitions == {(TOPIC, 0)}
        assert h.partition().last_stable_offset == 0
        h.clock.advance(11_000)
        assert h.coordinator.transactions["tx"].state is S.COMPLETE_ABORT
        assert h.partition().last_stable_offset == 2
        again = h.coordinator.init_producer_id("tx", 10_000)
        assert (again.producer_id, again.producer_epoch) == (init.producer_id, 2)
    finally:
        h.close()


def test_expired_transactional_id_is_removed(tmp_path) -> None:
    h = Harness(
        tmp_path, transactional_id_expiration_ms=60_000, remove_expired_transactional_id_cleanup_interval_ms=10_000
    )
    try:
        h.coordinator.init_producer_id("idle", 1000)
        h.clock.advance(70_000)
        assert "idle" not in h.coordinator.transactions
        assert h.state_records("idle")[-1] is None  # a tombstone
        h.restart()
        assert "idle" not in h.coordinator.transactions
        assert h.coordinator.describe("idle")[0] is Errors.TRANSACTIONAL_ID_NOT_FOUND
    finally:
        h.close()


def test_describe_and_list(h: Harness) -> None:
    a = h.coordinator.init_producer_id("a", 60_000)
    h.coordinator.init_producer_id("b", 60_000)
    h.coordinator.add_partitions("a", a.producer_id, 0, [(TOPIC, 1), (TOPIC, 0)])
    error, desc = h.coordinator.describe("a")
    assert error is Errors.NONE and desc is not None
    assert (desc.state, desc.producer_id, desc.timeout_ms) == ("Ongoing", a.producer_id, 60_000)
    assert desc.partitions == [(TOPIC, 0), (TOPIC, 1)] and desc.start_time_ms == h.clock.milliseconds()
    assert h.coordinator.describe("")[0] is Errors.INVALID_REQUEST
    _, unknown, listed = h.coordinator.list_transactions()
    assert unknown == [] and [(t.transactional_id, t.state) for t in listed] == [("a", "Ongoing"), ("b", "Empty")]
    _, unknown, listed = h.coordinator.list_transactions(states=["Ongoing", "Bogus"])
    assert unknown == ["Bogus"] and [t.transactional_id for t in listed] == ["a"]
    _, _, listed = h.coordinator.list_transactions(producer_ids=[a.producer_id + 1])
    assert [t.transactional_id for t in listed] == ["b"]
    _, _, listed = h.coordinator.list_transactions(pattern="a|c")
    assert [t.transactional_id for t in listed] == ["a"]
    h.clock.advance(5000)
    _, _, listed = h.coordinator.list_transactions(states=["Ongoing"], duration_ms=4000)
    assert [t.transactional_id for t in listed] == ["a"]
    _, _, listed = h.coordinator.list_transactions(states=["Ongoing"], duration_ms=6000)
    assert listed == []


def test_verify_partition_in_transaction(h: Harness) -> None:
    init = h.coordinator.init_producer_id("tx", 60_000)
    pid = init.producer_id
    assert h.coordinator.verify("tx", pid, 0, (TOPIC, 0)) is Errors.INVALID_TXN_STATE
    h.coordinator.add_partitions("tx", pid, 0, [(TOPIC, 0)])
    assert h.coordinator.verify("tx", pid, 0, (TOPIC, 0)) is Errors.NONE
    assert h.coordinator.verify("tx", pid, 0, (TOPIC, 1)) is Errors.INVALID_TXN_STATE
    assert h.coordinator.verify("tx", pid, 1, (TOPIC, 0)) is Errors.INVALID_PRODUCER_EPOCH
    assert h.coordinator.verify("zz", pid, 0, (TOPIC, 0)) is Errors.INVALID_PRODUCER_ID_MAPPING


def test_verify_partitions_as_kafkas_verify_only(h: Harness) -> None:
    init = h.coordinator.init_producer_id("tx", 60_000)
    pid = init.producer_id
    h.coordinator.add_partitions("tx", pid, 0, [(TOPIC, 0)])
    assert h.coordinator.verify_partitions("tx", pid, 0, [(TOPIC, 0), (TOPIC, 1)]) == {
        (TOPIC, 0): Errors.NONE,
        (TOPIC, 1): Errors.INVALID_TXN_STATE,
    }
    assert h.coordinator.verify_partitions("tx", pid, 3, [(TOPIC, 0)]) == {(TOPIC, 0): Errors.PRODUCER_FENCED}
    assert h.coordinator.verify_partitions("no", pid, 0, [(TOPIC, 0)]) == {
        (TOPIC, 0): Errors.INVALID_PRODUCER_ID_MAPPING
    }


def test_config_from_properties_uses_kafkas_names_and_defaults() -> None:
    from kafkalog.errors import InvalidConfigurationError

    default = TransactionCoordinatorConfig.from_properties({})
    assert default.transaction_max_timeout_ms == 900_000  # Kafka: 15 minutes
    assert default.transaction_state_log_num_partitions == 50
    assert default.transactional_id_expiration_ms == 604_800_000  # 7 days
    assert default.abort_timed_out_transaction_cleanup_interval_ms == 10_000
    assert default.partition_verification_enable is True
    custom = TransactionCoordinatorConfig.from_properties(
        {"transaction.max.timeout.ms": "1000", "transaction.partition.verification.enable": "false"}
    )
    assert custom.transaction_max_timeout_ms == 1000 and custom.partition_verification_enable is False
    with pytest.raises(InvalidConfigurationError, match=r"transaction\.state\.log\.num\.partitions"):
        TransactionCoordinatorConfig.from_properties({"transaction.state.log.num.partitions": "0"})
    with pytest.raises(InvalidConfigurationError, match="either true or false"):
        TransactionCoordinatorConfig.from_properties({"transaction.partition.verification.enable": "yes"})


def test_markers_retried_until_written_and_the_transaction_waits(h: Harness) -> None:
    """A marker that cannot be written yet (the partition is not led here for a while: NOT_LEADER_OR_FOLLOWER) is
    retried; meanwhile the transaction stays PrepareCommit and the producer gets CONCURRENT_TRANSACTIONS, as
    Kafka's clients do while markers are in flight."""
    init = h.coordinator.init_producer_id("tx", 60_000)
    pid = init.producer_id
    h.coordinator.add_partitions("tx", pid, 0, [(TOPIC, 0)])
    h.produce_txn(pid, 0)
    epoch = h.partition().leader_epoch
    h.partition().make_follower(5, epoch)
    assert h.coordinator.end_transaction("tx", pid, 0, commit=True) is Errors.NONE
    metadata = h.coordinator.transactions["tx"]
    assert metadata.state is S.PREPARE_COMMIT and metadata.pending_state is S.COMPLETE_COMMIT
    assert h.coordinator.end_transaction("tx", pid, 0, commit=True) is Errors.CONCURRENT_TRANSACTIONS
    assert h.coordinator.init_producer_id("tx", 60_000).error is Errors.CONCURRENT_TRANSACTIONS
    assert h.coordinator.add_partitions("tx", pid, 0, [(TOPIC, 1)]) is Errors.CONCURRENT_TRANSACTIONS
    h.clock.advance(500)
    assert metadata.state is S.PREPARE_COMMIT  # still not led here: still retrying
    h.partition().make_leader(epoch + 1)
    h.clock.advance(100)
    assert metadata.state is S.COMPLETE_COMMIT and metadata.pending_state is None
    assert h.batches()[-1].end_transaction_marker().type == ControlRecordType.COMMIT
    assert h.markers == [(TopicPartition(TOPIC, 0), pid, True)]


def test_exhausted_epoch_rotates_the_producer_id(tmp_path) -> None:
    """Kafka keeps the last epochs for fencing: at epoch 32766 (Short.MaxValue - 1) an InitProducerId gets a new
    producer id at epoch 0, remembering the old id (TransactionMetadata.prepareProducerIdRotation)."""
    h = Harness(tmp_path)
    try:
        assert h.coordinator.ensure_state_topic() is Errors.NONE
        now = h.clock.milliseconds()
        value = value_from_state(500, 32766, 60_000, S.COMPLETE_COMMIT, [], now, now)
        tp = TopicPartition(TRANSACTION_STATE_TOPIC_NAME, h.coordinator.partition_for("old"))
        builder = RecordBatchBuilder()
        builder.append(encode_key("old"), encode_value(value), now)
        rm = h.manager.replica_manager
        assert rm.append_records({tp: builder.build()}, -1, AppendOrigin.COORDINATOR)[tp].error is None
        h.restart()
        # the producer itself (InitProducerId v3+ with its id and epoch): rotation records its last epoch
        rotated = h.coordinator.init_producer_id("old", 60_000, (500, 32766))
        assert (rotated.error, rotated.producer_id, rotated.producer_epoch) == (Errors.NONE, 1000, 0)
        metadata = h.coordinator.transactions["old"]
        assert (metadata.last_producer_id, metadata.last_producer_epoch) == (500, 32766)
        # its retry (the answer was lost): the old id with an exhausted epoch is still valid, and the expected
        # epoch being the last one, the same (1000, 0) comes back without a bump
        retried = h.coordinator.init_producer_id("old", 60_000, (500, 32766))
        assert (retried.error, retried.producer_id, retried.producer_epoch) == (Errors.NONE, 1000, 0)
        # any other old epoch of the old id is fenced; a new producer (no expected epoch) bumps
        assert h.coordinator.init_producer_id("old", 60_000, (500, 12)).error is Errors.PRODUCER_FENCED
        assert h.coordinator.init_producer_id("old", 60_000).producer_epoch == 1
        assert h.state_records("old")[-1][1].previous_producer_id == 500  # tag 0 of the v1 value
    finally:
        h.close()


class RecordingChannel:
    """A marker channel that only records what it is asked (the cluster's sends WriteTxnMarkers)."""

    def __init__(self) -> None:
        self.sent: list = []
        self.dropped: list[int] = []

    def send(self, entry) -> None:
        self.sent.append(entry)

    def drop_partition(self, partition: int) -> None:
        self.dropped.append(partition)


def test_cluster_ownership_election_and_resignation(tmp_path) -> None:
    """On a cluster the coordinator owns only the state partitions it was elected for: NOT_COORDINATOR elsewhere;
    election loads a partition and sends the markers of a transaction left in PrepareCommit through the marker
    channel with the election's epoch as coordinator epoch (CONCURRENT_TRANSACTIONS until every marker is in, then
    CompleteCommit); resignation unloads it and drops its unsent markers."""
    h = Harness(tmp_path)
    try:
        txn_id = "owned"
        assert h.coordinator.init_producer_id(txn_id, 60_000).error is Errors.NONE
        pid = h.coordinator.transactions[txn_id].producer_id
        assert h.coordinator.add_partitions(txn_id, pid, 0, [(TOPIC, 0), (TOPIC, 1)]) is Errors.NONE
        # this node's coordinator crashes right after writing PrepareCommit (a channel that never delivers)
        h.coordinator.marker_channel = RecordingChannel()
        assert h.coordinator.end_transaction(txn_id, pid, 0, True) is Errors.NONE
        h.coordinator.shutdown()
        channel = RecordingChannel()
        clustered = TransactionCoordinator(h.manager, h.config, h.clock, h.clock.scheduler, h._pid)
        clustered.marker_channel = channel
        clustered.startup(clustered=True)
        partition = clustered.partition_for(txn_id)
        assert clustered.init_producer_id(txn_id, 60_000).error is Errors.NOT_COORDINATOR
        assert clustered.end_transaction(txn_id, pid, 0, True) is Errors.NOT_COORDINATOR
        clustered.begin_loading(partition)
        assert clustered.add_partitions(txn_id, pid, 0, [(TOPIC, 0)]) is Errors.COORDINATOR_LOAD_IN_PROGRESS
        clustered.on_election(partition, 7)
        [entry] = channel.sent
        assert (entry.transactional_id, entry.coordinator_epoch, entry.commit) == (txn_id, 7, True)
        assert entry.partitions == {(TOPIC, 0), (TOPIC, 1)} and entry.producer_id == pid
        state_log = h.partition(TRANSACTION_STATE_TOPIC_NAME, partition)
        assert entry.state_end_offset == state_log.log_end_offset  # the Prepare record is in the loaded log
        assert clustered.end_transaction(txn_id, pid, 0, True) is Errors.CONCURRENT_TRANSACTIONS
        clustered.marker_written(txn_id, 6, (TOPIC, 0))  # a superseded coordinator epoch: ignored
        clustered.marker_written(txn_id, 7, (TOPIC, 0))
        assert clustered.transactions[txn_id].state is S.PREPARE_COMMIT
        clustered.marker_written(txn_id, 7, (TOPIC, 1))
        assert clustered.transactions[txn_id].state is S.COMPLETE_COMMIT
        assert states(h, txn_id)[-2:] == [S.PREPARE_COMMIT, S.COMPLETE_COMMIT]
        assert clustered.init_producer_id(txn_id, 60_000).producer_epoch == 1
        clustered.on_resignation(partition)
        # dropped twice: on election (a former term's deliveries) and on resignation
        assert channel.dropped == [partition, partition] and txn_id not in clustered.transactions
        assert clustered.describe(txn_id)[0] is Errors.NOT_COORDINATOR
        clustered.shutdown()
    finally:
        h.manager.shutdown()
