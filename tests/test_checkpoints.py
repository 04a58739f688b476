"""Checkpoint text files: Kafka's format byte for byte, reading rules, atomic writes, real broker files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import fixture_path
from kafkalog.storage import checkpoints
from kafkalog.storage.checkpoints import (
    CheckpointError,
    CheckpointFile,
    EpochEntry,
    LeaderEpochCheckpointFile,
    OffsetCheckpointFile,
)

ROOT_CHECKPOINTS = (
    "recovery-point-offset-checkpoint",
    "log-start-offset-checkpoint",
    "replication-offset-checkpoint",
    "cleaner-offset-checkpoint",
)


def test_missing_file_is_created_empty_and_reads_empty(tmp_path: Path) -> None:
    path = tmp_path / "recovery-point-offset-checkpoint"
    ckpt = OffsetCheckpointFile(path)
    assert path.exists() and path.read_bytes() == b""
    assert ckpt.read() == {}


def test_existing_file_is_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "cp"
    path.write_bytes(b"0\n1\nt 0 5\n")
    OffsetCheckpointFile(path)
    assert path.read_bytes() == b"0\n1\nt 0 5\n"


def test_creating_in_a_missing_directory_fails(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="Cannot create"):
        OffsetCheckpointFile(tmp_path / "absent" / "cp")


def test_offset_checkpoint_exact_bytes(tmp_path: Path) -> None:
    ckpt = OffsetCheckpointFile(tmp_path / "cp")
    ckpt.write({("__consumer_offsets", 28): 2, ("myTopic", 0): 38, ("t", 7): 2**63 - 1})
    expected = b"0\n3\n__consumer_offsets 28 2\nmyTopic 0 38\nt 7 9223372036854775807\n"
    assert (tmp_path / "cp").read_bytes() == expected


def test_offset_checkpoint_empty_map_bytes(tmp_path: Path) -> None:
    ckpt = OffsetCheckpointFile(tmp_path / "cp")
    ckpt.write({})
    assert (tmp_path / "cp").read_bytes() == b"0\n0\n"
    assert ckpt.read() == {}


def test_offset_checkpoint_round_trip(tmp_path: Path) -> None:
    offsets = {(f"topic-{i % 3}", i): i * 1000 for i in range(50)}
    ckpt = OffsetCheckpointFile(tmp_path / "cp")
    ckpt.write(offsets)
    assert ckpt.read() == offsets
    assert OffsetCheckpointFile(tmp_path / "cp").read() == offsets


def test_rewrite_replaces_content(tmp_path: Path) -> None:
    ckpt = OffsetCheckpointFile(tmp_path / "cp")
    ckpt.write({("a", 0): 1, ("b", 1): 2})
    ckpt.write({("c", 2): 3})
    assert ckpt.read() == {("c", 2): 3}
    assert not (tmp_path / "cp.tmp").exists()


def test_leader_epoch_exact_bytes_and_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    ckpt = LeaderEpochCheckpointFile(path)
    ckpt.write([(0, 0), (3, 120), (7, 2722402)])
    assert path.read_bytes() == b"0\n3\n0 0\n3 120\n7 2722402\n"
    entries = ckpt.read()
    assert entries == [(0, 0), (3, 120), (7, 2722402)]
    assert entries[1] == EpochEntry(epoch=3, start_offset=120)
    assert entries[1].start_offset == 120


def test_no_sync_write_still_correct(tmp_path: Path) -> None:
    ckpt = LeaderEpochCheckpointFile(tmp_path / "lec")
    ckpt.write([(1, 5)], sync=False)
    assert ckpt.read() == [(1, 5)]


@pytest.mark.parametrize(
    "content, expected",
    [
        (b"", {}),
        (b"0\n", {}),  # a missing count line reads as empty
        (b"0", {}),
        (b"0\n0\n", {}),
        (b"0\n1\nt 0 5", {("t", 0): 5}),  # no final newline
        (b"0\r\n1\r\nt 0 5\r\n", {("t", 0): 5}),  # CRLF, as BufferedReader.readLine accepts
        (b"0\n1\nt\t0   5\n", {("t", 0): 5}),  # runs of whitespace separate the tokens
        (b"0\n1\nt 0 5 \n", {("t", 0): 5}),  # a trailing separator yields no token (Java's split)
        (b"0\n2\nt 0 5\nt 0 9\n", {("t", 0): 9}),  # a duplicate partition keeps its last offset
        (b"+0\n1\nt 0 -1\n", {("t", 0): -1}),  # Integer.parseInt accepts a sign
        ("0\n1\ntöpic 0 5\n".encode(), {("töpic", 0): 5}),  # UTF-8
    ],
)
def test_offset_reading_rules(tmp_path: Path, content: bytes, expected: dict) -> None:
    (tmp_path / "cp").write_bytes(content)
    assert OffsetCheckpointFile(tmp_path / "cp").read() == expected


@pytest.mark.parametrize(
    "content, message",
    [
        (b"1\n0\n", r"Unrecognised version:1, expected version: 0"),
        (b"x\n0\n", r"Malformed line in checkpoint file: x \(line 1\)"),
        (b" 0\n0\n", r"Malformed line.* 0 \(line 1\)"),  # parseInt does not trim
        (b"0\nabc\n", r"Malformed line in checkpoint file: abc \(line 2\)"),
        (b"0\n99999999999\n", r"Malformed line.*\(line 2\)"),  # beyond Int32
        (b"0\n-1\n", r"negative entry count"),
        (b"0\n1\nt 0\n", r"Malformed line in checkpoint file: t 0 \(line 3\)"),
        (b"0\n1\nt 0 5 6\n", r"Malformed line.*\(line 3\)"),
        (b"0\n1\n t 0 5\n", r"Malformed line.*\(line 3\)"),  # a leading separator yields an empty first token
        (b"0\n1\nt x 5\n", r"Malformed line.*\(line 3\)"),
        (b"0\n1\nt 0 5x\n", r"Malformed line.*\(line 3\)"),
        (b"0\n1\nt 2147483648 5\n", r"Malformed line.*\(line 3\)"),  # partition beyond Int32
        (b"0\n1\nt 0 9223372036854775808\n", r"Malformed line.*\(line 3\)"),  # offset beyond Int64
        (b"0\n2\nt 0 5\n\n", r"Malformed line.*\(line 4\)"),  # an empty entry line
        (b"0\n2\nt 0 5\n", r"Expected \[2\] entries in checkpoint file, but found only \[1\]"),
        (b"0\n1\nt 0 5\nt 1 6\n", r"Expected \[1\] entries in checkpoint file, but found only \[2\]"),
        (b"0\n1\nt\xff 0 5\n", r"Error while reading"),  # not UTF-8
    ],
)
def test_offset_malformed(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "cp"
    path.write_bytes(content)
    with pytest.raises(CheckpointError, match=message) as info:
        OffsetCheckpointFile(path).read()
    assert str(path) in str(info.value)
    assert info.value.path == str(path.absolute())


@pytest.mark.parametrize(
    "content",
    [b"0\n1\n0\n", b"0\n1\n0 1 2\n", b"0\n1\nx 1\n", b"0\n1\n2147483648 0\n", b"1\n1\n0 0\n", b"0\n2\n0 0\n"],
)
def test_leader_epoch_malformed(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "lec").write_bytes(content)
    with pytest.raises(CheckpointError):
        LeaderEpochCheckpointFile(tmp_path / "lec").read()


def test_generic_checkpoint_with_custom_formatter(tmp_path: Path) -> None:
    class Words:
        def to_line(self, entry: str) -> str:
            return entry.upper()

        def from_line(self, line: str) -> str | None:
            return line.lower() if line.isalpha() else None

    ckpt = CheckpointFile(tmp_path / "w", 3, Words())
    ckpt.write(["ab", "cd"])
    assert (tmp_path / "w").read_bytes() == b"3\n2\nAB\nCD\n"
    assert ckpt.read() == ["ab", "cd"]


def test_write_leaves_no_tmp_and_fsyncs_file_and_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(checkpoints.os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd)))
    ckpt = OffsetCheckpointFile(tmp_path / "cp")
    ckpt.write({("t", 0): 1})
    assert len(synced) == 2  # the tmp file, then the parent directory
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cp"]


def test_failed_fsync_keeps_old_content(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ckpt = OffsetCheckpointFile(tmp_path / "cp")
    ckpt.write({("t", 0): 1})

    def broken_fsync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(checkpoints.os, "fsync", broken_fsync)
    with pytest.raises(CheckpointError, match="Error while writing"):
        ckpt.write({("t", 0): 2, ("u", 1): 3})
    assert (tmp_path / "cp").read_bytes() == b"0\n1\nt 0 1\n"
    assert not (tmp_path / "cp.tmp").exists()


def test_failed_rename_keeps_old_content(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ckpt = LeaderEpochCheckpointFile(tmp_path / "lec")
    ckpt.write([(0, 0)])

    def broken_replace(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(checkpoints.os, "replace", broken_replace)
    with pytest.raises(CheckpointError):
        ckpt.write([(0, 0), (1, 10)])
    assert ckpt.read() == [(0, 0)]
    assert not (tmp_path / "lec.tmp").exists()


def test_half_written_tmp_never_replaces_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A crash in the middle of writing the tmp file leaves the real file whole."""
    ckpt = OffsetCheckpointFile(tmp_path / "cp")
    ckpt.write({("t", 0): 1})
    real_write_tmp = CheckpointFile._write_tmp

    def crash_midway(self: CheckpointFile, data: bytes, sync: bool) -> None:
        real_write_tmp(self, data[: len(data) // 2], sync)
        raise OSError(5, "crash")

    monkeypatch.setattr(CheckpointFile, "_write_tmp", crash_midway)
    with pytest.raises(CheckpointError):
        ckpt.write({(f"t{i}", i): i for i in range(20)})
    assert ckpt.read() == {("t", 0): 1}


def test_stale_tmp_from_a_crash_is_overwritten(tmp_path: Path) -> None:
    (tmp_path / "cp.tmp").write_bytes(b"garbage")
    ckpt = OffsetCheckpointFile(tmp_path / "cp")
    ckpt.write({("t", 0): 4})
    assert ckpt.read() == {("t", 0): 4}
    assert not (tmp_path / "cp.tmp").exists()


# ---------------------------------------------------------------------------------------------------------------
# Real checkpoint files written by Kafka brokers, read in place
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ROOT_CHECKPOINTS)
def test_bheem_root_checkpoints(name: str) -> None:
    path = fixture_path("broker-logs", "bheem6005-kafka", "kafka-logs", name)
    before = path.read_bytes()
    offsets = OffsetCheckpointFile(path).read()
    assert path.read_bytes() == before  # reading never touches the file
    if name == "cleaner-offset-checkpoint":
        assert before == b"" and offsets == {}  # a 0-byte file reads as empty
    elif name == "log-start-offset-checkpoint":
        assert offsets == {}
    else:
        assert len(offsets) == 51
        assert {tp[0] for tp in offsets} == {"__consumer_offsets", "cities"}
    if name == "replication-offset-checkpoint":
        assert offsets[("__consumer_offsets", 0)] == 2


def test_donaldy_cleaner_offset_checkpoint() -> None:
    path = fixture_path("broker-logs", "donaldy-kafka271", "kafka-logs", "cleaner-offset-checkpoint")
    assert OffsetCheckpointFile(path).read() == {
        ("__consumer_offsets", 28): 2,
        ("__consumer_offsets", 17): 1,
        ("__consumer_offsets", 39): 18,
    }


def test_rewriting_a_real_checkpoint_reproduces_its_bytes(tmp_path: Path) -> None:
    """Entry order follows the mapping, so Kafka's own file comes back byte for byte."""
    for broker in ("donaldy-kafka271", "yangxuhao-kafka270", "mscaldas-cp512-lz4"):
        root = "kafka-data" if broker.startswith("mscaldas") else "kafka-logs"
        source = fixture_path("broker-logs", broker, root, "replication-offset-checkpoint")
        offsets = OffsetCheckpointFile(source).read()
        copy = OffsetCheckpointFile(tmp_path / broker)
        copy.write(offsets)
        assert (tmp_path / broker).read_bytes() == source.read_bytes()


def test_every_real_checkpoint_file_reads() -> None:
    root = fixture_path("broker-logs")
    offset_files = [p for name in ROOT_CHECKPOINTS for p in root.glob(f"*/*/{name}")]
    epoch_files = list(root.glob("*/*/*/leader-epoch-checkpoint"))
    assert len(offset_files) == 28 and len(epoch_files) >= 20
    for path in offset_files:
        offsets = OffsetCheckpointFile(path).read()
        assert all(isinstance(t, str) and p >= 0 and o >= 0 for (t, p), o in offsets.items())
    for path in epoch_files:
        entries = LeaderEpochCheckpointFile(path).read()
        assert entries and all(e.epoch >= 0 and e.start_offset >= 0 for e in entries)


@pytest.mark.parametrize(
    "broker, partition, expected",
    [
        ("donaldy-kafka271", "myTopic-0", [(0, 38)]),
        ("donaldy-kafka271", "test_topic-0", [(0, 12)]),
        ("yuanliubei-kafka-src", "topic1-0", [(0, 2722402)]),
        ("bheem6005-kafka", "cities-0", [(0, 0)]),
    ],
)
def test_real_leader_epoch_checkpoints(broker: str, partition: str, expected: list) -> None:
    path = fixture_path("broker-logs", broker, "kafka-logs", partition, "leader-epoch-checkpoint")
    assert LeaderEpochCheckpointFile(path).read() == expected
