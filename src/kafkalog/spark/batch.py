"""The batch reader of the ``kafkalog`` source: plans input partitions and reads each with the columnar decoder,
handing Spark Arrow record batches in the Kafka source's schema."""

from __future__ import annotations

import itertools
import os
import sys
from collections.abc import Iterable, Iterator

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceReader,
    Filter,
)
from pyspark.sql.types import (
    StructType,
)

from ..errors import InvalidConfigurationError, OffsetOutOfRangeError
from ..partition import readonly as logfiles
from .options import EARLIEST, LATEST, MAX_ROWS_PER_ARROW_BATCH, ReadOptions
from .planning import (
    KafkaLogInputPartition,
    PushedFilters,
    check_offsets_by_timestamp,
    check_specific_offsets,
    offset_ranges,
    select_partitions,
    snap_to_batches,
)

_PUSHDOWN_WORKER_FILE = "data_source_pushdown_filters.py"


def called_by_pushdown_worker(depth: int = 6) -> bool:
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
        selected = select_partitions(options, found)
        if isinstance(options.starting, dict):
            check_specific_offsets("startingOffsets", options.starting, selected)
        if isinstance(options.ending, dict):
            check_specific_offsets("endingOffsets", options.ending, selected)
        if options.starting_by_timestamp is not None:
            check_offsets_by_timestamp("startingOffsetsByTimestamp", "start", options.starting_by_timestamp, selected)
        if options.ending_by_timestamp is not None:
            check_offsets_by_timestamp("endingOffsetsByTimestamp", "end", options.ending_by_timestamp, selected)
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
                bounds = snap_to_batches(p.directory, bases, bounds, options.max_records_per_partition)
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
