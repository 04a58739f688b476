"""``kafkalog produce`` and ``consume`` as Kafka's console producer and consumer (issue 24): lines sent as they
arrive, signals, a closed pipe, summaries, and the options and output formats of Kafka's tools, offline
(``--log-dir``) and online (``--bootstrap-server`` against a ``kafkalog serve`` subprocess).

The formats are Kafka's, from its sources:
- input lines: tools/src/main/java/org/apache/kafka/tools/LineMessageReader.java
  (``[headers<headers.delimiter>][key<key.separator>]value``, headers ``k:v`` joined by ``headers.separator``);
- output lines: tools/src/main/java/org/apache/kafka/tools/consumer/DefaultMessageFormatter.java
  (``CreateTime:<ts>``, ``Partition:<p>``, ``Offset:<o>``, ``k:v,k:v`` or ``NO_HEADERS``, key, value, joined by
  ``key.separator``, ended by ``line.separator``; ``null`` for a null key or value);
- option names and defaults: tools/src/main/java/org/apache/kafka/tools/ConsoleProducer.java (``--timeout`` =
  linger.ms 1000, ``--batch-size`` 16384, ``--sync``) and tools/.../consumer/ConsoleConsumerOptions.java
  (``--offset earliest|latest|N`` with ``--partition``, ``--formatter``, ``--timeout-ms``, ``--max-messages``).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import signal
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from kafkalog.cli import main
from kafkalog.logdir import LogDirLock

REPO = Path(__file__).resolve().parents[1]


def run(*args: str, input: str | None = None):
    return CliRunner().invoke(main, list(args), input=input)


def command(*args: str) -> list[str]:
    return [sys.executable, "-c", "from kafkalog.cli import main; main()", *args]


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = str(REPO / "src") + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
    return e


def spawn(*args: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen(command(*args), env=env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, **kwargs)  # fmt: skip


def unread(pipe) -> int:
    """Bytes written into a pipe that its reader has not read yet (FIONREAD)."""
    buf = bytearray(4)
    fcntl.ioctl(pipe.fileno(), termios.FIONREAD, buf)
    return int.from_bytes(buf, sys.byteorder)


def wait_read(pipe, timeout: float = 30.0) -> None:
    """Until the process at the other end of ``pipe`` has read everything written into it."""
    deadline = time.monotonic() + timeout
    while unread(pipe) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not unread(pipe), "the producer did not read its input"


def consumed(d: str, topic: str, *extra: str) -> list[str]:
    result = run("consume", "--log-dir", d, "--topic", topic, "--from-beginning", *extra)
    assert result.exit_code == 0, result.output
    return result.stdout.splitlines()


def wait_for(predicate, timeout: float = 10.0) -> float:
    start = time.monotonic()
    while not predicate():
        assert time.monotonic() - start < timeout, "timed out"
        time.sleep(0.05)
    return time.monotonic() - start


# ----- produce: lines as they arrive, the lock, signals --------------------------------------------------------
def test_produce_writes_lines_as_they_arrive_and_lets_go_of_the_lock_while_waiting(tmp_path: Path) -> None:
    """`tail -f | kafkalog produce`: a line reaches the log within the linger (1 s) while the producer still
    runs, and the dir lock is free while it waits for the next line (main held both until 500 lines or EOF)."""
    d = str(tmp_path)
    assert run("topics", "--log-dir", d, "--create", "--topic", "t").exit_code == 0
    producer = spawn("produce", "--log-dir", d, "--topic", "t")
    try:
        producer.stdin.write(b"first\n")
        producer.stdin.flush()
        # Without the fix the line waits for 500 more lines or EOF, i.e. forever here; the bound only allows for a
        # slow start of the producer process on a loaded machine (15 s timed out at load 17).
        waited = wait_for(lambda: consumed(d, "t") == ["first"], timeout=60)
        assert producer.poll() is None and waited < 60
        # idle: the lock is free (another writer could take the dir now)
        wait_for(lambda: _lock_free(tmp_path), timeout=5)
        producer.stdin.write(b"second\nthird\n")
        producer.stdin.flush()
        wait_for(lambda: consumed(d, "t") == ["first", "second", "third"], timeout=60)
        assert producer.poll() is None
    finally:
        _, err = producer.communicate(timeout=30)
    assert producer.returncode == 0, err
    assert err.decode() == "Produced 3 records to t.\n"


def _lock_free(path: Path) -> bool:
    lock = LogDirLock(path)
    try:
        lock.acquire()
    except Exception:
        return False
    lock.release()
    return True


def test_on_a_terminal_the_producer_prompts_as_kafkas(tmp_path: Path) -> None:
    """LineMessageReader prints ">" before each line it awaits when System.console() exists (a terminal)."""
    import pty

    d = str(tmp_path)
    assert run("topics", "--log-dir", d, "--create", "--topic", "t").exit_code == 0
    master, slave = pty.openpty()
    producer = subprocess.Popen(command("produce", "--log-dir", d, "--topic", "t"), env=env(), stdin=slave,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    os.close(slave)
    try:
        assert producer.stdout.read(1) == b">"
        os.write(master, b"typed\n")
        assert producer.stdout.read(1) == b">"  # the next line is awaited
        wait_for(lambda: consumed(d, "t") == ["typed"], timeout=15)
        os.write(master, b"\x04")  # Ctrl-D: the end of the input
        _, err = producer.communicate(timeout=30)
    finally:
        os.close(master)
    assert producer.returncode == 0 and err == b"Produced 1 record to t.\n", err


def test_a_dir_taken_by_another_process_while_idle_stops_the_producer_with_a_summary(tmp_path: Path) -> None:
    """The lock is let go while the input is idle; if another process holds the dir when the next batch is due,
    the producer stops with one error line and names the lines it could not write."""
    d = str(tmp_path)
    assert run("topics", "--log-dir", d, "--create", "--topic", "t").exit_code == 0
    producer = spawn("produce", "--log-dir", d, "--topic", "t", "--timeout", "100")
    producer.stdin.write(b"one\n")
    producer.stdin.flush()
    wait_for(lambda: consumed(d, "t") == ["one"], timeout=15)
    wait_for(lambda: _lock_free(tmp_path), timeout=5)
    holder = LogDirLock(tmp_path).acquire()
    try:
        producer.stdin.write(b"two\nthree\n")
        producer.stdin.flush()
        _, err = producer.communicate(timeout=30)
    finally:
        holder.release()
    text = err.decode()
    assert producer.returncode == 1, text
    assert "Produced 1 record to t before the error (partition 0 offsets 0-0)" in text
    assert "Not produced: 2 of the 3 lines read: lines 2-3" in text
    assert "Error: Failed to acquire lock" in text and "Traceback" not in text
    assert consumed(d, "t") == ["one"]


@pytest.mark.parametrize(("signum", "rc"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_flushes_every_line_read_and_says_what_was_not(tmp_path: Path, signum: int, rc: int) -> None:
    """With a long linger the lines wait in the producer; SIGTERM/SIGINT write them, name the unfinished last
    line that was not, and exit 128+signal (main lost every buffered line without a word)."""
    d = str(tmp_path)
    assert run("topics", "--log-dir", d, "--create", "--topic", "t").exit_code == 0
    producer = spawn("produce", "--log-dir", d, "--topic", "t", "--timeout", "600000")
    producer.stdin.write(b"a\nb\nc\nunfinished")
    producer.stdin.flush()
    wait_read(producer.stdin)
    assert consumed(d, "t") == []  # still lingering
    producer.send_signal(signum)
    _, err = producer.communicate(timeout=30)
    text = err.decode()
    assert producer.returncode == rc, text
    assert "Produced 3 records to t." in text
    name = signal.Signals(signum).name
    assert (
        f"Stopped by {name} after line 3: every complete line read was sent; an unfinished last line (10 bytes "
        "without a newline) was not produced." in text
    )
    assert "Traceback" not in text
    assert consumed(d, "t") == ["a", "b", "c"]


def test_a_bad_line_after_1200_good_ones_says_what_was_written_and_what_was_not(tmp_path: Path) -> None:
    """parse.key=true and a line without the separator (LineMessageReader: "No key separator found on line
    number N"): the 1,200 lines before it are written, the summary names the line and what was not read."""
    d = str(tmp_path)
    assert run("topics", "--log-dir", d, "--create", "--topic", "k", "--partitions", "3").exit_code == 0
    lines = "".join(f"key{i}:v{i}\n" for i in range(1, 1201)) + "no separator\n" + "key:after\n"
    result = run(
        "produce", "--log-dir", d, "--topic", "k", "--property", "parse.key=true", "--property", "key.separator=:",
        input=lines,
    )  # fmt: skip
    assert result.exit_code == 1, result.output
    assert "Error: line 1201: no key separator found: 'no separator'" in result.output
    assert "Produced 1200 records to k before the error (partition 0 offsets 0-" in result.output
    assert "Not produced: 1 of the 1201 lines read: line 1201\nInput after line 1201 was not read." in result.output
    assert sorted(consumed(d, "k"), key=lambda v: int(v[1:])) == [f"v{i}" for i in range(1, 1201)]

    # the same through a real pipe: what was read with the bad line in one chunk is named too
    producer = spawn("produce", "--log-dir", d, "--topic", "k", "--key-separator", ":")
    _, err = producer.communicate(lines.encode(), timeout=60)
    text = err.decode()
    assert producer.returncode == 1 and "line 1201: no key separator" in text and "Traceback" not in text
    assert "Produced 1200 records to k before the error" in text
    assert re.search(r"Not produced: 2 of the 1202 lines read: lines 1201-1202\n", text), text
    assert len(consumed(d, "k")) == 2400


def test_a_topic_with_a_small_segment_bytes_takes_the_input_in_batches_that_fit(tmp_path: Path) -> None:
    """Batches are cut to the topic's segment.bytes and max.message.bytes (main built 500-record batches that a
    small segment refused whole: RecordBatchTooLargeException)."""
    d = str(tmp_path)
    create = ("topics", "--log-dir", d, "--create", "--topic", "s", "--config", "segment.bytes=2000")
    assert run(*create).exit_code == 0
    lines = "".join(f"record number {i:05d}\n" for i in range(1000))
    result = run("produce", "--log-dir", d, "--topic", "s", input=lines)
    assert result.exit_code == 0, result.output
    assert result.output == "Produced 1000 records to s.\n"
    assert consumed(d, "s") == [f"record number {i:05d}" for i in range(1000)]
    assert len(list((tmp_path / "s-0").glob("*.log"))) > 5
    # a codec: the compressed batches fit too
    result = run("produce", "--log-dir", d, "--topic", "s", "--compression-codec", "gzip", input=lines)
    assert result.exit_code == 0, result.output
    assert len(consumed(d, "s")) == 2000


def test_produced_one_record_grammar_and_sync_mode(tmp_path: Path) -> None:
    d = str(tmp_path)
    assert run("topics", "--log-dir", d, "--create", "--topic", "t").exit_code == 0
    assert run("produce", "--log-dir", d, "--topic", "t", input="only\n").output == "Produced 1 record to t.\n"
    # --sync: one append per line
    synced = run("produce", "--log-dir", d, "--topic", "t", "--sync", input="a\nb\nc\n")
    assert synced.output == "Produced 3 records to t.\n"
    batches = run("dump", "--files", str(tmp_path / "t-0" / "00000000000000000000.log")).output
    assert batches.count("baseOffset:") == 4


# ----- produce: Kafka's line reader properties ------------------------------------------------------------------
def test_line_reader_properties_keys_headers_null_marker_and_ignore_error(tmp_path: Path) -> None:
    d = str(tmp_path)
    assert run("topics", "--log-dir", d, "--create", "--topic", "t").exit_code == 0
    props = ("--property", "parse.key=true", "--property", "parse.headers=true", "--property", "null.marker=NULL")
    lines = "h1:v1,h2:v2\tk1\tvalue one\nNULL\tNULL\ttombstone-key-null\nh3:NULL\tk3\tNULL\n"
    assert run("produce", "--log-dir", d, "--topic", "t", *props, input=lines).exit_code == 0
    everything = ("--property", "print.headers=true", "--property", "print.key=true", "--property", "print.offset=true")
    assert consumed(d, "t", *everything) == [
        "Offset:0\th1:v1,h2:v2\tk1\tvalue one",
        "Offset:1\tNO_HEADERS\tnull\ttombstone-key-null",
        "Offset:2\th3:null\tk3\tnull",
    ]
    # custom separators, as LineMessageReader's properties
    custom = (
        "--property", "parse.key=true", "--property", "key.separator=::", "--property", "parse.headers=true",
        "--property", "headers.delimiter=|", "--property", "headers.separator=;", "--property",
        "headers.key.separator==",
    )  # fmt: skip
    assert run("produce", "--log-dir", d, "--topic", "t", *custom, input="a=1;b=2|key::v::w\n").exit_code == 0
    assert consumed(d, "t", *everything)[-1] == "Offset:3\ta:1,b:2\tkey\tv::w"
    # a missing header key separator is an error naming the line, unless ignore.error=true
    bad = run("produce", "--log-dir", d, "--topic", "t", "--property", "parse.headers=true", input="x\ty\nnokey\tz\n")
    assert bad.exit_code == 1 and "line 1: no header key separator found in pair 'x'" in bad.output
    lax = ("--property", "parse.key=true", "--property", "ignore.error=true")
    assert run("produce", "--log-dir", d, "--topic", "t", *lax, input="no tab here\n").exit_code == 0
    assert consumed(d, "t", "--property", "print.key=true")[-1] == "null\tno tab here"
    # Kafka's refusals of ambiguous separators are usage errors
    clash = run("produce", "--log-dir", d, "--topic", "t", "--property", "headers.separator=\t", input="x\n")
    assert clash.exit_code == 2 and "headers.delimiter and headers.separator may not be equal" in clash.output


def test_producer_properties_and_options(tmp_path: Path) -> None:
    d = str(tmp_path)
    assert run("topics", "--log-dir", d, "--create", "--topic", "t").exit_code == 0
    ok = run(
        "produce", "--log-dir", d, "--topic", "t", "--producer-property", "linger.ms=5", "--producer-property",
        "batch.size=100", "--producer-property", "compression.type=lz4", "--producer-property", "acks=1",
        input="".join(f"line {i}\n" for i in range(20)),
    )  # fmt: skip
    assert ok.exit_code == 0, ok.output
    dumped = run("dump", "--files", str(tmp_path / "t-0" / "00000000000000000000.log")).output
    assert "compresscodec: lz4" in dumped and dumped.count("baseOffset:") > 1  # batch.size of 100 bytes
    for args, message in [
        (("--producer-property", "retries=3"), "retries configures a network producer"),
        (("--producer-property", "linger.ms=soon"), "linger.ms must be a number"),
        (("--producer-property", "nonsense"), "expected key=value"),
        (("--linger-ms", "-1"), "-1"),
    ]:
        result = run("produce", "--log-dir", d, "--topic", "t", *args, input="x\n")
        assert result.exit_code == 2 and message in result.output, (args, result.output)
    # --linger-ms is --timeout's other name
    assert run("produce", "--log-dir", d, "--topic", "t", "--linger-ms", "0", input="y\n").exit_code == 0
    # --producer.config (a file; --producer-property wins) and --compression-codec without a value (gzip, as Kafka's)
    config = tmp_path / "producer.properties"
    config.write_text("compression.type=zstd\nlinger.ms=0\n")
    assert run("produce", "--log-dir", d, "--topic", "t", "--producer.config", str(config), input="z\n").exit_code == 0
    assert run("produce", "--log-dir", d, "--topic", "t", "--compression-codec", input="g\n").exit_code == 0
    codecs = re.findall(
        r"compresscodec: (\w+)", run("dump", "--files", str(tmp_path / "t-0" / "00000000000000000000.log")).output
    )
    assert codecs[-3:] == ["none", "zstd", "gzip"]


# ----- consume: DefaultMessageFormatter, offsets, follow mode ----------------------------------------------------
def test_consume_default_message_formatter_properties(tmp_path: Path) -> None:
    """DefaultMessageFormatter.java: timestamp (CreateTime:<ms>), Partition:<p>, Offset:<o>, headers, key, value
    joined by key.separator, then line.separator; null.literal for nulls; print.value=false ends after the key."""
    d = str(tmp_path)
    assert run("topics", "--log-dir", d, "--create", "--topic", "t", "--partitions", "2").exit_code == 0
    lines = [
        {"value": "v0", "key": "k0", "partition": 1, "timestamp": 1700000000000, "headers": {"a": "1", "b": "2"}},
        {"value": None, "key": None, "partition": 1, "timestamp": 1700000000001},
    ]
    assert (
        run("produce", "--log-dir", d, "--topic", "t", "--json", input="\n".join(map(json.dumps, lines))).exit_code == 0
    )
    props = [
        "print.timestamp=true", "print.partition=true", "print.offset=true", "print.headers=true", "print.key=true",
    ]  # fmt: skip
    args = [x for p in props for x in ("--property", p)]
    assert consumed(d, "t", "--partition", "1", *args) == [
        "CreateTime:1700000000000\tPartition:1\tOffset:0\ta:1,b:2\tk0\tv0",
        "CreateTime:1700000000001\tPartition:1\tOffset:1\tNO_HEADERS\tnull\tnull",
    ]
    custom = run(
        "consume", "--log-dir", d, "--topic", "t", "--partition", "1", "--offset", "earliest",
        "--formatter", "org.apache.kafka.tools.consumer.DefaultMessageFormatter", "--property", "print.key=true",
        "--property", "key.separator= => ", "--property", "line.separator=|", "--property", "null.literal=<nil>",
        "--property", "print.headers=true", "--property", "headers.separator=;",
    )  # fmt: skip
    assert custom.stdout == "a:1;b:2 => k0 => v0|NO_HEADERS => <nil> => <nil>|"
    formatter_config = tmp_path / "formatter.properties"
    formatter_config.write_text("print.offset=true\nprint.key=true\n")
    from_file = consumed(d, "t", "--partition", "1", "--formatter-config", str(formatter_config), "--property",
                         "print.key=false")  # fmt: skip
    assert from_file == ["Offset:0\tv0", "Offset:1\tnull"]  # --property wins over the file
    keys_only = consumed(d, "t", "--partition", "1", "--property", "print.key=true", "--property", "print.value=false")
    assert keys_only == ["k0", "null"]
    # the other formatters Kafka ships: NoOp prints nothing, Logging adds the record's description on stderr
    noop = run("consume", "--log-dir", d, "--topic", "t", "--from-beginning", "--formatter",
               "kafka.tools.NoOpMessageFormatter")  # fmt: skip
    assert noop.stdout == "" and "Processed a total of 2 messages" in noop.stderr
    logging = run("consume", "--log-dir", d, "--topic", "t", "--from-beginning", "--formatter",
                  "kafka.tools.LoggingMessageFormatter")  # fmt: skip
    assert logging.stdout == "v0\nnull\n"
    assert "ConsumerRecord(topic = t, partition = 1, leaderEpoch = None, offset = 0, CreateTime = 1700000000000" in (
        logging.stderr
    )
    for name, message in [
        ("kafka.tools.Nope", "unknown formatter 'kafka.tools.Nope'"),
        ("kafka.coordinator.group.GroupMetadataManager$OffsetsMessageFormatter", "kafkalog dump --offsets-decoder"),
    ]:
        refused = run("consume", "--log-dir", d, "--topic", "t", "--formatter", name)
        assert refused.exit_code == 2 and message in refused.output and "Traceback" not in refused.output


def test_consume_offsets_earliest_latest_and_numbers(tmp_path: Path) -> None:
    """ConsoleConsumerOptions.parseOffset: earliest, latest or a non-negative long, and only with --partition."""
    d = str(tmp_path)
    assert run("topics", "--log-dir", d, "--create", "--topic", "t").exit_code == 0
    assert run("produce", "--log-dir", d, "--topic", "t", input="a\nb\nc\n").exit_code == 0
    base = ("consume", "--log-dir", d, "--topic", "t", "--partition", "0")
    assert run(*base, "--offset", "earliest").stdout == "a\nb\nc\n"
    assert run(*base, "--offset", "LATEST").stdout == ""
    assert run(*base, "--offset", "1", "--max-messages", "1").stdout == "b\n"
    bad = run(*base, "--offset", "-3")
    kafka_says = "The provided offset value '-3' is incorrect. Valid values are 'earliest', 'latest', or a non-negative"
    assert bad.exit_code == 2 and kafka_says + " long." in bad.output
    assert run("consume", "--log-dir", d, "--topic", "t", "--offset", "1").exit_code == 2  # no --partition
    assert run(*base, "--consumer-property", "group.id=g").exit_code == 2  # a log dir has no groups
    committed = run(*base, "--offset", "0", "--consumer-property", "isolation.level=read_committed")
    assert committed.stdout == "a\nb\nc\n"


def test_offline_consume_follows_new_records_until_the_timeout(tmp_path: Path) -> None:
    """--timeout-ms offline follows the log dir as the online consumer follows a topic: a record produced while
    it runs is printed, and it exits once nothing came for the timeout (main stopped at the end at once)."""
    d = str(tmp_path)
    assert run("topics", "--log-dir", d, "--create", "--topic", "t").exit_code == 0
    assert run("produce", "--log-dir", d, "--topic", "t", input="old\n").exit_code == 0
    consumer = spawn("consume", "--log-dir", d, "--topic", "t", "--from-beginning", "--timeout-ms", "4000")
    time.sleep(1.0)
    assert run("produce", "--log-dir", d, "--topic", "t", input="new\n").exit_code == 0
    out, err = consumer.communicate(timeout=60)
    assert consumer.returncode == 0, err
    assert out == b"old\nnew\n" and b"Processed a total of 2 messages" in err

    # --follow until SIGINT: the total is printed and the exit code is 130, as Kafka's on Ctrl-C
    follower = spawn("consume", "--log-dir", d, "--topic", "t", "--follow", "--from-beginning")
    assert follower.stdout.readline() == b"old\n"
    assert follower.stdout.readline() == b"new\n"
    follower.send_signal(signal.SIGINT)
    out, err = follower.communicate(timeout=30)
    assert follower.returncode == 130 and b"Processed a total of 2 messages" in err and b"Traceback" not in err


# ----- a closed stdout, for every command ------------------------------------------------------------------------
def _into_head(args: list[str]) -> tuple[int, str, bytes]:
    first = subprocess.Popen(command(*args), env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    head = subprocess.Popen(["head", "-1"], stdin=first.stdout, stdout=subprocess.PIPE)
    first.stdout.close()
    line, _ = head.communicate(timeout=60)
    _, err = first.communicate(timeout=60)
    return first.returncode, err.decode(), line


def test_a_closed_pipe_ends_consume_and_topics_quietly(tmp_path: Path) -> None:
    """`consume | head -1` and `topics --describe | head -1`: exit 0, no "Broken pipe" error (main: exit 1 and
    "Error: [Errno 32] Broken pipe"). consume says what Kafka's ConsoleConsumer.checkErr says."""
    d = str(tmp_path)
    assert run("topics", "--log-dir", d, "--create", "--topic", "t", "--partitions", "700").exit_code == 0
    payload = "x" * 1000
    assert run("produce", "--log-dir", d, "--topic", "t", "--partition", "0", input=f"{payload}\n" * 500).exit_code == 0
    rc, err, line = _into_head(["consume", "--log-dir", d, "--topic", "t", "--from-beginning"])
    assert (rc, line) == (0, payload.encode() + b"\n"), err
    assert "Broken pipe" not in err and "Error" not in err and "Traceback" not in err
    assert "Unable to write to standard out, closing consumer." in err
    rc, err, line = _into_head(["topics", "--log-dir", d, "--describe"])
    assert rc == 0 and line.startswith(b"Topic: t\t") and err == "", err


# ----- online: against a kafkalog serve subprocess -----------------------------------------------------------------
@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    from brokertools import BrokerProcess

    server = BrokerProcess(tmp_path_factory.mktemp("broker-console"), {"num.partitions": "1"}).start()
    yield server
    assert server.stop() == 0, server.log


def test_online_produce_sends_lines_as_they_arrive_and_consume_formats_them(broker) -> None:
    b = broker.bootstrap
    assert run("topics", "--bootstrap-server", b, "--create", "--topic", "live", "--partitions", "2").exit_code == 0
    producer = spawn("produce", "--bootstrap-server", b, "--topic", "live", "--property", "parse.key=true",
                     "--property", "parse.headers=true")  # fmt: skip
    try:
        producer.stdin.write(b"src:cli\tk1\tfirst\n")
        producer.stdin.flush()
        base = ("consume", "--bootstrap-server", b, "--topic", "live", "--from-beginning", "--timeout-ms", "1500")

        def seen() -> list[str]:
            return run(*base, "--property", "print.key=true", "--property", "print.headers=true").stdout.splitlines()

        wait_for(lambda: seen() == ["src:cli\tk1\tfirst"], timeout=30)
        assert producer.poll() is None
    finally:
        _, err = producer.communicate(b"src:cli\tk2\tsecond\n", timeout=60)
    assert producer.returncode == 0 and err.decode().endswith("Produced 2 records to live.\n"), err
    # the DefaultMessageFormatter fields online, per partition and offset
    p = str(__import__("kafkalog.record", fromlist=["default_partition"]).default_partition(b"k1", 2))
    fields = ("--property", "print.partition=true", "--property", "print.offset=true", "--property",
              "print.timestamp=true", "--property", "print.key=true")  # fmt: skip
    got = run("consume", "--bootstrap-server", b, "--topic", "live", "--partition", p, "--offset", "earliest",
              "--max-messages", "1", "--timeout-ms", "20000", *fields).stdout  # fmt: skip
    assert re.fullmatch(rf"CreateTime:\d{{13}}\tPartition:{p}\tOffset:0\tk1\tfirst\n", got), got


def test_online_sigterm_sends_what_lingers(broker) -> None:
    """kafka-python's producer holds the lines for --timeout (600 s here); SIGTERM sends them and waits for the
    broker's acknowledgement before exiting 143, as Kafka's shutdown hook closes (and flushes) its producer."""
    b = broker.bootstrap
    assert run("topics", "--bootstrap-server", b, "--create", "--topic", "term").exit_code == 0
    producer = spawn("produce", "--bootstrap-server", b, "--topic", "term", "--timeout", "600000")
    producer.stdin.write(b"one\ntwo\n")
    producer.stdin.flush()
    wait_read(producer.stdin)
    producer.send_signal(signal.SIGTERM)
    _, err = producer.communicate(timeout=60)
    assert producer.returncode == 143, err
    assert b"Produced 2 records to term." in err and b"Stopped by SIGTERM after line 2" in err
    got = run("consume", "--bootstrap-server", b, "--topic", "term", "--from-beginning", "--max-messages", "2",
              "--timeout-ms", "20000")  # fmt: skip
    assert got.stdout == "one\ntwo\n"


def test_online_sync_produce_a_group_that_commits_and_a_closed_pipe(broker) -> None:
    b = broker.bootstrap
    assert run("topics", "--bootstrap-server", b, "--create", "--topic", "g1").exit_code == 0
    assert run("topics", "--bootstrap-server", b, "--create", "--topic", "hdr").exit_code == 0
    lines = "".join(f"m{i}\n" for i in range(30))
    sent = run("produce", "--bootstrap-server", b, "--topic", "g1", "--sync", "--batch-size", "100",
               "--producer-property", "max.request.size=200000", input=lines)  # fmt: skip
    assert sent.exit_code == 0 and sent.output == "Produced 30 records to g1.\n", sent.output
    nulls = run("produce", "--bootstrap-server", b, "--topic", "hdr", "--property", "parse.headers=true",
                "--property", "null.marker=NULL", input="h:NULL\tv\n")  # fmt: skip
    assert nulls.exit_code == 0 and "Note: line 1: a null header value is sent as empty bytes" in nulls.output
    unknown = run("produce", "--bootstrap-server", b, "--topic", "g1", "--producer-property", "no.such=1", input="x\n")
    assert unknown.exit_code == 2 and "no.such is not a producer config" in unknown.output
    group = ("consume", "--bootstrap-server", b, "--topic", "g1", "--group", "readers", "--from-beginning",
             "--timeout-ms", "5000")  # fmt: skip
    first = run(*group, "--max-messages", "10")
    assert first.stdout.splitlines() == [f"m{i}" for i in range(10)], first.output
    rest = run(*group)  # the group committed 10: the next member starts there
    assert rest.stdout.splitlines() == [f"m{i}" for i in range(10, 30)], rest.output
    mismatch = run(*group, "--consumer-property", "group.id=other")
    assert mismatch.exit_code == 2 and "do not match" in mismatch.output
    big = run("produce", "--bootstrap-server", b, "--topic", "g1", input=("y" * 1000 + "\n") * 300)
    assert big.exit_code == 0, big.output
    rc, err, line = _into_head(["consume", "--bootstrap-server", b, "--topic", "g1", "--from-beginning"])
    assert (rc, line) == (0, b"m0\n") and "Broken pipe" not in err and "Traceback" not in err, err
