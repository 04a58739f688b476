"""``kafkalog produce`` / ``kafkalog consume``: the console producer and consumer, on log dirs (--log-dir) or on
a running broker (--bootstrap-server, cli/online.py).

Lines (or JSON lines) in and out, with kafka-console-producer/consumer's options: a key separator,
headers, a codec, --from-beginning, --offset, --timestamp, --max-messages, the isolation level.
"""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path

import click

from ..manager import TopicPartition
from ..record import CODEC_NAMES, build_batch, default_partition
from ..storage.config import load_properties
from .common import (
    broker_config_option,
    log_dir_or_broker_options,
    online_or_offline,
    open_manager,
    open_readonly,
    parse_key_values,
)

BATCH_RECORDS = 500  # records per batch appended to one partition


ACKS_CHOICES = {"0": 0, "1": 1, "-1": -1, "all": -1}


@click.command("produce")
@log_dir_or_broker_options
@broker_config_option
@click.option("--topic", required=True)
@click.option("--partition", type=int, help="Write every record to this partition (else by key, else round robin).")
@click.option("--key-separator", help="Each line is <key><separator><value> (parse.key=true in Kafka's producer).")
@click.option("--header", "headers", multiple=True, help="A header k=v added to every record (repeatable).")
@click.option("--compression-codec", type=click.Choice(CODEC_NAMES), default="none", show_default=True)
@click.option(
    "--request-required-acks",
    "acks",
    type=click.Choice(list(ACKS_CHOICES)),
    default="-1",
    show_default=True,
    help="The producer's acks, as kafka-console-producer's: -1/all waits for every in-sync replica and fails "
    "(NotEnoughReplicasError) when the topic's min.insync.replicas exceeds them; 1 the leader; 0 none.",
)
@click.option(
    "--json",
    "json_lines",
    is_flag=True,
    help='Each line is a JSON object: {"value": ..., "key": ..., "headers": {...}, "partition": n, "timestamp": ms}.',
)
@click.argument("input_file", type=click.File("rb"), default="-")
def produce_command(
    log_dirs: tuple[Path, ...],
    bootstrap_server: str | None,
    command_config: Path | None,
    config_file: Path | None,
    topic: str,
    partition: int | None,
    key_separator: str | None,
    headers: tuple[str, ...],
    compression_codec: str,
    acks: str,
    json_lines: bool,
    input_file,
) -> None:
    """Append lines from INPUT_FILE (default stdin) to a topic, one record per line.

    Records go through the log manager's replica manager, in batches of up to 500 per partition. If anything
    fails part-way (a bad line, a refused append), every line before a bad line is still produced, as
    kafka-console-producer sends each line as it reads it; the summary says how many records were written
    and lists the lines that were not, and the command exits non-zero.

    With --bootstrap-server the records go to a running broker through kafka-python's producer, as they are
    read; the summary counts what the broker acknowledged and lists the lines it did not.
    """
    online = online_or_offline(log_dirs, bootstrap_server, command_config)
    fixed_headers = [(k, v.encode()) for k, v in parse_key_values(headers, "--header").items()]
    if online:
        if config_file is not None:
            raise click.UsageError("--config (a broker's server.properties) applies to --log-dir only")
        from .online import produce_online

        assert bootstrap_server is not None
        produce_online(
            bootstrap_server,
            command_config,
            topic,
            partition,
            compression_codec,
            ACKS_CHOICES[acks],
            input_file,
            lambda line, number: _parse_line(line, number, key_separator, json_lines, fixed_headers),
        )
        return
    manager = open_manager(log_dirs, config_file)
    producer = _Producer(manager, topic, compression_codec, ACKS_CHOICES[acks])
    number = 0
    try:
        count = len(manager.describe_topic(topic).partitions)
        turn = 0
        bad_line = None
        try:
            for number, raw in enumerate(input_file, start=1):
                bad_line = number
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
                bad_line = None
                record["line"] = number
                producer.add(target, record)
        except Exception:
            if bad_line is not None:  # a bad line: the lines before it are produced, as the console producer
                producer.flush_all(stop_at_error=True)
            producer.report_failure(number, bad_line)
            raise
        try:
            producer.flush_all()
        except Exception:
            producer.report_failure(number, bad_line=None)
            raise
        click.echo(f"Produced {producer.produced} records to {topic}.", err=True)
    finally:
        manager.shutdown()


class _Producer:
    """Batches records per partition and appends them through the replica manager, remembering which input lines
    went in, so that a failure can say exactly what was and was not produced."""

    def __init__(self, manager, topic: str, codec: str, acks: int) -> None:
        self.manager = manager
        self.topic = topic
        self.codec = codec
        self.acks = acks
        self.pending: dict[int, list[dict]] = {}
        self.produced = 0
        self.failed_lines: list[int] = []  # lines of a batch whose append failed
        self.where: dict[int, list[int]] = {}  # partition -> [first offset, last offset] written

    def add(self, partition: int, record: dict) -> None:
        rows = self.pending.setdefault(partition, [])
        rows.append(record)
        if len(rows) >= BATCH_RECORDS:
            self.flush(partition)

    def flush_all(self, stop_at_error: bool = False) -> None:
        for partition in list(self.pending):
            if stop_at_error:
                try:
                    self.flush(partition)
                except Exception:
                    return  # the first error is the one reported; the rest stays pending (not produced)
            else:
                self.flush(partition)

    def flush(self, partition: int) -> None:
        rows = self.pending.get(partition)
        if not rows:
            return
        self.pending[partition] = []
        now = self.manager.clock.milliseconds()
        try:
            batch = build_batch(
                [r["key"] for r in rows],
                [r["value"] for r in rows],
                [r["timestamp"] if r["timestamp"] is not None else now for r in rows],
                [r["headers"] for r in rows],
                compression=self.codec,
            )
            tp = TopicPartition(self.topic, partition)
            result = self.manager.replica_manager.append_records({tp: batch}, self.acks)[tp]
        except Exception:
            self.failed_lines.extend(r["line"] for r in rows)
            raise
        if result.error is not None:
            self.failed_lines.extend(r["line"] for r in rows)
            raise result.error
        self.produced += len(rows)
        span = self.where.setdefault(partition, [result.info.first_offset, result.info.last_offset])
        span[1] = result.info.last_offset

    def report_failure(self, lines_read: int, bad_line: int | None) -> None:
        """On stderr: the records written (and where), the input lines not written, and what was not read."""
        not_written = set(self.failed_lines)
        for rows in self.pending.values():
            not_written.update(r["line"] for r in rows)
        if bad_line is not None and bad_line > 0:
            not_written.add(bad_line)
        where = ", ".join(f"partition {p} offsets {a}-{b}" for p, (a, b) in sorted(self.where.items()))
        click.echo(
            f"Produced {self.produced} records to {self.topic} before the error" + (f" ({where})" if where else ""),
            err=True,
        )
        if not_written:
            lines = _ranges(sorted(not_written))
            noun = "line" if len(not_written) == 1 else "lines"
            click.echo(f"Not produced: {len(not_written)} of the {lines_read} lines read: {noun} {lines}", err=True)
        click.echo(f"Input after line {lines_read} was not read.", err=True)


def _ranges(numbers: list[int]) -> str:
    """1,2,3,7,9,10 -> '1-3, 7, 9-10'."""
    out = []
    start = prev = numbers[0]
    for n in numbers[1:]:
        if n != prev + 1:
            out.append(f"{start}-{prev}" if prev != start else f"{start}")
            start = n
        prev = n
    out.append(f"{start}-{prev}" if prev != start else f"{start}")
    return ", ".join(out)


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


@click.command("consume")
@log_dir_or_broker_options
@broker_config_option
@click.option("--topic", required=True)
@click.option("--partition", type=int, help="Read one partition (else every partition, one after another).")
@click.option(
    "--group",
    help="With --bootstrap-server: consume as a member of this consumer group, committing offsets (else the "
    "partitions are assigned, without a group).",
)
@click.option(
    "--timeout-ms",
    type=click.IntRange(min=0),
    help="With --bootstrap-server: exit once no record arrived for this long (else it follows the topic until "
    "--max-messages or Ctrl-C). Offline reading stops at the end anyway.",
)
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
    bootstrap_server: str | None,
    command_config: Path | None,
    config_file: Path | None,
    topic: str,
    partition: int | None,
    group: str | None,
    timeout_ms: int | None,
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
    single-replica leader's; when the replication-offset-checkpoint lags it, stderr says so.

    With --bootstrap-server the records come from a running broker (kafka-python's consumer), in the same
    format; see --group and --timeout-ms."""
    online = online_or_offline(log_dirs, bootstrap_server, command_config)
    if offset is not None and partition is None:
        raise click.UsageError("--offset needs --partition, as in kafka-console-consumer")
    if sum(x is not None and x is not False for x in (from_beginning or None, offset, timestamp)) > 1:
        raise click.UsageError("use only one of --from-beginning, --offset and --timestamp")
    if online:
        if config_file is not None:
            raise click.UsageError("--config (a broker's server.properties) applies to --log-dir only")
        if group is not None and (partition is not None or offset is not None or timestamp is not None):
            raise click.UsageError("--group cannot be used with --partition, --offset or --timestamp")
        from .online import consume_online

        assert bootstrap_server is not None
        consume_online(
            bootstrap_server,
            command_config,
            topic,
            partition,
            group,
            from_beginning,
            offset,
            timestamp,
            max_messages,
            timeout_ms,
            isolation_level,
            lambda part, record: _format(topic, part, record, print_key, key_separator, json_lines),
        )
        return
    if group is not None:
        raise click.UsageError("--group applies to --bootstrap-server only (a log dir has no consumer groups)")
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
