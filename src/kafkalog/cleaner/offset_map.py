"""The log cleaner's dedupe map: Kafka's ``SkimpyOffsetMap`` (spec section 12, "The offset map").

A hash table from a key's MD5 digest to the latest offset seen for that key. The key itself is never stored:
each entry is the 16-byte digest followed by the offset as a big-endian int64, 24 bytes, in one flat table of
``slots = memory // 24`` entries. Collisions are resolved by open addressing; probe attempt ``i`` reads the
big-endian int32 at ``digest[min(i, 12)]``, adds ``max(0, i - 12)`` with Java's 32-bit wrap-around, and takes
``Utils.abs(probe) % slots`` (``Utils.abs`` maps ``Integer.MIN_VALUE`` to 0). The first 13 attempts are thus
successive windows of the digest; after that the probing degrades to linear. A slot whose 24 bytes are all
zero is empty; there are no deletes.

Two implementations with one behaviour and one table layout, byte for byte:

* :class:`SkimpyOffsetMap`, the one the cleaner uses. The table is a numpy ``uint8`` array of exactly
  ``slots * 24`` bytes in Kafka's layout (on huge pages when it is large), and the whole-run paths
  (:meth:`~SkimpyOffsetMap.put_records`, :meth:`~SkimpyOffsetMap.get_records`) are single numba kernels that hash
  (MD5, RFC 1321, written here, 16 keys at a time in SIMD lanes), probe and insert every record of a run without
  any Python work per record. They take a run a chunk of records at a time: hash the chunk, then probe its
  slots in passes with prefetching (probe ``a`` of every lookup still going, then probe ``a + 1``...), so that
  the cache misses of a large table overlap one another instead of adding up. Gets are answered by those passes;
  for puts the passes only read, bringing the slots into the cache, and the checks and puts then happen one
  record at a time, in order.
* ``ReferenceOffsetMap`` (in the tests, ``tests/reference_offset_map.py``), a plain transcription of Kafka's class
  over ``hashlib.md5`` and a ``bytearray``; the tests hold the fast map to it (same results, same counters, same
  table bytes).

Kafka behaviour kept on purpose:

* ``put`` sets ``latest_offset`` to the offset it puts (for an overwrite too), and raises when
  ``size >= slots`` before even looking for the key (Kafka's ``IllegalArgumentException``; here
  :class:`OffsetMapFullError`, a :class:`ValueError`), even when the key is already present.
* ``get`` gives up after ``slots + 12`` probes, so a lookup on a completely full map ends (returns -1).
* ``lookups`` counts every ``put`` and ``get``; ``probes`` counts every slot examined by either.

Where this differs from Kafka:

* ``collision_rate`` is 0.0 when nothing was looked up (Kafka divides 0 by 0 and gets NaN).
* ``memory`` above ``Integer.MAX_VALUE`` is refused (Kafka's constructor takes an ``int``, and the cleaner caps
  the per-thread buffer there), and so is a memory that gives no slot (Kafka would fail on first use).
* Kafka allocates all ``memory`` bytes; only the ``slots * 24`` bytes the table can use are allocated here.

Neither class is thread-safe (nor is Kafka's); the kernels release the GIL, so a cleaner thread running one
does not block the others.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import mmap
import operator
import threading

import numpy as np
from numba import njit

from ..layout import INT32_MAX, INT64_MAX, INT64_MIN
from ._intrinsics import load_i64, prefetch, store_i64, swap_be64
from .md5 import md5_records

__all__ = [
    "ENTRY_BYTES",
    "HASH_BYTES",
    "OffsetMapFullError",
    "SkimpyOffsetMap",
    "md5_digests",
    "probe_slot",
]

HASH_BYTES = 16
"""MD5 digest length (Kafka's ``hashSize`` with the default ``MD5`` algorithm)."""
ENTRY_BYTES = HASH_BYTES + 8
"""Bytes per entry: the digest and a big-endian int64 offset (Kafka's ``bytesPerEntry``)."""

_LINEAR_FROM = HASH_BYTES - 4  # 12: the last attempt that reads a fresh window of the digest

# Indices into SkimpyOffsetMap._state (one int64 array the kernels update in place).
_ENTRIES = 0
_LOOKUPS = 1
_PROBES = 2
_LATEST = 3

# put_records kernel status codes.
_DONE = 0  # every record consumed
_REACHED_MAX = 1  # size >= max_entries before a put: the map is "full" for the cleaner
_NO_SLOT = 2  # size >= slots before a put: Kafka's put throws
_BAD_KEY = 3  # a key runs outside the arena (checked before anything is put)


class OffsetMapFullError(ValueError):
    """A put on a map whose every slot is used (Kafka's ``IllegalArgumentException`` from ``put``)."""


def _full_message(entries: int, slots: int) -> str:
    return f"Attempted to add a new entry to a full offset map, entries: {entries}, slots: {slots}"


def _check_geometry(memory: int, load_factor: float) -> tuple[int, int, int, float]:
    """Validate the constructor arguments; return (memory, slots, max_entries, load_factor)."""
    memory = operator.index(memory)
    if memory > INT32_MAX:
        raise ValueError(f"offset map memory {memory} exceeds Integer.MAX_VALUE ({INT32_MAX}), Kafka's limit")
    slots = memory // ENTRY_BYTES
    if slots < 1:
        raise ValueError(f"offset map memory {memory} holds no {ENTRY_BYTES}-byte entry")
    load_factor = float(load_factor)
    if not math.isfinite(load_factor) or load_factor <= 0.0:
        raise ValueError(f"offset map load factor must be a positive finite number, not {load_factor}")
    # Kafka: (map.slots * this.dupBufferLoadFactor).toInt, a double product truncated toward zero.
    max_entries = min(int(slots * load_factor), INT32_MAX)
    return memory, slots, max_entries, load_factor


def _check_offset(offset: int) -> int:
    offset = operator.index(offset)
    if not INT64_MIN <= offset <= INT64_MAX:
        raise ValueError(f"offset {offset} is outside int64")
    return offset


_HUGE_PAGE = 2 << 20
"""Tables of at least this many bytes are anonymous mmaps advised to use transparent huge pages."""


def _zeroed_table(nbytes: int) -> np.ndarray:
    """A zero-filled ``uint8`` array of ``nbytes``.

    A large table is a private anonymous mmap advised ``MADV_HUGEPAGE``: the probes land at random across the table,
    and with 4 KiB pages nearly every one misses the TLB (a 128 MiB table spans 32768 pages, 64 huge ones); first
    touching it also takes 64 page faults instead of 32768. (numpy already advises its own large allocations so on
    Linux, but malloc's header leaves them off the 2 MiB boundary, losing a huge page, and the policy is numpy's;
    the mapping must be private: Python's default, shared, is shmem, which ``madvise`` alone does not put on huge
    pages.) The pages are the kernel's zero page until written, so an unused table costs nothing. Elsewhere, and for
    a small table, ``np.zeros``.
    """
    flags = getattr(mmap, "MAP_PRIVATE", None), getattr(mmap, "MAP_ANONYMOUS", None)
    if nbytes >= _HUGE_PAGE and None not in flags:
        try:
            buf = mmap.mmap(-1, nbytes, flags=flags[0] | flags[1])
        except OSError:
            return np.zeros(nbytes, dtype=np.uint8)
        advice = getattr(mmap, "MADV_HUGEPAGE", None)
        if advice is not None:
            with contextlib.suppress(OSError):  # no transparent huge pages in this kernel: ordinary pages
                buf.madvise(advice)
        return np.frombuffer(buf, dtype=np.uint8)  # keeps the mmap alive; unmapped with the last reference
    return np.zeros(nbytes, dtype=np.uint8)


def probe_slot(digest: bytes, attempt: int, slots: int) -> int:
    """Slot of probe ``attempt`` for ``digest`` (Kafka's ``positionOf`` divided by the entry size)."""
    start = min(attempt, _LINEAR_FROM)
    probe = int.from_bytes(digest[start : start + 4], "big", signed=True) + max(0, attempt - _LINEAR_FROM)
    probe = (probe + 2**31) % 2**32 - 2**31  # Java int addition wraps
    return (0 if probe == -(2**31) else abs(probe)) % slots  # Utils.abs(Integer.MIN_VALUE) == 0


# --------------------------------------------------------------------------------------------------------------
# The table kernels. ``table`` is uint8[slots * 24]: slot s is the 16 digest bytes at 24 * s and the big-endian
# offset after them. A slot is read as three 8-byte words (the digest's two, compared with the digest's own two words
# as loaded from its bytes, and the offset's); an empty slot is three zero words. The helpers run per probe are
# inlined by numba (inline="always"): called, each one increfs and decrefs its array arguments, atomic operations
# that cost about as much as a prefetched probe (measured: 52 against 28 ns per lookup).


@njit(cache=True, nogil=True, inline="always")
def _slot_of(h, hoff, attempt, slots):
    """Kafka's positionOf(hash, attempt) / bytesPerEntry, with Java int arithmetic."""
    k = hoff + (attempt if attempt < 12 else 12)
    probe = (np.int64(h[k]) << 24) | (np.int64(h[k + 1]) << 16) | (np.int64(h[k + 2]) << 8) | np.int64(h[k + 3])
    if attempt > 12:
        probe += attempt - 12
    probe &= 0xFFFFFFFF
    if probe >= 0x80000000:  # as a signed int32: negative
        probe = 0 if probe == 0x80000000 else 0x100000000 - probe  # Utils.abs; MIN_VALUE -> 0
    return probe % slots


@njit(cache=True, nogil=True, inline="always")
def _prefetch_slot(table, slots, h, hoff, attempt):
    """Prefetch the slot of probe ``attempt`` of ``h`` (both cache lines: a slot can straddle two)."""
    base = _slot_of(h, hoff, attempt, slots) * 24
    prefetch(table, base)
    prefetch(table, base + 23)


@njit(cache=True, nogil=True, inline="always")
def _put_slot(table, slots, h, hoff, offset_be):
    """Kafka's put after the full check: probe for ``h``, overwrite its offset or take the first empty slot.

    ``offset_be`` is the offset already in big-endian order. Returns (probes, 1 if a slot was taken else 0).
    """
    h0 = load_i64(h, hoff)
    h1 = load_i64(h, hoff + 8)
    attempt = 0
    while True:
        base = _slot_of(h, hoff, attempt, slots) * 24
        attempt += 1
        t0 = load_i64(table, base)
        t1 = load_i64(table, base + 8)
        if (t0 | t1 | load_i64(table, base + 16)) == 0:
            store_i64(table, base, h0)
            store_i64(table, base + 8, h1)
            store_i64(table, base + 16, offset_be)
            return attempt, 1
        if t0 == h0 and t1 == h1:
            store_i64(table, base + 16, offset_be)
            return attempt, 0


@njit(cache=True, nogil=True, inline="always")
def _get_slot(table, slots, h, hoff, attempt):
    """Kafka's get from probe ``attempt`` on: (the offset stored for ``h``, or -1 at an empty slot or once
    ``slots + 12`` probes in all were made; the number of probes made here)."""
    h0 = load_i64(h, hoff)
    h1 = load_i64(h, hoff + 8)
    first = attempt
    while attempt < slots + 12:
        base = _slot_of(h, hoff, attempt, slots) * 24
        attempt += 1
        t0 = load_i64(table, base)
        t1 = load_i64(table, base + 8)
        t2 = load_i64(table, base + 16)
        if (t0 | t1 | t2) == 0:
            return np.int64(-1), attempt - first
        if t0 == h0 and t1 == h1:
            return swap_be64(t2), attempt - first
    return np.int64(-1), attempt - first


@njit(cache=True, nogil=True)
def _put_hash(table, slots, h, hoff, offset, state):
    """A single put of the digest ``h[hoff:hoff+16]`` (after the full check), updating ``state``."""
    probes, taken = _put_slot(table, slots, h, hoff, swap_be64(offset))
    state[_ENTRIES] += taken
    state[_LOOKUPS] += 1
    state[_PROBES] += probes
    state[_LATEST] = offset


@njit(cache=True, nogil=True)
def _get_hash(table, slots, h, hoff, state):
    """A single get of the digest ``h[hoff:hoff+16]``, updating ``state``."""
    offset, probes = _get_slot(table, slots, h, hoff, 0)
    state[_LOOKUPS] += 1
    state[_PROBES] += probes
    return offset


@njit(cache=True, nogil=True)
def _first_bad_key(arena_len, key_pos, key_len):
    """Index of the first non-null key outside ``arena[0:arena_len]``, or -1."""
    for i in range(key_len.shape[0]):
        n = key_len[i]
        if n >= 0 and (key_pos[i] < 0 or key_pos[i] > arena_len - n):
            return i
    return -1


_MARK_IN_TWO_FROM = 1 << 20
"""Slots in each half from which mark_held scans the table's two halves on two threads (a 128 MiB table: 10 ms
instead of 19, between the cleaner's two passes)."""
_CHUNK = 1024
"""Records hashed at a time, before they are put or looked up (their digests take ``16 * _CHUNK`` bytes)."""
_AHEAD = 32
"""How many records ahead of its put or get a record's first slot is prefetched."""


@njit(cache=True, nogil=True)
def _probe_passes(table, slots, digests, going, count, out, lo, ended_at):
    """Probes 0 to 12 of the lookups ``going[:count]`` (indices in the chunk), in passes, read-only.

    Pass ``a`` makes probe ``a`` of every lookup that has not ended yet, prefetching ``_AHEAD`` lookups ahead, so a
    collision costs one more prefetched probe rather than a cache miss right after the first one. A lookup ends at
    an empty slot or at its own digest; its result goes to ``out[lo + k]`` (-1 for an empty slot), and where it
    ended to ``ended_at[k]``: the slot's byte position times 16 plus the probes made (-1 for a lookup not ended).
    Probes 0 to 12 land at random (windows of the digest); from 13 on they are linear, so the lookups still going
    after 13 passes are left to finish one at a time. Returns (lookups still going, now first in ``going``; probes
    made).
    """
    probes = 0
    for j in range(count):
        ended_at[going[j]] = -1
    for attempt in range(_LINEAR_FROM + 1):
        if count == 0:
            break
        for j in range(min(_AHEAD, count)):
            _prefetch_slot(table, slots, digests, 16 * going[j], attempt)
        left = 0
        for j in range(count):
            if j + _AHEAD < count:
                _prefetch_slot(table, slots, digests, 16 * going[j + _AHEAD], attempt)
            k = going[j]
            hoff = 16 * k
            base = _slot_of(digests, hoff, attempt, slots) * 24
            t0 = load_i64(table, base)
            t1 = load_i64(table, base + 8)
            t2 = load_i64(table, base + 16)
            if (t0 | t1 | t2) == 0:
                out[lo + k] = -1
                ended_at[k] = base * 16 + attempt + 1
            elif t0 == load_i64(digests, hoff) and t1 == load_i64(digests, hoff + 8):
                out[lo + k] = swap_be64(t2)
                ended_at[k] = base * 16 + attempt + 1
            else:
                going[left] = k  # left <= j: that entry was read already
                left += 1
        probes += count
        count = left
    return count, probes


@njit(cache=True, nogil=True, inline="always")
def _chunk_takes(key_len, offsets, start_offset, lo, hi, take, going):
    """Which records of lo..hi-1 a put takes (keyed, at or after ``start_offset``): ``take[k]``, and their chunk
    indices in ``going``; returns how many."""
    count = np.int64(0)  # not the literal 0: numba would compile _probe_passes for that type too
    for k in range(hi - lo):
        take[k] = key_len[lo + k] >= 0 and offsets[lo + k] >= start_offset
        if take[k]:
            going[count] = k
            count += 1
    return count


@njit(cache=True, nogil=True, inline="always")
def _put_known(table, slots, h, hoff, offset_be, ended_at, found):
    """A put where the read-only lookup of ``h`` ended (see :func:`_probe_passes`): its slot still holds ``h`` (a
    digest never leaves a slot), or is still empty, and every slot probed before it is as it was; so Kafka's put
    ends there too, after as many probes. Otherwise (a lookup not ended, or an earlier put of this chunk took the
    empty slot) the put probes again. Returns (probes, 1 if a slot was taken else 0)."""
    if ended_at >= 0:
        base = ended_at >> 4
        if found >= 0:
            store_i64(table, base + 16, offset_be)
            return ended_at & 15, 0
        if (load_i64(table, base) | load_i64(table, base + 8) | load_i64(table, base + 16)) == 0:
            store_i64(table, base, load_i64(h, hoff))
            store_i64(table, base + 8, load_i64(h, hoff + 8))
            store_i64(table, base + 16, offset_be)
            return ended_at & 15, 1
    return _put_slot(table, slots, h, hoff, offset_be)


@njit(cache=True, nogil=True, inline="always")
def _put_chunk(table, slots, max_entries, digests, take, going, count, found, ended_at, offsets, lo, hi, counters):
    """The puts of records lo..hi-1 whose digests are ``digests[16 * (i - lo):]``: the read-only lookups first
    (:func:`_probe_passes`, which bring every slot the puts examine into the cache with prefetched reads, and say
    where each would end), then the checks and puts record by record, in order. ``counters`` is laid out as the
    map's state; returns (status, the record where a put was refused or ``hi``)."""
    _probe_passes(table, slots, digests, going, count, found, np.int64(0), ended_at)
    for k in range(hi - lo):
        if take[k]:
            if counters[_ENTRIES] >= max_entries:
                return _REACHED_MAX, lo + k
            if counters[_ENTRIES] >= slots:
                return _NO_SLOT, lo + k
            offset = offsets[lo + k]
            used, taken = _put_known(table, slots, digests, 16 * k, swap_be64(offset), ended_at[k], found[k])
            counters[_ENTRIES] += taken
            counters[_LOOKUPS] += 1
            counters[_PROBES] += used
            counters[_LATEST] = offset
    return _DONE, hi


@njit(cache=True, nogil=True)
def _put_records(table, slots, state, max_entries, arena, key_pos, key_len, offsets, start_offset):
    """Cleaner.buildOffsetMapForSegment's record loop over one run; returns (index, status).

    A chunk of records is hashed, then put (:func:`_put_chunk`). Neither the hashing nor the read-only lookups
    change the map (a put between two records of a chunk can change what the later one finds; then it probes a
    slot that was not warmed, which costs time, not correctness).
    """
    n = offsets.shape[0]
    bad = _first_bad_key(arena.shape[0], key_pos, key_len)
    if bad >= 0:
        return bad, _BAD_KEY
    digests = np.empty(_CHUNK * 16, np.uint8)
    take = np.empty(_CHUNK, np.bool_)
    going = np.empty(_CHUNK, np.int64)
    found = np.empty(_CHUNK, np.int64)  # what the read-only lookups find
    ended_at = np.empty(_CHUNK, np.int64)  # and where
    counters = state[:4].copy()
    status, stop = _DONE, n
    for lo in range(0, n, _CHUNK):
        hi = min(lo + _CHUNK, n)
        count = _chunk_takes(key_len, offsets, start_offset, lo, hi, take, going)
        md5_records(arena, key_pos, key_len, take, lo, hi, digests)
        status, stop = _put_chunk(table, slots, max_entries, digests, take, going, count, found, ended_at, offsets,
                                  lo, hi, counters)  # fmt: skip
        if status != _DONE:
            break
    state[:4] = counters
    return stop, status


@njit(cache=True, nogil=True)
def _digest_records(arena, key_pos, key_len, offsets, start_offset, out):
    """MD5 of the key of every record a put takes (see :func:`_chunk_takes`) into ``out[16 * i:]``; the digests
    of the others are left as they were. Returns the first key outside the arena, or -1 (nothing hashed then)."""
    n = offsets.shape[0]
    bad = _first_bad_key(arena.shape[0], key_pos, key_len)
    if bad >= 0:
        return bad
    take = np.empty(_CHUNK, np.bool_)
    going = np.empty(_CHUNK, np.int64)
    for lo in range(0, n, _CHUNK):
        hi = min(lo + _CHUNK, n)
        _chunk_takes(key_len, offsets, start_offset, lo, hi, take, going)
        md5_records(arena, key_pos, key_len, take, lo, hi, out[16 * lo : 16 * hi])
    return np.int64(-1)


@njit(cache=True, nogil=True)
def _put_digests(table, slots, state, max_entries, digests, key_len, offsets, start_offset):
    """:func:`_put_records` with the digests made beforehand by :func:`_digest_records`; returns (index, status)."""
    n = offsets.shape[0]
    take = np.empty(_CHUNK, np.bool_)
    going = np.empty(_CHUNK, np.int64)
    found = np.empty(_CHUNK, np.int64)
    ended_at = np.empty(_CHUNK, np.int64)
    counters = state[:4].copy()
    status, stop = _DONE, n
    for lo in range(0, n, _CHUNK):
        hi = min(lo + _CHUNK, n)
        count = _chunk_takes(key_len, offsets, start_offset, lo, hi, take, going)
        status, stop = _put_chunk(table, slots, max_entries, digests[16 * lo : 16 * hi], take, going, count, found,
                                  ended_at, offsets, lo, hi, counters)  # fmt: skip
        if status != _DONE:
            break
    state[:4] = counters
    return stop, status


@njit(cache=True, nogil=True)
def _get_records(table, slots, state, arena, key_pos, key_len, out):
    """get() for every record; -1 for null keys (which are not looked up). Returns the first bad key or -1.

    A chunk of records is hashed, then looked up in passes (:func:`_probe_passes`); a get changes nothing, so the
    order of the lookups makes no difference to the results or to the counters.
    """
    n = key_len.shape[0]
    bad = _first_bad_key(arena.shape[0], key_pos, key_len)
    if bad >= 0:
        return bad
    digests = np.empty(_CHUNK * 16, np.uint8)
    take = np.empty(_CHUNK, np.bool_)
    going = np.empty(_CHUNK, np.int64)
    ended_at = np.empty(_CHUNK, np.int64)  # not used by a get
    lookups = 0
    probes = 0
    for lo in range(0, n, _CHUNK):
        hi = min(lo + _CHUNK, n)
        m = hi - lo
        count = np.int64(0)  # not the literal 0: numba would compile _probe_passes for that type too
        for k in range(m):
            take[k] = key_len[lo + k] >= 0
            out[lo + k] = -1
            if take[k]:
                going[count] = k
                count += 1
        lookups += count
        md5_records(arena, key_pos, key_len, take, lo, hi, digests)
        count, used = _probe_passes(table, slots, digests, going, count, out, lo, ended_at)
        probes += used
        for j in range(count):
            offset, used = _get_slot(table, slots, digests, 16 * going[j], _LINEAR_FROM + 1)
            out[lo + going[j]] = offset
            probes += used
    state[_LOOKUPS] += lookups
    state[_PROBES] += probes
    return -1


@njit(cache=True, nogil=True)
def _mark_held(table, lo, hi, marks, base, from_mark, to_mark):
    """marks[o - base]: from_mark -> to_mark for the offset o of every used slot of lo..hi-1 (inside marks)."""
    cap = marks.shape[0]
    for s in range(lo, hi):
        p = 24 * s
        t2 = load_i64(table, p + 16)
        if (load_i64(table, p) | load_i64(table, p + 8) | t2) == 0:
            continue
        rel = swap_be64(t2) - base
        if 0 <= rel < cap and marks[rel] == from_mark:
            marks[rel] = to_mark


def _as_arena(arena: np.ndarray) -> np.ndarray:
    arena = np.asarray(arena)
    if arena.dtype != np.uint8 or arena.ndim != 1:
        raise TypeError(f"arena must be a 1-D uint8 array, not {arena.dtype} with {arena.ndim} dimensions")
    return np.ascontiguousarray(arena)


def _as_int64(name: str, values: np.ndarray, n: int | None = None) -> np.ndarray:
    values = np.asarray(values)
    if values.ndim != 1 or (values.size and values.dtype.kind not in "iu"):
        raise TypeError(f"{name} must be a 1-D integer array")
    if values.dtype.kind == "u" and values.dtype.itemsize == 8 and values.size and values.max() > INT64_MAX:
        raise ValueError(f"{name} has values outside int64")
    if n is not None and values.shape[0] != n:
        raise ValueError(f"{name} has {values.shape[0]} entries, expected {n}")
    return np.ascontiguousarray(values, dtype=np.int64)


def _key_arrays(arena, key_pos, key_len, offsets=None):
    arena = _as_arena(arena)
    key_len = _as_int64("key_len", key_len)
    n = key_len.shape[0]
    key_pos = _as_int64("key_pos", key_pos, n)
    if offsets is not None:
        offsets = _as_int64("offsets", offsets, n)
    return arena, key_pos, key_len, offsets


def _bad_key_error(i: int, key_pos: np.ndarray, key_len: np.ndarray, arena_len: int) -> ValueError:
    return ValueError(f"key {i} at [{key_pos[i]}, {key_pos[i] + key_len[i]}) is outside the {arena_len}-byte arena")


def md5_digests(arena: np.ndarray, key_pos: np.ndarray, key_len: np.ndarray) -> np.ndarray:
    """MD5 of every key ``arena[key_pos[i] : key_pos[i] + key_len[i]]`` with the numba kernel, as (n, 16) uint8.

    Null keys (``key_len < 0``) are not allowed here.
    """
    arena, key_pos, key_len, _ = _key_arrays(arena, key_pos, key_len)
    if key_len.size and key_len.min() < 0:
        raise ValueError("md5_digests has no digest for a null key (key_len < 0)")
    bad = _first_bad_key(arena.shape[0], key_pos, key_len)
    if bad >= 0:
        raise _bad_key_error(bad, key_pos, key_len, arena.shape[0])
    n = key_len.shape[0]
    out = np.empty(n * HASH_BYTES, np.uint8)
    md5_records(arena, key_pos, key_len, np.ones(n, np.bool_), 0, n, out)
    return out.reshape(-1, HASH_BYTES)


class _StateCounter:
    """A read-only int attribute of SkimpyOffsetMap: one slot of its ``_state`` array (the kernels update them)."""

    def __init__(self, slot: int) -> None:
        self.slot = slot

    def __get__(self, offset_map: SkimpyOffsetMap, owner: type) -> int:
        return int(offset_map._state[self.slot])


class SkimpyOffsetMap:
    """Kafka's ``SkimpyOffsetMap``: MD5 digest -> latest offset, in a numpy table of ``slots * 24`` bytes.

    ``memory`` is the byte budget (Kafka's per-thread ``dedupe.buffer.size / threads``); the table takes
    ``slots * 24 <= memory`` bytes of it (:attr:`memory_bytes`). ``load_factor`` is the cleaner's
    ``log.cleaner.io.buffer.load.factor``: :meth:`put_records` stops once the map holds
    ``max_entries = int(slots * load_factor)`` entries.
    """

    def __init__(self, memory: int, load_factor: float = 0.9) -> None:
        self.memory, self.slots, self.max_entries, self.load_factor = _check_geometry(memory, load_factor)
        self._table = _zeroed_table(self.slots * ENTRY_BYTES)
        self._state = np.array([0, 0, 0, -1], dtype=np.int64)  # entries, lookups, probes, latest offset
        self.memory_bytes = self._table.nbytes

    def __repr__(self) -> str:
        return f"SkimpyOffsetMap(slots={self.slots}, size={self.size}, latest_offset={self.latest_offset})"

    # Entries in the map (overwrites of a key already present do not count).
    size = _StateCounter(_ENTRIES)
    # The offset of the last put, or the last update_latest_offset(); -1 when neither happened.
    latest_offset = _StateCounter(_LATEST)
    # Number of puts and gets since construction or clear().
    lookups = _StateCounter(_LOOKUPS)
    # Number of slots examined by those puts and gets.
    probes = _StateCounter(_PROBES)

    @property
    def utilization(self) -> float:
        return self.size / self.slots

    @property
    def collision_rate(self) -> float:
        """Kafka's ``(probes - lookups) / lookups``: extra probes per lookup; 0.0 before any lookup."""
        lookups = self.lookups
        return (self.probes - lookups) / lookups if lookups else 0.0

    def clear(self) -> None:
        """Empty the map and reset the counters and the latest offset (Kafka zero-fills its buffer too).

        Only a table that holds an entry is zero-filled: every byte written is part of an entry (a new one, or the
        offset of one already there), so with no entry the table is all zeros, and a new table's pages stay
        untouched until the first put.
        """
        if self._state[_ENTRIES]:
            self._table.fill(0)
        self._state[:] = (0, 0, 0, -1)

    def update_latest_offset(self, offset: int) -> None:
        self._state[_LATEST] = _check_offset(offset)

    def put(self, key: bytes, offset: int) -> None:
        """Map ``key`` to ``offset`` (overwriting any offset it had); raise :class:`OffsetMapFullError` when full."""
        self._put_digest(hashlib.md5(key).digest(), offset)

    def get(self, key: bytes) -> int:
        """The offset mapped to ``key``, or -1."""
        return self._get_digest(hashlib.md5(key).digest())

    def _put_digest(self, digest: bytes, offset: int) -> None:
        offset = _check_offset(offset)
        if self.size >= self.slots:
            raise OffsetMapFullError(_full_message(self.size, self.slots))
        h = np.frombuffer(bytearray(digest), np.uint8)
        _put_hash(self._table, self.slots, h, 0, np.int64(offset), self._state)

    def _get_digest(self, digest: bytes) -> int:
        return int(_get_hash(self._table, self.slots, np.frombuffer(bytearray(digest), np.uint8), 0, self._state))

    def table_bytes(self) -> bytes:
        """A copy of the table in Kafka's layout (digest, then the big-endian offset, per 24-byte slot)."""
        return self._table.tobytes()

    def put_records(
        self,
        arena: np.ndarray,
        key_pos: np.ndarray,
        key_len: np.ndarray,
        offsets: np.ndarray,
        start_offset: int,
    ) -> int:
        """Put every record of a run, in order, as Kafka's ``buildOffsetMapForSegment`` does.

        Record ``i`` has key ``arena[key_pos[i] : key_pos[i] + key_len[i]]`` (``key_len[i] < 0``: no key) and
        offset ``offsets[i]``. Records without a key or with ``offset < start_offset`` are skipped. Before each
        put, when ``size >= max_entries`` the map is full for the cleaner and ``i`` is returned; the records
        before it are in the map. Returns ``len(offsets)`` when every record was consumed.

        A key outside the arena raises :class:`ValueError` before anything is put. With a load factor above 1
        the map can run out of slots first: then :class:`OffsetMapFullError` is raised, like Kafka's ``put``,
        with the records before that one put.
        """
        arena, key_pos, key_len, offsets = _key_arrays(arena, key_pos, key_len, offsets)
        start = np.int64(_check_offset(start_offset))
        index, status = _put_records(
            self._table, self.slots, self._state, self.max_entries, arena, key_pos, key_len, offsets, start
        )
        if status == _BAD_KEY:
            raise _bad_key_error(index, key_pos, key_len, arena.shape[0])
        return self._put_result(index, status)

    @staticmethod
    def digest_records(
        arena: np.ndarray,
        key_pos: np.ndarray,
        key_len: np.ndarray,
        offsets: np.ndarray,
        start_offset: int,
        out: np.ndarray | None = None,
    ) -> np.ndarray:
        """The MD5 digests :meth:`put_records` would make for these records, for :meth:`put_digests`: uint8, 16
        bytes per record (those of records it would skip are undefined), into ``out`` when given. It reads no map
        state, so another thread can hash the next run while this map takes the current one. A key outside the arena
        raises ValueError."""
        arena, key_pos, key_len, offsets = _key_arrays(arena, key_pos, key_len, offsets)
        n = offsets.shape[0] * HASH_BYTES
        if out is None:
            out = np.empty(n, np.uint8)
        elif out.dtype != np.uint8 or out.shape != (n,) or not out.flags.c_contiguous:
            raise ValueError(f"out must be {n} contiguous uint8 bytes, 16 per record")
        bad = _digest_records(arena, key_pos, key_len, offsets, np.int64(_check_offset(start_offset)), out)
        if bad >= 0:
            raise _bad_key_error(bad, key_pos, key_len, arena.shape[0])
        return out

    def put_digests(self, digests: np.ndarray, key_len: np.ndarray, offsets: np.ndarray, start_offset: int) -> int:
        """:meth:`put_records` of the records whose digests :meth:`digest_records` made (with the same
        ``key_len``, ``offsets`` and ``start_offset``); same result, counters and table."""
        key_len = _as_int64("key_len", key_len)
        offsets = _as_int64("offsets", offsets, key_len.shape[0])
        if digests.dtype != np.uint8 or digests.shape != (offsets.shape[0] * HASH_BYTES,):
            raise ValueError(f"digests must be {offsets.shape[0] * HASH_BYTES} uint8 bytes, 16 per record")
        start = np.int64(_check_offset(start_offset))
        index, status = _put_digests(self._table, self.slots, self._state, self.max_entries,
                                     np.ascontiguousarray(digests), key_len, offsets, start)  # fmt: skip
        return self._put_result(index, status)

    def _put_result(self, index: int, status: int) -> int:
        if status == _NO_SLOT:
            raise OffsetMapFullError(_full_message(self.size, self.slots))
        return int(index)

    def mark_held(self, marks: np.ndarray, base: int, from_mark: int, to_mark: int) -> None:
        """Set ``marks[o - base]`` (uint8) to ``to_mark`` where it is ``from_mark``, for every offset ``o`` the map
        holds (one pass over the table; lookups and probes are not counted). The cleaner's copy pass uses it to
        learn which of the records it put are still their key's latest."""
        if marks.dtype != np.uint8 or marks.ndim != 1:
            raise TypeError("marks must be a 1-D uint8 array")
        args = (marks, np.int64(base), np.uint8(from_mark), np.uint8(to_mark))
        half = self.slots // 2
        if half < _MARK_IN_TWO_FROM:
            _mark_held(self._table, 0, self.slots, *args)
            return
        # A large table in two halves at once (the kernel releases the GIL): every offset is held by one slot at
        # most, so the halves never write the same mark.
        other = threading.Thread(target=_mark_held, args=(self._table, half, self.slots, *args),
                                 name="offset-map-marks")  # fmt: skip
        other.start()
        try:
            _mark_held(self._table, 0, half, *args)
        finally:
            other.join()

    def get_records(self, arena: np.ndarray, key_pos: np.ndarray, key_len: np.ndarray) -> np.ndarray:
        """``get`` of every record's key as an int64 array; -1 for absent keys and for null keys (not looked up)."""
        arena, key_pos, key_len, _ = _key_arrays(arena, key_pos, key_len)
        out = np.empty(key_len.shape[0], dtype=np.int64)
        bad = _get_records(self._table, self.slots, self._state, arena, key_pos, key_len, out)
        if bad >= 0:
            raise _bad_key_error(bad, key_pos, key_len, arena.shape[0])
        return out
