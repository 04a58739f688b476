"""What ``kafkalog produce`` and ``consume`` share offline (``--log-dir``) and online (``--bootstrap-server``):
Kafka's console reader and formatter, the input that is read as it arrives, and the producer's main loop.

- :class:`LineReader` is Kafka's LineMessageReader (tools/src/main/java/org/apache/kafka/tools/LineMessageReader.java):
  the ``--property`` keys ``parse.key``, ``key.separator``, ``parse.headers``, ``headers.delimiter``,
  ``headers.separator`` (a regular expression, as Kafka's), ``headers.key.separator``, ``ignore.error``,
  ``null.marker``, with its defaults and its refusals of ambiguous separators.
- :class:`MessageFormatter` is Kafka's DefaultMessageFormatter
  (tools/src/main/java/org/apache/kafka/tools/consumer/DefaultMessageFormatter.java): ``print.timestamp``,
  ``print.partition``, ``print.offset``, ``print.headers``, ``print.key``, ``print.value``, ``key.separator``,
  ``line.separator``, ``headers.separator``, ``null.literal``.
- :class:`LineSource` hands over the lines of the input as they arrive (a pipe from ``tail -f``, a terminal), with
  a timeout, so that the producer's linger (``--timeout``/``--linger-ms``) can fire while nothing is typed.
- :func:`produce_lines` is the console producer's loop over a :class:`Sink` (the log dir's replica manager, or
  kafka-python's producer): a bad line stops the reading (as Kafka's, unless ``ignore.error``), a refused batch is
  reported line by line and the rest goes on (as Kafka's asynchronous mode; ``--sync`` stops), SIGINT and SIGTERM
  flush every complete line read, and the summary says what was and was not written.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import signal
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields
from typing import IO, Any, Protocol

import click

from .common import Interrupted


def parse_properties(items: tuple[str, ...], what: str) -> dict[str, str]:
    """``--property k=v`` values as Kafka's CommandLineUtils.parseKeyValueArgs: split at the first ``=``, the value
    kept as typed (a separator may be a space, a tab or ``=``)."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"expected key=value, got {item!r}", param_hint=what)
        out[key.strip()] = value
    return out


# ----- Kafka's LineMessageReader ---------------------------------------------------------------------------------
def _flag(props: dict[str, str], key: str, default: bool) -> bool:
    """A boolean property as Kafka reads it: true when it is "true" in any case (anything else is false)."""
    return props[key].strip().lower() == "true" if key in props else default


def _property_fields(cls: type, props: dict[str, str], exclude: tuple[str, ...] = ()) -> dict[str, Any]:
    """The fields of the dataclass ``cls`` (but ``exclude``) that Kafka's properties of the same name set
    (``key.separator`` -> ``key_separator``): a bool field as Kafka reads a flag, a bytes field as the property's
    UTF-8 bytes. A field whose property is absent keeps its default, so the defaults are stated once, on the
    fields."""
    values: dict[str, Any] = {}
    for f in fields(cls):
        key = f.name.replace("_", ".")
        if key not in props or f.name in exclude:
            continue
        if f.type == "bool":
            values[f.name] = _flag(props, key, False)
        elif str(f.type).startswith("bytes"):
            values[f.name] = props[key].encode()
    return values


@dataclass
class LineReader:
    """Kafka's LineMessageReader on bytes: ``[headers<headers.delimiter>][key<key.separator>]value`` per line."""

    parse_key: bool = False
    key_separator: bytes = b"\t"
    parse_headers: bool = False
    headers_delimiter: bytes = b"\t"
    headers_separator: bytes = b","
    headers_key_separator: bytes = b":"
    ignore_error: bool = False
    null_marker: bytes | None = None
    fixed_headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    _split_headers: Any = None

    @classmethod
    def from_properties(cls, props: dict[str, str], fixed_headers: list[tuple[str, bytes | None]]) -> LineReader:
        """The reader for ``--property`` values, refusing what Kafka's configure() refuses (a usage error)."""
        reader = cls(**_property_fields(cls, props), fixed_headers=fixed_headers)
        pairs = [
            ("headers.delimiter", reader.headers_delimiter, "headers.separator", reader.headers_separator),
            ("headers.delimiter", reader.headers_delimiter, "headers.key.separator", reader.headers_key_separator),
            ("headers.separator", reader.headers_separator, "headers.key.separator", reader.headers_key_separator),
            ("null.marker", reader.null_marker, "key.separator", reader.key_separator),
            ("null.marker", reader.null_marker, "headers.separator", reader.headers_separator),
            ("null.marker", reader.null_marker, "headers.delimiter", reader.headers_delimiter),
            ("null.marker", reader.null_marker, "headers.key.separator", reader.headers_key_separator),
        ]
        for name_a, a, name_b, b in pairs:
            if a is not None and a == b:
                raise click.BadParameter(f"{name_a} and {name_b} may not be equal", param_hint="--property")
        if not reader.key_separator:
            raise click.BadParameter("key.separator may not be empty", param_hint="--property")
        try:
            reader._split_headers = re.compile(reader.headers_separator)
        except re.error as e:
            raise click.BadParameter(
                f"headers.separator is not a regular expression: {e}", param_hint="--property"
            ) from None
        return reader

    def _part(self, enabled: bool, line: bytes, start: int, mark: bytes, name: str, number: int) -> bytes | None:
        if not enabled:
            return None
        index = line.find(mark, start)
        if index < 0:
            if self.ignore_error:
                return None
            raise click.ClickException(f"line {number}: no {name} found: {_show(line)}")
        return line[start:index]

    def _null(self, data: bytes | None) -> bytes | None:
        return None if data is None or data == self.null_marker else data

    def parse(self, line: bytes, number: int) -> dict[str, Any]:
        """The record of one input line (key, value, headers; no timestamp or partition of its own)."""
        if not self.parse_key and not self.parse_headers and self.null_marker is None:  # the plain line: fast
            return {"key": None, "value": line, "headers": self.fixed_headers[:], "timestamp": None, "partition": None}
        headers_text = self._part(self.parse_headers, line, 0, self.headers_delimiter, "headers delimiter", number)
        start = 0 if headers_text is None else len(headers_text) + len(self.headers_delimiter)
        key = self._part(self.parse_key, line, start, self.key_separator, "key separator", number)
        if key is not None:
            start += len(key) + len(self.key_separator)
        headers = list(self.fixed_headers)
        if headers_text is not None and headers_text != self.null_marker:
            headers.extend(self._headers(headers_text, number))
        return {
            "key": self._null(key),
            "value": self._null(line[start:]),
            "headers": headers,
            "timestamp": None,
            "partition": None,
        }

    def _headers(self, text: bytes, number: int) -> list[tuple[str, bytes | None]]:
        out: list[tuple[str, bytes | None]] = []
        pairs = self._split_headers.split(text)
        while pairs and not pairs[-1]:  # Java's String.split drops trailing empty strings
            pairs.pop()
        for pair in pairs:
            i = pair.find(self.headers_key_separator)
            if i < 0:
                if self.ignore_error:
                    out.append((pair.decode("utf-8", "replace"), None))
                    continue
                raise click.ClickException(f"line {number}: no header key separator found in pair {_show(pair)}")
            name = pair[:i]
            if name == self.null_marker:
                raise click.ClickException(
                    f"line {number}: header keys should not be equal to the null marker {_show(name)}: "
                    "they cannot be null"
                )
            out.append((name.decode("utf-8", "replace"), self._null(pair[i + len(self.headers_key_separator) :])))
        return out


def _show(data: bytes, limit: int = 80) -> str:
    text = data.decode("utf-8", "replace")
    return repr(text if len(text) <= limit else text[:limit] + "...")


# ----- the console consumer's request ------------------------------------------------------------------------------
@dataclass(frozen=True)
class ConsumeRequest:
    """What the console consumer reads and how long, the same for a log dir and a broker: the topic (one
    partition or all), where to start (--from-beginning or auto.offset.reset=earliest, --offset, --timestamp;
    else the end), when to stop (--max-messages; --timeout-ms without a record; offline the end unless
    ``follow``), the isolation level, and ``render(partition, record, timestamp type) -> bytes`` for each record."""

    topic: str
    partition: int | None
    from_beginning: bool
    offset: int | str | None  # earliest, latest or a number
    timestamp: int | None
    max_messages: int | None
    timeout_ms: int | None
    isolation: str
    render: Callable[[int, Any, str | None], bytes]
    follow: bool = False  # offline: read records appended after the end too
    group: str | None = None  # online: a consumer group to join

    def done(self, printed: int) -> bool:
        """--max-messages reached."""
        return self.max_messages is not None and printed >= self.max_messages

    def timed_out(self, last_record: float) -> bool:
        """--timeout-ms passed since ``last_record`` (a time.monotonic() value) without a record."""
        return self.timeout_ms is not None and (time.monotonic() - last_record) * 1000 >= self.timeout_ms


@dataclass
class Printed:
    """The console consumer's count of the records it printed, each counted before it is written as Kafka's
    ConsoleConsumer.process counts it (so the total said at the end includes a write that failed), and the
    time.monotonic() of the last record (--timeout-ms counts from it)."""

    count: int = 0
    last_record: float = field(default_factory=time.monotonic)


# ----- Kafka's DefaultMessageFormatter ---------------------------------------------------------------------------
DEFAULT_FORMATTERS = {
    "kafka.tools.DefaultMessageFormatter",
    "org.apache.kafka.tools.consumer.DefaultMessageFormatter",
    "DefaultMessageFormatter",
}
NO_OP_FORMATTERS = {
    "kafka.tools.NoOpMessageFormatter",
    "org.apache.kafka.tools.consumer.NoOpMessageFormatter",
    "NoOpMessageFormatter",
}
LOGGING_FORMATTERS = {
    "kafka.tools.LoggingMessageFormatter",
    "org.apache.kafka.tools.consumer.LoggingMessageFormatter",
    "LoggingMessageFormatter",
}
FORMATTER_NAMES = sorted(DEFAULT_FORMATTERS | NO_OP_FORMATTERS | LOGGING_FORMATTERS)
DECODER_FORMATTERS = {  # Kafka's internal-topic formatters: kafkalog decodes those files with `dump`
    "OffsetsMessageFormatter": "kafkalog dump --offsets-decoder",
    "GroupMetadataMessageFormatter": "kafkalog dump --offsets-decoder",
    "TransactionLogMessageFormatter": "kafkalog dump --transaction-log-decoder",
}


# DefaultMessageFormatter's print.* properties: the fields a record's line can show, in the order Kafka writes them,
# and whether each is shown by default.
PRINT_FIELDS = {"timestamp": False, "partition": False, "offset": False, "headers": False, "key": False, "value": True}


@dataclass
class MessageFormatter:
    """Kafka's DefaultMessageFormatter: the fields asked for, in Kafka's order (timestamp, partition, offset,
    headers, key, value), joined by key.separator, the record ended by line.separator. ``no_op`` prints nothing
    (NoOpMessageFormatter); ``logging`` also prints the record's description on stderr (LoggingMessageFormatter)."""

    printed: frozenset[str] = frozenset({"value"})  # names of PRINT_FIELDS
    key_separator: bytes = b"\t"
    line_separator: bytes = b"\n"
    headers_separator: bytes = b","
    null_literal: bytes = b"null"
    no_op: bool = False
    logging: bool = False

    @classmethod
    def create(cls, name: str, props: dict[str, str]) -> MessageFormatter:
        """The formatter ``--formatter NAME`` with ``--property`` values; an unknown name is a usage error."""
        short = name.rsplit(".", 1)[-1].rsplit("$", 1)[-1]
        if short in DECODER_FORMATTERS:
            raise click.BadParameter(
                f"{name} decodes an internal topic's records; use {DECODER_FORMATTERS[short]} on its segments",
                param_hint="--formatter",
            )
        if name not in FORMATTER_NAMES:
            raise click.BadParameter(
                f"unknown formatter {name!r}; kafkalog has {', '.join(FORMATTER_NAMES)}", param_hint="--formatter"
            )
        for key in ("key.deserializer", "value.deserializer", "headers.deserializer"):
            if key in props:
                raise click.BadParameter(
                    f"{key}: kafkalog prints the bytes as they are (Kafka's default); deserializers are Java classes",
                    param_hint="--property",
                )

        return cls(
            printed=frozenset(f for f, default in PRINT_FIELDS.items() if _flag(props, f"print.{f}", default)),
            no_op=name in NO_OP_FORMATTERS,
            logging=name in LOGGING_FORMATTERS,
            **_property_fields(cls, props, exclude=("no_op", "logging")),
        )

    def format(self, partition: int, record: Any, timestamp_type: str | None) -> bytes:
        """One record as DefaultMessageFormatter.writeTo writes it. ``record`` has offset, timestamp, key, value
        and headers; ``timestamp_type`` is its batch's ("CreateTime" or "LogAppendTime"; None: no timestamp)."""
        if self.no_op:
            return b""
        parts: list[bytes] = []
        if "timestamp" in self.printed:
            kind = timestamp_type if record.timestamp is not None and record.timestamp >= 0 else None
            parts.append(b"NO_TIMESTAMP" if kind is None else f"{kind}:{record.timestamp}".encode())
        if "partition" in self.printed:
            parts.append(b"Partition:%d" % partition)
        if "offset" in self.printed:
            parts.append(b"Offset:%d" % record.offset)
        if "headers" in self.printed:
            headers = list(record.headers or ())
            if not headers:
                parts.append(b"NO_HEADERS")
            else:
                parts.append(
                    self.headers_separator.join(
                        k.encode() + b":" + (v if v is not None else self.null_literal) for k, v in headers
                    )
                )
        if "key" in self.printed:
            parts.append(record.key if record.key is not None else self.null_literal)
        if "value" in self.printed:
            parts.append(record.value if record.value is not None else self.null_literal)
        if not parts:
            return b""
        # Kafka writes key.separator between fields and line.separator after the last one (after the value, or
        # after the last field printed when print.value=false).
        return self.key_separator.join(parts) + self.line_separator

    def describe(self, topic: str, partition: int, record: Any, timestamp_type: str | None) -> str:
        """LoggingMessageFormatter's line: the ConsumerRecord's toString."""
        key, value = record.key, record.value
        kind = timestamp_type or "NoTimestampType"
        return (
            f"ConsumerRecord(topic = {topic}, partition = {partition}, leaderEpoch = "
            f"{getattr(record, 'leader_epoch', None)}, offset = {record.offset}, {kind} = {record.timestamp}, "
            f"serialized key size = {-1 if key is None else len(key)}, serialized value size = "
            f"{-1 if value is None else len(value)}, headers = {list(record.headers or ())}, key = {key!r}, "
            f"value = {value!r})"
        )


def kafka_python_timestamp_type(record: Any) -> str | None:
    """A kafka-python ConsumerRecord's timestamp type (0 CreateTime, 1 LogAppendTime, -1 none) by Kafka's name."""
    return {0: "CreateTime", 1: "LogAppendTime"}.get(getattr(record, "timestamp_type", 0))


# ----- input that is read as it arrives --------------------------------------------------------------------------
READ_CHUNK = 65536


class LineSource:
    """The lines of an input, handed over as they arrive. ``read(timeout)`` returns the complete lines that came,
    without their newline (a list, empty when the timeout passed first) or None at the end of the input. A file
    descriptor (stdin, a pipe, a terminal, a file) is read with select() and os.read(), so a line typed or written
    by ``tail -f`` is produced without waiting for more input; an in-memory stream (click's test runner) is read
    line by line.
    ``partial`` holds the bytes of an unfinished last line (no newline yet). On a terminal the prompt ``>`` is
    printed on stdout whenever a new line is awaited, as Kafka's LineMessageReader does when System.console()
    exists."""

    def __init__(self, stream: IO[bytes], prompt_to: IO[bytes] | None = None) -> None:
        self.stream = stream
        self.partial = b""
        self.eof = False
        try:
            self.fd: int | None = stream.fileno()
        except (OSError, ValueError, AttributeError):
            self.fd = None
        self.prompt_to = prompt_to if self.fd is not None and os.isatty(self.fd) else None
        self._prompted = False

    def _prompt(self) -> None:
        if self.prompt_to is not None and not self._prompted and not self.partial:
            with contextlib.suppress(OSError, ValueError):
                self.prompt_to.write(b">")
                self.prompt_to.flush()
            self._prompted = True

    def read(self, timeout: float | None) -> list[bytes] | None:
        if self.eof:
            return None
        if self.fd is None:  # nothing to wait for: one line at a time, so "lines read" is exact
            line = self.stream.readline()
            if not line:
                self.eof = True
                return None
            return [line[:-1] if line.endswith(b"\n") else line]
        if timeout != 0:
            self._prompt()
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return []
        data = os.read(self.fd, READ_CHUNK)
        if not data:  # the end: an unfinished last line is a line, as BufferedReader.readLine returns it
            self.eof = True
            last, self.partial = self.partial, b""
            return [last] if last else None
        lines = (self.partial + data).split(b"\n") if self.partial else data.split(b"\n")
        self.partial = lines.pop()
        if lines:
            self._prompted = False
        return lines


# ----- signals a command defers --------------------------------------------------------------------------------
class DeferredSignals:
    """SIGINT and SIGTERM recorded instead of raised while the producer writes (an append is never cut in half),
    and raised as :class:`Interrupted` only inside :meth:`interruptible` (while it waits for input)."""

    def __init__(self) -> None:
        self.received: int | None = None
        self._waiting = False
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, _frame: object) -> None:
        self.received = signum
        if self._waiting:
            raise Interrupted(signum)

    @contextlib.contextmanager
    def installed(self) -> Iterator[DeferredSignals]:
        import threading

        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        try:
            yield self
        finally:
            for signum, handler in self._previous.items():
                signal.signal(signum, handler)

    @contextlib.contextmanager
    def interruptible(self) -> Iterator[None]:
        if self.received is not None:
            raise Interrupted(self.received)
        self._waiting = True
        try:
            yield
        finally:
            self._waiting = False


# ----- the console producer's loop ---------------------------------------------------------------------------
class Sink(Protocol):
    """Where the producer's records go: the log dir (cli/data.py) or a broker (cli/online.py)."""

    topic: str
    produced: int
    failed: dict[int, str]  # input line -> why it was not written
    where: dict[int, list[int]]  # partition -> [first offset, last offset] written
    stop: BaseException | None  # set when the sink cannot go on (--sync and a refused record, a dead broker)

    def partition_count(self) -> int: ...
    def send(self, partition: int, record: dict[str, Any]) -> None: ...
    def deadline(self) -> float | None: ...  # monotonic time of the next linger expiry; None: nothing waits
    def flush(self) -> None: ...  # write everything pending
    def idle(self) -> None: ...  # the input is idle: let go of what the sink holds (the dir lock)
    def close(self) -> None: ...


@dataclass
class ProduceOutcome:
    lines_read: int = 0
    bad_line: int | None = None
    bad_error: BaseException | None = None
    stopped_by: int | None = None  # a signal number
    unread_partial: int = 0  # bytes of an unfinished last line when stopped
    reached_end: bool = False  # the whole input was read


def produce_lines(
    source: LineSource,
    sink: Sink,
    parse: Callable[[bytes, int], dict[str, Any]],
    partition: int | None,
    signals: DeferredSignals,
    clock: Callable[[], float] = time.monotonic,
) -> ProduceOutcome:
    """Reads lines as they come and hands each record to ``sink``: routed to ``partition``, else the record's own
    partition (--json), else by key (murmur2, as Kafka's default partitioner), else round robin. Before waiting
    for input with nothing pending the sink is told it is idle. Stops at the end of the input, at a bad line, when
    the sink says so, or at SIGINT/SIGTERM; what was read is flushed in every case."""
    from ..record import default_partition

    outcome = ProduceOutcome()
    turn = 0
    count = sink.partition_count()
    try:
        while sink.stop is None:
            if signals.received is not None:
                raise Interrupted(signals.received)
            due = sink.deadline()
            with signals.interruptible():
                if due is not None:
                    lines = source.read(max(0.0, due - clock()))
                else:  # nothing pending: let go of the sink's hold (the dir lock) only if the input makes us wait
                    lines = source.read(0)
                    if lines == []:
                        sink.idle()
                        lines = source.read(None)
            if lines is None:
                outcome.reached_end = True
                break
            for i, raw in enumerate(lines):
                outcome.lines_read += 1
                number = outcome.lines_read
                try:
                    record = parse(raw[:-1] if raw.endswith(b"\r") else raw, number)
                    target = record.pop("partition")
                    if target is None:
                        target = partition
                    if target is None:
                        if record["key"] is not None:
                            target = default_partition(record["key"], count)
                        else:
                            target, turn = turn % count, turn + 1
                    if not 0 <= target < count:
                        raise click.ClickException(
                            f"line {number}: partition {target} does not exist ({count} partitions)"
                        )
                except Exception as e:
                    outcome.bad_line, outcome.bad_error = number, e
                    outcome.lines_read += len(lines) - i - 1  # read with it, in the same chunk
                    return outcome
                record["line"] = number
                sink.send(target, record)
                if sink.stop is not None:
                    outcome.lines_read += len(lines) - i - 1
                    return outcome
            due = sink.deadline()
            if due is not None and clock() >= due:
                sink.flush()
        return outcome
    except Interrupted as e:
        outcome.stopped_by = e.signum
        outcome.unread_partial = len(source.partial)
        return outcome
    finally:
        sink.flush()


def run_producer(
    sink: Sink, input_file: IO[bytes], parse: Callable[[bytes, int], dict[str, Any]], partition: int | None
) -> None:
    """The console producer from start to end, the same over a log dir and a broker: the input's lines produced
    through ``sink`` with SIGINT/SIGTERM taken between two reads, the sink closed whatever happened, then the
    summary (:func:`report`, which raises what makes the exit status)."""
    signals = DeferredSignals()
    try:
        with signals.installed():
            outcome = produce_lines(LineSource(input_file, sys.stdout.buffer), sink, parse, partition, signals)
    finally:
        sink.close()
    report(sink, outcome)


def ranges(numbers: list[int]) -> str:
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


def records_noun(n: int) -> str:
    return f"{n} record" if n == 1 else f"{n} records"


def report(sink: Sink, outcome: ProduceOutcome) -> None:
    """The summary on stderr; raises the bad line's error, the sink's, Interrupted, or a ClickException when some
    records were not written, so that the command exits 1 (or 2 for a usage error) or 128+signal."""
    where = ", ".join(f"partition {p} offsets {a}-{b}" for p, (a, b) in sorted(sink.where.items()))
    stopped_early = outcome.bad_line is not None or sink.stop is not None
    not_written = dict(sink.failed)
    if outcome.bad_line is not None:
        not_written[outcome.bad_line] = str(outcome.bad_error)
    # lines read with the one that stopped the reading (in the same chunk) but never handed to the sink
    handed = set(sink.failed) | ({outcome.bad_line} if outcome.bad_line else set())
    last_handed = max(handed) if handed else 0
    for line in range(last_handed + 1, outcome.lines_read + 1):
        if stopped_early:
            not_written[line] = "not sent: the reading stopped before it"
    if not stopped_early and not not_written:
        click.echo(f"Produced {records_noun(sink.produced)} to {sink.topic}.", err=True)
    else:
        suffix = " before the error" if stopped_early else ""
        click.echo(
            f"Produced {records_noun(sink.produced)} to {sink.topic}{suffix}" + (f" ({where})" if where else ""),
            err=True,
        )
    if not_written:
        noun = "line" if len(not_written) == 1 else "lines"
        click.echo(
            f"Not produced: {len(not_written)} of the {outcome.lines_read} lines read: "
            f"{noun} {ranges(sorted(not_written))}",
            err=True,
        )
    if stopped_early and not outcome.reached_end:
        click.echo(f"Input after line {outcome.lines_read} was not read.", err=True)
    if outcome.stopped_by is not None:
        name = signal.Signals(outcome.stopped_by).name
        partial = (
            f"; an unfinished last line ({outcome.unread_partial} bytes without a newline) was not produced"
            if outcome.unread_partial
            else ""
        )
        click.echo(
            f"Stopped by {name} after line {outcome.lines_read}: every complete line read was sent{partial}.",
            err=True,
        )
        raise Interrupted(outcome.stopped_by)
    if outcome.bad_error is not None:
        raise outcome.bad_error
    if sink.stop is not None:
        raise sink.stop
    if not_written:
        raise click.ClickException(
            f"{len(not_written)} of the {outcome.lines_read} lines read were not produced to {sink.topic}"
        )
