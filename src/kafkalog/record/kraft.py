"""KRaft record values: the metadata records of ``__cluster_metadata`` and the KRaft control records.

A metadata record's value is Kafka's ApiMessageAndVersion frame (AbstractApiMessageSerde): an unsigned varint
frame version (1), an unsigned varint api key, an unsigned varint message version, then the message in Kafka's
generated-message encoding at that version (all metadata records are flexible: compact strings and arrays,
tagged fields). The control records of a KRaft log or snapshot (SnapshotHeader, SnapshotFooter, LeaderChange,
KRaftVersion, KRaftVoters) hold one message each, read at version 0 as ControlRecordUtils reads them.

Nothing is written by hand per record type: ``kraft_schemas`` is generated from Kafka's schema JSON
(tools/gen_kraft_schemas.py) and this module interprets it. ``Message.to_json()`` gives the JSON object Kafka's
generated JsonConverter writes (field names in camelCase, tagged fields only when not at their default,
uuids in base64url, bytes in base64), which ``kafka-dump-log.sh --cluster-metadata-decoder`` prints.

Nothing here knows about files: ``kafkalog.storage.cluster_metadata`` reads them.
"""

from __future__ import annotations

import base64
import json
import math
import struct
from dataclasses import dataclass, field
from decimal import Decimal
from functools import cache
from typing import Any

from ..errors import MetadataParseError
from .kraft_schemas import CONTROL_RECORDS, METADATA_RECORDS

__all__ = [
    "CONTROL_SCHEMA_OF_TYPE",
    "FRAME_VERSION",
    "Message",
    "MetadataRecord",
    "decode_control_value",
    "decode_metadata_record",
    "metadata_record_type_name",
    "to_json_text",
]

FRAME_VERSION = 1  # AbstractApiMessageSerde.DEFAULT_FRAME_VERSION
ZERO_UUID = "AAAAAAAAAAAAAAAAAAAAAA"
SHORT_MAX = 0x7FFF
# ControlRecordType id -> the schema of its value (ControlRecordUtils); ABORT/COMMIT are EndTransactionMarkers.
CONTROL_SCHEMA_OF_TYPE = {
    2: "LeaderChangeMessage",
    3: "SnapshotHeaderRecord",
    4: "SnapshotFooterRecord",
    5: "KRaftVersionRecord",
    6: "VotersRecord",
}
_FIXED = {
    "int8": (">b", 1),
    "int16": (">h", 2),
    "uint16": (">H", 2),
    "int32": (">i", 4),
    "uint32": (">I", 4),
    "int64": (">q", 8),
    "float64": (">d", 8),
}


def _snake_upper(name: str) -> str:
    """MessageGenerator.toSnakeCase(name).toUpperCase(): ``TopicRecord`` → ``TOPIC_RECORD``."""
    out, previous_upper = [], True
    for ch in name:
        if ch.isupper():
            if not previous_upper:
                out.append("_")
            out.append(ch.lower())
            previous_upper = True
        else:
            out.append(ch)
            previous_upper = False
    return "".join(out).upper()


def _camel(name: str) -> str:
    """MessageGenerator.lowerCaseFirst: the JSON key of a field (``TopicId`` → ``topicId``)."""
    return name[:1].lower() + name[1:]


def _in(versions: tuple[int, int] | None, version: int) -> bool:
    return versions is not None and versions[0] <= version <= versions[1]


# ------------------------------------------------------------------------------------------- compiled schemas


@dataclass(frozen=True)
class _Field:
    """One field of a schema, ready to read: its JSON key, element type, and the struct it holds, if any."""

    name: str
    key: str
    type: str  # the element type for arrays
    is_array: bool
    versions: tuple[int, int] | None
    nullable: tuple[int, int] | None
    tagged: tuple[int, int] | None
    tag: int | None
    default_text: str | None
    struct: _Struct | None

    def default(self, version: int) -> Any:
        """The value of this field when absent (Kafka's generated default)."""
        text = self.default_text
        if text == "null":
            return None
        if self.is_array:
            return []
        if self.struct is not None:
            return self.struct.defaults(version)
        return _scalar_default(self.type, text)


@dataclass(frozen=True)
class _Struct:
    name: str
    fields: tuple[_Field, ...]
    flexible: tuple[int, int] | None
    tags: dict[int, _Field] = field(default_factory=dict)

    def field(self, key: str) -> _Field:
        return next(f for f in self.fields if f.key == key)

    def defaults(self, version: int) -> Message:
        values = {f.key: f.default(version) for f in self.fields}
        return Message(self.name, version, values, ())


def _scalar_default(kind: str, text: str | None) -> Any:
    if kind == "bool":
        return text == "true"
    if kind in ("string",):
        return text or ""
    if kind == "bytes":
        return b""
    if kind == "uuid":
        return ZERO_UUID
    if kind == "float64":
        return float(text) if text else 0.0
    if not text:
        return 0
    negative = text.startswith("-")
    digits = text[1:] if negative else text
    value = int(digits, 16) if digits.lower().startswith("0x") else int(digits)
    return -value if negative else value


def _compile_struct(
    name: str, fields: list[dict[str, Any]], flexible: tuple[int, int] | None, common: dict[str, list[dict[str, Any]]]
) -> _Struct:
    compiled = []
    for spec in fields:
        kind = spec["type"]
        is_array = kind.startswith("[]")
        element = kind[2:] if is_array else kind
        struct = None
        if element not in _FIXED and element not in ("bool", "string", "bytes", "uuid", "records"):
            inner = spec.get("fields")
            if inner is None:
                if element not in common:
                    raise MetadataParseError(f"Schema of {name}: unknown type {element} of field {spec['name']}")
                inner = common[element]
            struct = _compile_struct(element, inner, flexible, common)
        compiled.append(
            _Field(
                spec["name"],
                _camel(spec["name"]),
                element,
                is_array,
                spec.get("versions"),
                spec.get("nullableVersions"),
                spec.get("taggedVersions"),
                spec.get("tag"),
                spec.get("default"),
                struct,
            )
        )
    return _Struct(name, tuple(compiled), flexible, {f.tag: f for f in compiled if f.tag is not None})


@dataclass(frozen=True)
class _Schema:
    name: str
    valid: tuple[int, int]
    struct: _Struct
    api_key: int | None


@cache
def _metadata_schema(api_key: int) -> _Schema | None:
    spec = METADATA_RECORDS.get(api_key)
    return _schema(spec) if spec is not None else None


@cache
def _control_schema(name: str) -> _Schema:
    return _schema(CONTROL_RECORDS[name])


def _schema(spec: dict[str, Any]) -> _Schema:
    struct = _compile_struct(spec["name"], spec["fields"], spec["flexibleVersions"], spec.get("commonStructs", {}))
    return _Schema(spec["name"], spec["validVersions"], struct, spec.get("apiKey"))


def metadata_record_type_name(api_key: int) -> str:
    """MetadataRecordType's name for an api key (``TOPIC_RECORD``); MetadataParseError if Kafka has none."""
    schema = _metadata_schema(api_key)
    if schema is None:
        raise MetadataParseError(f"Unknown metadata id {api_key}")
    return _snake_upper(schema.name)


# ------------------------------------------------------------------------------------------------- messages


@dataclass(frozen=True)
class Message:
    """A decoded message (or nested struct) at one version.

    ``values`` holds every field of the schema by JSON key: read from the bytes, or the field's default when
    the version lacks it or a tagged field was not sent. ``written`` lists the keys Kafka's JsonConverter
    writes, in schema order. Nested structs are Messages; arrays are lists; uuids base64url strings.
    """

    schema: str
    version: int
    values: dict[str, Any]
    written: tuple[str, ...]

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    def to_json(self) -> dict[str, Any]:
        """The JsonConverter object: the written fields, bytes as base64, nested structs as objects."""
        return {key: _json_value(self.values[key]) for key in self.written}


def _json_value(value: Any) -> Any:
    if isinstance(value, Message):
        return value.to_json()
    if isinstance(value, list):
        return [_json_value(v) for v in value]
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    return value


@dataclass(frozen=True)
class MetadataRecord:
    """One metadata record: Kafka's ApiMessageAndVersion (``type`` is MetadataRecordType's name)."""

    api_key: int
    version: int
    message: Message

    @property
    def type(self) -> str:
        return _snake_upper(self.message.schema)

    @property
    def name(self) -> str:
        """The schema name, e.g. ``TopicRecord``."""
        return self.message.schema

    def __getitem__(self, key: str) -> Any:
        return self.message[key]

    def to_json(self) -> dict[str, Any]:
        """The object ``kafka-dump-log.sh --cluster-metadata-decoder`` prints: type, version, data."""
        return {"type": self.type, "version": self.version, "data": self.message.to_json()}


class _Reader:
    """Kafka's Readable over bytes: big-endian fixed widths, unsigned varints, compact or classic lengths."""

    __slots__ = ("data", "end", "pos")

    def __init__(self, data: bytes | memoryview, pos: int = 0, end: int | None = None) -> None:
        self.data = data
        self.pos = pos
        self.end = len(data) if end is None else end

    @property
    def remaining(self) -> int:
        return self.end - self.pos

    def take(self, n: int) -> bytes:
        if n < 0 or n > self.remaining:
            raise MetadataParseError(f"Tried to read {n} bytes at position {self.pos}, only {self.remaining} remain")
        out = bytes(self.data[self.pos : self.pos + n])
        self.pos += n
        return out

    def fixed(self, kind: str) -> Any:
        fmt, size = _FIXED[kind]
        if size > self.remaining:
            raise MetadataParseError(f"Tried to read a {kind} at position {self.pos}, but only {self.remaining} remain")
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return value

    def uvarint(self) -> int:
        """ByteUtils.readUnsignedVarint: at most 5 bytes."""
        value = 0
        for i in range(5):
            if self.pos >= self.end:
                raise MetadataParseError("Tried to read an unsigned varint past the end of the data")
            b = self.data[self.pos]
            self.pos += 1
            value |= (b & 0x7F) << (7 * i)
            if not b & 0x80:
                return value & 0xFFFFFFFF
        raise MetadataParseError("Varint is too long, the most significant bit in the 5th byte is set")


def _length(r: _Reader, flexible: bool, wide: bool) -> int:
    if flexible:
        return r.uvarint() - 1
    length: int = r.fixed("int32") if wide else r.fixed("int16")
    return length


def _read_value(r: _Reader, f: _Field, version: int, flexible: bool) -> Any:
    if f.is_array:
        n = _length(r, flexible, wide=True)
        if n < 0:
            return _null(f, version)
        if n > r.remaining:
            raise MetadataParseError(
                f"Tried to allocate a collection of size {n}, but there are only {r.remaining} bytes remaining."
            )
        return [_read_one(r, f, version, flexible) for _ in range(n)]
    return _read_one(r, f, version, flexible)


def _null(f: _Field, version: int) -> None:
    if not _in(f.nullable, version):
        raise MetadataParseError(f"non-nullable field {f.key} was serialized as null")
    return None


def _read_one(r: _Reader, f: _Field, version: int, flexible: bool) -> Any:
    kind = f.type
    if f.struct is not None:
        return _read_struct(r, f.struct, version)
    if kind in _FIXED:
        return r.fixed(kind)
    if kind == "bool":
        return r.take(1)[0] != 0
    if kind == "uuid":
        return base64.urlsafe_b64encode(r.take(16)).decode("ascii").rstrip("=")
    if kind == "string":
        n = _length(r, flexible, wide=False)
        if n < 0:
            return _null(f, version)
        if n > SHORT_MAX:
            raise MetadataParseError(f"string field {f.key} had invalid length {n}")
        return r.take(n).decode("utf-8", "replace")
    if kind in ("bytes", "records"):
        n = _length(r, flexible, wide=True)
        if n < 0:
            return _null(f, version)
        return r.take(n)
    raise MetadataParseError(f"Unknown field type {kind} of field {f.key}")


def _read_struct(r: _Reader, s: _Struct, version: int) -> Message:
    flexible = _in(s.flexible, version)
    values: dict[str, Any] = {}
    written: list[str] = []
    tagged_keys: set[str] = set()
    for f in s.fields:
        if not _in(f.versions, version):
            values[f.key] = f.default(version)
        elif flexible and _in(f.tagged, version):
            values[f.key] = f.default(version)
            tagged_keys.add(f.key)
        else:
            values[f.key] = _read_value(r, f, version, flexible)
            written.append(f.key)
    if flexible:
        seen = set()
        for _ in range(r.uvarint()):
            tag, size = r.uvarint(), r.uvarint()
            if size > r.remaining:
                raise MetadataParseError(f"Tagged field {tag} claims {size} bytes, but only {r.remaining} remain")
            tagged = s.tags.get(tag)
            if tagged is None or not _in(tagged.tagged, version) or not _in(tagged.versions, version):
                r.pos += size  # an unknown tagged field: Kafka keeps it raw; it does not appear in the JSON
                continue
            inner = _Reader(r.data, r.pos, r.pos + size)
            values[tagged.key] = _read_value(inner, tagged, version, True)
            r.pos += size
            seen.add(tagged.key)
        # The JsonConverter writes a tagged field only when it differs from its default.
        sent = {key for key in seen if values[key] != s.field(key).default(version)}
        written = [f.key for f in s.fields if f.key in written or f.key in sent]
    return Message(s.name, version, values, tuple(written))


def _read_message(schema: _Schema, data: bytes | memoryview, pos: int, version: int) -> tuple[Message, int]:
    if not _in(schema.valid, version):
        raise MetadataParseError(f"Can't read version {version} of {schema.name}")
    r = _Reader(data, pos)
    message = _read_struct(r, schema.struct, version)
    return message, r.pos


def decode_metadata_record(value: bytes | memoryview) -> MetadataRecord:
    """Decode a metadata record's value as MetadataRecordSerde.read does; MetadataParseError with Kafka's words."""
    r = _Reader(value)
    frame = _short(r, "frame version")
    if frame == 0:
        raise MetadataParseError(
            "Could not deserialize metadata record with frame version 0. "
            "Note that upgrades from the preview release of KRaft in 2.8 to newer versions are not supported."
        )
    if frame != FRAME_VERSION:
        raise MetadataParseError(
            f"Could not deserialize metadata record due to unknown frame version {frame}"
            f"(only frame version {FRAME_VERSION} is supported)"
        )
    api_key = _short(r, "type")
    version = _short(r, "version")
    schema = _metadata_schema(api_key)
    if schema is None:
        raise MetadataParseError(f"Unknown metadata id {api_key}")
    try:
        message, end = _read_message(schema, value, r.pos, version)
    except MetadataParseError as e:  # Kafka's words; what went wrong is the cause
        raise MetadataParseError(f"Failed to deserialize record with type {api_key}") from e
    if end < len(value):
        raise MetadataParseError(f"Found {len(value) - end} byte(s) of garbage after {api_key}")
    return MetadataRecord(api_key, version, message)


def _short(r: _Reader, entity: str) -> int:
    try:
        value = r.uvarint()
    except MetadataParseError as e:
        raise MetadataParseError(f"Error while reading {entity}") from e
    if value > SHORT_MAX:
        raise MetadataParseError(f"Value for {entity} was too large.")
    return value


def decode_control_value(control_type: int, value: bytes | memoryview) -> Message:
    """The message of a KRaft control record (``control_type`` a ControlRecordType id from 2 to 6), read at
    version 0 as ControlRecordUtils does. MetadataParseError if the bytes do not hold one."""
    name = CONTROL_SCHEMA_OF_TYPE.get(control_type)
    if name is None:
        raise MetadataParseError(f"Control record type {control_type} has no KRaft message")
    message, _ = _read_message(_control_schema(name), value, 0, 0)
    return message


# ---------------------------------------------------------------------------------------------------- JSON


def java_double_text(value: float) -> str:
    """Java's Double.toString, as Jackson prints a DoubleNode: plain between 10^-3 and 10^7, else ``d.dddEn``
    (the shortest digits that round-trip). Also the OAUTHBEARER validator's text of a number claim."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    if 1e-3 <= abs(value) < 1e7:
        text = repr(value)
        return text if "." in text else text + ".0"
    _, digits, exponent = Decimal(repr(abs(value))).as_tuple()
    significant = "".join(map(str, digits)).rstrip("0") or "0"
    power = len(digits) + int(exponent) - 1
    return f"{'-' if value < 0 else ''}{significant[0]}.{significant[1:] or '0'}E{power}"


def to_json_text(obj: Any) -> str:
    """Compact JSON as Jackson's ``JsonNode.toString()`` writes it (no spaces, non-ASCII kept, Java doubles)."""
    if isinstance(obj, dict):
        return "{" + ",".join(f"{json.dumps(k, ensure_ascii=False)}:{to_json_text(v)}" for k, v in obj.items()) + "}"
    if isinstance(obj, list):
        return "[" + ",".join(to_json_text(v) for v in obj) + "]"
    if isinstance(obj, bool) or obj is None or isinstance(obj, int | str):
        return json.dumps(obj, ensure_ascii=False)
    if isinstance(obj, float):
        return java_double_text(obj)
    return to_json_text(_json_value(obj))
