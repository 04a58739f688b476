"""A local SparkSession for kafkalog's jobs, demo and tests, with the source registered."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from ._require import require_pyspark

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# Small-machine defaults; anything in ``config`` wins.
LOCAL_DEFAULTS = {
    "spark.sql.shuffle.partitions": "4",
    "spark.default.parallelism": "4",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
}


def local_session(
    app_name: str = "kafkalog", *, master: str = "local[*]", config: dict[str, str] | None = None
) -> SparkSession:
    """Build (or get) a local SparkSession whose Python workers run this interpreter, and register ``kafkalog``.

    Spark starts its Python workers with the system ``python3`` unless told otherwise, and that one lacks
    kafkalog and its dependencies: ``spark.pyspark.python`` and ``PYSPARK_PYTHON`` are set to
    ``sys.executable``. Startup takes about 5 s and the first Python data source query about 5 s more, so
    share one session (tests use one for the whole run). Without pyspark: ``PySparkMissingError`` naming the
    ``kafkalog[spark]`` extra.
    """
    require_pyspark()
    from pyspark.sql import SparkSession

    from . import register

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.pyspark.python", sys.executable)
        .config("spark.pyspark.driver.python", sys.executable)
    )
    for key, value in {**LOCAL_DEFAULTS, **(config or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    register(spark)
    return spark
