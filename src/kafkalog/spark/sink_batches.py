"""The sink's record batches from Arrow columns: size estimates, batch boundaries, and the batches themselves,
built with the record layer's columnar encoder (``record.builder``)."""

from __future__ import annotations

import logging

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numba import njit

from ..errors import (
    InvalidRecordError,
)
from ..record.builder import assemble_batch, binary_columns, encode_record_columns, encode_records_fast
from ..record.compression import codec_id

log = logging.getLogger(__name__)

# A record's framing at its widest (length, attributes, timestamp and offset deltas, key and value lengths,
# header count): sizes are estimated from above so a batch never outgrows batch.size or max.message.bytes.
RECORD_OVERHEAD = 36
HEADER_OVERHEAD = 10  # a header's key and value lengths
BATCH_OVERHEAD = 61


@njit(cache=True, nogil=True)
def chunk_starts(sizes, limit):  # pragma: no cover - compiled
    """Greedy batch boundaries: a new batch starts when the next record would take it past ``limit`` bytes
    (a record larger than the limit gets a batch of its own, as the Kafka producer does)."""
    n = sizes.shape[0]
    out = np.empty(n + 1, np.int64)
    k = 0
    acc = 0
    for i in range(n):
        if i == 0 or (acc > 0 and acc + sizes[i] > limit):
            out[k] = i
            k += 1
            acc = 0
        acc += sizes[i]
    out[k] = n
    return out[: k + 1]


def as_large_binary(array: pa.Array) -> pa.Array:
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    return array if array.type == pa.large_binary() else array.cast(pa.large_binary())


def binary_lengths(array: pa.Array) -> np.ndarray:
    """Byte lengths of a large_binary array, -1 for nulls."""
    return binary_columns(array)[2].astype(np.int64)


def _header_parts(headers: pa.Array) -> tuple[np.ndarray, pa.Array, pa.Array]:
    """(headers per record, every header key, every header value) of a list<struct<key,value>> array."""
    if isinstance(headers, pa.ChunkedArray):
        headers = headers.combine_chunks()
    counts = pc.fill_null(pc.list_value_length(headers), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    flat = headers.flatten()  # skips null lists, honours the slice offset
    if flat.null_count:
        raise InvalidRecordError("A header in the 'headers' column is null: every header needs a key")
    hkeys = flat.field(0)
    if hkeys.null_count:
        raise InvalidRecordError("Null header keys are not permitted (a header in the 'headers' column has a null key)")
    return counts, hkeys, flat.field(1)


def header_bytes(headers: pa.Array) -> np.ndarray:
    """Per record, at most the bytes its headers take (keys, values and their lengths), for size estimates."""
    counts, hkeys, hvalues = _header_parts(headers)
    each = np.maximum(binary_lengths(as_large_binary(hkeys)), 0) + np.maximum(
        binary_lengths(as_large_binary(hvalues)), 0
    )
    each += HEADER_OVERHEAD
    sums = np.concatenate(([0], np.cumsum(each)))
    ends = np.cumsum(counts)
    return sums[ends] - sums[ends - counts]


def _records_section(keys: pa.Array, values: pa.Array, ts_deltas: np.ndarray, headers: pa.Array | None) -> bytes:
    """The records section of a batch from Arrow columns (headers a list<struct<key,value>> array): the bulk
    encoder's kernels fed from the Arrow buffers, never per record in Python."""
    n = len(values)
    offset_deltas = np.arange(n, dtype=np.int64)
    if headers is None or not pc.any(pc.greater(pc.fill_null(pc.list_value_length(headers), 0), 0)).as_py():
        return encode_records_fast(keys, values, ts_deltas, offset_deltas, None)
    hdr_count, hkeys, hvalues = _header_parts(headers)
    return encode_record_columns(
        keys, values, as_large_binary(hkeys), as_large_binary(hvalues), hdr_count, ts_deltas, offset_deltas
    )


def build_arrow_batch(
    keys: pa.Array,
    values: pa.Array,
    timestamps: np.ndarray,
    headers: pa.Array | None = None,
    *,
    compression: str = "none",
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
) -> bytes:
    """One v2 batch (offsets from 0) from Arrow columns: keys/values binary or string arrays, ``timestamps``
    int64 ms, ``headers`` a list<struct<key:string,value:binary>> array or None."""
    n = len(values)
    if n == 0:
        return b""
    ts = np.ascontiguousarray(timestamps, dtype=np.int64)
    base_ts = int(ts[0])
    section = _records_section(as_large_binary(keys), as_large_binary(values), ts - base_ts, headers)
    codec = codec_id(compression)
    return assemble_batch(
        section,
        record_count=n,
        last_offset_delta=n - 1,
        base_offset=0,
        base_timestamp=base_ts,
        max_timestamp=max(int(ts.max()), -1),
        compression_type=codec,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
    )
