"""MD5 (RFC 1321) of many keys at once, in numba: the digests the offset map is keyed by (Kafka hashes with MD5).

``md5_records`` hashes a run of keys 16 at a time in SIMD lanes; ``md5_hash_lanes``, ``md5_load_block`` and
``md5_long`` are its pieces, which the cleaner's fused walk-and-hash kernel (``_kernels``) calls directly.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from ._intrinsics import load_u32le, store_u32le

# MD5 (RFC 1321), sixteen messages at a time. MD5 is a chain of 64 dependent steps per block, so one message at a
# time leaves most of the core idle; :func:`_md5_lanes` runs the steps of one block of 16 independent messages as
# operations on 16-lane vectors of uint32 (LLVM IR written here, which LLVM lowers to the host's SIMD: two AVX2
# registers per vector, or four SSE2 ones), and :func:`md5_records` keeps its lanes fed: a lane whose message has
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
            words[o + j] = load_u32le(arena, p + 4 * j)
        return
    for j in range(16):
        words[o + j] = 0
    rest = length - start
    if rest >= 0:
        n = rest >> 2
        for j in range(n):
            words[o + j] = load_u32le(arena, p + 4 * j)
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
def md5_records(arena, key_pos, key_len, take, lo, hi, out):
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
    store_u32le(out, o, state[lane])
    store_u32le(out, o + 4, state[_LANES + lane])
    store_u32le(out, o + 8, state[2 * _LANES + lane])
    store_u32le(out, o + 12, state[3 * _LANES + lane])


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
