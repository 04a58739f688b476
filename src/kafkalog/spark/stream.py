"""Streaming reads for the ``kafkalog`` data source: Spark's Kafka micro-batch source over log directories.

::

    spark.readStream.format("kafkalog")
        .option("path", "/var/lib/kafka/data")          # one or more log dirs, comma-separated
        .option("subscribe", "orders")                  # or subscribePattern, or assign
        .option("startingOffsets", "earliest")          # default latest, as Kafka's; or JSON
        .option("maxOffsetsPerTrigger", "10000")        # optional rate limit
        .load()

It behaves as ``KafkaMicroBatchStream`` does:

* Offsets are the Kafka source's JSON, ``{"topic": {"partition": next offset}}``, so a checkpoint's
  ``offsets/<batch>`` files read like a Kafka query's. The latest offset of a partition is what
  ``logfiles.partition_offsets`` gives: the high watermark when the broker's checkpoint of it is current,
  else the log end offset. Each trigger looks at the files again, so a running query sees what another
  process (a broker, a ``LogManager``) appended since the last one.
* ``startingOffsets`` applies to a new query only (a restarted one resumes from its checkpoint):
  ``latest`` (the default), ``earliest``, or JSON with every selected partition (-1 latest, -2 earliest).
  Partitions that appear later (new topics matching ``subscribePattern``) are read from their earliest
  offset; one whose log does not start at 0 is data loss, reported as Kafka does.
* ``maxOffsetsPerTrigger`` caps each micro-batch (split between partitions in proportion to their backlog,
  Kafka's ``rateLimit``); ``minOffsetsPerTrigger`` delays a micro-batch until that many records are there or
  ``maxTriggerDelay`` (default 15m) has passed since the last one. ``Trigger.AvailableNow`` reads up to the
  offsets that were latest when the query started, in several micro-batches under ``maxOffsetsPerTrigger``;
  it ignores ``minOffsetsPerTrigger`` (waiting for more data would never end such a query).
* ``failOnDataLoss`` (default true): offsets of a micro-batch that retention or ``delete_records`` removed
  before they were read fail the query with an error naming them; with ``false`` the query logs a warning
  and goes on from the log start. Partitions that disappear are reported the same way.
* Records are read by the batch reader's read path. With ``kafka.isolation.level=read_committed`` (when the
  batch reader has it) the latest offset is the last stable offset and aborted records are left out.
  ``startingTimestamp`` / ``startingOffsetsByTimestamp`` (taking precedence over ``startingOffsets``, as in
  Kafka), ``minPartitions`` and ``maxRecordsPerPartition`` mean what they mean in a batch read;
  ``endingOffsets`` and ending timestamps are refused (a stream has no end).

``startingOffsets=latest`` is not lost when a query stops before any record arrives: Spark always runs a
first micro-batch (empty then), which logs the offsets the query started from in its checkpoint.

A Python ``ReadLimit`` cannot be Kafka's composite one: with both ``maxOffsetsPerTrigger`` and
``minOffsetsPerTrigger`` the default read limit is ``ReadMaxRows`` and the reader adds the minimum itself.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import re
import time
from collections.abc import Callable, Iterator, Mapping

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from ..errors import InvalidConfigurationError, OffsetOutOfRangeError
from ..partition import readonly as logfiles
from .batch import KafkaLogBatchReader
from .options import EARLIEST, LATEST, ReadOptions, kafka_schema, parse_offsets, parse_options
from .planning import KafkaLogInputPartition, check_specific_offsets, select_partitions

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
PartitionOffsetMap = dict[TopicPartition, int]

# Options only a streaming query has; parse_options (the batch options) never sees them.
MAX_OFFSETS_PER_TRIGGER = "maxOffsetsPerTrigger"
MIN_OFFSETS_PER_TRIGGER = "minOffsetsPerTrigger"
MAX_TRIGGER_DELAY = "maxTriggerDelay"
DEFAULT_MAX_TRIGGER_DELAY = "15m"
STREAM_ONLY_OPTIONS = (MAX_OFFSETS_PER_TRIGGER, MIN_OFFSETS_PER_TRIGGER, MAX_TRIGGER_DELAY, "startingOffsets")
# JavaUtils.timeStringAsMs's units.
_TIME_UNITS_MS = {"us": 0.001, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}
_TIME = re.compile(r"(-?[0-9]+)\s*([a-z]+)?")
FAIL_ON_DATA_LOSS_TRUE = (
    "Some data may have been lost because they are not available in the log dirs any more; either the data was "
    "aged out by retention or removed by delete_records, or the topic was deleted before all of its data was "
    "processed. If you don't want your streaming query to fail on such cases, set the source option "
    "'failOnDataLoss' to 'false'."
)
FAIL_ON_DATA_LOSS_FALSE = (
    "Some data may have been lost because they are not available in the log dirs any more; either the data was "
    "aged out by retention or removed by delete_records, or the topic was deleted before all of its data was "
    "processed. If you want your streaming query to fail on such cases, set the source option 'failOnDataLoss' "
    "to 'true'."
)


# ----- options ------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class StreamOptions:
    """The options of a streaming read: the batch ones (``read``) and those only a stream has."""

    read: ReadOptions
    starting: str | dict[TopicPartition, int] = "latest"
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60_000


def _positive_int(opts: Mapping[str, str], name: str) -> int | None:
    value = opts.get(name.lower())
    if value is None:
        return None
    try:
        number = int(value.strip())
    except ValueError:
        number = 0
    if number <= 0:
        raise InvalidConfigurationError(f"Option '{name}' must be a positive integer, not '{value}'")
    return number


def time_string_ms(value: str, name: str = MAX_TRIGGER_DELAY) -> int:
    """Spark's ``timeStringAsMs``: '15m', '30s', '100ms', '2h', '1d', or a bare number of milliseconds."""
    match = _TIME.fullmatch(value.strip().lower())
    if match is None or (match.group(2) is not None and match.group(2) not in _TIME_UNITS_MS):
        raise InvalidConfigurationError(
            f"Option '{name}' is not a time ('15m', '30s', '500ms', '2h', '1d' or milliseconds): '{value}'"
        )
    number = int(match.group(1))
    if number < 0:
        raise InvalidConfigurationError(f"Option '{name}' must not be negative: '{value}'")
    return int(number * _TIME_UNITS_MS[match.group(2) or "ms"])


def parse_stream_options(options: Mapping[str, str]) -> StreamOptions:
    """Validate the options of ``spark.readStream.format("kafkalog")`` as the Kafka source does.

    The options a batch read shares are checked by ``parse_options``; ``startingOffsets`` defaults to
    ``latest``; ``endingOffsets`` is refused (a stream has no end).
    """
    opts = {str(k).lower(): str(v) for k, v in options.items() if v is not None}
    if "endingoffsets" in opts:
        raise InvalidConfigurationError("ending offset not valid in streaming queries")
    if "endingoffsetsbytimestamp" in opts or "endingtimestamp" in opts:
        raise InvalidConfigurationError("ending timestamp not valid in streaming queries")
    max_offsets = _positive_int(opts, MAX_OFFSETS_PER_TRIGGER)
    min_offsets = _positive_int(opts, MIN_OFFSETS_PER_TRIGGER)
    if max_offsets is not None and min_offsets is not None and min_offsets > max_offsets:
        raise InvalidConfigurationError(
            f"The value of minOffsetPerTrigger({min_offsets}) is higher than the maxOffsetsPerTrigger({max_offsets})."
        )
    delay_ms = time_string_ms(opts.get(MAX_TRIGGER_DELAY.lower(), DEFAULT_MAX_TRIGGER_DELAY))
    starting: str | dict[TopicPartition, int] = "latest"
    if "startingtimestamp" not in opts and "startingoffsetsbytimestamp" not in opts:  # those take precedence
        starting = parse_offsets("startingOffsets", opts.get("startingoffsets", "latest"))
    read = parse_options({k: v for k, v in opts.items() if k not in {o.lower() for o in STREAM_ONLY_OPTIONS}})
    isolation = opts.get("kafka.isolation.level", "read_uncommitted").strip().lower()
    if isolation != "read_uncommitted" and not getattr(read, "read_committed", False):
        raise InvalidConfigurationError(
            f"Option 'kafka.isolation.level' = '{isolation}' is not supported by kafkalog streaming reads"
        )
    return StreamOptions(
        read=read,
        starting=starting,
        max_offsets_per_trigger=max_offsets,
        min_offsets_per_trigger=min_offsets,
        max_trigger_delay_ms=delay_ms,
    )


# ----- offsets ------------------------------------------------------------------------------------------


def encode_offsets(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """{(topic, partition): offset} as the Kafka source's offset JSON, topics and partitions in order."""
    out: dict[str, dict[str, int]] = {}
    for topic, partition in sorted(offsets):
        out.setdefault(topic, {})[str(partition)] = int(offsets[(topic, partition)])
    return out


def decode_offsets(offsets: Mapping | None) -> PartitionOffsetMap:
    """The Kafka source's offset JSON (as a dict) as {(topic, partition): offset}."""
    if not offsets:
        return {}
    out: PartitionOffsetMap = {}
    try:
        for topic, parts in offsets.items():
            for partition, offset in parts.items():
                out[(str(topic), int(partition))] = int(offset)
    except (AttributeError, TypeError, ValueError):
        raise InvalidConfigurationError(
            f'Not a kafkalog offset: expected e.g. {{"topicA":{{"0":23,"1":5}}}}, got {offsets}'
        ) from None
    return out


def rate_limit(
    limit: int,
    start: Mapping[TopicPartition, int],
    latest: Mapping[TopicPartition, int],
    earliest_of_new: Callable[[], Mapping[TopicPartition, int]],
) -> PartitionOffsetMap:
    """Kafka's ``rateLimit``: share ``limit`` offsets between partitions in proportion to their backlog.

    A partition missing from ``start`` (a new one) starts at its earliest offset, fetched lazily. A share
    under one offset is rounded up, so that a small partition is not starved; others are rounded down.
    """
    new: Mapping[TopicPartition, int] | None = None

    def begin_of(tp: TopicPartition) -> int | None:
        nonlocal new
        if tp in start:
            return start[tp]
        if new is None:
            new = earliest_of_new()
        return new.get(tp)

    sizes: dict[TopicPartition, int] = {}
    begins: dict[TopicPartition, int] = {}
    for tp, end in latest.items():
        begin = begin_of(tp)
        if begin is not None and end - begin > 0:
            sizes[tp] = end - begin
            begins[tp] = begin
    total = float(sum(sizes.values()))
    if total < 1:
        return dict(latest)
    limited: PartitionOffsetMap = {}
    for tp, end in latest.items():
        if tp not in sizes:
            limited[tp] = end
            continue
        prorate = limit * (sizes[tp] / total)
        share = math.ceil(prorate) if prorate < 1 else math.floor(prorate)
        limited[tp] = min(end, begins[tp] + share)
    return limited


# ----- the stream reader --------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Scanned:
    part: logfiles.PartitionDir
    offsets: logfiles.PartitionOffsets


class KafkaLogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("kafkalog")``: Kafka's micro-batch source over log directories.

    Spark keeps one instance per query in a Python process of the driver (initialOffset, latestOffset,
    partitions, commit) and pickles it for the tasks, which only call ``read``.
    """

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.stream_options = parse_stream_options(options)
        self.options = self.stream_options.read
        expected = kafka_schema(self.options.include_headers)
        if schema != expected:
            raise InvalidConfigurationError(
                f"The kafkalog source has a fixed schema and cannot be set with a custom one: expected "
                f"{expected.simpleString()}, got {schema.simpleString()}"
            )
        self.schema = schema
        self._available_now: PartitionOffsetMap | None = None  # the target of Trigger.AvailableNow
        self._latest: PartitionOffsetMap | None = None  # for reportLatestOffset
        self._last_trigger_ms = 0.0  # maxTriggerDelay: when the last micro-batch was let through

    # ----- looking at the log dirs --------------------------------------------------------------------

    def _scan(self, *, strict: bool) -> dict[TopicPartition, _Scanned]:
        """The selected partitions with their offsets, read from the files now.

        ``strict`` (a new query): a subscribed topic or assigned partition that is missing is an error, as in a
        batch read. Otherwise a missing one is left out: the partitions it had are gone (data loss).
        """
        options = self.options
        # A new query refuses a folder that is not a log dir; a running one reads what is there.
        found = (logfiles.discover_log_dirs if strict else logfiles.discover)(list(options.paths))
        if strict or options.strategy == "subscribePattern":
            selected = select_partitions(options, found)
        elif options.strategy == "subscribe":
            selected = sorted(tp for tp in found if tp[0] in options.topics)
        else:
            selected = sorted(tp for tp in options.assign if tp in found)
        offsets_of = logfiles.CheckpointedOffsets()
        scanned: dict[TopicPartition, _Scanned] = {}
        for tp in selected:
            part = found[tp]
            offsets = offsets_of(part)
            if getattr(options, "read_committed", False):  # a read_committed consumer's end: the LSO
                lso = logfiles.last_stable_offset(part.directory, offsets.log_start, offsets.latest)
                offsets = dataclasses.replace(offsets, latest=lso)
            scanned[tp] = _Scanned(part, offsets)
        return scanned

    def _fetch_latest(self) -> PartitionOffsetMap:
        return {tp: s.offsets.latest for tp, s in self._scan(strict=False).items()}

    def _report_data_loss(self, message: str, offset: int | None = None) -> None:
        """Kafka's ``reportDataLoss``: raise when failOnDataLoss, else log a warning and go on."""
        if self.options.fail_on_data_loss:
            raise OffsetOutOfRangeError(f"{message}. {FAIL_ON_DATA_LOSS_TRUE}", offset=offset)
        log.warning("%s. %s", message, FAIL_ON_DATA_LOSS_FALSE)

    # ----- DataSourceStreamReader ---------------------------------------------------------------------

    def initialOffset(self) -> dict:
        """Where a new query starts: ``startingOffsets`` resolved against the log dirs now."""
        scanned = self._scan(strict=True)
        if self._by_timestamp() is not None:
            return encode_offsets(self._offsets_by_timestamp(scanned))
        starting = self.stream_options.starting
        if starting == "earliest":
            return encode_offsets({tp: s.offsets.log_start for tp, s in scanned.items()})
        if starting == "latest":
            return encode_offsets({tp: s.offsets.latest for tp, s in scanned.items()})
        assert isinstance(starting, dict)
        check_specific_offsets("startingOffsets", starting, sorted(scanned))
        offsets: PartitionOffsetMap = {}
        for tp, s in scanned.items():
            offset = starting[tp]
            if offset == EARLIEST:
                offset = s.offsets.log_start
            elif offset == LATEST:
                offset = s.offsets.latest
            elif offset < s.offsets.log_start:
                self._report_data_loss(
                    f"startingOffsets for {s.part.name} is {offset} but the log now starts at offset "
                    f"{s.offsets.log_start}",
                    offset,
                )
                offset = s.offsets.log_start
            elif offset > s.offsets.latest:
                raise InvalidConfigurationError(
                    f"startingOffsets for {s.part.name} is {offset}, beyond its latest offset {s.offsets.latest}"
                )
            offsets[tp] = offset
        return encode_offsets(offsets)

    def _by_timestamp(self) -> int | dict | None:
        """The startingTimestamp, or startingOffsetsByTimestamp, when the batch options have them."""
        timestamp = getattr(self.options, "starting_timestamp", None)
        return timestamp if timestamp is not None else getattr(self.options, "starting_by_timestamp", None)

    def _offsets_by_timestamp(self, scanned: dict[TopicPartition, _Scanned]) -> PartitionOffsetMap:
        """Kafka's fetchGlobalTimestampBasedOffsets / fetchSpecificTimestampBasedOffsets, from the files."""
        by_timestamp = self._by_timestamp()
        if isinstance(by_timestamp, dict) and set(by_timestamp) != set(scanned):
            raise InvalidConfigurationError(
                "Partitions specified for Kafka start offsets by timestamp (startingOffsetsByTimestamp) must match "
                f"the assigned partitions. Specified: {_names(by_timestamp)} Assigned: {_names(scanned)}"
            )
        offsets: PartitionOffsetMap = {}
        for tp, s in scanned.items():
            timestamp = by_timestamp[tp] if isinstance(by_timestamp, dict) else by_timestamp
            found = logfiles.offset_for_timestamp(s.part.directory, timestamp, s.offsets.log_start, s.offsets.latest)
            if found is None:
                if getattr(self.options, "timestamp_strategy", "error") != "latest":
                    raise InvalidConfigurationError(
                        f"No offset matched from request of topic-partition {s.part.name} and timestamp "
                        f"{timestamp}. (startingTimestamp / startingOffsetsByTimestamp; set "
                        "startingOffsetsByTimestampStrategy to 'latest' to start at the latest offset instead)"
                    )
                found = s.offsets.latest
            offsets[tp] = found
        return offsets

    def getDefaultReadLimit(self) -> ReadLimit:
        """``ReadMaxRows(maxOffsetsPerTrigger)``, or ``ReadMinRows(minOffsetsPerTrigger)``, or everything.

        With both options the limit is Kafka's composite of the two; a Python ``ReadLimit`` cannot be one,
        so ``ReadMaxRows`` stands for it and ``latestOffset`` adds the minimum from the options.
        """
        so = self.stream_options
        if so.max_offsets_per_trigger is not None:
            return ReadMaxRows(so.max_offsets_per_trigger)
        if so.min_offsets_per_trigger is not None:
            return ReadMinRows(so.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Trigger.AvailableNow: the offsets latest now are as far as this query will read."""
        self._available_now = self._fetch_latest()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        """The end of the next micro-batch: the latest offsets, cut down by ``limit`` (see the module doc)."""
        start_offsets = decode_offsets(start)
        latest = dict(self._available_now) if self._available_now is not None else self._fetch_latest()
        self._latest = latest
        if isinstance(limit, ReadAllAvailable):
            return encode_offsets(latest)
        so = self.stream_options
        upper: int | None = None
        lower: int | None = None
        if isinstance(limit, ReadMaxRows):
            upper, lower = limit.max_rows, so.min_offsets_per_trigger
        elif isinstance(limit, ReadMinRows):
            lower, upper = limit.min_rows, so.max_offsets_per_trigger
        if (
            lower is not None
            and self._available_now is None
            and self._delay_batch(lower, so.max_trigger_delay_ms, latest, start_offsets)
        ):
            log.debug("Delaying batch as number of records available is less than minOffsetsPerTrigger")
            return encode_offsets(start_offsets)
        if upper is not None:
            return encode_offsets(rate_limit(upper, start_offsets, latest, self._earliest_of_new))
        return encode_offsets(latest)

    def _earliest_of_new(self) -> PartitionOffsetMap:
        return {tp: s.offsets.log_start for tp, s in self._scan(strict=False).items()}

    def _delay_batch(
        self, min_rows: int, max_delay_ms: int, latest: PartitionOffsetMap, start: PartitionOffsetMap
    ) -> bool:
        """Kafka's ``delayBatch``: skip this trigger while fewer than ``min_rows`` records are new, unless the
        last micro-batch was let through ``max_delay_ms`` ago or more."""
        now = time.time() * 1000
        if now - self._last_trigger_ms >= max_delay_ms:
            self._last_trigger_ms = now
            return False
        new_records = sum(offset - start.get(tp, 0) for tp, offset in latest.items())
        if new_records < min_rows:
            return True
        self._last_trigger_ms = now
        return False

    def reportLatestOffset(self) -> dict | None:
        return encode_offsets(self._latest) if self._latest else None

    def partitions(self, start: dict, end: dict) -> list[KafkaLogInputPartition]:
        """One input partition per topic-partition with records in [start, end); data loss reported here."""
        start_offsets = decode_offsets(start)
        end_offsets = decode_offsets(end)
        if start_offsets == end_offsets:
            return []
        scanned = self._scan(strict=False)
        new = sorted(set(end_offsets) - set(start_offsets))
        missing = [tp for tp in new if tp not in scanned]
        if missing:
            self._report_data_loss(f"Cannot find earliest offsets of {_names(missing)}. Some data may have been missed")
        initial = {tp: scanned[tp].offsets.log_start for tp in new if tp in scanned}
        if initial:
            log.info("Partitions added: %s", _names(initial))
        for tp, offset in initial.items():
            if offset != 0:
                self._report_data_loss(
                    f"Added partition {_name(tp)} starts from {offset} instead of 0. Some data may have been missed",
                    offset,
                )
        gone = sorted(set(start_offsets) - set(end_offsets))
        if gone:
            self._report_data_loss(f"{_names(gone)} are gone. Some data may have been missed")
        planned = []
        for tp in sorted(end_offsets):
            if tp in start_offsets:
                begin = start_offsets[tp]
            elif tp in initial:
                begin = initial[tp]
            else:
                continue
            until = end_offsets[tp]
            if until < begin:
                self._report_data_loss(
                    f"Partition {_name(tp)}'s offset was changed from {begin} to {until}, some data may have been "
                    "missed",
                    until,
                )
                continue
            if until == begin:
                continue
            if tp not in scanned:
                self._report_data_loss(f"{_names([tp])} are gone. Some data may have been missed", begin)
                continue
            log_start = scanned[tp].offsets.log_start
            if begin < log_start:
                message = logfiles.data_loss_message(_name(tp), begin, log_start)
                if self.options.fail_on_data_loss:
                    raise OffsetOutOfRangeError(
                        f"{message} Offsets {begin} to {min(log_start, until) - 1} of {_name(tp)} were not read "
                        f"(micro-batch offsets [{begin}, {until}))",
                        offset=begin,
                    )
                log.warning("%s Skipping offsets [%d, %d) of %s.", message, begin, min(log_start, until), _name(tp))
                begin = min(log_start, until)
                if begin == until:
                    continue
            planned.append(KafkaLogInputPartition(tp[0], tp[1], scanned[tp].part.directory, begin, until))
        # minPartitions / maxRecordsPerPartition split ranges as in a batch read (Kafka's rangeCalculator).
        split = getattr(self._batch_reader(), "_split", None)
        return split(planned) if split is not None else planned

    def _batch_reader(self) -> KafkaLogBatchReader:
        return KafkaLogBatchReader(self.options, self.schema)

    def read(self, partition: KafkaLogInputPartition) -> Iterator[pa.RecordBatch]:
        """The records of one planned range as Arrow record batches: the batch reader's read path."""
        return self._batch_reader().read(partition)

    def commit(self, end: dict) -> None:
        """Nothing to clean up: a reader holds no consumer, lock or cache."""


def _name(tp: TopicPartition) -> str:
    return f"{tp[0]}-{tp[1]}"


def _names(tps) -> str:
    return "{" + ", ".join(_name(tp) for tp in sorted(tps)) + "}"
