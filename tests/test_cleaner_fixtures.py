"""Compaction of real broker log directories (fixtures/broker-logs, see PROVENANCE.md).

Each test copies a fixture log dir into tmp_path and opens the copy with a LogManager (the fixtures themselves are
never written). ``donaldy-kafka271`` and ``yuanliubei-kafka-src`` hold compacted ``__consumer_offsets`` partitions
and the brokers' ``cleaner-offset-checkpoint`` files; ``mscaldas-cp512-lz4`` holds LZ4 changelog topics and
Connect/schema-registry topics. The topics are switched to cleanup.policy=compact with a low dirty ratio, every
partition with data is rolled so its records are no longer in the active segment, and one cleaner pass runs.

What must hold is computed from the original files with kafka-python (an independent decoder): the latest value of
every key is unchanged, every surviving record is an original record at its original offset, the brokers'
checkpoints are the first dirty offsets, and kafka-python reads every cleaned file with valid CRCs.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conftest import fixture_path
from kafkalog.layout import parse_partition_dir
from kafkalog.manager import LogManager, TopicPartition
from kafkalog.record import iter_batches
from kafkalog.testing import MockTime
from oracles import KAFKA_PYTHON, oracle_read_all

FIXTURES = {
    "donaldy-kafka271": "kafka-logs",
    "yuanliubei-kafka-src": "kafka-logs",
    "mscaldas-cp512-lz4": "kafka-data",
}
COMPACT_NOW = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01"}


def source_dir(name: str) -> Path:
    return fixture_path("broker-logs", name, FIXTURES[name])


def copy_fixture(name: str, tmp_path: Path) -> Path:
    target = tmp_path / FIXTURES[name]
    shutil.copytree(source_dir(name), target)
    (target / ".lock").unlink(missing_ok=True)
    return target


def kp_records(partition_dir: Path) -> list[tuple]:
    """(offset, timestamp, key, value) of every data record of a partition dir, in offset order, by kafka-python."""
    out = []
    for path in sorted(partition_dir.glob("*.log")):
        for batch, crc_ok, records in oracle_read_all(KAFKA_PYTHON, path.read_bytes()):
            assert crc_ok, path
            if batch.is_control_batch:
                continue
            out.extend((r.offset, r.timestamp, r.key, r.value) for r in records)
    return out


def fold(records) -> dict[bytes, bytes]:
    """The latest value of every key: what a consumer of a compacted topic must end up with."""
    latest: dict[bytes, bytes] = {}
    for _, _, key, value in records:
        if key is None:
            continue
        if value is None:
            latest.pop(key, None)
        else:
            latest[key] = value
    return latest


def read_checkpoint_by_hand(path: Path) -> dict[tuple[str, int], int]:
    lines = path.read_text().splitlines()
    assert lines[0] == "0" and int(lines[1]) == len(lines) - 2
    return {(t, int(p)): int(o) for t, p, o in (line.split(" ") for line in lines[2:])}


def raw_bytes(batch) -> bytes:
    return bytes(batch.source_buffer[batch.position : batch.position + batch.size_in_bytes])


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file()}


def prepare(manager: LogManager) -> list[TopicPartition]:
    """Compact every topic with data, roll each partition with data; return those partitions."""
    with_data = sorted(
        (tp for tp in manager._logs if manager.get_log(tp.topic, tp.partition).size > 0),
        key=lambda tp: (tp.topic, tp.partition),
    )
    for topic in sorted({tp.topic for tp in with_data}):
        manager.alter_topic_config(topic, COMPACT_NOW)
    for tp in with_data:
        log = manager.get_log(tp.topic, tp.partition)
        assert log.config.compact and log.config.min_cleanable_dirty_ratio == 0.01
        log.roll()
    return with_data


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_fixture_logs_clean_further_and_keep_every_latest_value(name, tmp_path):
    source = source_dir(name)
    untouched = snapshot(source)
    root = copy_fixture(name, tmp_path)
    before = {
        TopicPartition(*parse_partition_dir(d.name)): kp_records(d)
        for d in source.iterdir()
        if d.is_dir() and not d.name.startswith(".")
    }
    clock = MockTime()
    with LogManager(root, {"log.cleaner.enable": "false"}, clock=clock) as manager:
        with_data = prepare(manager)
        assert with_data, "the fixture has partitions with data"
        result = manager.clean_once()
        removed = 0
        outcome = {TopicPartition(r.topic, r.partition): r for r in result.cleaned}
        assert sorted(outcome, key=lambda tp: (tp.topic, tp.partition)) == with_data
        assert all(r.error is None for r in outcome.values()), [r.error for r in outcome.values() if r.error]
        for tp in with_data:
            log = manager.get_log(tp.topic, tp.partition)
            original = before[tp]
            assert outcome[tp].end_offset == log.active_segment.base_offset == log.log_end_offset
            ours = [(r.offset, r.timestamp, r.key, r.value) for r in log.records()]
            removed += len(original) - len(ours)
            assert fold(ours) == fold(original), tp
            # Every surviving record is an original one, at its original offset, unchanged.
            by_offset = {r[0]: r for r in original}
            assert all(by_offset.get(r[0]) == r for r in ours), tp
            # Records without a key were dropped and counted.
            assert outcome[tp].stats.invalid_messages_read == sum(1 for r in original if r[2] is None)
            assert all(r[2] is not None for r in ours)
            # kafka-python reads the cleaned files: valid CRCs, the same records.
            theirs = kp_records(log.directory)
            assert theirs == ours, tp
            for segment in log.segments:
                offsets = [b.base_offset for b in iter_batches(segment.log.path.read_bytes())]
                assert offsets == sorted(set(offsets))
        assert removed > 0, "the clean removed something"
    # Restarted from the copy (a clean shutdown), the cleaned logs read back the same.
    with LogManager(root, {"log.cleaner.enable": "false"}, clock=clock) as manager:
        for tp in with_data:
            ours = [(r.offset, r.timestamp, r.key, r.value) for r in manager.get_log(tp.topic, tp.partition).records()]
            assert fold(ours) == fold(before[tp])
    assert snapshot(source) == untouched, "the fixture itself must never be written"


@pytest.mark.parametrize("name", ["donaldy-kafka271", "yuanliubei-kafka-src"])
def test_fixture_cleaner_checkpoints_are_the_first_dirty_offsets(name, tmp_path):
    source = source_dir(name)
    checkpoints = read_checkpoint_by_hand(source / "cleaner-offset-checkpoint")
    assert checkpoints, "the fixture has cleaner checkpoints"
    root = copy_fixture(name, tmp_path)
    with LogManager(root, {"log.cleaner.enable": "false"}, clock=MockTime()) as manager:
        with_data = prepare(manager)
        result = manager.clean_once()
        outcome = {(r.topic, r.partition): r for r in result.cleaned}
        for (topic, partition), checkpoint in checkpoints.items():
            tp = TopicPartition(topic, partition)
            assert tp in with_data
            log = manager.get_log(topic, partition)
            cleaned = outcome[(topic, partition)]
            assert cleaned.first_dirty_offset == checkpoint
            # The map was built from the checkpoint on: it read exactly the records at or after it.
            original = kp_records(source / f"{topic}-{partition}")
            dirty = [r for r in original if r[0] >= checkpoint]
            assert dirty, "there is something dirty after the checkpoint"
            assert cleaned.stats.map_messages_read == len(dirty)
            assert cleaned.end_offset == log.log_end_offset
        # Partitions without an entry start from their log start offset.
        for tp in with_data:
            if (tp.topic, tp.partition) not in checkpoints:
                log = manager.get_log(tp.topic, tp.partition)
                assert outcome[(tp.topic, tp.partition)].first_dirty_offset == log.log_start_offset
    # The copy's checkpoint file now holds the new ends; the fixture's is untouched.
    after = read_checkpoint_by_hand(root / "cleaner-offset-checkpoint")
    assert after == {(tp.topic, tp.partition): outcome[(tp.topic, tp.partition)].end_offset for tp in with_data}
    assert read_checkpoint_by_hand(source / "cleaner-offset-checkpoint") == checkpoints


def test_lz4_changelogs_stay_lz4_when_rebuilt(tmp_path):
    name = "mscaldas-cp512-lz4"
    source = source_dir(name)
    root = copy_fixture(name, tmp_path)
    with LogManager(root, {"log.cleaner.enable": "false"}, clock=MockTime()) as manager:
        with_data = prepare(manager)
        lz4_partitions = []
        originals = {}
        for tp in with_data:
            log = manager.get_log(tp.topic, tp.partition)
            batches = [b for s in log.segments for b in iter_batches(s.log.path.read_bytes())]
            if any(b.compression == "lz4" for b in batches):
                lz4_partitions.append(tp)
                originals[tp] = {b.base_offset: raw_bytes(b) for b in batches}
        assert lz4_partitions, "PROVENANCE.md: LZ4-compressed v2 batches"
        manager.clean_once()
        rebuilt = 0
        for tp in lz4_partitions:
            log = manager.get_log(tp.topic, tp.partition)
            for segment in log.segments:
                data = segment.log.path.read_bytes()
                for batch in iter_batches(data):
                    assert batch.is_valid()
                    raw = raw_bytes(batch)
                    if batch.record_count > 0:
                        assert batch.compression == "lz4", tp
                    if raw != originals[tp].get(batch.base_offset):
                        rebuilt += 1
                assert all(crc_ok for _, crc_ok, _ in oracle_read_all(KAFKA_PYTHON, data))
            assert fold((r.offset, r.timestamp, r.key, r.value) for r in log.records()) == fold(
                kp_records(source / f"{tp.topic}-{tp.partition}")
            )
        assert rebuilt > 0, "some LZ4 batch lost records and was rebuilt"


def test_altering_a_topic_without_partition_0_on_this_broker(tmp_path):
    root = copy_fixture("yuanliubei-kafka-src", tmp_path)
    with LogManager(root, {"log.cleaner.enable": "false"}, clock=MockTime()) as manager:
        description = manager.alter_topic_config("__consumer_offsets", COMPACT_NOW)
        assert [p.partition for p in description.partitions] == [17]
        assert description.config_overrides == COMPACT_NOW
