"""What every batch view shares, v2 or legacy: its place in a buffer, the attribute bits of both formats (codec,
timestamp type) and Kafka's validity checks."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING

from ..errors import CorruptRecordError, InvalidRecordError
from . import compression
from .types import TimestampType

if TYPE_CHECKING:
    from typing_extensions import Buffer

# Attribute bits both formats share (v2 batches and legacy messages alike).
COMPRESSION_MASK = 0x07  # the codec id
TIMESTAMP_TYPE_MASK = 0x08  # LogAppendTime (magic 1 and 2)


class BatchView(ABC):
    """A batch (or legacy message) at ``position`` in a buffer; subclasses give its sizes and checksum."""

    __slots__ = ("_buffer", "position")

    def __init__(self, buffer: Buffer, position: int) -> None:
        self._buffer = buffer if isinstance(buffer, memoryview) else memoryview(buffer)
        self.position = position

    # Provided by each format.
    crc: int
    min_size_in_bytes: int

    if TYPE_CHECKING:  # a property in each format (declared here for the checks below; no runtime member)

        @property
        def size_in_bytes(self) -> int: ...

        @property
        def attributes(self) -> int: ...

    @abstractmethod
    def compute_checksum(self) -> int:
        """The checksum the format stores, computed over the batch's bytes."""

    @abstractmethod
    def _offset_for_errors(self) -> int:
        """The offset an error message names."""

    @abstractmethod
    def _too_small(self) -> str:
        """Kafka's message for a batch below the format's minimum size."""

    @property
    @abstractmethod
    def timestamp_type_id(self) -> TimestampType:
        """The batch's timestamp type (NO_TIMESTAMP_TYPE for magic 0)."""

    @property
    def compression_type(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def compression(self) -> str:
        """Codec name: 'none', 'gzip', 'snappy', 'lz4' or 'zstd' (an unknown id raises)."""
        return compression.codec_name(self.compression_type)

    @property
    def timestamp_type(self) -> str:
        return self.timestamp_type_id.kafka_name

    def invalid_record(self, message: str) -> InvalidRecordError:
        """An InvalidRecordError about this batch, located at its position and offset (for the caller to raise)."""
        return InvalidRecordError(message, position=self.position, offset=self._offset_for_errors())

    @property
    def source_buffer(self) -> memoryview:
        """The whole buffer this view lies in."""
        return self._buffer

    @property
    def buffer(self) -> memoryview:
        """The batch's own bytes, as a zero-copy slice of the underlying buffer."""
        return self._buffer[self.position : self.position + self.size_in_bytes]

    def is_valid(self) -> bool:
        """Kafka's isValid: not below the format's minimum size, all present, and the stored CRC matches."""
        return (
            self.size_in_bytes >= self.min_size_in_bytes
            and self.position + self.size_in_bytes <= len(self._buffer)
            and self.crc == self.compute_checksum()
        )

    def ensure_valid(self) -> None:
        """Raise CorruptRecordError, as Kafka's ensureValid does, unless the batch is valid."""
        size = self.size_in_bytes
        if size >= self.min_size_in_bytes and size <= len(self._buffer) - self.position:
            computed = self.compute_checksum()
            if self.crc == computed:
                return
            reason = f"Record is corrupt (stored crc = {self.crc}, computed crc = {computed})"
        elif size < self.min_size_in_bytes:
            reason = self._too_small()
        else:
            reason = f"Batch is truncated: {size} bytes declared, {len(self._buffer) - self.position} present"
        raise CorruptRecordError(reason, position=self.position, offset=self._offset_for_errors())
