"""Plain values of the record layer: records, timestamp types, control records and transaction markers."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum
from typing import NamedTuple, TypeAlias

from ..errors import InvalidRecordError

NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1

Header = tuple[str, bytes | None]
# What the readers and writers take as bytes: any of these, read by index and slice (never copied on purpose).
BytesLike: TypeAlias = bytes | bytearray | memoryview


class TimestampType(IntEnum):
    """Kafka's TimestampType, with the ids Spark's Kafka source puts in ``timestampType``."""

    NO_TIMESTAMP_TYPE = -1
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1

    @property
    def kafka_name(self) -> str:
        return _TIMESTAMP_TYPE_NAMES[self]

    @classmethod
    def parse(cls, value: TimestampType | str | int) -> TimestampType:
        """Accept 'CreateTime' / 'LogAppendTime' (Kafka's names, any case) or an id."""
        if isinstance(value, str):
            for member, name in _TIMESTAMP_TYPE_NAMES.items():
                if value.lower() == name.lower():
                    return member
            raise ValueError(f"Unknown timestamp type {value!r}: expected CreateTime or LogAppendTime")
        return cls(value)


_TIMESTAMP_TYPE_NAMES = {
    TimestampType.NO_TIMESTAMP_TYPE: "NoTimestampType",
    TimestampType.CREATE_TIME: "CreateTime",
    TimestampType.LOG_APPEND_TIME: "LogAppendTime",
}


class Record(NamedTuple):
    """One record as a consumer sees it: offset, timestamp (ms), key, value, headers, sequence."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()
    sequence: int = NO_SEQUENCE


class ControlRecordType(IntEnum):
    """Kafka's ControlRecordType; unknown types read as UNKNOWN, as in Kafka."""

    UNKNOWN = -1
    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6


@dataclass(frozen=True)
class EndTransactionMarker:
    """The value of a COMMIT or ABORT control record."""

    type: ControlRecordType
    coordinator_epoch: int
    version: int = 0


def control_record_type(key: bytes | None) -> ControlRecordType:
    """Parse a control record key (int16 version, int16 type), with Kafka's checks."""
    if key is None or len(key) < 4:
        raise InvalidRecordError(
            f"Invalid control record with key size {0 if key is None else len(key)}, expected at least 4 bytes"
        )
    version, type_id = struct.unpack_from(">hh", key)
    if version < 0:
        raise InvalidRecordError(f"Invalid version found for control record: {version}")
    try:
        return ControlRecordType(type_id)
    except ValueError:
        return ControlRecordType.UNKNOWN


def end_transaction_marker(record: Record) -> EndTransactionMarker:
    """Decode a COMMIT/ABORT control record, as EndTransactionMarker.deserialize does."""
    kind = control_record_type(record.key)
    if kind not in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
        raise InvalidRecordError(f"Invalid record with control type {kind.name}", offset=record.offset)
    value = record.value
    if value is None or len(value) < 6:
        raise InvalidRecordError(
            f"Invalid end transaction marker with value size {0 if value is None else len(value)}, "
            "expected at least 6 bytes",
            offset=record.offset,
        )
    version, coordinator_epoch = struct.unpack_from(">hi", value)
    if version < 0:
        raise InvalidRecordError(f"Invalid version found for end transaction marker: {version}", offset=record.offset)
    return EndTransactionMarker(kind, coordinator_epoch, version)
