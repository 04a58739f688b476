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

import contextlib
import hashlib
import math
import mmap
import operator
import sys
import threading

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
# Raw loads and stores. The table and the digests stay uint8 arrays in Kafka's byte layout; these read and write
# several of their bytes as one machine word (any alignment, native byte order), which numba cannot express.

_LITTLE_ENDIAN = sys.byteorder == "little"


def _is_u8_array(array) -> bool:
    return isinstance(array, types.Array) and array.dtype == types.uint8


def _byte_ptr(context, builder, array_type, array, index, width):
    ary = context.make_array(array_type)(context, builder, array)
    return builder.bitcast(builder.gep(ary.data, [index]), ir.IntType(width).as_pointer())


@intrinsic
def _load_u32le(typingctx, array, index):
    """The little-endian uint32 at bytes ``array[index:index+4]`` of a uint8 array (no bounds check)."""
    if not (_is_u8_array(array) and isinstance(index, types.Integer)):
        return None

    def codegen(context, builder, signature, args):
        value = builder.load(_byte_ptr(context, builder, signature.args[0], args[0], args[1], 32), align=1)
        return value if _LITTLE_ENDIAN else builder.bswap(value)

    return types.uint32(array, index), codegen


@intrinsic
def _store_u32le(typingctx, array, index, value):
    """Store the uint32 ``value`` little-endian at bytes ``array[index:index+4]`` of a uint8 array."""
    if not (_is_u8_array(array) and isinstance(index, types.Integer) and value == types.uint32):
        return None

    def codegen(context, builder, signature, args):
        value = args[2] if _LITTLE_ENDIAN else builder.bswap(args[2])
        builder.store(value, _byte_ptr(context, builder, signature.args[0], args[0], args[1], 32), align=1)
        return context.get_dummy_value()

    return types.void(array, index, value), codegen


@intrinsic
def _load_i64(typingctx, array, index):
    """The native-order int64 at bytes ``array[index:index+8]`` of a uint8 array (no bounds check)."""
    if not (_is_u8_array(array) and isinstance(index, types.Integer)):
        return None

    def codegen(context, builder, signature, args):
        return builder.load(_byte_ptr(context, builder, signature.args[0], args[0], args[1], 64), align=1)

    return types.int64(array, index), codegen


@intrinsic
def _store_i64(typingctx, array, index, value):
    """Store the int64 ``value`` in native order at bytes ``array[index:index+8]`` of a uint8 array."""
    if not (_is_u8_array(array) and isinstance(index, types.Integer) and value == types.int64):
        return None

    def codegen(context, builder, signature, args):
        builder.store(args[2], _byte_ptr(context, builder, signature.args[0], args[0], args[1], 64), align=1)
        return context.get_dummy_value()

    return types.void(array, index, value), codegen


@intrinsic
def _swap_be64(typingctx, value):
    """int64 to or from its big-endian representation: a byte swap on a little-endian host, else nothing."""
    if value != types.int64:
        return None

    def codegen(context, builder, signature, args):
        return builder.bswap(args[0]) if _LITTLE_ENDIAN else args[0]

    return types.int64(value), codegen


@intrinsic
def _prefetch(typingctx, array, index):
    """Prefetch the cache line of the uint8 ``array[index]`` (llvm.prefetch: a hint that never faults)."""
    if not (_is_u8_array(array) and isinstance(index, types.Integer)):
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


# --------------------------------------------------------------------------------------------------------------
# MD5 (RFC 1321), sixteen messages at a time. MD5 is a chain of 64 dependent steps per block, so one message at a
# time leaves most of the core idle; :func:`_md5_lanes` runs the steps of one block of 16 independent messages as
# operations on 16-lane vectors of uint32 (LLVM IR written here, which LLVM lowers to the host's SIMD: two AVX2
# registers per vector, or four SSE2 ones), and :func:`_md5_records` keeps its lanes fed: a lane whose message has
# no block left takes the next record, so keys of any mix of lengths share the vectors.

_MD5_K = (
    0xD76AA478, 0xE8C7B756, 0x242070DB, 0xC1BDCEEE, 0xF57C0FAF, 0x4787C62A, 0xA8304613, 0xFD469501,
    0x698098D8, 0x8B44F7AF, 0xFFFF5BB1, 0x895CD7BE, 0x6B901122, 0xFD987193, 0xA679438E, 0x49B40821,
    0xF61E2562, 0xC040B340, 0x265E5A51, 0xE9B6C7AA, 0xD62F105D, 0x02441453, 0xD8A1E681, 0xE7D3FBC8,
    0x21E1CDE6, 0xC33707D6, 0xF4D50D87, 0x455A14ED, 0xA9E3E905, 0xFCEFA3F8, 0x676F02D9, 0x8D2A4C8A,
    0xFFFA3942, 0x8771F681, 0x6D9D6122, 0xFDE5380C, 0xA4BEEA44, 0x4BDECFA9, 0xF6BB4B60, 0xBEBFBC70,
    0x289B7EC6, 0xEAA127FA, 0xD4EF3085, 0x04881D05, 0xD9D4D039, 0xE6DB99E5, 0x1FA27CF8, 0xC4AC5665,
    0xF4292244, 0x432AFF97, 0xAB9423A7, 0xFC93A039, 0x655B59C3, 0x8F0CCC92, 0xFFEFF47D, 0x85845DD1,
    0x6FA87E4F, 0xFE2CE6E0, 0xA3014314, 0x4E0811A1, 0xF7537E82, 0xBD3AF235, 0x2AD7D2BB, 0xEB86D391,
)  # fmt: skip
"""The sine table T[1..64] of RFC 1321, section 3.4."""
_MD5_S = (7, 12, 17, 22) * 4 + (5, 9, 14, 20) * 4 + (4, 11, 16, 23) * 4 + (6, 10, 15, 21) * 4
"""The left-rotation amount of each of the 64 steps."""
_MD5_IV = (0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476)
"""The initial state (A, B, C, D)."""

_LANES = 16
"""Messages hashed together (16 measured ~1.7 times the throughput of 8, and 32 no better than 16). Also the number
of words in a block, which the transposition in :func:`_md5_lanes` relies on."""
assert _LANES == 16, "the transposition in _md5_lanes is 16 x 16"


MD5_LANES = _LANES
"""Keys a call of :func:`md5_hash_lanes` hashes at once."""
MD5_ONE_BLOCK = 56
"""Keys shorter than this take one MD5 block (with the 0x80 byte and the 8 length bytes)."""


def _is_u32_vector(array) -> bool:
    return isinstance(array, types.Array) and array.dtype == types.uint32 and array.ndim == 1 and array.layout == "C"


@intrinsic
def _md5_lanes(typingctx, words, state):
    """MD5Transform on ``_LANES`` messages at once, in place.

    ``words`` is uint32[_LANES * 16], the 16 little-endian words of lane l's block at ``16 * l``; ``state`` is
    uint32[4 * _LANES], the rows A, B, C, D (A of lane l at ``l``, B at ``_LANES + l``...). The blocks are loaded
    one lane per vector and transposed with shuffles, so that vector j holds word j of every lane.
    """
    if not (_is_u32_vector(words) and _is_u32_vector(state)):
        return None

    def codegen(context, builder, signature, args):
        i32 = ir.IntType(32)
        vector = ir.VectorType(i32, _LANES)

        def splat(value):  # a constant vector; i32 literals are written signed
            return ir.Constant(vector, [ir.Constant(i32, value - (1 << 32) if value >= 1 << 31 else value)] * _LANES)

        def row(array_type, array, k):
            data = context.make_array(array_type)(context, builder, array).data
            return builder.bitcast(builder.gep(data, [ir.Constant(ir.IntType(64), k * _LANES)]), vector.as_pointer())

        x = [builder.load(row(signature.args[0], args[0], lane), align=4) for lane in range(_LANES)]
        for k in (1, 2, 4, 8):  # transpose 16 x 16: swap the off-diagonal k x k blocks at every scale
            first = ir.Constant(vector, [c if not c & k else _LANES + (c ^ k) for c in range(_LANES)])
            second = ir.Constant(vector, [_LANES + c if c & k else c ^ k for c in range(_LANES)])
            for i in range(_LANES):
                if not i & k:
                    x[i], x[i | k] = (
                        builder.shuffle_vector(x[i], x[i | k], first),
                        builder.shuffle_vector(x[i], x[i | k], second),
                    )
        initial = [builder.load(row(signature.args[1], args[1], k), align=4) for k in range(4)]
        ones = splat(0xFFFFFFFF)
        a, b, c, d = initial
        for i in range(64):
            if i < 16:
                f, g = builder.or_(builder.and_(b, c), builder.and_(builder.xor(b, ones), d)), i
            elif i < 32:
                f, g = builder.or_(builder.and_(b, d), builder.and_(c, builder.xor(d, ones))), (5 * i + 1) & 15
            elif i < 48:
                f, g = builder.xor(builder.xor(b, c), d), (3 * i + 5) & 15
            else:
                f, g = builder.xor(c, builder.or_(b, builder.xor(d, ones))), (7 * i) & 15
            t = builder.add(builder.add(a, f), builder.add(splat(_MD5_K[i]), x[g]))
            rotated = builder.or_(builder.shl(t, splat(_MD5_S[i])), builder.lshr(t, splat(32 - _MD5_S[i])))
            a, b, c, d = d, builder.add(b, rotated), b, c
        for k, value in enumerate((a, b, c, d)):
            builder.store(builder.add(initial[k], value), row(signature.args[1], args[1], k), align=4)
        return context.get_dummy_value()

    return types.void(words, state), codegen


@njit(cache=True, nogil=True)
def _md5_compress(words, state):
    """:func:`_md5_lanes` as a function: its code (long, vector) is compiled once rather than at every call site."""
    _md5_lanes(words, state)


@njit(cache=True, nogil=True, inline="always")
def md5_load_block(arena, pos, length, block, words, lane):
    """Block ``block`` of the padded message ``arena[pos:pos+length]`` into lane ``lane`` of ``words``.

    Whole words of the message are loaded straight from the arena; the bytes of a partial last word one at a time,
    so nothing past the key is read.
    """
    o = lane * 16
    start = 64 * block
    p = pos + start
    if start + 64 <= length:
        for j in range(16):
            words[o + j] = _load_u32le(arena, p + 4 * j)
        return
    for j in range(16):
        words[o + j] = 0
    rest = length - start
    if rest >= 0:
        n = rest >> 2
        for j in range(n):
            words[o + j] = _load_u32le(arena, p + 4 * j)
        q = p + 4 * n
        last = np.uint32(0x80) << np.uint32(8 * (rest & 3))  # the 0x80 padding byte after the message
        for j in range(rest & 3):
            last |= np.uint32(arena[q + j]) << np.uint32(8 * j)
        words[o + n] = last
    if rest < MD5_ONE_BLOCK:  # the last block: the length in bits, mod 2**64, as two little-endian words
        bits = np.uint64(length) << np.uint64(3)
        words[o + 14] = np.uint32(bits & np.uint64(0xFFFFFFFF))
        words[o + 15] = np.uint32(bits >> np.uint64(32))


@njit(cache=True, nogil=True)
def _md5_records(arena, key_pos, key_len, take, lo, hi, out):
    """MD5 of the keys of records lo..hi-1 with ``take[i - lo]`` set, into ``out[16 * (i - lo):]`` (uint8).

    Keys of up to 55 bytes (one block with the padding and the length: the usual case) are hashed 16 at a time as
    they come; longer keys go through lanes that each take the next long key when their message is done.
    """
    words = np.empty(16 * _LANES, np.uint32)
    state = np.empty(4 * _LANES, np.uint32)
    short = np.empty(_LANES, np.int64)
    longer = np.empty(hi - lo, np.int64)
    n_short = 0
    n_long = 0
    for i in range(lo, hi + 1):
        if n_short == _LANES or (i == hi and n_short > 0):
            for lane in range(_LANES):
                for k in range(4):
                    state[k * _LANES + lane] = _MD5_IV[k]
            _md5_compress(words, state)  # lanes past n_short hash leftovers; nothing reads them
            for lane in range(n_short):
                _store_digest(out, 16 * (short[lane] - lo), state, lane)
            n_short = 0
        if i == hi:
            break
        if take[i - lo]:
            if key_len[i] < MD5_ONE_BLOCK:
                md5_load_block(arena, key_pos[i], key_len[i], 0, words, n_short)
                short[n_short] = i
                n_short += 1
            else:
                longer[n_long] = i
                n_long += 1
    if n_long:
        md5_long(arena, key_pos, key_len, longer[:n_long], lo, out, words, state)


@njit(cache=True, nogil=True)
def md5_hash_lanes(words, state, queued, n_queued, out):
    """MD5 of the one-block keys loaded in lanes 0..n_queued-1 of ``words`` (:func:`md5_load_block`), record
    ``queued[l]``'s into ``out[16 * queued[l]:]``."""
    for lane in range(_LANES):
        for k in range(4):
            state[k * _LANES + lane] = _MD5_IV[k]
    _md5_compress(words, state)  # lanes past n_queued hash leftovers; nothing reads them
    for lane in range(n_queued):
        _store_digest(out, 16 * queued[lane], state, lane)


@njit(cache=True, nogil=True, inline="always")
def _store_digest(out, o, state, lane):
    _store_u32le(out, o, state[lane])
    _store_u32le(out, o + 4, state[_LANES + lane])
    _store_u32le(out, o + 8, state[2 * _LANES + lane])
    _store_u32le(out, o + 12, state[3 * _LANES + lane])


@njit(cache=True, nogil=True)
def md5_long(arena, key_pos, key_len, records, lo, out, words, state):
    """MD5 of the keys of ``records`` (indices of records of any length) into ``out[16 * (i - lo):]``."""
    record = np.full(_LANES, -1, np.int64)  # each lane's record, -1: idle
    block = np.zeros(_LANES, np.int64)
    blocks = np.zeros(_LANES, np.int64)
    nxt = 0
    busy = 0
    while True:
        for lane in range(_LANES):
            if record[lane] < 0:
                if nxt == records.shape[0]:
                    continue
                i = records[nxt]
                nxt += 1
                record[lane] = i
                block[lane] = 0
                blocks[lane] = (key_len[i] + 72) >> 6  # the message, 0x80 and 8 length bytes, in 64-byte blocks
                for k in range(4):
                    state[k * _LANES + lane] = _MD5_IV[k]
                busy += 1
            i = record[lane]
            md5_load_block(arena, key_pos[i], key_len[i], block[lane], words, lane)
        if busy == 0:
            return
        _md5_compress(words, state)  # idle lanes hash leftovers; nothing reads them
        for lane in range(_LANES):
            if record[lane] >= 0:
                block[lane] += 1
                if block[lane] == blocks[lane]:
                    _store_digest(out, 16 * (record[lane] - lo), state, lane)
                    record[lane] = -1
                    busy -= 1


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
    _prefetch(table, base)
    _prefetch(table, base + 23)


@njit(cache=True, nogil=True, inline="always")
def _put_slot(table, slots, h, hoff, offset_be):
    """Kafka's put after the full check: probe for ``h``, overwrite its offset or take the first empty slot.

    ``offset_be`` is the offset already in big-endian order. Returns (probes, 1 if a slot was taken else 0).
    """
    h0 = _load_i64(h, hoff)
    h1 = _load_i64(h, hoff + 8)
    attempt = 0
    while True:
        base = _slot_of(h, hoff, attempt, slots) * 24
        attempt += 1
        t0 = _load_i64(table, base)
        t1 = _load_i64(table, base + 8)
        if (t0 | t1 | _load_i64(table, base + 16)) == 0:
            _store_i64(table, base, h0)
            _store_i64(table, base + 8, h1)
            _store_i64(table, base + 16, offset_be)
            return attempt, 1
        if t0 == h0 and t1 == h1:
            _store_i64(table, base + 16, offset_be)
            return attempt, 0


@njit(cache=True, nogil=True, inline="always")
def _get_slot(table, slots, h, hoff, attempt):
    """Kafka's get from probe ``attempt`` on: (the offset stored for ``h``, or -1 at an empty slot or once
    ``slots + 12`` probes in all were made; the number of probes made here)."""
    h0 = _load_i64(h, hoff)
    h1 = _load_i64(h, hoff + 8)
    first = attempt
    while attempt < slots + 12:
        base = _slot_of(h, hoff, attempt, slots) * 24
        attempt += 1
        t0 = _load_i64(table, base)
        t1 = _load_i64(table, base + 8)
        t2 = _load_i64(table, base + 16)
        if (t0 | t1 | t2) == 0:
            return np.int64(-1), attempt - first
        if t0 == h0 and t1 == h1:
            return _swap_be64(t2), attempt - first
    return np.int64(-1), attempt - first


@njit(cache=True, nogil=True)
def _put_hash(table, slots, h, hoff, offset, state):
    """A single put of the digest ``h[hoff:hoff+16]`` (after the full check), updating ``state``."""
    probes, taken = _put_slot(table, slots, h, hoff, _swap_be64(offset))
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
            t0 = _load_i64(table, base)
            t1 = _load_i64(table, base + 8)
            t2 = _load_i64(table, base + 16)
            if (t0 | t1 | t2) == 0:
                out[lo + k] = -1
                ended_at[k] = base * 16 + attempt + 1
            elif t0 == _load_i64(digests, hoff) and t1 == _load_i64(digests, hoff + 8):
                out[lo + k] = _swap_be64(t2)
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
            _store_i64(table, base + 16, offset_be)
            return ended_at & 15, 0
        if (_load_i64(table, base) | _load_i64(table, base + 8) | _load_i64(table, base + 16)) == 0:
            _store_i64(table, base, _load_i64(h, hoff))
            _store_i64(table, base + 8, _load_i64(h, hoff + 8))
            _store_i64(table, base + 16, offset_be)
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
            used, taken = _put_known(table, slots, digests, 16 * k, _swap_be64(offset), ended_at[k], found[k])
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
        _md5_records(arena, key_pos, key_len, take, lo, hi, digests)
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
        _md5_records(arena, key_pos, key_len, take, lo, hi, out[16 * lo : 16 * hi])
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
        _md5_records(arena, key_pos, key_len, take, lo, hi, digests)
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
        t2 = _load_i64(table, p + 16)
        if (_load_i64(table, p) | _load_i64(table, p + 8) | t2) == 0:
            continue
        rel = _swap_be64(t2) - base
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
    n = key_len.shape[0]
    out = np.empty(n * HASH_BYTES, np.uint8)
    _md5_records(arena, key_pos, key_len, np.ones(n, np.bool_), 0, n, out)
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
        self._table = _zeroed_table(self.slots * ENTRY_BYTES)
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

    def mark_held(self, marks: np.ndarray, base: int, from_mark: int, to_mark: int) -> None:
        for pos in range(0, len(self._bytes), ENTRY_BYTES):
            if not self._is_empty(pos):
                rel = int.from_bytes(self._bytes[pos + HASH_BYTES : pos + ENTRY_BYTES], "big", signed=True) - base
                if 0 <= rel < len(marks) and marks[rel] == from_mark:
                    marks[rel] = to_mark

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
