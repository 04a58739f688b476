"""Large client batches (hundreds of KiB, as a throughput-tuned producer sends) on the log's fast append path.

A refused batch leaves the log and its files as they were, a failed write leaves no byte behind, and a crash
in the middle of a write leaves a tail that recovery cuts off.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from kafkalog.errors import CorruptRecordError, InvalidTimestampError, KafkaStorageError
from kafkalog.record import build_batch
from kafkalog.record.batch import CRC_OFFSET, HEADER_STRUCT, RECORDS_OFFSET
from kafkalog.record.checksums import crc32c
from kafkalog.storage import Log
from kafkalog.storage.fileio import FaultInjectingFileIO, injected
from kafkalog.testing import MockTime

NOW = 1_700_000_000_000
RECORDS = 400
VALUE = 1000  # 400 records of ~1 KB: a 400 KB batch


def big_batch(first_ts: int = NOW - 1000, seed: int = 0) -> bytes:
    keys = [f"k{seed}-{i}".encode() for i in range(RECORDS)]
    values = [bytes([(seed + i) % 251]) * VALUE for i in range(RECORDS)]
    batch = build_batch(keys, values, [first_ts + i for i in range(RECORDS)])
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


def test_a_large_batch_appends_and_reads_back_with_its_offsets(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    first, second = big_batch(seed=1), big_batch(seed=2)
    assert log.append(first).first_offset == 0
    info = log.append(second)
    assert (info.first_offset, info.last_offset, info.max_timestamp) == (RECORDS, 2 * RECORDS - 1, NOW - 1000 + 399)
    records = list(log.records())
    assert [r.offset for r in records] == list(range(2 * RECORDS))
    assert records[RECORDS].value == bytes([2]) * VALUE
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


def test_a_crash_in_the_middle_of_a_write_leaves_a_tail_recovery_cuts(tmp_path: Path) -> None:
    """What a kill -9 can leave mid-append (pages written out of order): a batch body under a zeroed header.
    Recovery (ours and Kafka's: a batch size below the minimum is a CorruptRecordException) truncates it."""
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
    """Kafka rolls only for a valid batch: the checks come before any roll."""
    size = len(big_batch())
    log = open_log(tmp_path / "t-0", {"segment.bytes": size + size // 2})
    log.append(big_batch(seed=1))
    with pytest.raises(CorruptRecordError):
        log.append(with_corrupt_byte(big_batch(seed=2)))
    assert len(log_file_state(log.directory)) == 1
    log.append(big_batch(seed=3))
    assert len(log_file_state(log.directory)) == 2
    log.close()


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


def test_an_io_error_on_the_write_cuts_the_batch_off(tmp_path: Path) -> None:
    """The write fails: KafkaStorageError, and no byte of the batch stays in the file."""
    log = open_log(tmp_path / "t-0")
    log.append(big_batch(seed=1))
    size = log.size
    with injected(FaultInjectingFileIO("write", "EIO", nth=1, suffix=".log")) as io, pytest.raises(KafkaStorageError):
        log.append(big_batch(seed=2))
    assert (io.calls, io.injected) == (1, 1)
    assert log.log_end_offset == RECORDS
    assert (tmp_path / "t-0" / "00000000000000000000.log").stat().st_size == size
