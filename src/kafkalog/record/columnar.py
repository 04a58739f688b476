"""Columnar decode: a run of batches (one batch, or a whole segment) into one Arrow table.

The fast path decompresses each batch once, walks every record of the run in a single numba call
(``_kernels.decode_records``) and gathers keys, values and headers into Arrow buffers: no Python work
per record. ``reference_to_arrow`` builds the same table from the per-record iterators; the tests hold
the two equal. Control batches are skipped unless asked for, as a consumer never sees them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from ..errors import RecordTooLargeError
from ..layout import INT32_MAX
from . import _kernels
from . import compression as codecs
from .batch import RecordBatch
from .legacy import LegacyBatch
from .scan import AnyBatch, iter_batches
from .types import Record, TimestampType

if TYPE_CHECKING:
    from typing_extensions import Buffer

HEADER_TYPE = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))
SCHEMA = pa.schema(
    [
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("timestamp", pa.timestamp("ms", tz="UTC"), nullable=False),
        pa.field("timestampType", pa.int32(), nullable=False),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("headers", HEADER_TYPE, nullable=False),
    ]
)

_ERRORS = {
    _kernels.ERR_PREMATURE_EOF: "Incorrect declared batch size, premature EOF reached",
    _kernels.ERR_REMAINING: "Incorrect declared batch size, records still remaining in file",
    _kernels.ERR_BAD_VARINT: "Found invalid record structure: bad or truncated varint",
    _kernels.ERR_BODY_SIZE: "Invalid record size: the record length exceeds the bytes left",
    _kernels.ERR_FIELD_OVERRUN: "Found invalid record structure: a field overruns the record",
    _kernels.ERR_HEADER_COUNT: "Found invalid number of record headers",
    _kernels.ERR_HEADER_KEY: "Invalid negative header key size",
    _kernels.ERR_SIZE_MISMATCH: "Invalid record size: bytes read differ from the declared record length",
}

BatchFilter = Callable[[AnyBatch], bool]
# A run of v2 batches is decoded with one kernel call; runs are cut at this many batch bytes so the
# decoded keys and values of a run stay far below Arrow's 2 GiB per binary array.
MAX_RUN_BYTES = 64 * 1024 * 1024


def to_arrow(buffer: Buffer, **options: Any) -> pa.Table:
    """Decode every batch in ``buffer`` (bytes, memoryview, mmap) into a table with ``SCHEMA``.

    Takes the options of ``batches_to_arrow``. A CRC mismatch raises CorruptRecordError.
    """
    return batches_to_arrow(iter_batches(buffer), **options)


def batches_to_arrow(
    batches: Iterable[AnyBatch],
    *,
    start_offset: int | None = None,
    end_offset: int | None = None,
    include_control: bool = False,
    verify_crc: bool = True,
    keep_batch: BatchFilter | None = None,
) -> pa.Table:
    """Decode a run of batch views into one table: v2 runs on the fast path, legacy messages beside them.

    ``start_offset`` (inclusive) and ``end_offset`` (exclusive) trim records; ``keep_batch`` can drop
    whole batches (for example aborted transactions); control batches are skipped unless included.
    """
    tables: list[pa.Table] = []
    run: list[RecordBatch] = []
    run_bytes = 0
    for batch in batches:
        if start_offset is not None and batch.last_offset < start_offset:
            continue
        if end_offset is not None and batch.magic == 2 and batch.base_offset >= end_offset:
            break
        if verify_crc:
            batch.ensure_valid()
        if batch.is_control and not include_control:
            continue
        if keep_batch is not None and not keep_batch(batch):
            continue
        if isinstance(batch, LegacyBatch):
            if run:
                tables.append(_decode_run(run))
                run, run_bytes = [], 0
            tables.append(_records_table(batch.records(), batch.timestamp_type_id))
            continue
        run.append(batch)
        run_bytes += batch.size_in_bytes
        if run_bytes >= MAX_RUN_BYTES:
            tables.append(_decode_run(run))
            run, run_bytes = [], 0
    if run:
        tables.append(_decode_run(run))
    table = pa.concat_tables(tables) if tables else SCHEMA.empty_table()
    return _trim(table, start_offset, end_offset)


def _trim(table: pa.Table, start_offset: int | None, end_offset: int | None) -> pa.Table:
    if (start_offset is None and end_offset is None) or table.num_rows == 0:
        return table
    offsets = table.column("offset").to_numpy()
    mask = np.ones(len(offsets), dtype=bool)
    if start_offset is not None:
        mask &= offsets >= start_offset
    if end_offset is not None:
        mask &= offsets < end_offset
    return table if mask.all() else table.filter(pa.array(mask))


def _decode_run(run: list[RecordBatch]) -> pa.Table:
    """Decode consecutive v2 batches with one kernel call."""
    for batch in run:
        if batch.record_count < 0:
            raise batch.invalid_record(f"Found invalid record count {batch.record_count} in magic v2 batch")
    run = [b for b in run if b.record_count > 0]
    if not run:
        return SCHEMA.empty_table()
    nb = len(run)
    counts = np.fromiter((b.record_count for b in run), dtype=np.int64, count=nb)
    base_offset = np.fromiter((b.base_offset for b in run), dtype=np.int64, count=nb)
    base_ts = np.fromiter((b.base_timestamp for b in run), dtype=np.int64, count=nb)
    max_ts = np.fromiter((b.max_timestamp for b in run), dtype=np.int64, count=nb)
    log_append = np.fromiter((bool(b.attributes & 0x08) for b in run), dtype=np.bool_, count=nb)
    arena, starts, ends = _arena(run)

    n = int(counts.sum())
    # A record takes at least 7 bytes; a count beyond that is corrupt, and must not size allocations.
    if n > (int((ends - starts).sum()) // 7) + 1:
        _raise_first_overcount(run, starts, ends)
    # separate arrays, not one table: the Arrow columns hold on to offsets and timestamps only
    decoded = tuple(np.empty(n, np.int64) for _ in range(_kernels.DECODED_FIELDS))
    code, bi, ri = _kernels.decode_records(
        arena, starts, ends, counts, base_offset, base_ts, max_ts, log_append, decoded
    )
    out_offset, out_ts, key_pos, key_len, val_pos, val_len, hdr_pos, hdr_count = decoded
    if code != _kernels.OK:
        raise run[bi].invalid_record(f"{_ERRORS[code]} (record {ri} of {run[bi].record_count})")
    ts_type = np.repeat(log_append.astype(np.int32), counts)
    headers = _headers_array(arena, hdr_pos, hdr_count)
    columns = [
        pa.array(out_offset),
        pa.array(out_ts).view(pa.timestamp("ms", tz="UTC")),
        pa.array(ts_type),
        _binary_array(arena, key_pos, key_len),
        _binary_array(arena, val_pos, val_len),
        headers,
    ]
    return pa.Table.from_arrays(columns, schema=SCHEMA)


def _arena(run: list[RecordBatch]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One byte array holding every records section, with each section's [start, end)."""
    source = run[0].source_buffer
    if all(b.compression_type == codecs.NONE and b.source_buffer is source for b in run):
        starts = np.fromiter((b.position + 61 for b in run), dtype=np.int64, count=len(run))
        ends = np.fromiter((b.position + b.size_in_bytes for b in run), dtype=np.int64, count=len(run))
        return np.frombuffer(source, dtype=np.uint8), starts, ends
    sections = [b.records_section() for b in run]
    lengths = np.fromiter((len(s) for s in sections), dtype=np.int64, count=len(sections))
    ends = np.cumsum(lengths)
    starts = ends - lengths
    return np.frombuffer(b"".join(sections), dtype=np.uint8), starts, ends


def _raise_first_overcount(run: Sequence[RecordBatch], starts: np.ndarray, ends: np.ndarray) -> None:
    for b, s, e in zip(run, starts, ends, strict=True):
        if b.record_count > (e - s) // 7 + 1:
            raise b.invalid_record(
                f"Incorrect declared batch size, premature EOF reached: {b.record_count} records declared in "
                f"{e - s} bytes"
            )


_BINARY = pa.binary()


def _binary_array(arena: np.ndarray, starts: np.ndarray, lengths: np.ndarray, typ: pa.DataType = _BINARY) -> pa.Array:
    n = len(starts)
    sizes = np.maximum(lengths, 0)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    total = int(offsets[-1])
    data = np.empty(total, dtype=np.uint8)
    _kernels.gather(arena, starts, lengths, offsets, data)
    if total > INT32_MAX:
        raise RecordTooLargeError(
            f"Decoded fields total {total} bytes, beyond one Arrow binary array (2 GiB); decode fewer batches at once"
        )
    null = lengths < 0
    null_count = int(null.sum())
    validity = pa.py_buffer(np.packbits(~null, bitorder="little")) if null_count else None
    buffers = [validity, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)]
    return pa.Array.from_buffers(typ, n, buffers, null_count=null_count)


def _headers_array(arena: np.ndarray, hdr_pos: np.ndarray, hdr_count: np.ndarray) -> pa.Array:
    n = len(hdr_pos)
    list_offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(hdr_count, out=list_offsets[1:])
    total = int(list_offsets[-1])
    hkey_pos = np.empty(total, np.int64)
    hkey_len = np.empty(total, np.int64)
    hval_pos = np.empty(total, np.int64)
    hval_len = np.empty(total, np.int64)
    if total:
        _kernels.decode_headers(arena, hdr_pos, hdr_count, hkey_pos, hkey_len, hval_pos, hval_len)
    keys = _binary_array(arena, hkey_pos, hkey_len, pa.string())
    if total and _kernels.any_high_byte(np.frombuffer(keys.buffers()[2], dtype=np.uint8)):
        keys = _repair_utf8(keys)
    values = _binary_array(arena, hval_pos, hval_len)
    structs = pa.StructArray.from_arrays([keys, values], fields=list(HEADER_TYPE.value_type))
    return pa.ListArray.from_arrays(pa.array(list_offsets), structs)


def _repair_utf8(keys: pa.Array) -> pa.Array:
    """Header keys are UTF-8; decode bad bytes with replacement characters, as Java's String does."""
    try:
        keys.validate(full=True)
        return keys
    except pa.ArrowInvalid:
        raw = keys.view(pa.binary()).to_pylist()
        return pa.array([k.decode("utf-8", "replace") for k in raw], type=pa.string())


def _records_table(records: list[Record], ts_type: TimestampType) -> pa.Table:
    """A table from decoded Record objects: the per-record path for legacy messages and the reference."""
    return pa.Table.from_arrays(
        [
            pa.array([r.offset for r in records], pa.int64()),
            pa.array([r.timestamp for r in records], pa.int64()).view(pa.timestamp("ms", tz="UTC")),
            pa.array([int(ts_type)] * len(records), pa.int32()),
            pa.array([r.key for r in records], pa.binary()),
            pa.array([r.value for r in records], pa.binary()),
            pa.array([[{"key": k, "value": v} for k, v in r.headers] for r in records], HEADER_TYPE),
        ],
        schema=SCHEMA,
    )


def reference_to_arrow(buffer: Buffer, *, include_control: bool = False) -> pa.Table:
    """The same table as ``to_arrow``, built by the per-record reference iterators (for tests)."""
    tables = []
    for batch in iter_batches(buffer):
        batch.ensure_valid()
        if batch.is_control and not include_control:
            continue
        tables.append(_records_table(batch.records(), batch.timestamp_type_id))
    return pa.concat_tables(tables) if tables else SCHEMA.empty_table()
