"""kafkalog.storage: one partition's log on disk, as Kafka's UnifiedLog / LocalLog / LogSegment keep it."""

from .checkpoints import CheckpointError, LeaderEpochCheckpointFile, OffsetCheckpointFile
from .config import BrokerConfig, LogConfig
from .file_records import FileRecords, RecordsSlice
from .index import OffsetIndex, OffsetPosition, TimeIndex, TimestampOffset
from .log import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP, Log
from .producer_state import ProducerStateManager
from .properties import load_properties, parse_properties
from .segment import FetchDataInfo, LogOffsetMetadata, LogSegment, TimestampAndOffset
from .txn_index import AbortedTxn, TransactionIndex
from .validator import LogAppendInfo

__all__ = [
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "AbortedTxn",
    "BrokerConfig",
    "CheckpointError",
    "FetchDataInfo",
    "FileRecords",
    "LeaderEpochCheckpointFile",
    "Log",
    "LogAppendInfo",
    "LogConfig",
    "LogOffsetMetadata",
    "LogSegment",
    "OffsetCheckpointFile",
    "OffsetIndex",
    "OffsetPosition",
    "ProducerStateManager",
    "RecordsSlice",
    "TimeIndex",
    "TimestampAndOffset",
    "TimestampOffset",
    "TransactionIndex",
    "load_properties",
    "parse_properties",
]
