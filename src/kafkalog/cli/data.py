"""``kafkalog produce`` / ``kafkalog consume``: the console producer and consumer, on log dirs (--log-dir) or on
a running broker (--bootstrap-server, cli/online.py).

Lines (or JSON lines) in and out, with kafka-console-producer/consumer's options: a key separator,
headers, a codec, --from-beginning, --offset, --timestamp, --max-messages, the isolation level.
"""

from __future__ import annotations

import base64
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from ..manager import TopicPartition
from ..record import CODEC_NAMES, build_batch
from ..storage.properties import load_properties
from .common import Location, location_options, open_manager, open_readonly, parse_key_values
from .console import (
    ConsumeRequest,
    LineReader,
    MessageFormatter,
    Printed,
    Sink,
    parse_properties,
    ranges,
    records_noun,
    run_producer,
)

ACKS_CHOICES = {"0": 0, "1": 1, "-1": -1, "all": -1}
# kafka-console-producer's defaults (tools/src/main/java/org/apache/kafka/tools/ConsoleProducer.java):
# --timeout (linger.ms) 1000 ms, --batch-size (batch.size) 16384 bytes.
DEFAULT_LINGER_MS = 1000
DEFAULT_BATCH_SIZE = 16 * 1024
BATCH_OVERHEAD = 61  # a v2 batch's header
RECORD_OVERHEAD = 36  # a record's varints at their widest: length, attributes, deltas, key/value lengths, count
HEADER_OVERHEAD = 10
# --producer-property keys that mean something to a log dir; the others configure a network client
OFFLINE_PRODUCER_PROPERTIES = {"linger.ms", "batch.size", "acks", "compression.type"}


def console_producer_options(command):
    """kafka-console-producer's options that produce takes offline and online."""
    options = [
        click.option(
            "--property",
            "properties",
            multiple=True,
            metavar="KEY=VALUE",
            help="Kafka's line reader properties: parse.key, key.separator, parse.headers, headers.delimiter, "
            "headers.separator, headers.key.separator, ignore.error, null.marker.",
        ),
        click.option(
            "--producer-property",
            "producer_properties",
            multiple=True,
            metavar="KEY=VALUE",
            help="Producer configs (linger.ms, batch.size, acks, compression.type; online any kafka-python knows).",
        ),
        click.option(
            "--producer.config",
            "producer_config_file",
            type=click.Path(exists=True, dir_okay=False, path_type=Path),
            help="A properties file of producer configs (--producer-property wins).",
        ),
        click.option("--sync", is_flag=True, help="Write each line by itself as it arrives (one request each)."),
        click.option(
            "--batch-size",
            type=click.IntRange(min=1),
            help=f"batch.size in bytes per partition (default {DEFAULT_BATCH_SIZE}, as Kafka's).",
        ),
        click.option(
            "--timeout",
            "--linger-ms",
            "linger_ms",
            type=click.IntRange(min=0),
            help=f"linger.ms: how long a line waits for more to fill its batch (default {DEFAULT_LINGER_MS}, as "
            "kafka-console-producer's --timeout).",
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command


@dataclass
class ProducerSettings:
    """The producer's settings after Kafka's precedence: an explicit option, then --producer-property, then the
    console producer's default."""

    acks: int
    codec: str
    linger_ms: int
    batch_size: int
    sync: bool
    extra: dict[str, str]  # the other --producer-property values


def producer_settings(
    producer_config_file: Path | None,
    producer_properties: tuple[str, ...],
    acks: str | None,
    codec: str | None,
    linger_ms: int | None,
    batch_size: int | None,
    sync: bool,
) -> ProducerSettings:
    props = {k: str(v) for k, v in load_properties(producer_config_file).items()} if producer_config_file else {}
    props.update(parse_key_values(producer_properties, "--producer-property"))

    def number(key: str) -> int | None:
        if key not in props:
            return None
        try:
            return int(props.pop(key))
        except ValueError:
            raise click.BadParameter(f"{key} must be a number", param_hint="--producer-property") from None

    acks_text = acks if acks is not None else props.pop("acks", "-1")
    if acks_text not in ACKS_CHOICES:
        raise click.BadParameter(f"acks must be one of {', '.join(ACKS_CHOICES)}", param_hint="--producer-property")
    codec_text = codec if codec is not None else props.pop("compression.type", "none")
    if codec_text not in CODEC_NAMES:
        raise click.BadParameter(f"compression.type must be one of {', '.join(CODEC_NAMES)}")
    props.pop("acks", None)
    props.pop("compression.type", None)
    from_props_linger, from_props_batch = number("linger.ms"), number("batch.size")
    return ProducerSettings(
        acks=ACKS_CHOICES[acks_text],
        codec=codec_text,
        linger_ms=linger_ms if linger_ms is not None else (from_props_linger or DEFAULT_LINGER_MS),
        batch_size=batch_size if batch_size is not None else (from_props_batch or DEFAULT_BATCH_SIZE),
        sync=sync,
        extra=props,
    )


@click.command("produce")
@location_options
@click.option("--topic", required=True)
@click.option("--partition", type=int, help="Write every record to this partition (else by key, else round robin).")
@click.option("--key-separator", help="Each line is <key><separator><value> (parse.key=true in Kafka's producer).")
@click.option("--header", "headers", multiple=True, help="A header k=v added to every record (repeatable).")
@click.option(
    "--compression-codec",
    type=click.Choice(CODEC_NAMES),
    is_flag=False,
    flag_value="gzip",
    default=None,
    help="none, gzip, snappy, lz4 or zstd; given without a value gzip, as Kafka's [default: none]",
)
@click.option(
    "--request-required-acks",
    "acks",
    type=click.Choice(list(ACKS_CHOICES)),
    default=None,
    help="The producer's acks, as kafka-console-producer's (default -1): -1/all waits for every in-sync replica "
    "and fails (NotEnoughReplicasError) when the topic's min.insync.replicas exceeds them; 1 the leader; 0 none.",
)
@console_producer_options
@click.option(
    "--json",
    "json_lines",
    is_flag=True,
    help='Each line is a JSON object: {"value": ..., "key": ..., "headers": {...}, "partition": n, "timestamp": ms}.',
)
@click.argument("input_file", type=click.File("rb"), default="-")
def produce_command(
    location: Location,
    topic: str,
    partition: int | None,
    key_separator: str | None,
    headers: tuple[str, ...],
    compression_codec: str | None,
    acks: str | None,
    properties: tuple[str, ...],
    producer_properties: tuple[str, ...],
    producer_config_file: Path | None,
    sync: bool,
    batch_size: int | None,
    linger_ms: int | None,
    json_lines: bool,
    input_file,
) -> None:
    """Append lines from INPUT_FILE (default stdin) to a topic, one record per line, as kafka-console-producer.

    Lines are sent as they arrive: a partition's records go out when they fill --batch-size bytes or when the first
    of them has waited --timeout/--linger-ms (1000 ms), so `tail -f app.log | kafkalog produce ...` works. Offline
    the log dir is locked only while records are written: it is let go whenever the input is idle. A batch never
    exceeds the topic's max.message.bytes or segment.bytes (it is split).

    A bad line stops the reading (every line before it is produced), as Kafka's line reader, unless
    --property ignore.error=true. A refused record (too large, not enough replicas) is reported with its line number
    and the rest goes on, as Kafka's asynchronous producer; with --sync the first refusal stops. SIGINT and SIGTERM
    write every complete line read, then exit 130/143. The summary on stderr says how many records were written,
    where, and which input lines were not; the exit code is non-zero when any was not.
    """
    props = parse_properties(properties, "--property")
    if key_separator is not None:
        props.setdefault("parse.key", "true")
        props.setdefault("key.separator", key_separator)
    fixed_headers: list[tuple[str, bytes | None]] = [
        (k, v.encode()) for k, v in parse_key_values(headers, "--header").items()
    ]
    reader = LineReader.from_properties(props, fixed_headers)
    settings = producer_settings(
        producer_config_file, producer_properties, acks, compression_codec, linger_ms, batch_size, sync
    )

    def parse_json(line: bytes, number: int) -> dict:
        return _parse_json_line(line, number, fixed_headers)

    parse = parse_json if json_lines else reader.parse
    sink: Sink
    if location.online:
        from .online import BrokerSink

        sink = BrokerSink(location.bootstrap, location.command_config, topic, settings)
    else:
        for key in settings.extra:
            raise click.BadParameter(
                f"{key} configures a network producer; a log dir takes "
                + ", ".join(sorted(OFFLINE_PRODUCER_PROPERTIES)),
                param_hint="--producer-property",
            )
        sink = LogDirSink(location.log_dirs, location.config_file, topic, settings)
    run_producer(sink, input_file, parse, partition)


class LogDirSink:
    """The console producer's records into a log dir, through the log manager's replica manager (the partition
    layer and its acks rule), batched per partition as Kafka's producer batches them (batch.size, linger.ms).

    Invariants: the LogManager (and with it the dir lock) is open only from the first write of a burst until the
    input goes idle (:meth:`idle`), and reopened, reloading the logs, for the next write, so that no other process
    was writing in between; a batch is never larger than the topic's max.message.bytes and segment.bytes (split by
    an upper bound of the encoded size, and halved again if the encoded batch still exceeds it); every record
    handed over ends up counted in ``produced`` or ``failed``."""

    def __init__(
        self, log_dirs: tuple[Path, ...], config_file: Path | None, topic: str, settings: ProducerSettings
    ) -> None:
        self.log_dirs = log_dirs
        self.config_file = config_file
        self.topic = topic
        self.settings = settings
        self.manager: Any = None
        self.produced = 0
        self.failed: dict[int, str] = {}
        self.where: dict[int, list[int]] = {}
        self.stop: BaseException | None = None
        self.pending: dict[int, list[dict]] = {}
        self.pending_bytes: dict[int, int] = {}
        self.first_pending_at: float | None = None
        self._count = 0

    def _open(self) -> Any:
        if self.manager is None:
            self.manager = open_manager(self.log_dirs, self.config_file)
            self._count = len(self.manager.describe_topic(self.topic).partitions)
        return self.manager

    def partition_count(self) -> int:
        self._open()
        return self._count

    def _limit(self, partition: int) -> int:
        config = self._open().get_log(self.topic, partition).config
        return min(int(config.max_message_bytes), int(config.segment_bytes))

    def send(self, partition: int, record: dict) -> None:
        """Queue one record (stamped now when it has no timestamp, as Kafka's producer stamps at send()); its
        partition's batch goes out when the next record would pass batch.size, or at once with --sync."""
        if record["timestamp"] is None:
            record["timestamp"] = int(time.time() * 1000)
        # an upper bound of the encoded size (uncompressed)
        key, value, headers = record["key"], record["value"], record["headers"]
        size = RECORD_OVERHEAD + (len(key) if key else 0) + (len(value) if value else 0)
        if headers:
            size += sum(HEADER_OVERHEAD + len(name.encode()) + (len(data) if data else 0) for name, data in headers)
        record["size"] = size
        rows = self.pending.get(partition)
        if rows is None:
            rows = self.pending[partition] = []
            self.pending_bytes[partition] = BATCH_OVERHEAD
            if self.first_pending_at is None:
                self.first_pending_at = time.monotonic()
        elif self.pending_bytes[partition] + size > self.settings.batch_size:
            self._flush_partition(partition)
            self.send(partition, record)
            return
        rows.append(record)
        self.pending_bytes[partition] += size
        if self.settings.sync or self.pending_bytes[partition] >= self.settings.batch_size:
            self._flush_partition(partition)

    def deadline(self) -> float | None:
        if self.first_pending_at is None:
            return None
        return self.first_pending_at + self.settings.linger_ms / 1000

    def flush(self) -> None:
        for partition in list(self.pending):
            self._flush_partition(partition)

    def _flush_partition(self, partition: int) -> None:
        rows = self.pending.pop(partition, [])
        self.pending_bytes.pop(partition, None)
        if not self.pending:
            self.first_pending_at = None
        if not rows:
            return
        if self.stop is not None:
            self._fail(rows, "not written: the producer stopped at an earlier error")
            return
        try:
            limit = self._limit(partition)
            groups: list[list[dict]] = [[]]
            size = BATCH_OVERHEAD
            for row in rows:
                if groups[-1] and size + row["size"] > limit:
                    groups.append([])
                    size = BATCH_OVERHEAD
                groups[-1].append(row)
                size += row["size"]
            for group in groups:
                self._append(partition, group, limit)
        except Exception as e:  # not a refused record: the dir, the lock, the disk; nothing more can be written
            self._fail([r for r in rows if r["line"] not in self.failed and not r.get("written")], str(e))
            self.stop = e

    def _append(self, partition: int, rows: list[dict], limit: int) -> None:
        batch = build_batch(
            [r["key"] for r in rows],
            [r["value"] for r in rows],
            [r["timestamp"] for r in rows],
            [r["headers"] for r in rows],
            compression=self.settings.codec,
        )
        if len(batch) > limit and len(rows) > 1:  # compression made it bigger than the bound: halve
            half = len(rows) // 2
            self._append(partition, rows[:half], limit)
            self._append(partition, rows[half:], limit)
            return
        tp = TopicPartition(self.topic, partition)
        result = self.manager.replica_manager.append_records({tp: batch}, self.settings.acks)[tp]
        if result.error is not None:
            error = result.error
            reason = f"{type(error).__name__}: {error}"
            self._fail(rows, reason)
            lines = ranges([r["line"] for r in rows])
            click.echo(
                f"Error when sending {records_noun(len(rows))} ({'line' if len(rows) == 1 else 'lines'} {lines}) "
                f"to {tp}: {reason}",
                err=True,
            )
            if self.settings.sync:
                self.stop = error
            return
        for row in rows:
            row["written"] = True
        self.produced += len(rows)
        span = self.where.setdefault(partition, [result.info.first_offset, result.info.last_offset])
        span[1] = result.info.last_offset

    def _fail(self, rows: list[dict], reason: str) -> None:
        for row in rows:
            self.failed[row["line"]] = reason

    def idle(self) -> None:
        if self.manager is not None:
            manager, self.manager = self.manager, None
            manager.shutdown()

    def close(self) -> None:
        self.idle()


def _parse_json_line(line: bytes, number: int, fixed_headers) -> dict:
    """A --json line: {"value": ..., "key": ..., "headers": {...}, "partition": n, "timestamp": ms}."""
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as e:
        raise click.ClickException(f"line {number} is not JSON: {e}") from None
    if not isinstance(obj, dict) or "value" not in obj:
        raise click.ClickException(f"line {number}: expected an object with a 'value'")
    headers = list(fixed_headers) + [(k, _bytes(v)) for k, v in (obj.get("headers") or {}).items()]
    return {
        "key": _bytes(obj.get("key")),
        "value": _bytes(obj["value"]),
        "headers": headers,
        "timestamp": obj.get("timestamp"),
        "partition": obj.get("partition"),
    }


def _bytes(value) -> bytes | None:
    if value is None:
        return None
    return value.encode() if isinstance(value, str) else json.dumps(value).encode()


OFFLINE_CONSUMER_PROPERTIES = {"isolation.level", "auto.offset.reset", "client.id"}
FOLLOW_POLL_SECONDS = 0.2


@click.command("consume")
@location_options
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
    help="Exit once no record arrived for this long. Online it follows the topic until then (else until "
    "--max-messages or Ctrl-C); offline it makes the read follow the log dir for new records the same way.",
)
@click.option(
    "--follow",
    is_flag=True,
    help="Offline: keep reading records appended to the log dir until Ctrl-C/SIGTERM (or --timeout-ms), as the "
    "online consumer does; without it an offline read stops at the end. Online it is what the consumer does anyway.",
)
@click.option("--from-beginning", is_flag=True, help="Start at the log start offset (Kafka's default is the end).")
@click.option(
    "--offset",
    metavar="earliest|latest|N",
    help="Start at this offset, or earliest (the log start) or latest (the end); needs --partition, as Kafka's.",
)
@click.option("--timestamp", type=int, help="Start at the first record with a timestamp >= this (ms).")
@click.option("--max-messages", type=click.IntRange(min=0), help="Stop after this many records.")
@click.option(
    "--formatter",
    default="kafka.tools.DefaultMessageFormatter",
    show_default=True,
    help="Kafka's formatter class name: DefaultMessageFormatter, LoggingMessageFormatter, NoOpMessageFormatter "
    "(kafka.tools.* or org.apache.kafka.tools.consumer.*).",
)
@click.option(
    "--property",
    "--formatter-property",
    "properties",
    multiple=True,
    metavar="KEY=VALUE",
    help="The formatter's properties: print.timestamp, print.key, print.offset, print.partition, print.headers, "
    "print.value, key.separator, line.separator, headers.separator, null.literal.",
)
@click.option(
    "--formatter-config",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A properties file of formatter properties (--property wins).",
)
@click.option(
    "--consumer-property",
    "--command-property",
    "consumer_properties",
    multiple=True,
    metavar="KEY=VALUE",
    help="Consumer configs (online any kafka-python takes, e.g. group.id, auto.offset.reset, fetch.max.bytes; "
    "offline isolation.level and auto.offset.reset).",
)
@click.option(
    "--consumer.config",
    "consumer_config_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A properties file of consumer configs (--consumer-property wins).",
)
@click.option("--print-key", is_flag=True, help="Print <key><separator><value> (print.key=true).")
@click.option("--key-separator", default=None, help="key.separator [default: tab].")
@click.option(
    "--isolation-level",
    type=click.Choice(["read_uncommitted", "read_committed"]),
    default=None,
    help="[default: read_uncommitted]",
)
@click.option("--json", "json_lines", is_flag=True, help="One JSON object per record.")
def consume_command(
    location: Location,
    topic: str,
    partition: int | None,
    group: str | None,
    timeout_ms: int | None,
    follow: bool,
    from_beginning: bool,
    offset: str | None,
    timestamp: int | None,
    max_messages: int | None,
    formatter: str,
    properties: tuple[str, ...],
    formatter_config: Path | None,
    consumer_properties: tuple[str, ...],
    consumer_config_file: Path | None,
    print_key: bool,
    key_separator: str | None,
    isolation_level: str | None,
    json_lines: bool,
) -> None:
    """Print a topic's records, one per line, as kafka-console-consumer does (its DefaultMessageFormatter).

    The log dirs are opened read-only: no lock is taken and nothing is written, so this works on a copy of a
    live broker's dir and on a read-only file system. The high watermark is the log end offset, as a
    single-replica leader's; when the replication-offset-checkpoint lags it, stderr says so. An offline read stops
    at the end unless --follow or --timeout-ms ask it to wait for new records.

    With --bootstrap-server the records come from a running broker (kafka-python's consumer), in the same
    format; see --group and --timeout-ms. A reader that goes away (`| head -1`) ends it quietly; Ctrl-C and SIGTERM
    print the total and exit 130/143, as Kafka's."""
    start = _parse_offset(offset)
    if offset is not None and partition is None:
        raise click.UsageError("--offset needs --partition, as in kafka-console-consumer")
    if sum(x is not None and x is not False for x in (from_beginning or None, offset, timestamp)) > 1:
        raise click.UsageError("use only one of --from-beginning, --offset and --timestamp")
    fmt_props = _properties(formatter_config)
    fmt_props.update(parse_properties(properties, "--property"))
    if print_key:
        fmt_props.setdefault("print.key", "true")
    if key_separator is not None:
        fmt_props.setdefault("key.separator", key_separator)
    render = _renderer(topic, json_lines, MessageFormatter.create(formatter, fmt_props))
    consumer_props = _properties(consumer_config_file)
    consumer_props.update(parse_key_values(consumer_properties, "--consumer-property"))
    isolation = isolation_level or consumer_props.pop("isolation.level", "read_uncommitted")
    if isolation not in ("read_uncommitted", "read_committed"):
        raise click.BadParameter(f"isolation.level {isolation!r}: read_uncommitted or read_committed")
    reset = consumer_props.get("auto.offset.reset")
    if reset is not None and from_beginning and reset != "earliest":
        raise click.UsageError(f"Can't simultaneously specify --from-beginning and 'auto.offset.reset={reset}'")
    request = ConsumeRequest(
        topic, partition, from_beginning or reset == "earliest", start, timestamp, max_messages, timeout_ms,
        isolation, render, follow=follow, group=group,
    )  # fmt: skip
    if location.online:
        _consume_from_broker(location, request, consumer_props)
    else:
        _consume_from_log_dirs(location, request, consumer_props)


def _properties(config_file: Path | None) -> dict[str, str]:
    """A properties file's settings as text (none without a file), for the command line's to override."""
    return {k: str(v) for k, v in load_properties(config_file).items()} if config_file is not None else {}


def _renderer(topic: str, json_lines: bool, formatter: MessageFormatter) -> Callable[[int, Any, str | None], bytes]:
    """The bytes a record is printed as: a JSON line (--json), else the formatter's line (and, for Kafka's
    LoggingMessageFormatter, its description on stderr)."""

    def render(part: int, record: Any, timestamp_type: str | None) -> bytes:
        if json_lines:
            return _json_record(topic, part, record)
        if formatter.logging:
            click.echo(formatter.describe(topic, part, record, timestamp_type), err=True)
        return formatter.format(part, record, timestamp_type)

    return render


def _consume_from_broker(location: Location, request: ConsumeRequest, consumer_props: dict[str, str]) -> None:
    """The online checks of --group (with group.id, without --partition/--offset/--timestamp), then the read."""
    from dataclasses import replace

    from .online import consume_online

    group = _one_group(request.group, consumer_props)
    if group is not None and (
        request.partition is not None or request.offset is not None or request.timestamp is not None
    ):
        raise click.UsageError("--group cannot be used with --partition, --offset or --timestamp")
    consume_online(location.bootstrap, location.command_config, replace(request, group=group), consumer_props)


def _consume_from_log_dirs(location: Location, request: ConsumeRequest, consumer_props: dict[str, str]) -> None:
    """The offline checks (no group; only the consumer configs a log dir means something to), then the read."""
    if request.group is not None or "group.id" in consumer_props:
        raise click.UsageError("--group applies to --bootstrap-server only (a log dir has no consumer groups)")
    for key in consumer_props:
        if key not in OFFLINE_CONSUMER_PROPERTIES:
            raise click.BadParameter(
                f"{key} configures a network consumer; a log dir takes "
                + ", ".join(sorted(OFFLINE_CONSUMER_PROPERTIES)),
                param_hint="--consumer-property",
            )
    if location.config_file is not None:
        load_properties(location.config_file)  # checked; reading needs none of its settings
    _consume_offline(location.log_dirs, request)


def _parse_offset(offset: str | None) -> int | str | None:
    """--offset as Kafka's ConsoleConsumerOptions.parseOffset: earliest, latest or a non-negative number."""
    if offset is None:
        return None
    if offset.lower() in ("earliest", "latest"):
        return offset.lower()
    try:
        value = int(offset)
    except ValueError:
        value = -1
    if value < 0:
        raise click.BadParameter(
            f"The provided offset value '{offset}' is incorrect. Valid values are 'earliest', 'latest', or a "
            "non-negative long.",
            param_hint="--offset",
        )
    return value


def _one_group(group: str | None, consumer_props: dict[str, str]) -> str | None:
    """--group and group.id must agree, as Kafka's checkConsumerGroup."""
    other = consumer_props.pop("group.id", None)
    if group is not None and other is not None and other != group:
        raise click.UsageError(
            f"The group ids provided in different places (directly using '--group', via '--consumer-property') do "
            f"not match. Detected group ids: '{group}', '{other}'"
        )
    return group if group is not None else other


def _consume_offline(log_dirs: tuple[Path, ...], request: ConsumeRequest) -> None:
    """The records of the log dirs' partitions from the start asked for, partition after partition; in follow
    mode (--follow or --timeout-ms) the log dirs are looked at again every 200 ms (a fresh read-only view: new
    segments, a new end) and what was appended is printed, until --timeout-ms passes without a record or the
    command is stopped."""
    follow = request.follow or request.timeout_ms is not None
    parts = _partitions(open_readonly(log_dirs), request)
    positions: dict[int, int] = {}
    for part in parts:
        if part.high_watermark_note is not None and part.checkpointed_high_watermark is not None:
            click.echo(f"Note: {part.name}: high watermark {part.high_watermark} {part.high_watermark_note}", err=True)
        positions[part.partition] = _start_offset(part, request)
    printed = Printed()
    try:
        while True:
            for part in parts:
                _print_new_records(part, positions, request, printed)
                if request.done(printed.count):
                    return
            if not follow or request.timed_out(printed.last_record):
                return
            time.sleep(FOLLOW_POLL_SECONDS)
            known = {p.partition for p in parts}
            parts = _partitions(open_readonly(log_dirs), request)
            for part in parts:
                if part.partition not in known:  # a partition added meanwhile: from its start, as a consumer would
                    positions[part.partition] = part.log_start_offset
    except BrokenPipeError:
        click.echo("Unable to write to standard out, closing consumer.", err=True)
        raise
    finally:
        click.echo(f"Processed a total of {printed.count} messages", err=True)


def _partitions(view: Any, request: ConsumeRequest) -> list[Any]:
    """The read-only partitions the request reads: --partition, else every partition of the topic."""
    if request.partition is not None:
        return [view.partition(request.topic, request.partition)]
    return list(view.partitions_of(request.topic))


def _print_new_records(part: Any, positions: dict[int, int], request: ConsumeRequest, printed: Printed) -> None:
    """Writes the partition's records from its position up to its bound (the HW, or the LSO for read_committed),
    no more than --max-messages allows, and moves the position to the bound unless it stopped at --max-messages."""
    out = sys.stdout.buffer
    position, bound = positions[part.partition], part.bound(request.isolation)
    for batch in part.batches(position, request.isolation):
        if batch.is_control:
            continue
        for record in batch:
            if not position <= record.offset < bound:
                continue
            if request.done(printed.count):
                return
            printed.count += 1
            out.write(request.render(part.partition, record, batch.timestamp_type))
            printed.last_record = time.monotonic()
        out.flush()
    positions[part.partition] = max(position, bound)


def _start_offset(part: Any, request: ConsumeRequest) -> int:
    """Where a partition is read from: the log start, --offset, the first record at or after --timestamp (the
    bound when there is none), else the bound (the end a consumer sees)."""
    if request.from_beginning or request.offset == "earliest":
        return part.log_start_offset
    if isinstance(request.offset, int):
        return request.offset
    if request.timestamp is not None:
        found = part.offset_for_timestamp(request.timestamp)
        return found if found is not None else part.bound(request.isolation)
    return part.bound(request.isolation)


def _json_record(topic: str, partition: int, record) -> bytes:
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


def _text_or_base64(name: str, data: bytes | None) -> dict:
    """A field as UTF-8 text when it is, else base64 under ``<name>_base64``."""
    if data is None:
        return {name: None}
    try:
        return {name: data.decode("utf-8")}
    except UnicodeDecodeError:
        return {f"{name}_base64": base64.b64encode(data).decode("ascii")}
