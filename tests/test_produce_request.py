"""The produce request reader (broker/produce_request.py) against kafka-python's schema decoder, which we did not
write: the same fields for every version and any content, records as views of the frame (no copy), and the same
refusals for nulls, truncation and garbage. Also through a running broker: a produce whose records are read in
place is stored byte for byte."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.producer import ProduceRequest

from kafkalog.broker import produce_request
from kafkalog.broker.protocol import APIS, InvalidRequestError, RequestHeader, decode_request

VERSIONS = range(3, 12)
SPEC = APIS[0]


def _encode(version, transactional_id, acks, timeout_ms, topics) -> bytes:
    R = ProduceRequest[version]
    return R(
        transactional_id=transactional_id,
        acks=acks,
        timeout_ms=timeout_ms,
        topic_data=[
            R.TopicProduceData(
                name=name,
                partition_data=[R.TopicProduceData.PartitionProduceData(index=i, records=rec) for i, rec in parts],
            )
            for name, parts in topics
        ],
    ).encode()


def _frame_of(body: bytes) -> memoryview:
    """A body in a writable buffer of its own, as framing hands it over."""
    return memoryview(np.frombuffer(body, np.uint8).copy())


def _fields(request) -> tuple:
    return (
        request.transactional_id,
        request.acks,
        request.timeout_ms,
        [
            (t.name, [(p.index, None if p.records is None else bytes(p.records)) for p in t.partition_data])
            for t in request.topic_data
        ],
    )


names = st.text(min_size=0, max_size=12)
records = st.one_of(st.none(), st.binary(max_size=200))
topics = st.lists(
    st.tuples(names, st.lists(st.tuples(st.integers(-(2**31), 2**31 - 1), records), max_size=4)), max_size=4
)


@settings(max_examples=300, deadline=None)
@given(
    version=st.sampled_from(list(VERSIONS)),
    transactional_id=st.one_of(st.none(), names),
    acks=st.integers(-(2**15), 2**15 - 1),
    timeout_ms=st.integers(-(2**31), 2**31 - 1),
    topic_data=topics,
)
def test_reads_what_the_schema_decoder_reads(version, transactional_id, acks, timeout_ms, topic_data):
    body = _encode(version, transactional_id, acks, timeout_ms, topic_data)
    ours = produce_request.decode(version, _frame_of(body))
    theirs = ProduceRequest[version].decode(body)
    assert _fields(ours) == _fields(theirs)


def test_records_are_views_of_the_frame_not_copies():
    batch = bytes(range(256)) * 4096  # 1 MiB
    body = _encode(9, None, -1, 30000, [("t", [(0, batch), (1, b"x")])])
    frame = _frame_of(body)
    request = produce_request.decode(9, frame)
    view = request.topic_data[0].partition_data[0].records
    assert isinstance(view, memoryview) and bytes(view) == batch
    owner = np.frombuffer(frame, np.uint8)
    assert np.shares_memory(np.frombuffer(view, np.uint8), owner)


def _header(version: int) -> RequestHeader:
    return RequestHeader(0, version, 7, "c", 0)


@pytest.mark.parametrize("version", [3, 8, 9, 11])
def test_null_topic_name_and_null_arrays_are_refused_as_the_schema_reader_refuses_them(version):
    flexible = version >= 9
    # transactional id null, acks, timeout, one topic whose name is null
    null_string = b"\x00" if flexible else struct.pack(">h", -1)
    one = b"\x02" if flexible else struct.pack(">i", 1)
    null_array = b"\x00" if flexible else struct.pack(">i", -1)
    head = null_string + struct.pack(">hi", 1, 1000)
    for body, field in (
        (head + one + null_string, "topic_data.name"),
        (head + null_array, "topic_data"),
        (head + one + (b"\x02t" if flexible else b"\x00\x01t") + null_array, "topic_data.partition_data"),
    ):
        with pytest.raises(InvalidRequestError, match=f"non-nullable field {field} was serialized as null"):
            decode_request(SPEC, _header(version), _frame_of(body))


@pytest.mark.parametrize("version", [3, 9])
def test_truncated_or_garbage_requests_are_invalid_requests(version):
    body = _encode(version, "tx", 1, 1000, [("topic", [(0, b"r" * 100)])])
    for cut in (0, 1, 5, len(body) // 2, len(body) - 1 if version >= 9 else len(body) - 10):
        with pytest.raises(InvalidRequestError, match=r"Error parsing Produce v\d+ request \(correlation id 7\)"):
            decode_request(SPEC, _header(version), _frame_of(body[:cut]))


def test_a_record_set_longer_than_the_request_is_refused():
    """Kafka's reader fails on it; kafka-python's would have cut the records short and let them through."""
    body = _encode(3, None, 1, 1000, [("t", [(0, b"abc")])])
    lengthened = body[:-7] + struct.pack(">i", 50) + b"abc"
    with pytest.raises(InvalidRequestError, match="runs past the end of the request"):
        decode_request(SPEC, _header(3), _frame_of(lengthened))


def test_tagged_fields_go_to_the_schema_decoder_which_keeps_them():
    body = bytearray(_encode(9, None, 1, 1000, [("t", [(0, b"abc")])]))
    assert body[-1] == 0  # the request's own tag buffer, last
    body[-1:] = b"\x01\x05\x02hi"  # one unknown tagged field: tag 5, 2 bytes
    with pytest.raises(produce_request.TaggedFields):
        produce_request.decode(9, _frame_of(bytes(body)))
    request = decode_request(SPEC, _header(9), _frame_of(bytes(body)))
    assert [(t.name, [(p.index, bytes(p.records)) for p in t.partition_data]) for t in request.topic_data] == [
        ("t", [(0, b"abc")])
    ]
