"""Building record batches v2, as Kafka's MemoryRecordsBuilder writes them.

``append`` only collects; ``build`` encodes every record in one numba pass (``_kernels.encode_records``),
compresses the section once, and writes the 61-byte header with its CRC-32C. ``encode_records_reference``
is the plain per-record twin, kept for clarity and tested against the fast path.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterable, Sequence
from typing import Any, TypeAlias

import numpy as np
import pyarrow as pa

from ..errors import InvalidRecordError, InvalidTimestampError
from ..layout import INT32_MAX
from . import _kernels
from . import compression as _codecs
from .batch import (
    CONTROL_MASK,
    DELETE_HORIZON_MASK,
    MAX_RECORD_OVERHEAD,
    RECORDS_OFFSET,
    TRANSACTIONAL_MASK,
    RecordBatch,
)
from .checksums import crc32c
from .types import (
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    BytesLike,
    ControlRecordType,
    Header,
    TimestampType,
)
from .varint import encode_varint, encode_varlong, size_of_varint
from .view import TIMESTAMP_TYPE_MASK

_RECORD_BOUND = MAX_RECORD_OVERHEAD + 3 * 5  # + key length, value length and header count varints
_BYTES_TYPES = (bytes, bytearray, memoryview)
_PREFIX_STRUCT = struct.Struct(">qiibI")  # baseOffset, batchLength, partitionLeaderEpoch, magic, crc
_TAIL_STRUCT = struct.Struct(">hiqqqhii")  # attributes .. recordsCount: the CRC-covered header part
_EMPTY_U8 = np.zeros(0, np.uint8)
_EMPTY_I64 = np.zeros(0, np.int64)


# A column of keys or values: a sequence of bytes-like or None, or an Arrow binary/string (chunked) array.
BinaryColumn: TypeAlias = Any
# One sequence of (key, value) header pairs per record.
HeaderColumn: TypeAlias = Sequence[Sequence[Header]]


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class RecordBatchBuilder:
    """Collect records, then ``build()`` one v2 batch (bytes), byte-compatible with Kafka's builder."""

    def __init__(
        self,
        compression: int | str = "none",
        timestamp_type: TimestampType | str | int = TimestampType.CREATE_TIME,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = NO_PRODUCER_EPOCH,
        base_sequence: int = NO_SEQUENCE,
        is_transactional: bool = False,
        base_offset: int = 0,
        *,
        partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
        compression_level: int | None = None,
        is_control: bool = False,
        log_append_time: int | None = None,
        delete_horizon_ms: int | None = None,
        clock: Any = None,  # anything with milliseconds() (kafkalog.clock.Time); None: the system clock
    ) -> None:
        self.compression_type = _codecs.codec_id(compression)
        self.compression_level = _codecs.resolve_level(self.compression_type, compression_level)
        self.timestamp_type = TimestampType.parse(timestamp_type)
        if self.timestamp_type == TimestampType.NO_TIMESTAMP_TYPE:
            raise ValueError("A v2 batch cannot carry NO_TIMESTAMP_TYPE")
        if is_transactional and producer_id < 0:
            raise ValueError("Cannot write a transactional batch without a valid producer id")
        if base_sequence >= 0 and producer_id < 0:
            raise ValueError("Cannot write a sequence without a valid producer id")
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.is_transactional = is_transactional
        self.is_control = is_control
        self.base_offset = base_offset
        self.partition_leader_epoch = partition_leader_epoch
        self.delete_horizon_ms = delete_horizon_ms
        self._clock = clock
        self.log_append_time = log_append_time
        # One (key, value, timestamp, headers) tuple per record: a single list append per record.
        self._records: list[tuple[BytesLike | None, BytesLike | None, int, Iterable[Header]]] = []
        self._offsets: list[int] | None = None
        self._has_headers = False

    # ----- collecting ----------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._records)

    def _now(self) -> int:
        return self._clock.milliseconds() if self._clock is not None else _now_ms()

    def append(
        self,
        key: bytes | None,
        value: bytes | None,
        timestamp: int | None = None,
        headers: Iterable[Header] = (),
        *,
        offset: int | None = None,
    ) -> int:
        """Add one record; return its offset. ``timestamp=None`` means now, as the Kafka producer does."""
        if key is not None and not isinstance(key, _BYTES_TYPES):
            raise TypeError(f"record key must be bytes or None, not {type(key).__name__}")
        if value is not None and not isinstance(value, _BYTES_TYPES):
            raise TypeError(f"record value must be bytes or None, not {type(value).__name__}")
        if timestamp is None:
            timestamp = self._now()
        elif timestamp < 0 and timestamp != NO_TIMESTAMP:
            raise InvalidTimestampError(f"Invalid negative timestamp {timestamp}")
        if offset is None and self._offsets is None:
            offset = self.base_offset + len(self._records)
        else:
            offset = self._explicit_offset(offset)
        if headers:
            headers = _check_headers(headers)
            self._has_headers = True
        self._records.append((key, value, timestamp, headers))
        return offset

    def _explicit_offset(self, offset: int | None) -> int:
        """Validate a caller-given offset (or continue after one) and switch to tracking every offset."""
        n = len(self._records)
        last = (self.base_offset + n - 1) if self._offsets is None else self._offsets[-1]
        if offset is None:
            offset = last + 1
        elif n and offset <= last:
            raise InvalidRecordError(
                f"Illegal offset {offset} following previous offset {last} (offsets must increase monotonically)"
            )
        if offset < self.base_offset:
            raise InvalidRecordError(f"Illegal offset {offset}: below the base offset {self.base_offset}")
        if offset - self.base_offset > INT32_MAX:
            raise InvalidRecordError(f"Offset {offset} is more than 2^31-1 past the base offset {self.base_offset}")
        if self._offsets is None:
            self._offsets = list(range(self.base_offset, self.base_offset + n))
        self._offsets.append(offset)
        return offset

    def estimated_size_in_bytes(self) -> int:
        """An upper bound of the uncompressed batch size so far (for batch-size limits).

        Per record: length, attributes, timestamp and offset deltas at their widest (21 bytes), the key,
        value and header-count varints (5 each), the key and value, and for each header two 5-byte
        varints plus its UTF-8 key and value.
        """
        size = RECORDS_OFFSET + _RECORD_BOUND * len(self._records)
        for key, value, _, headers in self._records:
            size += len(key or b"") + len(value or b"")
            for hkey, hvalue in headers:
                size += 10 + len(hkey.encode("utf-8")) + len(hvalue or b"")
        return size

    # ----- building ------------------------------------------------------------------------
    def _offset_deltas(self) -> np.ndarray:
        if self._offsets is None:
            return np.arange(len(self._records), dtype=np.int64)
        return np.asarray(self._offsets, dtype=np.int64) - self.base_offset

    def _encode(self) -> tuple[bytes, int, int, int]:
        """(uncompressed records section, base timestamp, max timestamp, last offset delta)."""
        keys, values, timestamps, headers = zip(*self._records, strict=True)
        ts = np.asarray(timestamps, dtype=np.int64)
        return self._encode_columns(keys, values, ts, headers if self._has_headers else None, self._offset_deltas())

    def _encode_columns(
        self,
        keys: BinaryColumn,
        values: BinaryColumn,
        ts: np.ndarray,
        headers: HeaderColumn | None,
        offset_deltas: np.ndarray,
    ) -> tuple[bytes, int, int, int]:
        if self.timestamp_type == TimestampType.LOG_APPEND_TIME:
            max_ts = self.log_append_time if self.log_append_time is not None else self._now()
        else:  # MemoryRecordsBuilder keeps the largest timestamp, starting from NO_TIMESTAMP (-1)
            max_ts = max(int(ts.max()), NO_TIMESTAMP)
        base_ts = self.delete_horizon_ms if self.delete_horizon_ms is not None else int(ts[0])
        section = encode_records_fast(keys, values, ts - base_ts, offset_deltas, headers)
        return section, base_ts, max_ts, int(offset_deltas[-1])

    def build_from(
        self,
        keys: BinaryColumn,
        values: BinaryColumn,
        timestamps: Sequence[int] | np.ndarray | None = None,
        headers: HeaderColumn | None = None,
    ) -> bytes:
        """Build one batch from whole columns with this builder's settings: the bulk path, no per-record Python.

        ``keys`` and ``values``: sequences of bytes or None, or Arrow binary/string arrays. ``timestamps``:
        ints or an int64 array (None means now for every record). ``headers``: None, or one sequence of
        (str, bytes | None) pairs per record. Offsets run from ``base_offset``.
        """
        if self._records:
            raise ValueError("build_from takes whole columns; this builder already holds appended records")
        n = len(values)
        if len(keys) != n:
            raise ValueError(f"{len(keys)} keys for {n} values")
        if n == 0:
            return b""
        if timestamps is None:
            ts = np.full(n, self._now(), dtype=np.int64)
        else:
            ts = np.asarray(timestamps, dtype=np.int64)
            if ts.shape != (n,):
                raise ValueError(f"{ts.size} timestamps for {n} values")
            bad = np.flatnonzero((ts < 0) & (ts != NO_TIMESTAMP))
            if bad.size:
                raise InvalidTimestampError(f"Invalid negative timestamp {int(ts[bad[0]])} (record {int(bad[0])})")
        if headers is not None:
            if len(headers) != n:
                raise ValueError(f"{len(headers)} header lists for {n} values")
            headers = [_check_headers(h) if h else () for h in headers]
        offset_deltas = np.arange(n, dtype=np.int64)
        try:
            section, base_ts, max_ts, last_delta = self._encode_columns(keys, values, ts, headers, offset_deltas)
        except (pa.ArrowTypeError, pa.ArrowInvalid) as e:
            raise TypeError(f"keys and values must be bytes or None: {e}") from None
        return self._assemble(section, n, base_ts, max_ts, last_delta)

    def records_section(self) -> bytes:
        """The records as they go into the batch before compression (b'' when there are none)."""
        return self._encode()[0] if self._records else b""

    def build(self) -> bytes:
        """The finished batch; b'' when no record was appended (as Kafka's builder returns EMPTY)."""
        if not self._records:
            return b""
        section, base_ts, max_ts, last_delta = self._encode()
        return self._assemble(section, len(self._records), base_ts, max_ts, last_delta)

    def _assemble(self, section: bytes, count: int, base_ts: int, max_ts: int, last_delta: int) -> bytes:
        return assemble_batch(
            section,
            record_count=count,
            last_offset_delta=last_delta,
            base_offset=self.base_offset,
            base_timestamp=base_ts,
            max_timestamp=max_ts,
            compression_type=self.compression_type,
            compression_level=self.compression_level,
            timestamp_type=self.timestamp_type,
            has_delete_horizon=self.delete_horizon_ms is not None,
            **producer_fields(self),
        )


def build_batch(
    keys: BinaryColumn,
    values: BinaryColumn,
    timestamps: Sequence[int] | np.ndarray | None = None,
    headers: HeaderColumn | None = None,
    **options: Any,
) -> bytes:
    """One v2 batch from whole columns: ``RecordBatchBuilder(**options).build_from(...)``."""
    return RecordBatchBuilder(**options).build_from(keys, values, timestamps, headers)


def _check_headers(headers: Iterable[Header]) -> tuple[Header, ...]:
    if not headers:
        return ()
    out = []
    for item in headers:
        try:
            hkey, hvalue = item
        except (TypeError, ValueError):
            raise TypeError("each header must be a (key, value) pair") from None
        if isinstance(hkey, _BYTES_TYPES):
            hkey = bytes(hkey).decode("utf-8", "replace")
        if not isinstance(hkey, str):
            raise TypeError("header key must be a str (it may not be null)")
        if hvalue is not None and not isinstance(hvalue, _BYTES_TYPES):
            raise TypeError(f"header value must be bytes or None, not {type(hvalue).__name__}")
        out.append((hkey, hvalue))
    return tuple(out)


def producer_fields(source: RecordBatch | RecordBatchBuilder) -> dict[str, Any]:
    """The producer, transaction and leader-epoch fields of a batch (or of a builder) as assemble_batch takes them:
    what a batch rebuilt around new records keeps of the one it replaces."""
    return {
        "producer_id": source.producer_id,
        "producer_epoch": source.producer_epoch,
        "base_sequence": source.base_sequence,
        "is_transactional": source.is_transactional,
        "is_control": source.is_control,
        "partition_leader_epoch": source.partition_leader_epoch,
    }


def assemble_batch(
    records: bytes,
    *,
    record_count: int,
    last_offset_delta: int,
    base_offset: int,
    base_timestamp: int,
    max_timestamp: int,
    compression_type: int = _codecs.NONE,
    compression_level: int | None = None,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    is_control: bool = False,
    has_delete_horizon: bool = False,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """Compress an encoded records section and wrap it in a v2 header with its CRC-32C."""
    payload = _codecs.compress(compression_type, records, compression_level) if compression_type else records
    attributes = compression_type
    if timestamp_type == TimestampType.LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_MASK
    if is_transactional:
        attributes |= TRANSACTIONAL_MASK
    if is_control:
        attributes |= CONTROL_MASK
    if has_delete_horizon:
        attributes |= DELETE_HORIZON_MASK
    tail = _TAIL_STRUCT.pack(
        attributes,
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        record_count,
    )
    crc = crc32c(payload, crc32c(tail))
    batch_length = RECORDS_OFFSET + len(payload) - 12
    head = _PREFIX_STRUCT.pack(base_offset, batch_length, partition_leader_epoch, 2, crc) + tail
    return head + payload


def control_batch(
    control_type: ControlRecordType | int,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    timestamp: int,
    *,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """A COMMIT or ABORT marker batch (78 bytes), as MemoryRecords.withEndTransactionMarker writes it."""
    control_type = ControlRecordType(control_type)
    if control_type not in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
        raise ValueError(f"an end transaction marker is COMMIT or ABORT, not {control_type.name}")
    key = struct.pack(">hh", 0, control_type)
    value = struct.pack(">hi", 0, coordinator_epoch)
    return assemble_batch(
        encode_records_reference([key], [value], [0], [0], [()]),
        record_count=1,
        last_offset_delta=0,
        base_offset=base_offset,
        base_timestamp=timestamp,
        max_timestamp=timestamp,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=NO_SEQUENCE,
        is_transactional=True,
        is_control=True,
        partition_leader_epoch=partition_leader_epoch,
    )


# ----- the two record encoders ------------------------------------------------------------------


def _field(data: BytesLike | None) -> bytes:
    if data is None:
        return b"\x01"  # zigzag(-1)
    return encode_varint(len(data)) + bytes(data)


def encode_records_reference(
    keys: Sequence[BytesLike | None],
    values: Sequence[BytesLike | None],
    ts_deltas: Iterable[int],
    offset_deltas: Iterable[int],
    headers: HeaderColumn,
) -> bytes:
    """Encode records one by one (DefaultRecord.writeTo): the clear reference path."""
    out = bytearray()
    for key, value, tsd, od, hdrs in zip(keys, values, ts_deltas, offset_deltas, headers, strict=True):
        body = bytearray(b"\x00")
        body += encode_varlong(int(tsd))
        body += encode_varint(int(od))
        body += _field(key)
        body += _field(value)
        body += encode_varint(len(hdrs))
        for hkey, hvalue in hdrs:
            body += _field(hkey.encode("utf-8"))
            body += _field(hvalue)
        out += encode_varint(len(body))
        out += body
    return bytes(out)


def binary_columns(items: BinaryColumn) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(data, start, length) arrays of bytes-or-None items (a sequence or an Arrow array); length -1 is None."""
    if len(items) == 0:
        return _EMPTY_U8, _EMPTY_I64, _EMPTY_I64
    if isinstance(items, pa.ChunkedArray):
        items = items.combine_chunks()
    if isinstance(items, pa.Array):
        arr = items.cast(pa.large_binary()) if items.type != pa.large_binary() else items
    else:
        arr = pa.array(items, type=pa.large_binary())
    bufs = arr.buffers()
    offsets = np.frombuffer(bufs[1], dtype=np.int64, count=len(arr) + 1, offset=arr.offset * 8)
    data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None else _EMPTY_U8
    lengths = np.diff(offsets)
    if arr.null_count:
        lengths = np.where(arr.is_null().to_numpy(zero_copy_only=False), -1, lengths)
    return data, offsets[:-1], lengths


def encode_records_fast(
    keys: BinaryColumn,
    values: BinaryColumn,
    ts_deltas: np.ndarray,
    offset_deltas: np.ndarray,
    headers: HeaderColumn | None,
) -> bytes:
    """Encode every record in one numba pass; byte-identical to encode_records_reference.

    ``headers`` is one sequence of (key, value) pairs per record, or None when no record has any.
    """
    n = len(values)
    if headers is None:
        hdr_count = np.zeros(n, dtype=np.int64)
    else:
        hdr_count = np.fromiter(map(len, headers), dtype=np.int64, count=n)
    if headers is not None and hdr_count.any():
        hkeys = [k.encode("utf-8") for hs in headers for k, _ in hs]
        hvals = [v for hs in headers for _, v in hs]
    else:
        hkeys, hvals = [], []
    return encode_record_columns(keys, values, hkeys, hvals, hdr_count, ts_deltas, offset_deltas)


def encode_record_columns(
    keys: BinaryColumn,
    values: BinaryColumn,
    header_keys: BinaryColumn,
    header_values: BinaryColumn,
    header_counts: np.ndarray,
    ts_deltas: np.ndarray,
    offset_deltas: np.ndarray,
) -> bytes:
    """The records section from whole columns, in one numba pass: keys, values, header keys (UTF-8 bytes)
    and header values as lists of bytes/None or Arrow binary arrays; ``header_counts`` per record."""
    n = len(values)
    hdr_count = np.ascontiguousarray(header_counts, dtype=np.int64)
    hdr_first = np.zeros(n, dtype=np.int64)
    if n > 1:
        np.cumsum(hdr_count[:-1], out=hdr_first[1:])
    columns = [binary_columns(items) for items in (keys, values, header_keys, header_values)]
    ts_deltas = np.ascontiguousarray(ts_deltas, dtype=np.int64)
    offset_deltas = np.ascontiguousarray(offset_deltas, dtype=np.int64)
    key_len, val_len, hkey_len, hval_len = (lengths for _data, _starts, lengths in columns)
    sizes = _kernels.record_body_sizes(
        key_len, val_len, ts_deltas, offset_deltas, hdr_first, hdr_count, hkey_len, hval_len
    )
    out = np.empty(int(sizes.sum()) + 5 * n, dtype=np.uint8)
    key_cols, val_cols, hkey_cols, hval_cols = columns
    written = _kernels.encode_records(
        out, sizes, key_cols, val_cols, ts_deltas, offset_deltas, hdr_first, hdr_count, hkey_cols, hval_cols
    )
    return out[:written].tobytes()


def record_size(
    key: bytes | None,
    value: bytes | None,
    offset_delta: int,
    timestamp_delta: int,
    headers: Sequence[Header] = (),
) -> int:
    """Bytes one record takes on disk (DefaultRecord.sizeInBytes)."""
    body = 1 + len(encode_varlong(timestamp_delta)) + size_of_varint(offset_delta)
    body += len(_field(key)) + len(_field(value)) + size_of_varint(len(headers))
    for hkey, hvalue in headers:
        body += len(_field(hkey.encode("utf-8"))) + len(_field(hvalue))
    return size_of_varint(body) + body
