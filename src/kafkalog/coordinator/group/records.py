"""The ``__consumer_offsets`` records: Kafka's key and value schemas, written and read in one place.

Schemas (Kafka's ``group-coordinator/src/main/resources/common/message``):

* OffsetCommitKey, record type 0 or 1 (``group``, ``topic``, ``partition``); its value OffsetCommitValue
  v0-4: ``offset``, ``leaderEpoch`` (v3+), ``metadata``, ``commitTimestamp``, ``expireTimestamp`` (v1 only),
  ``topicId`` (tagged field 0, v4 = first flexible version).
* GroupMetadataKey, record type 2 (``group``); its value GroupMetadataValue v0-4: ``protocolType``,
  ``generation``, ``protocol``, ``leader``, ``currentStateTimestamp`` (v2+), ``members`` (``memberId``,
  ``groupInstanceId`` v3+, ``clientId``, ``clientHost``, ``rebalanceTimeout`` v1+, ``sessionTimeout``,
  ``subscription``, ``assignment``).

Versions written are Kafka's today (GroupCoordinatorRecordHelpers): key type 1 for offsets and 2 for groups,
OffsetCommitValue v3 (v1 when the commit carries an explicit expire timestamp, OffsetCommit v2-4's
retention time), GroupMetadataValue v3. A tombstone (null value) deletes its key.

The ``decode_*`` functions return Kafka's JSON field names (what ``kafka-dump-log.sh --offsets-decoder``
prints), with subscription and assignment as raw bytes; ``decode_offsets_record`` renders them as that tool
does, decoding the consumer protocol's subscription and assignment (ConsumerProtocolSubscription v0-3,
ConsumerProtocolAssignment v0-3) when the group's protocol type is ``consumer``.
"""

from __future__ import annotations

import base64
import contextlib
import struct
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from ..messages import MessageReader, encode_unsigned_varint

OFFSET_COMMIT_KEY_TYPE = 1
GROUP_METADATA_KEY_TYPE = 2
OFFSET_COMMIT_VALUE_VERSION = 3
OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRE = 1
GROUP_METADATA_VALUE_VERSION = 3
NO_PARTITION_LEADER_EPOCH = -1
# KIP-848's records: the key's version is its record type, its value is version 0 (flexible), as Kafka writes them.
CONSUMER_GROUP_METADATA_KEY_TYPE = 3
CONSUMER_GROUP_MEMBER_METADATA_KEY_TYPE = 5
CONSUMER_TARGET_ASSIGNMENT_METADATA_KEY_TYPE = 6
CONSUMER_TARGET_ASSIGNMENT_MEMBER_KEY_TYPE = 7
CONSUMER_CURRENT_ASSIGNMENT_KEY_TYPE = 8
CONSUMER_MEMBER_KEY_TYPES = (
    CONSUMER_GROUP_MEMBER_METADATA_KEY_TYPE,
    CONSUMER_TARGET_ASSIGNMENT_MEMBER_KEY_TYPE,
    CONSUMER_CURRENT_ASSIGNMENT_KEY_TYPE,
)


class UnknownRecordType(Exception):
    """A key whose record type this coordinator does not know (share-group, streams-group and the deprecated
    ConsumerGroupPartitionMetadata records, for now)."""

    def __init__(self, record_type: int) -> None:
        super().__init__(f"Unknown record type {record_type}")
        self.record_type = record_type


# ----------------------------------------------------------------------------------------------- reading
class _Reader(MessageReader):
    """Kafka's generated-message reader over big-endian bytes; flexible versions use compact fields."""

    def __init__(self, data: bytes, flexible: bool = False) -> None:
        super().__init__(data)
        self.flexible = flexible

    def int8(self) -> int:
        return int(self.unpack(">b"))

    def int16(self) -> int:
        return int(self.unpack(">h"))

    def int32(self) -> int:
        return int(self.unpack(">i"))

    def int64(self) -> int:
        return int(self.unpack(">q"))

    def uuid(self) -> str:
        return _uuid_text(self.take(16))

    def _length(self, wide: bool = False) -> int:
        if self.flexible:
            return self.uvarint() - 1
        return self.int32() if wide else self.int16()

    def string(self) -> str | None:
        n = self._length()
        return None if n < 0 else self.take(n).decode("utf-8", "replace")

    def bytes_(self) -> bytes | None:
        n = self._length(wide=True)
        return None if n < 0 else self.take(n)

    def array(self, read: Callable[[], object]) -> list | None:
        n = self._length(wide=True)
        return None if n < 0 else [read() for _ in range(n)]

    def tagged_fields(self) -> dict[int, bytes]:
        return self.raw_tagged_fields() if self.flexible else {}


def b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def _uuid_text(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


# A schema's fields in order: (JSON name, _Reader method, first version, last version or None), as Kafka's JSON
# schemas give "versions": "3+" or "1".
Fields = tuple[tuple[str, str, int, int | None], ...]
OFFSET_COMMIT_VALUE_FIELDS: Fields = (
    ("offset", "int64", 0, None),
    ("leaderEpoch", "int32", 3, None),
    ("metadata", "string", 0, None),
    ("commitTimestamp", "int64", 0, None),
    ("expireTimestamp", "int64", 1, 1),
)
GROUP_METADATA_VALUE_FIELDS: Fields = (
    ("protocolType", "string", 0, None),
    ("generation", "int32", 0, None),
    ("protocol", "string", 0, None),
    ("leader", "string", 0, None),
    ("currentStateTimestamp", "int64", 2, None),
)
MEMBER_METADATA_FIELDS: Fields = (
    ("memberId", "string", 0, None),
    ("groupInstanceId", "string", 3, None),
    ("clientId", "string", 0, None),
    ("clientHost", "string", 0, None),
    ("rebalanceTimeout", "int32", 1, None),
    ("sessionTimeout", "int32", 0, None),
    ("subscription", "bytes_", 0, None),
    ("assignment", "bytes_", 0, None),
)


def _read_fields(r: _Reader, version: int, fields: Fields) -> dict:
    """The fields of ``version`` of a schema, read in order."""
    return {
        name: getattr(r, kind)()
        for name, kind, first, last in fields
        if first <= version and (last is None or version <= last)
    }


def _offset_commit_value(r: _Reader, version: int) -> dict:
    out = _read_fields(r, version, OFFSET_COMMIT_VALUE_FIELDS)
    tags = r.tagged_fields()
    if 0 in tags and len(tags[0]) == 16:
        out["topicId"] = _uuid_text(tags[0])
    return out


def _group_member(r: _Reader, version: int) -> dict:
    out = _read_fields(r, version, MEMBER_METADATA_FIELDS)
    r.tagged_fields()
    return out


def _group_metadata_value(r: _Reader, version: int) -> dict:
    out = _read_fields(r, version, GROUP_METADATA_VALUE_FIELDS)
    out["members"] = r.array(lambda: _group_member(r, version)) or []
    r.tagged_fields()
    return out


def _kip848_topic_partitions(r: _Reader) -> list:
    def one() -> dict:
        out = {"topicId": r.uuid(), "partitions": r.array(r.int32) or []}
        r.tagged_fields()
        return out

    return r.array(one) or []


def _ends(r: _Reader, out: dict) -> dict:
    r.tagged_fields()
    return out


def _consumer_group_metadata_value(r: _Reader) -> dict:
    return _ends(r, {"epoch": r.int32()})


def _consumer_member_metadata_value(r: _Reader) -> dict:
    out = {
        "instanceId": r.string(),
        "rackId": r.string(),
        "clientId": r.string(),
        "clientHost": r.string(),
        "subscribedTopicNames": r.array(r.string) or [],
        "subscribedTopicRegex": r.string(),
        "rebalanceTimeoutMs": r.int32(),
        "serverAssignor": r.string(),
    }
    return _ends(r, out)  # ClassicMemberMetadata (tag 0) is not kept: this coordinator converts no classic group


def _target_assignment_metadata_value(r: _Reader) -> dict:
    return _ends(r, {"assignmentEpoch": r.int32()})


def _target_assignment_member_value(r: _Reader) -> dict:
    return _ends(r, {"topicPartitions": _kip848_topic_partitions(r)})


def _current_assignment_value(r: _Reader) -> dict:
    out = {
        "memberEpoch": r.int32(),
        "previousMemberEpoch": r.int32(),
        "state": r.int8(),
        "assignedPartitions": _kip848_topic_partitions(r),
        "partitionsPendingRevocation": _kip848_topic_partitions(r),
    }
    return _ends(r, out)


CONSUMER_VALUE_READERS: dict[int, Callable[[_Reader], dict]] = {
    CONSUMER_GROUP_METADATA_KEY_TYPE: _consumer_group_metadata_value,
    CONSUMER_GROUP_MEMBER_METADATA_KEY_TYPE: _consumer_member_metadata_value,
    CONSUMER_TARGET_ASSIGNMENT_METADATA_KEY_TYPE: _target_assignment_metadata_value,
    CONSUMER_TARGET_ASSIGNMENT_MEMBER_KEY_TYPE: _target_assignment_member_value,
    CONSUMER_CURRENT_ASSIGNMENT_KEY_TYPE: _current_assignment_value,
}


def decode_key(key: bytes) -> tuple[int, dict]:
    """(record type, key fields) of a ``__consumer_offsets`` key; UnknownRecordType for other record types."""
    r = _Reader(key)
    record_type = r.int16()
    if record_type in (0, 1):
        return record_type, {"group": r.string(), "topic": r.string(), "partition": r.int32()}
    if record_type == GROUP_METADATA_KEY_TYPE:
        return record_type, {"group": r.string()}
    if record_type in (CONSUMER_GROUP_METADATA_KEY_TYPE, CONSUMER_TARGET_ASSIGNMENT_METADATA_KEY_TYPE):
        return record_type, {"groupId": r.string()}
    if record_type in CONSUMER_MEMBER_KEY_TYPES:
        return record_type, {"groupId": r.string(), "memberId": r.string()}
    raise UnknownRecordType(record_type)


def decode_value(record_type: int, value: bytes) -> tuple[int, dict]:
    """(value version, value fields) of the value of a key of ``record_type``; ValueError when it does not parse."""
    r = _Reader(value)
    version = r.int16()
    if record_type in CONSUMER_VALUE_READERS:
        if version != 0:
            raise ValueError(f"Unknown value version {version} for record type {record_type}")
        r.flexible = True
        return version, CONSUMER_VALUE_READERS[record_type](r)
    if not 0 <= version <= 4:
        raise ValueError(f"Unknown value version {version} for record type {record_type}")
    r.flexible = version >= 4
    parse = _offset_commit_value if record_type in (0, 1) else _group_metadata_value
    return version, parse(r, version)


# ----- the consumer protocol's embedded payloads ------------------------------------------------------------
def _topic_partitions(r: _Reader) -> list:
    return r.array(lambda: {"topic": r.string(), "partitions": r.array(r.int32)}) or []


def consumer_subscription(data: bytes) -> dict:
    """ConsumerProtocolSubscription v0-3 (``topics``, ``userData``, ``ownedPartitions``, ...); ValueError if bad."""
    r = _Reader(data)
    version = r.int16()
    if not 0 <= version <= 3:
        raise ValueError(f"unsupported subscription version {version}")
    out: dict = {"topics": r.array(r.string), "userData": b64(r.bytes_())}
    if version >= 1:
        out["ownedPartitions"] = _topic_partitions(r)
    if version >= 2:
        out["generationId"] = r.int32()
    if version >= 3:
        out["rackId"] = r.string()
    return out


def consumer_assignment(data: bytes) -> dict:
    """ConsumerProtocolAssignment v0-3 (``assignedPartitions``, ``userData``); ValueError if bad."""
    r = _Reader(data)
    version = r.int16()
    if not 0 <= version <= 3:
        raise ValueError(f"unsupported assignment version {version}")
    return {"assignedPartitions": _topic_partitions(r), "userData": b64(r.bytes_())}


def subscribed_topics(data: bytes | None) -> set[str] | None:
    """The topics of a consumer-protocol subscription, None if it does not parse."""
    if data is None:
        return None
    try:
        return {t for t in consumer_subscription(data)["topics"] or [] if t is not None}
    except (ValueError, struct.error):
        return None


def decode_offsets_record(key: bytes, value: bytes | None) -> tuple[dict, dict | None]:
    """(key JSON object, value JSON object or None for a tombstone), as kafka-dump-log.sh's offsets decoder.

    Raises UnknownRecordType for another record type, ValueError when the value does not parse.
    """
    record_type, key_data = decode_key(key)
    key_obj = {"type": str(record_type), "data": key_data}
    if value is None:
        return key_obj, None
    version, data = decode_value(record_type, value)
    if record_type == GROUP_METADATA_KEY_TYPE:
        consumer = data["protocolType"] == "consumer"
        for member in data["members"]:
            for field, parse in (("subscription", consumer_subscription), ("assignment", consumer_assignment)):
                raw = member[field]
                member[field] = b64(raw)
                if consumer and raw is not None:
                    with contextlib.suppress(ValueError, struct.error):  # as Kafka: unparsable bytes stay base64
                        member[field] = parse(raw)
    return key_obj, {"version": str(version), "data": data}


# ----------------------------------------------------------------------------------------------- writing
def _string(text: str) -> bytes:
    raw = text.encode("utf-8")
    return struct.pack(">h", len(raw)) + raw


def _nullable_string(text: str | None) -> bytes:
    return b"\xff\xff" if text is None else _string(text)


def _bytes(data: bytes | None) -> bytes:
    return b"\xff\xff\xff\xff" if data is None else struct.pack(">i", len(data)) + bytes(data)


def offset_commit_key(group: str, topic: str, partition: int) -> bytes:
    return struct.pack(">h", OFFSET_COMMIT_KEY_TYPE) + _string(group) + _string(topic) + struct.pack(">i", partition)


def offset_commit_value(
    offset: int, leader_epoch: int, metadata: str, commit_timestamp: int, expire_timestamp: int | None = None
) -> bytes:
    """OffsetCommitValue v3, or v1 when an explicit expire timestamp is kept (as Kafka chooses)."""
    if expire_timestamp is not None:
        return (
            struct.pack(">hq", OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRE, offset)
            + _string(metadata)
            + struct.pack(">qq", commit_timestamp, expire_timestamp)
        )
    return (
        struct.pack(">hqi", OFFSET_COMMIT_VALUE_VERSION, offset, leader_epoch)
        + _string(metadata)
        + struct.pack(">q", commit_timestamp)
    )


def group_metadata_key(group: str) -> bytes:
    return struct.pack(">h", GROUP_METADATA_KEY_TYPE) + _string(group)


@dataclass(frozen=True)
class MemberRecord:
    """One member as GroupMetadataValue stores it."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


def group_metadata_value(
    protocol_type: str,
    generation: int,
    protocol: str | None,
    leader: str | None,
    current_state_timestamp: int,
    members: Iterable[MemberRecord],
) -> bytes:
    """GroupMetadataValue v3 (Kafka's GROUP_METADATA_VALUE_VERSION)."""
    members = list(members)
    parts = [
        struct.pack(">h", GROUP_METADATA_VALUE_VERSION),
        _string(protocol_type),
        struct.pack(">i", generation),
        _nullable_string(protocol),
        _nullable_string(leader),
        struct.pack(">qi", current_state_timestamp, len(members)),
    ]
    for m in members:
        parts += [
            _string(m.member_id),
            _nullable_string(m.group_instance_id),
            _string(m.client_id),
            _string(m.client_host),
            struct.pack(">ii", m.rebalance_timeout, m.session_timeout),
            _bytes(m.subscription),
            _bytes(m.assignment),
        ]
    return b"".join(parts)


# ----- KIP-848 records (flexible values: compact strings and arrays, raw 16-byte uuids, tagged fields) ------------
def _cstring(text: str | None) -> bytes:
    if text is None:
        return b"\x00"
    raw = text.encode("utf-8")
    return encode_unsigned_varint(len(raw) + 1) + raw


def _carray(items: list[bytes]) -> bytes:
    return encode_unsigned_varint(len(items) + 1) + b"".join(items)


NO_TAGS = b"\x00"


def _tps(partitions: Mapping[bytes, Iterable[int]]) -> bytes:
    """[]TopicPartitions: (raw topic id, partitions), each with its (empty) tagged fields."""
    return _carray(
        [
            topic_id + _carray([struct.pack(">i", p) for p in sorted(ps)]) + NO_TAGS
            for topic_id, ps in sorted(partitions.items())
        ]
    )


def consumer_group_metadata_key(group: str) -> bytes:
    return struct.pack(">h", CONSUMER_GROUP_METADATA_KEY_TYPE) + _string(group)


def consumer_group_metadata_value(epoch: int) -> bytes:
    return struct.pack(">hi", 0, epoch) + NO_TAGS


def consumer_member_key(record_type: int, group: str, member_id: str) -> bytes:
    return struct.pack(">h", record_type) + _string(group) + _string(member_id)


def consumer_member_metadata_value(
    instance_id: str | None,
    rack_id: str | None,
    client_id: str,
    client_host: str,
    topics: list[str],
    regex: str | None,
    rebalance_timeout_ms: int,
    server_assignor: str | None,
) -> bytes:
    return b"".join(
        [
            struct.pack(">h", 0),
            _cstring(instance_id),
            _cstring(rack_id),
            _cstring(client_id),
            _cstring(client_host),
            _carray([_cstring(t) for t in topics]),
            _cstring(regex),
            struct.pack(">i", rebalance_timeout_ms),
            _cstring(server_assignor),
            NO_TAGS,
        ]
    )


def target_assignment_metadata_key(group: str) -> bytes:
    return struct.pack(">h", CONSUMER_TARGET_ASSIGNMENT_METADATA_KEY_TYPE) + _string(group)


def target_assignment_metadata_value(assignment_epoch: int) -> bytes:
    return struct.pack(">hi", 0, assignment_epoch) + NO_TAGS


def target_assignment_member_value(partitions: Mapping[bytes, Iterable[int]]) -> bytes:
    return struct.pack(">h", 0) + _tps(partitions) + NO_TAGS


def current_assignment_value(
    member_epoch: int,
    previous_member_epoch: int,
    state: int,
    assigned: Mapping[bytes, Iterable[int]],
    pending_revocation: Mapping[bytes, Iterable[int]],
) -> bytes:
    return (
        struct.pack(">hiib", 0, member_epoch, previous_member_epoch, state)
        + _tps(assigned)
        + _tps(pending_revocation)
        + NO_TAGS
    )
