"""Valid requests of every API and version the broker advertises, built from Kafka's schemas, and their mutations.

The protocol fuzzer (``kafkalog.testing.protocol_fuzz``) starts from these: one request per (API, version),
its fields filled with values that mean something to a broker set up by the fuzzer (topic ``fuzz`` with
records, group ``fuzz-group``, transactional id ``fuzz-txn``), so that mutations of a field reach past the
first lookup into the handler's real work. Values come from the field's name (``FIELD_HINTS``), overridden per
API where the same name means something else (``API_HINTS``: CreateTopics creates a new topic); a field with no
hint gets a type default. Nothing here is hand-written per version: a new version of a schema is covered as
soon as the broker advertises it.

``mutate_message`` is the structure-aware half of the mutations: it replaces one field anywhere in the message
tree with a boundary value of its type (extremes, null, empty, oversized, a damaged record batch), or empties,
nulls or repeats an array, then encodes; the byte-level half (flips, cuts, huge length fields) is
``kafkalog.testing.fuzz.mutate``.
"""

from __future__ import annotations

import copy
import functools
import struct
import uuid
from collections.abc import Callable
from typing import Any

from ..broker.protocol import APIS, ApiSpec

FUZZ_TOPIC = "fuzz"
FUZZ_GROUP = "fuzz-group"
FUZZ_TXN = "fuzz-txn"
DOOMED_TOPIC = "fuzz-doomed"  # the topic the DeleteTopics seeds delete (created by the fuzzer's broker)

# Values by field name (kafka-python's snake_case names), whatever the API.
FIELD_HINTS: dict[str, Any] = {
    "acks": 1,
    "broker_epoch": -1,
    "committed_leader_epoch": -1,
    "count": 3,
    "current_leader_epoch": -1,
    "generation_id": -1,
    "generation_id_or_member_epoch": -1,
    "iterations": 4096,
    "last_fetched_epoch": -1,
    "leader_epoch": -1,
    "log_start_offset": -1,
    "max_bytes": 1 << 20,
    "mechanism": 1,  # SCRAM-SHA-256 (DescribeUserScramCredentials); SaslHandshake's is a string, below
    "num_partitions": 1,
    "operation": 3,  # READ
    "partition_max_bytes": 65536,
    "pattern_type_filter": 3,  # LITERAL
    "permission_type": 3,  # ALLOW
    "producer_epoch": -1,
    "producer_id": -1,
    "rebalance_timeout_ms": 1000,
    "replica_id": -1,
    "replication_factor": 1,
    "resource_pattern_type": 3,
    "resource_type": 2,  # TOPIC
    "resource_type_filter": 2,
    "retention_time_ms": -1,
    "duration_filter": -1,
    "session_epoch": -1,
    "session_timeout_ms": 1000,
    "timeout_ms": 100,
    "timestamp": -1,
    "transaction_timeout_ms": 60_000,
    "v3_and_below_producer_epoch": -1,
    "v3_and_below_producer_id": -1,
    "value": "delete",
    "topic": FUZZ_TOPIC,
    "topic_name": FUZZ_TOPIC,
    "name": FUZZ_TOPIC,
    "resource_name": FUZZ_TOPIC,
    "group_id": FUZZ_GROUP,
    "transactional_id": FUZZ_TXN,
    "v3_and_below_transactional_id": FUZZ_TXN,
    "member_id": "",
    "group_instance_id": None,
    "instance_id": None,
    "server_assignor": None,  # the broker's default assignor
    "subscribed_topic_regex": None,
    "protocols.name": "range",
    # ConsumerProtocolSubscription v0 (topics ["fuzz"]) and ConsumerProtocolAssignment v0 (fuzz-0)
    "protocols.metadata": b"\0\0\0\0\0\x01\0\x04fuzz\xff\xff\xff\xff",
    "assignments.assignment": b"\0\0\0\0\0\x01\0\x04fuzz\0\0\0\x01\0\0\0\0\xff\xff\xff\xff",
    "deletions.name": "fuzz-gone",
    "protocol_type": "consumer",
    "protocol_name": "range",
    "rack_id": "",
    "host": "*",
    "principal": "User:fuzz",
    "key": "cleanup.policy",
    "configs.name": "cleanup.policy",
    "config_name": "cleanup.policy",
    "client_software_name": "kafkalog-fuzz",
    "client_software_version": "1.0",
    "committed_metadata": "",
    "entity_type": "client-id",
    "entity_name": "fuzz-client",
    "reason": "fuzz",
    "match": "fuzz",
    "topic_names": [FUZZ_TOPIC],
    "subscribed_topic_names": [FUZZ_TOPIC],
    "groups": [FUZZ_GROUP],
    "group_ids": [FUZZ_GROUP],
    "groups_names": [FUZZ_GROUP],
    "coordinator_keys": [FUZZ_GROUP],
    "transactional_ids": [FUZZ_TXN],
    "partition_indexes": [0],
    "partitions": [0],
    "broker_ids": [0],
    "salt": b"fuzz-salt-0123456789",
    "salted_password": bytes(range(32)),
    "auth_bytes": b"\0fuzz\0fuzz-secret",
}

# Per API, values that differ from the generic hint (key: API name, then field name).
API_HINTS: dict[str, dict[str, Any]] = {
    "CreateTopics": {"topics.name": "fuzz-created", "value": "compact", "assignments": []},
    "DeleteTopics": {"name": DOOMED_TOPIC, "topic_names": [DOOMED_TOPIC]},
    "SaslHandshake": {"mechanism": "PLAIN"},
    "SaslAuthenticate": {},
    "Produce": {"timeout_ms": 1000, "transactional_id": None},
    "Fetch": {"max_wait_ms": 0, "max_bytes": 1 << 20},
    "FindCoordinator": {"key": FUZZ_GROUP},
    "DescribeConfigs": {"configuration_keys": None},
    "DescribeClientQuotas": {"match": "fuzz-client"},
    "AlterClientQuotas": {"key": "producer_byte_rate", "value": 1_048_576.0},
    "WriteTxnMarkers": {"producer_id": 1, "producer_epoch": 0, "coordinator_epoch": 0},
    "ElectLeaders": {"election_type": 0},
    "StopReplica": {"controller_id": 0, "controller_epoch": 0, "broker_epoch": -1},
    "ControlledShutdown": {"broker_id": 0, "broker_epoch": -1},
}

_TYPE_DEFAULTS: dict[str, Any] = {
    "int8": 0,
    "int16": 0,
    "uint16": 0,
    "int32": 0,
    "int64": 0,
    "float64": 0.0,
    "bool": False,
    "uuid": None,  # the zero uuid: "no topic id", which kafka-python reads back as None
    "string": "fuzz",
    "bytes": b"",
}


@functools.cache
def sample_batch() -> bytes:
    """A small valid v2 record batch (two records, gzip) for ``records`` fields."""
    from ..record import RecordBatchBuilder

    builder = RecordBatchBuilder("gzip")
    builder.append(b"k", b"fuzz-value-1")
    builder.append(None, b"fuzz-value-2", headers=[("h", b"v")])
    return builder.build()


def _fields(schema: Any) -> list[Any]:
    fields = schema.fields
    return list(fields.values()) if isinstance(fields, dict) else list(fields)


def _value(field: Any, version: int, hints: dict[str, Any], parent: str) -> Any:
    """A meaningful value for one field at ``version`` (``parent``: the name of the field holding it)."""
    structured = field.is_struct() or field.is_struct_array()
    for key in (f"{parent}.{field.name}", field.name):
        if key in hints and (not structured or not hints[key]):  # a struct takes only an empty or null hint
            return copy.copy(hints[key])
    if field.is_struct_array():
        return [_container(field.data_class, field, version, hints, field.name)]
    if field.is_struct():
        return _container(field.data_class, field, version, hints, field.name)
    if field.type_str == "records":
        return sample_batch()
    if field.is_array():
        return []
    return _TYPE_DEFAULTS.get(field.type_str, field.default)


def _container(data_class: type, schema: Any, version: int, hints: dict[str, Any], parent: str = "") -> Any:
    values = {}
    for field in _fields(schema):
        if field.for_version_q(version) and not field.tagged_field_q(version):
            value = _value(field, version, hints, parent)
            values[field.name] = value if _fits(field, value, version) else field.default
    return data_class(version=version, **values)


def _fits(field: Any, value: Any, version: int) -> bool:
    """Whether a hinted value suits the field's type (the same name is an int in one API, a string in another)."""
    kind = field.type_str
    if field.is_struct_array() or field.is_array():
        return (value is None and bool(field.nullable_for_version_q(version))) or isinstance(value, list)
    if field.is_struct():
        return True
    if value is None:
        return bool(field.nullable_for_version_q(version))
    if kind.startswith("int") or kind == "uint16":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "string":
        return isinstance(value, str)
    if kind in ("bytes", "records"):
        return isinstance(value, bytes)
    if kind == "float64":
        return isinstance(value, float)
    return True


def valid_request(spec: ApiSpec, version: int) -> Any:
    """A request of ``spec`` at ``version`` with every field filled in (see the module docstring)."""
    hints = {**FIELD_HINTS, **API_HINTS.get(spec.name, {})}
    request: Any = spec.request  # kafka-python's generated message class (untyped)
    return _container(request[None], request._struct, version, hints)


@functools.cache
def seed_message(api_key: int, version: int) -> Any:
    """``valid_request`` of one API/version, built once (mutations work on a deep copy)."""
    return valid_request(APIS[api_key], version)


def request_header(api_key: int, version: int, correlation_id: int, client_id: str | None = "fuzz") -> bytes:
    """A request header: v1, or v2 (with an empty tagged-field section) when the API serves ``version`` and it
    is flexible (an unknown API or version cannot say which, and the broker reads v1 then)."""
    header = struct.pack(">hhi", api_key, version, correlation_id)
    if client_id is None:
        header += struct.pack(">h", -1)
    else:
        encoded = client_id.encode()
        header += struct.pack(">h", len(encoded)) + encoded
    spec = APIS.get(api_key)
    if spec is not None and spec.min_version <= version <= spec.max_version and spec.flexible(version):
        header += b"\x00"
    return header


def encode_frame(spec: ApiSpec, version: int, message: Any, correlation_id: int = 1) -> bytes:
    """One request frame without its size prefix: header and body."""
    body: bytes = message.encode(version=version)
    return request_header(spec.key, version, correlation_id) + body


@functools.cache
def seed_requests() -> tuple[tuple[int, int, bytes], ...]:
    """(API key, version, frame) of a valid request for every API and version the broker advertises."""
    out = []
    for key in sorted(APIS):
        spec = APIS[key]
        for version in range(spec.min_version, spec.max_version + 1):
            out.append((key, version, encode_frame(spec, version, valid_request(spec, version), 1000 + key)))
    return tuple(out)


# ------------------------------------------------------------------------------------------------ mutations

_INTS = {
    "int8": (-1, 0, 1, 127, -128),
    "int16": (-1, 0, 1, 32767, -32768),
    "uint16": (0, 1, 65535),
    "int32": (-1, 0, 1, 2**31 - 1, -(2**31), 1 << 20, 100_000),
    "int64": (-1, 0, 1, 2**63 - 1, -(2**63), 2**31, -2),
}
_STRINGS = ("", "fuzz", "__consumer_offsets", "__transaction_state", "a" * 300, ".", "..", "x/y", "é", FUZZ_GROUP)


class Choices:
    """Decisions read in order from control bytes (zeros once they run out): a small change to the control
    bytes changes few decisions, which is what lets a coverage-guided fuzzer climb."""

    def __init__(self, control: bytes) -> None:
        self.data = control
        self.pos = 0

    def below(self, n: int) -> int:
        """A number in range(n) (n <= 65536)."""
        if n <= 1:
            return 0
        width = 1 if n <= 256 else 2
        raw = self.data[self.pos : self.pos + width]
        self.pos += width
        return int.from_bytes(raw.ljust(width, b"\0"), "big") % n

    def pick(self, items: Any) -> Any:
        return items[self.below(len(items))]

    def rest(self) -> bytes:
        return self.data[self.pos :]


def _slots(container: Any, version: int, path: tuple[str, ...] = ()) -> list[tuple[Any, Any, tuple[str, ...]]]:
    """Every (container, field, path) of the untagged fields in a message tree, depth first."""
    out = []
    for field in _fields(container._struct):
        if not field.for_version_q(version) or field.tagged_field_q(version):
            continue
        out.append((container, field, (*path, field.name)))
        value = getattr(container, field.name)
        if field.is_struct() and value is not None:
            out.extend(_slots(value, version, (*path, field.name)))
        elif field.is_struct_array() and value:
            for item in value:
                out.extend(_slots(item, version, (*path, field.name)))
    return out


def _simple_mutation(field: Any, value: Any, choices: Choices) -> Any:
    kind = field.type_str
    if choices.below(8) == 0:
        return None  # a null, nullable or not: the decoder must refuse the latter
    if kind in _INTS:
        return choices.pick(_INTS[kind])
    if kind == "string":
        return choices.pick(_STRINGS)
    if kind == "bool":
        return not value
    if kind == "float64":
        return choices.pick((0.0, -1.0, 1e308, float("nan"), float("inf")))
    if kind == "uuid":
        return choices.pick((uuid.UUID(int=1), uuid.UUID(int=2**128 - 1)))
    if kind == "records":
        from .fuzz import mutate

        return mutate(sample_batch(), choices.rest()[:16] or b"\0")
    return choices.pick((b"", b"\0" * 64, b"\xff" * 7, bytes(range(256))))


def _array_mutation(field: Any, value: Any, choices: Choices) -> Any:
    op = choices.below(4)
    if op == 0:
        return None
    if op == 1:
        return []
    if op == 2 and value:
        return [*value, *value[-1:] * (1 + choices.below(3))]  # duplicates: the same topic or partition twice
    if field.is_struct_array():
        return value
    return [*(value or []), choices.pick(_STRINGS if field.type_str.endswith("string") else (-1, 0, 2**31 - 1))]


def mutate_message(message: Any, version: int, choices: Choices) -> Any:
    """A copy of ``message`` with one to three fields replaced by hostile values chosen by ``choices``."""
    message = copy.deepcopy(message)
    for _ in range(1 + choices.below(3)):
        slots = _slots(message, version)
        if not slots:
            break
        container, field, _ = choices.pick(slots)
        old = getattr(container, field.name)
        if field.is_array() or field.is_struct_array():
            new = _array_mutation(field, old, choices)
        elif field.is_struct():
            new = None
        else:
            new = _simple_mutation(field, old, choices)
        setattr(container, field.name, new)
    return message


def try_encode(encode: Callable[[], bytes]) -> bytes | None:
    """The encoded bytes, or None when the mutated value cannot be encoded at all (e.g. 300 in an int8)."""
    try:
        return encode()
    except (struct.error, ValueError, TypeError, AttributeError, OverflowError, AssertionError):
        return None
