"""The broker's codec choice, measured: kio vs kafka-python's schema classes (µs per call).

Run: ``python benchmarks/broker_codec.py`` (needs ``pip install kio``; kio is not a kafkalog dependency).
The figures it printed when the choice was made are in kafkalog/broker/__init__.py.
"""

from __future__ import annotations

import datetime
import io
import time
import uuid


def bench(name: str, fn, n: int = 20000) -> None:
    fn()
    start = time.perf_counter()
    for _ in range(n):
        fn()
    print(f"{name:45s} {(time.perf_counter() - start) / n * 1e6:8.2f} us")


def main() -> None:
    from kafka.protocol.metadata import MetadataResponse as PMeta
    from kafka.protocol.producer import ProduceRequest as PProduce
    from kafka.protocol.producer import ProduceResponse as PPR
    from kio.schema.errors import ErrorCode
    from kio.schema.metadata.v12.response import MetadataResponse as KMeta
    from kio.schema.metadata.v12.response import (
        MetadataResponseBroker,
        MetadataResponsePartition,
        MetadataResponseTopic,
    )
    from kio.schema.produce.v9.request import PartitionProduceData, TopicProduceData
    from kio.schema.produce.v9.request import ProduceRequest as KProduce
    from kio.schema.produce.v9.response import PartitionProduceResponse, TopicProduceResponse
    from kio.schema.produce.v9.response import ProduceResponse as KPR
    from kio.serial import entity_reader, entity_writer
    from kio.static.primitive import i16, i32

    def writer_of(cls, obj):
        write = entity_writer(cls)

        def encode() -> bytes:
            buf = io.BytesIO()
            write(buf, obj)
            return buf.getvalue()

        return encode

    records = bytes(1000)
    produce = KProduce(
        transactional_id=None,
        acks=i16(1),
        timeout=datetime.timedelta(milliseconds=30000),
        topic_data=tuple(
            TopicProduceData(
                name=f"t{t}",
                partition_data=tuple(PartitionProduceData(index=i32(p), records=records) for p in range(4)),
            )
            for t in range(2)
        ),
    )
    encode_produce = writer_of(KProduce, produce)
    data = encode_produce()
    read_produce = entity_reader(KProduce)
    bench("kio decode Produce v9 (2 topics x 4 parts)", lambda: read_produce(data, 0))
    bench("kio encode Produce v9", encode_produce)
    decoded = PProduce[9].decode(data)
    assert decoded.encode() == data, "kafka-python and kio disagree"
    bench("kafka-python decode Produce v9", lambda: PProduce[9].decode(data))
    bench("kafka-python encode Produce v9", decoded.encode)

    meta = KMeta(
        throttle_time=datetime.timedelta(0),
        brokers=(MetadataResponseBroker(node_id=i32(0), host="127.0.0.1", port=i32(9092)),),
        cluster_id="abc",
        controller_id=i32(0),
        topics=tuple(
            MetadataResponseTopic(
                error_code=ErrorCode.none,
                name=f"topic{t}",
                topic_id=uuid.uuid4(),
                partitions=tuple(
                    MetadataResponsePartition(
                        error_code=ErrorCode.none,
                        partition_index=i32(p),
                        leader_id=i32(0),
                        replica_nodes=(i32(0),),
                        isr_nodes=(i32(0),),
                    )
                    for p in range(10)
                ),
            )
            for t in range(5)
        ),
    )
    encode_meta = writer_of(KMeta, meta)
    meta_bytes = encode_meta()
    python_meta = PMeta[12].decode(meta_bytes)
    assert python_meta.encode() == meta_bytes
    bench("kio encode Metadata v12 (5 topics x 10 parts)", encode_meta, 5000)
    bench("kafka-python encode Metadata v12", python_meta.encode, 5000)
    read_meta = entity_reader(KMeta)
    bench("kio decode Metadata v12", lambda: read_meta(meta_bytes, 0), 5000)
    bench("kafka-python decode Metadata v12", lambda: PMeta[12].decode(meta_bytes), 5000)

    response = KPR(
        throttle_time=datetime.timedelta(0),
        responses=tuple(
            TopicProduceResponse(
                name=f"t{t}",
                partition_responses=tuple(
                    PartitionProduceResponse(
                        index=i32(p),
                        error_code=ErrorCode.none,
                        base_offset=1000,
                        log_append_time=None,
                        log_start_offset=0,
                        record_errors=(),
                    )
                    for p in range(4)
                ),
            )
            for t in range(2)
        ),
    )
    encode_response = writer_of(KPR, response)
    response_bytes = encode_response()
    python_response = PPR[9].decode(response_bytes)
    assert python_response.encode() == response_bytes
    bench("kio encode Produce v9 response", encode_response)
    bench("kafka-python encode Produce v9 response", python_response.encode)


if __name__ == "__main__":
    main()
