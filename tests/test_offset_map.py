"""The log cleaner's offset map (Kafka's SkimpyOffsetMap): the numba map, its reference twin, and Kafka's own values.

The ``KAFKA_*`` constants (and the other expected values of the ``test_kafka_*`` tests) were produced by the code of
Kafka's ``SkimpyOffsetMap.java`` (storage module, trunk; comments stripped) compiled on JDK 17 with stubs holding
Kafka's ``ByteUtils.readIntBE`` and ``Utils.abs`` and three accessors added for the counters and the table;
``positionOf`` was read through reflection. They pin the MD5, the probe sequence with
Java's int arithmetic, the table layout and the ``lookups``/``probes`` counters to Kafka's.
"""

from __future__ import annotations

import hashlib
import mmap

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkalog.cleaner import offset_map as offset_map_module
from kafkalog.cleaner.offset_map import (
    ENTRY_BYTES,
    OffsetMapFullError,
    SkimpyOffsetMap,
    _slot_of,
    md5_digests,
    probe_slot,
)
from reference_offset_map import ReferenceOffsetMap

MAPS = [SkimpyOffsetMap, ReferenceOffsetMap]


def pack(keys: list[bytes | None]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Keys laid end to end in one arena (None is a null key): (arena, key_pos, key_len)."""
    data = b"".join(k for k in keys if k is not None)
    pos = np.zeros(len(keys), np.int64)
    length = np.full(len(keys), -1, np.int64)
    p = 0
    for i, k in enumerate(keys):
        pos[i] = p
        if k is not None:
            length[i] = len(k)
            p += len(k)
    return np.frombuffer(data, np.uint8).copy(), pos, length


# ---------------------------------------------------------------------------------------------------------------
# MD5


def test_md5_every_length_0_to_200_at_unaligned_positions():
    rng = np.random.default_rng(20240601)
    arena = rng.integers(0, 256, 21000, dtype=np.uint8)
    lengths = np.arange(201, dtype=np.int64)
    assert {55, 56, 63, 64, 65, 119, 120, 127, 128} <= set(lengths.tolist())  # one/two padding blocks
    positions = np.cumsum(lengths + 3) - lengths - 3 + 1  # starts at odd positions, never 8-byte aligned
    digests = md5_digests(arena, positions, lengths)
    for p, n, d in zip(positions, lengths, digests, strict=True):
        assert d.tobytes() == hashlib.md5(arena[p : p + n].tobytes()).digest(), n


def test_md5_long_and_patterned_keys():
    rng = np.random.default_rng(7)
    keys = [b"", b"a", b"abc", b"message digest", b"\x00" * 64, b"\xff" * 65, rng.bytes(1000), rng.bytes(65_543)]
    arena, pos, length = pack(keys)
    got = md5_digests(arena, pos, length)
    assert [d.tobytes() for d in got] == [hashlib.md5(k).digest() for k in keys]
    assert got[0].tobytes().hex() == "d41d8cd98f00b204e9800998ecf8427e"  # RFC 1321 test suite
    assert got[3].tobytes().hex() == "f96b697d7cb7938d525a2f31aaf161d0"


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.lists(st.binary(max_size=300), max_size=20))
def test_md5_matches_hashlib(keys):
    arena, pos, length = pack(keys)
    assert [d.tobytes() for d in md5_digests(arena, pos, length)] == [hashlib.md5(k).digest() for k in keys]


def test_md5_rejects_null_and_out_of_arena_keys():
    arena = np.zeros(10, np.uint8)
    with pytest.raises(ValueError, match="null key"):
        md5_digests(arena, np.array([0]), np.array([-1]))
    with pytest.raises(ValueError, match="outside"):
        md5_digests(arena, np.array([5]), np.array([6]))


# ---------------------------------------------------------------------------------------------------------------
# Probing: positionOf(hash, attempt) / 24 from Kafka, attempts 0..19 (13 and up are linear, with int wrap-around).

KAFKA_PROBES = [
    (7, "7f7f7f7f7f7f7f7f7f7f7f7f7fffffff", [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 3, 4, 1, 0, 1, 0, 6, 5, 4, 3]),
    (7, "ffffffffffffffffffffffff7ffffffe", [1, 1, 1, 1, 1, 1, 1, 1, 1, 3, 2, 5, 0, 1, 0, 1, 0, 6, 5, 4]),
    (7, "00000000000000000000000080000000", [0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 1, 4, 0, 1, 0, 6, 5, 4, 3, 2]),
    (7, "ffffffffffffffffffffffffffffffff", [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 2, 3, 4, 5, 6]),
    (7, "0123456789abcdef0011223344556677", [2, 1, 0, 6, 6, 0, 4, 6, 4, 0, 3, 6, 2, 3, 4, 5, 6, 0, 1, 2]),
    (1, "0123456789abcdef0011223344556677", [0] * 20),
    (170, "7f7f7f7f7f7f7f7f7f7f7f7f7fffffff",
     [83, 83, 83, 83, 83, 83, 83, 83, 83, 83, 41, 169, 127, 0, 127, 126, 125, 124, 123, 122]),
    (170, "80000000800000008000000080000000",
     [0, 128, 128, 128, 0, 128, 128, 128, 0, 128, 128, 128, 0, 127, 126, 125, 124, 123, 122, 121]),
    (1000003, "ffffffffffffffffffffffff7ffffffe",
     [1, 1, 1, 1, 1, 1, 1, 1, 1, 129, 32769, 388585, 477205, 477206, 0, 477206, 477205, 477204, 477203, 477202]),
    (89478485, "7f7f7f7f7f7f7f7f7f7f7f7f7fffffff",
     [81056988] * 10 + [81057116, 81089884, 7, 0, 7, 6, 5, 4, 3, 2]),
    (89478485, "0123456789abcdef0011223344556677",
     [19088743, 54880139, 1193050, 36984446, 16702659, 70390021, 34668530, 16772831, 1122867, 19018565,
      36914263, 54809961, 72705659, 72705660, 72705661, 72705662, 72705663, 72705664, 72705665, 72705666]),
]  # fmt: skip


@pytest.mark.parametrize(("slots", "digest", "expected"), KAFKA_PROBES)
def test_probe_sequence_matches_kafka(slots, digest, expected):
    h = bytes.fromhex(digest)
    assert [probe_slot(h, a, slots) for a in range(20)] == expected
    harr = np.frombuffer(h, np.uint8).copy()
    assert [int(_slot_of(harr, 0, a, slots)) for a in range(20)] == expected


def test_probe_kernel_matches_reference_on_random_digests():
    rng = np.random.default_rng(3)
    for _ in range(200):
        h = rng.bytes(16)
        slots = int(rng.integers(1, 2**27))
        attempts = [*range(15), int(rng.integers(15, 2**31 - 1))]
        harr = np.frombuffer(h, np.uint8).copy()
        assert [int(_slot_of(harr, 0, a, slots)) for a in attempts] == [probe_slot(h, a, slots) for a in attempts]


@pytest.mark.parametrize("cls", MAPS)
def test_linear_probing_past_attempt_12_wraps_like_java(cls):
    """A digest whose 13 windows all hit taken slots goes linear; here attempt 13 is MAX_VALUE + 1 -> MIN -> 0."""
    m = cls(7 * ENTRY_BYTES)
    taken = [bytes.fromhex("ff" * 16), bytes.fromhex("00000003") + bytes(12), bytes.fromhex("00000004") + bytes(12)]
    for i, d in enumerate(taken):
        m._put_digest(d, i)
    assert m.probes == 3
    wrap = bytes.fromhex("7f7f7f7f7f7f7f7f7f7f7f7f7fffffff")  # slots 1,..,1,3,4,1 then 0
    m._put_digest(wrap, -5)
    assert m.probes == 3 + 14
    table = m.table_bytes()
    assert table[:ENTRY_BYTES] == wrap + (-5).to_bytes(8, "big", signed=True)
    assert [table[s * ENTRY_BYTES : s * ENTRY_BYTES + 16] for s in (1, 3, 4)] == taken
    assert m._get_digest(wrap) == -5
    assert m.probes == 3 + 14 + 14


# ---------------------------------------------------------------------------------------------------------------
# Kafka's own results

KAFKA_TABLE_A = (
    "cfcd208495d565ef66e7dff9f98764da0000000000000000c81e728d9d4c2f636f067f89cc14862c000000000000000e"
    "45c48cce2e2d7fbdea1afc51c7c6ad26000000000000003fc9f0f895fb98ab9159f51fd0297e236d0000000000000038"
    "8f14e45fceea167a5a36dedd4bea25430000000000000031e4da3b7fbbce2345d7772b0674a318d50000000000000023"
    "c4ca4238a0b923820dcc509a6f75849b0000000000000007eccbc87e4b5ce2fe28308fd9f2a7baf30000000000000015"
    "1679091c5a880faf6fb5e6087eb1b2dc000000000000002aa87ff679a2f3e71d9181a67b7542122c000000000000001c"
)


@pytest.mark.parametrize("cls", MAPS)
def test_kafka_full_ten_slot_map(cls):
    m = cls(240)
    for i in range(10):
        m.put(str(i).encode(), i * 7)
    with pytest.raises(OffsetMapFullError, match="entries: 10, slots: 10"):
        m.put(b"3", 99)  # Kafka refuses a put on a full map even for a key already present
    assert [m.get(str(i).encode()) for i in range(12)] == [i * 7 for i in range(10)] + [-1, -1]
    assert m.table_bytes().hex() == KAFKA_TABLE_A
    assert (m.slots, m.size, m.lookups, m.probes, m.latest_offset) == (10, 10, 22, 108, 63)


def _sha(m) -> str:
    return hashlib.sha256(m.table_bytes()).hexdigest()


@pytest.mark.parametrize("cls", MAPS)
def test_kafka_get_when_full(cls):
    """Kafka's OffsetMapTest.testGetWhenFull: a get on a full map stops after slots + 12 probes."""
    m = cls(4096)
    i = 37
    while m.size < m.slots:
        m.put(str(i).encode(), i)
        i += 1
    assert (i, m.get(str(i).encode()), m.get(str(i - 1).encode())) == (207, -1, 206)
    assert (m.slots, m.size, m.lookups, m.probes, m.latest_offset) == (170, 170, 172, 1019, 206)
    assert _sha(m) == "ec547507a15d54518621b1459bab39fb46e6443a20b16b2339a1fecf8dbd0f28"


def _key_c(k: int) -> bytes:
    return ("x" * ((k * 13) % 70) + str(k)).encode()


@pytest.mark.parametrize("cls", MAPS)
def test_kafka_overwrites_and_extreme_offsets(cls):
    m = cls(1000)  # 41 slots, 16 bytes unused
    for j in range(200):
        off = -(2**63) + j if j % 7 == 0 else (-j if j % 5 == 0 else j * 1000003)
        m.put(_key_c((j * 17) % 30), off)
    gets = [m.get(_key_c(k)) for k in range(32)]
    assert gets[:6] == [-180, 173000519, -9223372036854775612, -9223372036854775619, -9223372036854775626,
                        -9223372036854775633]  # fmt: skip
    assert gets[-2:] == [-1, -1]
    assert m.collision_rate == 0.5043103448275862
    assert (m.slots, m.size, m.lookups, m.probes, m.latest_offset) == (41, 30, 232, 349, 199000597)
    assert _sha(m) == "da380511d739857e4a1801ecc3b7a3e883dd5881876e35ae343e5ada46130965"


def test_kafka_thousand_keys_at_load_091():
    m = SkimpyOffsetMap(26407, load_factor=1.0)  # 1100 slots
    arena, pos, length = pack([f"key-{j}".encode() for j in range(1200)])
    assert m.put_records(arena, pos[:1000], length[:1000], np.arange(1000), 0) == 1000
    got = m.get_records(arena, pos, length)
    assert got[:1000].tolist() == list(range(1000))
    assert (got[1000:] == -1).all()
    assert m.collision_rate == 2.3668181818181817
    assert (m.slots, m.size, m.lookups, m.probes, m.latest_offset) == (1100, 1000, 2200, 7407, 999)
    assert _sha(m) == "54c46b2d92b6ae51e6b860f1f3bcb514fd3cd5449285360521e241492bcf0a0c"


# ---------------------------------------------------------------------------------------------------------------
# put / get semantics


@pytest.mark.parametrize("cls", MAPS)
def test_put_get_overwrite_and_latest_offset(cls):
    m = cls(24 * 100)
    assert (m.size, m.latest_offset, m.utilization, m.collision_rate) == (0, -1, 0.0, 0.0)
    assert m.get(b"a") == -1
    m.put(b"a", 10)
    m.put(b"", 11)  # an empty key is a key
    m.put(bytearray(b"b"), 12)
    assert (m.get(b"a"), m.get(memoryview(b"")), m.get(b"b"), m.size, m.latest_offset) == (10, 11, 12, 3, 12)
    m.put(b"a", 5)  # overwrite: size unchanged; latest_offset follows the put, even backwards
    assert (m.get(b"a"), m.size, m.latest_offset) == (5, 3, 5)
    m.update_latest_offset(1000)
    assert m.latest_offset == 1000
    assert m.utilization == 3 / 100
    with pytest.raises(ValueError, match="int64"):
        m.put(b"a", 2**63)


@pytest.mark.parametrize("cls", MAPS)
def test_clear(cls):
    m = cls(4000)
    for i in range(10):
        m.put(str(i).encode(), i)
    assert [m.get(str(i).encode()) for i in range(10)] == list(range(10))
    m.clear()
    assert (m.size, m.latest_offset, m.lookups, m.probes) == (0, -1, 0, 0)
    assert m.table_bytes() == bytes(m.memory_bytes)
    assert [m.get(str(i).encode()) for i in range(10)] == [-1] * 10
    m.put(b"1", 3)
    assert (m.get(b"1"), m.size) == (3, 1)


@pytest.mark.parametrize("memory", [24, 25, 47, 48, 1000, 4096, 64 * 1024 * 1024 + 7])
def test_geometry_and_memory_budget(memory):
    m = SkimpyOffsetMap(memory) if memory < 2**30 else None
    slots = memory // 24
    if m is not None:
        assert (m.slots, m.memory_bytes, m.max_entries) == (slots, slots * 24, int(slots * 0.9))
        assert m.memory_bytes <= memory
    r = ReferenceOffsetMap(memory, load_factor=0.5) if memory < 10**6 else None
    if r is not None:
        assert (r.slots, r.memory_bytes, r.max_entries) == (slots, slots * 24, int(slots * 0.5))


@pytest.mark.parametrize("cls", MAPS)
@pytest.mark.parametrize(
    ("memory", "load_factor"),
    [(0, 0.9), (23, 0.9), (-24, 0.9), (2**31, 0.9), (240, 0.0), (240, -1.0), (240, float("nan")), (240, float("inf"))],
)
def test_bad_geometry(cls, memory, load_factor):
    with pytest.raises(ValueError):
        cls(memory, load_factor)


# ---------------------------------------------------------------------------------------------------------------
# The fast map against the reference: same answers, same counters, same bytes


def _random_keys(rng, n, distinct):
    pool = [rng.bytes(int(rng.integers(0, 80))) for _ in range(distinct)]
    return [pool[int(i)] for i in rng.integers(0, distinct, n)]


@pytest.mark.parametrize("slots", [1, 2, 3, 10, 37, 150])
def test_fast_equals_reference_up_to_a_full_map(slots):
    rng = np.random.default_rng(slots)
    fast, ref = SkimpyOffsetMap(slots * 24 + 5), ReferenceOffsetMap(slots * 24 + 5)
    keys = _random_keys(rng, 4 * slots, 2 * slots)
    for i, k in enumerate(keys):
        if ref.size == slots:
            with pytest.raises(OffsetMapFullError):
                fast.put(k, i)
            with pytest.raises(OffsetMapFullError):
                ref.put(k, i)
            break
        fast.put(k, i)
        ref.put(k, i)
        if slots <= 40 or i % 100 == 0:
            assert fast.table_bytes() == ref.table_bytes()
    assert fast.table_bytes() == ref.table_bytes()
    probe_keys = keys + _random_keys(rng, slots, slots)
    assert [fast.get(k) for k in probe_keys] == [ref.get(k) for k in probe_keys]
    assert (fast.size, fast.lookups, fast.probes, fast.latest_offset) == (ref.size, ref.lookups, ref.probes,
                                                                          ref.latest_offset)  # fmt: skip
    assert fast.collision_rate == ref.collision_rate


def random_run(rng: np.random.Generator, max_slots: int):
    """A random map size and run of records (10% null keys, offsets with gaps, a start offset a quarter in):
    (slots, load factor, keys, arena, key_pos, key_len, offsets, start)."""
    slots = int(rng.integers(5, max_slots))
    load_factor = float(rng.choice([0.5, 0.9, 1.0]))
    n = int(rng.integers(0, 3 * slots))
    keys = [None if rng.random() < 0.1 else k for k in _random_keys(rng, n, int(rng.integers(1, 2 * slots)))]
    arena, pos, length = pack(keys)
    offsets = np.cumsum(rng.integers(0, 3, n)).astype(np.int64) + 1000
    return slots, load_factor, keys, arena, pos, length, offsets, 1000 + n // 4


@pytest.mark.parametrize("seed", range(6))
def test_put_records_equals_reference(seed):
    slots, load_factor, keys, arena, pos, length, offsets, start = random_run(np.random.default_rng(100 + seed), 300)
    n = len(keys)
    fast, ref = SkimpyOffsetMap(slots * 24, load_factor), ReferenceOffsetMap(slots * 24, load_factor)
    got = fast.put_records(arena, pos, length, offsets, start)
    assert got == ref.put_records(arena, pos, length, offsets, start)
    assert fast.table_bytes() == ref.table_bytes()
    assert (fast.size, fast.lookups, fast.probes, fast.latest_offset) == (ref.size, ref.lookups, ref.probes,
                                                                          ref.latest_offset)  # fmt: skip
    # resume from the stopping record, as the cleaner would on its next pass after clearing the map
    if got < n:
        fast.clear()
        ref.clear()
        rest = slice(got, None)
        assert fast.put_records(arena, pos[rest], length[rest], offsets[rest], start) == ref.put_records(
            arena, pos[rest], length[rest], offsets[rest], start
        )
        assert fast.table_bytes() == ref.table_bytes()
    assert fast.get_records(arena, pos, length).tolist() == ref.get_records(arena, pos, length).tolist()
    assert (fast.lookups, fast.probes) == (ref.lookups, ref.probes)


@pytest.mark.parametrize("seed", range(8))
def test_put_digests_of_digest_records_equals_put_records_and_reference(seed):
    """The cleaner hashes a run's keys on a read-ahead thread (digest_records) and puts them afterwards
    (put_digests): the same stop, table and counters as put_records in one step, and as Kafka's map."""
    slots, load_factor, keys, arena, pos, length, offsets, start = random_run(np.random.default_rng(300 + seed), 3000)
    split, whole = SkimpyOffsetMap(slots * 24, load_factor), SkimpyOffsetMap(slots * 24, load_factor)
    ref = ReferenceOffsetMap(slots * 24, load_factor)
    digests = SkimpyOffsetMap.digest_records(arena, pos, length, offsets, start)
    taken = [i for i in range(len(keys)) if keys[i] is not None and offsets[i] >= start]
    assert [digests[16 * i : 16 * i + 16].tobytes() for i in taken] == [hashlib.md5(keys[i]).digest() for i in taken]
    got = split.put_digests(digests, length, offsets, start)
    assert got == whole.put_records(arena, pos, length, offsets, start) == ref.put_records(arena, pos, length, offsets,
                                                                                           start)  # fmt: skip
    assert split.table_bytes() == whole.table_bytes() == ref.table_bytes()
    assert (split.size, split.lookups, split.probes, split.latest_offset) == (ref.size, ref.lookups, ref.probes,
                                                                              ref.latest_offset)  # fmt: skip


def test_digest_records_and_put_digests_check_their_arguments():
    m = SkimpyOffsetMap(240)
    arena, pos, length = pack([b"a", b"b"])
    with pytest.raises(ValueError, match="key 1"):
        SkimpyOffsetMap.digest_records(arena, pos, np.array([1, 5]), np.arange(2), 0)
    with pytest.raises(ValueError, match="out must be 32"):
        SkimpyOffsetMap.digest_records(arena, pos, length, np.arange(2), 0, out=np.empty(31, np.uint8))
    out = np.zeros(32, np.uint8)
    assert SkimpyOffsetMap.digest_records(arena, pos, length, np.arange(2), 0, out=out) is out
    assert out.tobytes() == hashlib.md5(b"a").digest() + hashlib.md5(b"b").digest()
    with pytest.raises(ValueError, match="digests must be 32"):
        m.put_digests(out[:16], length, np.arange(2), 0)
    assert (m.size, m.lookups, m.table_bytes()) == (0, 0, bytes(240))
    tight = SkimpyOffsetMap(24, load_factor=2.0)  # one slot, max_entries 2: the second key finds no slot
    with pytest.raises(OffsetMapFullError, match="entries: 1, slots: 1"):
        tight.put_digests(out, length, np.arange(2), 0)
    assert (tight.size, tight.get(b"a")) == (1, 0)


# ---------------------------------------------------------------------------------------------------------------
# put_records / get_records: Cleaner.buildOffsetMapForSegment's loop


@pytest.mark.parametrize("cls", MAPS)
def test_put_records_stops_at_max_entries(cls):
    m = cls(100 * 24)  # 100 slots, max_entries 90
    assert m.max_entries == 90
    keys = [f"k{i}".encode() for i in range(200)]
    arena, pos, length = pack(keys)
    offsets = np.arange(200, dtype=np.int64)
    assert m.put_records(arena, pos, length, offsets, 0) == 90
    assert (m.size, m.latest_offset) == (90, 89)
    assert m.get(b"k89") == 89
    assert m.get(b"k90") == -1
    # full: even a key already present is refused, before it is hashed (the map is not touched)
    lookups = m.lookups
    assert m.put_records(arena, pos[5:], length[5:], offsets[5:], 0) == 0
    assert (m.lookups, m.get(b"k5")) == (lookups, 5)


@pytest.mark.parametrize("limit", [1, 63, 64, 65, 128, 129])
def test_put_records_stops_at_chunk_edges(limit):
    """The fast kernel hashes 64 records ahead; the stop must still land on the exact record."""
    keys = [None if i % 5 == 0 else f"key{i}".encode() for i in range(400)]
    arena, pos, length = pack(keys)
    offsets = np.arange(400, dtype=np.int64)
    fast, ref = SkimpyOffsetMap(limit * 24, 1.0), ReferenceOffsetMap(limit * 24, 1.0)
    got = fast.put_records(arena, pos, length, offsets, 0)
    assert got == ref.put_records(arena, pos, length, offsets, 0) == limit + limit // 4 + 1
    last_put = max(i for i in range(got) if keys[i] is not None)
    assert (fast.size, fast.latest_offset, fast.table_bytes()) == (limit, last_put, ref.table_bytes())


@pytest.mark.parametrize("cls", MAPS)
def test_put_records_overwrites_before_the_limit(cls):
    m = cls(10 * 24, load_factor=0.5)  # max 5 entries
    keys = [b"a", b"b", b"a", b"c", b"d", b"a", b"e", b"a", b"f"]
    arena, pos, length = pack(keys)
    assert m.put_records(arena, pos, length, np.arange(9) + 100, 0) == 7  # 'a' at index 7 finds size == 5
    assert (m.size, m.get(b"a"), m.get(b"e"), m.get(b"f"), m.latest_offset) == (5, 105, 106, -1, 106)


@pytest.mark.parametrize("cls", MAPS)
def test_put_records_skips_null_keys_and_old_offsets(cls):
    m = cls(10 * 24)  # max 9 entries
    keys = [b"old", None, b"x", None, b"y", b"older"]
    offsets = np.array([1, 2, 5, 6, 7, 3])
    arena, pos, length = pack(keys)
    assert m.put_records(arena, pos, length, offsets, 5) == 6
    assert (m.size, m.get(b"old"), m.get(b"older"), m.get(b"x"), m.get(b"y"), m.latest_offset) == (2, -1, -1, 5, 7, 7)
    # skipped records never trigger 'full': the index returned is that of the first record that would be put
    full = cls(24, load_factor=0.5)  # 1 slot, max_entries 0
    assert full.max_entries == 0
    assert full.put_records(arena, pos, length, offsets, 5) == 2
    assert full.put_records(arena, pos[:2], length[:2], offsets[:2], 5) == 2
    assert full.put_records(arena, pos[:0], length[:0], offsets[:0], 0) == 0
    assert full.size == 0


@pytest.mark.parametrize("cls", MAPS)
def test_put_records_beyond_the_slots_raises_like_kafka(cls):
    m = cls(3 * 24, load_factor=2.0)  # max_entries 6 > 3 slots: Kafka's put throws at the 4th entry
    arena, pos, length = pack([b"a", b"b", b"c", b"d"])
    with pytest.raises(OffsetMapFullError, match="entries: 3, slots: 3"):
        m.put_records(arena, pos, length, np.arange(4), 0)
    assert (m.size, m.get(b"c")) == (3, 2)


def test_put_records_validates_before_putting():
    m = SkimpyOffsetMap(240)
    arena, pos, length = pack([b"a", b"b"])
    with pytest.raises(ValueError, match="key 1"):
        m.put_records(arena, pos, np.array([1, 5]), np.arange(2), 0)
    with pytest.raises(ValueError, match="key 0"):
        m.get_records(arena, np.array([-1, 0]), np.array([1, 1]))
    with pytest.raises(ValueError, match="offsets has 1 entries"):
        m.put_records(arena, pos, length, np.arange(1), 0)
    with pytest.raises(TypeError, match="uint8"):
        m.put_records(arena.astype(np.int8), pos, length, np.arange(2), 0)
    assert (m.size, m.lookups, m.table_bytes()) == (0, 0, bytes(240))
    # other integer dtypes are fine
    assert m.put_records(arena, pos.astype(np.int32), length.astype(np.int16), np.arange(2, dtype=np.uint32), 0) == 2
    assert (m.get(b"a"), m.get(b"b")) == (0, 1)


@pytest.mark.parametrize("cls", MAPS)
def test_get_records(cls):
    m = cls(1000)
    m.put(b"a", 7)
    m.put(b"", 8)
    arena, pos, length = pack([b"a", None, b"", b"zz"])
    got = m.get_records(arena, pos, length)
    assert got.dtype == np.int64
    assert got.tolist() == [7, -1, 8, -1]
    assert m.lookups == 2 + 3  # the null key is not looked up


# ---------------------------------------------------------------------------------------------------------------
# The kernels' own paths: several chunks, SIMD lanes of mixed key lengths, probe passes, the table's memory


def _mixed_keys(rng, n, distinct):
    """Keys of every kind of length: empty, short (one MD5 block), 56..63 (the length in a block of its own), and
    several blocks, so the short and the long hashing paths share chunks."""
    lengths = [0, 1, 15, 16, 55, 56, 60, 63, 64, 65, 119, 120, 200, 1000]
    pool = [rng.bytes(int(rng.choice(lengths))) if i % 3 else f"k{i}".encode() for i in range(distinct)]
    return [pool[int(i)] for i in rng.integers(0, distinct, n)]


@pytest.mark.parametrize(("slots", "load_factor"), [(1500, 1.0), (4000, 0.9), (20000, 0.5)])
def test_put_and_get_records_over_several_chunks_equal_reference(slots, load_factor):
    """Runs longer than the kernels' 1024-record chunks, up to a nearly full map (long probe sequences, some past
    the 13 random probes into the linear ones), checked against the reference record by record."""
    rng = np.random.default_rng(slots)
    n = 3500
    keys = [None if rng.random() < 0.05 else k for k in _mixed_keys(rng, n, int(slots * 1.2))]
    arena, pos, length = pack(keys)
    offsets = np.arange(n, dtype=np.int64) + 10
    fast, ref = SkimpyOffsetMap(slots * 24, load_factor), ReferenceOffsetMap(slots * 24, load_factor)
    start = 0
    while start < n:  # as the cleaner does: a full map is cleared and the next pass resumes at the stopping record
        got = fast.put_records(arena, pos[start:], length[start:], offsets[start:], 30)
        assert got == ref.put_records(arena, pos[start:], length[start:], offsets[start:], 30)
        assert fast.table_bytes() == ref.table_bytes()
        assert (fast.size, fast.lookups, fast.probes, fast.latest_offset) == (ref.size, ref.lookups, ref.probes,
                                                                              ref.latest_offset)  # fmt: skip
        probe = _mixed_keys(rng, 1500, 500) + keys[start : start + 1500]
        parena, ppos, plength = pack(probe)
        assert fast.get_records(parena, ppos, plength).tolist() == ref.get_records(parena, ppos, plength).tolist()
        assert (fast.lookups, fast.probes) == (ref.lookups, ref.probes)
        start += got
        if start < n:
            fast.clear()
            ref.clear()


def test_get_records_on_a_full_map_gives_up_like_kafka():
    """Every lookup of an absent key on a full map makes slots + 12 probes: 13 in the passes, the rest linear."""
    fast, ref = SkimpyOffsetMap(300 * 24, 1.0), ReferenceOffsetMap(300 * 24, 1.0)
    arena, pos, length = pack([f"present-{i}".encode() for i in range(300)])
    assert fast.put_records(arena, pos, length, np.arange(300), 0) == 300
    assert ref.put_records(arena, pos, length, np.arange(300), 0) == 300
    assert fast.table_bytes() == ref.table_bytes()
    assert fast.size == fast.slots == 300
    keys = [f"absent-{i}".encode() for i in range(40)] + [f"present-{i}".encode() for i in range(0, 300, 7)]
    arena, pos, length = pack(keys)
    got = fast.get_records(arena, pos, length)
    assert got.tolist() == ref.get_records(arena, pos, length).tolist()
    assert (got[:40] == -1).all() and got[40:].tolist() == list(range(0, 300, 7))
    assert (fast.lookups, fast.probes) == (ref.lookups, ref.probes)
    assert fast.probes >= 300 + 40 * (300 + 12)  # each put one probe or more, each absent key 312


def test_md5_lanes_with_keys_of_every_length_mixed():
    """Short keys take 16 at a time, long ones share lanes that each move on to the next long key when done."""
    rng = np.random.default_rng(11)
    keys = [rng.bytes(int(n)) for n in rng.choice([0, 3, 55, 56, 63, 64, 127, 128, 129, 700, 5000], 400)]
    arena, pos, length = pack(keys)
    offset = np.concatenate([[0], rng.integers(1, 5, len(keys) - 1)]).cumsum()  # keys overlap, unaligned
    pos = np.minimum(pos + offset % 7, len(arena) - length)
    digests = md5_digests(arena, pos, length)
    for p, n, d in zip(pos, length, digests, strict=True):
        assert d.tobytes() == hashlib.md5(arena[p : p + n].tobytes()).digest()


def test_large_table_memory_and_clear():
    """A table of 2 MiB or more is an anonymous huge-page mmap: zero until used, zeroed again by clear()."""
    m = SkimpyOffsetMap(4 * 1024 * 1024 + 5)
    assert m.memory_bytes == m.slots * ENTRY_BYTES <= 4 * 1024 * 1024 + 5
    table = m._table
    if hasattr(mmap, "MAP_ANONYMOUS"):
        assert isinstance(table.base.obj, mmap.mmap)  # the array's base is a memoryview of the mmap
    m.clear()  # nothing put: nothing to zero
    assert table.flags.writeable and not table.any()
    arena, pos, length = pack([f"key-{i}".encode() for i in range(5000)])
    assert m.put_records(arena, pos, length, np.arange(5000), 0) == 5000
    assert np.count_nonzero(table.reshape(-1, ENTRY_BYTES).any(axis=1)) == 5000
    assert m.get_records(arena, pos, length).tolist() == list(range(5000))
    m.clear()
    assert (m.size, m.lookups, m.probes, m.latest_offset) == (0, 0, 0, -1)
    assert not table.any() and m._table is table
    assert m.get_records(arena, pos, length).tolist() == [-1] * 5000


@pytest.mark.parametrize("seed", range(4))
def test_mark_held_equals_reference_and_marks_exactly_the_held_offsets(seed, monkeypatch):
    """mark_held (the cleaner's copy pass: which records put are still their key's latest) on both maps; seeds 2
    and 3 scan the table's halves on two threads, as a large table's are."""
    if seed >= 2:
        monkeypatch.setattr(offset_map_module, "_MARK_IN_TWO_FROM", 100)
    rng = np.random.default_rng(seed)
    n = 3000
    keys = [b"key-%d" % k for k in rng.integers(0, 700, n)]
    offsets = np.sort(rng.choice(10 * n, n, replace=False)).astype(np.int64)
    arena, pos, length = pack(keys)
    base = int(offsets[0]) + 5  # offsets below the marks are skipped
    marked = []
    for cls in MAPS:
        m = cls(1200 * ENTRY_BYTES, 1.0)
        m.put_records(arena, pos, length, offsets, 0)
        marks = np.zeros(int(offsets[-1]) - base - 3, np.uint8)  # and so are those past them
        marks[offsets[(offsets >= base) & (offsets - base < len(marks))] - base] = 1
        marks[1::7] = np.where(marks[1::7] == 0, 9, marks[1::7])  # other marks stay as they are
        m.mark_held(marks, base, 1, 2)
        marked.append(marks)
    assert np.array_equal(marked[0], marked[1])
    latest = {}
    for k, o in zip(keys, offsets.tolist(), strict=True):
        latest[k] = o
    held = {o - base for o in latest.values() if 0 <= o - base < len(marked[0])}
    assert set(np.flatnonzero(marked[0] == 2).tolist()) == held
    assert not np.any(marked[0][np.flatnonzero(marked[1] == 9)] != 9)


def test_puts_in_one_chunk_that_meet_at_a_slot_equal_reference():
    """Within one chunk, the read-only lookups run before any put: two keys whose lookups both end at the same empty
    slot, and a key put twice, must still be put as Kafka puts them one by one (same slots, probes and sizes)."""
    slots = 11
    first_slot: dict[int, list[bytes]] = {}
    for i in range(1000):
        key = b"key-%d" % i
        first_slot.setdefault(probe_slot(hashlib.md5(key).digest(), 0, slots), []).append(key)
    a, b, c = next(keys for keys in first_slot.values() if len(keys) >= 3)[:3]
    keys = [a, b, a, c, b, a, b"other", c]
    arena, pos, length = pack(keys)
    offsets = np.arange(len(keys), dtype=np.int64)
    fast, ref = SkimpyOffsetMap(slots * 24, 1.0), ReferenceOffsetMap(slots * 24, 1.0)
    assert fast.put_records(arena, pos, length, offsets, 0) == ref.put_records(arena, pos, length, offsets, 0)
    assert fast.table_bytes() == ref.table_bytes()
    assert (fast.size, fast.lookups, fast.probes) == (ref.size, ref.lookups, ref.probes) == (4, 8, ref.probes)
    assert ref.probes > 8  # b and c collided with a
    digests = fast.digest_records(arena, pos, length, offsets, 0)
    again = SkimpyOffsetMap(slots * 24, 1.0)
    assert again.put_digests(digests, length, offsets, 0) == len(keys)
    assert again.table_bytes() == ref.table_bytes()
