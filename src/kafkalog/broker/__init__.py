"""kafkalog's Kafka broker: ``kafkalog serve`` speaks Kafka's binary protocol so real clients produce and consume.

Layers (imports go one way): network (asyncio socket server, framing, sendfile) <- apis (request router)
<- handlers (one module per API family) -> replica_access (the partition-layer contract: the only door to
storage) ; server wires them with the log manager; config reads server.properties with Kafka's names.

Codec choice (measured, not assumed). Request and response bodies are encoded and decoded by kafka-python
3.0.12's schema classes (kafka.protocol, generated at import time from Kafka's message JSON). The candidates,
timed on this machine with ``python benchmarks/broker_codec.py`` (µs per call, 2 shared cores, noisy):

    ==========================================  =======  ============
    message                                     kio      kafka-python
    ==========================================  =======  ============
    decode Produce v9 request (2x4 partitions)  2-3      11-19
    encode Produce v9 response (2x4)            37-74    20-34
    encode Metadata v12 response (5x10)         367-620  140-218
    decode Metadata v12 response                19-29    99-146
    ==========================================  =======  ============

kio (0.6.5) decodes in native code but encodes in Python dataclass walkers, 2-3x slower than kafka-python;
a broker decodes one request and encodes one response per round trip, and the response is usually the
bigger message, so kafka-python is faster per round trip (Produce: 45-50 µs against 70-77 µs) and much faster
for Metadata. kafka-python also covers every version and header version of every API (kio starts at the
versions Kafka 4 keeps and has no request header v0). Generating our own codec would cost time without
beating either on the measured path. The one hand-written encoder is the Fetch response
(handlers/fetch.py), because its record sets are file regions sent by sendfile, never Python bytes.
"""
