"""kafkalog.spark: the ``kafkalog`` Spark data source, Spark's Kafka source over log directories.

``register(spark)`` makes ``spark.read`` / ``readStream`` / ``write`` / ``writeStream`` ``.format("kafkalog")``
available; ``local_session()`` builds a local session with it registered. See ``kafkalog.spark.source`` for the
read options (parsed in ``options``, planned in ``planning``, read by ``batch``), ``stream`` for streaming reads,
``writer`` for the sink, and ``jobs`` for the pipeline jobs (export, ingest, report).

pyspark is an extra (``pip install 'kafkalog[spark]'``). This package imports without it, so that its pyspark-free
modules (``logfiles``) stay usable; the names below load on first use, and without pyspark they raise
``PySparkMissingError`` (a ``ModuleNotFoundError``) naming the extra.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._require import INSTALL_HINT, SPARK_EXTRA, PySparkMissingError, require_pyspark

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from .batch import KafkaLogBatchReader
    from .options import FORMAT_NAME, KAFKA_SCHEMA, KAFKA_SCHEMA_WITH_HEADERS, kafka_schema, parse_options
    from .planning import KafkaLogInputPartition
    from .session import local_session
    from .source import KafkaLogDataSource

# name -> the submodule that defines it; loaded (after the pyspark check) on first access
_LAZY = {
    "local_session": "session",
    "FORMAT_NAME": "options",
    "KAFKA_SCHEMA": "options",
    "KAFKA_SCHEMA_WITH_HEADERS": "options",
    "KafkaLogBatchReader": "batch",
    "KafkaLogDataSource": "source",
    "KafkaLogInputPartition": "planning",
    "kafka_schema": "options",
    "parse_options": "options",
}


def __getattr__(name: str) -> Any:
    """Load ``name`` from its submodule on first use, after checking that pyspark is installed."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    require_pyspark()
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def register(spark: SparkSession) -> None:
    """Register the ``kafkalog`` data source on ``spark``."""
    require_pyspark()
    from .source import KafkaLogDataSource

    spark.dataSource.register(KafkaLogDataSource)


__all__ = [
    "FORMAT_NAME",
    "INSTALL_HINT",
    "KAFKA_SCHEMA",
    "KAFKA_SCHEMA_WITH_HEADERS",
    "SPARK_EXTRA",
    "KafkaLogBatchReader",
    "KafkaLogDataSource",
    "KafkaLogInputPartition",
    "PySparkMissingError",
    "kafka_schema",
    "local_session",
    "parse_options",
    "register",
    "require_pyspark",
]
