"""Text helpers of the dumper: how Kafka's DumpLogSegments spells values (Java's booleans and OptionalLong, absolute
paths), header keys from the columnar decode, legacy records' own CRC checks, control records, and the first batch at
an index entry's position (spec sections 1.6, 1.7 and 14)."""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterable
from typing import Any

from ..errors import MetadataParseError
from ..record.checksums import crc32
from ..record.compression import decompress
from ..record.kraft import decode_control_value, to_json_text
from ..record.legacy import LOG_OVERHEAD, LegacyBatch
from ..record.types import ControlRecordType, Record, control_record_type, end_transaction_marker
from ..record.view import COMPRESSION_MASK
from ..storage.file_records import FileRecords
from .decoders import DumpError, jsonish


def joined_header_keys(headers) -> list[str]:
    """Each record's header keys joined by ',' (as headerKeys: [...] prints them), from the Arrow column."""
    column = headers.combine_chunks() if hasattr(headers, "combine_chunks") else headers
    counts = column.value_lengths().to_pylist()
    if not any(counts):
        return [""] * len(counts)
    names = column.flatten().field("key").to_pylist()
    out, start = [], 0
    for count in counts:
        out.append(",".join(names[start : start + count]))
        start += count
    return out


def absolute(path: str) -> str:
    """Java's File.getAbsolutePath: the cwd joined on, nothing normalised."""
    return path if os.path.isabs(path) else os.path.join(os.getcwd(), path)


def java_bool(value: bool) -> str:
    return "true" if value else "false"


def optional_long(value: int | None) -> str:
    return "OptionalLong.empty" if value is None else f"OptionalLong[{value}]"


# One field of a dumped line: Kafka's name, the value (as JSON has it) and how the text form shows the value.
DumpField = tuple[str, Any, Callable[[Any], str]]


def fields_text(fields: Iterable[DumpField]) -> str:
    """The text form's ``name: value`` pairs, one space apart."""
    return " ".join(f"{name}: {show(value)}" for name, value, show in fields)


def fields_json(fields: Iterable[DumpField]) -> dict[str, Any]:
    """The same fields as JSON members."""
    return {name: value for name, value, _show in fields}


def first_batch_last_offset(records: FileRecords, position: int, max_message_size: int) -> int:
    """Last offset of the first whole batch in ``[position, position + max_message_size)``, else -1.

    Kafka's tool dies (NoSuchElementException / IllegalArgumentException) where this returns -1.
    """
    if position < 0 or position > records.size:
        return -1
    for header in records.batch_headers(position, position + max_message_size):
        return header.last_offset
    return -1


def legacy_record_checks(batch: LegacyBatch) -> list[tuple[int, bool]]:
    """(stored crc, isValid) of each record a legacy batch yields: itself, or each inner message of a wrapper."""
    if batch.compression_type == 0:
        return [(batch.crc, batch.is_valid())]
    batch.records()  # validates the wrapper and its inner messages (a located error) before the raw walk below
    buf = batch.buffer
    magic = batch.magic
    pos = LOG_OVERHEAD + 4 + 2 + (8 if magic == 1 else 0)
    (key_len,) = struct.unpack_from(">i", buf, pos)
    pos += 4 + max(key_len, 0)
    (value_len,) = struct.unpack_from(">i", buf, pos)
    pos += 4
    data = memoryview(decompress(batch.compression_type, bytes(buf[pos : pos + value_len]), magic=magic))
    checks = []
    p = 0
    while len(data) - p >= LOG_OVERHEAD:
        (size,) = struct.unpack_from(">i", data, p + 8)
        (crc,) = struct.unpack_from(">I", data, p + LOG_OVERHEAD)
        valid = crc == crc32(data[p + LOG_OVERHEAD + 4 : p + LOG_OVERHEAD + size])
        checks.append((crc, valid and not data[p + LOG_OVERHEAD + 5] & COMPRESSION_MASK))
        p += LOG_OVERHEAD + size
    return checks


def control_info(record: Record) -> tuple[str, dict]:
    """Kafka's text for a control record (and the same facts for --json)."""
    assert record.key is not None  # a control record always has its key (the control type)
    kind = control_record_type(record.key)
    type_id = struct.unpack_from(">h", record.key, 2)[0]
    if kind in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
        marker = end_transaction_marker(record)
        return (
            f" endTxnMarker: {marker.type.name} coordinatorEpoch: {marker.coordinator_epoch}",
            {"endTxnMarker": marker.type.name, "coordinatorEpoch": marker.coordinator_epoch},
        )
    value = record.value or b""
    try:
        if kind == ControlRecordType.SNAPSHOT_HEADER:
            version, ts = struct.unpack_from(">hq", value)
            data = {"version": version, "lastContainedLogTimestamp": ts}
            return f" SnapshotHeader {jsonish(data)}", {"SnapshotHeader": data}
        if kind == ControlRecordType.SNAPSHOT_FOOTER:
            data = {"version": struct.unpack_from(">h", value)[0]}
            return f" SnapshotFooter {jsonish(data)}", {"SnapshotFooter": data}
        if kind == ControlRecordType.KRAFT_VERSION:
            version, kraft_version = struct.unpack_from(">hh", value)
            data = {"version": version, "kRaftVersion": kraft_version}
            return f" KRaftVersion {jsonish(data)}", {"KRaftVersion": data}
        if kind == ControlRecordType.KRAFT_VOTERS:
            data = decode_control_value(int(kind), value).to_json()
            return f" KRaftVoters {to_json_text(data)}", {"KRaftVoters": data}
    except (struct.error, MetadataParseError):
        raise DumpError(f"Cannot decode the {kind.name} control record at offset {record.offset}") from None
    # LEADER_CHANGE and UNKNOWN print the type, as Kafka's tool does.
    return f" controlType: {kind.name}({type_id})", {"controlType": kind.name, "controlTypeId": type_id}
