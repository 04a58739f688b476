"""How long the first produce to many new partitions holds ``kafkalog serve``'s event loop (issue 23).

Starts a broker on a free loopback port, creates one topic of ``--partitions`` partitions (CreateTopics), waits
``--settle`` seconds for the creation's background writes, then sends one record to every partition in a single
Produce request (acks=1) on one connection while a second connection sends ApiVersions back to back. The loop
is held for at least as long as the slowest ApiVersions round trip: that maximum is the figure reported, with
the produce's own round trip and the CreateTopics time. Prints one JSON line.

    PYTHONPATH=src:. python -m tools.first_produce_stall --partitions 2000
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from pathlib import Path


def _produce_request(topic: str, partitions: int):
    from kafka.protocol.producer import ProduceRequest

    from kafkalog.record import RecordBatchBuilder

    def one_record() -> bytes:
        builder = RecordBatchBuilder()
        builder.append(None, b"first", None)
        return builder.build()

    P = ProduceRequest.TopicProduceData
    data = [P.PartitionProduceData(index=p, records=one_record()) for p in range(partitions)]
    return ProduceRequest(
        transactional_id=None, acks=1, timeout_ms=60_000, topic_data=[P(name=topic, partition_data=data)]
    )


def measure(partitions: int, settle: float, log_dir: Path) -> dict:
    from kafka.protocol.metadata import ApiVersionsRequest

    from benchmarks.bench_scale import create_topics
    from tests.brokertools import BrokerProcess, RawClient

    with BrokerProcess(log_dir) as broker:
        created = create_topics(broker.bootstrap, ["fresh"], partitions, 1)[0]
        time.sleep(settle)
        checkpoints_before = sum(1 for _ in log_dir.glob("fresh-*/leader-epoch-checkpoint"))
        stop = threading.Event()
        rtts: list[float] = []

        def ping() -> None:
            with RawClient(broker.bootstrap, timeout=120) as client:
                request = ApiVersionsRequest(version=3, client_software_name="stall", client_software_version="1")
                n = 0
                while not stop.is_set():
                    n += 1
                    t0 = time.perf_counter()
                    client.call(request, 3, correlation_id=n)
                    rtts.append(time.perf_counter() - t0)
                    time.sleep(0.002)

        pinger = threading.Thread(target=ping, daemon=True)
        pinger.start()
        deadline = time.monotonic() + 60
        while len(rtts) < 20 and time.monotonic() < deadline:  # the loop answering before the produce
            time.sleep(0.05)
        baseline = max(rtts) if rtts else 0.0
        before = len(rtts)
        with RawClient(broker.bootstrap, timeout=120) as producer:
            t0 = time.perf_counter()
            response = producer.call(_produce_request("fresh", partitions), 9)
            produce_s = time.perf_counter() - t0
            time.sleep(0.5)
            between = len(rtts)
            t0 = time.perf_counter()
            producer.call(_produce_request("fresh", partitions), 9, correlation_id=2)
            second_s = time.perf_counter() - t0
        time.sleep(0.5)
        stop.set()
        pinger.join(10)
        errors = [p for t in response.responses for p in t.partition_responses if p.error_code != 0]
        checkpoints = sum(1 for _ in log_dir.glob("fresh-*/leader-epoch-checkpoint"))
    during, second = rtts[before:between], rtts[between:]
    return {
        "partitions": partitions,
        "create_topics_s": round(created, 3),
        "produce_rtt_s": round(produce_s, 3),
        "api_versions_max_rtt_s_idle": round(baseline, 4),
        "api_versions_max_rtt_s_during_produce": round(max(during), 4) if during else None,
        "api_versions_calls_during": len(during),
        "second_produce_rtt_s": round(second_s, 3),
        "api_versions_max_rtt_s_during_second_produce": round(max(second), 4) if second else None,
        "checkpoints_before_produce": checkpoints_before,
        "produce_errors": len(errors),
        "checkpoints_on_disk": checkpoints,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=2000)
    parser.add_argument("--settle", type=float, default=5.0, help="seconds between CreateTopics and the produce")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="first-produce-") as tmp:
        print(json.dumps(measure(args.partitions, args.settle, Path(tmp) / "logs")))


if __name__ == "__main__":
    main()
