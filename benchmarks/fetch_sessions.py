"""Idle consumer fetches of many partitions: sessionless (full) against incremental (KIP-227) on ``kafkalog serve``.

Prints each kind's response size and the median round trip of 50 fetches at max_wait_ms 0 (no records: every
partition is caught up). Usage: ``PYTHONPATH=src:tests python -m benchmarks.fetch_sessions [--partitions N]``
(run it with ``nice -n 10`` on a shared machine).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

from kafka import KafkaAdminClient
from kafka.admin import NewTopic
from kafka.protocol.consumer import FetchRequest

from brokertools import BrokerProcess, RawClient, encode_request, fetch_request

TOPIC = "fetch-sessions"


def _request(session_id: int, epoch: int, partitions: range | list[int]) -> FetchRequest:
    return fetch_request(TOPIC, list(partitions), session_id=session_id, session_epoch=epoch)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=50)
    args = parser.parse_args()
    n = args.partitions
    with tempfile.TemporaryDirectory() as d, BrokerProcess(d) as broker:
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        admin.create_topics([NewTopic(TOPIC, n, 1)])
        admin.close()
        with RawClient(broker.bootstrap, timeout=60) as client:

            def timed(message: FetchRequest) -> tuple[float, int]:
                frame = encode_request(message, 12)
                start = time.perf_counter()
                client.send(frame)
                body = client.receive()
                return time.perf_counter() - start, len(body)

            full = _request(0, -1, range(n))
            for _ in range(5):
                timed(full)
            sessionless = [timed(full) for _ in range(args.rounds)]
            session_id = client.call(_request(0, 0, range(n)), 12).session_id
            incremental = [timed(_request(session_id, epoch, [])) for epoch in range(1, args.rounds + 1)]
    for name, runs in (("sessionless full", sessionless), ("incremental", incremental)):
        median_ms = statistics.median(t for t, _ in runs) * 1000
        print(f"{name:17s} {n} partitions: response {runs[0][1]:7d} bytes, median round trip {median_ms:.2f} ms")


if __name__ == "__main__":
    main()
