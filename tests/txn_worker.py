"""A consume-transform-produce worker for the transaction tests (run as a separate process): reads ``in`` with
read_committed in group ``eos``, copies each batch of values to ``out`` and commits the consumed offsets in the
same transaction (confluent-kafka's send_offsets_to_transaction). Exits after 10 s without input.

usage: python txn_worker.py BOOTSTRAP
"""

from __future__ import annotations

import sys

from confluent_kafka import Consumer, Producer, TopicPartition


def main(bootstrap: str) -> None:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "eos",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "log_level": 2,
        }
    )
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": "eos-worker",
            # Kafka's default: a broker SIGKILLed and restarted under load can take more than 10 s to come back, and a
            # transaction that outlives its timeout meanwhile is aborted with an epoch bump, fencing this worker.
            "transaction.timeout.ms": 60000,
            "log_level": 2,
        }
    )
    producer.init_transactions(60)
    consumer.subscribe(["in"])
    idle = 0
    while idle < 20:
        messages = [m for m in consumer.consume(20, 0.5) if not m.error()]
        if not messages:
            idle += 1
            continue
        idle = 0
        producer.begin_transaction()
        positions: dict[tuple[str, int], int] = {}
        for message in messages:
            producer.produce("out", message.value())
            positions[(message.topic(), message.partition())] = message.offset() + 1
        offsets = [TopicPartition(topic, partition, offset) for (topic, partition), offset in positions.items()]
        producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 60)
        producer.commit_transaction(60)
    consumer.close()
    print("worker done", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
