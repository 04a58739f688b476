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
which runs only when the conf is on (see ``batch.called_by_pushdown_worker``). The option ``filterPushdown``
overrides this: ``false`` never pushes, ``true`` always offers ``pushFilters`` (so pyspark names the conf when
it is off).

The modules: ``options`` (the options and the schema), ``planning`` (partitions, offset ranges, filters),
``batch`` (the batch reader), ``stream`` (the stream reader), ``writer`` (the sink). Readers take no lock and
open no ``Log``: see ``kafkalog.spark.logfiles``.
"""

from __future__ import annotations

import re

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from ..errors import InvalidConfigurationError
from .batch import KafkaLogBatchReader, KafkaLogPushdownBatchReader, called_by_pushdown_worker
from .options import FORMAT_NAME, STREAM_ONLY_OPTION_KEYS, kafka_schema, parse_options
from .stream import KafkaLogStreamReader
from .writer import KafkaLogStreamWriter, KafkaLogWriter


class KafkaLogDataSource(DataSource):
    """``spark.read.format("kafkalog")``: Kafka's batch source over log directories (see the module doc)."""

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def schema(self) -> StructType:
        """The Kafka schema; options are checked here (at ``load()``, as the Kafka source does), leaving out the
        ones only a stream may take, which the stream reader checks."""
        options = {k.lower(): v for k, v in self.options.items() if k.lower() not in STREAM_ONLY_OPTION_KEYS}
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
        if pushdown or (pushdown is None and called_by_pushdown_worker()):
            return KafkaLogPushdownBatchReader(options, schema)
        return KafkaLogBatchReader(options, schema)

    def streamReader(self, schema: StructType):
        """``spark.readStream.format("kafkalog")``: see ``kafkalog.spark.stream``."""
        return KafkaLogStreamReader(self.options, schema)

    def writer(self, schema: StructType, overwrite: bool):
        """``df.write.format("kafkalog")``: see ``kafkalog.spark.writer``."""
        return KafkaLogWriter(self.options, schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool):
        """``df.writeStream.format("kafkalog")``: see ``kafkalog.spark.writer``."""
        return KafkaLogStreamWriter(self.options, schema, overwrite)
