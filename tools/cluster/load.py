"""A confluent-kafka (librdkafka) producer whose every attempt and acknowledgement is recorded for the checker."""

from __future__ import annotations

import threading
import time

from .checker import ProducerLog, value_of


def produce(
    bootstrap: str,
    topic: str,
    name: str,
    count: int,
    *,
    acks: str = "all",
    stop: threading.Event | None = None,
    rate_per_s: float | None = None,
    extra: dict[str, object] | None = None,
    timeout_s: float = 120.0,
) -> ProducerLog:
    """Send ``count`` records ``name:0..count-1`` (round-robin over partitions by librdkafka's partitioner with
    no key), wait for every delivery report, and return what was attempted, acknowledged and failed."""
    from confluent_kafka import Producer

    config: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "acks": acks,
        "linger.ms": 5,
        "enable.idempotence": acks == "all",
        "message.timeout.ms": 60000,
        "request.timeout.ms": 10000,
        "retry.backoff.ms": 100,
        "topic.metadata.refresh.interval.ms": 1000,
        "log_level": 3,
    }
    config.update(extra or {})
    result = ProducerLog()
    lock = threading.Lock()

    def report(err, msg) -> None:  # type: ignore[no-untyped-def]
        with lock:
            if err is None:
                result.acked.append((msg.partition(), msg.offset(), bytes(msg.value())))
            else:
                result.failed.append((bytes(msg.value()), err.name()))

    producer = Producer(config)
    interval = 1.0 / rate_per_s if rate_per_s else 0.0
    started = time.monotonic()
    for seq in range(count):
        if stop is not None and stop.is_set():
            break
        value = value_of(name, seq)
        result.attempted.add(value)
        while True:
            try:
                producer.produce(topic, value=value, callback=report)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
        if interval:
            time.sleep(max(0.0, started + (seq + 1) * interval - time.monotonic()))
    producer.flush(timeout_s)
    return result
