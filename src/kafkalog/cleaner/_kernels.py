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
    _read_record,
    _size_uvarint,
    _varint,
    _varlong,
    _zz32,
    _zz64,
    put_record_head,
    record_head_size,
)
from .md5 import MD5_LANES, MD5_ONE_BLOCK, md5_hash_lanes, md5_load_block, md5_long


@njit(cache=True, nogil=True)
def _uvarint_size_of_zz32(v):
    return _size_uvarint(_zz32(v))


@njit(cache=True, nogil=True)
def walk_records(
    arena, sec_start, sec_end, counts, base_offset, base_ts, append_ts, use_append_ts,
    rec_start, tail_start, rec_end, offsets, timestamps, key_pos, key_len, val_len, keys_only, hash_from, digests,
):  # fmt: skip
    """Walk every record of every section; fill the per-record arrays. Returns (code, batch, record).

    ``keys_only`` (the map pass): every record is still read in full (DefaultRecord.readFrom's checks), but only
    ``offsets``, ``key_pos`` and ``key_len`` are filled: storing the other fields costs more than reading them.
    With ``keys_only`` and a non-empty ``digests``, each key a put takes (keyed, at or after ``hash_from``) is
    hashed as the walk reads it: its MD5 into ``digests[16 * r:]``, as SkimpyOffsetMap.digest_records makes it
    (hashing a run apart reads every key again, after the walk has moved megabytes past it).
    """
    hashing = keys_only and digests.shape[0] > 0
    words = np.empty(16 * MD5_LANES, np.uint32)
    state = np.empty(4 * MD5_LANES, np.uint32)
    queued = np.empty(MD5_LANES, np.int64)
    longer = np.empty(offsets.shape[0] if hashing else 0, np.int64)
    n_queued = 0
    n_long = 0
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
            o = base_offset[b] + od
            offsets[r] = o
            key_pos[r] = kp
            key_len[r] = kl
            if not keys_only:
                rec_start[r] = start
                # The key-length varint starts the tail; a null key (-1) is a 1-byte varint.
                tail_start[r] = kp - _uvarint_size_of_zz32(kl)
                rec_end[r] = pos
                timestamps[r] = append_ts[b] if use_append_ts[b] else base_ts[b] + tsd
                val_len[r] = vl
            elif hashing and kl >= 0 and o >= hash_from:
                if kl < MD5_ONE_BLOCK:
                    md5_load_block(arena, kp, kl, 0, words, n_queued)
                    queued[n_queued] = r
                    n_queued += 1
                    if n_queued == MD5_LANES:
                        md5_hash_lanes(words, state, queued, n_queued, digests)
                        n_queued = 0
                else:
                    longer[n_long] = r
                    n_long += 1
            r += 1
        if pos != end:
            return ERR_REMAINING, b, counts[b]
    if n_queued:
        md5_hash_lanes(words, state, queued, n_queued, digests)
    if n_long:
        md5_long(arena, key_pos, key_len, longer[:n_long], 0, digests, words, state)
    return OK, 0, 0


@njit(cache=True, nogil=True)
def touch_pages(arena, page_bytes):
    """Read one byte of every page of ``arena``: maps the pages of a file mapping ahead of its reader (the page
    faults happen here, on a read-ahead worker, not on the thread that scans the batch headers)."""
    total = np.uint64(0)
    for p in range(0, arena.shape[0], page_bytes):
        total += np.uint64(arena[p])
    return total


@njit(cache=True, nogil=True)
def reframed_sizes(records, tail_start, rec_end, ts_delta, off_delta):
    """Bytes each listed record takes once re-framed with its new timestamp delta."""
    sizes = np.empty(records.shape[0], np.int64)
    for j in range(records.shape[0]):
        r = records[j]
        body = record_head_size(_zz64(ts_delta[j]), _zz32(off_delta[j])) + rec_end[r] - tail_start[r]
        sizes[j] = _size_uvarint(_zz32(body)) + body
    return sizes


@njit(cache=True, nogil=True, inline="always")
def _put_reframed_head(out, pos, tail, ts_zz, off_zz):
    """put_record_head for a record whose ``tail`` bytes (key length onwards) follow unchanged."""
    return put_record_head(out, pos, record_head_size(ts_zz, off_zz) + tail, ts_zz, off_zz)


@njit(cache=True, nogil=True)
def reframe_records(arena, records, tail_start, rec_end, ts_delta, off_delta, out):
    """Write the listed records back to back into ``out`` with new timestamp deltas; return bytes written."""
    pos = 0
    for j in range(records.shape[0]):
        r = records[j]
        tail = rec_end[r] - tail_start[r]
        pos = _put_reframed_head(out, pos, tail, _zz64(ts_delta[j]), _zz32(off_delta[j]))
        _copy(out, pos, arena, tail_start[r], tail)
        pos += tail
    return pos


# ----- the fast twin of the per-batch Python: batch headers, retention and output of a whole run --------------
# Columns of the int64 header table ``hdr[column, batch]`` filled by scan_batches.
H_POS, H_SIZE, H_BASE, H_LAST_DELTA, H_ATTR, H_BASE_TS, H_MAX_TS, H_PID, H_EPOCH, H_SEQ, H_COUNT, H_PLE = range(12)
HEADER_COLUMNS = 12
# scan_batches status codes.
SCAN_DONE = 0  # the run ended normally (run size reached, end of the range, or a partial tail)
SCAN_OTHER = 1  # a batch the fast path does not take (legacy, compressed, transactional, control, or odd)
SCAN_GROW = 2  # chunked: no whole batch fits the read buffer
SCAN_FULL = 3  # the header table is full
# Record marks of the map pass (SkimpyOffsetMap-independent): 0 not put, 1 put, 2 put and still the key's latest.
MARK_PUT = 1
MARK_LATEST = 2
# decide_records verdicts.
V_DROP = 0
V_KEEP = 1
V_LOOKUP = 2  # keyed, below the map's latest offset, not marked: needs the map's get


@njit(cache=True, nogil=True, inline="always")
def _be(buf, pos, n):
    v = np.int64(0)
    for j in range(n):
        v = (v << 8) | np.int64(buf[pos + j])
    if n < 8 and v >= (np.int64(1) << (8 * n - 1)):
        v -= np.int64(1) << (8 * n)
    return v


@njit(cache=True, nogil=True)
def scan_batches(buf, pos, end, run_bytes, buffer_size, chunked, hdr, chunk_first, chunk_limit):
    """Read the headers of the v2 batches of one run of ``buf[pos:end]`` into ``hdr`` (see H_*).

    Unchunked (the map pass): batches until one ends ``run_bytes`` or more past ``pos``, as ``_batch_runs``.
    Chunked (the copy pass): read buffers of ``buffer_size`` bytes, each the whole batches that fit in it, while the
    run is under ``run_bytes``, as ``Cleaner._read_chunks``; ``chunk_first[c]`` is chunk c's first batch and
    ``chunk_limit[c]`` the end of its read window. Only plain batches are taken: magic 2, no compression, neither
    transactional nor control, a sane record count. Returns (status, batches, chunks, position after the run).
    """
    start = pos
    n = 0
    nc = 0
    cap = hdr.shape[1]
    while pos < end and (not chunked or pos - start < run_bytes):
        limit = min(pos + buffer_size, end) if chunked else end
        chunk_pos = pos
        if chunked:
            if nc + 1 >= chunk_first.shape[0]:
                chunk_first[nc] = n  # the chunk table is full: the run ends here
                return SCAN_DONE, n, nc, pos
            chunk_first[nc] = n
            chunk_limit[nc] = limit
        taken = 0
        while limit - pos >= 17:
            size = _be(buf, pos + 8, 4)
            if size < 14 or buf[pos + 16] > 2:
                return SCAN_OTHER, n, nc, pos  # corrupt: the reference path raises
            if size > limit - pos - 12:
                break
            if n == cap:
                if chunked and nc > 0:  # end the run after the last whole read buffer
                    return SCAN_DONE, chunk_first[nc], nc, chunk_pos
                return SCAN_FULL, n, nc, pos
            attr = _be(buf, pos + 21, 2)
            count = _be(buf, pos + 57, 4)
            if buf[pos + 16] != 2 or size + 12 < 61 or (attr & 0x37) != 0 or count < 0 or count > (size - 49) // 7 + 1:
                return SCAN_OTHER, n, nc, pos
            hdr[H_POS, n] = pos
            hdr[H_SIZE, n] = size + 12
            hdr[H_BASE, n] = _be(buf, pos, 8)
            hdr[H_PLE, n] = _be(buf, pos + 12, 4)
            hdr[H_ATTR, n] = attr
            hdr[H_LAST_DELTA, n] = _be(buf, pos + 23, 4)
            hdr[H_BASE_TS, n] = _be(buf, pos + 27, 8)
            hdr[H_MAX_TS, n] = _be(buf, pos + 35, 8)
            hdr[H_PID, n] = _be(buf, pos + 43, 8)
            hdr[H_EPOCH, n] = _be(buf, pos + 51, 2)
            hdr[H_SEQ, n] = _be(buf, pos + 53, 4)
            hdr[H_COUNT, n] = count
            n += 1
            taken += 1
            pos += size + 12
            if not chunked and pos - start >= run_bytes:
                return SCAN_DONE, n, nc, pos
        if not chunked:
            return SCAN_DONE, n, nc, pos  # a partial tail (or the end)
        if taken == 0:
            return SCAN_GROW, n, nc, pos
        nc += 1
    if chunked:
        chunk_first[nc] = n
    return SCAN_DONE, n, nc, pos


@njit(cache=True, nogil=True)
def mark_puts(marks, base, offsets, key_len, done, start_offset, last_put):
    """Mark the records the map put (keyed, at or after ``start_offset``, before ``done``) in ``marks``.

    Returns the last offset put, or -2 when offsets do not strictly increase (then marks cannot stand for the map).
    """
    cap = marks.shape[0]
    for i in range(done):
        if key_len[i] >= 0 and offsets[i] >= start_offset:
            o = offsets[i]
            if o <= last_put:
                return np.int64(-2)
            last_put = o
            rel = o - base
            if 0 <= rel < cap:
                marks[rel] = MARK_PUT
    return last_put


@njit(cache=True, nogil=True, inline="always")
def _superseded(arena, pos, end, base, marks, marks_base, latest_offset):
    """The end of the record at ``pos`` when the marks show it superseded (put by the map pass, which walked it in
    full, and no longer its key's latest), read from its length and offset delta alone; else -1."""
    body, p, ok = _varint(arena, pos, end)
    if not ok or body < 1 or body > end - p:
        return np.int64(-1)
    _tsd, q, ok = _varlong(arena, p + 1, p + body)
    od, q, ok2 = _varint(arena, q, p + body)
    if not (ok and ok2):
        return np.int64(-1)
    o = base + od
    rel = o - marks_base
    if o <= latest_offset and 0 <= rel < marks.shape[0] and marks[rel] == MARK_PUT:
        return p + body
    return np.int64(-1)


@njit(cache=True, nogil=True)
def walk_decide(
    arena, hdr, nb, marks, marks_base, latest_offset, now,
    cand_first, tail_start, rec_end, offsets, timestamps, key_pos, key_len, val_len, verdict,
):  # fmt: skip
    """The copy pass's walk and the cleaner's shouldRetainRecord in one, over plain batches (``hdr``, see H_*).

    A record the marks show superseded is dropped on its offset alone (see _superseded); the others are read in full
    and decided as decide_records does. Only the candidates, records kept (V_KEEP) or to look up in the map
    (V_LOOKUP), are stored, batch ``b``'s from ``cand_first[b]``: storing every record's fields costs more than
    reading them. Returns (code, batch, record, candidates, invalid records: without a key, below the latest
    offset).
    """
    c = 0
    invalid = 0
    for b in range(nb):
        cand_first[b] = c
        pos = hdr[H_POS, b] + 61
        end = hdr[H_POS, b] + hdr[H_SIZE, b]
        base = hdr[H_BASE, b]
        attr = hdr[H_ATTR, b]
        append_time = (attr & 0x08) != 0
        retain_deletes = (attr & 0x40) == 0 or now < hdr[H_BASE_TS, b]
        for i in range(hdr[H_COUNT, b]):
            if pos >= end:
                return ERR_PREMATURE_EOF, b, i, c, invalid
            skip_to = _superseded(arena, pos, end, base, marks, marks_base, latest_offset)
            if skip_to >= 0:
                pos = skip_to
                continue
            code, pos, tsd, od, kp, kl, _vp, vl, _hp, _hc = _read_record(arena, pos, end)
            if code != OK:
                return code, b, i, c, invalid
            o = base + od
            v = V_KEEP
            if o <= latest_offset:
                if kl < 0:
                    invalid += 1
                    continue
                if vl < 0 and not retain_deletes:
                    continue
                rel = o - marks_base
                m = marks[rel] if 0 <= rel < marks.shape[0] else 0
                if m == 0:
                    v = V_LOOKUP
                elif m != MARK_LATEST:
                    continue
            tail_start[c] = kp - _uvarint_size_of_zz32(kl)
            rec_end[c] = pos
            offsets[c] = o
            timestamps[c] = hdr[H_MAX_TS, b] if append_time else hdr[H_BASE_TS, b] + tsd
            key_pos[c] = kp
            key_len[c] = kl
            val_len[c] = vl
            verdict[c] = v
            c += 1
        if pos != end:
            return ERR_REMAINING, b, hdr[H_COUNT, b], c, invalid
    cand_first[nb] = c
    return OK, 0, 0, c, invalid


@njit(cache=True, nogil=True, inline="always")
def _put_be(out, pos, v, n):
    for j in range(n):
        out[pos + j] = np.uint8((v >> (8 * (n - 1 - j))) & 0xFF)


@njit(cache=True, nogil=True)
def _write_header(out, pos, hdr, b, length, attr, base_ts, max_ts, count):
    _put_be(out, pos, hdr[H_BASE, b], 8)
    _put_be(out, pos + 8, length - 12, 4)
    _put_be(out, pos + 12, hdr[H_PLE, b], 4)
    out[pos + 16] = 2
    _put_be(out, pos + 17, 0, 4)  # the CRC, filled in by the caller
    _put_be(out, pos + 21, attr, 2)
    _put_be(out, pos + 23, hdr[H_LAST_DELTA, b], 4)
    _put_be(out, pos + 27, base_ts, 8)
    _put_be(out, pos + 35, max_ts, 8)
    _put_be(out, pos + 43, hdr[H_PID, b], 8)
    _put_be(out, pos + 51, hdr[H_EPOCH, b], 2)
    _put_be(out, pos + 53, hdr[H_SEQ, b], 4)
    _put_be(out, pos + 57, count, 4)


@njit(cache=True, nogil=True)
def emit_run(
    arena, hdr, first, tail_start, rec_end, offsets, timestamps, val_len, keep, retain_empty, new_horizon,
    chunk_first, out, crc_at, chunk_out,
):  # fmt: skip
    """The cleaner's filterTo output for a run of plain batches, written back to back into ``out``.

    Per batch (Cleaner._rebuild_plans and _emit_v2): nothing kept, an empty batch (``retain_empty``) or nothing;
    everything kept and no delete horizon to add, the batch byte for byte; else the kept records re-framed under a
    new header (delete horizon ``new_horizon`` when a tombstone is kept and the batch has none). The CRC of each
    written header is left zero and its position listed in ``crc_at``. ``chunk_out[c]`` gets read buffer c's
    (output end, largest offset, largest timestamp, its shallow offset, records written). The record arrays list
    the candidates of walk_decide, batch ``b``'s from ``first[b]``, and ``keep`` says which stay: a record not
    listed is dropped. Returns (bytes written, CRCs to fill). ``out`` must hold the run plus 12 bytes per record and
    61 per batch.
    """
    pos = 0
    ncrc = 0
    for c in range(chunk_first.shape[0] - 1):
        max_offset = np.int64(-1)
        max_ts = np.int64(-1)
        shallow = np.int64(-1)
        written = 0
        for b in range(chunk_first[c], chunk_first[c + 1]):
            lo = first[b]
            hi = first[b + 1]
            kept = 0
            tomb = False
            first_kept = -1
            for r in range(lo, hi):
                if keep[r]:
                    kept += 1
                    if first_kept < 0:
                        first_kept = r
                    if val_len[r] < 0:
                        tomb = True
            attr = hdr[H_ATTR, b]
            last = hdr[H_BASE, b] + hdr[H_LAST_DELTA, b]
            has_horizon = (attr & 0x40) != 0
            if kept == 0:
                if not retain_empty[b]:
                    continue
                ts = hdr[H_MAX_TS, b]
                _write_header(out, pos, hdr, b, 61, attr & 0x08, np.int64(-1), ts, 0)
                crc_at[ncrc] = pos
                ncrc += 1
                pos += 61
            elif kept == hdr[H_COUNT, b] and not (tomb and not has_horizon):
                size = hdr[H_SIZE, b]
                _copy(out, pos, arena, hdr[H_POS, b], size)
                ts = hdr[H_MAX_TS, b]
                pos += size
            else:
                if tomb and not has_horizon:
                    horizon = new_horizon
                    has_horizon = True
                else:
                    horizon = hdr[H_BASE_TS, b]
                base_ts = horizon if has_horizon else timestamps[first_kept]
                base = hdr[H_BASE, b]
                ts = np.int64(-1)
                p = pos + 61
                for r in range(lo, hi):
                    if not keep[r]:
                        continue
                    if timestamps[r] > ts:
                        ts = timestamps[r]
                    tail = rec_end[r] - tail_start[r]
                    p = _put_reframed_head(out, p, tail, _zz64(timestamps[r] - base_ts), _zz32(offsets[r] - base))
                    _copy(out, p, arena, tail_start[r], tail)
                    p += tail
                if attr & 0x08:  # log append time: the batch's own
                    ts = hdr[H_MAX_TS, b]
                new_attr = (attr & 0x08) | (0x40 if has_horizon else 0)
                _write_header(out, pos, hdr, b, p - pos, new_attr, base_ts, ts, kept)
                crc_at[ncrc] = pos
                ncrc += 1
                pos = p
            written += kept
            if ts > max_ts:
                max_ts = ts
                shallow = last
            if last > max_offset:
                max_offset = last
        chunk_out[0, c] = pos
        chunk_out[1, c] = max_offset
        chunk_out[2, c] = max_ts
        chunk_out[3, c] = shallow
        chunk_out[4, c] = written
    return pos, ncrc
