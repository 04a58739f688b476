"""The ``kafkalog`` Python data source: Spark's Kafka source, reading log directories instead of a broker.

Batch reads only, for now: streaming reads and writes come later. A Spark user who knows the Kafka source
changes the format name and replaces ``kafka.bootstrap.servers`` with ``path``::

    spark.read.format("kafkalog")
        .option("path", "/var/lib/kafka/data")          # one or more log dirs, comma-separated
        .option("subscribe", "orders,payments")         # or subscribePattern, or assign
        .option("startingOffsets", "earliest")          # or JSON {"orders":{"0":23,"1":-2}}
        .option("endingOffsets", "latest")              # exclusive; or JSON with -1 for latest
        .option("includeHeaders", "true")
        .load()

The schema is the Kafka source's: ``key binary, value binary, topic string, partition int, offset long,
timestamp timestamp, timestampType int`` and, with ``includeHeaders=true``, ``headers
array<struct<key:string, value:binary>>``. There is one Spark input partition per topic-partition; each is
read by the columnar decoder and handed to Spark as Arrow record batches. Control records (transaction
markers) never appear; aborted transactional records do, as with the Kafka source's default
``read_uncommitted`` isolation.

Readers take no lock and open no ``Log``: see ``kafkalog.spark.logfiles``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from ..errors import InvalidConfigurationError, OffsetOutOfRangeError, UnknownTopicOrPartitionError
from . import logfiles

FORMAT_NAME = "kafkalog"
EARLIEST, LATEST = -2, -1
STRATEGY_OPTIONS = ("assign", "subscribe", "subscribePattern")
# Kafka source options whose meaning kafkalog does not implement yet: refused rather than ignored.
UNSUPPORTED_OPTIONS = (
    "startingTimestamp",
    "startingOffsetsByTimestamp",
    "endingTimestamp",
    "endingOffsetsByTimestamp",
    "startingOffsetsByTimestampStrategy",
    "minPartitions",
    "maxRecordsPerPartition",
    "maxOffsetsPerTrigger",
    "minOffsetsPerTrigger",
    "maxTriggerDelay",
)
MAX_ROWS_PER_ARROW_BATCH = 65536

HEADERS_TYPE = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))
KAFKA_SCHEMA = StructType(
    [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
)
KAFKA_SCHEMA_WITH_HEADERS = StructType([*KAFKA_SCHEMA.fields, StructField("headers", HEADERS_TYPE)])


def kafka_schema(include_headers: bool = False) -> StructType:
    """The Kafka source's schema, with the ``headers`` column when ``include_headers``."""
    return KAFKA_SCHEMA_WITH_HEADERS if include_headers else KAFKA_SCHEMA


# ----- options ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReadOptions:
    """The source options, validated. Offsets are 'earliest' / 'latest' or {(topic, partition): offset}."""

    paths: tuple[str, ...]
    strategy: str
    topics: tuple[str, ...] = ()
    pattern: str = ""
    assign: tuple[tuple[str, int], ...] = ()
    starting: str | dict = "earliest"
    ending: str | dict = "latest"
    fail_on_data_loss: bool = True
    include_headers: bool = False


def _bool_option(opts: Mapping[str, str], name: str, default: bool) -> bool:
    value = opts.get(name.lower())
    if value is None:
        return default
    text = value.strip().lower()
    if text not in ("true", "false"):
        raise InvalidConfigurationError(f"Option '{name}' must be 'true' or 'false', not '{value}'")
    return text == "true"


def _paths(opts: Mapping[str, str]) -> tuple[str, ...]:
    paths: list[str] = []
    if "paths" in opts:  # DataFrameReader.load([...]) passes a JSON array
        try:
            listed = json.loads(opts["paths"])
        except ValueError:
            listed = [opts["paths"]]
        paths += [str(p) for p in (listed if isinstance(listed, list) else [listed])]
    if "path" in opts:
        paths += opts["path"].split(",")
    paths = [p.strip() for p in paths if p.strip()]
    if not paths:
        hint = (
            " kafkalog reads log directories, not a broker: give them in 'path' instead of 'kafka.bootstrap.servers'."
            if "kafka.bootstrap.servers" in opts
            else ""
        )
        raise InvalidConfigurationError(
            f"Option 'path' must be specified for the kafkalog source: one or more log dirs, comma-separated.{hint}"
        )
    return tuple(dict.fromkeys(paths))


def _parse_assign(value: str) -> tuple[tuple[str, int], ...]:
    example = 'Expected e.g. {"topicA":[0,1],"topicB":[0,1]}, got ' + value
    if not value.strip().startswith("{"):
        raise InvalidConfigurationError(
            f"No topicpartitions to assign as specified value for option 'assign' is '{value}'"
        )
    try:
        parsed = json.loads(value)
    except ValueError:
        raise InvalidConfigurationError(example) from None
    if not isinstance(parsed, dict) or not all(
        isinstance(ps, list) and all(type(p) is int for p in ps) for ps in parsed.values()
    ):
        raise InvalidConfigurationError(example)
    return tuple(dict.fromkeys((t, p) for t, ps in parsed.items() for p in ps))


def _parse_offsets(name: str, value: str) -> str | dict[tuple[str, int], int]:
    text = value.strip()
    if text.lower() in ("earliest", "latest"):
        return text.lower()
    example = f'Expected e.g. {{"topicA":{{"0":23,"1":-1}},"topicB":{{"0":-2}}}}, got {value} (option \'{name}\')'
    try:
        parsed = json.loads(text)
    except ValueError:
        raise InvalidConfigurationError(example) from None
    if not isinstance(parsed, dict):
        raise InvalidConfigurationError(example)
    offsets: dict[tuple[str, int], int] = {}
    for topic, parts in parsed.items():
        if not isinstance(parts, dict):
            raise InvalidConfigurationError(example)
        for partition, offset in parts.items():
            if not re.fullmatch(r"-?\d+", partition) or type(offset) is not int or offset < EARLIEST:
                raise InvalidConfigurationError(example)
            offsets[(topic, int(partition))] = offset
    return offsets


def parse_options(options: Mapping[str, str]) -> ReadOptions:
    """Validate the options as the Kafka source does for a batch query, with its wording where it fits."""
    opts = {str(k).lower(): str(v) for k, v in options.items() if v is not None}
    for name in UNSUPPORTED_OPTIONS:
        if name.lower() in opts:
            raise InvalidConfigurationError(f"Option '{name}' is not supported by the kafkalog source yet")
    isolation = opts.get("kafka.isolation.level", "read_uncommitted").strip().lower()
    if isolation != "read_uncommitted":
        raise InvalidConfigurationError(
            f"Option 'kafka.isolation.level' = '{isolation}' is not supported by the kafkalog source yet: "
            "it reads as read_uncommitted (aborted transactional records included, control records never)"
        )
    given = [s for s in STRATEGY_OPTIONS if s.lower() in opts]
    if not given:
        raise InvalidConfigurationError(
            "One of the following options must be specified for the kafkalog source: "
            f"{', '.join(STRATEGY_OPTIONS)}. See the docs for more details."
        )
    if len(given) > 1:
        raise InvalidConfigurationError(
            "Only one of the following options can be specified for the kafkalog source: "
            f"{', '.join(STRATEGY_OPTIONS)}. See the docs for more details."
        )
    strategy = given[0]
    value = opts[strategy.lower()]
    topics: tuple[str, ...] = ()
    pattern = ""
    assign: tuple[tuple[str, int], ...] = ()
    if strategy == "subscribe":
        topics = tuple(dict.fromkeys(t.strip() for t in value.split(",") if t.strip()))
        if not topics:
            raise InvalidConfigurationError(
                f"No topics to subscribe to as specified value for option 'subscribe' is '{value}'"
            )
    elif strategy == "subscribePattern":
        pattern = value.strip()
        if not pattern:
            raise InvalidConfigurationError(
                f"Pattern to subscribe is empty as specified value for option 'subscribePattern' is '{value}'"
            )
        try:
            re.compile(pattern)
        except re.error as e:
            raise InvalidConfigurationError(
                f"Option 'subscribePattern' is not a valid regex '{pattern}': {e}"
            ) from None
    else:
        assign = _parse_assign(value)

    starting = _parse_offsets("startingOffsets", opts.get("startingoffsets", "earliest"))
    ending = _parse_offsets("endingOffsets", opts.get("endingoffsets", "latest"))
    if starting == "latest":
        raise InvalidConfigurationError("starting offset can't be latest for batch queries on kafkalog")
    if isinstance(starting, dict):
        for (topic, partition), offset in starting.items():
            if offset == LATEST:
                raise InvalidConfigurationError(
                    f"startingOffsets for {topic}-{partition} can't be latest for batch queries on kafkalog"
                )
    if ending == "earliest":
        raise InvalidConfigurationError("ending offset can't be earliest for batch queries on kafkalog")
    if isinstance(ending, dict):
        for (topic, partition), offset in ending.items():
            if offset == EARLIEST:
                raise InvalidConfigurationError(
                    f"ending offset for {topic}-{partition} can't be earliest for batch queries on kafkalog"
                )
    return ReadOptions(
        paths=_paths(opts),
        strategy=strategy,
        topics=topics,
        pattern=pattern,
        assign=assign,
        starting=starting,
        ending=ending,
        fail_on_data_loss=_bool_option(opts, "failOnDataLoss", True),
        include_headers=_bool_option(opts, "includeHeaders", False),
    )


# ----- the data source ----------------------------------------------------------------------------------


class KafkaLogDataSource(DataSource):
    """``spark.read.format("kafkalog")``: Kafka's batch source over log directories (see the module doc)."""

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def schema(self) -> StructType:
        return kafka_schema(parse_options(self.options).include_headers)

    def reader(self, schema: StructType) -> KafkaLogBatchReader:
        options = parse_options(self.options)
        expected = kafka_schema(options.include_headers)
        if schema != expected:
            raise InvalidConfigurationError(
                f"The kafkalog source has a fixed schema and cannot be set with a custom one: expected "
                f"{expected.simpleString()}, got {schema.simpleString()}"
            )
        return KafkaLogBatchReader(options, schema)

    def streamReader(self, schema: StructType):
        """``spark.readStream.format("kafkalog")``: see ``kafkalog.spark.stream``."""
        from .stream import KafkaLogStreamReader

        return KafkaLogStreamReader(self.options, schema)

    def writer(self, schema: StructType, overwrite: bool):
        """``df.write.format("kafkalog")``: see ``kafkalog.spark.writer``."""
        from .writer import KafkaLogWriter

        return KafkaLogWriter(self.options, schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool):
        """``df.writeStream.format("kafkalog")``: see ``kafkalog.spark.writer``."""
        from .writer import KafkaLogStreamWriter

        return KafkaLogStreamWriter(self.options, schema, overwrite)


@dataclass(frozen=True)
class KafkaLogInputPartition(InputPartition):
    """One topic-partition's offset range [start, end), resolved when the query was planned."""

    topic: str
    partition: int
    directory: str
    start: int
    end: int


def _select(options: ReadOptions, found: dict[tuple[str, int], logfiles.PartitionDir]) -> list[tuple[str, int]]:
    where = ", ".join(options.paths)
    if options.strategy == "subscribe":
        known = {t for t, _ in found}
        missing = [t for t in options.topics if t not in known]
        if missing:
            raise UnknownTopicOrPartitionError(
                f"Topic(s) {', '.join(missing)} given in option 'subscribe' do not exist in the log dirs {where}"
            )
        return sorted(tp for tp in found if tp[0] in options.topics)
    if options.strategy == "subscribePattern":
        pattern = re.compile(options.pattern)
        return sorted(
            tp for tp in found if tp[0] not in logfiles.INTERNAL_TOPICS and pattern.fullmatch(tp[0]) is not None
        )
    missing = [f"{t}-{p}" for t, p in options.assign if (t, p) not in found]
    if missing:
        raise UnknownTopicOrPartitionError(
            f"Partition(s) {', '.join(missing)} given in option 'assign' do not exist in the log dirs {where}"
        )
    return sorted(options.assign)


def _check_specific(name: str, offsets: dict, selected: list[tuple[str, int]]) -> None:
    if set(offsets) != set(selected):
        fmt = ", ".join
        raise InvalidConfigurationError(
            f"If {name} contains specific offsets, you must specify all TopicPartitions.\n"
            "Use -1 for latest, -2 for earliest.\n"
            f"Specified: {{{fmt(f'{t}-{p}' for t, p in sorted(offsets))}}} "
            f"Assigned: {{{fmt(f'{t}-{p}' for t, p in selected)}}}"
        )


class KafkaLogBatchReader(DataSourceReader):
    """Plans one input partition per topic-partition and reads each with the columnar decoder."""

    def __init__(self, options: ReadOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema

    def partitions(self) -> list[KafkaLogInputPartition]:
        options = self.options
        found = logfiles.discover(list(options.paths))
        selected = _select(options, found)
        if isinstance(options.starting, dict):
            _check_specific("startingOffsets", options.starting, selected)
        if isinstance(options.ending, dict):
            _check_specific("endingOffsets", options.ending, selected)
        log_starts: dict[str, dict] = {}
        watermarks: dict[str, tuple[dict, int | None]] = {}
        planned = []
        for tp in selected:
            part = found[tp]
            if part.log_dir not in log_starts:
                log_starts[part.log_dir] = logfiles.read_checkpoint(part.log_dir, logfiles.LOG_START_OFFSET_CHECKPOINT)
                name = logfiles.REPLICATION_OFFSET_CHECKPOINT
                mtime = logfiles.checkpoint_mtime_ns(part.log_dir, name)
                watermarks[part.log_dir] = (logfiles.read_checkpoint(part.log_dir, name), mtime)
            hw, hw_mtime = watermarks[part.log_dir]
            offsets = logfiles.partition_offsets(part, log_starts[part.log_dir], hw, hw_mtime)
            start = offsets.log_start
            if isinstance(options.starting, dict) and options.starting[tp] != EARLIEST:
                start = options.starting[tp]
                if start < offsets.log_start:
                    if options.fail_on_data_loss:
                        raise OffsetOutOfRangeError(
                            logfiles.data_loss_message(part.name, start, offsets.log_start) + " (startingOffsets)",
                            offset=start,
                        )
                    start = offsets.log_start
            end = offsets.latest
            if isinstance(options.ending, dict) and options.ending[tp] != LATEST:
                end = options.ending[tp]
                if end > offsets.latest:
                    raise InvalidConfigurationError(
                        f"endingOffsets for {part.name} is {end}, beyond its latest offset {offsets.latest}"
                    )
            if start > end:
                raise InvalidConfigurationError(
                    f"Beginning offset {start} is after the ending offset {end} for topic {tp[0]} partition "
                    f"{tp[1]}. You either provided an invalid startingOffsets/endingOffsets, or the log has been "
                    "damaged"
                )
            planned.append(KafkaLogInputPartition(tp[0], tp[1], part.directory, start, end))
        return planned

    def read(self, partition: KafkaLogInputPartition) -> Iterator[pa.RecordBatch]:
        from pyspark.sql.pandas.types import to_arrow_schema

        if not isinstance(partition, KafkaLogInputPartition):
            return  # no topic-partition selected: Spark plans one InputPartition(None) instead of none
        # Exactly the Arrow schema Spark checks the batches against (plan_data_source_read).
        target = to_arrow_schema(self.schema, timezone="UTC")
        name = f"{partition.topic}-{partition.partition}"
        for table in logfiles.read_range(
            partition.directory,
            name,
            partition.start,
            partition.end,
            fail_on_data_loss=self.options.fail_on_data_loss,
        ):
            for batch in table.to_batches(max_chunksize=MAX_ROWS_PER_ARROW_BATCH):
                if batch.num_rows:
                    yield to_spark_batch(batch, partition.topic, partition.partition, target)


def to_spark_batch(batch: pa.RecordBatch, topic: str, partition: int, target: pa.Schema) -> pa.RecordBatch:
    """A columnar-decoder batch (``kafkalog.record.ARROW_SCHEMA``) as the source's Arrow schema ``target``."""
    n = batch.num_rows
    columns = {
        "key": batch.column("key"),
        "value": batch.column("value"),
        "topic": pa.repeat(pa.scalar(topic, pa.string()), n),
        "partition": pa.repeat(pa.scalar(partition, pa.int32()), n),
        "offset": batch.column("offset"),
        "timestamp": batch.column("timestamp"),
        "timestampType": batch.column("timestampType"),
        "headers": batch.column("headers"),
    }
    arrays = []
    for field in target:
        array = columns[field.name]
        if array.type != field.type:
            array = array.cast(field.type)
        arrays.append(array)
    return pa.RecordBatch.from_arrays(arrays, schema=target)
