"""The README's Python snippets run as written: each ```python block is executed in a fresh namespace, inside a
temporary directory, with its example paths (/data/...) moved under it and the broker address pointed at a
``kafkalog serve`` subprocess. A snippet that raises, or names something it did not import, fails here."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from brokertools import BrokerProcess

README = Path(__file__).resolve().parents[1] / "README.md"
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def python_blocks() -> list[str]:
    return _BLOCK.findall(README.read_text(encoding="utf-8"))


def _block(first_line: str) -> str:
    found = [b for b in python_blocks() if b.startswith(first_line)]
    assert len(found) == 1, f"no single README python block starts with {first_line!r}"
    return found[0]


def _run(code: str, tmp_path: Path, namespace: dict | None = None, **replacements: str) -> dict:
    """Execute ``code`` with its /data/ paths under ``tmp_path`` (and other text replaced), from ``tmp_path``, in
    ``namespace`` (a fresh one unless a snippet continues the one before it)."""
    code = code.replace("/data/", f"{tmp_path}/data/")
    for old, new in replacements.items():
        code = code.replace(old, new)
    (tmp_path / "data").mkdir(exist_ok=True)
    namespace = {"__name__": "__readme__"} if namespace is None else namespace
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        exec(compile(code, f"{README.name} snippet", "exec"), namespace)
    finally:
        os.chdir(cwd)
    return namespace


def test_every_python_block_is_covered_here() -> None:
    """A new snippet must be added to a test below (the broker's and Spark's have their own)."""
    starts = sorted(b.splitlines()[0] for b in python_blocks())
    assert starts == sorted(
        [
            "from confluent_kafka import Consumer, Producer, TopicPartition",
            "from kafkalog.record import RecordBatchBuilder, build_batch, default_partition, iter_batches, to_arrow",
            "from kafkalog.storage import Log",
            "from kafkalog import LogManager",
            'with LogManager("/data/kafka-logs") as manager:',
            "from kafkalog.spark import local_session      # sets spark.pyspark.python / PYSPARK_PYTHON to this "
            "interpreter",
        ]
    )


def test_record_snippet(tmp_path: Path) -> None:
    ns = _run(_block("from kafkalog.record import"), tmp_path)
    assert ns["table"].num_rows == 1 and ns["data"]  # the last build_batch's bytes


def test_storage_snippet(tmp_path: Path) -> None:
    ns = _run(_block("from kafkalog.storage import Log"), tmp_path)
    assert ns["log"].log_start_offset == 1  # delete_records moved it


def test_log_manager_and_cleaner_snippets(tmp_path: Path) -> None:
    ns = _run(_block("from kafkalog import LogManager"), tmp_path)
    # the cleaner's snippet continues the log manager's (its import of LogManager)
    ns = _run(_block('with LogManager("/data/kafka-logs") as manager:'), tmp_path, ns)
    assert ns["explanation"].summary


def test_broker_snippet_against_kafkalog_serve(tmp_path: Path) -> None:
    pytest.importorskip("confluent_kafka")
    broker = BrokerProcess(tmp_path / "broker").start()
    try:
        ns = _run(_block("from confluent_kafka import"), tmp_path, **{"127.0.0.1:9092": broker.bootstrap})
        ns["consumer"].close()
    finally:
        assert broker.stop() == 0


def test_spark_snippet(spark, tmp_path: Path) -> None:
    from kafkalog.manager import LogManager

    with LogManager([tmp_path / "data" / "kafka-logs"]) as manager:
        manager.create_topic("clicks", 2)
        for i in range(10):
            manager.produce("clicks", b"v%d" % i, key=b"k%d" % i)
    with LogManager([tmp_path / "data" / "out-logs"]) as manager:
        manager.create_topic("copy", 1)
    _run(_block("from kafkalog.spark import local_session"), tmp_path)
    with LogManager([tmp_path / "data" / "out-logs"]) as manager:
        assert len(list(manager.consume("copy"))) == 10
