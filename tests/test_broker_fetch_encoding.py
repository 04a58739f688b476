"""The Fetch response's hand-written encoding and its zero-copy send.

The encoder must produce the bytes Kafka's schema gives (kafka-python's generated FetchResponse is the
oracle), and the socket server must send record bytes with os.sendfile -- counted by wrapping os.sendfile --
while the copying path (for TLS later) sends the very same response bytes.
"""

from __future__ import annotations

import asyncio
import os
import random
import threading

import pytest
from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.producer import ProduceRequest

from brokertools import RawClient, encode_request
from kafkalog.broker.config import KafkaConfig
from kafkalog.broker.handlers.fetch import PartitionAnswer, encode_response
from kafkalog.broker.protocol import SMALL_REGION_BYTES, FileRegion
from kafkalog.broker.server import KafkaServer
from kafkalog.record import RecordBatchBuilder
from kafkalog.storage.file_records import EMPTY_SLICE, FileRecords


def _batch(values, compression="none") -> bytes:
    builder = RecordBatchBuilder(compression)
    for v in values:
        builder.append(None, v)
    return builder.build()


def _flatten(response) -> bytes:
    out = b""
    for part in response.parts:
        out += part.read() if isinstance(part, FileRegion) else part
    response.close()
    return out


@pytest.mark.parametrize("version", range(4, 13))
def test_hand_written_fetch_response_equals_kafkas_schema(tmp_path, version):
    records = _batch([b"one", b"two"]) + _batch([b"three"], "gzip")
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(b"\x00" * 7 + records)
    file = FileRecords.open(path, file_already_exists=True)
    try:
        region = file.slice(7, len(records))
        answers = [
            (
                "alpha",
                [
                    PartitionAnswer(0, 0, 10, 9, 2, [(77, 3), (78, 5)], region),
                    PartitionAnswer(1, 1, -1, -1, -1, None, EMPTY_SLICE),
                ],
            ),
            ("beta", [PartitionAnswer(3, 0, 0, 0, 0, [], EMPTY_SLICE)]),
        ]
        ours = _flatten(encode_response(version, answers))
    finally:
        file.close()
    T = FetchResponse.FetchableTopicResponse
    P = T.PartitionData
    A = P.AbortedTransaction
    oracle = FetchResponse(
        version=version,
        throttle_time_ms=0,
        error_code=0,
        session_id=0,
        responses=[
            T(
                topic="alpha",
                partitions=[
                    P(
                        partition_index=0,
                        error_code=0,
                        high_watermark=10,
                        last_stable_offset=9,
                        log_start_offset=2,
                        aborted_transactions=[A(producer_id=77, first_offset=3), A(producer_id=78, first_offset=5)],
                        preferred_read_replica=-1,
                        records=records,
                    ),
                    P(
                        partition_index=1,
                        error_code=1,
                        high_watermark=-1,
                        last_stable_offset=-1,
                        log_start_offset=-1,
                        aborted_transactions=None,
                        preferred_read_replica=-1,
                        records=b"",
                    ),
                ],
            ),
            T(
                topic="beta",
                partitions=[
                    P(
                        partition_index=3,
                        error_code=0,
                        high_watermark=0,
                        last_stable_offset=0,
                        log_start_offset=0,
                        aborted_transactions=[],
                        preferred_read_replica=-1,
                        records=b"",
                    ),
                ],
            ),
        ],
    )
    assert ours == oracle.encode(version=version)


class _InProcessBroker:
    """A KafkaServer on its own event loop thread, for tests that patch functions in this process."""

    def __init__(self, log_dir, zero_copy: bool) -> None:
        config = KafkaConfig({"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(log_dir)})
        self.server = KafkaServer(config, zero_copy=zero_copy)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.server.startup(), self.loop).result(30)
        host, port = self.server.bound_addresses[0]
        self.bootstrap = f"{host}:{port}"
        return self

    def __exit__(self, *exc):
        asyncio.run_coroutine_threadsafe(self.server.shutdown(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


def _fetch_frame(topic: str) -> bytes:
    T = FetchRequest.FetchTopic
    request = FetchRequest(
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=0,
        max_bytes=50 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        forgotten_topics_data=[],
        rack_id="",
        topics=[
            T(
                topic=topic,
                partitions=[
                    T.FetchPartition(
                        partition=0,
                        current_leader_epoch=-1,
                        fetch_offset=0,
                        last_fetched_epoch=-1,
                        log_start_offset=-1,
                        partition_max_bytes=10 << 20,
                    )
                ],
            )
        ],
    )
    return encode_request(request, 12, correlation_id=9)


@pytest.mark.parametrize(
    ("value_bytes", "sent_by_sendfile"),
    [(4000, True), (100, False)],
    ids=["large-region-sendfile", "small-region-copied"],
)
def test_fetch_sends_records_with_sendfile_and_copying_gives_the_same_bytes(
    tmp_path, monkeypatch, value_bytes, sent_by_sendfile
):
    """Regions above SMALL_REGION_BYTES go out with os.sendfile; a smaller one is copied into the same write as
    the rest of the answer. Either way the bytes are those of the copying broker (zero_copy=False)."""
    calls: list[int] = []
    real_sendfile = os.sendfile

    def counting_sendfile(out_fd, in_fd, offset, count, *args, **kwargs):
        sent = real_sendfile(out_fd, in_fd, offset, count, *args, **kwargs)
        calls.append(sent)
        return sent

    monkeypatch.setattr(os, "sendfile", counting_sendfile)
    P = ProduceRequest.TopicProduceData
    rng = random.Random(7)  # incompressible values: the compressed batches stay as large as the plain one
    records = [_batch([rng.randbytes(value_bytes) for _ in range(20)], codec) for codec in ("none", "zstd", "snappy")]
    stored = sum(len(r) for r in records)
    assert (stored > SMALL_REGION_BYTES) == sent_by_sendfile
    with _InProcessBroker(tmp_path, zero_copy=True) as broker:
        broker.server.log_manager.create_topic("zc", 1)
        with RawClient(broker.bootstrap) as c:
            for r in records:
                request = ProduceRequest(
                    transactional_id=None,
                    acks=1,
                    timeout_ms=1000,
                    topic_data=[P(name="zc", partition_data=[P.PartitionProduceData(index=0, records=r)])],
                )
                assert c.call(request, 9).responses[0].partition_responses[0].error_code == 0
            calls.clear()
            c.send(_fetch_frame("zc"))
            zero_copy = c.receive()
        assert broker.server.socket_server.sendfile_calls == int(sent_by_sendfile)
    # every record byte went through os.sendfile (none through a Python buffer), or none did
    assert sum(calls) == (stored if sent_by_sendfile else 0)
    calls.clear()
    with _InProcessBroker(tmp_path, zero_copy=False) as broker, RawClient(broker.bootstrap) as c:
        c.send(_fetch_frame("zc"))
        copied = c.receive()
    assert calls == []
    assert copied == zero_copy
    response = FetchResponse[12].decode(zero_copy[5:])
    assert len(response.responses[0].partitions[0].records) == stored
