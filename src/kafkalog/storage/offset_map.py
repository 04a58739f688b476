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
  ``slots * 24`` bytes in Kafka's layout, and the whole-run paths (:meth:`~SkimpyOffsetMap.put_records`,
  :meth:`~SkimpyOffsetMap.get_records`) are single numba kernels that hash (MD5, RFC 1321, written here),
  probe and insert every record of a run without any Python work per record. They hash 64 records ahead of
  their insertion and prefetch each one's first slot meanwhile, so that the cache misses of a large table
  overlap the hashing instead of adding to it; the checks and puts still happen one record at a time, in order.
* :class:`ReferenceOffsetMap`, a plain transcription of Kafka's class over ``hashlib.md5`` and a
  ``bytearray``; the tests hold the fast map to it (same results, same counters, same table bytes).

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

import hashlib
import math
import operator

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = [
    "ENTRY_BYTES",
    "HASH_BYTES",
    "OffsetMapFullError",
    "ReferenceOffsetMap",
    "SkimpyOffsetMap",
    "md5_digests",
    "probe_slot",
]

HASH_BYTES = 16
"""MD5 digest length (Kafka's ``hashSize`` with the default ``MD5`` algorithm)."""
ENTRY_BYTES = HASH_BYTES + 8
"""Bytes per entry: the digest and a big-endian int64 offset (Kafka's ``bytesPerEntry``)."""

_LINEAR_FROM = HASH_BYTES - 4  # 12: the last attempt that reads a fresh window of the digest
_INT32_MAX = 2**31 - 1
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1

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
    if memory > _INT32_MAX:
        raise ValueError(f"offset map memory {memory} exceeds Integer.MAX_VALUE ({_INT32_MAX}), Kafka's limit")
    slots = memory // ENTRY_BYTES
    if slots < 1:
        raise ValueError(f"offset map memory {memory} holds no {ENTRY_BYTES}-byte entry")
    load_factor = float(load_factor)
    if not math.isfinite(load_factor) or load_factor <= 0.0:
        raise ValueError(f"offset map load factor must be a positive finite number, not {load_factor}")
    # Kafka: (map.slots * this.dupBufferLoadFactor).toInt, a double product truncated toward zero.
    max_entries = min(int(slots * load_factor), _INT32_MAX)
    return memory, slots, max_entries, load_factor


def _check_offset(offset: int) -> int:
    offset = operator.index(offset)
    if not _INT64_MIN <= offset <= _INT64_MAX:
        raise ValueError(f"offset {offset} is outside int64")
    return offset


def probe_slot(digest: bytes, attempt: int, slots: int) -> int:
    """Slot of probe ``attempt`` for ``digest`` (Kafka's ``positionOf`` divided by the entry size)."""
    start = min(attempt, _LINEAR_FROM)
    probe = int.from_bytes(digest[start : start + 4], "big", signed=True) + max(0, attempt - _LINEAR_FROM)
    probe = (probe + 2**31) % 2**32 - 2**31  # Java int addition wraps
    return (0 if probe == -(2**31) else abs(probe)) % slots  # Utils.abs(Integer.MIN_VALUE) == 0


# --------------------------------------------------------------------------------------------------------------
# MD5 (RFC 1321) in numba, on uint32 words. numba widens uint32 arithmetic to 64 bits, so each step truncates
# explicitly with np.uint32(...) (about 15% faster here than int64 words masked with 0xFFFFFFFF). Unrolling the 64 steps
# as the RFC's MD5Transform does was no faster and took four times longer to compile. Never mix these unsigned values
# with a signed int64 in one operation: numba would make the result a float.

_MD5_K = np.array(
    [
        0xD76AA478, 0xE8C7B756, 0x242070DB, 0xC1BDCEEE, 0xF57C0FAF, 0x4787C62A, 0xA8304613, 0xFD469501,
        0x698098D8, 0x8B44F7AF, 0xFFFF5BB1, 0x895CD7BE, 0x6B901122, 0xFD987193, 0xA679438E, 0x49B40821,
        0xF61E2562, 0xC040B340, 0x265E5A51, 0xE9B6C7AA, 0xD62F105D, 0x02441453, 0xD8A1E681, 0xE7D3FBC8,
        0x21E1CDE6, 0xC33707D6, 0xF4D50D87, 0x455A14ED, 0xA9E3E905, 0xFCEFA3F8, 0x676F02D9, 0x8D2A4C8A,
        0xFFFA3942, 0x8771F681, 0x6D9D6122, 0xFDE5380C, 0xA4BEEA44, 0x4BDECFA9, 0xF6BB4B60, 0xBEBFBC70,
        0x289B7EC6, 0xEAA127FA, 0xD4EF3085, 0x04881D05, 0xD9D4D039, 0xE6DB99E5, 0x1FA27CF8, 0xC4AC5665,
        0xF4292244, 0x432AFF97, 0xAB9423A7, 0xFC93A039, 0x655B59C3, 0x8F0CCC92, 0xFFEFF47D, 0x85845DD1,
        0x6FA87E4F, 0xFE2CE6E0, 0xA3014314, 0x4E0811A1, 0xF7537E82, 0xBD3AF235, 0x2AD7D2BB, 0xEB86D391,
    ],
    dtype=np.uint32,
)  # fmt: skip
"""The sine table T[1..64] of RFC 1321, section 3.4."""
_MD5_S = np.array([7, 12, 17, 22] * 4 + [5, 9, 14, 20] * 4 + [4, 11, 16, 23] * 4 + [6, 10, 15, 21] * 4, dtype=np.uint32)
"""The left-rotation amount of each of the 64 steps."""


@njit(cache=True, nogil=True, inline="always")
def _step(a, b, f, i, x):
    """One MD5 step: b + ((a + f + T[i] + x) <<< s[i]), mod 2**32."""
    t = np.uint32(a + f + _MD5_K[i] + x)
    s = _MD5_S[i]
    return np.uint32(b + np.uint32((t << s) | (t >> (np.uint32(32) - s))))


@njit(cache=True, nogil=True)
def _md5_block(buf, off, a0, b0, c0, d0, x):
    """MD5Transform: compress the 64-byte block ``buf[off:off+64]`` into the state; ``x`` is uint32[16] scratch."""
    for j in range(16):
        p = off + 4 * j
        x[j] = (
            np.uint32(buf[p])
            | (np.uint32(buf[p + 1]) << np.uint32(8))
            | (np.uint32(buf[p + 2]) << np.uint32(16))
            | (np.uint32(buf[p + 3]) << np.uint32(24))
        )
    a, b, c, d = a0, b0, c0, d0
    for i in range(16):
        a, b, c, d = d, _step(a, b, (b & c) | (~b & d), i, x[i]), b, c
    for i in range(16, 32):
        a, b, c, d = d, _step(a, b, (b & d) | (c & ~d), i, x[(5 * i + 1) & 15]), b, c
    for i in range(32, 48):
        a, b, c, d = d, _step(a, b, b ^ c ^ d, i, x[(3 * i + 5) & 15]), b, c
    for i in range(48, 64):
        a, b, c, d = d, _step(a, b, np.uint32(c ^ (b | np.uint32(~d))), i, x[(7 * i) & 15]), b, c
    return np.uint32(a0 + a), np.uint32(b0 + b), np.uint32(c0 + c), np.uint32(d0 + d)


@njit(cache=True, nogil=True)
def _md5(arena, pos, length, out, ooff, x, tail):
    """MD5 of ``arena[pos:pos+length]`` into ``out[ooff:ooff+16]``; ``x`` and ``tail`` (128 bytes) are scratch."""
    a = np.uint32(0x67452301)
    b = np.uint32(0xEFCDAB89)
    c = np.uint32(0x98BADCFE)
    d = np.uint32(0x10325476)
    full = length >> 6
    for k in range(full):
        a, b, c, d = _md5_block(arena, pos + 64 * k, a, b, c, d, x)
    rest = length - 64 * full
    start = pos + 64 * full
    for j in range(rest):
        tail[j] = arena[start + j]
    tail[rest] = 0x80
    end = 64 if rest < 56 else 128
    for j in range(rest + 1, end - 8):
        tail[j] = 0
    bits = np.int64(length) << 3  # the length in bits, mod 2**64, little-endian
    for j in range(8):
        tail[end - 8 + j] = (bits >> (8 * j)) & 0xFF
    a, b, c, d = _md5_block(tail, 0, a, b, c, d, x)
    if end == 128:
        a, b, c, d = _md5_block(tail, 64, a, b, c, d, x)
    for j in range(4):
        shift = np.uint32(8 * j)
        out[ooff + j] = np.uint8((a >> shift) & np.uint32(0xFF))
        out[ooff + 4 + j] = np.uint8((b >> shift) & np.uint32(0xFF))
        out[ooff + 8 + j] = np.uint8((c >> shift) & np.uint32(0xFF))
        out[ooff + 12 + j] = np.uint8((d >> shift) & np.uint32(0xFF))


# --------------------------------------------------------------------------------------------------------------
# The table kernels. ``table`` is uint8[slots * 24]; ``state`` is int64[4] (entries, lookups, probes, latest).


@intrinsic
def _prefetch(typingctx, array, index):
    """Prefetch the cache line of the uint8 ``array[index]`` (llvm.prefetch: a hint that never faults)."""
    if not (isinstance(array, types.Array) and array.dtype == types.uint8 and isinstance(index, types.Integer)):
        return None

    def codegen(context, builder, signature, args):
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        i8p = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        ptr = builder.bitcast(builder.gep(ary.data, [args[1]]), i8p)
        # LLVM auto-upgrades the unsuffixed name to the overload for the pointer type, typed or opaque.
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]),
                                            "llvm.prefetch")  # fmt: skip
        builder.call(fn, [ptr, i32(0), i32(3), i32(1)])  # read, keep in all levels, data cache
        return context.get_dummy_value()

    return types.void(array, index), codegen


@njit(cache=True, nogil=True)
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
def _is_empty(table, base):
    # branch-free over the 24 bytes: LLVM turns these loops into a few wide loads
    v = 0
    for j in range(24):
        v |= table[base + j]
    return v == 0


@njit(cache=True, nogil=True, inline="always")
def _same_hash(table, base, h, hoff):
    v = 0
    for j in range(16):
        v |= table[base + j] ^ h[hoff + j]
    return v == 0


@njit(cache=True, nogil=True)
def _put_hash(table, slots, h, hoff, offset, state):
    """Kafka's put after the full check: probe for ``h``, overwrite its offset or take the first empty slot."""
    state[1] += 1
    attempt = 0
    while True:
        base = _slot_of(h, hoff, attempt, slots) * 24
        state[2] += 1
        if _is_empty(table, base):
            for j in range(16):
                table[base + j] = h[hoff + j]
            state[0] += 1
            break
        if _same_hash(table, base, h, hoff):
            break
        attempt += 1
    for j in range(8):
        table[base + 16 + j] = (offset >> (56 - 8 * j)) & 0xFF
    state[3] = offset


@njit(cache=True, nogil=True)
def _get_hash(table, slots, h, hoff, state):
    """Kafka's get: the offset stored for ``h``, or -1 at an empty slot or after slots + 12 probes."""
    state[1] += 1
    max_attempts = slots + 12
    attempt = 0
    while attempt < max_attempts:
        base = _slot_of(h, hoff, attempt, slots) * 24
        state[2] += 1
        if _is_empty(table, base):
            return np.int64(-1)
        if _same_hash(table, base, h, hoff):
            v = np.int64(0)
            for j in range(16, 24):
                v = (v << 8) | np.int64(table[base + j])
            return v
        attempt += 1
    return np.int64(-1)


@njit(cache=True, nogil=True)
def _first_bad_key(arena_len, key_pos, key_len):
    """Index of the first non-null key outside ``arena[0:arena_len]``, or -1."""
    for i in range(key_len.shape[0]):
        n = key_len[i]
        if n >= 0 and (key_pos[i] < 0 or key_pos[i] > arena_len - n):
            return i
    return -1


_CHUNK = 64
"""Records hashed ahead of their insertion: their first probe slots are prefetched while the rest are hashed."""


@njit(cache=True, nogil=True)
def _hash_chunk(table, slots, arena, key_pos, key_len, take, lo, hi, digests, x, tail):
    """MD5 of the keys of records lo..hi-1 with ``take[i - lo]`` set, into ``digests``; prefetch their first slot."""
    for i in range(lo, hi):
        if take[i - lo]:
            hoff = 16 * (i - lo)
            _md5(arena, key_pos[i], key_len[i], digests, hoff, x, tail)
            base = _slot_of(digests, hoff, 0, slots) * 24
            _prefetch(table, base)
            _prefetch(table, base + 23)  # an entry can straddle two cache lines


@njit(cache=True, nogil=True)
def _put_records(table, slots, state, max_entries, arena, key_pos, key_len, offsets, start_offset):
    """Cleaner.buildOffsetMapForSegment's record loop over one run; returns (index, status).

    Keys are hashed a chunk ahead of their insertion (hashing has no effect on the map); the checks and the puts
    still happen record by record, in order.
    """
    n = offsets.shape[0]
    bad = _first_bad_key(arena.shape[0], key_pos, key_len)
    if bad >= 0:
        return bad, _BAD_KEY
    digests = np.empty(_CHUNK * 16, np.uint8)
    take = np.empty(_CHUNK, np.bool_)
    x = np.empty(16, np.uint32)
    tail = np.empty(128, np.uint8)
    for lo in range(0, n, _CHUNK):
        hi = min(lo + _CHUNK, n)
        for i in range(lo, hi):
            take[i - lo] = key_len[i] >= 0 and offsets[i] >= start_offset
        _hash_chunk(table, slots, arena, key_pos, key_len, take, lo, hi, digests, x, tail)
        for i in range(lo, hi):
            if take[i - lo]:
                if state[0] >= max_entries:
                    return i, _REACHED_MAX
                if state[0] >= slots:
                    return i, _NO_SLOT
                _put_hash(table, slots, digests, 16 * (i - lo), offsets[i], state)
    return n, _DONE


@njit(cache=True, nogil=True)
def _get_records(table, slots, state, arena, key_pos, key_len, out):
    """get() for every record; -1 for null keys (which are not looked up). Returns the first bad key or -1."""
    n = key_len.shape[0]
    bad = _first_bad_key(arena.shape[0], key_pos, key_len)
    if bad >= 0:
        return bad
    digests = np.empty(_CHUNK * 16, np.uint8)
    take = np.empty(_CHUNK, np.bool_)
    x = np.empty(16, np.uint32)
    tail = np.empty(128, np.uint8)
    for lo in range(0, n, _CHUNK):
        hi = min(lo + _CHUNK, n)
        for i in range(lo, hi):
            take[i - lo] = key_len[i] >= 0
        _hash_chunk(table, slots, arena, key_pos, key_len, take, lo, hi, digests, x, tail)
        for i in range(lo, hi):
            out[i] = _get_hash(table, slots, digests, 16 * (i - lo), state) if take[i - lo] else -1
    return -1


@njit(cache=True, nogil=True)
def _md5_many(arena, key_pos, key_len, out):
    x = np.empty(16, np.uint32)
    tail = np.empty(128, np.uint8)
    for i in range(key_len.shape[0]):
        _md5(arena, key_pos[i], key_len[i], out, 16 * i, x, tail)


def _as_arena(arena: np.ndarray) -> np.ndarray:
    arena = np.asarray(arena)
    if arena.dtype != np.uint8 or arena.ndim != 1:
        raise TypeError(f"arena must be a 1-D uint8 array, not {arena.dtype} with {arena.ndim} dimensions")
    return np.ascontiguousarray(arena)


def _as_int64(name: str, values: np.ndarray, n: int | None = None) -> np.ndarray:
    values = np.asarray(values)
    if values.ndim != 1 or (values.size and values.dtype.kind not in "iu"):
        raise TypeError(f"{name} must be a 1-D integer array")
    if values.dtype.kind == "u" and values.dtype.itemsize == 8 and values.size and values.max() > _INT64_MAX:
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
    out = np.empty(key_len.shape[0] * HASH_BYTES, np.uint8)
    _md5_many(arena, key_pos, key_len, out)
    return out.reshape(-1, HASH_BYTES)


class SkimpyOffsetMap:
    """Kafka's ``SkimpyOffsetMap``: MD5 digest -> latest offset, in a numpy table of ``slots * 24`` bytes.

    ``memory`` is the byte budget (Kafka's per-thread ``dedupe.buffer.size / threads``); the table takes
    ``slots * 24 <= memory`` bytes of it (:attr:`memory_bytes`). ``load_factor`` is the cleaner's
    ``log.cleaner.io.buffer.load.factor``: :meth:`put_records` stops once the map holds
    ``max_entries = int(slots * load_factor)`` entries.
    """

    def __init__(self, memory: int, load_factor: float = 0.9) -> None:
        self.memory, self.slots, self.max_entries, self.load_factor = _check_geometry(memory, load_factor)
        self._table = np.zeros(self.slots * ENTRY_BYTES, dtype=np.uint8)
        self._state = np.array([0, 0, 0, -1], dtype=np.int64)  # entries, lookups, probes, latest offset
        self.memory_bytes = self._table.nbytes

    def __repr__(self) -> str:
        return f"SkimpyOffsetMap(slots={self.slots}, size={self.size}, latest_offset={self.latest_offset})"

    @property
    def size(self) -> int:
        """Entries in the map (overwrites of a key already present do not count)."""
        return int(self._state[_ENTRIES])

    @property
    def latest_offset(self) -> int:
        """The offset of the last put, or the last :meth:`update_latest_offset`; -1 when neither happened."""
        return int(self._state[_LATEST])

    @property
    def lookups(self) -> int:
        """Number of puts and gets since construction or :meth:`clear`."""
        return int(self._state[_LOOKUPS])

    @property
    def probes(self) -> int:
        """Number of slots examined by those puts and gets."""
        return int(self._state[_PROBES])

    @property
    def utilization(self) -> float:
        return self.size / self.slots

    @property
    def collision_rate(self) -> float:
        """Kafka's ``(probes - lookups) / lookups``: extra probes per lookup; 0.0 before any lookup."""
        lookups = self.lookups
        return (self.probes - lookups) / lookups if lookups else 0.0

    def clear(self) -> None:
        """Empty the map and reset the counters and the latest offset (Kafka zero-fills its buffer too)."""
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
        if status == _NO_SLOT:
            raise OffsetMapFullError(_full_message(self.size, self.slots))
        return int(index)

    def get_records(self, arena: np.ndarray, key_pos: np.ndarray, key_len: np.ndarray) -> np.ndarray:
        """``get`` of every record's key as an int64 array; -1 for absent keys and for null keys (not looked up)."""
        arena, key_pos, key_len, _ = _key_arrays(arena, key_pos, key_len)
        out = np.empty(key_len.shape[0], dtype=np.int64)
        bad = _get_records(self._table, self.slots, self._state, arena, key_pos, key_len, out)
        if bad >= 0:
            raise _bad_key_error(bad, key_pos, key_len, arena.shape[0])
        return out


_EMPTY_ENTRY = bytes(ENTRY_BYTES)


class ReferenceOffsetMap:
    """Kafka's ``SkimpyOffsetMap`` line by line, over ``hashlib.md5`` and a ``bytearray``: the test oracle."""

    def __init__(self, memory: int, load_factor: float = 0.9) -> None:
        self.memory, self.slots, self.max_entries, self.load_factor = _check_geometry(memory, load_factor)
        self._bytes = bytearray(self.slots * ENTRY_BYTES)
        self.memory_bytes = len(self._bytes)
        self._entries = 0
        self.lookups = 0
        self.probes = 0
        self._last_offset = -1

    @property
    def size(self) -> int:
        return self._entries

    @property
    def latest_offset(self) -> int:
        return self._last_offset

    @property
    def utilization(self) -> float:
        return self._entries / self.slots

    @property
    def collision_rate(self) -> float:
        return (self.probes - self.lookups) / self.lookups if self.lookups else 0.0

    def clear(self) -> None:
        self._entries = 0
        self.lookups = 0
        self.probes = 0
        self._last_offset = -1
        self._bytes[:] = bytes(len(self._bytes))

    def update_latest_offset(self, offset: int) -> None:
        self._last_offset = _check_offset(offset)

    def table_bytes(self) -> bytes:
        return bytes(self._bytes)

    def _position_of(self, digest: bytes, attempt: int) -> int:
        self.probes += 1
        return probe_slot(digest, attempt, self.slots) * ENTRY_BYTES

    def _is_empty(self, pos: int) -> bool:
        return self._bytes[pos : pos + ENTRY_BYTES] == _EMPTY_ENTRY

    def put(self, key: bytes, offset: int) -> None:
        self._put_digest(hashlib.md5(key).digest(), offset)

    def get(self, key: bytes) -> int:
        return self._get_digest(hashlib.md5(key).digest())

    def _put_digest(self, digest: bytes, offset: int) -> None:
        offset = _check_offset(offset)
        if self._entries >= self.slots:
            raise OffsetMapFullError(_full_message(self._entries, self.slots))
        self.lookups += 1
        attempt = 0
        pos = self._position_of(digest, attempt)
        while not self._is_empty(pos):
            if self._bytes[pos : pos + HASH_BYTES] == digest:
                self._bytes[pos + HASH_BYTES : pos + ENTRY_BYTES] = offset.to_bytes(8, "big", signed=True)
                self._last_offset = offset
                return
            attempt += 1
            pos = self._position_of(digest, attempt)
        self._bytes[pos : pos + ENTRY_BYTES] = digest + offset.to_bytes(8, "big", signed=True)
        self._last_offset = offset
        self._entries += 1

    def _get_digest(self, digest: bytes) -> int:
        self.lookups += 1
        max_attempts = self.slots + HASH_BYTES - 4
        attempt = 0
        while True:
            if attempt >= max_attempts:
                return -1
            pos = self._position_of(digest, attempt)
            if self._is_empty(pos):
                return -1
            attempt += 1
            if self._bytes[pos : pos + HASH_BYTES] == digest:
                return int.from_bytes(self._bytes[pos + HASH_BYTES : pos + ENTRY_BYTES], "big", signed=True)

    @staticmethod
    def _checked_arena(arena, key_pos, key_len) -> bytes:
        data = bytes(np.asarray(arena, dtype=np.uint8))
        for i in range(len(key_len)):
            n, p = int(key_len[i]), int(key_pos[i])
            if n >= 0 and (p < 0 or p + n > len(data)):
                raise ValueError(f"key {i} at [{p}, {p + n}) is outside the {len(data)}-byte arena")
        return data

    def put_records(self, arena, key_pos, key_len, offsets, start_offset: int) -> int:
        data = self._checked_arena(arena, key_pos, key_len)
        for i in range(len(offsets)):
            n = int(key_len[i])
            offset = int(offsets[i])
            if n < 0 or offset < start_offset:
                continue
            if self._entries >= self.max_entries:
                return i
            p = int(key_pos[i])
            self.put(data[p : p + n], offset)
        return len(offsets)

    def get_records(self, arena, key_pos, key_len) -> np.ndarray:
        data = self._checked_arena(arena, key_pos, key_len)
        out = np.full(len(key_len), -1, dtype=np.int64)
        for i in range(len(key_len)):
            n = int(key_len[i])
            if n >= 0:
                p = int(key_pos[i])
                out[i] = self.get(data[p : p + n])
        return out
