"""kafkalog.spark: the ``kafkalog`` Spark data source, Spark's Kafka source over log directories.

``register(spark)`` makes ``spark.read`` / ``readStream`` / ``write`` / ``writeStream`` ``.format("kafkalog")``
available; ``local_session()`` builds a local session with it registered. See ``kafkalog.spark.source`` for the
read options and the schema, ``stream`` for streaming reads, ``writer`` for the sink, and ``jobs`` for the
pipeline jobs (export, ingest, report).
"""

from __future__ import annotations

from pyspark.sql import SparkSession

from .session import local_session
from .source import (
    FORMAT_NAME,
    KAFKA_SCHEMA,
    KAFKA_SCHEMA_WITH_HEADERS,
    KafkaLogBatchReader,
    KafkaLogDataSource,
    KafkaLogInputPartition,
    kafka_schema,
    parse_options,
)


def register(spark: SparkSession) -> None:
    """Register the ``kafkalog`` data source on ``spark``."""
    spark.dataSource.register(KafkaLogDataSource)


__all__ = [
    "FORMAT_NAME",
    "KAFKA_SCHEMA",
    "KAFKA_SCHEMA_WITH_HEADERS",
    "KafkaLogBatchReader",
    "KafkaLogDataSource",
    "KafkaLogInputPartition",
    "kafka_schema",
    "local_session",
    "parse_options",
    "register",
]
