"""kill -9 of ``kafkalog serve`` while real clients work (issue 23's reliability rows; quick form in
tests/test_broker_kill9.py).

One cycle: a fresh log dir and a broker on a fixed loopback port (kept across restarts, so the clients'
bootstrap stays valid); an idempotent confluent-kafka (librdkafka) producer sends with acks=all to a topic of
three partitions, and a consumer-group member reads it and commits its positions synchronously every 0.2 s.
Each *run* is one round: after a random 0.3-1.5 s the broker is SIGKILLed, restarted on the same log dir (an
unclean recovery), and the clients carry on. In every other round the consumer goes away just before the kill
(closed without a last commit) and a new member of the same group takes over after the restart, so its first
record of each partition shows where the group resumed. At the end of a cycle the producer flushes, the
consumer drains to the log end and commits, the broker stops cleanly, and tools.cluster.checker reads the log
dir read-only. The row counts:

- lost: a record the producer was told is written (acks=all) that is missing, or at another offset; a commit the
  broker acknowledged before a kill that the group's committed offsets (read after each restart) no longer reach;
- corrupt: a record duplicated in the log (an idempotent producer's retries after a restart must be recognised
  from the recovered producer state: none may be appended twice), reordered, or never sent; a group that resumed
  below its last acknowledged commit or above its last attempted one; a record of the log never delivered to the
  group (a consumer that skipped ahead);
- failures also include records never acknowledged (message.timeout.ms is 120 s, the broker is back in seconds).

Both flush policies are run: ``flush.messages=1`` (an fsync before each produce is answered) and Kafka's default
(no fsync on the produce path). kill -9 ends the process, not the machine: the page cache keeps every write the
process made, so the default policy must also lose nothing acknowledged here; only a power loss could take
unflushed writes, which this check does not simulate.
"""

from __future__ import annotations

import random
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from tools.cluster.brokers import ClusterBroker
from tools.cluster.checker import ProducerLog, check, value_of

from .runner import Row

TOPIC = "kill9"
PARTITIONS = 3
GROUP = "kill9-readers"
RATE_PER_S = 400.0
ROUNDS_PER_CYCLE = 10


class Broker(ClusterBroker):
    """One ``kafkalog serve`` on a fixed port, no ZooKeeper: the tools' cluster broker without its cluster."""

    def __init__(self, log_dir: Path, overrides: dict[str, str]) -> None:
        super().__init__(0, log_dir, "", overrides)
        del self.settings["zookeeper.connect"]
        del self.settings["broker.id"]


# ----- the clients ---------------------------------------------------------------------------------------------
class Producing(threading.Thread):
    """An idempotent acks=all producer sending ``<name>:<seq>`` at a steady rate until stopped, then flushing."""

    def __init__(self, bootstrap: str, name: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap = bootstrap
        self.name_prefix = name
        self.log = ProducerLog()
        self.stop_event = threading.Event()
        self.fatal: str | None = None
        self._lock = threading.Lock()

    def run(self) -> None:
        from confluent_kafka import KafkaException, Producer

        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                "message.timeout.ms": 120000,
                "request.timeout.ms": 5000,
                "retry.backoff.ms": 50,
                "reconnect.backoff.ms": 50,
                "reconnect.backoff.max.ms": 250,
                "log_level": 2,
            }
        )

        def report(err, msg) -> None:  # type: ignore[no-untyped-def]
            with self._lock:
                if err is None:
                    self.log.acked.append((msg.partition(), msg.offset(), bytes(msg.value())))
                else:
                    self.log.failed.append((bytes(msg.value()), err.name()))
                    if err.fatal():
                        self.fatal = f"fatal producer error: {err}"

        started = time.monotonic()
        seq = 0
        try:
            while not self.stop_event.is_set() and self.fatal is None:
                value = value_of(self.name_prefix, seq)
                try:
                    producer.produce(TOPIC, value=value, callback=report)
                except BufferError:
                    producer.poll(0.05)
                    continue
                self.log.attempted.add(value)
                seq += 1
                producer.poll(0)
                time.sleep(max(0.0, started + seq / RATE_PER_S - time.monotonic()))
            left = producer.flush(150)
            if left:
                self.fatal = f"{left} records still unacknowledged after flushing for 150 s"
        except KafkaException as e:
            self.fatal = f"producer error: {e}"


@dataclass
class Consumed:
    """What the group's members received and committed, for the checks."""

    offsets: dict[int, set[int]] = field(default_factory=dict)  # partition -> offsets delivered
    deliveries: int = 0
    acked_commit: dict[int, int] = field(default_factory=dict)  # last commit the broker acknowledged
    attempted_commit: dict[int, int] = field(default_factory=dict)  # last commit sent
    first_after_join: dict[int, int] = field(default_factory=dict)  # the current member's first offsets


class Consuming(threading.Thread):
    """One member of GROUP: polls, records, commits synchronously every 0.2 s; ``abandon`` closes it without a
    last commit (as a crashed consumer leaves its group)."""

    def __init__(self, bootstrap: str, consumed: Consumed) -> None:
        super().__init__(daemon=True)
        self.bootstrap = bootstrap
        self.consumed = consumed
        self.stop_event = threading.Event()
        self.final_commit = True
        self.error: str | None = None

    def run(self) -> None:
        from confluent_kafka import Consumer, KafkaException

        c = self.consumed
        c.first_after_join = {}
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": GROUP,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "session.timeout.ms": 10000,
                "heartbeat.interval.ms": 500,
                "reconnect.backoff.ms": 50,
                "reconnect.backoff.max.ms": 250,
                "log_level": 2,
            }
        )
        consumer.subscribe([TOPIC])
        next_commit = time.monotonic() + 0.2
        try:
            while not self.stop_event.is_set():
                message = consumer.poll(0.1)
                if message is not None and message.error() is None:
                    p, offset = message.partition(), message.offset()
                    c.offsets.setdefault(p, set()).add(offset)
                    c.first_after_join.setdefault(p, offset)
                    c.deliveries += 1
                if time.monotonic() >= next_commit:
                    self._commit(consumer)
                    next_commit = time.monotonic() + 0.2
            if self.final_commit:
                self._commit(consumer)
        except KafkaException as e:
            self.error = f"consumer error: {e}"
        finally:
            consumer.close()

    def _commit(self, consumer) -> None:  # type: ignore[no-untyped-def]
        from confluent_kafka import KafkaException

        assignment = consumer.assignment()
        if not assignment:
            return
        positions = {tp.partition: tp.offset for tp in consumer.position(assignment) if tp.offset >= 0}
        if not positions:
            return
        for p, offset in positions.items():
            self.consumed.attempted_commit[p] = max(self.consumed.attempted_commit.get(p, 0), offset)
        try:
            done = consumer.commit(asynchronous=False)
        except KafkaException:
            return  # the broker is down or the group is rebalancing: the next commit covers it
        for tp in done or []:
            if tp.error is None and tp.offset >= 0:
                self.consumed.acked_commit[tp.partition] = max(
                    self.consumed.acked_commit.get(tp.partition, 0), tp.offset
                )


def _end_offsets(bootstrap: str) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": "kill9-probe", "log_level": 2})
    try:
        return {p: reader.get_watermark_offsets(TopicPartition(TOPIC, p), 10)[1] for p in range(PARTITIONS)}
    finally:
        reader.close()


def _create_topic(bootstrap: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(30)


@dataclass
class _Kill9Row(Row):
    """A row that also counts deliveries to the group and records in the logs, for its note."""

    deliveries: int = 0
    records: int = 0


# ----- one cycle -------------------------------------------------------------------------------------------------
def cycle(
    row: _Kill9Row, directory: Path, rounds: int, flush_messages: int | None, rng: random.Random, tag: str
) -> None:
    """``rounds`` kill -9 rounds on a fresh log dir, then the checks (added to ``row``)."""
    shutil.rmtree(directory, ignore_errors=True)
    overrides = {
        "num.partitions": str(PARTITIONS),
        "offsets.topic.num.partitions": "3",
        "group.initial.rebalance.delay.ms": "0",
    }
    if flush_messages is not None:
        overrides["log.flush.interval.messages"] = str(flush_messages)
    broker = Broker(directory / "logs", overrides)
    broker.start()
    consumed = Consumed()
    producer: Producing | None = None
    consumer: Consuming | None = None
    try:
        _create_topic(broker.bootstrap)
        producer = Producing(broker.bootstrap, tag)
        producer.start()
        consumer = Consuming(broker.bootstrap, consumed)
        consumer.start()
        for round_no in range(rounds):
            time.sleep(rng.uniform(0.3, 1.5))
            swap = round_no % 2 == 1
            if swap:  # the member goes away without a last commit, then the broker dies
                consumer.final_commit = False
                consumer.stop_event.set()
                consumer.join(30)
            acked_before = dict(consumed.acked_commit)
            broker.kill()
            row.runs += 1
            time.sleep(rng.uniform(0.0, 0.3))
            broker.start()
            _check_commits_kept(row, broker.bootstrap, acked_before, f"{tag} round {round_no}")
            if swap:
                acked, attempted = dict(consumed.acked_commit), dict(consumed.attempted_commit)
                consumer = Consuming(broker.bootstrap, consumed)
                consumer.start()
                _check_resume(row, consumed, acked, attempted, f"{tag} round {round_no}")
        producer.stop_event.set()
        producer.join(200)
        ends = _end_offsets(broker.bootstrap)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and any(
            len(consumed.offsets.get(p, ())) < end or max(consumed.offsets.get(p, {-1})) < end - 1
            for p, end in ends.items()
        ):
            time.sleep(0.1)
        consumer.stop_event.set()
        consumer.join(30)
    finally:
        if producer is not None:
            producer.stop_event.set()
        if consumer is not None:
            consumer.stop_event.set()
        broker.stop()
    if producer.fatal:
        row.failures.append(f"{tag}: {producer.fatal}")
    if consumer.error:
        row.failures.append(f"{tag}: {consumer.error}")
    log = producer.log
    row.acked += len(log.acked)
    if log.failed:
        row.failures.append(f"{tag}: {len(log.failed)} records not acknowledged, e.g. {log.failed[:2]}")
    report = check({0: directory / "logs"}, TOPIC, log, range(PARTITIONS))
    row.lost += len(report.lost)
    problems = report.duplicated + report.reordered + report.phantom + report.diverged
    row.corrupt += len(problems)
    row.failures += [f"{tag}: {p}" for p in (report.lost + problems)[:10]]
    for p in range(PARTITIONS):
        end = report.committed.get(p, 0)
        missing = set(range(end)) - consumed.offsets.get(p, set())
        if missing:
            row.corrupt += 1
            row.failures.append(f"{tag}: partition {p}: {len(missing)} records never delivered to the group")
    row.deliveries += consumed.deliveries
    row.records += sum(report.committed.values())


def _check_commits_kept(row: Row, bootstrap: str, acked: dict[int, int], where: str) -> None:
    """After a restart the group's committed offsets (OffsetFetch, from outside the group) are at least the last
    ones the broker acknowledged before the kill: an acknowledged commit survives kill -9 like a record."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    if not acked:
        return
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False, "log_level": 2})
    try:
        committed = reader.committed([TopicPartition(TOPIC, p) for p in acked], timeout=30)
    except KafkaException as e:
        row.failures.append(f"{where}: the committed offsets could not be read after the restart: {e}")
        return
    finally:
        reader.close()
    for tp in committed:
        if tp.offset < acked[tp.partition]:
            row.lost += 1
            row.failures.append(
                f"{where}: partition {tp.partition} committed offset {tp.offset} after the restart, "
                f"{acked[tp.partition]} acknowledged before"
            )


def _check_resume(row: Row, consumed: Consumed, acked: dict[int, int], attempted: dict[int, int], where: str) -> None:
    """The new member's first record of each partition: at a committed offset, never below the last commit the
    broker acknowledged before the kill, never above the last one sent (a commit in flight may or may not have
    been written)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not all(p in consumed.first_after_join for p in acked):
        time.sleep(0.05)
    for p, low in acked.items():
        first = consumed.first_after_join.get(p)
        high = attempted.get(p, low)
        if first is None:
            continue  # nothing new on that partition yet: the final drain checks it
        if not low <= first <= high:
            row.corrupt += 1
            row.failures.append(f"{where}: partition {p} resumed at {first}, committed range [{low}, {high}]")


def broker_kill9(runs: int, flush_messages: int | None, root: Path, seed: int) -> Row:
    """``runs`` kill -9 rounds of ``kafkalog serve`` under a producer and a consumer group (cycles of
    ROUNDS_PER_CYCLE on a fresh log dir)."""
    label = "flush.messages=1" if flush_messages == 1 else "default flush policy"
    row = _Kill9Row(f"kill -9 of kafkalog serve, librdkafka idempotent acks=all + group, {label}")
    rng = random.Random(seed)
    done = 0
    index = 0
    while done < runs:
        rounds = min(ROUNDS_PER_CYCLE, runs - done)
        cycle(
            row, root / f"broker-kill9-{flush_messages or 'default'}-{index}", rounds, flush_messages, rng, f"c{index}"
        )
        shutil.rmtree(root / f"broker-kill9-{flush_messages or 'default'}-{index}", ignore_errors=True)
        done += rounds
        index += 1
    delivered, records = row.deliveries, row.records
    row.note = (
        f"{index} cycles; {records} records in the logs, {delivered} deliveries to the group "
        f"({delivered - records} redelivered after resuming at a commit); page cache survives kill -9"
    )
    return row
