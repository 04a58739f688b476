"""kafkalog.record: Kafka's record batches (v2 read/write, v0/v1 read), codecs, checksums and partitioner.

Nothing here knows about files beyond mapping one for a scan: the storage layer builds on these views.
"""

from ..errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    KafkaLogError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
    UnsupportedCompressionTypeError,
    UnsupportedForMessageFormatError,
)
from .batch import RecordBatch
from .builder import RecordBatchBuilder, build_batch, control_batch
from .columnar import SCHEMA as ARROW_SCHEMA
from .columnar import batches_to_arrow, to_arrow
from .compression import CODEC_NAMES
from .legacy import LegacyBatch
from .partitioner import default_partition, murmur2
from .scan import batch_positions, iter_batches, iter_file_batches, map_file
from .types import (
    ControlRecordType,
    EndTransactionMarker,
    Header,
    Record,
    TimestampType,
    control_record_type,
    end_transaction_marker,
)

__all__ = [
    "ARROW_SCHEMA",
    "CODEC_NAMES",
    "ControlRecordType",
    "CorruptRecordError",
    "EndTransactionMarker",
    "Header",
    "InvalidRecordError",
    "InvalidTimestampError",
    "KafkaLogError",
    "LegacyBatch",
    "Record",
    "RecordBatch",
    "RecordBatchBuilder",
    "RecordBatchTooLargeError",
    "RecordTooLargeError",
    "TimestampType",
    "UnsupportedCompressionTypeError",
    "UnsupportedForMessageFormatError",
    "batch_positions",
    "batches_to_arrow",
    "build_batch",
    "control_batch",
    "control_record_type",
    "default_partition",
    "end_transaction_marker",
    "iter_batches",
    "iter_file_batches",
    "map_file",
    "murmur2",
    "to_arrow",
]
