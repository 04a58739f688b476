"""Large client batches are checked on a background thread while they are written (storage/overlap.py).

The write must stay invisible and crash-safe until the check passes: a refused batch leaves the log and
its files as they were, and a crash between the write and the check leaves a tail recovery cuts off.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from kafkalog.errors import CorruptRecordError, InvalidTimestampError, KafkaStorageError
from kafkalog.record import build_batch
from kafkalog.record.batch import CRC_OFFSET, HEADER_STRUCT, RECORDS_OFFSET
from kafkalog.record.checksums import crc32c
from kafkalog.storage import Log
from kafkalog.storage import log_append as log_module
from kafkalog.storage.fileio import FaultInjectingFileIO, injected
from kafkalog.storage.overlap import OVERLAP_MIN_BYTES, BackgroundChecker, checker
from kafkalog.testing import MockTime

NOW = 1_700_000_000_000
RECORDS = 400
VALUE = 1000  # 400 records of ~1 KB: a batch above the overlap threshold


def big_batch(first_ts: int = NOW - 1000, seed: int = 0) -> bytes:
    keys = [f"k{seed}-{i}".encode() for i in range(RECORDS)]
    values = [bytes([(seed + i) % 251]) * VALUE for i in range(RECORDS)]
    batch = build_batch(keys, values, [first_ts + i for i in range(RECORDS)])
    assert len(batch) >= OVERLAP_MIN_BYTES
    return batch


def with_corrupt_byte(batch: bytes) -> bytes:
    damaged = bytearray(batch)
    damaged[len(damaged) // 2] ^= 0xFF
    return bytes(damaged)


def with_header_max_ts(batch: bytes, max_ts: int) -> bytes:
    """The batch with a wrong max timestamp in its header and a CRC that matches it (a sloppy producer)."""
    fields = list(HEADER_STRUCT.unpack_from(batch))
    fields[8] = max_ts
    out = bytearray(HEADER_STRUCT.pack(*fields) + batch[RECORDS_OFFSET:])
    out[CRC_OFFSET : CRC_OFFSET + 4] = crc32c(memoryview(out)[CRC_OFFSET + 4 :]).to_bytes(4, "big")
    return bytes(out)


def log_file_state(directory: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in sorted(directory.iterdir()) if p.suffix == ".log"}


def open_log(directory: Path, config: dict | None = None, **kwargs) -> Log:
    return Log.open(directory, config or {}, clock=MockTime(start_ms=NOW), **kwargs)


@pytest.fixture
def check_threads(monkeypatch) -> list[str]:
    """The names of the threads that ran each append's record checks."""
    names: list[str] = []
    real = log_module.check_plain_batch

    def recording(*args):
        names.append(threading.current_thread().name)
        return real(*args)

    monkeypatch.setattr(log_module, "check_plain_batch", recording)
    return names


def test_a_large_batch_appends_and_reads_back_with_its_offsets(tmp_path: Path, check_threads: list[str]) -> None:
    log = open_log(tmp_path / "t-0")
    first, second = big_batch(seed=1), big_batch(seed=2)
    assert log.append(first).first_offset == 0
    info = log.append(second)
    assert (info.first_offset, info.last_offset, info.max_timestamp) == (RECORDS, 2 * RECORDS - 1, NOW - 1000 + 399)
    records = list(log.records())
    assert [r.offset for r in records] == list(range(2 * RECORDS))
    assert records[RECORDS].value == bytes([2]) * VALUE
    assert check_threads == ["kafkalog-check"] * 2  # checked on the background thread, beside the write
    log.close()
    reopened = open_log(tmp_path / "t-0", had_clean_shutdown=False)  # recovery re-validates every batch
    assert reopened.log_end_offset == 2 * RECORDS
    reopened.close()


@pytest.mark.parametrize(
    ("damage", "error"),
    [
        (with_corrupt_byte, CorruptRecordError),
        (lambda b: big_batch(first_ts=NOW - 10 * 86_400_000), InvalidTimestampError),
    ],
    ids=["bad-crc", "timestamp-too-old"],
)
def test_a_refused_batch_leaves_log_and_file_unchanged(tmp_path: Path, damage, error) -> None:
    config = {"message.timestamp.before.max.ms": 86_400_000}
    log = open_log(tmp_path / "t-0", config)
    log.append(big_batch(seed=1))
    before = (log.log_end_offset, log.size, log_file_state(log.directory))
    with pytest.raises(error):
        log.append(damage(big_batch(seed=2)))
    assert (log.log_end_offset, log.size, log_file_state(log.directory)) == before
    assert log.append(big_batch(seed=3)).first_offset == RECORDS  # the next append lands where the refused one was
    assert [r.value[:1] for r in log.records()][RECORDS::RECORDS] == [bytes([3])]
    log.close()


def test_a_wrong_header_max_timestamp_is_corrected_as_kafka_does(tmp_path: Path) -> None:
    """setMaxTimestamp: the stored header carries the records' true max timestamp, with a CRC over it."""
    log = open_log(tmp_path / "t-0")
    info = log.append(with_header_max_ts(big_batch(), NOW - 5000))
    assert info.max_timestamp == NOW - 1000 + RECORDS - 1
    log.close()
    data = (tmp_path / "t-0" / "00000000000000000000.log").read_bytes()
    fields = HEADER_STRUCT.unpack_from(data)
    assert fields[8] == NOW - 1000 + RECORDS - 1
    assert fields[4] == crc32c(memoryview(data)[CRC_OFFSET + 4 :])


def test_a_crash_between_the_write_and_the_check_leaves_a_tail_recovery_cuts(tmp_path: Path) -> None:
    """What a kill -9 leaves mid-append: the body under a zeroed header. Recovery (ours and Kafka's:
    a batch size below the minimum is a CorruptRecordException) truncates it."""
    directory = tmp_path / "t-0"
    log = open_log(directory)
    log.append(big_batch(seed=1))
    log.close()
    segment = directory / "00000000000000000000.log"
    good_size = segment.stat().st_size
    with open(segment, "ab") as f:
        f.write(bytes(RECORDS_OFFSET) + big_batch(seed=2)[RECORDS_OFFSET:])
    reopened = open_log(directory, had_clean_shutdown=False)
    assert (reopened.log_end_offset, reopened.size) == (RECORDS, good_size)
    assert reopened.append(big_batch(seed=3)).first_offset == RECORDS
    reopened.close()


def test_a_refused_batch_at_a_roll_boundary_rolls_nothing(tmp_path: Path) -> None:
    """Kafka rolls only for a valid batch: the check finishes before any roll."""
    size = len(big_batch())
    log = open_log(tmp_path / "t-0", {"segment.bytes": size + size // 2})
    log.append(big_batch(seed=1))
    with pytest.raises(CorruptRecordError):
        log.append(with_corrupt_byte(big_batch(seed=2)))
    assert len(log_file_state(log.directory)) == 1
    log.append(big_batch(seed=3))
    assert len(log_file_state(log.directory)) == 2
    log.close()


def test_a_busy_checker_makes_the_appender_check_inline(tmp_path: Path, check_threads: list[str]) -> None:
    release = threading.Event()
    blocker = checker.start(release.wait, 30)
    assert blocker is not None, "the background checker should be idle between tests"
    try:
        assert checker.start(int) is None  # busy: the caller must check itself
        log = open_log(tmp_path / "t-0")
        assert log.append(big_batch()).last_offset == RECORDS - 1
        with pytest.raises(CorruptRecordError):
            log.append(with_corrupt_byte(big_batch(seed=2)))
        assert log.log_end_offset == RECORDS
        assert check_threads == [threading.current_thread().name] * 2
        log.close()
    finally:
        release.set()
        blocker.result()


def test_concurrent_appenders_on_separate_logs_all_land(tmp_path: Path) -> None:
    logs = [open_log(tmp_path / f"t-{i}") for i in range(3)]
    errors: list[BaseException] = []

    def appender(log: Log, seed: int) -> None:
        try:
            for n in range(6):
                log.append(big_batch(seed=seed * 10 + n))
        except BaseException as e:  # surfaced below
            errors.append(e)

    threads = [threading.Thread(target=appender, args=(log, i)) for i, log in enumerate(logs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    for i, log in enumerate(logs):
        values = [r.value[:1] for r in log.records()][::RECORDS]
        assert values == [bytes([(i * 10 + n) % 251]) for n in range(6)]
        log.close()


def test_an_io_error_on_the_header_write_cuts_the_batch_off(tmp_path: Path) -> None:
    """The body's write succeeds and the header's fails: KafkaStorageError, and no byte of the batch stays."""
    log = open_log(tmp_path / "t-0")
    log.append(big_batch(seed=1))
    size = log.size
    with injected(FaultInjectingFileIO("write", "EIO", nth=2, suffix=".log")) as io, pytest.raises(KafkaStorageError):
        log.append(big_batch(seed=2))
    assert (io.calls, io.injected) == (2, 1)  # the body's write passed; the header's failed
    assert log.log_end_offset == RECORDS
    assert (tmp_path / "t-0" / "00000000000000000000.log").stat().st_size == size


def test_the_checker_returns_results_and_raises_errors() -> None:
    own = BackgroundChecker()
    assert own.start(sum, [1, 2, 3]).result() == 6
    failing = own.start(int, "not a number")
    with pytest.raises(ValueError):
        failing.result()
    assert own.start(len, b"abc").result() == 3  # a failure leaves the thread serving


def test_a_checker_whose_thread_is_gone_starts_another() -> None:
    """A thread that died between checks (it cannot in normal running) is replaced, not waited on forever."""
    own = BackgroundChecker()
    assert own.start(int, "1").result() == 1
    first = own._thread
    own._thread = threading.Thread()  # never started: not alive, as a thread that has died
    assert own.start(int, "2").result() == 2
    assert own._thread is not first and own._thread.is_alive()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_the_checker_serves_a_forked_child() -> None:
    """A fork copies no threads: the child starts its own checker thread on first use."""
    assert checker.start(int, "7").result() == 7  # the thread exists in the parent
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        ok = False
        try:
            check = checker.start(int, "41")
            ok = check is not None and check.result() == 41
        finally:
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
