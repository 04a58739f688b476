"""Errors named after Kafka's exceptions, shared by every layer of kafkalog.

Each error can carry where it happened: a byte ``position`` in a buffer or file, an ``offset``, a ``path``.
They appear in the message so that an operator reading a log can find the bad bytes.
"""

from __future__ import annotations


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
