"""The long forms of the replication checks (issue 20), for ``make reliability``; the quick forms are
tests/test_replication.py.

- acks=all under failures: three brokers and a private ZooKeeper, a topic with replication factor 3 and
  min.insync.replicas=2; a confluent-kafka producer sends with acks=all while brokers are SIGKILLed and
  restarted round after round (the leader of partition 0 two rounds in three, another broker otherwise) and
  ZooKeeper itself is killed and restarted once under load. Then the cluster is stopped cleanly and the checker
  (tools.cluster.checker) reads every replica's log: lost, duplicated, reordered, phantom records and replicas
  whose bytes differ below the high watermark.
- rolling restarts: every broker in turn stopped with SIGTERM (controlled shutdown: the controller moves its
  leaderships first) and started again, round after round, under acks=all; not one record may fail (only
  retriable errors are allowed), and the checker must find every acknowledged record on every replica.
- figures: records/s with acks=1 and acks=all on the three brokers, and the longest time without an acknowledged
  acks=all record (one every 10 ms) when the leader is SIGKILLed, and when it is SIGTERMed (controlled shutdown).
"""

from __future__ import annotations

import random
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

from tools.cluster import zookeeper
from tools.cluster.brokers import ClusterBroker, LocalCluster
from tools.cluster.checker import ProducerLog, check
from tools.cluster.load import produce

from .runner import Row

TOPIC = "replicated"


def _create(cluster: LocalCluster, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 3, config={"min.insync.replicas": "2"})])[topic].result(60)
    cluster.wait_for(
        lambda: all(len(p["isr"]) == 3 and p["leader"] > 0 for p in cluster.metadata(topic).values()), 60, "full ISR"
    )


def kills_row(root: Path, rounds: int, records: int, seed: int) -> Row:
    row = Row(f"replication: acks=all, RF 3, min.insync 2, {rounds - 1} broker SIGKILLs + a ZooKeeper restart")
    rng = random.Random(seed)
    with LocalCluster(root / "kills") as cluster:
        _create(cluster, TOPIC, 3)
        out: dict[str, ProducerLog] = {}
        rate = max(50.0, records / (rounds * 4.0))
        sender = threading.Thread(
            target=lambda: out.setdefault("log", produce(cluster.bootstrap, TOPIC, "r", records, rate_per_s=rate))
        )
        sender.start()
        try:
            for i in range(rounds):
                time.sleep(rng.uniform(1.5, 4.0))
                if i == rounds // 2:
                    cluster.zookeeper.stop()
                    time.sleep(2.0)
                    cluster.zookeeper.start()
                    row.note += f"ZooKeeper restarted in round {i}; "
                    continue
                try:
                    leader = cluster.metadata(TOPIC)[0]["leader"]
                except Exception:
                    leader = -1
                victim = leader if leader > 0 and rng.random() < 2 / 3 else rng.choice(list(cluster.brokers))
                cluster.brokers[victim].kill()
                row.runs += 1
                time.sleep(rng.uniform(0.2, 2.0))
                cluster.brokers[victim].start()
        finally:
            sender.join(600)
            for broker in cluster.brokers.values():
                if not broker.alive:
                    broker.start()
        producers = out.get("log", ProducerLog())
        row.acked = len(producers.acked)
        if producers.failed:
            row.failures.append(f"{len(producers.failed)} records not acknowledged: {producers.failed[:3]}")
        cluster.wait_for(
            lambda: all(len(p["isr"]) == 3 for p in cluster.metadata(TOPIC).values()), 120, "the ISR to be whole"
        )
        for broker in cluster.brokers.values():
            broker.stop()
        report = check({i: b.log_dir for i, b in cluster.brokers.items()}, TOPIC, producers, [0, 1, 2])
        row.lost = len(report.lost)
        row.corrupt = len(report.duplicated) + len(report.reordered) + len(report.phantom) + len(report.diverged)
        row.note += report.summary().split("\n")[0]
        if not report.ok:
            row.failures.append(report.summary())
    return row


def rolling_row(root: Path, rounds: int, records: int) -> Row:
    """Rolling restarts by SIGTERM under acks=all: no failed record, nothing lost."""
    row = Row(f"replication: acks=all, {rounds} rolling restart(s) of 3 brokers by SIGTERM (controlled shutdown)")
    with LocalCluster(root / "rolling") as cluster:
        _create(cluster, TOPIC, 3)
        out: dict[str, ProducerLog] = {}
        rate = max(50.0, records / (rounds * 3 * 3.0))
        sender = threading.Thread(
            target=lambda: out.setdefault("log", produce(cluster.bootstrap, TOPIC, "t", records, rate_per_s=rate))
        )
        sender.start()
        try:
            for _ in range(rounds):
                for broker in cluster.brokers.values():
                    time.sleep(1.0)
                    broker.stop()
                    row.runs += 1
                    broker.start()
                    cluster.wait_for(
                        lambda: all(len(p["isr"]) == 3 for p in cluster.metadata(TOPIC).values()), 120, "a whole ISR"
                    )
        finally:
            sender.join(600)
        producers = out.get("log", ProducerLog())
        row.acked = len(producers.acked)
        if producers.failed:
            row.failures.append(f"{len(producers.failed)} records failed: {producers.failed[:3]}")
        for broker in cluster.brokers.values():
            broker.stop()
        report = check({i: b.log_dir for i, b in cluster.brokers.items()}, TOPIC, producers, [0, 1, 2])
        row.lost = len(report.lost)
        row.corrupt = len(report.duplicated) + len(report.reordered) + len(report.phantom) + len(report.diverged)
        row.note = report.summary().split("\n")[0]
        if not report.ok:
            row.failures.append(report.summary())
    return row


def _failover_seconds(
    cluster: LocalCluster, topic: str, stop: Callable[[ClusterBroker], None]
) -> tuple[float, int, bool]:
    """A producer sends an acks=all record every 10 ms while the leader is stopped by ``stop``: (the longest time
    without an acknowledgement after the stop, the new leader, whether acknowledgements resumed)."""
    from confluent_kafka import Producer

    leader = cluster.metadata(topic)[0]["leader"]
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "acks": "all",
            "linger.ms": 0,
            "log_level": 3,
            "topic.metadata.refresh.interval.ms": 1000,
            "retry.backoff.ms": 50,
            "message.timeout.ms": 60000,
        }
    )
    acked: list[float] = []

    def sent(err, _msg) -> None:  # type: ignore[no-untyped-def]
        if err is None:
            acked.append(time.monotonic())

    stopped_at = None
    begin = time.monotonic()
    while time.monotonic() - begin < 60:
        now = time.monotonic()
        if stopped_at is None and now - begin >= 1.0:
            stopped_at = now
            stop(cluster.brokers[leader])
        producer.produce(topic, b"x", callback=sent)
        producer.poll(0.01)
        if stopped_at is not None and acked and acked[-1] > stopped_at and now - stopped_at > 8:
            break
    producer.flush(30)
    assert stopped_at is not None
    after = sorted(t for t in acked if t >= stopped_at)
    gaps = [b - a for a, b in zip([stopped_at, *after], after, strict=False)]
    new_leader = cluster.metadata(topic)[0]["leader"]
    cluster.brokers[leader].stop()  # a SIGTERMed broker may still be finishing its shutdown: wait for it
    cluster.brokers[leader].start()
    return (max(gaps) if gaps else 60.0), new_leader, bool(after)


def figures_row(root: Path, records: int) -> Row:
    """records/s with acks=1 and acks=all, and the failover time, on one 3-broker cluster."""
    row = Row("replication figures: 3 brokers on loopback, 100-byte records, linger.ms=5")
    with LocalCluster(root / "figures") as cluster:
        notes = []
        best: dict[str, float] = {}
        for i, acks in enumerate(("1", "all", "1", "all")):  # alternated, best of two: the machine is shared
            topic = f"rate-{acks}-{i}"
            _create(cluster, topic, 3)
            start = time.monotonic()
            result = produce(
                cluster.bootstrap, topic, "x" * 90, records, acks=acks, extra={"enable.idempotence": False}
            )
            elapsed = time.monotonic() - start
            row.runs += records
            row.acked += len(result.acked)
            best[acks] = max(best.get(acks, 0.0), len(result.acked) / elapsed)
        notes += [f"acks={acks}: {rate:,.0f} records/s" for acks, rate in best.items()]

        def sigterm(broker: ClusterBroker) -> None:  # not waiting for the exit: the producer goes on meanwhile
            assert broker.proc is not None
            broker.proc.send_signal(signal.SIGTERM)

        for how, stop in (("SIGKILLed", lambda b: b.kill()), ("SIGTERMed (controlled shutdown)", sigterm)):
            topic = f"failover-{how.split()[0].lower()}"
            _create(cluster, topic, 1)
            leader = cluster.metadata(topic)[0]["leader"]
            elapsed, new_leader, ok = _failover_seconds(cluster, topic, stop)
            notes.append(
                f"leader {leader} {how} under a record every 10 ms -> longest time without an acks=all "
                f"acknowledgement {elapsed:.2f} s, new leader {new_leader} (zookeeper.session.timeout.ms=4000)"
            )
            if not ok:
                row.failures.append(f"no produce was acknowledged within 60 s of the leader being {how}")
            cluster.wait_for(
                lambda t=topic: all(len(p["isr"]) == 3 for p in cluster.metadata(t).values()), 120, "a whole ISR"
            )
        row.note = "; ".join(notes)
    return row


def replication_rows(quick: bool, root: Path, seed: int = 1) -> list[Row]:
    missing = zookeeper.available()
    if missing is not None:
        return [Row("replication", failures=[f"no ZooKeeper: {missing}"])]
    if quick:
        return [kills_row(root, 4, 1500, seed)]
    return [kills_row(root, 16, 12000, seed), rolling_row(root, 3, 6000), figures_row(root, 20000)]
