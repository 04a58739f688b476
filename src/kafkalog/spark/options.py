"""The read options of the ``kafkalog`` source (Kafka source names and meanings) and its schema.

``parse_options`` checks the batch options of ``spark.read.format("kafkalog")`` into a ``ReadOptions`` (see
``kafkalog.spark.source`` for what each option does); ``kafka_schema`` is the Kafka source's schema.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

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

from ..errors import InvalidConfigurationError
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


STREAM_ONLY_OPTION_KEYS = ("maxoffsetspertrigger", "minoffsetspertrigger", "maxtriggerdelay")


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


def parse_offsets(name: str, value: str) -> str | dict[tuple[str, int], int]:
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


def format_partitions(tps) -> str:
    return "{" + ", ".join(f"{t}-{p}" for t, p in sorted(tps)) + "}"


@dataclass(frozen=True)
class _RangeEnd:
    """The options of one end of a batch query's range, the offset Spark refuses there, and the ReadOptions
    fields the end fills (``field``, ``field``_timestamp, ``field``_by_timestamp)."""

    field: str
    timestamp: str
    by_timestamp: str
    offsets: str
    default: str
    refused: str  # 'latest' for the start, 'earliest' for the end
    refused_offset: int
    whole: str  # how Spark's messages name this end as a whole, then per partition
    per_partition: str


_STARTING = _RangeEnd(
    "starting", "startingTimestamp", "startingOffsetsByTimestamp", "startingOffsets", "earliest", "latest", LATEST,
    "starting offset", "startingOffsets",
)  # fmt: skip
_ENDING = _RangeEnd(
    "ending", "endingTimestamp", "endingOffsetsByTimestamp", "endingOffsets", "latest", "earliest", EARLIEST,
    "ending offset", "ending offset",
)  # fmt: skip


def _limit_fields(
    end: _RangeEnd, offsets: str | dict, timestamp: int | None = None, by_timestamp: dict | None = None
) -> dict[str, Any]:
    """The ReadOptions fields of one end of the range: its offsets, global timestamp and timestamps by partition."""
    return {end.field: offsets, f"{end.field}_timestamp": timestamp, f"{end.field}_by_timestamp": by_timestamp}


def _parse_limit(opts: Mapping[str, str], end: _RangeEnd) -> dict[str, Any]:
    """The ReadOptions fields of one end of the range (``_limit_fields``), with Spark's precedence
    (KafkaSourceProvider.getKafkaOffsetRangeLimit): the global timestamp, then the one by partition, then
    the offsets; the options that do not apply are not looked at. validateBatchOptions' checks and wording."""
    if end.timestamp.lower() in opts:
        return _limit_fields(end, end.default, timestamp=_parse_timestamp(end.timestamp, opts[end.timestamp.lower()]))
    if end.by_timestamp.lower() in opts:
        by_timestamp = _parse_timestamps(end.by_timestamp, opts[end.by_timestamp.lower()])
        return _limit_fields(end, end.default, by_timestamp=by_timestamp)
    offsets = parse_offsets(end.offsets, opts.get(end.offsets.lower(), end.default))
    if offsets == end.refused:
        raise InvalidConfigurationError(f"{end.whole} can't be {end.refused} for batch queries on kafkalog")
    if isinstance(offsets, dict):
        for (topic, partition), offset in offsets.items():
            if offset == end.refused_offset:
                raise InvalidConfigurationError(
                    f"{end.per_partition} for {topic}-{partition} can't be {end.refused} for batch queries on kafkalog"
                )
    return _limit_fields(end, offsets)


class _Subscription(NamedTuple):
    """Which topic-partitions a query reads (Spark's ConsumerStrategy): the option given, and its topics,
    pattern or assignment; the ReadOptions fields of the same names."""

    strategy: str
    topics: tuple[str, ...] = ()
    pattern: str = ""
    assign: tuple[tuple[str, int], ...] = ()


def _parse_strategy(opts: Mapping[str, str]) -> _Subscription:
    """The subscription from exactly one of assign, subscribe, subscribePattern."""
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
    if strategy == "subscribe":
        topics = tuple(dict.fromkeys(t.strip() for t in value.split(",") if t.strip()))
        if not topics:
            raise InvalidConfigurationError(
                f"No topics to subscribe to as specified value for option 'subscribe' is '{value}'"
            )
        return _Subscription(strategy, topics=topics)
    if strategy == "subscribePattern":
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
        return _Subscription(strategy, pattern=pattern)
    return _Subscription(strategy, assign=_parse_assign(value))


def _check_timestamp_limits(starting: dict[tuple[str, int], int], ending: dict[tuple[str, int], int]) -> None:
    """Kafka's checkOffsetLimitValidity for offsets by timestamp: the same partitions, no start after its end."""
    if set(starting) != set(ending):
        raise InvalidConfigurationError(
            "The topic-partitions of startingOffsetsByTimestamp and endingOffsetsByTimestamp must be the "
            f"same: {format_partitions(starting)} and {format_partitions(ending)}"
        )
    for tp, start_ts in sorted(starting.items()):
        end_ts = ending[tp]
        if start_ts > end_ts >= 0:
            raise InvalidConfigurationError(
                f"The starting timestamp {start_ts} is after the ending timestamp {end_ts} for "
                f"{tp[0]}-{tp[1]} (startingOffsetsByTimestamp, endingOffsetsByTimestamp)"
            )


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
    subscription = _parse_strategy(opts)

    timestamp_strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if timestamp_strategy not in TIMESTAMP_STRATEGIES:
        raise InvalidConfigurationError(
            f"Option 'startingOffsetsByTimestampStrategy' must be one of {', '.join(TIMESTAMP_STRATEGIES)}, "
            f"not '{opts['startingoffsetsbytimestampstrategy']}'"
        )
    starting = _parse_limit(opts, _STARTING)
    ending = _parse_limit(opts, _ENDING)
    if starting["starting_by_timestamp"] is not None and ending["ending_by_timestamp"] is not None:
        _check_timestamp_limits(starting["starting_by_timestamp"], ending["ending_by_timestamp"])
    return ReadOptions(
        paths=_paths(opts),
        **subscription._asdict(),
        **starting,
        **ending,
        fail_on_data_loss=_bool_option(opts, "failOnDataLoss", True),
        include_headers=_bool_option(opts, "includeHeaders", False),
        timestamp_strategy=timestamp_strategy,
        min_partitions=_positive_option(opts, "minPartitions"),
        max_records_per_partition=_positive_option(opts, "maxRecordsPerPartition"),
        isolation_level=isolation,
        filter_pushdown=_optional_bool_option(opts, "filterPushdown"),
    )
