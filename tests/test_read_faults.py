"""I/O faults on reads and on producer-state snapshots, injected through the storage's file-operations layer.

Kafka's behaviour being matched: an IOException while reading a log (LocalLog.read inside
maybeHandleIOException), while rolling (LocalLog.roll; UnifiedLog.append around the roll's takeSnapshot),
while flushing a roll's snapshot (UnifiedLog.flushProducerStateSnapshot) or while closing
(UnifiedLog.close around takeSnapshot) becomes KafkaStorageException and takes the log dir offline through
the LogDirFailureChannel; the other dirs keep serving, and the next start recovers the dir. A snapshot
that is corrupt on load is deleted and the state rebuilt from the log (ProducerStateManager.loadFromSnapshot).
"""

from __future__ import annotations

import errno
import logging
from pathlib import Path

import pytest

from kafkalog.errors import CorruptSnapshotError, KafkaStorageError
from kafkalog.layout import CLEAN_SHUTDOWN_FILE
from kafkalog.manager import LogManager
from kafkalog.record import RecordBatchBuilder
from kafkalog.record.types import ControlRecordType
from kafkalog.storage.file_records import FileRecords
from kafkalog.storage.fileio import FaultInjectingFileIO, injected
from kafkalog.storage.log import Log
from kafkalog.storage.producer_state import read_snapshot, snapshot_path, write_snapshot
from kafkalog.testing import MockTime

CONFIG = {"segment.bytes": 4096}


@pytest.fixture(autouse=True)
def _quiet_logs():
    """The faults below log errors on purpose."""
    logger = logging.getLogger("kafkalog")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    yield
    logger.setLevel(level)


def _value(name: str, i: int) -> bytes:
    return f"{name}-{i}-".encode() * 10


class TwoDirs:
    """A LogManager over two log dirs with topic ``a`` in the first and ``b`` in the second."""

    def __init__(self, root: Path) -> None:
        self.dirs = [root / "d0", root / "d1"]
        self.broker = {"log.dirs": ",".join(map(str, self.dirs))}
        self.acked: dict[str, list[bytes]] = {"a": [], "b": []}
        self.manager = self.start()
        self.manager.create_topic("a", 1, CONFIG)
        self.manager.create_topic("b", 1, CONFIG)
        if self.log("a").directory.parent == self.log("b").directory.parent:
            raise AssertionError("the two topics landed in one dir")

    def start(self) -> LogManager:
        manager = LogManager(self.dirs, self.broker, clock=MockTime())
        manager.startup()
        return manager

    def log(self, name: str) -> Log:
        return self.manager.get_log(name)

    @property
    def bad_dir(self) -> Path:
        return self.log("a").directory.parent

    def append(self, name: str, n: int = 1) -> None:
        for _ in range(n):
            value = _value(name, len(self.acked[name]))
            self.log(name).append([(None, value)])
            self.acked[name].append(value)

    def served(self, name: str) -> list[bytes]:
        return [r.value for r in self.log(name).records(isolation="log_end")]

    def assert_dir_offline_other_serving(self) -> None:
        assert self.manager.offline_log_dirs == [self.bad_dir]
        with pytest.raises(KafkaStorageError):
            self.log("a").append([(None, b"refused")])
        with pytest.raises(KafkaStorageError):
            self.log("a").read(0)
        self.append("b", 5)
        assert self.served("b") == self.acked["b"]

    def restart_and_check(self) -> None:
        """A clean shutdown (the failed dir gets no marker), a restart, every acked record and nothing else."""
        self.manager.shutdown()
        self.manager = self.start()
        try:
            assert self.manager.offline_log_dirs == []
            for name in ("a", "b"):
                assert self.served(name) == self.acked[name]
            self.append("a", 3)  # writable again
            assert self.served("a") == self.acked["a"]
        finally:
            self.manager.shutdown()


@pytest.fixture
def two_dirs(tmp_path):
    setup = TwoDirs(tmp_path)
    yield setup
    setup.manager.shutdown()


# ----- reads ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "nth, where",
    [(1, "the batch header read of Log.read"), (2, "the bytes of the fetched slice, read in Log.records")],
)
def test_read_eio_takes_the_dir_offline_and_a_restart_serves_everything(two_dirs, nth, where):
    two_dirs.append("a", 20)
    two_dirs.append("b", 20)
    fault = FaultInjectingFileIO("read", "EIO", nth=nth, path_contains=str(two_dirs.bad_dir), suffix=".log")
    with injected(fault), pytest.raises(KafkaStorageError) as info:
        two_dirs.served("a")
    assert fault.injected == 1, where
    message = str(info.value)
    assert f"in dir {two_dirs.bad_dir}" in message
    assert "Input/output error" in message
    assert info.value.io_error.errno == errno.EIO
    two_dirs.assert_dir_offline_other_serving()
    two_dirs.restart_and_check()


def test_read_errors_name_the_file_and_the_position(tmp_path):
    path = tmp_path / "00000000000000000000.log"
    records = FileRecords.open(path)
    try:
        records.append(b"x" * 100)
        with injected(FaultInjectingFileIO("read", "EIO")), pytest.raises(OSError) as info:
            records.read(40, 10)
        assert info.value.errno == errno.EIO
        assert info.value.filename == str(path)
        assert "at position 40" in str(info.value)
        assert records.read(40, 10) == b"x" * 10  # the file itself is fine
    finally:
        records.close()
    with pytest.raises(KafkaStorageError, match="is closed"):  # a closed file is not a disk failure
        records.read(0, 10)


def test_a_read_error_during_recovery_cuts_nothing(tmp_path):
    """Kafka's recovery truncates a segment only on InvalidOffsetException; an I/O error must not cut data."""
    directory = tmp_path / "t-0"
    with Log.open(directory, CONFIG) as lg:
        for i in range(40):
            lg.append([(None, _value("t", i))])
        expected = [r.value for r in lg.records(isolation="log_end")]
    assert len(list(directory.glob("*.log"))) > 1
    fault = FaultInjectingFileIO("read", "EIO", nth=1, suffix=".log")  # the first segment's recovery scan
    with injected(fault), pytest.raises(OSError):
        Log.open(directory, CONFIG, recovery_point=0, had_clean_shutdown=False)
    assert fault.injected == 1
    with Log.open(directory, CONFIG, recovery_point=0, had_clean_shutdown=False) as lg:
        assert [r.value for r in lg.records(isolation="log_end")] == expected


def test_read_eio_in_the_transaction_index_takes_the_dir_offline(two_dirs):
    two_dirs.append("a", 5)
    lg = two_dirs.log("a")
    builder = RecordBatchBuilder(producer_id=7, producer_epoch=0, base_sequence=0, is_transactional=True)
    builder.append(None, b"txn")
    lg.append(builder)
    lg.append_end_txn_marker(ControlRecordType.ABORT, 7, 0, 0)
    two_dirs.append("a", 2)
    fault = FaultInjectingFileIO("read", "EIO", path_contains=str(two_dirs.bad_dir), suffix=".txnindex")
    with injected(fault), pytest.raises(KafkaStorageError, match="in dir"):
        list(lg.records(isolation="read_committed"))
    assert fault.injected == 1
    assert two_dirs.manager.offline_log_dirs == [two_dirs.bad_dir]


# ----- producer snapshots ------------------------------------------------------------------------------------
def _snapshots(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.snapshot"))


@pytest.mark.parametrize("err", ["ENOSPC", "EIO"])
def test_a_failed_snapshot_write_at_roll_leaves_no_half_snapshot(two_dirs, err):
    two_dirs.append("a", 3)
    two_dirs.append("b", 3)
    partition_dir = two_dirs.log("a").directory
    before = _snapshots(partition_dir)
    fault = FaultInjectingFileIO(
        "write", err, path_contains=str(two_dirs.bad_dir), suffix=".snapshot", torn=True, sticky=True
    )
    with injected(fault), pytest.raises(KafkaStorageError) as info:
        two_dirs.append("a", 200)  # until a roll writes a snapshot
    assert fault.injected == 1
    assert f"in dir {two_dirs.bad_dir}" in str(info.value)
    assert info.value.io_error.errno == getattr(errno, err)
    assert _snapshots(partition_dir) == before  # the torn file was removed
    for snapshot in _snapshots(partition_dir):
        read_snapshot(snapshot)  # and every snapshot left loads
    two_dirs.assert_dir_offline_other_serving()
    two_dirs.restart_and_check()


def test_a_failed_snapshot_fsync_at_shutdown_leaves_the_dir_to_recovery(two_dirs):
    two_dirs.append("a", 10)
    two_dirs.append("b", 10)
    bad = two_dirs.bad_dir
    fault = FaultInjectingFileIO("fsync", "EIO", path_contains=str(bad), suffix=".snapshot")
    with injected(fault):
        two_dirs.manager.shutdown()  # does not raise: the other dir is closed cleanly
    assert fault.injected == 1
    assert two_dirs.manager.offline_log_dirs == [bad]
    assert not (bad / CLEAN_SHUTDOWN_FILE).exists()
    assert (two_dirs.dirs[1] / CLEAN_SHUTDOWN_FILE).exists()
    for snapshot in _snapshots(bad / "a-0"):
        read_snapshot(snapshot)
    two_dirs.restart_and_check()


def test_a_failed_snapshot_flush_after_roll_keeps_the_recovery_point(tmp_path):
    """Kafka's testRecoveryPointNotIncrementedOnProducerStateSnapshotFlushFailure, with a real fsync fault."""
    with Log.open(tmp_path / "t-0", CONFIG) as lg:  # no scheduler: the roll's flush task runs in roll()
        lg.append([(None, b"a")])
        with injected(FaultInjectingFileIO("fsync", "EIO", suffix=".snapshot")), pytest.raises(KafkaStorageError):
            lg.roll(1)
        assert lg.recovery_point == 0
        assert lg.is_offline


def test_write_snapshot_removes_its_file_when_the_fsync_fails(tmp_path):
    path = snapshot_path(tmp_path, 42)
    with injected(FaultInjectingFileIO("fsync", "EIO")), pytest.raises(OSError):
        write_snapshot(path, [], sync=True)
    assert not path.exists()
    write_snapshot(path, [], sync=True)
    assert read_snapshot(path) == []


def test_a_torn_snapshot_that_stayed_behind_is_deleted_and_the_state_rebuilt(tmp_path):
    """If the partial file could not be removed (the disk died), loading rejects and deletes it."""
    directory = tmp_path / "t-0"
    with Log.open(directory, CONFIG) as lg:
        builder = RecordBatchBuilder(producer_id=11, producer_epoch=3, base_sequence=0)
        builder.append(None, b"idempotent")
        lg.append(builder)
        lg.append([(None, b"plain")])
        end = lg.log_end_offset
    torn = snapshot_path(directory, end)
    data = torn.read_bytes()
    torn.write_bytes(data[: len(data) // 2])
    with pytest.raises(CorruptSnapshotError):
        read_snapshot(torn)
    with Log.open(directory, CONFIG, recovery_point=0, had_clean_shutdown=False) as lg:
        entry = lg.producer_state.last_entry(11)
        assert entry is not None and entry.producer_epoch == 3 and entry.last_seq == 0
    for snapshot in _snapshots(directory):
        read_snapshot(snapshot)


# ----- startup -------------------------------------------------------------------------------------------
def _open_fds_under(directory: Path) -> list[str]:
    fds = Path("/proc/self/fd")
    if not fds.is_dir():
        return []
    found = []
    for fd in fds.iterdir():
        try:
            target = str(fd.readlink())
        except OSError:
            continue
        if target.startswith(str(directory)):
            found.append(target)
    return found


def test_a_dir_failing_at_startup_starts_offline_while_the_other_serves(two_dirs):
    """LogManager.loadLogs: an I/O error while loading one dir leaves that dir offline, the others load."""
    two_dirs.append("a", 30)
    two_dirs.append("b", 30)
    bad = two_dirs.bad_dir
    two_dirs.manager.shutdown()
    (bad / CLEAN_SHUTDOWN_FILE).unlink()  # an unclean start: recovery reads every segment of the dir
    fault = FaultInjectingFileIO("read", "EIO", path_contains=str(bad), suffix=".log", sticky=True)
    with injected(fault):
        two_dirs.manager = two_dirs.start()
    assert fault.injected >= 1
    assert two_dirs.manager.offline_log_dirs == [bad]
    assert "Input/output error" in two_dirs.manager.offline_reason(bad)
    two_dirs.append("b", 5)
    assert two_dirs.served("b") == two_dirs.acked["b"]
    two_dirs.restart_and_check()  # the next start recovers the dir with every acknowledged record
    assert _open_fds_under(bad) == []


def test_a_startup_where_every_dir_fails_raises_and_releases_everything(two_dirs):
    two_dirs.append("a", 10)
    two_dirs.append("b", 10)
    two_dirs.manager.shutdown()
    for directory in two_dirs.dirs:
        (directory / CLEAN_SHUTDOWN_FILE).unlink()
    manager = LogManager(two_dirs.dirs, two_dirs.broker, clock=MockTime())
    fault = FaultInjectingFileIO("read", "EIO", suffix=".log", sticky=True)
    with injected(fault), pytest.raises(KafkaStorageError, match="None of the log dirs could be loaded"):
        manager.startup()
    for directory in two_dirs.dirs:
        assert _open_fds_under(directory) == []  # logs opened before the failure are closed, locks released
    two_dirs.manager = two_dirs.start()  # the locks are free again
    assert [two_dirs.served(n) for n in ("a", "b")] == [two_dirs.acked["a"], two_dirs.acked["b"]]
