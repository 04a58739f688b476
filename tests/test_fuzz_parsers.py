"""Fuzzing every parser of untrusted bytes: record batches (v2 and legacy, every codec), the columnar decoder,
the offset/time/transaction indexes, producer snapshots, checkpoints, properties files, and ``kafkalog dump`` /
``verify`` on hostile files.

The targets and their oracle live in ``kafkalog.testing.fuzz`` and are shared with the atheris harness in
``fuzz/``: a result, or a KafkaLogError naming the file or byte position; never another exception type,
never a hang, and no allocation driven by a length field.
"""

from __future__ import annotations

import contextlib
import struct
import time
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkalog.errors import KafkaLogError
from kafkalog.testing.fuzz import TARGETS, check, fix_crcs, input_for, mutate

pytestmark = pytest.mark.timeout(120)

# Examples per target: the whole module stays well under a minute.
BUDGET = {
    "batches": 500,
    "columnar": 500,
    "offset_index": 250,
    "time_index": 250,
    "txn_index": 250,
    "producer_snapshot": 300,
    "offset_checkpoint": 250,
    "epoch_checkpoint": 250,
    "properties": 300,
    "cli_dump": 150,
    "cli_dump_indexes": 60,
    "cli_verify": 80,
    "cli_recover": 60,
    "spark_logfiles": 80,
}


def _fuzz(name: str):
    return settings(
        max_examples=BUDGET[name],
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


def test_every_target_has_a_budget() -> None:
    assert set(BUDGET) == set(TARGETS)


def _make_test(name: str):
    @_fuzz(name)
    @given(control=st.binary(min_size=0, max_size=400))
    def test(control: bytes) -> None:
        check(name, input_for(TARGETS[name], control))

    test.__name__ = f"test_fuzz_{name}"
    return test


for _name in TARGETS:
    globals()[f"test_fuzz_{_name}"] = _make_test(_name)


@pytest.mark.parametrize("name", list(TARGETS))
def test_seeds_parse_cleanly(name: str) -> None:
    """The valid seeds are valid: the mutations start from real inputs.

    (The CLI and Spark-reader targets also write side files cut from the input, which a seed need not satisfy.)
    """
    allowed = {"ok", "error"} if name.startswith(("cli_", "spark_")) else {"ok"}
    for seed in TARGETS[name].seeds():
        assert check(name, seed) in allowed


@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@given(seed=st.sampled_from(TARGETS["batches"].seeds()), control=st.binary(min_size=1, max_size=64))
def test_mutated_batches_with_fixed_crcs(seed: bytes, control: bytes) -> None:
    """Mutations behind recomputed CRCs reach the record decoders of every codec and magic."""
    data = mutate(seed, control, fix=True)
    check("batches", data)
    check("columnar", data)


# ------------------------------------------------------------------------------------------------ huge lengths

HUGE = 0x7FFFFFFF


def _small_peak(fn) -> int:
    """Run ``fn`` (which may raise a KafkaLogError) under tracemalloc; return the peak bytes allocated."""
    tracemalloc.start()
    try:
        with contextlib.suppress(KafkaLogError):
            fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _legacy_with_field(field: int, value: int) -> bytes:
    """A v1 message whose key (field 0) or value (field 1) length is ``value``."""
    seed = bytearray(TARGETS["batches"].seeds()[6 + 4])  # magic 1, uncompressed, first message
    pos = 12 + 4 + 2 + 8
    if field == 1:
        pos += 4 + max(struct.unpack_from(">i", seed, pos)[0], 0)
    struct.pack_into(">i", seed, pos, value)
    return _fix(bytes(seed))


HUGE_CASES = {
    "v2 record count": ("batches", lambda s: _patch(s[0], 57, ">i", HUGE, crc=True)),
    "v2 batch length": ("batches", lambda s: _patch(s[0], 8, ">i", HUGE)),
    "v2 gzip record count": ("columnar", lambda s: _patch(s[1], 57, ">i", HUGE, crc=True)),
    "legacy key length": ("batches", lambda s: _legacy_with_field(0, HUGE)),
    "legacy value length": ("batches", lambda s: _legacy_with_field(1, HUGE)),
    "snapshot entry count": ("producer_snapshot", lambda s: _patch(s[0], 6, ">i", HUGE)),
    "checkpoint entry count": ("offset_checkpoint", lambda s: b"0\n2147483647\nt 0 1\n"),
    "epoch checkpoint count": ("epoch_checkpoint", lambda s: b"0\n9223372036854775807\n0 0\n"),
    "txn index entry": ("txn_index", lambda s: s[0][:-1]),
    "offset index entry": ("offset_index", lambda s: _patch(s[0], 0, ">i", HUGE)),
    "dump of a huge v2 count": ("cli_dump", lambda s: _patch(s[0], 57, ">i", HUGE, crc=True)),
    "dump of a huge lz4 block": ("cli_dump", lambda s: _lz4_block_size(s[3])),
}


def _patch(data: bytes, pos: int, fmt: str, value: int, crc: bool = False) -> bytes:
    out = bytearray(data)
    struct.pack_into(fmt, out, pos, value)
    return _fix(bytes(out)) if crc else bytes(out)


def _fix(data: bytes) -> bytes:
    out = bytearray(data)
    fix_crcs(out)
    return bytes(out)


def _lz4_block_size(batch: bytes) -> bytes:
    """The lz4 v2 seed with its first block size set to 2^31-1 (under the incompressible bit)."""
    out = bytearray(batch)
    frame = out.index(b"\x04\x22\x4d\x18")
    struct.pack_into("<I", out, frame + 7, 0x7FFFFFFF)
    return _fix(bytes(out))


@pytest.mark.parametrize("case", list(HUGE_CASES))
def test_huge_length_fields_fail_fast_without_allocating(case: str) -> None:
    name, make = HUGE_CASES[case]
    data = make(TARGETS[name].seeds())
    start = time.perf_counter()
    peak = _small_peak(lambda: check(name, data))
    assert time.perf_counter() - start < 10
    assert peak < 16 * 1024 * 1024, f"{case}: peak {peak} bytes"


# ------------------------------------------------------------------------------------------------ hostile files


@pytest.mark.parametrize(
    "data",
    [b"\0" * 4096, b"\xff" * 4096, b"\x00" * 8 + b"\x7f\xff\xff\xff" + b"\x02" * 100, bytes(range(256)) * 8],
    ids=["zeros", "ones", "huge-size", "ramp"],
)
@pytest.mark.parametrize("name", ["cli_dump", "cli_dump_indexes", "cli_verify", "batches", "columnar"])
def test_hostile_files(name: str, data: bytes) -> None:
    check(name, data)


def test_quick_fuzz_summary_finds_nothing_unexpected() -> None:
    """What ``make reliability`` prints: every parser, a seeded budget of cases, no unexpected outcome."""
    from tools.reliability.checks import fuzz_summary

    rows = fuzz_summary(quick=True)
    assert [name for name, _, _ in rows] == list(TARGETS)
    assert all(cases >= 50 for _, cases, _ in rows), rows
    assert all(unexpected == 0 for _, _, unexpected in rows), rows
