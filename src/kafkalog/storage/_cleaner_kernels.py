"""numba kernels of the log cleaner: walk the records of many batches, and re-frame the retained ones.

A v2 record is its length varint, an attributes byte, a timestamp delta, an offset delta and then the key,
value and headers, which compaction never changes. Rebuilding a batch with the same base offset therefore
keeps every offset delta and that tail byte for byte; only the timestamp delta (against the new base
timestamp) and the length in front are written again, which is what Kafka's builder produces.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..record._kernels import (
    ERR_PREMATURE_EOF,
    ERR_REMAINING,
    OK,
    _copy,
    _put_uvarint,
    _read_record,
    _size_uvarint,
    _zz32,
    _zz64,
)


@njit(cache=True, nogil=True)
def _uvarint_size_of_zz32(v):
    return _size_uvarint(_zz32(v))


@njit(cache=True, nogil=True)
def walk_records(
    arena, sec_start, sec_end, counts, base_offset, base_ts, append_ts, use_append_ts,
    rec_start, tail_start, rec_end, offsets, timestamps, key_pos, key_len, val_len,
):  # fmt: skip
    """Walk every record of every section; fill the per-record arrays. Returns (code, batch, record)."""
    r = 0
    for b in range(sec_start.shape[0]):
        pos = sec_start[b]
        end = sec_end[b]
        for i in range(counts[b]):
            if pos >= end:
                return ERR_PREMATURE_EOF, b, i
            start = pos
            code, pos, tsd, od, kp, kl, _vp, vl, _hp, _hc = _read_record(arena, pos, end)
            if code != OK:
                return code, b, i
            rec_start[r] = start
            # The key-length varint starts the tail; a null key (-1) is a 1-byte varint.
            tail_start[r] = kp - _uvarint_size_of_zz32(kl)
            rec_end[r] = pos
            offsets[r] = base_offset[b] + od
            timestamps[r] = append_ts[b] if use_append_ts[b] else base_ts[b] + tsd
            key_pos[r] = kp
            key_len[r] = kl
            val_len[r] = vl
            r += 1
        if pos != end:
            return ERR_REMAINING, b, counts[b]
    return OK, 0, 0


@njit(cache=True, nogil=True)
def reframed_sizes(records, tail_start, rec_end, ts_delta, off_delta):
    """Bytes each listed record takes once re-framed with its new timestamp delta."""
    sizes = np.empty(records.shape[0], np.int64)
    for j in range(records.shape[0]):
        r = records[j]
        body = 1 + _size_uvarint(_zz64(ts_delta[j])) + _size_uvarint(_zz32(off_delta[j])) + rec_end[r] - tail_start[r]
        sizes[j] = _size_uvarint(_zz32(body)) + body
    return sizes


@njit(cache=True, nogil=True)
def reframe_records(arena, records, tail_start, rec_end, ts_delta, off_delta, out):
    """Write the listed records back to back into ``out`` with new timestamp deltas; return bytes written."""
    pos = 0
    for j in range(records.shape[0]):
        r = records[j]
        tail = rec_end[r] - tail_start[r]
        tsz = _zz64(ts_delta[j])
        odz = _zz32(off_delta[j])
        body = 1 + _size_uvarint(tsz) + _size_uvarint(odz) + tail
        pos = _put_uvarint(out, pos, _zz32(body))
        out[pos] = 0
        pos += 1
        pos = _put_uvarint(out, pos, tsz)
        pos = _put_uvarint(out, pos, odz)
        _copy(out, pos, arena, tail_start[r], tail)
        pos += tail
    return pos
