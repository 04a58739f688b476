"""A null in a field its schema does not declare nullable is an invalid request (Kafka's generated readers
refuse it while parsing); nullable fields may be null. Checked through decode_request on encoded frames."""

from __future__ import annotations

import struct

import pytest
from kafka.protocol.producer import ProduceRequest

from kafkalog.broker.protocol import APIS, InvalidRequestError, decode_request, parse_header

P = ProduceRequest.TopicProduceData


def _frame(request, version: int) -> memoryview:
    body = request.encode(version=version)
    header = struct.pack(">hhih", 0, version, 7, 4) + b"test" + (b"\x00" if APIS[0].flexible(version) else b"")
    return memoryview(header + body)


def _produce(topic_name, transactional_id=None):
    return ProduceRequest(
        transactional_id=transactional_id,
        acks=1,
        timeout_ms=1000,
        topic_data=[P(name=topic_name, partition_data=[P.PartitionProduceData(index=0, records=b"")])],
    )


@pytest.mark.parametrize("version", [3, 8, 9, 11])
def test_a_null_topic_name_is_refused_and_a_null_transactional_id_is_not(version):
    frame = _frame(_produce("t"), version)
    header, spec = parse_header(frame)
    request = decode_request(spec, header, frame)  # transactional_id is nullable: null passes
    assert request.transactional_id is None and request.topic_data[0].name == "t"
    frame = _frame(_produce(None), version)
    header, spec = parse_header(frame)
    with pytest.raises(InvalidRequestError, match=r"non-nullable field topic_data\.name was serialized as null"):
        decode_request(spec, header, frame)
    for _ in range(2):  # the per-class plan is cached: the second decode answers the same
        with pytest.raises(InvalidRequestError, match=r"topic_data\.name"):
            decode_request(spec, header, frame)
