"""Kafka's wire protocol: request headers, the supported APIs and versions, error codes, response frames.

Bodies are decoded and encoded by kafka-python's schema classes, which are generated at import time from
Kafka's own ``common/message/*.json`` (see the package docstring for why, with the measurements). The request
header is parsed here by hand, because its version depends on the API and version it names, and a broker must
answer an ApiVersions request whose version it does not know (KIP-511) before it can decode anything else.
"""

from __future__ import annotations

import functools
import os
import struct
from dataclasses import dataclass, field

from kafka.protocol.admin import (
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    AlterConfigsRequest,
    AlterConfigsResponse,
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    CreateAclsRequest,
    CreateAclsResponse,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeAclsRequest,
    DescribeAclsResponse,
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
    DescribeClusterRequest,
    DescribeClusterResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    DescribeLogDirsRequest,
    DescribeLogDirsResponse,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
    ElectLeadersRequest,
    ElectLeadersResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
)
from kafka.protocol.admin.transactions import (
    DescribeProducersRequest,
    DescribeProducersResponse,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
)
from kafka.protocol.consumer import (
    FetchRequest,
    FetchResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
)
from kafka.protocol.producer import InitProducerIdRequest, InitProducerIdResponse, ProduceRequest, ProduceResponse
from kafka.protocol.producer.transaction import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from ..errors import InvalidRecordError
from ..record.varint import encode_unsigned_varint, read_unsigned_varint
from ..storage.file_records import RecordsSlice
from . import produce_request
from .messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    ControlledShutdownRequest,
    ControlledShutdownResponse,
    StopReplicaRequest,
    StopReplicaResponse,
)

# ----- error codes (Kafka's org.apache.kafka.common.protocol.Errors) ---------------------------------------
UNKNOWN_SERVER_ERROR = -1
NONE = 0
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
LEADER_NOT_AVAILABLE = 5
NOT_LEADER_OR_FOLLOWER = 6
REQUEST_TIMED_OUT = 7
MESSAGE_TOO_LARGE = 10
INVALID_TOPIC_EXCEPTION = 17
RECORD_LIST_TOO_LARGE = 18
NOT_ENOUGH_REPLICAS = 19
NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
INVALID_REQUIRED_ACKS = 21
INVALID_TIMESTAMP = 32
UNSUPPORTED_VERSION = 35
TOPIC_ALREADY_EXISTS = 36
INVALID_PARTITIONS = 37
INVALID_REPLICATION_FACTOR = 38
INVALID_CONFIG = 40
INVALID_REQUEST = 42
POLICY_VIOLATION = 44
UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
DUPLICATE_SEQUENCE_NUMBER = 46
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
KAFKA_STORAGE_ERROR = 56
UNKNOWN_LEADER_EPOCH = 75
FENCED_LEADER_EPOCH = 74
UNSUPPORTED_COMPRESSION_TYPE = 76
INVALID_RECORD = 87
TOPIC_AUTHORIZATION_FAILED = 29
GROUP_AUTHORIZATION_FAILED = 30
CLUSTER_AUTHORIZATION_FAILED = 31
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
COORDINATOR_NOT_AVAILABLE = 15
UNKNOWN_TOPIC_ID = 100
BROKER_NOT_AVAILABLE = 8
STALE_CONTROLLER_EPOCH = 11
INVALID_REPLICA_ASSIGNMENT = 39
NOT_CONTROLLER = 41
TOPIC_DELETION_DISABLED = 73
STALE_BROKER_EPOCH = 77
PREFERRED_LEADER_NOT_AVAILABLE = 80
ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
ELECTION_NOT_NEEDED = 84

# kafkalog's exception class names (Kafka's exception names) -> Kafka's error code. Looked up along the MRO,
# by name so that a layer's new error class (e.g. the partition layer's) needs no import here.
_ERROR_CODES = {
    "OffsetOutOfRangeError": OFFSET_OUT_OF_RANGE,
    "CorruptRecordError": CORRUPT_MESSAGE,
    "UnknownTopicOrPartitionError": UNKNOWN_TOPIC_OR_PARTITION,
    "NotLeaderOrFollowerError": NOT_LEADER_OR_FOLLOWER,
    "RecordTooLargeError": MESSAGE_TOO_LARGE,
    "InvalidTopicError": INVALID_TOPIC_EXCEPTION,
    "RecordBatchTooLargeError": RECORD_LIST_TOO_LARGE,
    "NotEnoughReplicasError": NOT_ENOUGH_REPLICAS,
    "NotEnoughReplicasAfterAppendError": NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    "InvalidRequiredAcksError": INVALID_REQUIRED_ACKS,
    "InvalidTimestampError": INVALID_TIMESTAMP,
    "TopicExistsError": TOPIC_ALREADY_EXISTS,
    "InvalidPartitionsError": INVALID_PARTITIONS,
    "InvalidReplicationFactorError": INVALID_REPLICATION_FACTOR,
    "InvalidConfigurationError": INVALID_CONFIG,
    "PolicyViolationError": POLICY_VIOLATION,
    "UnsupportedForMessageFormatError": UNSUPPORTED_FOR_MESSAGE_FORMAT,
    "OutOfOrderSequenceError": OUT_OF_ORDER_SEQUENCE_NUMBER,
    "DuplicateSequenceError": DUPLICATE_SEQUENCE_NUMBER,
    "InvalidProducerEpochError": INVALID_PRODUCER_EPOCH,
    "InvalidTxnStateError": INVALID_TXN_STATE,
    "TransactionCoordinatorFencedError": 52,
    "KafkaStorageError": KAFKA_STORAGE_ERROR,
    "FencedLeaderEpochError": FENCED_LEADER_EPOCH,
    "UnknownLeaderEpochError": UNKNOWN_LEADER_EPOCH,
    "UnsupportedCompressionTypeError": UNSUPPORTED_COMPRESSION_TYPE,
    "InvalidRecordError": INVALID_RECORD,
    "InvalidRequestError": INVALID_REQUEST,
    "RequestTimedOutError": REQUEST_TIMED_OUT,
    "LeaderNotAvailableError": LEADER_NOT_AVAILABLE,
    "TopicAuthorizationFailedError": 29,
    "GroupAuthorizationFailedError": 30,
    "ClusterAuthorizationFailedError": 31,
    "TransactionalIdAuthorizationFailedError": 53,
    "BrokerNotAvailableError": BROKER_NOT_AVAILABLE,
    "CoordinatorNotAvailableError": COORDINATOR_NOT_AVAILABLE,
    "StaleControllerEpochError": STALE_CONTROLLER_EPOCH,
    "InvalidReplicaAssignmentError": INVALID_REPLICA_ASSIGNMENT,
    "NotControllerError": NOT_CONTROLLER,
    "TopicDeletionDisabledError": TOPIC_DELETION_DISABLED,
    "StaleBrokerEpochError": STALE_BROKER_EPOCH,
    "PreferredLeaderNotAvailableError": PREFERRED_LEADER_NOT_AVAILABLE,
    "EligibleLeadersNotAvailableError": ELIGIBLE_LEADERS_NOT_AVAILABLE,
    "ElectionNotNeededError": ELECTION_NOT_NEEDED,
}


def error_code(error: BaseException | None) -> int:
    """Kafka's error code for ``error`` (NONE for None, UNKNOWN_SERVER_ERROR for an unexpected exception)."""
    if error is None:
        return NONE
    for klass in type(error).__mro__:
        code = _ERROR_CODES.get(klass.__name__)
        if code is not None:
            return code
    return UNKNOWN_SERVER_ERROR


def error_message(error: BaseException | None) -> str | None:
    return None if error is None else str(error)


# ----- APIs ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ApiSpec:
    """One API this broker serves: its key, the versions it accepts, and the schema classes of its messages."""

    key: int
    name: str
    min_version: int
    max_version: int
    request: type
    response: type
    flexible_from: int = field(init=False)

    def __post_init__(self) -> None:
        first = self.request._flexible_versions[0]  # (-1, -1) when no version is flexible (OffsetDelete)
        object.__setattr__(self, "flexible_from", first if first >= 0 else 1 << 15)

    def flexible(self, version: int) -> bool:
        return version >= self.flexible_from


# Versions: at least what every common client needs (issue 18); the upper bounds stop where a version needs what
# this broker has not built (Fetch 13+ and Metadata 13 need topic ids everywhere, Produce 12+ KIP-890 transactions).
APIS: dict[int, ApiSpec] = {
    spec.key: spec
    for spec in (
        ApiSpec(0, "Produce", 3, 11, ProduceRequest, ProduceResponse),
        ApiSpec(1, "Fetch", 4, 12, FetchRequest, FetchResponse),
        ApiSpec(2, "ListOffsets", 1, 7, ListOffsetsRequest, ListOffsetsResponse),
        ApiSpec(3, "Metadata", 0, 12, MetadataRequest, MetadataResponse),
        ApiSpec(18, "ApiVersions", 0, 4, ApiVersionsRequest, ApiVersionsResponse),
        ApiSpec(19, "CreateTopics", 2, 7, CreateTopicsRequest, CreateTopicsResponse),
        ApiSpec(20, "DeleteTopics", 1, 6, DeleteTopicsRequest, DeleteTopicsResponse),
        ApiSpec(22, "InitProducerId", 0, 4, InitProducerIdRequest, InitProducerIdResponse),
        ApiSpec(21, "DeleteRecords", 0, 2, DeleteRecordsRequest, DeleteRecordsResponse),
        ApiSpec(23, "OffsetForLeaderEpoch", 2, 4, OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse),
        ApiSpec(32, "DescribeConfigs", 1, 4, DescribeConfigsRequest, DescribeConfigsResponse),
        ApiSpec(33, "AlterConfigs", 0, 2, AlterConfigsRequest, AlterConfigsResponse),
        ApiSpec(35, "DescribeLogDirs", 1, 4, DescribeLogDirsRequest, DescribeLogDirsResponse),
        ApiSpec(37, "CreatePartitions", 0, 3, CreatePartitionsRequest, CreatePartitionsResponse),
        ApiSpec(44, "IncrementalAlterConfigs", 0, 1, IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse),
        ApiSpec(60, "DescribeCluster", 0, 1, DescribeClusterRequest, DescribeClusterResponse),
        # The controller's APIs of a ZooKeeper cluster (broker/cluster/, handlers/controller.py); v0 of
        # ControlledShutdown has a request header without a client id, which no broker since Kafka 0.9 sends.
        ApiSpec(5, "StopReplica", 0, 1, StopReplicaRequest, StopReplicaResponse),
        ApiSpec(7, "ControlledShutdown", 1, 3, ControlledShutdownRequest, ControlledShutdownResponse),
        ApiSpec(43, "ElectLeaders", 0, 2, ElectLeadersRequest, ElectLeadersResponse),
        # KIP-664's hanging-transaction tooling (handlers/producers.py).
        ApiSpec(61, "DescribeProducers", 0, 0, DescribeProducersRequest, DescribeProducersResponse),
        # The group coordinator's APIs (kafkalog.coordinator.group, handlers/group.py).
        ApiSpec(8, "OffsetCommit", 2, 9, OffsetCommitRequest, OffsetCommitResponse),
        ApiSpec(9, "OffsetFetch", 1, 9, OffsetFetchRequest, OffsetFetchResponse),
        ApiSpec(10, "FindCoordinator", 0, 4, FindCoordinatorRequest, FindCoordinatorResponse),
        ApiSpec(11, "JoinGroup", 0, 9, JoinGroupRequest, JoinGroupResponse),
        ApiSpec(12, "Heartbeat", 0, 4, HeartbeatRequest, HeartbeatResponse),
        ApiSpec(13, "LeaveGroup", 0, 5, LeaveGroupRequest, LeaveGroupResponse),
        ApiSpec(14, "SyncGroup", 0, 5, SyncGroupRequest, SyncGroupResponse),
        ApiSpec(15, "DescribeGroups", 0, 5, DescribeGroupsRequest, DescribeGroupsResponse),
        ApiSpec(16, "ListGroups", 0, 5, ListGroupsRequest, ListGroupsResponse),
        ApiSpec(42, "DeleteGroups", 0, 2, DeleteGroupsRequest, DeleteGroupsResponse),
        ApiSpec(47, "OffsetDelete", 0, 0, OffsetDeleteRequest, OffsetDeleteResponse),
        ApiSpec(68, "ConsumerGroupHeartbeat", 0, 1, ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse),
        ApiSpec(69, "ConsumerGroupDescribe", 0, 0, ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse),
        # The transaction coordinator's APIs (kafkalog.coordinator.transaction, handlers/txn.py). Transactions v1:
        # EndTxn stops at 3 and Produce at 11, so clients keep adding partitions with AddPartitionsToTxn (v0-3,
        # the client path; v4 is the broker path, which clients never use) and never expect KIP-890's epoch bump
        # on every EndTxn (v5).
        ApiSpec(24, "AddPartitionsToTxn", 0, 4, AddPartitionsToTxnRequest, AddPartitionsToTxnResponse),
        ApiSpec(25, "AddOffsetsToTxn", 0, 3, AddOffsetsToTxnRequest, AddOffsetsToTxnResponse),
        ApiSpec(26, "EndTxn", 0, 3, EndTxnRequest, EndTxnResponse),
        ApiSpec(27, "WriteTxnMarkers", 1, 1, WriteTxnMarkersRequest, WriteTxnMarkersResponse),
        ApiSpec(28, "TxnOffsetCommit", 0, 3, TxnOffsetCommitRequest, TxnOffsetCommitResponse),
        ApiSpec(65, "DescribeTransactions", 0, 0, DescribeTransactionsRequest, DescribeTransactionsResponse),
        ApiSpec(66, "ListTransactions", 0, 2, ListTransactionsRequest, ListTransactionsResponse),
        # Security (broker/security/, handlers/security.py).
        ApiSpec(29, "DescribeAcls", 1, 3, DescribeAclsRequest, DescribeAclsResponse),
        ApiSpec(30, "CreateAcls", 1, 3, CreateAclsRequest, CreateAclsResponse),
        ApiSpec(31, "DeleteAcls", 1, 3, DeleteAclsRequest, DeleteAclsResponse),
        ApiSpec(48, "DescribeClientQuotas", 0, 1, DescribeClientQuotasRequest, DescribeClientQuotasResponse),
        ApiSpec(49, "AlterClientQuotas", 0, 1, AlterClientQuotasRequest, AlterClientQuotasResponse),
        ApiSpec(17, "SaslHandshake", 0, 1, SaslHandshakeRequest, SaslHandshakeResponse),
        ApiSpec(36, "SaslAuthenticate", 0, 2, SaslAuthenticateRequest, SaslAuthenticateResponse),
        ApiSpec(
            50,
            "DescribeUserScramCredentials",
            0,
            0,
            DescribeUserScramCredentialsRequest,
            DescribeUserScramCredentialsResponse,
        ),
        ApiSpec(
            51, "AlterUserScramCredentials", 0, 0, AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse
        ),
    )
}
API_VERSIONS_KEY = 18
PRODUCE_KEY = 0


class InvalidRequestError(Exception):
    """A request the broker cannot parse (Kafka's InvalidRequestException): the connection is closed."""


@dataclass(frozen=True)
class RequestHeader:
    """A request header (v1, or v2 = v1 + tagged fields); ``size`` is its length in the frame."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    size: int


_HEAD = struct.Struct(">hhih")


def skip_tagged_fields(data: bytes | memoryview, pos: int, what: str = "request") -> int:
    """The position after the tag buffer at ``pos`` of a flexible header (request header v2, response header v1):
    a count, then each field's tag and size-prefixed bytes, none of which kafkalog reads. Varints are read as Kafka's
    readUnsignedVarint (an int: a count over 2^31 is negative, so no field). ``what`` ("request" or "response")
    names the message in the InvalidRequestError raised when the buffer is malformed or truncated."""
    try:
        count, pos = read_unsigned_varint(data, pos)
        for _ in range(count):
            _, pos = read_unsigned_varint(data, pos)
            size, pos = read_unsigned_varint(data, pos)
            pos += size
            if size < 0 or pos > len(data):
                raise InvalidRequestError(f"A tagged field of the {what} header runs past the end of the {what}")
    except InvalidRecordError:
        raise InvalidRequestError(f"Malformed unsigned varint in the {what} header") from None
    return pos


# n + 1 for every n under 127 (one byte each): nearly every length a response writes
_SMALL_COMPACT_LENGTHS = tuple(bytes([n + 1]) for n in range(127))


def compact_length(n: int) -> bytes:
    """The length prefix of a compact string, bytes or array in a flexible version: ``n + 1`` as an unsigned
    varint (0 stands for null, which callers write themselves)."""
    return _SMALL_COMPACT_LENGTHS[n] if 0 <= n < 127 else encode_unsigned_varint(n + 1)


def parse_header(frame: memoryview) -> tuple[RequestHeader, ApiSpec | None]:
    """The header of one request frame (without its size prefix), and the API it names (None if unknown).

    Raises InvalidRequestError for a header that cannot be read. The header version follows the API version:
    v2 (tagged fields) when that version is flexible. An unknown API or version cannot say which, so it is
    read as v1, which is all an ApiVersions reply needs.
    """
    if len(frame) < _HEAD.size:
        raise InvalidRequestError(f"Request of {len(frame)} bytes is shorter than a request header")
    api_key, api_version, correlation_id, client_len = _HEAD.unpack_from(frame, 0)
    pos = _HEAD.size
    client_id = None
    if client_len >= 0:
        if pos + client_len > len(frame):
            raise InvalidRequestError("The request header's client id runs past the end of the request")
        try:
            client_id = bytes(frame[pos : pos + client_len]).decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidRequestError("The request header's client id is not UTF-8") from None
        pos += client_len
    elif client_len != -1:
        raise InvalidRequestError(f"Invalid client id length {client_len} in the request header")
    spec = APIS.get(api_key)
    if spec is not None and spec.min_version <= api_version <= spec.max_version and spec.flexible(api_version):
        pos = skip_tagged_fields(frame, pos)
    return RequestHeader(api_key, api_version, correlation_id, client_id, pos), spec


def decode_request(spec: ApiSpec, header: RequestHeader, frame: memoryview):
    """The request body, decoded by its schema; InvalidRequestError when it does not parse.

    A produce request is read by ``produce_request`` (its records as views of the frame, not copies).

    Beyond the decoder, a null in a field the schema does not declare nullable is refused here (Kafka's
    generated readers refuse it while parsing), so handlers never meet a None they were not promised.
    """
    version = header.api_version
    if spec.key == PRODUCE_KEY:
        try:
            return produce_request.decode(version, frame[header.size :])
        except produce_request.TaggedFields:
            pass  # kept by the schema decoder below
        except produce_request.Malformed as e:
            raise InvalidRequestError(
                f"Error parsing {spec.name} v{version} request (correlation id {header.correlation_id}): {e}"
            ) from None
        except produce_request.NullField as e:
            raise InvalidRequestError(
                f"Error parsing {spec.name} v{version} request (correlation id {header.correlation_id}): "
                f"non-nullable field {e} was serialized as null"
            ) from None
    try:
        request = spec.request[version].decode(frame[header.size :])
    except Exception as e:  # the schema decoder raises struct.error, ValueError, IndexError, UnicodeDecodeError...
        raise InvalidRequestError(
            f"Error parsing {spec.name} v{version} request (correlation id {header.correlation_id}): "
            f"{type(e).__name__}: {e}"
        ) from None
    problem = _null_where_not_nullable(request, version)
    if problem is not None:
        raise InvalidRequestError(
            f"Error parsing {spec.name} v{version} request (correlation id {header.correlation_id}): "
            f"non-nullable field {problem} was serialized as null"
        )
    return request


_PLAIN, _STRUCT, _STRUCT_ARRAY, _STRING_ARRAY = 0, 1, 2, 3


@functools.cache
def _null_plan(container_class: type, version: int) -> tuple[tuple[str, bool, int], ...]:
    """What ``_null_where_not_nullable`` checks in a ``container_class`` at ``version``: each untagged field of
    that version as (name, whether null is allowed, plain/struct/struct array/string array). Worked out once per
    class and version from the generated schema (no public accessor), rather than for every request."""
    plan = []
    for schema_field in container_class._struct._fields:  # type: ignore[attr-defined]
        if not schema_field.for_version_q(version) or schema_field._tag is not None:
            continue
        # kafka-python reads the zero UUID as None; a uuid field is never null on the wire.
        null_allowed = schema_field.type_str == "uuid" or bool(schema_field.nullable_for_version_q(version))
        if schema_field.is_struct_array():
            kind = _STRUCT_ARRAY
        elif schema_field.is_struct():
            kind = _STRUCT
        elif schema_field.is_array() and schema_field.array_of.type_str in ("string", "bytes"):
            kind = _STRING_ARRAY  # its elements are never nullable (Kafka's readers refuse a null element)
        else:
            kind = _PLAIN
        plan.append((schema_field.name, null_allowed, kind))
    return tuple(plan)


def _null_where_not_nullable(container, version: int) -> str | None:
    """The name of the first field holding a null its schema forbids at ``version`` (None if there is none)."""
    for name, null_allowed, kind in _null_plan(type(container), version):
        value = getattr(container, name)
        if value is None:
            if not null_allowed:
                return name
        elif kind == _STRUCT_ARRAY:
            for item in value:
                problem = _null_where_not_nullable(item, version)
                if problem is not None:
                    return f"{name}.{problem}"
        elif kind == _STRUCT:
            problem = _null_where_not_nullable(value, version)
            if problem is not None:
                return f"{name}.{problem}"
        elif kind == _STRING_ARRAY and None in value:
            return f"{name} element"
    return None


def response_header(spec: ApiSpec, header: RequestHeader) -> bytes:
    """The response header: v1 (with an empty tagged-field section) for flexible versions, else v0.

    ApiVersions responses always use v0, so a client can read one whatever version it asked for (KIP-511).
    """
    correlation = struct.pack(">i", header.correlation_id)
    if spec.key != API_VERSIONS_KEY and spec.flexible(header.api_version):
        return correlation + b"\x00"
    return correlation


SMALL_REGION_BYTES = 64 * 1024  # a region this small is copied rather than sent with sendfile (network.py)


class FileRegion:
    """``size`` bytes at ``position`` of a segment file, sent on a descriptor of its own.

    The descriptor is a dup of the segment's, taken when the region's turn to be sent comes (``open``) and
    released as soon as it is sent (``close``), so that the bytes stay reachable while they are being written even
    if the segment is closed meanwhile, as Kafka's FileRecords slice holds its FileChannel. Not at read time: a
    fetch answer waiting to be sent would hold one descriptor per partition it carries (a consumer of 10,000
    partitions, 10,000 descriptors beside the segments' own, past a 20,000 RLIMIT_NOFILE). A segment closed
    between the read and the send (its topic deleted) cannot be sent: the connection is closed, as Kafka's send
    on a closed channel fails.
    """

    __slots__ = ("_file", "fd", "path", "position", "size")

    def __init__(self, records: RecordsSlice) -> None:
        self._file = records.file
        self.fd = -1
        self.path = records.file.path
        self.position = records.position
        self.size = records.size

    def open(self) -> int:
        """The region's own descriptor (taken now if not yet): ConnectionError if the segment was closed."""
        if self.fd < 0:
            fd = self._file.duplicate_fd()
            if fd is None:
                raise ConnectionError(f"{self.path} was closed before its region of {self.size} bytes was sent")
            self.fd = fd
        return self.fd

    def read(self) -> bytes:
        """The region's bytes (the copying path): fewer only if the file was truncated. A small region is read
        under the segment file's lock (no descriptor of its own needed); ConnectionError if the segment was
        closed, as for ``open``."""
        if self.size <= SMALL_REGION_BYTES and self.fd < 0:
            data = self._file.read_region(self.position, self.size)
            if data is None:
                raise ConnectionError(f"{self.path} was closed before its region of {self.size} bytes was sent")
            return data
        fd = self.open()
        chunks, position, left = [], self.position, self.size
        try:
            while left > 0:
                chunk = os.pread(fd, left, position)
                if not chunk:
                    break
                chunks.append(chunk)
                position += len(chunk)
                left -= len(chunk)
        finally:
            self.close()
        return b"".join(chunks)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


@dataclass
class Response:
    """A response body to send after its header: encoded bytes, and for Fetch, regions of segment files.

    ``parts`` are written in order; a FileRegion part is sent from its file (os.sendfile) without entering
    Python, unless the connection must copy (e.g. TLS, later). ``close`` releases the regions' descriptors.
    """

    parts: list[bytes | FileRegion]

    @classmethod
    def of(cls, message, version: int) -> Response:
        return cls([message.encode(version=version)])

    @property
    def size(self) -> int:
        return sum(len(p) if isinstance(p, bytes | bytearray) else p.size for p in self.parts)

    def close(self) -> None:
        for part in self.parts:
            if isinstance(part, FileRegion):
                part.close()
