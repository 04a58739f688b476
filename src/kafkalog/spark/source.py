"""The ``kafkalog`` Python data source: Spark's Kafka source, reading log directories instead of a broker.

Batch reads here (streaming reads: ``kafkalog.spark.stream``; writes: ``kafkalog.spark.writer``). A Spark
user who knows the Kafka source changes the format name and replaces ``kafka.bootstrap.servers`` with
``path``::

    spark.read.format("kafkalog")
        .option("path", "/var/lib/kafka/data")          # one or more log dirs, comma-separated
        .option("subscribe", "orders,payments")         # or subscribePattern, or assign
        .option("startingOffsets", "earliest")          # or JSON {"orders":{"0":23,"1":-2}}
        .option("endingOffsets", "latest")              # exclusive; or JSON with -1 for latest
        .option("includeHeaders", "true")
        .load()

The schema is the Kafka source's: ``key binary, value binary, topic string, partition int, offset long,
timestamp timestamp, timestampType int`` and, with ``includeHeaders=true``, ``headers
array<struct<key:string, value:binary>>``. Each input partition is read by the columnar decoder and handed
to Spark as Arrow record batches. Control records (transaction markers) never appear.

Options, with the Kafka source's names and meaning:

* ``startingTimestamp`` / ``endingTimestamp`` (one timestamp in ms for every partition),
  ``startingOffsetsByTimestamp`` / ``endingOffsetsByTimestamp`` (JSON ``{"orders":{"0":1700000000000}}``):
  each is resolved as Kafka's ListOffsets by timestamp, the earliest offset whose record timestamp is at or
  after it, through the segments' ``.timeindex`` (``logfiles.offset_for_timestamp``). The precedence is
  Spark's: the global timestamp, then the one by partition, then ``startingOffsets`` / ``endingOffsets``
  (an option that does not apply is not even parsed). A starting timestamp that matches nothing fails the
  query, or starts at the latest offset with ``startingOffsetsByTimestampStrategy=latest``; an ending one
  that matches nothing ends at the latest offset. ListOffsets' special values work as timestamps too: -2
  earliest, -1 latest, -3 the record with the largest timestamp.
* ``minPartitions`` / ``maxRecordsPerPartition``: a topic-partition's offset range is split into several
  input partitions as Spark's KafkaOffsetRangeCalculator splits it (ranges above ``maxRecordsPerPartition``
  offsets are cut into equal pieces, then, while there are fewer than ``minPartitions`` ranges, the large
  ones are divided in proportion to their sizes), then each cut is moved to the nearest batch boundary known
  from the ``.index`` when one lies within a quarter of the neighbouring pieces and keeps every piece under
  ``maxRecordsPerPartition``; each piece reads exactly its [start, end). Unlike Spark, which decides
  whether to split on the offsets as given (so that earliest/latest ranges are never cut for
  ``maxRecordsPerPartition`` alone), kafkalog applies both options to the resolved ranges.
* ``kafka.isolation.level``: ``read_uncommitted`` (the default) reads aborted transactional records too;
  ``read_committed`` leaves them out, using the aborted transactions of the ``.txnindex`` files as a
  ``read_committed`` fetch does, and ``latest`` is then the last stable offset (the first offset of the
  earliest open transaction, see ``logfiles.last_stable_offset``): an ending offset past it is an error.
* ``failOnDataLoss``, ``includeHeaders`` as in the Kafka source. ``maxOffsetsPerTrigger``,
  ``minOffsetsPerTrigger`` and ``maxTriggerDelay`` are streaming options and are refused here.

Filter pushdown, a kafkalog extension (the Kafka source pushes no filter): when the session enables Python
filter pushdown (``spark.sql.python.filterPushdown.enabled=true``) the reader takes filters on ``topic`` (=,
IN), ``partition`` and ``offset`` (=, IN, <, <=, >, >=), which prune input partitions and narrow offset ranges
exactly, and on ``timestamp`` (=, IN, >, >=), which move each range's start to the first offset whose
timestamp can match (through the ``.timeindex``); timestamp filters are handed back to Spark, which applies
them again, and so are offset IN lists of more than ``MAX_PUSHED_OFFSETS`` values (used only to narrow). With
the conf off (Spark's default) no filter is pushed and Spark filters every row itself. pyspark refuses a
reader that implements ``pushFilters`` when the conf is off, and the conf does not reach
``DataSource.reader``, so the source hands the filtering reader only to pyspark's filter-pushdown worker,
which runs only when the conf is on (see ``_called_by_pushdown_worker``). The option ``filterPushdown``
overrides this: ``false`` never pushes, ``true`` always offers ``pushFilters`` (so pyspark names the conf when
it is off).

Readers take no lock and open no ``Log``: see ``kafkalog.spark.logfiles``.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import math
import os
import re
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    EqualNullSafe,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)
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
from ..partition import readonly as logfiles

FORMAT_NAME = "kafkalog"
EARLIEST, LATEST = -2, -1
STRATEGY_OPTIONS = ("assign", "subscribe", "subscribePattern")
# Kafka source options that only mean something to a streaming query: refused rather than ignored.
UNSUPPORTED_OPTIONS = ("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay")
ISOLATION_LEVELS = ("read_uncommitted", "read_committed")
TIMESTAMP_STRATEGIES = ("error", "latest")
FILTER_PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"
MAX_PUSHED_OFFSETS = 256  # an offset IN list up to this size is read as exact ranges
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


_STREAM_ONLY_OPTIONS = ("maxoffsetspertrigger", "minoffsetspertrigger", "maxtriggerdelay")


def kafka_schema(include_headers: bool = False) -> StructType:
    """The Kafka source's schema, with the ``headers`` column when ``include_headers``."""
    return KAFKA_SCHEMA_WITH_HEADERS if include_headers else KAFKA_SCHEMA


# ----- options ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReadOptions:
    """The source options, validated. Offsets are 'earliest' / 'latest' or {(topic, partition): offset}.

    A starting (ending) timestamp, global or by partition, takes precedence over ``starting`` (``ending``),
    which then keeps its default: at most one of the three is in effect for each end of the range.
    """

    paths: tuple[str, ...]
    strategy: str
    topics: tuple[str, ...] = ()
    pattern: str = ""
    assign: tuple[tuple[str, int], ...] = ()
    starting: str | dict = "earliest"
    ending: str | dict = "latest"
    fail_on_data_loss: bool = True
    include_headers: bool = False
    starting_timestamp: int | None = None
    starting_by_timestamp: dict | None = None  # {(topic, partition): timestamp}
    ending_timestamp: int | None = None
    ending_by_timestamp: dict | None = None
    timestamp_strategy: str = "error"  # startingOffsetsByTimestampStrategy: 'error' or 'latest'
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    isolation_level: str = "read_uncommitted"
    filter_pushdown: bool | None = None  # None: push when Spark enables Python filter pushdown

    @property
    def read_committed(self) -> bool:
        return self.isolation_level == "read_committed"


def _bool_option(opts: Mapping[str, str], name: str, default: bool) -> bool:
    value = opts.get(name.lower())
    if value is None:
        return default
    text = value.strip().lower()
    if text not in ("true", "false"):
        raise InvalidConfigurationError(f"Option '{name}' must be 'true' or 'false', not '{value}'")
    return text == "true"


def _optional_bool_option(opts: Mapping[str, str], name: str) -> bool | None:
    """A 'true'/'false' option that may be left unset (None: the source decides)."""
    return None if opts.get(name.lower()) is None else _bool_option(opts, name, False)


def _positive_option(opts: Mapping[str, str], name: str) -> int | None:
    value = opts.get(name.lower())
    if value is None:
        return None
    text = value.strip()
    if not re.fullmatch(r"[+-]?\d+", text):
        raise InvalidConfigurationError(f"Option '{name}' must be a positive integer, not '{value}'")
    if int(text) <= 0:
        raise InvalidConfigurationError(f"{name} must be positive")
    return int(text)


def _paths(opts: Mapping[str, str]) -> tuple[str, ...]:
    return log_dir_paths(opts, "kafkalog reads", "for the kafkalog source: one or more log dirs, comma-separated.")


def log_dir_paths(opts: Mapping[str, str], verb: str, requirement: str) -> tuple[str, ...]:
    """The log dirs of the ``path`` option (comma-separated) and of ``paths`` (the JSON array Spark passes for
    ``load([...])`` / ``save([...])``), in order without repeats; a clear error naming ``requirement`` if none."""
    paths: list[str] = []
    if "paths" in opts:
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
            f" {verb} log directories, not a broker: give them in 'path' instead of 'kafka.bootstrap.servers'."
            if "kafka.bootstrap.servers" in opts
            else ""
        )
        raise InvalidConfigurationError(f"Option 'path' must be specified {requirement}{hint}")
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


def _parse_partition_map(name: str, value: str, example: str, valid) -> dict[tuple[str, int], int]:
    """A JSON {"topic": {"<partition>": <long>}} option; ``valid(long)`` says which longs are allowed."""
    message = f"Expected e.g. {example}, got {value} (option '{name}')"
    try:
        parsed = json.loads(value.strip())
    except ValueError:
        raise InvalidConfigurationError(message) from None
    if not isinstance(parsed, dict):
        raise InvalidConfigurationError(message)
    out: dict[tuple[str, int], int] = {}
    for topic, parts in parsed.items():
        if not isinstance(parts, dict):
            raise InvalidConfigurationError(message)
        for partition, number in parts.items():
            if not re.fullmatch(r"-?\d+", partition) or type(number) is not int or not valid(number):
                raise InvalidConfigurationError(message)
            out[(topic, int(partition))] = number
    return out


def _parse_offsets(name: str, value: str) -> str | dict[tuple[str, int], int]:
    text = value.strip()
    if text.lower() in ("earliest", "latest"):
        return text.lower()
    example = '{"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}'
    return _parse_partition_map(name, text, example, lambda offset: offset >= EARLIEST)


def _valid_timestamp(ts: int) -> bool:
    return ts >= 0 or ts in logfiles.SPECIAL_TIMESTAMPS


def _parse_timestamp(name: str, value: str) -> int:
    text = value.strip()
    if not re.fullmatch(r"[+-]?\d+", text):
        raise InvalidConfigurationError(f"Expected a single long value, got {text} (option '{name}')")
    ts = int(text)
    if not _valid_timestamp(ts):
        raise InvalidConfigurationError(
            f"Option '{name}' is {ts}: a timestamp is a number of milliseconds >= 0, or one of ListOffsets' "
            "-2 (earliest), -1 (latest), -3 (max timestamp)"
        )
    return ts


def _parse_timestamps(name: str, value: str) -> dict[tuple[str, int], int]:
    example = '{"topicA":{"0":1000,"1":1000},"topicB":{"0":2000}}'
    return _parse_partition_map(name, value, example, _valid_timestamp)


def _fmt_tps(tps) -> str:
    return "{" + ", ".join(f"{t}-{p}" for t, p in sorted(tps)) + "}"


@dataclass(frozen=True)
class _RangeEnd:
    """The options of one end of a batch query's range, and the offset Spark refuses there."""

    timestamp: str
    by_timestamp: str
    offsets: str
    default: str
    refused: str  # 'latest' for the start, 'earliest' for the end
    refused_offset: int
    whole: str  # how Spark's messages name this end as a whole, then per partition
    per_partition: str


_STARTING = _RangeEnd(
    "startingTimestamp", "startingOffsetsByTimestamp", "startingOffsets", "earliest", "latest", LATEST,
    "starting offset", "startingOffsets",
)  # fmt: skip
_ENDING = _RangeEnd(
    "endingTimestamp", "endingOffsetsByTimestamp", "endingOffsets", "latest", "earliest", EARLIEST,
    "ending offset", "ending offset",
)  # fmt: skip


def _parse_limit(opts: Mapping[str, str], end: _RangeEnd) -> tuple[str | dict, int | None, dict | None]:
    """(offsets, global timestamp, timestamps by partition) of one end of the range, with Spark's precedence
    (KafkaSourceProvider.getKafkaOffsetRangeLimit): the global timestamp, then the one by partition, then
    the offsets; the options that do not apply are not looked at. validateBatchOptions' checks and wording."""
    if end.timestamp.lower() in opts:
        return end.default, _parse_timestamp(end.timestamp, opts[end.timestamp.lower()]), None
    if end.by_timestamp.lower() in opts:
        return end.default, None, _parse_timestamps(end.by_timestamp, opts[end.by_timestamp.lower()])
    offsets = _parse_offsets(end.offsets, opts.get(end.offsets.lower(), end.default))
    if offsets == end.refused:
        raise InvalidConfigurationError(f"{end.whole} can't be {end.refused} for batch queries on kafkalog")
    if isinstance(offsets, dict):
        for (topic, partition), offset in offsets.items():
            if offset == end.refused_offset:
                raise InvalidConfigurationError(
                    f"{end.per_partition} for {topic}-{partition} can't be {end.refused} for batch queries on kafkalog"
                )
    return offsets, None, None


def parse_options(options: Mapping[str, str]) -> ReadOptions:
    """Validate the options as the Kafka source does for a batch query, with its wording where it fits."""
    opts = {str(k).lower(): str(v) for k, v in options.items() if v is not None}
    for name in UNSUPPORTED_OPTIONS:
        if name.lower() in opts:
            raise InvalidConfigurationError(
                f"Option '{name}' only applies to streaming queries and is not supported by kafkalog batch reads"
            )
    isolation = opts.get("kafka.isolation.level", "read_uncommitted").strip().lower()
    if isolation not in ISOLATION_LEVELS:
        raise InvalidConfigurationError(
            f"Invalid value {isolation} for option 'kafka.isolation.level': it must be one of "
            f"{', '.join(ISOLATION_LEVELS)}"
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

    timestamp_strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if timestamp_strategy not in TIMESTAMP_STRATEGIES:
        raise InvalidConfigurationError(
            f"Option 'startingOffsetsByTimestampStrategy' must be one of {', '.join(TIMESTAMP_STRATEGIES)}, "
            f"not '{opts['startingoffsetsbytimestampstrategy']}'"
        )
    starting, starting_timestamp, starting_by_timestamp = _parse_limit(opts, _STARTING)
    ending, ending_timestamp, ending_by_timestamp = _parse_limit(opts, _ENDING)
    if starting_by_timestamp is not None and ending_by_timestamp is not None:  # checkOffsetLimitValidity
        if set(starting_by_timestamp) != set(ending_by_timestamp):
            raise InvalidConfigurationError(
                "The topic-partitions of startingOffsetsByTimestamp and endingOffsetsByTimestamp must be the "
                f"same: {_fmt_tps(starting_by_timestamp)} and {_fmt_tps(ending_by_timestamp)}"
            )
        for tp, start_ts in sorted(starting_by_timestamp.items()):
            end_ts = ending_by_timestamp[tp]
            if start_ts > end_ts >= 0:
                raise InvalidConfigurationError(
                    f"The starting timestamp {start_ts} is after the ending timestamp {end_ts} for "
                    f"{tp[0]}-{tp[1]} (startingOffsetsByTimestamp, endingOffsetsByTimestamp)"
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
        starting_timestamp=starting_timestamp,
        starting_by_timestamp=starting_by_timestamp,
        ending_timestamp=ending_timestamp,
        ending_by_timestamp=ending_by_timestamp,
        timestamp_strategy=timestamp_strategy,
        min_partitions=_positive_option(opts, "minPartitions"),
        max_records_per_partition=_positive_option(opts, "maxRecordsPerPartition"),
        isolation_level=isolation,
        filter_pushdown=_optional_bool_option(opts, "filterPushdown"),
    )


# ----- the data source ----------------------------------------------------------------------------------


_PUSHDOWN_WORKER_FILE = "data_source_pushdown_filters.py"


def _called_by_pushdown_worker(depth: int = 6) -> bool:
    """Whether pyspark's filter-pushdown worker is the caller of ``DataSource.reader``.

    pyspark plans a Python read in one of two workers: ``data_source_pushdown_filters`` (only when
    ``spark.sql.python.filterPushdown.enabled`` is on and there are filters) or ``plan_data_source_read``,
    which fails the query if the reader implements ``pushFilters`` while the conf is off. Neither passes the
    conf to ``reader()``, so the calling module is the only signal of it.
    """
    frame = sys._getframe(1)
    for _ in range(depth):
        if frame is None:
            return False
        if os.path.basename(frame.f_code.co_filename) == _PUSHDOWN_WORKER_FILE:
            return True
        frame = frame.f_back
    return False


class KafkaLogDataSource(DataSource):
    """``spark.read.format("kafkalog")``: Kafka's batch source over log directories (see the module doc)."""

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def schema(self) -> StructType:
        """The Kafka schema; options are checked here (at ``load()``, as the Kafka source does), leaving out the
        ones only a stream may take, which the stream reader checks."""
        options = {k.lower(): v for k, v in self.options.items() if k.lower() not in _STREAM_ONLY_OPTIONS}
        start = options.get("startingoffsets")
        if start is not None and (start.strip().lower() == "latest" or re.search(r":\s*-1\b", start)):
            del options["startingoffsets"]  # 'latest' starts a stream; a batch query refuses it in reader()
        return kafka_schema(parse_options(options).include_headers)

    def reader(self, schema: StructType) -> KafkaLogBatchReader:
        options = parse_options(self.options)
        expected = kafka_schema(options.include_headers)
        if schema != expected:
            raise InvalidConfigurationError(
                f"The kafkalog source has a fixed schema and cannot be set with a custom one: expected "
                f"{expected.simpleString()}, got {schema.simpleString()}"
            )
        pushdown = options.filter_pushdown
        if pushdown or (pushdown is None and _called_by_pushdown_worker()):
            return KafkaLogPushdownBatchReader(options, schema)
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
    """One offset range [start, end) of a topic-partition, resolved when the query was planned."""

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


def _check_by_timestamp(name: str, position: str, timestamps: dict, selected: list[tuple[str, int]]) -> None:
    if set(timestamps) != set(selected):  # KAFKA_TIMESTAMP_OFFSET_DOES_NOT_MATCH_ASSIGNED
        raise InvalidConfigurationError(
            f"Partitions specified for Kafka {position} offsets by timestamp ({name}) must match the assigned "
            f"partitions. Specified: {_fmt_tps(timestamps)} Assigned: {_fmt_tps(selected)}"
        )


# ----- filter pushdown ----------------------------------------------------------------------------------


def _ms_at_or_below(value: object) -> int | None:
    """A filter's timestamp literal as epoch milliseconds rounded down, or None when it is not a zone-aware
    datetime (Spark passes TIMESTAMP literals as UTC datetimes; anything else is not narrowed on)."""
    if not isinstance(value, dt.datetime) or value.tzinfo is None:
        return None
    delta = value - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


@dataclass
class PushedFilters:
    """What the filters pushed to a reader allow: conditions on topic, partition and offset (exact) and a
    lower bound on the timestamp (used to narrow only). ``None`` means unconstrained."""

    topics: frozenset[str] | None = None
    partitions: frozenset[int] | None = None
    partition_low: int | None = None  # inclusive
    partition_high: int | None = None  # exclusive
    offsets: frozenset[int] | None = None
    offset_low: int | None = None  # inclusive
    offset_high: int | None = None  # exclusive
    timestamp_low: int | None = None  # ms, inclusive

    @property
    def active(self) -> bool:
        return any(
            v is not None
            for v in (
                self.topics,
                self.partitions,
                self.partition_low,
                self.partition_high,
                self.offsets,
                self.offset_low,
                self.offset_high,
                self.timestamp_low,
            )
        )

    def push(self, f: Filter) -> bool:
        """Take ``f`` into account if it says something about topic, partition, offset or timestamp; True when
        the ranges planned from now on hold exactly the rows it accepts (Spark need not apply it again)."""
        attribute = getattr(f, "attribute", None)
        if not isinstance(attribute, tuple) or len(attribute) != 1:
            return False
        column = attribute[0]
        if isinstance(f, EqualTo | EqualNullSafe):
            values, op = [f.value], "in"
        elif isinstance(f, In):
            values, op = list(f.value), "in"
        elif isinstance(f, GreaterThan | GreaterThanOrEqual | LessThan | LessThanOrEqual):
            values, op = [f.value], type(f).__name__
        else:
            return False
        if not values:
            return False
        if column == "topic":
            if op != "in" or not all(isinstance(v, str) for v in values):
                return False
            self.topics = frozenset(values) if self.topics is None else self.topics & frozenset(values)
            return True
        if column in ("partition", "offset"):
            if not all(type(v) is int for v in values):
                return False
            exact = True
            if op == "in" and column == "offset" and len(set(values)) > MAX_PUSHED_OFFSETS:
                op, exact = "hull", False
            prefix = "partition" if column == "partition" else "offset"
            points_name = "partitions" if column == "partition" else "offsets"
            low, high = getattr(self, f"{prefix}_low"), getattr(self, f"{prefix}_high")
            if op == "in":
                points = getattr(self, points_name)
                setattr(self, points_name, frozenset(values) if points is None else points & frozenset(values))
            elif op == "hull":
                low = max(low if low is not None else min(values), min(values))
                high = min(high if high is not None else max(values) + 1, max(values) + 1)
            else:
                v = values[0]
                bound = {"GreaterThan": v + 1, "GreaterThanOrEqual": v, "LessThan": v, "LessThanOrEqual": v + 1}[op]
                if op.startswith("Greater"):
                    low = bound if low is None else max(low, bound)
                else:
                    high = bound if high is None else min(high, bound)
            setattr(self, f"{prefix}_low", low)
            setattr(self, f"{prefix}_high", high)
            return exact
        if column == "timestamp" and op in ("in", "GreaterThan", "GreaterThanOrEqual"):
            bounds = [_ms_at_or_below(v) for v in values]
            if any(b is None for b in bounds):
                return False
            low = min(bounds)
            if low > 0:  # records without a timestamp (-1) match bounds at or below 0: never narrow on those
                self.timestamp_low = low if self.timestamp_low is None else max(self.timestamp_low, low)
            return False
        return False

    def keeps_partition(self, topic: str, partition: int) -> bool:
        return (
            (self.topics is None or topic in self.topics)
            and (self.partitions is None or partition in self.partitions)
            and (self.partition_low is None or partition >= self.partition_low)
            and (self.partition_high is None or partition < self.partition_high)
        )

    def offset_ranges(self, start: int, end: int) -> list[tuple[int, int]]:
        """[start, end) cut down to the offsets the offset conditions accept: non-empty ranges, ascending."""
        if self.offset_low is not None:
            start = max(start, self.offset_low)
        if self.offset_high is not None:
            end = min(end, self.offset_high)
        if start >= end:
            return []
        if self.offsets is None:
            return [(start, end)]
        ranges: list[tuple[int, int]] = []
        for offset in sorted(o for o in self.offsets if start <= o < end):
            if ranges and ranges[-1][1] == offset:
                ranges[-1] = (ranges[-1][0], offset + 1)
            else:
                ranges.append((offset, offset + 1))
        return ranges


# ----- splitting ----------------------------------------------------------------------------------------


def _divide(piece: tuple, parts: int) -> list[tuple]:
    """KafkaOffsetRangeCalculator.getDividedPartition: ``parts`` consecutive pieces, the last taking the rest."""
    key, start, end = piece
    remaining = end - start
    out = []
    for part in range(parts):
        this = remaining // (parts - part)
        remaining -= this
        stop = min(start + this, end)
        out.append((key, start, stop))
        start = stop
    return out


def _part_count(size: int, total: int, min_parts: int) -> int:
    # Scala's math.round: half up.
    return max(math.floor(size / total * min_parts + 0.5), 1)


def offset_ranges(
    ranges: list[tuple], min_partitions: int | None, max_records_per_partition: int | None
) -> list[tuple]:
    """Spark's KafkaOffsetRangeCalculator over (key, start, end) ranges, the key naming the topic-partition.

    No split unless there are fewer ranges than ``min_partitions`` or one above ``max_records_per_partition``
    offsets; then empty ranges go, ranges above ``max_records_per_partition`` are cut into equal pieces, and
    if there are still fewer than ``min_partitions`` the large ones are divided in proportion to their sizes
    (a range whose share rounds to one piece is left whole, and left out of the proportions).
    """
    min_parts, max_records = min_partitions, max_records_per_partition
    if not (
        (min_parts is not None and min_parts > len(ranges))
        or (max_records is not None and any(e - s > max_records for _, s, e in ranges))
    ):
        return list(ranges)
    pieces = [r for r in ranges if r[2] - r[1] > 0]
    if max_records is not None:
        pieces = [p for r in pieces for p in _divide(r, -(-(r[2] - r[1]) // max_records)) if p[2] > p[1]]
    if min_parts is not None and min_parts > len(pieces):
        total = sum(e - s for _, s, e in pieces)
        unsplit = [r for r in pieces if _part_count(r[2] - r[1], total, min_parts) == 1]
        unsplit_keys = {r[0] for r in unsplit}
        split_total = total - sum(e - s for _, s, e in unsplit)
        split_min = max(min_parts - len(unsplit), 1)
        pieces = [
            p
            for r in pieces
            for p in _divide(r, 1 if r[0] in unsplit_keys else _part_count(r[2] - r[1], split_total, split_min))
            if p[2] > p[1]
        ]
    return pieces


def _snap_to_batches(directory: str, bases: list[int], bounds: list[int], max_records: int | None) -> list[int]:
    """Move each inner cut of a range cut at ``bounds`` to the nearest batch boundary from the ``.index``
    (``logfiles.batch_boundaries``) within a quarter of its neighbouring pieces, keeping every piece non-empty
    and, with ``max_records``, no longer than it; a cut with no such boundary stays where it is."""
    out = [bounds[0]]
    for j in range(1, len(bounds) - 1):
        cut, previous, following = bounds[j], out[-1], bounds[j + 1]
        slack = min(cut - bounds[j - 1], following - cut) // 4
        candidates = logfiles.batch_boundaries(directory, bases, cut)
        ok = (candidates > previous) & (candidates < following) & (np.abs(candidates - cut) <= slack)
        if max_records is not None:
            ok &= (candidates - previous <= max_records) & (following - candidates <= max_records)
        good = candidates[ok]
        out.append(int(good[np.argmin(np.abs(good - cut))]) if len(good) else cut)
    out.append(bounds[-1])
    return out


# ----- the reader ---------------------------------------------------------------------------------------


class KafkaLogBatchReader(DataSourceReader):
    """Plans input partitions (one per topic-partition, or more with minPartitions / maxRecordsPerPartition)
    and reads each with the columnar decoder."""

    def __init__(self, options: ReadOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self.pushed = PushedFilters()

    def push_filters(self, filters: list[Filter]) -> Iterable[Filter]:
        """What ``pushFilters`` does when filter pushdown is on: take the filters on topic, partition, offset
        and timestamp, and return the ones Spark must still apply (see ``PushedFilters.push``)."""
        return [f for f in filters if not self.pushed.push(f)]

    def partitions(self) -> list[KafkaLogInputPartition]:
        options = self.options
        found = logfiles.discover_log_dirs(list(options.paths))  # a folder that is not a log dir is refused
        selected = _select(options, found)
        if isinstance(options.starting, dict):
            _check_specific("startingOffsets", options.starting, selected)
        if isinstance(options.ending, dict):
            _check_specific("endingOffsets", options.ending, selected)
        if options.starting_by_timestamp is not None:
            _check_by_timestamp("startingOffsetsByTimestamp", "start", options.starting_by_timestamp, selected)
        if options.ending_by_timestamp is not None:
            _check_by_timestamp("endingOffsetsByTimestamp", "end", options.ending_by_timestamp, selected)
        pushed = self.pushed
        offsets_of = logfiles.CheckpointedOffsets()
        planned: list[KafkaLogInputPartition] = []
        for tp in selected:
            if not pushed.keeps_partition(*tp):
                continue
            part = found[tp]
            offsets = offsets_of(part)
            latest = offsets.latest
            if options.read_committed:
                latest = logfiles.last_stable_offset(part.directory, offsets.log_start, latest)
            start = self._start(tp, part, offsets.log_start, latest)
            end = self._end(tp, part, offsets, latest)
            if start > end:
                raise InvalidConfigurationError(
                    f"Beginning offset {start} is after the ending offset {end} for topic {tp[0]} partition "
                    f"{tp[1]}. You either provided an invalid startingOffsets/endingOffsets, or the log has been "
                    "damaged"
                )
            if not pushed.active:
                planned.append(KafkaLogInputPartition(tp[0], tp[1], part.directory, start, end))
                continue
            ranges = pushed.offset_ranges(start, end)
            if ranges and pushed.timestamp_low is not None:
                first = logfiles.first_offset_at_or_after(part.directory, pushed.timestamp_low, ranges[0][0], end)
                ranges = [(max(s, first), e) for s, e in ranges if e > first]
            planned += [KafkaLogInputPartition(tp[0], tp[1], part.directory, s, e) for s, e in ranges]
        return self._split(planned)

    def _start(self, tp: tuple[str, int], part: logfiles.PartitionDir, log_start: int, latest: int) -> int:
        options = self.options
        timestamp = options.starting_timestamp
        if timestamp is None and options.starting_by_timestamp is not None:
            timestamp = options.starting_by_timestamp[tp]
        if timestamp is not None:
            found = logfiles.offset_for_timestamp(part.directory, timestamp, log_start, latest)
            if found is not None:
                return found
            if options.timestamp_strategy == "latest":
                return latest
            raise InvalidConfigurationError(
                f"No offset matched from request of topic-partition {part.name} and timestamp {timestamp}. "
                "(startingTimestamp / startingOffsetsByTimestamp; set startingOffsetsByTimestampStrategy to "
                "'latest' to start at the latest offset instead)"
            )
        start = log_start
        if isinstance(options.starting, dict) and options.starting[tp] != EARLIEST:
            start = options.starting[tp]
            if start < log_start:
                if options.fail_on_data_loss:
                    raise OffsetOutOfRangeError(
                        logfiles.data_loss_message(part.name, start, log_start) + " (startingOffsets)",
                        offset=start,
                    )
                start = log_start
        return start

    def _end(
        self, tp: tuple[str, int], part: logfiles.PartitionDir, offsets: logfiles.PartitionOffsets, latest: int
    ) -> int:
        options = self.options
        timestamp = options.ending_timestamp
        if timestamp is None and options.ending_by_timestamp is not None:
            timestamp = options.ending_by_timestamp[tp]
        if timestamp is not None:
            found = logfiles.offset_for_timestamp(part.directory, timestamp, offsets.log_start, latest)
            return found if found is not None else latest
        end = latest
        if isinstance(options.ending, dict) and options.ending[tp] != LATEST:
            end = options.ending[tp]
            if end > latest:
                stable = (
                    f" (the last stable offset: a transaction open at {latest} is not decided yet)"
                    if latest < offsets.latest
                    else ""
                )
                raise InvalidConfigurationError(
                    f"endingOffsets for {part.name} is {end}, beyond its latest offset {latest}{stable}"
                )
        return end

    def _split(self, planned: list[KafkaLogInputPartition]) -> list[KafkaLogInputPartition]:
        options = self.options
        if options.min_partitions is None and options.max_records_per_partition is None:
            return planned
        pieces = offset_ranges(
            [(i, p.start, p.end) for i, p in enumerate(planned)],
            options.min_partitions,
            options.max_records_per_partition,
        )
        by_range: dict[int, list[tuple[int, int]]] = {}
        for i, start, end in pieces:
            by_range.setdefault(i, []).append((start, end))
        out = []
        for i, p in enumerate(planned):
            cuts = by_range.get(i)
            if cuts is None:
                continue
            bounds = [cuts[0][0]] + [end for _, end in cuts]
            if len(cuts) > 1:
                bases = logfiles.segment_bases(p.directory)
                bounds = _snap_to_batches(p.directory, bases, bounds, options.max_records_per_partition)
            out += [
                KafkaLogInputPartition(p.topic, p.partition, p.directory, s, e) for s, e in itertools.pairwise(bounds)
            ]
        return out

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
            read_committed=self.options.read_committed,
        ):
            for batch in table.to_batches(max_chunksize=MAX_ROWS_PER_ARROW_BATCH):
                if batch.num_rows:
                    yield to_spark_batch(batch, partition.topic, partition.partition, target)


class KafkaLogPushdownBatchReader(KafkaLogBatchReader):
    """The reader that implements ``pushFilters``, which pyspark allows only when
    ``spark.sql.python.filterPushdown.enabled`` is true (it refuses the query otherwise, naming the conf)."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        return self.push_filters(filters)


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
