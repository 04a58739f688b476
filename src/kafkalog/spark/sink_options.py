"""The options of the ``kafkalog`` sink and the input columns it takes (Kafka's sink: ``KafkaWriter.validateQuery``).

``parse_write_options`` checks the options into ``WriteOptions``; ``resolve_columns`` finds the ``value``, ``key``,
``headers``, ``topic`` and ``partition`` columns of the DataFrame written, with the Kafka sink's types and errors.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from pyspark.sql.types import (
    BinaryType,
    DataType,
    DoubleType,
    IntegerType,
    StringType,
    StructType,
    TimestampType,
)

from ..errors import (
    InvalidConfigurationError,
    KafkaLogError,
)
from ..record.compression import codec_id, codec_name
from .options import HEADERS_TYPE, log_dir_paths

log = logging.getLogger(__name__)

DEFAULT_BATCH_SIZE = 16384  # Kafka producer's batch.size
DEFAULT_BUFFER_MEMORY = 32 * 1024 * 1024  # Kafka producer's buffer.memory
DEFAULT_MAX_BLOCK_MS = 60_000  # Kafka producer's max.block.ms

# Producer configs the sink maps to its own options (the unprefixed names win over the kafka. ones).
_ALIASES = {
    "compression.type": "kafka.compression.type",
    "batch.size": "kafka.batch.size",
    "buffer.memory": "kafka.buffer.memory",
    "max.block.ms": "kafka.max.block.ms",
}
_KNOWN_KAFKA = {*_ALIASES.values(), "kafka.enable.idempotence"}


# ----- options ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WriteOptions:
    """The sink options, validated."""

    paths: tuple[str, ...]
    topic: str | None = None
    compression: str = "none"
    batch_size: int = DEFAULT_BATCH_SIZE
    buffer_memory: int = DEFAULT_BUFFER_MEMORY
    max_block_ms: int = DEFAULT_MAX_BLOCK_MS
    idempotent: bool = True
    checkpoint_location: str | None = None
    ignored: tuple[str, ...] = ()


def _write_paths(opts: Mapping[str, str]) -> tuple[str, ...]:
    return log_dir_paths(opts, "kafkalog writes", "for the kafkalog sink: the topic's log dir(s), comma-separated.")


def _option(opts: Mapping[str, str], name: str) -> str | None:
    value = opts.get(name)
    alias = _ALIASES.get(name)
    other = opts.get(alias) if alias else None
    if value is not None and other is not None and value.strip() != other.strip():
        raise InvalidConfigurationError(
            f"Options '{name}' = '{value}' and '{alias}' = '{other}' disagree; give only one of them"
        )
    return value if value is not None else other


def _int_option(opts: Mapping[str, str], name: str, default: int) -> int:
    value = _option(opts, name)
    if value is None:
        return default
    text = value.strip()
    if not text.isdigit():
        raise InvalidConfigurationError(f"Option '{name}' must be a non-negative integer, not '{value}'")
    return int(text)


def parse_write_options(options: Mapping[str, str]) -> WriteOptions:
    """Validate the sink options (keys are case-insensitive, as Spark passes them)."""
    opts = {str(k).lower(): str(v) for k, v in options.items() if v is not None}
    if "kafka.transactional.id" in opts:
        raise InvalidConfigurationError(
            "Option 'kafka.transactional.id' is not supported by the kafkalog sink: it writes without "
            "transactions (idempotent appends give exactly once, see kafkalog.spark.writer)"
        )
    compression = _option(opts, "compression.type")
    try:
        codec = codec_name(codec_id(compression.strip())) if compression is not None else "none"
    except KafkaLogError:
        raise InvalidConfigurationError(
            f"Invalid value {compression} for configuration compression.type: String must be one of: "
            "none, gzip, snappy, lz4, zstd"
        ) from None
    idempotence = opts.get("kafka.enable.idempotence", "true").strip().lower()
    if idempotence not in ("true", "false"):
        raise InvalidConfigurationError(
            f"Option 'kafka.enable.idempotence' must be 'true' or 'false', not '{idempotence}'"
        )
    topic = opts.get("topic")
    if topic is not None and not topic.strip():
        raise InvalidConfigurationError("Option 'topic' is empty: give a topic name, or leave it out to use a column")
    ignored = tuple(sorted(k for k in opts if k.startswith("kafka.") and k not in _KNOWN_KAFKA))
    return WriteOptions(
        paths=_write_paths(opts),
        topic=topic.strip() if topic is not None else None,
        compression=codec,
        batch_size=_int_option(opts, "batch.size", DEFAULT_BATCH_SIZE),
        buffer_memory=_int_option(opts, "buffer.memory", DEFAULT_BUFFER_MEMORY),
        max_block_ms=_int_option(opts, "max.block.ms", DEFAULT_MAX_BLOCK_MS),
        idempotent=idempotence == "true",
        checkpoint_location=opts.get("checkpointlocation"),
        ignored=ignored,
    )


# ----- the input columns (KafkaWriter.validateQuery) ------------------------------------------------------


@dataclass(frozen=True)
class SinkColumns:
    """Where each column the sink uses is in the input (None when absent), and the timestamp's type."""

    value: int
    key: int | None = None
    headers: int | None = None
    topic: int | None = None
    partition: int | None = None
    timestamp: int | None = None
    timestamp_is_double: bool = False


def _same_type(actual: DataType, wanted: DataType) -> bool:
    # DataTypeUtils.sameType: equal but for nullability.
    return actual.simpleString() == wanted.simpleString()


def _column(schema: StructType, name: str, wanted: list[DataType], required: str | None = None) -> int | None:
    names = schema.fieldNames()
    if name not in names:
        if required is not None:
            raise InvalidConfigurationError(required)
        return None
    index = names.index(name)
    actual = schema.fields[index].dataType
    if not any(_same_type(actual, w) for w in wanted):
        raise InvalidConfigurationError(
            f"{name} attribute unsupported type {actual.simpleString()}. {name} must be a(n) "
            f"{' or '.join(w.simpleString() for w in wanted)}"
        )
    return index


def resolve_columns(schema: StructType, topic_option: str | None) -> SinkColumns:
    """Check the input schema as the Kafka sink does (same messages) and locate the columns."""
    topic = None
    if topic_option is None:
        topic = _column(
            schema,
            "topic",
            [StringType()],
            required="topic option required when no 'topic' attribute is present. Use the topic option for "
            "setting a topic.",
        )
    key = _column(schema, "key", [StringType(), BinaryType()])
    value = _column(schema, "value", [StringType(), BinaryType()], required="Required attribute 'value' not found")
    headers = _column(schema, "headers", [HEADERS_TYPE])
    partition = _column(schema, "partition", [IntegerType()])
    timestamp = _column(schema, "timestamp", [DoubleType(), TimestampType()])
    is_double = timestamp is not None and isinstance(schema.fields[timestamp].dataType, DoubleType)
    assert value is not None
    return SinkColumns(value, key, headers, topic, partition, timestamp, is_double)
