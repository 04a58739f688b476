"""Spark support is an extra (``kafkalog[spark]``): the check that pyspark is there, with an error that says so.

The core (record, storage, manager, the CLI's log commands) installs and runs without pyspark; the data source,
the sink, the pipeline jobs and ``kafkalog spark ...`` need it. Every entrance to them calls
``require_pyspark()`` before touching pyspark, so a user without it reads which extra to install instead of a
bare ``No module named 'pyspark'``.
"""

from __future__ import annotations

import importlib

SPARK_EXTRA = "kafkalog[spark]"
INSTALL_HINT = f"pip install '{SPARK_EXTRA}'"


class PySparkMissingError(ModuleNotFoundError):
    """pyspark is not installed (or not importable); Spark support needs the ``kafkalog[spark]`` extra.

    A ``ModuleNotFoundError``, so code that already handles a missing module (``except ImportError``) still works.
    """


def missing_pyspark_message(reason: str) -> str:
    """The message: what is missing, why, and the command that installs it."""
    return (
        f"kafkalog's Spark support (the kafkalog data source, sink and 'kafkalog spark' jobs) needs pyspark, "
        f"which is not installed ({reason}). Install the Spark extra: {INSTALL_HINT}"
    )


def require_pyspark() -> None:
    """Return if pyspark imports; raise ``PySparkMissingError`` naming the extra if pyspark itself is missing.

    A missing module other than pyspark (one of pyspark's own dependencies, or one of ours) is re-raised as is.
    """
    try:
        importlib.import_module("pyspark")
        importlib.import_module("pyspark.sql")
    except ModuleNotFoundError as e:
        missing = (e.name or "").split(".")[0]
        if missing not in ("pyspark", "py4j"):
            raise
        raise PySparkMissingError(missing_pyspark_message(str(e)), name=e.name) from e
