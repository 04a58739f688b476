"""Segments whose offsets overflow their base + 2^31-1 (legacy data, KAFKA-6264) are split on load.

Kafka's LogLoader catches LogSegmentOffsetOverflowException while loading or recovering, copies the
segment's batches into ``.cleaned`` segments whose offsets fit (splitOverflowedSegment), swaps them in and
retries. The overflowed file here is written by hand: batches at offsets 0.. and 3,000,000,000.. in one
``00000000000000000000.log`` with no index, which is what such a segment looks like on disk.
"""

from __future__ import annotations

from pathlib import Path

from kafkalog.record import RecordBatchBuilder
from kafkalog.storage.log import Log
from kafkalog.testing import MockTime

FAR = 3_000_000_000  # more than 2^31 - 1 past base offset 0


def _batch(base_offset: int, values: list[bytes], timestamp: int) -> bytes:
    builder = RecordBatchBuilder(base_offset=base_offset)
    for i, value in enumerate(values):
        builder.append(b"k%d" % i, value, timestamp + i)
    return builder.build()


def _overflowed_dir(tmp_path: Path) -> tuple[Path, list[tuple[int, bytes]]]:
    directory = tmp_path / "legacy-0"
    directory.mkdir()
    parts = [
        (0, [b"a", b"b", b"c"]),
        (3, [b"d"]),
        (FAR, [b"e", b"f"]),
        (FAR + 2, [b"g"]),
    ]
    data = b"".join(_batch(base, values, 1_000 + base % 1000) for base, values in parts)
    (directory / "00000000000000000000.log").write_bytes(data)
    expected = [(base + i, v) for base, values in parts for i, v in enumerate(values)]
    return directory, expected


def test_overflowed_segment_is_split_on_load_and_reads_back(tmp_path: Path) -> None:
    directory, expected = _overflowed_dir(tmp_path)
    size = (directory / "00000000000000000000.log").stat().st_size
    with Log.open(directory, {}, MockTime()) as log:
        bases = [s.base_offset for s in log.segments]
        # The split segments start where the offsets stop fitting: 0 and FAR; the active one follows.
        assert bases[:2] == [0, FAR]
        assert sum(s.size for s in log.segments) == size
        assert [(r.offset, r.value) for r in log.records()] == expected
        assert log.log_end_offset == FAR + 3
        for offset, value in expected:
            assert next(iter(log.records(offset))).value == value
    names = sorted(p.name for p in directory.iterdir())
    assert "00000000000000000000.log" in names and f"{FAR:020d}.log" in names
    assert not [n for n in names if n.endswith((".cleaned", ".swap", ".deleted"))]
    # Every split segment's relative offsets fit its base: reopening (with recovery) finds no overflow.
    with Log.open(directory, {}, MockTime(), had_clean_shutdown=False) as log:
        assert [(r.offset, r.value) for r in log.records()] == expected
