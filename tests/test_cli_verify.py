"""``kafkalog verify`` and ``kafkalog recover`` through click's CliRunner.

Pristine fixtures (read in place) must give no problem; a corpus of damaged copies in tmp_path must each be
reported with the damaged file's name (and byte position where it applies) and exit status 1.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import fixture_path
from kafkalog.cli import main
from kafkalog.record import iter_file_batches

BROKER_LOG_DIRS = [
    ("bheem6005-kafka", "kafka-logs"),
    ("donaldy-kafka271", "kafka-logs"),
    ("mscaldas-cp512-lz4", "kafka-data"),
    ("william0423-kafka", "kafka-logs"),
    ("yangxuhao-kafka270", "kafka-logs"),
    ("yuanliubei-kafka-src", "kafka-logs"),
]
KAFKA_WRITTEN = [
    "base-offset-1000000",
    "codec-gzip",
    "codec-lz4",
    "codec-none",
    "codec-snappy",
    "codec-zstd",
    "idempotent",
    "interval-150",
    "log-append-time",
    "mixed-codecs",
    "transactional-commit",
]
SEG = "00000000000000000000"


def run(*args: str):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def problems(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("PROBLEM")]


def notes(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("note")]


def digest(directory: Path) -> dict[str, str]:
    return {
        str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def batch_positions(log: Path) -> list[tuple[int, int]]:
    """(position, size) of every batch, read independently of the code under test's scanner."""
    return [(b.position, b.size_in_bytes) for b in iter_file_batches(log)]


def flip(path: Path, position: int, mask: int = 0x01) -> None:
    data = bytearray(path.read_bytes())
    data[position] ^= mask
    path.chmod(0o644)
    path.write_bytes(bytes(data))


def copy_partition(source: Path, target: Path) -> Path:
    """Copy the segment files of a fixture (not the expected-*.txt gold files) into a partition-named dir."""
    target.mkdir(parents=True)
    for path in source.iterdir():
        if not path.name.startswith("expected-"):
            shutil.copyfile(path, target / path.name)
    return target


def write_checkpoint(path: Path, entries: list[tuple[str, int, int]]) -> None:
    path.write_text("".join(f"{line}\n" for line in ["0", str(len(entries)), *(f"{t} {p} {o}" for t, p, o in entries)]))


# ------------------------------------------------------------------------------------------------ pristine fixtures


@pytest.mark.parametrize(("folder", "sub"), BROKER_LOG_DIRS, ids=[f for f, _ in BROKER_LOG_DIRS])
def test_verify_pristine_broker_log_dirs(folder: str, sub: str) -> None:
    log_dir = fixture_path("broker-logs", folder, sub)
    # mscaldas is a partial copy of its broker's log dir: its checkpoints name _confluent-monitoring-0 (at offset 14)
    # whose directory was not published with the fixture. In a real log dir that is data loss, hence a problem by
    # default; --partial says "this is a partial copy" and turns it into a note.
    args = ["verify", log_dir] + (["--partial"] if folder == "mscaldas-cp512-lz4" else [])
    result = run(*args)
    assert result.exit_code == 0, result.output
    assert problems(result.output) == []
    assert "clean: 0 problem(s)" in result.output
    if folder == "mscaldas-cp512-lz4":
        strict = run("verify", log_dir)
        assert strict.exit_code == 1
        assert problems(strict.output) == [
            line for line in problems(strict.output) if "_confluent-monitoring-0" in line
        ]
        assert len(problems(strict.output)) == 1


def test_verify_notes_the_real_oddities_of_the_fixtures() -> None:
    # donaldy's __consumer_offsets-39 was compacted: its first segment holds offsets 0..4 then 16, 17. A gap is
    # legitimate after compaction (the cleaner drops superseded keys), so it is a note, never a problem.
    donaldy = run("verify", fixture_path("broker-logs", "donaldy-kafka271", "kafka-logs"))
    assert donaldy.exit_code == 0
    assert any("__consumer_offsets-39" in n and "offsets 5..15 are absent" in n for n in notes(donaldy.output))
    # william's __consumer_offsets-28 time index has 258 entries for 254 offset entries. Appends write at most one
    # time entry per offset entry and a close writes one final entry, so 3 are extra: Kafka wrote a final entry (at
    # offsets 141, 1692, 1714) each time the broker shut down cleanly and then appended again after the restart (its
    # snapshots 142, 1693, 1715 mark the restarts). Valid, so a note; a rebuild from the log would not reproduce them.
    william = run("verify", fixture_path("broker-logs", "william0423-kafka", "kafka-logs"))
    assert william.exit_code == 0
    assert any("__consumer_offsets-28" in n and "3 more entries than appends write" in n for n in notes(william.output))
    # Partitions named in the checkpoints at offset 0 with no directory (the copies kept only some partitions): an
    # empty partition loses nothing, so one summary note.
    assert any("have no directory, all at offset 0" in n for n in notes(william.output))


@pytest.mark.parametrize("name", KAFKA_WRITTEN)
def test_verify_pristine_kafka_written_segments(name: str, tmp_path: Path) -> None:
    source = fixture_path("kafka-written", name)
    # The fixture files are read in place, through symlinks in a directory named like a partition.
    partition = tmp_path / f"{name}-0"
    partition.mkdir()
    for path in source.iterdir():
        if not path.name.startswith("expected-"):
            (partition / path.name).symlink_to(path)
    interval = ["--index-interval-bytes", "150"] if name == "interval-150" else []
    result = run("verify", partition, *interval)
    assert result.exit_code == 0, result.output
    assert problems(result.output) == [] and notes(result.output) == []
    direct = run("verify", source)  # the fixture directory itself, whatever its name
    assert direct.exit_code == 0, direct.output


# ------------------------------------------------------------------------------------------------ the fault corpus


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    """A log dir holding kafka-written codec-none as t-0 and interval-150 as d-0, with consistent checkpoints."""
    root = tmp_path / "logs"
    copy_partition(fixture_path("kafka-written", "codec-none"), root / "t-0")
    copy_partition(fixture_path("kafka-written", "interval-150"), root / "d-0")
    write_checkpoint(root / "recovery-point-offset-checkpoint", [("t", 0, 1000), ("d", 0, 200)])
    write_checkpoint(root / "replication-offset-checkpoint", [("t", 0, 1000), ("d", 0, 200)])
    write_checkpoint(root / "log-start-offset-checkpoint", [])
    result = run("verify", root, "--index-interval-bytes", "150")
    assert result.exit_code == 0, result.output
    assert problems(result.output) == []
    return root


def assert_reported(root: Path, needle: str, where: str) -> str:
    result = run("verify", root)
    assert result.exit_code == 1, result.output
    found = [p for p in problems(result.output) if where in p and needle in p]
    assert found, f"no problem with {where!r} and {needle!r} in:\n{result.output}"
    return result.output


def test_fault_bit_flip_in_a_record(log_dir: Path) -> None:
    log = log_dir / "t-0" / f"{SEG}.log"
    position, size = batch_positions(log)[10]
    flip(log, position + size - 5)  # inside the last record's value
    assert_reported(log_dir, "Record is corrupt", f"t-0/{SEG}.log @ byte {position}:")


def test_fault_bit_flip_in_the_crc_field(log_dir: Path) -> None:
    log = log_dir / "t-0" / f"{SEG}.log"
    position, _ = batch_positions(log)[42]
    flip(log, position + 17, 0x80)  # the first byte of the CRC
    assert_reported(log_dir, "stored crc", f"t-0/{SEG}.log @ byte {position}:")


@pytest.mark.parametrize("mask", [0x01, 0x40])
def test_fault_bit_flip_in_the_length_field(log_dir: Path, mask: int) -> None:
    log = log_dir / "t-0" / f"{SEG}.log"
    position, _ = batch_positions(log)[7]
    flip(log, position + 11, mask)  # the low byte of the batch length
    assert_reported(log_dir, "", f"t-0/{SEG}.log @ byte {position}:")


def test_fault_bit_flip_in_an_offset_index_entry(log_dir: Path) -> None:
    index = log_dir / "t-0" / f"{SEG}.index"
    flip(index, 3 * 8 + 7)  # entry 3's position, low byte
    assert_reported(log_dir, "entry 3", f"t-0/{SEG}.index @ byte 24:")


def test_fault_bit_flip_in_an_offset_index_offset(log_dir: Path) -> None:
    index = log_dir / "d-0" / f"{SEG}.index"
    # Entry 5 is (8, 1688). Offset 8 -> 10 is caught: no batch of the append starting at 1688 ends at offset 10
    # before the next entry's append. (8 -> 9 would not be: (9, 1688) is what a two-batch append, as a follower
    # writes, leaves, and lookups through it stay correct.)
    flip(index, 5 * 8 + 3, 0x02)
    assert_reported(log_dir, "entries 5 and 6", f"d-0/{SEG}.index @ byte 40:")


def test_fault_bit_flip_in_a_time_index_entry(log_dir: Path) -> None:
    index = log_dir / "d-0" / f"{SEG}.timeindex"
    flip(index, 4 * 12 + 2, 0x10)  # entry 4's timestamp, far into the future
    assert_reported(log_dir, "entries 4 and 5", f"d-0/{SEG}.timeindex @ byte 48:")


def test_fault_truncated_log(log_dir: Path) -> None:
    log = log_dir / "t-0" / f"{SEG}.log"
    last_position, _ = batch_positions(log)[-1]
    os.truncate(log, log.stat().st_size - 100)
    output = assert_reported(log_dir, "trailing bytes do not form a batch", f"t-0/{SEG}.log @ byte {last_position}:")
    # The checkpoints now name a recovery point beyond the shortened log as well.
    assert any(
        "recovery-point-offset-checkpoint" in p and "beyond the log end offset 990" in p for p in problems(output)
    )


def test_fault_zero_filled_tail(log_dir: Path) -> None:
    log = log_dir / "t-0" / f"{SEG}.log"
    size = log.stat().st_size
    with open(log, "ab") as f:
        f.write(b"\0" * 4096)
    assert_reported(log_dir, "4096 bytes from here do not form a batch", f"t-0/{SEG}.log @ byte {size}:")


def test_fault_recovery_point_beyond_the_log_end(log_dir: Path) -> None:
    write_checkpoint(log_dir / "recovery-point-offset-checkpoint", [("t", 0, 5000), ("d", 0, 200)])
    assert_reported(
        log_dir, "recovery point 5000 is beyond the log end offset 1000", "recovery-point-offset-checkpoint"
    )
    # The same check when verifying just the partition directory (its parent's checkpoints are read).
    result = run("verify", log_dir / "t-0")
    assert result.exit_code == 1 and "recovery point 5000" in result.output


def test_fault_log_start_offset_beyond_the_end(log_dir: Path) -> None:
    write_checkpoint(log_dir / "log-start-offset-checkpoint", [("d", 0, 2000)])
    assert_reported(log_dir, "log start offset 2000 is outside", "log-start-offset-checkpoint @ line 3")


def test_fault_broken_checkpoint_and_missing_partition(log_dir: Path) -> None:
    (log_dir / "replication-offset-checkpoint").write_text("0\n2\nt 0 1000\n")
    assert_reported(log_dir, "unreadable checkpoint", "replication-offset-checkpoint")
    write_checkpoint(log_dir / "replication-offset-checkpoint", [("t", 0, 1000), ("d", 0, 200), ("gone", 3, 17)])
    assert_reported(log_dir, "gone-3 has no directory", "replication-offset-checkpoint @ line 5")


def test_fault_missing_index_file(log_dir: Path) -> None:
    (log_dir / "t-0" / f"{SEG}.index").unlink()
    assert_reported(log_dir, "missing", f"t-0/{SEG}.index")
    (log_dir / "d-0" / f"{SEG}.timeindex").unlink()
    assert_reported(log_dir, "missing", f"d-0/{SEG}.timeindex")


def test_fault_corrupt_producer_snapshot(tmp_path: Path) -> None:
    partition = copy_partition(fixture_path("kafka-written", "idempotent"), tmp_path / "p-0")
    snapshot = partition / "00000000000000000480.snapshot"
    flip(snapshot, 20)
    result = run("verify", partition)
    assert result.exit_code == 1
    assert any("00000000000000000480.snapshot" in p and "snapshot" in p for p in problems(result.output))


def test_fault_overlapping_offsets(tmp_path: Path) -> None:
    partition = copy_partition(fixture_path("kafka-written", "codec-none"), tmp_path / "p-0")
    log = partition / f"{SEG}.log"
    position, _ = batch_positions(log)[20]
    flip(log, position + 7, 0x08)  # base offset 200 -> 192: the batch overlaps the previous one (not CRC-covered)
    result = run("verify", partition)
    assert result.exit_code == 1
    assert any(f"{SEG}.log @ byte {position}" in p and "offsets go backwards" in p for p in problems(result.output))


# ------------------------------------------------------------------------------------------------ recover


def test_recover_dry_run_then_recover(tmp_path: Path) -> None:
    partition = copy_partition(fixture_path("kafka-written", "codec-none"), tmp_path / "t-0")
    log = partition / f"{SEG}.log"
    positions = batch_positions(log)
    cut_at = positions[60][0]
    flip(log, cut_at + 17)  # batch 60's CRC: recovery keeps the 60 batches before it
    size = log.stat().st_size
    before = digest(partition)
    dry = run("recover", partition, "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert digest(partition) == before  # byte-identical: nothing was touched
    assert f"truncate {SEG}.log from {size} to {cut_at} bytes ({size - cut_at} bytes cut" in dry.output
    assert f"rebuild {SEG}.index" in dry.output
    assert run("verify", partition).exit_code == 1
    real = run("recover", partition)
    assert real.exit_code == 0, real.output
    assert "Before:" in real.output and "After:" in real.output
    assert log.stat().st_size == cut_at
    after = run("verify", partition)
    assert after.exit_code == 0, after.output


def test_recover_zero_tail_and_later_segments(tmp_path: Path) -> None:
    # donaldy's __consumer_offsets-39 has two segments (0 and 18); a zero-filled tail in the first makes Kafka's
    # recovery cut it and delete every later segment.
    source = fixture_path("broker-logs", "donaldy-kafka271", "kafka-logs", "__consumer_offsets-39")
    partition = copy_partition(source, tmp_path / "__consumer_offsets-39")
    log = partition / f"{SEG}.log"
    size = log.stat().st_size
    with open(log, "ab") as f:
        f.write(b"\0" * 1000)
    before = digest(partition)
    dry = run("recover", partition, "--dry-run")
    assert digest(partition) == before
    assert f"truncate {SEG}.log from {size + 1000} to {size} bytes (1000 bytes cut" in dry.output
    assert "delete segment 00000000000000000018.log" in dry.output
    real = run("recover", partition)
    assert real.exit_code == 0, real.output
    assert log.stat().st_size == size
    assert not (partition / "00000000000000000018.log").exists()
    assert run("verify", partition).exit_code == 0


def test_recover_dry_run_on_a_clean_partition_changes_nothing(tmp_path: Path) -> None:
    partition = copy_partition(fixture_path("kafka-written", "interval-150"), tmp_path / "d-0")
    before = digest(partition)
    dry = run("recover", partition, "--dry-run", "--index-interval-bytes", "150")
    assert dry.exit_code == 0
    assert "recovery would change nothing" in dry.output
    assert digest(partition) == before


def test_recover_reports_what_it_did_and_the_dry_run_planned_the_same(tmp_path: Path) -> None:
    # The plan comes from storage's own LogSegment.recover on a read-only log (indexes in memory); the report of the
    # writing form comes from the directory before and after. Both must name the same cut and the same deletion.
    source = fixture_path("broker-logs", "donaldy-kafka271", "kafka-logs", "__consumer_offsets-39")
    partition = copy_partition(source, tmp_path / "__consumer_offsets-39")
    log = partition / f"{SEG}.log"
    size = log.stat().st_size
    with open(log, "ab") as f:
        f.write(b"\0" * 700)
    dry = run("recover", partition, "--dry-run")
    assert f"truncate {SEG}.log from {size + 700} to {size} bytes (700 bytes cut" in dry.output
    assert "delete segment 00000000000000000018.log" in dry.output
    real = run("recover", partition)
    assert real.exit_code == 0, real.output
    assert f"truncated {SEG}.log from {size + 700} to {size} bytes (700 bytes cut)" in real.output
    assert "deleted 00000000000000000018.log (148 bytes)" in real.output


def test_planned_index_bytes_are_what_recovery_writes(tmp_path: Path) -> None:
    from kafkalog.inspect.recovery import dry_recover_segment
    from kafkalog.storage.config import LogConfig
    from kafkalog.storage.log import Log

    partition = copy_partition(fixture_path("kafka-written", "interval-150"), tmp_path / "d-0")
    for name in (f"{SEG}.index", f"{SEG}.timeindex"):
        (partition / name).unlink()
    planned = dry_recover_segment(partition / f"{SEG}.log", 0, 150)
    assert not (partition / f"{SEG}.index").exists()  # the plan wrote nothing
    config = LogConfig({"index.interval.bytes": 150})
    Log.open(partition, config, had_clean_shutdown=False, recovery_point=0, log_start_offset=0).close()
    assert planned.offset_entries > 0
    assert (partition / f"{SEG}.index").read_bytes() == planned.offset_index
    assert (partition / f"{SEG}.timeindex").read_bytes() == planned.time_index
