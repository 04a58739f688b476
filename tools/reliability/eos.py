"""Exactly-once under kill -9: a consume-transform-produce program killed at random moments (issue 21).

The program (``python -m tools.reliability.eos process ...``, a separate process) is what Kafka's exactly-once
applications are: a confluent-kafka consumer with ``isolation.level=read_committed`` and
``enable.auto.commit=false`` reads the input topic; for each poll a transactional producer begins a transaction,
writes one output record per input record (same partition index, value ``out:<input value>``, header ``src`` =
``<input partition>:<input offset>``), adds the consumer's positions with ``send_offsets_to_transaction`` and
commits. On start it calls ``init_transactions``, which fences the previous incarnation and has the coordinator
abort whatever transaction it left open, then resumes from the group's committed offsets.

The harness starts ``kafkalog serve``, writes the input, and runs the program again and again, SIGKILLing it at a
random moment each time (1 to ``max_kills`` times per run), until a last incarnation reports that it has
committed up to the end of the input. The checker (``check_exactly_once``) then compares the input topic with
the output topic read ``read_committed``: every input record's output appears exactly once, with the right
value, in input order within its partition, and nothing else appears. Reading the output ``read_uncommitted``
too counts the records of aborted transactions (what the kills left behind and the coordinator aborted).

The consumer takes its partitions with ``assign`` (positions from the group's committed offsets) by default, or
joins the group with ``subscribe`` and a static ``group.instance.id`` (``--subscribe``), so that an incarnation
replaces the killed one without waiting out its session.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SRC_HEADER = "src"
_LISTENING = re.compile(r"Awaiting socket connections on (\S+):(\d+)")


# ----- the transformation and the checker ------------------------------------------------------------------
def transform(value: bytes) -> bytes:
    """The output value of an input value."""
    return b"out:" + value


@dataclass(frozen=True)
class InputRecord:
    partition: int
    offset: int
    value: bytes


@dataclass(frozen=True)
class OutputRecord:
    """One committed output record; ``source`` is its ``src`` header parsed, None when absent or malformed."""

    partition: int
    offset: int
    value: bytes
    source: tuple[int, int] | None


def parse_source(header: bytes | None) -> tuple[int, int] | None:
    try:
        partition, offset = header.decode().split(":")  # type: ignore[union-attr]
        return int(partition), int(offset)
    except (AttributeError, UnicodeDecodeError, ValueError):
        return None


@dataclass
class EosReport:
    """What the output holds against the input. Invariant: ``ok`` iff every input has exactly one output, each
    output comes from an input, carries its transformed value, and each partition's outputs follow input order."""

    inputs: int = 0
    outputs: int = 0
    missing: list[tuple[int, int]] = field(default_factory=list)
    duplicated: dict[tuple[int, int], int] = field(default_factory=dict)
    unexpected: list[tuple[int, int]] = field(default_factory=list)  # output (partition, offset) with no input
    mismatched: list[tuple[int, int]] = field(default_factory=list)  # output (partition, offset) with a wrong value
    out_of_order: list[tuple[int, int]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.missing or self.duplicated or self.unexpected or self.mismatched or self.out_of_order)

    @property
    def bad(self) -> int:
        """Outputs that should not be there: extra copies, strangers, wrong values, records out of order."""
        extra = sum(n - 1 for n in self.duplicated.values())
        return extra + len(self.unexpected) + len(self.mismatched) + len(self.out_of_order)

    def describe(self) -> str:
        parts = [f"{self.inputs} inputs, {self.outputs} committed outputs"]
        for name in ("missing", "duplicated", "unexpected", "mismatched", "out_of_order"):
            found = getattr(self, name)
            if found:
                sample = list(found.items() if isinstance(found, dict) else found)[:5]
                parts.append(f"{len(found)} {name.replace('_', ' ')} (e.g. {sample})")
        return "; ".join(parts)


def check_exactly_once(inputs: Iterable[InputRecord], outputs: Iterable[OutputRecord]) -> EosReport:
    """Compare the input topic with the committed output topic (see the module docstring for the property)."""
    report = EosReport()
    by_source = {}
    for record in inputs:
        by_source[(record.partition, record.offset)] = record
    report.inputs = len(by_source)
    seen: Counter[tuple[int, int]] = Counter()
    last_source: dict[int, int] = {}
    for out in sorted(outputs, key=lambda o: (o.partition, o.offset)):
        report.outputs += 1
        source = out.source
        if source is None or source not in by_source:
            report.unexpected.append((out.partition, out.offset))
            continue
        seen[source] += 1
        if out.value != transform(by_source[source].value) or out.partition != source[0]:
            report.mismatched.append((out.partition, out.offset))
        previous = last_source.get(out.partition)
        if previous is not None and source[1] <= previous:
            report.out_of_order.append((out.partition, out.offset))
        last_source[out.partition] = max(source[1], previous if previous is not None else -1)
    report.missing = sorted(s for s in by_source if seen[s] == 0)
    report.duplicated = {s: n for s, n in sorted(seen.items()) if n > 1}
    return report


# ----- the consume-transform-produce program ------------------------------------------------------------------
def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def process(
    bootstrap: str,
    input_topic: str,
    output_topic: str,
    group: str,
    transactional_id: str,
    batch: int,
    subscribe: bool,
    pace_ms: int = 0,
) -> int:
    """Run the consume-transform-produce loop until killed; report ``R`` when ready, ``C n`` after each commit
    of n records, ``D`` once it has committed everything up to the input's end, ``E ...`` on an error."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition

    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": transactional_id, "transaction.timeout.ms": 60000}
    )
    consumer_config = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "isolation.level": "read_committed",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    }
    if subscribe:
        consumer_config |= {"group.instance.id": f"{transactional_id}-member", "session.timeout.ms": 10000}
    consumer = Consumer(consumer_config)
    try:
        producer.init_transactions(60)
        metadata = consumer.list_topics(input_topic, timeout=30)
        partitions = sorted(metadata.topics[input_topic].partitions)
        tps = [TopicPartition(input_topic, p) for p in partitions]
        if subscribe:
            consumer.subscribe([input_topic])
        else:
            committed = consumer.committed(tps, timeout=30)
            consumer.assign(
                [
                    TopicPartition(input_topic, c.partition, c.offset if c.offset >= 0 else OFFSET_BEGINNING)
                    for c in committed
                ]
            )
        _say("R")
        done = False
        while True:
            messages = [m for m in consumer.consume(num_messages=batch, timeout=0.5) if m.error() is None]
            if messages:
                producer.begin_transaction()
                for m in messages:
                    producer.produce(
                        output_topic,
                        key=m.key(),
                        value=transform(m.value()),
                        partition=m.partition(),
                        headers=[(SRC_HEADER, f"{m.partition()}:{m.offset()}".encode())],
                    )
                if pace_ms:  # "work" inside the open transaction: where most kills land
                    time.sleep(random.uniform(0, pace_ms / 1000))
                positions = [tp for tp in consumer.position(consumer.assignment()) if tp.offset >= 0]
                producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 30)
                producer.commit_transaction(30)
                _say(f"C {len(messages)}")
                continue
            if not done:  # idle: has everything up to the input's end been committed (by us or a predecessor)?
                ends = {
                    p: consumer.get_watermark_offsets(TopicPartition(input_topic, p), timeout=10)[1] for p in partitions
                }
                if all(c.offset >= ends[c.partition] for c in consumer.committed(tps, timeout=30)):
                    done = True
                    _say("D")
    except KafkaException as e:
        _say(f"E {type(e).__name__}: {e}")
        return 1
    finally:
        with contextlib.suppress(Exception):
            consumer.close()


# ----- the harness ---------------------------------------------------------------------------------------------
def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO / "src") + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Broker:
    """``kafkalog serve`` on a free loopback port, its log lines kept."""

    def __init__(self, log_dir: Path, overrides: dict[str, str] | None = None) -> None:
        self.log_dir = log_dir
        # One port for the broker's life, restarts included, so that clients' bootstrap list stays valid.
        settings = {"listeners": f"PLAINTEXT://127.0.0.1:{_free_port()}", "log.dirs": str(log_dir), **(overrides or {})}
        self.args = [sys.executable, "-c", "from kafkalog.cli import main; main()", "serve"]
        for key, value in settings.items():
            self.args += ["--override", f"{key}={value}"]
        self.proc: subprocess.Popen[str] | None = None
        self.lines: list[str] = []
        self.bootstrap = ""

    def start(self, timeout: float = 120.0) -> Broker:
        self.bootstrap = ""
        self.proc = subprocess.Popen(
            self.args,
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            text=True,
            env=_env(),
        )
        found = threading.Event()
        proc = self.proc

        def drain() -> None:
            assert proc.stderr is not None
            for line in proc.stderr:
                self.lines.append(line)
                m = _LISTENING.search(line)
                if m and not self.bootstrap:
                    self.bootstrap = f"{m.group(1)}:{m.group(2)}"
                    found.set()
            found.set()

        threading.Thread(target=drain, daemon=True).start()
        if not found.wait(timeout) or not self.bootstrap:
            self.stop()
            raise RuntimeError("kafkalog serve did not start:\n" + "".join(self.lines[-40:]))
        return self

    def kill9_and_restart(self) -> None:
        """SIGKILL (no flush, no clean-shutdown marker: the next start recovers), then start again."""
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()
        self.start()

    def stop(self, timeout: float = 30.0) -> int:
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


@dataclass
class RunResult:
    report: EosReport
    kills: int = 0
    broker_kills: int = 0
    incarnations: int = 0
    aborted_outputs: int = 0  # output records in the log that read_committed does not show
    errors: list[str] = field(default_factory=list)
    history: list[str] = field(default_factory=list)  # per incarnation: its batch size, commits, how it ended


def _create_topics(bootstrap: str, names: list[str], partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(n, num_partitions=partitions, replication_factor=1) for n in names])
    for future in futures.values():
        future.result(30)


def _write_input(bootstrap: str, topic: str, tag: str, records: int, partitions: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5, "log_level": 4})
    for i in range(records):
        producer.produce(topic, key=b"k%d" % i, value=f"{tag}-{i}".encode(), partition=i % partitions)
    if producer.flush(60) != 0:
        raise RuntimeError(f"{tag}: the input was not all acknowledged")


def read_topic(bootstrap: str, topic: str, isolation: str, timeout: float = 60.0) -> list:
    """Every record of ``topic`` visible at ``isolation``, read to the end of each partition."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{os.getpid()}-{time.monotonic_ns()}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        partitions = sorted(consumer.list_topics(topic, timeout=30).topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions}
        at_end = {p for p in partitions if ends[p] == 0}
        out = []
        deadline = time.monotonic() + timeout
        while len(at_end) < len(partitions):
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading {topic} ({isolation}) did not reach the end of {set(partitions) - at_end}")
            for m in consumer.consume(num_messages=500, timeout=0.5):
                if m.error() is not None:
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        position = consumer.position([TopicPartition(topic, m.partition())])[0].offset
                        if position >= ends[m.partition()]:
                            at_end.add(m.partition())
                    continue
                out.append(m)
        return out
    finally:
        consumer.close()


def _spawn(bootstrap: str, run_tag: str, subscribe: bool, batch: int, pace_ms: int) -> subprocess.Popen[str]:
    args = [
        sys.executable,
        "-m",
        "tools.reliability.eos",
        "process",
        "--bootstrap-server",
        bootstrap,
        "--input",
        f"{run_tag}-in",
        "--output",
        f"{run_tag}-out",
        "--group",
        f"{run_tag}-group",
        "--transactional-id",
        f"{run_tag}-txn",
        "--batch",
        str(batch),
        "--pace-ms",
        str(pace_ms),
    ]
    if subscribe:
        args.append("--subscribe")
    return subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, env=_env(), cwd=REPO
    )


def _watch(
    child: subprocess.Popen[str], until: float, kill_after: float | None, counted_from: str
) -> tuple[str, list[str]]:
    """Read the child's lines until ``until`` (monotonic), its end, or ``D``; or kill it ``kill_after`` seconds
    after its first line starting with ``counted_from`` (``R``: ready; ``C``: its first commit). Return (why, lines).
    """
    assert child.stdout is not None
    fd = child.stdout.fileno()
    os.set_blocking(fd, False)
    buffer, lines = b"", []
    kill_at: float | None = None
    while True:
        now = time.monotonic()
        deadline = min(until, kill_at) if kill_at is not None else until
        if now >= deadline:
            return ("kill" if kill_at is not None and now >= kill_at else "timeout"), lines
        ready, _, _ = select.select([fd], [], [], deadline - now)
        if not ready:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            return "exited", lines
        buffer += chunk
        *complete, buffer = buffer.split(b"\n")
        for raw in complete:
            line = raw.decode(errors="replace")
            lines.append(line)
            if kill_after is not None and kill_at is None and line.startswith(counted_from):
                kill_at = time.monotonic() + kill_after
            if line == "D":
                return "done", lines


def eos_run(
    bootstrap: str,
    run: int,
    rng: random.Random,
    *,
    records: int = 300,
    partitions: int = 3,
    max_kills: int = 4,
    subscribe: bool = False,
    pace_ms: int = 150,
    run_timeout: float = 180.0,
    broker: Broker | None = None,
) -> RunResult:
    """One run: fresh topics, the program killed 1..max_kills times at random moments, then run to the end."""
    tag = f"eos-{run}-{rng.randrange(1 << 30)}"
    _create_topics(bootstrap, [f"{tag}-in", f"{tag}-out"], partitions)
    _write_input(bootstrap, f"{tag}-in", tag, records, partitions)
    result = RunResult(EosReport())
    kills_left = rng.randint(1, max_kills)
    deadline = time.monotonic() + run_timeout
    finished = False
    while not finished and time.monotonic() < deadline:
        batch = rng.choice((5, 20, 50))
        child = _spawn(bootstrap, tag, subscribe, batch, pace_ms)
        result.incarnations += 1
        # The kill moment: mostly while it works (from its first commit, within about the time its share of the
        # input takes), sometimes early (from ready: before or during its first transaction).
        work = records / batch * (pace_ms / 2000 + 0.03)
        counted_from = "R" if rng.random() < 0.25 else "C"
        delay = rng.uniform(0.0, 1.0 if counted_from == "R" else max(0.2, work)) if kills_left > 0 else None
        why, lines = _watch(child, deadline, delay, counted_from)
        if why == "kill" or (why == "done" and kills_left > 0):  # done before its kill moment: killed idle
            child.kill()
            if broker is not None and result.broker_kills == 0:  # the broker dies at the same moment, once a run
                child.wait()
                broker.kill9_and_restart()
                result.broker_kills += 1
            result.kills += 1
            kills_left -= 1
        elif why == "done":
            finished = True
            child.terminate()
        elif why == "timeout":
            child.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(30)
        if child.poll() is None:
            child.kill()
            child.wait()
        stderr = child.stderr.read() if child.stderr is not None else ""
        commits = [int(line.split()[1]) for line in lines if line.startswith("C ")]
        result.history.append(f"batch {batch}: {len(commits)} commits ({sum(commits)} records), {why}")
        if why == "exited":
            errors = [line for line in lines if line.startswith("E ")]
            result.errors.append(f"incarnation {result.incarnations} exited: {errors or stderr.strip()[-500:]}")
        for stream in (child.stdout, child.stderr):
            if stream is not None:
                stream.close()
    if not finished:
        result.errors.append(f"the program did not get through the input within {run_timeout:.0f} s")
    inputs = [
        InputRecord(m.partition(), m.offset(), m.value())
        for m in read_topic(bootstrap, f"{tag}-in", "read_uncommitted")
    ]
    committed = read_topic(bootstrap, f"{tag}-out", "read_committed")
    everything = read_topic(bootstrap, f"{tag}-out", "read_uncommitted")
    outputs = [
        OutputRecord(m.partition(), m.offset(), m.value(), parse_source(dict(m.headers() or []).get(SRC_HEADER)))
        for m in committed
    ]
    result.report = check_exactly_once(inputs, outputs)
    result.aborted_outputs = len(everything) - len(committed)
    return result


def eos_row(
    runs: int, root: Path, seed: int, *, records: int = 300, subscribe_every: int = 2, broker_kill_every: int = 5
):
    """The reliability runner's row: ``runs`` runs against one ``kafkalog serve`` (every ``subscribe_every``-th
    run with a subscribed consumer, the others with assigned partitions; in every ``broker_kill_every``-th run the
    broker is SIGKILLed with the program at its first kill and restarted: the transaction and group coordinators
    reload their state and finish or abort what was in flight)."""
    from .runner import Row

    row = Row("exactly-once consume-transform-produce under kill -9")
    rng = random.Random(seed)
    log_dir = root / "eos-broker"
    shutil.rmtree(log_dir, ignore_errors=True)
    broker = Broker(log_dir, {"num.partitions": "3", "transaction.state.log.num.partitions": "5"}).start()
    kills = incarnations = aborted = broker_kills = 0
    try:
        for run in range(runs):
            subscribe = subscribe_every > 0 and run % subscribe_every == subscribe_every - 1
            with_broker = broker_kill_every > 0 and run % broker_kill_every == broker_kill_every - 1
            result = eos_run(
                broker.bootstrap, run, rng, records=records, subscribe=subscribe, broker=broker if with_broker else None
            )
            broker_kills += result.broker_kills
            row.runs += 1
            row.acked += result.report.inputs
            row.lost += len(result.report.missing)
            row.corrupt += result.report.bad
            kills += result.kills
            incarnations += result.incarnations
            aborted += result.aborted_outputs
            if not result.report.ok:
                row.failures.append(f"run {run}: {result.report.describe()}")
            row.failures += [f"run {run}: {e}" for e in result.errors]
    finally:
        code = broker.stop()
        if code not in (0, None):
            row.failures.append(f"the broker exited with status {code}: {''.join(broker.lines[-5:])}")
    row.note = (
        f"{kills} kills ({broker_kills} with the broker), {incarnations} program starts; {aborted} output records "
        "of aborted transactions "
        "hidden from read_committed"
    )
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.reliability.eos")
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("process", help="the consume-transform-produce program (run by the harness)")
    p.add_argument("--bootstrap-server", required=True)
    p.add_argument("--input", required=True)
    p.add_argument("--output", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--transactional-id", required=True)
    p.add_argument("--batch", type=int, default=20)
    p.add_argument("--subscribe", action="store_true")
    p.add_argument("--pace-ms", type=int, default=0, help="sleep up to this long inside each transaction")
    r = commands.add_parser("run", help="the harness alone: N runs against a fresh kafkalog serve")
    r.add_argument("--runs", type=int, default=3)
    r.add_argument("--seed", type=int, default=1)
    r.add_argument("--records", type=int, default=300)
    args = parser.parse_args(argv)
    if args.command == "process":
        return process(
            args.bootstrap_server,
            args.input,
            args.output,
            args.group,
            args.transactional_id,
            args.batch,
            args.subscribe,
            args.pace_ms,
        )
    root = Path(tempfile.mkdtemp(prefix="kafkalog-eos-"))
    try:
        row = eos_row(args.runs, root, args.seed, records=args.records)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"{row.check}: {row.runs} runs, {row.acked} inputs, {row.lost} lost, {row.corrupt} bad; {row.note}")
    for failure in row.failures[:20]:
        print("FAILED:", failure)
    return 0 if row.ok else 1


if __name__ == "__main__":
    sys.exit(main())
