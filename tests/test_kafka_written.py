"""Segments written by Kafka's own storage code (fixtures/kafka-written): our parse, rendered in the text
format of ``expected-records.txt``, must equal Kafka's own reader output line for line.

The renderer below is the definition of that gold format, written from PROVENANCE.md's description
and the files themselves:

- ``file NAME size=N``, then per batch one ``batch ...`` line and per record one indented ``record ...``
  line, then ``summary batches=B records=R validBytes=V errors=0 warnings=0 -> VALID``.
- A key, value or header value is ``null`` when null; in double quotes when every byte is printable
  ASCII (0x20..0x7e; so an empty value is ``""``); otherwise ``0x`` + hex, cut after 64 bytes with ``...``.
- Records of a control batch carry ``controlType=NAME`` (from the int16 type at key bytes 2..3) and, for
  COMMIT/ABORT markers, ``coordinatorEpoch=N`` (the int32 at value bytes 2..5) before ``key=``.
- Headers follow the value as `` h[KEY]=VALUE``.

The fast columnar decoder (``to_arrow``) must give the same records as the per-record iteration.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from pathlib import Path

import pyarrow as pa
import pytest

from conftest import FIXTURES, fixture_path
from kafkalog.record import Record, RecordBatch, iter_file_batches, map_file, to_arrow

FOLDERS = [
    "codec-none",
    "codec-gzip",
    "codec-snappy",
    "codec-lz4",
    "codec-zstd",
    "mixed-codecs",
    "transactional-commit",
    "idempotent",
    "log-append-time",
    "base-offset-1000000",
    "interval-150",
]

HEX_LIMIT = 64
CONTROL_TYPE_NAMES = {
    0: "ABORT",
    1: "COMMIT",
    2: "LEADER_CHANGE",
    3: "SNAPSHOT_HEADER",
    4: "SNAPSHOT_FOOTER",
    5: "KRAFT_VERSION",
    6: "KRAFT_VOTERS",
}


# ----- the gold format ------------------------------------------------------------------------------
def render_bytes(data: bytes | None) -> str:
    """A key, value or header value: null, "printable ASCII", or 0x-hex cut after 64 bytes with '...'."""
    if data is None:
        return "null"
    if all(0x20 <= b <= 0x7E for b in data):
        return '"' + data.decode("ascii") + '"'
    text = "0x" + data[:HEX_LIMIT].hex()
    return text + "..." if len(data) > HEX_LIMIT else text


def render_control(record: Record) -> str:
    """``controlType=... [coordinatorEpoch=... ]`` for a control record (read from its key and value)."""
    assert record.key is not None and len(record.key) >= 4, f"control record key {record.key!r}"
    _version, type_id = struct.unpack_from(">hh", record.key)
    name = CONTROL_TYPE_NAMES.get(type_id, "UNKNOWN")
    text = f"controlType={name} "
    if name in ("ABORT", "COMMIT"):
        assert record.value is not None and len(record.value) >= 6, f"marker value {record.value!r}"
        _value_version, coordinator_epoch = struct.unpack_from(">hi", record.value)
        text += f"coordinatorEpoch={coordinator_epoch} "
    return text


def render_batch(batch: RecordBatch) -> str:
    """The ``batch`` line of one v2 batch."""
    return (
        f"batch position={batch.position} size={batch.size_in_bytes} baseOffset={batch.base_offset} "
        f"lastOffset={batch.last_offset} count={batch.record_count} magic={batch.magic} "
        f"compression={batch.compression} timestampType={batch.timestamp_type} "
        f"maxTimestamp={batch.max_timestamp} partitionLeaderEpoch={batch.partition_leader_epoch} "
        f"producerId={batch.producer_id} producerEpoch={batch.producer_epoch} "
        f"baseSequence={batch.base_sequence} isTransactional={str(batch.is_transactional).lower()} "
        f"isControl={str(batch.is_control).lower()} crc={batch.crc}"
    )


def render_record(record: Record, control: bool) -> str:
    """The indented ``record`` line of one record."""
    key_size = -1 if record.key is None else len(record.key)
    value_size = -1 if record.value is None else len(record.value)
    line = (
        f"  record offset={record.offset} timestamp={record.timestamp} keySize={key_size} "
        f"valueSize={value_size} headers={len(record.headers)} sequence={record.sequence} "
        f"{render_control(record) if control else ''}"
        f"key={render_bytes(record.key)} value={render_bytes(record.value)}"
    )
    for hkey, hvalue in record.headers:
        line += f" h[{hkey}]={render_bytes(hvalue)}"
    return line


def render_segment(path: Path) -> list[str]:
    """Our parse of a whole segment in the expected-records.txt format (ensure_valid on every batch)."""
    size = path.stat().st_size
    lines = [f"file {path.name} size={size}"]
    batches = records = valid_bytes = 0
    for batch in iter_file_batches(path):
        assert isinstance(batch, RecordBatch), f"Kafka 4.0 writes only v2 batches, got {batch!r}"
        batch.ensure_valid()
        lines.append(render_batch(batch))
        for record in batch:
            lines.append(render_record(record, batch.is_control))
            records += 1
        batches += 1
        valid_bytes += batch.size_in_bytes
    lines.append(f"summary batches={batches} records={records} validBytes={valid_bytes} errors=0 warnings=0 -> VALID")
    return lines


def first_difference(expected: list[str], actual: list[str]) -> str | None:
    """Describe the first line where ``actual`` differs from ``expected``, or None when equal."""
    for number, (want, got) in enumerate(zip(expected, actual, strict=False), start=1):
        if want != got:
            column = next(
                (i for i, (a, b) in enumerate(zip(want, got, strict=False)) if a != b), min(len(want), len(got))
            )
            return f"line {number} differs at column {column + 1}:\n  expected: {want}\n  ours:     {got}"
    if len(expected) != len(actual):
        number = min(len(expected), len(actual)) + 1
        extra = expected[number - 1] if len(expected) > len(actual) else actual[number - 1]
        side = "missing from ours" if len(expected) > len(actual) else "extra in ours"
        return f"{len(expected)} expected lines, {len(actual)} of ours; line {number} {side}: {extra}"
    return None


def segment(folder: str) -> Path:
    """The single ``.log`` segment of a kafka-written folder."""
    logs = sorted(fixture_path("kafka-written", folder).glob("*.log"))
    assert len(logs) == 1, f"{folder}: expected exactly one .log, found {logs}"
    return logs[0]


def expected_lines(folder: str) -> list[str]:
    """The lines of the folder's gold ``expected-records.txt``."""
    return fixture_path("kafka-written", folder, "expected-records.txt").read_text("utf-8").splitlines()


# ----- tests --------------------------------------------------------------------------------------
def test_every_kafka_written_folder_is_covered() -> None:
    root = fixture_path("kafka-written")
    assert sorted(p.name for p in root.iterdir() if p.is_dir()) == sorted(FOLDERS)


def test_renderer_rules() -> None:
    """The renderer's own rules on values the fixtures do not exercise (hex cut, non-printables)."""
    assert render_bytes(None) == "null"
    assert render_bytes(b"") == '""'
    assert render_bytes(b" ~") == '" ~"'
    assert render_bytes(b"\x00\x00\x00\x01") == "0x00000001"
    assert render_bytes(b"a\x7f") == "0x617f"
    assert render_bytes(bytes(64)) == "0x" + "00" * 64
    assert render_bytes(bytes(65)) == "0x" + "00" * 64 + "..."
    assert render_bytes("é".encode()) == "0xc3a9"


@pytest.mark.parametrize("folder", FOLDERS)
def test_records_match_kafka_reader_output(folder: str) -> None:
    expected = expected_lines(folder)
    ours = render_segment(segment(folder))
    difference = first_difference(expected, ours)
    if difference is not None:
        pytest.fail(f"{folder}/expected-records.txt vs our parse: {difference}", pytrace=False)


@pytest.mark.parametrize("folder", FOLDERS)
def test_scan_covers_whole_file(folder: str) -> None:
    path = segment(folder)
    end = 0
    for batch in iter_file_batches(path):
        assert batch.position == end, "batches must be back to back"
        end = batch.position + batch.size_in_bytes
    assert end == path.stat().st_size


def _iterated(path: Path, include_control: bool) -> list[tuple]:
    """(offset, timestamp, timestampType, key, value, headers) of every record, by per-record iteration."""
    rows = []
    for batch in iter_file_batches(path):
        if batch.is_control and not include_control:
            continue
        for r in batch:
            headers = [{"key": k, "value": v} for k, v in r.headers]
            rows.append((r.offset, r.timestamp, int(batch.timestamp_type_id), r.key, r.value, headers))
    return rows


def _table_rows(table: pa.Table) -> list[tuple]:
    """The same tuples from a to_arrow table."""
    columns: Iterable[list] = (
        table.column("offset").to_pylist(),
        table.column("timestamp").cast(pa.int64()).to_pylist(),
        table.column("timestampType").to_pylist(),
        table.column("key").to_pylist(),
        table.column("value").to_pylist(),
        table.column("headers").to_pylist(),
    )
    return list(zip(*columns, strict=True))


def _first_row_difference(expected: list[tuple], actual: list[tuple]) -> str | None:
    for i, (want, got) in enumerate(zip(expected, actual, strict=False)):
        if want != got:
            return f"row {i}: iteration {want!r} vs to_arrow {got!r}"
    if len(expected) != len(actual):
        return f"{len(expected)} records by iteration, {len(actual)} rows from to_arrow"
    return None


@pytest.mark.parametrize("include_control", [False, True], ids=["consumer-view", "include-control"])
@pytest.mark.parametrize("folder", FOLDERS)
def test_to_arrow_matches_iteration(folder: str, include_control: bool) -> None:
    path = segment(folder)
    table = to_arrow(map_file(path), include_control=include_control)
    expected = _iterated(path, include_control)
    difference = _first_row_difference(expected, _table_rows(table))
    if difference is not None:
        pytest.fail(f"{folder}: {difference}", pytrace=False)


def test_control_records_only_with_include_control() -> None:
    """transactional-commit: one COMMIT marker per transaction, hidden from to_arrow by default."""
    path = segment("transactional-commit")
    markers = [b for b in iter_file_batches(path) if b.is_control]
    assert len(markers) == 20
    marker_offsets = {b.base_offset for b in markers}
    for b in markers:
        assert b.size_in_bytes == 78 and b.record_count == 1 and b.is_transactional
        assert b.compression == "none" and b.base_sequence == -1 and b.producer_id == 1000
    plain = to_arrow(map_file(path)).column("offset").to_pylist()
    full = to_arrow(map_file(path), include_control=True).column("offset").to_pylist()
    assert len(full) == 500 and len(plain) == 480
    assert marker_offsets.isdisjoint(plain)
    assert sorted(set(full) - set(plain)) == sorted(marker_offsets)


def test_log_append_time_reads_max_timestamp() -> None:
    """log-append-time: every record reads back with its batch's max timestamp (spec 1.2)."""
    for batch in iter_file_batches(segment("log-append-time")):
        assert batch.timestamp_type == "LogAppendTime"
        assert {r.timestamp for r in batch} == {batch.max_timestamp}


def test_fixture_root_is_shared() -> None:
    """The segments are read in place from ../shared/fixtures, never from a copy in the repository."""
    assert segment("codec-none").is_relative_to(FIXTURES)
