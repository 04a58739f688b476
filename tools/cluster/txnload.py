"""A confluent-kafka transactional producer against a cluster, and the exactly-once check of what it committed.

``run_transactions`` commits numbered batches (``b<N>-<i>`` values spread over the topic's partitions), one
transaction each, going on through coordinator and leader failures as an application does: a commit that fails
with a retriable error is called again, abortable errors abort and redo the batch, retriable ones redo it, fatal
ones (a fenced producer) re-create the producer with the same transactional.id. A batch whose commit raised is
looked up with a read_committed consumer before it is redone, so the producer never writes a batch that did commit
twice. ``check_exactly_once`` then compares what a read_committed consumer reads with what the producer was told
was committed.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class TxnLog:
    """What the producer was told: the batches committed, and how often it had to recover."""

    committed: list[int] = field(default_factory=list)
    aborted: int = 0  # transactions it aborted after an abortable error
    producers: int = 0  # producer instances (1 + re-creations after fatal errors)
    errors: list[str] = field(default_factory=list)


def live_bootstrap(cluster: Any) -> str:
    return ",".join(b.bootstrap for b in cluster.brokers.values() if b.alive)


def transactional_producer(bootstrap: str, txn_id: str) -> Any:
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": txn_id,
            "transaction.timeout.ms": 30000,
            "message.timeout.ms": 30000,
            "linger.ms": 5,
            "log_level": 2,
        }
    )
    producer.init_transactions(60)
    return producer


def read_all(cluster: Any, topic: str, partitions: int, isolation: str = "read_committed") -> dict[int, list[str]]:
    """Every record value a consumer with ``isolation`` reads from each partition, to its end (60 s at most)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": live_bootstrap(cluster),
            "group.id": f"reader-{time.monotonic_ns()}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": True,
            "log_level": 2,
        }
    )
    out: dict[int, list[str]] = {p: [] for p in range(partitions)}
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        done: set[int] = set()
        deadline = time.monotonic() + 60
        while len(done) < partitions and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == -191:  # _PARTITION_EOF
                    done.add(msg.partition())
                continue
            out[msg.partition()].append(msg.value().decode())
        if len(done) < partitions:
            raise TimeoutError(f"only partitions {sorted(done)} of {topic} read to their end")
    finally:
        consumer.close()
    return out


def run_transactions(
    cluster: Any,
    topic: str,
    txn_id: str,
    batches: int,
    per_batch: int,
    partitions: int,
    log: TxnLog,
    deadline_s: float = 600.0,
    stop: threading.Event | None = None,
) -> TxnLog:
    """Commit ``batches`` transactions of ``per_batch`` records each (fewer if ``stop`` is set first: then every
    transaction begun is finished); ``log`` fills as it goes (another thread may watch ``log.committed`` to time its
    faults)."""
    from confluent_kafka import KafkaException

    producer = transactional_producer(cluster.bootstrap, txn_id)
    log.producers += 1
    batch = 0
    deadline = time.monotonic() + deadline_s
    while batch < batches and time.monotonic() < deadline and not (stop is not None and stop.is_set()):
        try:
            producer.begin_transaction()
            for i in range(per_batch):
                producer.produce(topic, value=f"b{batch}-{i}".encode(), partition=i % partitions)
            _commit(producer)
            log.committed.append(batch)
            batch += 1
            continue
        except KafkaException as e:
            error = e.args[0]
            try:
                if error.txn_requires_abort():
                    producer.abort_transaction(60)
                    log.aborted += 1
                elif not error.retriable():  # fatal (fenced): a new producer with the same id
                    producer = transactional_producer(cluster.bootstrap, txn_id)
                    log.producers += 1
            except KafkaException as again:  # the recovery failed too: start over with a new producer
                log.errors.append(f"batch {batch}: {again.args[0]}")
                producer = transactional_producer(cluster.bootstrap, txn_id)
                log.producers += 1
        seen = {v.split("-")[0] for vs in read_all(cluster, topic, partitions).values() for v in vs}
        if f"b{batch}" in seen:  # the commit did happen before the error
            log.committed.append(batch)
            batch += 1
    if batch < batches and not (stop is not None and stop.is_set()):
        log.errors.append(f"only {batch} of {batches} transactions committed in {deadline_s:.0f} s")
    return log


def _commit(producer: Any) -> None:
    """commit_transaction, called again after a retriable error as librdkafka asks (the outcome is then known)."""
    from confluent_kafka import KafkaException

    for attempt in range(10):
        try:
            producer.commit_transaction(60)
            return
        except KafkaException as e:
            if not e.args[0].retriable() or attempt == 9:
                raise


def check_exactly_once(values: list[str], committed: list[int], per_batch: int) -> dict[str, list[str]]:
    """What is wrong with the read_committed ``values``: committed batches missing or incomplete (lost), records
    read twice (duplicated), batches read that were never reported committed (phantom)."""
    counts: dict[str, int] = {}
    seen: set[str] = set()
    duplicated = []
    for value in values:
        if value in seen:
            duplicated.append(value)
        seen.add(value)
        counts[value.split("-")[0]] = counts.get(value.split("-")[0], 0) + 1
    wanted = {f"b{b}" for b in committed}
    lost = sorted(b for b in wanted if counts.get(b, 0) < per_batch)
    phantom = sorted(b for b in counts if b not in wanted)
    return {"lost": lost, "duplicated": duplicated, "phantom": phantom}


def settled_check(
    cluster: Any, topic: str, partitions: int, committed: list[int], per_batch: int, timeout_s: float = 30.0
) -> tuple[list[str], dict[str, list[str]]]:
    """Read ``topic`` with read_committed and check it, again until nothing committed is missing or ``timeout_s``
    passed: commit_transaction returns once the coordinator has prepared the commit, and the markers (which move
    the last stable offset) follow, so the last transaction may become readable a moment later."""
    deadline = time.monotonic() + timeout_s
    while True:
        values = [v for vs in read_all(cluster, topic, partitions).values() for v in vs]
        problems = check_exactly_once(values, committed, per_batch)
        if not problems["lost"] or time.monotonic() > deadline:
            return values, problems
        time.sleep(0.5)


def kill_when(condition: Any, action: Any, poll_s: float = 0.01) -> threading.Thread:
    """Run ``action`` on a thread once ``condition()`` holds."""

    def run() -> None:
        while not condition():
            time.sleep(poll_s)
        action()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread
