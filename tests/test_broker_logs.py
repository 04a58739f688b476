"""Whole log directories written by real Kafka brokers (fixtures/broker-logs), read in place.

Every ``.log`` must scan to its end (no fixture has a partial tail), every batch must be valid (PROVENANCE.md:
the CRCs of every batch check out), every record must decode, and the columnar decoder must agree with
the per-record iteration. The facts PROVENANCE.md states about particular folders are asserted too.
"""

from __future__ import annotations

import functools
import itertools
from pathlib import Path

import pyarrow as pa
import pytest

from conftest import FIXTURES, fixture_path
from kafkalog.record import RecordBatch, iter_file_batches, map_file, to_arrow

BROKER_LOGS = FIXTURES / "broker-logs"
LOG_FILES = sorted(p.relative_to(BROKER_LOGS).as_posix() for p in BROKER_LOGS.rglob("*.log"))
PROVENANCE_FOLDERS = [
    "william0423-kafka",
    "donaldy-kafka271",
    "yuanliubei-kafka-src",
    "yangxuhao-kafka270",
    "bheem6005-kafka",
    "mscaldas-cp512-lz4",
    "itumelengmogase-cp77-kraft",
]


def log_path(relative: str) -> Path:
    """Path of a ``.log`` under fixtures/broker-logs."""
    return fixture_path("broker-logs", *relative.split("/"))


@functools.cache
def scan(relative: str) -> tuple[list[RecordBatch], list[list]]:
    """Every batch of a segment (ensure_valid on each) and its decoded records; cached across tests."""
    batches, records = [], []
    for batch in iter_file_batches(log_path(relative)):
        batch.ensure_valid()
        batches.append(batch)
        records.append(list(batch))
    return batches, records


def offsets(relative: str) -> list[int]:
    """Offsets of every record of a segment, in file order."""
    return [r.offset for rs in scan(relative)[1] for r in rs]


def segment_base(relative: str) -> int:
    """The base offset in a segment's file name (20 digits)."""
    return int(Path(relative).stem)


# ----- every log --------------------------------------------------------------------------------------
def test_every_provenance_folder_has_logs() -> None:
    root = fixture_path("broker-logs")
    assert sorted(p.name for p in root.iterdir() if p.is_dir()) == sorted(PROVENANCE_FOLDERS)
    for folder in PROVENANCE_FOLDERS:
        assert any(name.startswith(folder + "/") for name in LOG_FILES), folder


@pytest.mark.parametrize("relative", LOG_FILES)
def test_scan_reaches_end_of_file(relative: str) -> None:
    batches, _ = scan(relative)
    end = 0
    for batch in batches:
        assert batch.position == end, f"batch at {batch.position} is not right after the previous one"
        assert batch.is_valid()
        end = batch.position + batch.size_in_bytes
    assert end == log_path(relative).stat().st_size, "the scan stopped before the end of the file"


@pytest.mark.parametrize("relative", LOG_FILES)
def test_every_record_decodes(relative: str) -> None:
    batches, records = scan(relative)
    previous = segment_base(relative) - 1
    for batch, recs in zip(batches, records, strict=True):
        assert batch.base_offset >= segment_base(relative)
        assert len(recs) == batch.record_count
        for r in recs:
            assert batch.base_offset <= r.offset <= batch.last_offset
            assert r.offset > previous, f"offset {r.offset} after {previous}"
            previous = r.offset
        if batch.timestamp_type == "LogAppendTime":
            assert all(r.timestamp == batch.max_timestamp for r in recs)
        elif recs:
            assert max(r.timestamp for r in recs) == batch.max_timestamp
        if batch.magic == 2 and batch.base_sequence >= 0:
            assert [r.sequence for r in recs] == [batch.base_sequence + r.offset - batch.base_offset for r in recs]


def _iterated(relative: str, include_control: bool) -> list[tuple]:
    rows = []
    for batch, recs in zip(*scan(relative), strict=True):
        if batch.is_control and not include_control:
            continue
        for r in recs:
            headers = [{"key": k, "value": v} for k, v in r.headers]
            rows.append((r.offset, r.timestamp, int(batch.timestamp_type_id), r.key, r.value, headers))
    return rows


def _table_rows(table: pa.Table) -> list[tuple]:
    return list(
        zip(
            table.column("offset").to_pylist(),
            table.column("timestamp").cast(pa.int64()).to_pylist(),
            table.column("timestampType").to_pylist(),
            table.column("key").to_pylist(),
            table.column("value").to_pylist(),
            table.column("headers").to_pylist(),
            strict=True,
        )
    )


@pytest.mark.parametrize("include_control", [False, True], ids=["consumer-view", "include-control"])
@pytest.mark.parametrize("relative", LOG_FILES)
def test_to_arrow_agrees_with_iteration(relative: str, include_control: bool) -> None:
    table = to_arrow(map_file(log_path(relative)), include_control=include_control)
    expected = _iterated(relative, include_control)
    got = _table_rows(table)
    for i, (want, have) in enumerate(zip(expected, got, strict=False)):
        assert want == have, f"row {i}: iteration {want!r} vs to_arrow {have!r}"
    assert len(got) == len(expected)


def _partitions() -> list[str]:
    """Partition directories (relative) holding at least one .log."""
    return sorted({str(Path(name).parent.as_posix()) for name in LOG_FILES})


@pytest.mark.parametrize("partition", _partitions())
def test_segments_of_a_partition_follow_each_other(partition: str) -> None:
    """Each segment's offsets lie below the next segment's base offset (spec 5: names are base offsets)."""
    logs = sorted(name for name in LOG_FILES if str(Path(name).parent.as_posix()) == partition)
    for current, following in itertools.pairwise(logs):
        if offsets(current):
            assert max(offsets(current)) < segment_base(following)


# ----- facts from PROVENANCE.md ------------------------------------------------------------------------
WILLIAM = "william0423-kafka/kafka-logs"
DONALDY = "donaldy-kafka271/kafka-logs"
YUANLIUBEI = "yuanliubei-kafka-src/kafka-logs"
MSCALDAS = "mscaldas-cp512-lz4/kafka-data"


def test_william_consumer_offsets_28() -> None:
    relative = f"{WILLIAM}/__consumer_offsets-28/00000000000000000000.log"
    assert log_path(relative).stat().st_size == 1_066_451
    batches, _ = scan(relative)
    assert len(batches) == 8202
    # the newest producer snapshot is named after the log end offset
    snapshots = sorted(log_path(relative).parent.glob("*.snapshot"))
    assert int(snapshots[-1].stem) == 8202 == batches[-1].next_offset
    # the complete indexes: 254 offset-index entries of 8 bytes, 258 time-index entries of 12 bytes
    folder = log_path(relative).parent
    assert (folder / "00000000000000000000.index").stat().st_size == 254 * 8
    assert (folder / "00000000000000000000.timeindex").stat().st_size == 258 * 12


def test_william_debug_topic_has_multi_record_batches() -> None:
    batches, records = scan(f"{WILLIAM}/debug_topic-0/00000000000000000000.log")
    assert any(len(recs) > 1 for recs in records)
    assert offsets(f"{WILLIAM}/debug_topic-0/00000000000000000000.log") == list(
        range(batches[0].base_offset, batches[-1].last_offset + 1)
    )


def test_donaldy_compaction_gaps() -> None:
    """A compacted segment holding offsets 4, 16, 17 only, and a first segment starting at offset 1."""
    assert offsets(f"{DONALDY}/__consumer_offsets-39/00000000000000000000.log") == [4, 16, 17]
    assert offsets(f"{DONALDY}/__consumer_offsets-28/00000000000000000000.log")[0] == 1


def test_donaldy_several_segments_and_empty_ones() -> None:
    for partition in ("__consumer_offsets-17", "__consumer_offsets-28", "__consumer_offsets-39"):
        assert len(list(fixture_path("broker-logs", DONALDY, partition).glob("*.log"))) >= 2
    for relative in ("myTopic-0/00000000000000000038.log", "test_topic-0/00000000000000000012.log"):
        assert log_path(f"{DONALDY}/{relative}").stat().st_size == 0
        assert scan(f"{DONALDY}/{relative}") == ([], [])


def test_yuanliubei_two_segments_and_empty_segment() -> None:
    logs = sorted(p.name for p in fixture_path("broker-logs", YUANLIUBEI, "__consumer_offsets-17").glob("*.log"))
    assert logs == ["00000000000000000000.log", "00000000000000000058.log"]
    assert offsets(f"{YUANLIUBEI}/__consumer_offsets-17/00000000000000000058.log")[0] >= 58
    empty = f"{YUANLIUBEI}/topic1-0/00000000000002722402.log"
    assert log_path(empty).stat().st_size == 0 and scan(empty) == ([], [])


def test_bheem6005_cities_has_11_batches() -> None:
    batches, _ = scan("bheem6005-kafka/kafka-logs/cities-0/00000000000000000000.log")
    assert len(batches) == 11


def test_mscaldas_lz4_v2_batches() -> None:
    logs = [name for name in LOG_FILES if name.startswith(MSCALDAS + "/")]
    lz4 = [(b, recs) for name in logs for b, recs in zip(*scan(name), strict=True) if b.compression == "lz4"]
    assert lz4, "expected LZ4-compressed batches"
    assert all(b.magic == 2 for name in logs for b in scan(name)[0])
    assert any(len(recs) > 1 for _, recs in lz4), "expected LZ4 batches with many records"
    assert sum(len(recs) for _, recs in lz4) > len(lz4)
