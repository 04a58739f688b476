"""``kafkalog produce`` / ``kafkalog consume``: the console producer and consumer, on log dirs.

Lines (or JSON lines) in and out, with kafka-console-producer/consumer's options: a key separator,
headers, a codec, --from-beginning, --offset, --timestamp, --max-messages, the isolation level.
"""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path

import click

from ..record import CODEC_NAMES, build_batch, default_partition
from ..storage.config import load_properties
from .common import broker_config_option, log_dir_option, open_manager, open_readonly, parse_key_values

BATCH_RECORDS = 500  # records per batch appended to one partition


@click.command("produce")
@log_dir_option
@broker_config_option
@click.option("--topic", required=True)
@click.option("--partition", type=int, help="Write every record to this partition (else by key, else round robin).")
@click.option("--key-separator", help="Each line is <key><separator><value> (parse.key=true in Kafka's producer).")
@click.option("--header", "headers", multiple=True, help="A header k=v added to every record (repeatable).")
@click.option("--compression-codec", type=click.Choice(CODEC_NAMES), default="none", show_default=True)
@click.option(
    "--json",
    "json_lines",
    is_flag=True,
    help='Each line is a JSON object: {"value": ..., "key": ..., "headers": {...}, "partition": n, "timestamp": ms}.',
)
@click.argument("input_file", type=click.File("rb"), default="-")
def produce_command(
    log_dirs: tuple[Path, ...],
    config_file: Path | None,
    topic: str,
    partition: int | None,
    key_separator: str | None,
    headers: tuple[str, ...],
    compression_codec: str,
    json_lines: bool,
    input_file,
) -> None:
    """Append lines from INPUT_FILE (default stdin) to a topic, one record per line."""
    fixed_headers = [(k, v.encode()) for k, v in parse_key_values(headers, "--header").items()]
    manager = open_manager(log_dirs, config_file)
    try:
        count = len(manager.describe_topic(topic).partitions)
        pending: dict[int, list] = {}
        produced = 0
        turn = 0
        for number, raw in enumerate(input_file, start=1):
            line = raw.rstrip(b"\r\n")
            record = _parse_line(line, number, key_separator, json_lines, fixed_headers)
            target = record.pop("partition")
            if target is None:
                target = partition
            if target is None:
                if record["key"] is not None:
                    target = default_partition(record["key"], count)
                else:
                    target, turn = turn % count, turn + 1
            if not 0 <= target < count:
                raise click.BadParameter(f"line {number}: partition {target} does not exist ({count} partitions)")
            rows = pending.setdefault(target, [])
            rows.append(record)
            if len(rows) >= BATCH_RECORDS:
                produced += _flush(manager, topic, target, rows, compression_codec)
        for target, rows in pending.items():
            produced += _flush(manager, topic, target, rows, compression_codec)
        click.echo(f"Produced {produced} records to {topic}.", err=True)
    finally:
        manager.shutdown()


def _parse_line(line: bytes, number: int, key_separator: str | None, json_lines: bool, fixed_headers) -> dict:
    if json_lines:
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise click.BadParameter(f"line {number} is not JSON: {e}") from None
        if not isinstance(obj, dict) or "value" not in obj:
            raise click.BadParameter(f"line {number}: expected an object with a 'value'")
        headers = list(fixed_headers) + [(k, _bytes(v)) for k, v in (obj.get("headers") or {}).items()]
        return {
            "key": _bytes(obj.get("key")),
            "value": _bytes(obj["value"]),
            "headers": headers,
            "timestamp": obj.get("timestamp"),
            "partition": obj.get("partition"),
        }
    key = None
    if key_separator is not None:
        sep = key_separator.encode()
        if sep not in line:
            raise click.BadParameter(f"line {number}: no key separator {key_separator!r} in the line")
        key, line = line.split(sep, 1)
    return {"key": key, "value": line, "headers": list(fixed_headers), "timestamp": None, "partition": None}


def _bytes(value) -> bytes | None:
    if value is None:
        return None
    return value.encode() if isinstance(value, str) else json.dumps(value).encode()


def _flush(manager, topic: str, partition: int, rows: list, codec: str) -> int:
    if not rows:
        return 0
    now = manager.clock.milliseconds()
    batch = build_batch(
        [r["key"] for r in rows],
        [r["value"] for r in rows],
        [r["timestamp"] if r["timestamp"] is not None else now for r in rows],
        [r["headers"] for r in rows],
        compression=codec,
    )
    manager.get_log(topic, partition).append(batch)
    produced = len(rows)
    rows.clear()
    return produced


@click.command("consume")
@log_dir_option
@broker_config_option
@click.option("--topic", required=True)
@click.option("--partition", type=int, help="Read one partition (else every partition, one after another).")
@click.option("--from-beginning", is_flag=True, help="Start at the log start offset (Kafka's default is the end).")
@click.option("--offset", type=int, help="Start at this offset (needs --partition).")
@click.option("--timestamp", type=int, help="Start at the first record with a timestamp >= this (ms).")
@click.option("--max-messages", type=click.IntRange(min=0), help="Stop after this many records.")
@click.option("--print-key", is_flag=True, help="Print <key><separator><value>.")
@click.option("--key-separator", default="\t", show_default=True)
@click.option(
    "--isolation-level",
    type=click.Choice(["read_uncommitted", "read_committed"]),
    default="read_uncommitted",
    show_default=True,
)
@click.option("--json", "json_lines", is_flag=True, help="One JSON object per record.")
def consume_command(
    log_dirs: tuple[Path, ...],
    config_file: Path | None,
    topic: str,
    partition: int | None,
    from_beginning: bool,
    offset: int | None,
    timestamp: int | None,
    max_messages: int | None,
    print_key: bool,
    key_separator: str,
    isolation_level: str,
    json_lines: bool,
) -> None:
    """Print a topic's records, one per line, as kafka-console-consumer does.

    The log dirs are opened read-only: no lock is taken and nothing is written, so this works on a copy of a
    live broker's dir and on a read-only file system. The high watermark is the log end offset, as a
    single-replica leader's; when the replication-offset-checkpoint lags it, stderr says so."""
    if offset is not None and partition is None:
        raise click.UsageError("--offset needs --partition, as in kafka-console-consumer")
    if sum(x is not None and x is not False for x in (from_beginning or None, offset, timestamp)) > 1:
        raise click.UsageError("use only one of --from-beginning, --offset and --timestamp")
    if config_file is not None:
        load_properties(config_file)  # checked; reading needs none of its settings
    view = open_readonly(log_dirs)
    parts = [view.partition(topic, partition)] if partition is not None else view.partitions_of(topic)
    printed = 0
    try:
        out = sys.stdout.buffer
        for part in parts:
            if part.high_watermark_note is not None and part.checkpointed_high_watermark is not None:
                click.echo(
                    f"Note: {part.name}: high watermark {part.high_watermark} {part.high_watermark_note}", err=True
                )
            start = _start_offset(part, from_beginning, offset, timestamp, isolation_level)
            for record in part.records(start, isolation_level):
                if max_messages is not None and printed >= max_messages:
                    return
                out.write(_format(topic, part.partition, record, print_key, key_separator, json_lines))
                printed += 1
        out.flush()
    finally:
        click.echo(f"Processed a total of {printed} messages", err=True)


def _start_offset(part, from_beginning: bool, offset: int | None, timestamp: int | None, isolation: str) -> int:
    if from_beginning:
        return part.log_start_offset
    if offset is not None:
        return offset
    if timestamp is not None:
        found = part.offset_for_timestamp(timestamp)
        return found if found is not None else part.bound(isolation)
    return part.bound(isolation)


def _format(topic: str, partition: int, record, print_key: bool, key_separator: str, json_lines: bool) -> bytes:
    if json_lines:
        obj = {
            "topic": topic,
            "partition": partition,
            "offset": record.offset,
            "timestamp": record.timestamp,
            **_text_or_base64("key", record.key),
            **_text_or_base64("value", record.value),
            "headers": [{"key": k, **_text_or_base64("value", v)} for k, v in record.headers],
        }
        return json.dumps(obj).encode() + b"\n"
    value = record.value if record.value is not None else b"null"
    if print_key:
        key = record.key if record.key is not None else b"null"
        return key + key_separator.encode() + value + b"\n"
    return value + b"\n"


def _text_or_base64(name: str, data: bytes | None) -> dict:
    """A field as UTF-8 text when it is, else base64 under ``<name>_base64``."""
    if data is None:
        return {name: None}
    try:
        return {name: data.decode("utf-8")}
    except UnicodeDecodeError:
        return {f"{name}_base64": base64.b64encode(data).decode("ascii")}
