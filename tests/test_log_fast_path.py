"""The single-batch fast path of Log.append against the general path: same bytes, same errors, whether the
batch comes as bytes or as a view of a request frame's buffer (the broker's produce)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkalog.errors import KafkaLogError
from kafkalog.record import RecordBatchBuilder, build_batch
from kafkalog.storage import Log
from kafkalog.testing import MockTime

NOW = 1_700_000_000_000
_bytes_or_none = st.one_of(st.none(), st.binary(max_size=40))
_record = st.tuples(
    _bytes_or_none,
    _bytes_or_none,
    st.one_of(st.just(-1), st.integers(NOW - 10_000, NOW + 10_000)),
    st.lists(st.tuples(st.text(max_size=5), _bytes_or_none), max_size=2),
)
_config = st.fixed_dictionaries(
    {},
    optional={
        "cleanup.policy": st.sampled_from(["delete", "compact"]),
        "message.timestamp.before.max.ms": st.sampled_from([1000, 5000, 9223372036854775807]),
        "message.timestamp.after.max.ms": st.sampled_from([1000, 5000, 9223372036854775807]),
        "message.timestamp.type": st.sampled_from(["CreateTime", "LogAppendTime"]),
        "compression.type": st.sampled_from(["producer", "uncompressed", "lz4"]),
        "max.message.bytes": st.sampled_from([200, 1048588]),
        "segment.bytes": st.sampled_from([300, 1 << 20]),
    },
)


def _batch(records, data) -> bytes:
    kind = data.draw(st.sampled_from(["plain", "plain", "idempotent", "lz4", "offset"]))
    if kind == "idempotent":
        builder = RecordBatchBuilder(producer_id=7, producer_epoch=0, base_sequence=0)
    elif kind == "lz4":
        builder = RecordBatchBuilder(compression="lz4")
    else:
        builder = RecordBatchBuilder(base_offset=5 if kind == "offset" else 0)
    for key, value, ts, headers in records:
        builder.append(key, value, timestamp=ts, headers=headers)
    return builder.build()


def _outcome(fn):
    try:
        info = fn()
        return "ok", (info.first_offset, info.last_offset, info.max_timestamp, info.shallow_offset_of_max_timestamp)
    except KafkaLogError as e:
        return "error", type(e).__name__


def _files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.suffix in (".log", ".index", ".timeindex")}


@settings(
    max_examples=120,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    config=_config, batches=st.lists(st.lists(_record, min_size=1, max_size=6), min_size=1, max_size=5), data=st.data()
)
def test_fast_and_general_paths_agree(config, batches, data) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        fast = Log.open(Path(tmp) / "fast-0", dict(config), clock=MockTime(start_ms=NOW))
        general = Log.open(Path(tmp) / "general-0", dict(config), clock=MockTime(start_ms=NOW))
        try:
            for records in batches:
                batch = _batch(records, data)
                # as the broker appends: a view of the request frame's own (writable) buffer, read in place
                given_as = memoryview(np.frombuffer(batch, np.uint8).copy()) if data.draw(st.booleans()) else batch
                got = _outcome(lambda b=given_as: fast.append(b))
                expected = _outcome(
                    lambda b=batch: general._append_general(b, origin="client", leader_epoch=0, assign_offsets=True)
                )
                assert got == expected
            fast.close()
            general.close()
            assert _files(fast.directory) == _files(general.directory)
        finally:
            fast.close()
            general.close()


def test_a_bulk_built_batch_takes_the_fast_path_and_reads_back(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", clock=MockTime(start_ms=NOW))
    info = log.append(build_batch([b"k1", None], [b"v1", b"v2"], [NOW - 5, NOW]))
    assert (info.first_offset, info.last_offset, info.max_timestamp, info.shallow_offset_of_max_timestamp) == (
        0,
        1,
        NOW,
        1,
    )
    assert [(r.offset, r.key, r.value) for r in log.records()] == [(0, b"k1", b"v1"), (1, None, b"v2")]
    log.close()
