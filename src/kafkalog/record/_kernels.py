"""Whole-batch numba kernels: the fast twin of the per-record reference code in ``batch`` and ``builder``.

They walk or write every record of many batches in one call. They never raise: a decode error comes
back as a code, and the Python caller turns it into the same InvalidRecordError the reference path gives.
"""

from __future__ import annotations

import numpy as np
from numba import njit

# Error codes returned by decode_records / decode_headers (0 = fine).
OK = 0
ERR_PREMATURE_EOF = 1  # the section ran out before `count` records
ERR_REMAINING = 2  # bytes left after `count` records
ERR_BAD_VARINT = 3  # a varint/varlong too long or cut short
ERR_BODY_SIZE = 4  # record length larger than the bytes left, or negative
ERR_FIELD_OVERRUN = 5  # a key/value/header field runs past the section
ERR_HEADER_COUNT = 6  # negative header count, or more than bytes left
ERR_HEADER_KEY = 7  # negative header key length
ERR_SIZE_MISMATCH = 8  # bytes consumed != declared record length
ERR_OFFSET_DELTA = 9  # offset delta outside int32 (impossible from a varint, kept for completeness)


@njit(cache=True, nogil=True)
def _varint(buf, pos, end):
    """Zigzag varint (int32) with Java's rules; returns (value, next pos, ok)."""
    raw = np.uint64(0)
    shift = np.uint64(0)
    for _ in range(5):
        if pos >= end:
            return 0, pos, False
        b = np.uint64(buf[pos])
        pos += 1
        raw |= (b & np.uint64(0x7F)) << shift
        if b < np.uint64(0x80):
            raw &= np.uint64(0xFFFFFFFF)
            value = np.int64(raw >> np.uint64(1)) ^ -np.int64(raw & np.uint64(1))
            return value, pos, True
        shift += np.uint64(7)
    return 0, pos, False


@njit(cache=True, nogil=True)
def _varlong(buf, pos, end):
    """Zigzag varlong (int64); returns (value, next pos, ok)."""
    raw = np.uint64(0)
    shift = np.uint64(0)
    for _ in range(10):
        if pos >= end:
            return 0, pos, False
        b = np.uint64(buf[pos])
        pos += 1
        if shift < np.uint64(64):
            raw |= (b & np.uint64(0x7F)) << shift
        if b < np.uint64(0x80):
            value = np.int64(raw >> np.uint64(1)) ^ -np.int64(raw & np.uint64(1))
            return value, pos, True
        shift += np.uint64(7)
    return 0, pos, False


@njit(cache=True, nogil=True)
def _read_record(arena, pos, end):
    """Walk one record at ``pos`` (DefaultRecord.readFrom's checks).

    Returns (code, next pos, timestamp delta, offset delta, key pos, key len, value pos, value len,
    headers pos, header count).
    """
    body, pos, ok = _varint(arena, pos, end)
    if not ok:
        return ERR_BAD_VARINT, pos, 0, 0, 0, 0, 0, 0, 0, 0
    if body < 0 or end - pos < body:
        return ERR_BODY_SIZE, pos, 0, 0, 0, 0, 0, 0, 0, 0
    start = pos
    pos += 1  # attributes
    tsd, pos, ok = _varlong(arena, pos, end)
    if not ok:
        return ERR_BAD_VARINT, pos, 0, 0, 0, 0, 0, 0, 0, 0
    od, pos, ok = _varint(arena, pos, end)
    if not ok:
        return ERR_BAD_VARINT, pos, 0, 0, 0, 0, 0, 0, 0, 0
    kl, pos, ok = _varint(arena, pos, end)
    if not ok:
        return ERR_BAD_VARINT, pos, 0, 0, 0, 0, 0, 0, 0, 0
    kp = pos
    if kl > 0:
        if kl > end - pos:
            return ERR_FIELD_OVERRUN, pos, 0, 0, 0, 0, 0, 0, 0, 0
        pos += kl
    vl, pos, ok = _varint(arena, pos, end)
    if not ok:
        return ERR_BAD_VARINT, pos, 0, 0, 0, 0, 0, 0, 0, 0
    vp = pos
    if vl > 0:
        if vl > end - pos:
            return ERR_FIELD_OVERRUN, pos, 0, 0, 0, 0, 0, 0, 0, 0
        pos += vl
    hc, pos, ok = _varint(arena, pos, end)
    if not ok:
        return ERR_BAD_VARINT, pos, 0, 0, 0, 0, 0, 0, 0, 0
    if hc < 0 or hc > end - pos:
        return ERR_HEADER_COUNT, pos, 0, 0, 0, 0, 0, 0, 0, 0
    hp = pos
    for _ in range(hc):
        hk, pos, ok = _varint(arena, pos, end)
        if not ok:
            return ERR_BAD_VARINT, pos, 0, 0, 0, 0, 0, 0, 0, 0
        if hk < 0:
            return ERR_HEADER_KEY, pos, 0, 0, 0, 0, 0, 0, 0, 0
        if hk > end - pos:
            return ERR_FIELD_OVERRUN, pos, 0, 0, 0, 0, 0, 0, 0, 0
        pos += hk
        hv, pos, ok = _varint(arena, pos, end)
        if not ok:
            return ERR_BAD_VARINT, pos, 0, 0, 0, 0, 0, 0, 0, 0
        if hv > 0:
            if hv > end - pos:
                return ERR_FIELD_OVERRUN, pos, 0, 0, 0, 0, 0, 0, 0, 0
            pos += hv
    if pos - start != body:
        return ERR_SIZE_MISMATCH, pos, 0, 0, 0, 0, 0, 0, 0, 0
    return OK, pos, tsd, od, kp, kl, vp, vl, hp, hc


@njit(cache=True, nogil=True)
def decode_records(
    arena,
    sec_start,
    sec_end,
    counts,
    base_offset,
    base_ts,
    append_ts,
    use_append_ts,
    out_offset,
    out_ts,
    key_pos,
    key_len,
    val_pos,
    val_len,
    hdr_pos,
    hdr_count,
):
    """Walk every record of every batch section; fill the per-record outputs.

    Returns (error code, batch index, record index within the batch).
    """
    r = 0
    for b in range(sec_start.shape[0]):
        pos = sec_start[b]
        end = sec_end[b]
        for i in range(counts[b]):
            if pos >= end:
                return ERR_PREMATURE_EOF, b, i
            code, pos, tsd, od, kp, kl, vp, vl, hp, hc = _read_record(arena, pos, end)
            if code != OK:
                return code, b, i
            key_pos[r] = kp
            key_len[r] = kl
            val_pos[r] = vp
            val_len[r] = vl
            hdr_pos[r] = hp
            hdr_count[r] = hc
            out_offset[r] = base_offset[b] + od
            out_ts[r] = append_ts[b] if use_append_ts[b] else base_ts[b] + tsd
            r += 1
        if pos != end:
            return ERR_REMAINING, b, counts[b]
    return OK, 0, 0


@njit(cache=True, nogil=True)
def summarize_records(arena, start, end, count, base_ts):
    """Validate one batch's records and summarise them for the log validator, with no per-record output.

    Returns (error code, record index, records read, min timestamp (ignoring -1), max timestamp,
    records with a null key).
    """
    pos = start
    min_ts = np.int64(0x7FFFFFFFFFFFFFFF)
    max_ts = np.int64(-1)
    null_keys = 0
    for i in range(count):
        if pos >= end:
            return ERR_PREMATURE_EOF, i, i, min_ts, max_ts, null_keys
        code, pos, tsd, _od, _kp, kl, _vp, _vl, _hp, _hc = _read_record(arena, pos, end)
        if code != OK:
            return code, i, i, min_ts, max_ts, null_keys
        ts = base_ts + tsd
        if ts != -1 and ts < min_ts:
            min_ts = ts
        if ts > max_ts:
            max_ts = ts
        if kl < 0:
            null_keys += 1
    if pos != end:
        return ERR_REMAINING, count, count, min_ts, max_ts, null_keys
    return OK, count, count, min_ts, max_ts, null_keys


@njit(cache=True, nogil=True)
def decode_headers(arena, hdr_pos, hdr_count, hkey_pos, hkey_len, hval_pos, hval_len):
    """Second pass over already validated records: the position and length of every header field."""
    h = 0
    for r in range(hdr_pos.shape[0]):
        pos = hdr_pos[r]
        end = arena.shape[0]
        for _ in range(hdr_count[r]):
            kl, pos, _ok = _varint(arena, pos, end)
            hkey_pos[h] = pos
            hkey_len[h] = kl
            pos += kl
            vl, pos, _ok = _varint(arena, pos, end)
            hval_pos[h] = pos
            hval_len[h] = vl
            if vl > 0:
                pos += vl
            h += 1


@njit(cache=True, nogil=True)
def _copy(dst, dst_pos, src, src_pos, n):
    """Copy n bytes; looping over two slice views lets LLVM vectorise (5x a slice assignment here)."""
    d = dst[dst_pos : dst_pos + n]
    s = src[src_pos : src_pos + n]
    for j in range(n):
        d[j] = s[j]


@njit(cache=True, nogil=True)
def gather(arena, starts, lengths, offsets, out):
    """Copy each (start, length) field of ``arena`` into ``out`` at ``offsets`` (nulls have length < 0)."""
    for i in range(starts.shape[0]):
        n = lengths[i]
        if n > 0:
            _copy(out, offsets[i], arena, starts[i], n)


@njit(cache=True, nogil=True)
def any_high_byte(data):
    """True when a byte >= 0x80 is present (so UTF-8 must be checked)."""
    for i in range(data.shape[0]):  # noqa: SIM110 - numba compiles this loop, not a generator in any()
        if data[i] >= 0x80:
            return True
    return False


# ----- encoding ---------------------------------------------------------------------------------


@njit(cache=True, nogil=True)
def _size_uvarint(u):
    size = 1
    while u > np.uint64(0x7F):
        u >>= np.uint64(7)
        size += 1
    return size


@njit(cache=True, nogil=True)
def _zz32(v):
    return np.uint64(((np.int64(v) << 1) ^ (np.int64(v) >> 31)) & 0xFFFFFFFF)


@njit(cache=True, nogil=True)
def _zz64(v):
    v = np.int64(v)
    return np.uint64(v << 1) ^ np.uint64(v >> 63)


@njit(cache=True, nogil=True)
def _put_uvarint(out, pos, u):
    while u > np.uint64(0x7F):
        out[pos] = np.uint8((u & np.uint64(0x7F)) | np.uint64(0x80))
        u >>= np.uint64(7)
        pos += 1
    out[pos] = np.uint8(u)
    return pos + 1


@njit(cache=True, nogil=True)
def _field_size(length):
    if length < 0:
        return _size_uvarint(_zz32(-1))
    return _size_uvarint(_zz32(length)) + length


@njit(cache=True, nogil=True)
def record_body_sizes(key_len, val_len, ts_delta, off_delta, hdr_first, hdr_count, hkey_len, hval_len):
    """Body size of every record (everything after its length varint)."""
    n = key_len.shape[0]
    sizes = np.empty(n, np.int64)
    for i in range(n):
        s = 1 + _size_uvarint(_zz64(ts_delta[i])) + _size_uvarint(_zz32(off_delta[i]))
        s += _field_size(key_len[i]) + _field_size(val_len[i])
        s += _size_uvarint(_zz32(hdr_count[i]))
        for h in range(hdr_first[i], hdr_first[i] + hdr_count[i]):
            s += _field_size(hkey_len[h]) + _field_size(hval_len[h])
        sizes[i] = s
    return sizes


@njit(cache=True, nogil=True)
def _put_field(out, pos, data, start, length):
    if length < 0:
        return _put_uvarint(out, pos, _zz32(-1))
    pos = _put_uvarint(out, pos, _zz32(length))
    _copy(out, pos, data, start, length)
    return pos + length


@njit(cache=True, nogil=True)
def encode_records(
    out,
    body_sizes,
    key_data,
    key_start,
    key_len,
    val_data,
    val_start,
    val_len,
    ts_delta,
    off_delta,
    hdr_first,
    hdr_count,
    hkey_data,
    hkey_start,
    hkey_len,
    hval_data,
    hval_start,
    hval_len,
):
    """Write every record (DefaultRecord.writeTo) back to back into ``out``; return the bytes written."""
    pos = 0
    for i in range(key_len.shape[0]):
        pos = _put_uvarint(out, pos, _zz32(body_sizes[i]))
        out[pos] = 0
        pos += 1
        pos = _put_uvarint(out, pos, _zz64(ts_delta[i]))
        pos = _put_uvarint(out, pos, _zz32(off_delta[i]))
        pos = _put_field(out, pos, key_data, key_start[i], key_len[i])
        pos = _put_field(out, pos, val_data, val_start[i], val_len[i])
        pos = _put_uvarint(out, pos, _zz32(hdr_count[i]))
        for h in range(hdr_first[i], hdr_first[i] + hdr_count[i]):
            pos = _put_field(out, pos, hkey_data, hkey_start[h], hkey_len[h])
            pos = _put_field(out, pos, hval_data, hval_start[h], hval_len[h])
    return pos
