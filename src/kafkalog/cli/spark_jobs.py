"""``kafkalog spark export|ingest|report``: the pipeline jobs on a local Spark session."""

from __future__ import annotations

import contextlib
import datetime as dt
import re
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from . import common

log_dirs_option = common.log_dirs_option("A log dir (repeat for several).")
master_option = click.option("--master", default="local[*]", show_default=True, help="Spark master URL.")


def _session(master: str):
    from ..spark import local_session

    return local_session("kafkalog-spark-job", master=master)


def _console() -> Console:
    return Console(width=160) if not Console().is_terminal else Console()


_PYTHON_ERROR = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception)): (.+)$")


def spark_error_line(error: BaseException) -> str:
    """One line saying what went wrong in a Spark job, from the exception Spark raised.

    An error raised in a Python worker reaches the driver wrapped in the JVM's exception, whose message carries
    the worker's Python traceback: its last ``SomeError: message`` line is the cause. Spark's own errors
    (``AnalysisException`` and the other PySparkExceptions) carry ``[ERROR_CLASS] message`` on their first line."""
    text = str(error)
    java = getattr(error, "java_exception", None)
    if java is not None:
        with contextlib.suppress(Exception):
            text = str(java.toString())
    causes = [m for line in text.splitlines() if (m := _PYTHON_ERROR.match(line.strip()))]
    if causes:
        name, message = causes[-1].group(1), causes[-1].group(2)
        return f"{name.rsplit('.', 1)[-1]}: {message}"
    first = next((line.strip() for line in text.splitlines() if line.strip()), type(error).__name__)
    return first if len(first) <= 400 else first[:397] + "..."


class SparkGroup(click.Group):
    """The ``spark`` commands' group: an exception out of Spark (a worker's error wrapped in the JVM's, an
    AnalysisException) becomes one ``Error:`` line and exit status 1; ``kafkalog --debug`` shows the traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort, KeyboardInterrupt, SystemExit):
            raise
        except Exception as e:
            root = ctx.find_root()
            if root.obj and root.obj.get("debug"):
                raise
            raise click.ClickException(spark_error_line(e)) from None


def _require_log_dirs(log_dirs: tuple[Path, ...]) -> None:
    """Each --log-dir must be a log dir: checked on the files before Spark starts (a wrong path is one line)."""
    from ..partition.readonly import log_dir_problem

    for directory in log_dirs:
        if (problem := log_dir_problem(directory)) is not None:
            raise click.ClickException(problem)


def _require_topic(log_dirs: tuple[Path, ...], topic: str) -> None:
    """The topic must exist before a job writes into it (the sink does not create topics): checked on the files,
    before Spark starts, with the command that creates it."""
    from ..partition.readonly import ReadOnlyLogDir

    _require_log_dirs(log_dirs)
    if topic not in ReadOnlyLogDir(list(log_dirs)).topics():
        dirs = " ".join(f"--log-dir {d}" for d in log_dirs)
        raise click.ClickException(
            f"Topic '{topic}' does not exist in {', '.join(str(d) for d in log_dirs)}; create it first: "
            f"kafkalog topics {dirs} --create --topic {topic} [--partitions N]"
        )


@click.group("spark", cls=SparkGroup)
def spark_command() -> None:
    """Pipeline jobs on Apache Spark (local mode by default; needs the kafkalog[spark] extra)."""
    from ..spark._require import PySparkMissingError, require_pyspark

    try:
        require_pyspark()
    except PySparkMissingError as e:
        raise click.ClickException(str(e)) from e


@spark_command.command("export")
@log_dirs_option
@click.option("--topic", required=True)
@click.option("--output", required=True, type=click.Path(file_okay=False, path_type=Path))
@click.option("--format", "fmt", default="parquet", show_default=True, help="Any Spark file format.")
@master_option
def export_command(log_dirs: tuple[Path, ...], topic: str, output: Path, fmt: str, master: str) -> None:
    """Append the records of TOPIC not exported yet to OUTPUT (incremental by offsets)."""
    from ..spark.jobs import export

    _require_log_dirs(log_dirs)
    spark = _session(master)
    result = export(spark, [str(d) for d in log_dirs], topic, str(output), fmt=fmt, progress=True)
    if result.up_to_date:
        click.echo(f"{topic}: nothing new to export ({output} is up to date).")
        return
    ranges = ", ".join(f"{p}: [{a}, {b})" for p, (a, b) in sorted(result.ranges.items()))
    click.echo(f"{topic}: exported {result.rows:,} records to {result.run_dir} (offsets {ranges}).")


@spark_command.command("ingest")
@click.argument("source")
@log_dirs_option
@click.option("--topic", required=True)
@click.option("--format", "fmt", default="json", show_default=True, help="json, csv, parquet or any Spark format.")
@click.option("--key-column", help="The column to key records by (else null keys).")
@click.option("--value-column", help="The column to use as the value (else the whole row as JSON).")
@click.option("--option", "options", multiple=True, help="A reader option k=v (e.g. header=true for CSV).")
@click.option("--compression-type", default="none", show_default=True)
@master_option
def ingest_command(
    source: str,
    log_dirs: tuple[Path, ...],
    topic: str,
    fmt: str,
    key_column: str | None,
    value_column: str | None,
    options: tuple[str, ...],
    compression_type: str,
    master: str,
) -> None:
    """Write the rows of SOURCE files to TOPIC."""
    from ..spark.jobs import ingest
    from .common import parse_key_values

    read_options = parse_key_values(options, "--option")
    _require_topic(log_dirs, topic)
    spark = _session(master)
    rows = ingest(
        spark,
        source,
        [str(d) for d in log_dirs],
        topic,
        fmt=fmt,
        key_column=key_column,
        value_column=value_column,
        read_options=read_options,
        write_options={"compression.type": compression_type},
    )
    click.echo(f"Wrote {rows:,} records to {topic}.")


def _when(ms: int | None) -> str:
    if ms is None:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


@spark_command.command("report")
@log_dirs_option
@click.option("--output", type=click.Path(file_okay=False, path_type=Path), help="Also write segment rows as Parquet.")
@master_option
def report_command(log_dirs: tuple[Path, ...], output: Path | None, master: str) -> None:
    """Segment and retention analytics over LOG_DIRs: sizes, records, time ranges, what retention deletes next,
    compaction dirty ratios."""
    from ..spark.jobs import report

    _require_log_dirs(log_dirs)
    spark = _session(master)
    _, partitions = report(spark, [str(d) for d in log_dirs], output=str(output) if output else None)
    table = Table(title=f"{len(partitions)} partitions in {', '.join(str(d) for d in log_dirs)}")
    columns = ("partition", "policy", "segments", "bytes", "records", "first timestamp", "last timestamp",
               "retention deletes", "dirty ratio")  # fmt: skip
    for column in columns:
        table.add_column(column, justify="left" if column in ("partition", "policy") else "right")
    for p in partitions:
        table.add_row(
            f"{p.topic}-{p.partition}",
            p.cleanup_policy,
            f"{p.segments:,}",
            f"{p.bytes:,}",
            f"{p.records:,}",
            _when(p.min_timestamp),
            _when(p.max_timestamp),
            f"{p.retention_deletes_segments} ({p.retention_deletes_bytes:,} B)",
            "-" if p.dirty_ratio is None else f"{p.dirty_ratio:.2f}",
        )
    _console().print(table)
    if output:
        click.echo(f"Wrote the segment rows to {output}", err=True)
