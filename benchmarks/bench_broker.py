"""The broker: throughput and latency of ``kafkalog serve`` with a real client (librdkafka via confluent-kafka).

A ``kafkalog serve`` subprocess on a fresh log dir in the scratch dir; the client runs in this process.

- produce throughput (after an untimed warm-up produce): N records (16-byte keys, 100-byte values) with
  acks=1, linger.ms=5, lz4 and none, timed from the first produce() to the end of flush(); every delivery
  report must be error-free.
- consume throughput: the same records read back from offset 0 with an assigned consumer (sessionless
  fetches, zero-copy sends), timed to the last record; the count and the last value are checked.
- request latency: ApiVersions and a one-record acks=1 Produce, each sent alone on one connection and
  answered, many times: median and 99th percentile.

The performance issue sets the goals; this module records what the broker gives now.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from . import common


@dataclass(frozen=True)
class Params:
    records: int
    latency_rounds: int


FULL = Params(records=500_000, latency_rounds=2000)
QUICK = Params(records=5_000, latency_rounds=100)
VALUE_BYTES = 100
KEY_BYTES = 16


def _produce(bootstrap: str, topic: str, n: int, codec: str) -> float:
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "1",
            "linger.ms": 5,
            "compression.type": codec,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    errors = []

    def report(err, _msg):
        if err is not None:
            errors.append(err)

    value = b"v" * VALUE_BYTES
    start = time.perf_counter()
    for i in range(n):
        while True:
            try:
                producer.produce(topic, key=b"%016d" % i, value=value, on_delivery=report)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 10_000 == 0:
            producer.poll(0)
    left = producer.flush(120)
    elapsed = time.perf_counter() - start
    if left or errors:
        raise AssertionError(f"produce failed: {left} undelivered, errors {errors[:3]}")
    return elapsed


def _consume(bootstrap: str, topic: str, n: int) -> float:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench",
            "enable.auto.commit": False,
            "fetch.max.bytes": 50 << 20,
            "max.partition.fetch.bytes": 10 << 20,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    count, last = 0, None
    start = time.perf_counter()
    deadline = start + 300
    while count < n and time.perf_counter() < deadline:
        for m in consumer.consume(1000, 0.05):
            if m.error() is None:
                count += 1
                last = m.key()
    elapsed = time.perf_counter() - start
    consumer.close()
    if count != n or last != b"%016d" % (n - 1):
        raise AssertionError(f"consumed {count} of {n} records, last key {last!r}")
    return elapsed


def _latency(bootstrap: str, rounds: int) -> dict[str, dict[str, float]]:
    from kafka.protocol.metadata import ApiVersionsRequest
    from kafka.protocol.producer import ProduceRequest

    from kafkalog.record import RecordBatchBuilder
    from tests.brokertools import RawClient, encode_request

    builder = RecordBatchBuilder()
    builder.append(b"k", b"v" * VALUE_BYTES)
    P = ProduceRequest.TopicProduceData
    produce = encode_request(
        ProduceRequest(
            transactional_id=None,
            acks=1,
            timeout_ms=1000,
            topic_data=[P(name="latency", partition_data=[P.PartitionProduceData(index=0, records=builder.build())])],
        ),
        9,
    )
    versions = encode_request(ApiVersionsRequest(), 0)
    out = {}
    with RawClient(bootstrap) as client:
        for name, frame in (("ApiVersions v0", versions), ("Produce v9 acks=1, 1 record", produce)):
            times = []
            for _ in range(rounds):
                t0 = time.perf_counter()
                client.send(frame)
                client.receive()
                times.append(time.perf_counter() - t0)
            times.sort()
            out[name] = {"p50_ms": statistics.median(times) * 1e3, "p99_ms": times[int(len(times) * 0.99)] * 1e3}
    return out


def run(*, quick: bool = False, results_dir: Path, console: Console | None = None) -> dict[str, Any]:
    """Run the broker benchmark, write ``results_dir/broker.json``, print the tables; return the result."""
    from tests.brokertools import BrokerProcess

    console = console or Console()
    p = QUICK if quick else FULL
    scratch = common.Scratch("broker")
    try:
        with BrokerProcess(scratch.root / "logs", {"num.partitions": "1"}) as server:
            rows = []
            _produce(server.bootstrap, "warm-up", 10, "none")  # connections and metadata, untimed
            for codec in ("none", "lz4"):
                topic = f"bench-{codec}"
                produce_s = _produce(server.bootstrap, topic, p.records, codec)
                consume_s = _consume(server.bootstrap, topic, p.records)
                payload = p.records * (KEY_BYTES + VALUE_BYTES)
                rows.append(
                    {
                        "codec": codec,
                        "records": p.records,
                        "produce_s": produce_s,
                        "produce_records_per_s": p.records / produce_s,
                        "produce_mb_per_s": payload / produce_s / 1e6,
                        "consume_s": consume_s,
                        "consume_records_per_s": p.records / consume_s,
                        "consume_mb_per_s": payload / consume_s / 1e6,
                    }
                )
            latency = _latency(server.bootstrap, p.latency_rounds)
            code = server.stop()
            if code != 0:
                raise AssertionError(f"kafkalog serve exited {code}:\n{server.log[-2000:]}")
    finally:
        scratch.cleanup()
    table = Table(title=f"kafkalog serve with librdkafka ({p.records:,} records of {KEY_BYTES}+{VALUE_BYTES} bytes)")
    for col in ("codec", "produce rec/s", "produce MB/s", "consume rec/s", "consume MB/s"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(
            r["codec"],
            f"{r['produce_records_per_s']:,.0f}",
            f"{r['produce_mb_per_s']:.1f}",
            f"{r['consume_records_per_s']:,.0f}",
            f"{r['consume_mb_per_s']:.1f}",
        )
    console.print(table)
    lat = Table(title="Request latency (one connection, one request at a time)")
    for col in ("request", "p50 ms", "p99 ms"):
        lat.add_column(col, justify="right")
    for name, figures in latency.items():
        lat.add_row(name, f"{figures['p50_ms']:.3f}", f"{figures['p99_ms']:.3f}")
    console.print(lat)
    goals = common.goals_table()
    goals.add_row("set by the performance issue", "see the tables", common.ok_mark(None))
    console.print(goals)
    result = {
        "benchmark": "broker",
        "quick": quick,
        "platform": common.platform_info(),
        "throughput": rows,
        "latency": latency,
    }
    common.save_result(results_dir, "broker", result)
    return result
