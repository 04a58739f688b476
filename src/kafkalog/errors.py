"""Errors named after Kafka's exceptions, shared by every layer of kafkalog.

Each error can carry where it happened: a byte ``position`` in a buffer or file, an ``offset``, a ``path``.
They appear in the message so that an operator reading a log can find the bad bytes.
"""

from __future__ import annotations

from typing import Any


class KafkaLogError(Exception):
    """Base class of every error kafkalog raises on purpose."""

    def __init__(
        self,
        message: str,
        *,
        position: int | None = None,
        offset: int | None = None,
        path: str | None = None,
    ) -> None:
        self.reason = message
        self.position = position
        self.offset = offset
        self.path = path
        super().__init__(self._describe())

    def _describe(self) -> str:
        where = []
        if self.path is not None:
            where.append(f"file {self.path}")
        if self.position is not None:
            where.append(f"position {self.position}")
        if self.offset is not None:
            where.append(f"offset {self.offset}")
        return f"{self.reason} (at {', '.join(where)})" if where else self.reason

    def located(
        self, *, position: int | None = None, offset: int | None = None, path: str | None = None
    ) -> KafkaLogError:
        """Return a copy of this error with missing location fields filled in."""
        return type(self)(
            self.reason,
            position=self.position if self.position is not None else position,
            offset=self.offset if self.offset is not None else offset,
            path=self.path if self.path is not None else path,
        )


class CorruptRecordError(KafkaLogError):
    """Kafka's CorruptRecordException: bad CRC, impossible size field, unknown magic."""


class InvalidRecordError(KafkaLogError):
    """Kafka's InvalidRecordException: a batch or record whose structure breaks the format's rules."""


class RecordTooLargeError(KafkaLogError):
    """Kafka's RecordTooLargeException: a batch larger than max.message.bytes."""


class RecordBatchTooLargeError(KafkaLogError):
    """Kafka's RecordBatchTooLargeException: a validated set larger than segment.bytes."""


class InvalidTimestampError(KafkaLogError):
    """Kafka's InvalidTimestampException: a timestamp outside the allowed range or of the wrong type."""


class UnsupportedCompressionTypeError(KafkaLogError):
    """Kafka's UnsupportedCompressionTypeException: an unknown codec id, or zstd below magic 2."""


class UnsupportedForMessageFormatError(KafkaLogError):
    """Kafka's UnsupportedForMessageFormatException: a feature the batch's magic cannot carry."""


class OffsetOutOfRangeError(KafkaLogError):
    """Kafka's OffsetOutOfRangeException: an offset below the log start or beyond the log end."""


class CorruptIndexError(KafkaLogError):
    """Kafka's CorruptIndexException: an index file that fails its sanity check."""


class InvalidOffsetError(KafkaLogError):
    """Kafka's InvalidOffsetException: an index append that does not move forward, or to a full index."""


class IndexOffsetOverflowError(KafkaLogError):
    """Kafka's IndexOffsetOverflowException: an offset too far from the segment base for a 4-byte delta."""


class LogSegmentOffsetOverflowError(KafkaLogError):
    """Kafka's LogSegmentOffsetOverflowException: a batch whose offsets do not fit its segment."""

    segment: Any  # the LogSegment that overflowed, set where raised: the loader splits it and retries


class OffsetsOutOfOrderError(KafkaLogError):
    """Kafka's OffsetsOutOfOrderException: follower-style appends whose offsets go backwards."""


class CorruptSnapshotError(KafkaLogError):
    """Kafka's CorruptSnapshotException: a producer-state snapshot that cannot be read."""


class DuplicateSequenceError(KafkaLogError):
    """Kafka's DuplicateSequenceException: a batch an idempotent producer already wrote."""


class OutOfOrderSequenceError(KafkaLogError):
    """Kafka's OutOfOrderSequenceException: a sequence gap for an idempotent producer."""


class InvalidProducerEpochError(KafkaLogError):
    """Kafka's InvalidProducerEpochException / ProducerFencedException: an epoch older than the current one."""


class InvalidTxnStateError(KafkaLogError):
    """Kafka's InvalidTxnStateException: a transaction marker or batch that breaks the transaction protocol."""


class TransactionCoordinatorFencedError(InvalidTxnStateError):
    """Kafka's TransactionCoordinatorFencedException: a marker from an older transaction coordinator epoch."""


class KafkaStorageError(KafkaLogError):
    """Kafka's KafkaStorageException: an I/O failure; the log dir is taken offline."""

    # Set on a failed append (readers use getattr with a default: an error from elsewhere may lack them).
    io_error: BaseException | None  # the OSError underneath
    rolled_back: bool  # whether the partial bytes were cut off again, leaving the log consistent
    io_failure_handled: bool  # set once Log._io_failure has taken the log offline and reported it


class LogCleaningAbortedError(KafkaLogError):
    """Kafka's LogCleaningAbortedException: a clean stopped because its partition was deleted, truncated or paused."""


class LogCleaningError(KafkaLogError):
    """Kafka's LogCleaningException: cleaning one partition failed; it is marked uncleanable and the cleaner goes on."""


class InvalidConfigurationError(KafkaLogError, ValueError):
    """Kafka's ConfigException / InvalidConfigurationException: a config value with the wrong type or range."""


class InvalidTopicError(KafkaLogError, ValueError):
    """Kafka's InvalidTopicException: a topic name with illegal characters, too long, '.' or '..'."""


class TopicExistsError(KafkaLogError):
    """Kafka's TopicExistsException."""


class UnknownTopicOrPartitionError(KafkaLogError):
    """Kafka's UnknownTopicOrPartitionException."""


class InvalidPartitionsError(KafkaLogError, ValueError):
    """Kafka's InvalidPartitionsException: a partition count below 1 or a partition that does not exist."""


class PolicyViolationError(KafkaLogError):
    """Kafka's PolicyViolationException: a request the broker's policy refuses (e.g. too many partitions at once)."""


class MetadataParseError(KafkaLogError):
    """Kafka's MetadataParseException: a KRaft metadata record (or control record) that cannot be decoded."""


class InconsistentBrokerMetadataError(KafkaLogError):
    """Kafka's InconsistentBrokerMetadataException: the ``meta.properties`` of the log dirs disagree (the dirs of
    several brokers, or of several clusters, given to one broker), or disagree with the configured node id."""


class InconsistentBrokerIdError(InconsistentBrokerMetadataError):
    """Kafka's InconsistentBrokerIdException: a stored node (broker) id that differs from another dir's or from
    the configured ``node.id``/``broker.id``."""


class InconsistentClusterIdError(InconsistentBrokerMetadataError):
    """Kafka's InconsistentClusterIdException: log dirs whose stored ``cluster.id`` differ."""


class NotEnoughReplicasError(KafkaLogError):
    """Kafka's NotEnoughReplicasException: acks=-1 while the ISR is smaller than min.insync.replicas."""


class NotEnoughReplicasAfterAppendError(KafkaLogError):
    """Kafka's NotEnoughReplicasAfterAppendException: the ISR shrank below min.insync.replicas after the write."""


class InvalidRequiredAcksError(KafkaLogError):
    """Kafka's InvalidRequiredAcksException: acks other than 0, 1 or -1."""


class NotLeaderOrFollowerError(KafkaLogError):
    """Kafka's NotLeaderOrFollowerException: this broker does not lead (or follow) the partition."""


class FencedLeaderEpochError(KafkaLogError):
    """Kafka's FencedLeaderEpochException: the request's leader epoch is older than the partition's."""


class UnknownLeaderEpochError(KafkaLogError):
    """Kafka's UnknownLeaderEpochException: the request's leader epoch is newer than the partition's."""


class InvalidReplicationFactorError(KafkaLogError, ValueError):
    """Kafka's InvalidReplicationFactorException: a replication factor below 1 or above the live brokers."""


class RequestTimedOutError(KafkaLogError):
    """Kafka's TimeoutException on the broker (REQUEST_TIMED_OUT): an ``acks=-1`` produce whose records the ISR did
    not all replicate within the request's timeout (the records stay in the leader's log)."""


class LeaderNotAvailableError(KafkaLogError):
    """Kafka's LeaderNotAvailableException: the partition has no leader now (e.g. being elected, or offline)."""


class AuthorizationError(KafkaLogError):
    """A request the authorizer denied (Kafka's AuthorizationException family)."""


class TopicAuthorizationFailedError(AuthorizationError):
    pass


class GroupAuthorizationFailedError(AuthorizationError):
    pass


class ClusterAuthorizationFailedError(AuthorizationError):
    pass


class TransactionalIdAuthorizationFailedError(AuthorizationError):
    pass


class NotControllerError(KafkaLogError):
    """Kafka's NotControllerException: a request only the controller serves reached another broker."""


class StaleBrokerEpochError(KafkaLogError):
    """Kafka's StaleBrokerEpochException: a broker's request carries the epoch of an earlier registration."""


class BrokerNotAvailableError(KafkaLogError):
    """Kafka's BrokerNotAvailableException: the broker named in a request is not registered."""


class ElectionNotNeededError(KafkaLogError):
    """Kafka's ElectionNotNeededException: the partition already has the leader the election would choose."""


class PreferredLeaderNotAvailableError(KafkaLogError):
    """Kafka's PreferredLeaderNotAvailableException: the preferred replica is offline or not in the ISR."""


class EligibleLeadersNotAvailableError(KafkaLogError):
    """Kafka's EligibleLeadersNotAvailableException: no live replica may become the leader."""


class TopicDeletionDisabledError(KafkaLogError):
    """Kafka's TopicDeletionDisabledException: ``delete.topic.enable`` is false."""


class StaleControllerEpochError(KafkaLogError):
    """Kafka's ControllerMovedException on a request from an older controller (STALE_CONTROLLER_EPOCH)."""


class InvalidReplicaAssignmentError(KafkaLogError, ValueError):
    """Kafka's InvalidReplicaAssignmentException: a replica assignment naming unknown brokers or of the wrong size."""


class CoordinatorNotAvailableError(KafkaLogError):
    """Kafka's CoordinatorNotAvailableException: the coordinator's internal topic cannot be created or is offline."""
