"""The Produce response encoder (handlers/produce.py, by hand) against kafka-python's generated encoder of
Kafka's ProduceResponse schema, an independent oracle: the same bytes for every version the broker serves."""

from __future__ import annotations

import pytest
from kafka.protocol.producer import ProduceResponse

from kafkalog.broker.handlers.produce import encode_response
from kafkalog.broker.protocol import APIS

TopicResponse = ProduceResponse.TopicProduceResponse
PartitionResponse = TopicResponse.PartitionProduceResponse

CASES = {
    "one partition": ({"t": [(0, 0, 42, -1, 0, None)]}, 0),
    "several topics and partitions, throttled": (
        {
            "orders": [(0, 0, 1000, -1, 10, None), (7, 0, 5, 1_700_000_000_000, 0, None)],
            "événements": [(3, 0, 2**40, -1, 2**33, None)],
        },
        250,
    ),
    "errors with and without a message": (
        {
            "t": [
                (1, 87, -1, -1, -1, "Produce requests with version 3 and above must contain exactly one record batch"),
                (2, 29, -1, -1, -1, "Not authorized to access topics: [t] ✓"),
                (4, 3, -1, -1, -1, None),
                (5, 10, -1, -1, -1, ""),
            ]
        },
        0,
    ),
    "no topics": ({}, 0),
}


def _oracle(version: int, by_topic, throttle_ms: int) -> bytes:
    topics = [
        TopicResponse(
            name=name,
            partition_responses=[
                PartitionResponse(
                    index=p,
                    error_code=code,
                    base_offset=base,
                    log_append_time_ms=append_time,
                    log_start_offset=start,
                    error_message=message,
                )
                for p, code, base, append_time, start, message in parts
            ],
        )
        for name, parts in by_topic.items()
    ]
    return ProduceResponse(version=version, responses=topics, throttle_time_ms=throttle_ms).encode(version=version)


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("version", range(APIS[0].min_version, APIS[0].max_version + 1))
def test_produce_response_bytes_equal_the_schema_encoders(version, case):
    by_topic, throttle_ms = CASES[case]
    ours = encode_response(version, by_topic, throttle_ms)
    assert ours == _oracle(version, by_topic, throttle_ms)
    decoded = ProduceResponse[version].decode(ours)
    assert decoded.throttle_time_ms == throttle_ms
    assert [t.name for t in decoded.responses] == list(by_topic)
