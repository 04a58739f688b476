"""An incremental fetch reads only the partitions of its session that may have news (an in-process broker whose
``ReplicaManager.fetch_messages`` is watched): caught-up partitions with an unchanged high watermark and log start
offset are not read, and a long poll over them still wakes when one of them gets records."""

from __future__ import annotations

import threading

from kafka import KafkaProducer

from brokertools import RawClient, fetch_request
from test_broker_fetch_encoding import _InProcessBroker

TOPIC = "idle"


def _request(session_id: int, epoch: int, offsets: dict[int, int], max_wait_ms: int = 0, min_bytes: int = 0):
    return fetch_request(
        TOPIC, offsets, session_id=session_id, session_epoch=epoch, max_wait_ms=max_wait_ms, min_bytes=min_bytes
    )


def _answered(response) -> dict[int, int]:
    """partition -> record bytes of a response."""
    return {p.partition_index: len(p.records or b"") for t in response.responses for p in t.partitions}


def test_incremental_fetch_skips_caught_up_partitions_and_still_wakes(tmp_path):
    with _InProcessBroker(tmp_path, zero_copy=True) as broker:
        server = broker.server
        server.log_manager.create_topic(TOPIC, 3)
        reads: list[list[int]] = []
        real = server.replica_manager.fetch_messages

        def watched(fetch_infos, *args, **kwargs):
            reads.append(sorted(tp.partition for tp in fetch_infos))
            return real(fetch_infos, *args, **kwargs)

        server.replica_manager.fetch_messages = watched
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
        try:
            producer.send(TOPIC, b"one", partition=1).get(30)
            with RawClient(broker.bootstrap, timeout=60) as c:
                full = c.call(_request(0, 0, {0: 0, 1: 0, 2: 0}), 12)
                sid = full.session_id
                assert sid > 0 and reads[-1] == [0, 1, 2] and _answered(full)[1] > 0
                # Every partition caught up (partition 1 moves past its record): nothing is read, nothing answered.
                reads.clear()
                assert _answered(c.call(_request(sid, 1, {1: 1}), 12)) == {}
                assert reads == [[]]
                # A record on partition 2: only partition 2 is read and answered.
                producer.send(TOPIC, b"two", partition=2).get(30)
                reads.clear()
                assert list(_answered(c.call(_request(sid, 2, {}), 12))) == [2]
                assert reads == [[2]]
                # Partition 2 caught up; a long poll over the idle session wakes on a record for partition 0.
                answer: list = []
                poll = threading.Thread(
                    target=lambda: answer.append(c.call(_request(sid, 3, {2: 1}, max_wait_ms=30_000, min_bytes=1), 12))
                )
                poll.start()
                producer.send(TOPIC, b"three", partition=0).get(30)
                poll.join(60)
                got = _answered(answer[0])
                assert list(got) == [0] and got[0] > 0
        finally:
            producer.close()
