"""One confluent-kafka (librdkafka) group consumer, run as its own process by test_broker_groups.py.

Usage: python group_member.py BOOTSTRAP GROUP TOPIC EVENTS_FILE ASSIGNOR [INSTANCE_ID]

ASSIGNOR is a classic client-side assignor (range, cooperative-sticky), or ``consumer`` for KIP-848's protocol.

Writes one JSON line per event to EVENTS_FILE (flushed at once, so a SIGKILLed member leaves what it did):
``assign`` / ``revoke`` with the partitions and a wall-clock time, ``msg`` with partition and offset, ``commit``.
Every consumed record's offset is committed synchronously before the next poll. SIGTERM closes the consumer
(which leaves the group) and exits.
"""

from __future__ import annotations

import json
import signal
import sys
import time

from confluent_kafka import Consumer, KafkaException


def main() -> None:
    bootstrap, group, topic, events_path, assignor = sys.argv[1:6]
    instance = sys.argv[6] if len(sys.argv) > 6 else None
    out = open(events_path, "a", buffering=1)  # noqa: SIM115 - line-buffered for the whole life of the process

    def event(kind: str, **fields) -> None:
        out.write(json.dumps({"event": kind, "t": time.time(), **fields}) + "\n")

    config = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "topic.metadata.refresh.interval.ms": 2000,
    }
    incremental = assignor in ("cooperative-sticky", "consumer")
    if assignor == "consumer":  # KIP-848: the broker assigns; session and heartbeat are the broker's configs
        config["group.protocol"] = "consumer"
    else:
        config.update(
            {"session.timeout.ms": 3000, "heartbeat.interval.ms": 300, "partition.assignment.strategy": assignor}
        )
    if instance:
        config["group.instance.id"] = instance
    consumer = Consumer(config)
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))

    def on_assign(c, partitions) -> None:
        event("assign", partitions=[p.partition for p in partitions])
        if incremental:
            c.incremental_assign(partitions)
        else:
            c.assign(partitions)

    def on_revoke(c, partitions) -> None:
        event("revoke", partitions=[p.partition for p in partitions])
        if incremental:
            c.incremental_unassign(partitions)
        else:
            c.unassign()

    consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_revoke)
    event("started")
    while not stopping:
        msg = consumer.poll(0.2)
        if msg is None or msg.error():
            continue
        event("msg", partition=msg.partition(), offset=msg.offset(), value=msg.value().decode())
        try:
            consumer.commit(message=msg, asynchronous=False)
        except KafkaException as e:  # e.g. REBALANCE_IN_PROGRESS: the record may be consumed again (at least once)
            event("commit_failed", partition=msg.partition(), offset=msg.offset(), error=str(e))
    consumer.close()
    event("closed")


if __name__ == "__main__":
    main()
