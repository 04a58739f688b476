"""The broker benchmark's worker processes: ``python -m benchmarks.broker_load ROLE JSON-ARGS``.

Each role runs in a process of its own, so that the broker, its clients and the limit's plain sockets never
share an interpreter (OpenMessaging Benchmark's layout). A role prints one JSON line with its figures on
stdout; ``mock`` and ``sink`` first print a line saying where they listen and then serve until told to stop.

Roles:
- ``mock``: librdkafka's own mock cluster (``test.mock.num.brokers=1``, C, in memory), reached through the
  bundled librdkafka's C API (confluent-kafka has no Python handle on it): prints its bootstrap address,
  then reads ``create TOPIC PARTITIONS`` lines on stdin and answers ``ok``; it stops at end of input.
- ``produce``: a throughput-tuned confluent-kafka producer pushes ``records`` values of ``value_bytes``.
- ``consume``: an assigned confluent-kafka consumer reads ``records`` records of every partition from 0.
- ``kcat-consume``: kcat (librdkafka in C) reads a whole topic from the beginning to its end.
- ``sink``: a plain TCP receiver that writes what it gets to a file (``path``) or discards it.
- ``send``: a plain TCP sender of ``total`` bytes from memory, in ``chunk``-byte writes.
- ``sendfile``: ``os.sendfile`` of whole files (a topic's segments) over one TCP connection.
- ``paced-produce``/``paced-consume``: the latency pair; the producer sends at a fixed rate, each value
  carrying the time its schedule gave it (so a stall does not hide the sends it delays: no coordinated
  omission), and the consumer takes each value's age when it arrives (CLOCK_MONOTONIC is system-wide).
"""

from __future__ import annotations

import ctypes
import glob
import json
import os
import random
import resource
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

# A throughput-tuned producer (OpenMessaging Benchmark's Kafka driver sets linger and batch size alike).
PRODUCER_TUNING: dict[str, Any] = {
    "linger.ms": 10,
    "batch.size": 1_048_576,
    "batch.num.messages": 1_000_000,
    "queue.buffering.max.messages": 2_000_000,
    "queue.buffering.max.kbytes": 1_048_576,
    "message.max.bytes": 2_097_152,
}
CONSUMER_TUNING: dict[str, Any] = {
    "fetch.max.bytes": 50 << 20,
    "max.partition.fetch.bytes": 10 << 20,
    "receive.message.max.bytes": (50 << 20) + 1_000_000,
    "enable.auto.commit": False,
}
_STAMP = struct.Struct(">q")


POOL = 1024  # distinct values a producer cycles through: more than lz4's 64 KiB window holds at 1 KiB


def payload(size: int, seed: int = 23) -> bytes:
    """One record value: half seeded random bytes, half zeros, so lz4 halves it (as it might text) rather than
    shrinking a batch of one repeated value to nothing."""
    return random.Random(seed).randbytes(size - size // 2) + bytes(size // 2)


def payloads(size: int) -> list[bytes]:
    """``POOL`` distinct values of ``size`` bytes (OpenMessaging's randomized payload pool)."""
    return [payload(size, seed) for seed in range(POOL)]


def _faults() -> int:
    """Minor page faults of this process so far (all its threads): each a first touch of a page. On a machine
    where that is costly (a virtual machine backing guest memory lazily), a client's memory churn shows here."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _emit(result: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()


# ----- librdkafka's mock cluster -------------------------------------------------------------------------
def _librdkafka() -> ctypes.CDLL:
    import confluent_kafka

    libs = Path(confluent_kafka.__file__).resolve().parents[1] / "confluent_kafka.libs"
    found = sorted(glob.glob(str(libs / "librdkafka*.so*")))
    lib = ctypes.CDLL(found[0] if found else "librdkafka.so.1")
    lib.rd_kafka_conf_new.restype = ctypes.c_void_p
    lib.rd_kafka_conf_set.argtypes = [
        ctypes.c_void_p,
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.c_size_t,
    ]
    lib.rd_kafka_new.restype = ctypes.c_void_p
    lib.rd_kafka_new.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.rd_kafka_handle_mock_cluster.restype = ctypes.c_void_p
    lib.rd_kafka_handle_mock_cluster.argtypes = [ctypes.c_void_p]
    lib.rd_kafka_mock_cluster_bootstraps.restype = ctypes.c_char_p
    lib.rd_kafka_mock_cluster_bootstraps.argtypes = [ctypes.c_void_p]
    lib.rd_kafka_mock_topic_create.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_int]
    lib.rd_kafka_destroy.argtypes = [ctypes.c_void_p]
    return lib


def role_mock(_args: dict[str, Any]) -> None:
    lib = _librdkafka()
    errstr = ctypes.create_string_buffer(512)
    conf = lib.rd_kafka_conf_new()
    for key, value in (("test.mock.num.brokers", "1"), ("log_level", "3")):
        if lib.rd_kafka_conf_set(conf, key.encode(), value.encode(), errstr, 512) != 0:
            raise SystemExit(f"mock: {key}: {errstr.value.decode()}")
    rk = lib.rd_kafka_new(0, conf, errstr, 512)  # a producer handle whose only job is to own the mock cluster
    if not rk:
        raise SystemExit(f"mock: rd_kafka_new failed: {errstr.value.decode()}")
    cluster = lib.rd_kafka_handle_mock_cluster(rk)
    if not cluster:
        raise SystemExit("mock: no mock cluster on the handle")
    _emit({"bootstrap": lib.rd_kafka_mock_cluster_bootstraps(cluster).decode(), "pid": os.getpid()})
    for line in sys.stdin:
        words = line.split()
        if len(words) == 3 and words[0] == "create":
            err = lib.rd_kafka_mock_topic_create(cluster, words[1].encode(), int(words[2]), 1)
            _emit({"created": words[1], "error": err})
    lib.rd_kafka_destroy(rk)


# ----- clients ---------------------------------------------------------------------------------------------
def role_produce(args: dict[str, Any]) -> None:
    from confluent_kafka import Producer

    conf = {
        "bootstrap.servers": args["bootstrap"],
        "acks": args["acks"],
        "compression.type": args["codec"],
        **PRODUCER_TUNING,
        **args.get("config", {}),
    }
    producer = Producer(conf)
    topic, n = args["topic"], args["records"]
    producer.list_topics(topic, timeout=30)  # connection and metadata before the clock starts
    values = payloads(args["value_bytes"])
    errors: list[Any] = []
    delivered = [0]

    def report(err: Any, _msg: Any) -> None:
        if err is None:
            delivered[0] += 1
        else:
            errors.append(str(err))

    produce, poll = producer.produce, producer.poll
    spread = args.get("partitioned", 0)  # round-robin over this many partitions (else the default partitioner)
    start, cpu_start, faults_start = time.perf_counter(), time.process_time(), _faults()
    for i in range(n):
        partition = i % spread if spread else -1  # -1: librdkafka's partitioner chooses
        try:
            produce(topic, values[i & 1023], partition=partition, on_delivery=report)
        except BufferError:
            poll(0.005)
            produce(topic, values[i & 1023], partition=partition, on_delivery=report)
        if not i & 0x3FFF:
            poll(0)
    left = producer.flush(300)
    elapsed = time.perf_counter() - start
    cpu = time.process_time() - cpu_start  # the client's own CPU (all its threads): is it the bottleneck?
    _emit(
        {
            "records": n,
            "seconds": elapsed,
            "client_cpu_s": cpu,
            "client_faults": _faults() - faults_start,
            "delivered": delivered[0],
            "left": left,
            "errors": errors[:3],
        }
    )


def _consumer(bootstrap: str, extra: dict[str, Any] | None = None) -> Any:
    from confluent_kafka import Consumer

    return Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", **CONSUMER_TUNING, **(extra or {})})


def role_consume(args: dict[str, Any]) -> None:
    from confluent_kafka import TopicPartition

    consumer = _consumer(args["bootstrap"], args.get("config"))
    topic, n, partitions = args["topic"], args["records"], args["partitions"]
    consumer.list_topics(topic, timeout=30)
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    count = nbytes = 0
    consume = consumer.consume
    start, cpu_start, faults_start = time.perf_counter(), time.process_time(), _faults()
    deadline = start + args.get("timeout", 300)
    while count < n and time.perf_counter() < deadline:
        batch = consume(10_000, 0.05)
        count += len(batch)
        nbytes += sum(map(len, batch))  # in C: the client's own cost stays small next to the broker's
    elapsed = time.perf_counter() - start
    cpu = time.process_time() - cpu_start
    faults = _faults() - faults_start
    errors = [str(m.error()) for m in batch if m.error() is not None] if count != n else []
    consumer.close()
    # An error event counts as a record of 0 bytes: the caller checks records and bytes both.
    _emit(
        {
            "records": count,
            "bytes": nbytes,
            "seconds": elapsed,
            "client_cpu_s": cpu,
            "client_faults": faults,
            "errors": errors[:3],
        }
    )


def role_kcat_consume(args: dict[str, Any]) -> None:
    """The same read by kcat (librdkafka's C command-line client): what a client without Python per-record
    work drains, to tell the broker's cost from confluent-kafka's Python loop. One line per record, counted."""
    topic, n = args["topic"], args["records"]
    command = ["kcat", "-C", "-b", args["bootstrap"], "-t", topic, "-o", "beginning", "-e", "-q", "-f", "%p\n"]
    for key in ("fetch.max.bytes", "max.partition.fetch.bytes", "receive.message.max.bytes"):
        command += ["-X", f"{key}={CONSUMER_TUNING[key]}"]
    for key, value in (args.get("config") or {}).items():
        command += ["-X", f"{key}={value}"]
    start = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, timeout=args.get("timeout", 300))
    elapsed = time.perf_counter() - start
    count = proc.stdout.count(b"\n")
    _emit(
        {
            "records": count,
            "bytes": count * args["value_bytes"],
            "seconds": elapsed,
            "code": proc.returncode,
            "errors": [proc.stderr.decode(errors="replace")[-300:]] if count != n else [],
        }
    )


# ----- the limits: plain sockets ---------------------------------------------------------------------------
def role_sink(args: dict[str, Any]) -> None:
    server = socket.create_server(("127.0.0.1", 0))
    _emit({"port": server.getsockname()[1]})
    conn, _ = server.accept()
    path = args.get("path")
    out = open(path, "wb", buffering=0) if path else None  # noqa: SIM115 - closed below
    buf = bytearray(1 << 20)
    view = memoryview(buf)
    total, start = 0, None
    while True:
        got = conn.recv_into(buf)
        if not got:
            break
        if start is None:
            start = time.perf_counter()
        total += got
        if out is not None:
            out.write(view[:got])
    elapsed = time.perf_counter() - (start or time.perf_counter())
    if out is not None:
        out.close()
    conn.close()
    server.close()
    _emit({"bytes": total, "seconds": elapsed})


def role_send(args: dict[str, Any]) -> None:
    chunk, total = args["chunk"], args["total"]
    data = payload(chunk)
    with socket.create_connection(("127.0.0.1", args["port"])) as sock:
        left = total
        while left > 0:
            sock.sendall(data if left >= chunk else data[:left])
            left -= chunk
    _emit({"bytes": total})


def role_sendfile(args: dict[str, Any]) -> None:
    total = 0
    with socket.create_connection(("127.0.0.1", args["port"])) as sock:
        for path in args["files"]:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                offset = 0
                while offset < size:
                    sent = os.sendfile(sock.fileno(), f.fileno(), offset, size - offset)
                    if sent == 0:
                        break
                    offset += sent
                total += offset
    _emit({"bytes": total})


# ----- latency ----------------------------------------------------------------------------------------------
def role_paced_produce(args: dict[str, Any]) -> None:
    """The latency pair's producer: ``rate`` records a second, each stamped with the time its schedule gave it.

    ``pacing`` says how it waits for a record's due time: ``sleep`` (the default) sleeps until then, as a rate
    limiter does (OpenMessaging's driver); ``spin`` busy-waits the last millisecond, the harness of the first
    measurements, which keeps a whole core busy at 10,000 msg/s (the interval is 100 us) and so takes it from
    the broker and the consumer on a 2-core machine. Either way a late send keeps its scheduled stamp.
    """
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": args["bootstrap"],
            "acks": "all",
            "linger.ms": args.get("linger_ms", 1),
            "queue.buffering.max.messages": 2_000_000,
        }
    )
    topic, rate, seconds = args["topic"], args["rate"], args["seconds"]
    producer.list_topics(topic, timeout=30)
    pad = payload(args["value_bytes"] - _STAMP.size)
    n = int(rate * seconds)
    interval_ns = int(1e9 / rate)
    wait = _spin_until if args.get("pacing", "sleep") == "spin" else _sleep_until
    produce, poll = producer.produce, producer.poll
    start = time.monotonic_ns() + 50_000_000
    behind_max = 0
    for i in range(n):
        due = start + i * interval_ns
        now = time.monotonic_ns()
        if now < due:
            wait(due, now, poll)
        else:
            behind_max = max(behind_max, now - due)
        try:
            produce(topic, _STAMP.pack(due) + pad)  # stamped with its scheduled time, not the actual one
        except BufferError:
            poll(0.001)
            produce(topic, _STAMP.pack(due) + pad)
        if not i & 0x3FF:
            poll(0)  # serve delivery reports now and then, whichever the pacing
    left = producer.flush(60)
    _emit({"records": n, "left": left, "max_behind_ms": behind_max / 1e6})


def _sleep_until(due: int, now: int, _poll: Any) -> None:
    """Sleep until ``due`` (monotonic ns): the kernel wakes the thread at most its timer slack (50 us) late."""
    time.sleep((due - now) / 1e9)


def _spin_until(due: int, now: int, poll: Any) -> None:
    """Busy-wait until ``due``, sleeping only when more than a millisecond ahead (the first harness)."""
    if due - now > 1_000_000:
        poll(0)
        now = time.monotonic_ns()
        if due - now > 1_000_000:
            time.sleep((due - now - 500_000) / 1e9)
    while time.monotonic_ns() < due:
        pass


def role_paced_consume(args: dict[str, Any]) -> None:
    from confluent_kafka import TopicPartition

    consumer = _consumer(args["bootstrap"], {"fetch.wait.max.ms": 100, "fetch.min.bytes": 1})
    topic, n = args["topic"], args["records"]
    consumer.list_topics(topic, timeout=30)
    consumer.assign([TopicPartition(topic, 0, 0)])
    consumer.consume(1, 0.2)  # the first fetch (nothing there yet): connection ready before the producer starts
    _emit({"ready": True})
    ages: list[int] = []
    unpack = _STAMP.unpack_from
    deadline = time.monotonic() + args["timeout"]
    consume, poll, now = consumer.consume, consumer.poll, time.monotonic_ns
    while len(ages) < n and time.monotonic() < deadline:
        first = poll(0.05)  # returns as soon as one record is there (consume(N, t) would wait for N)
        if first is None:
            continue
        for m in [first, *consume(1000, 0)]:
            if m.error() is None:
                ages.append(now() - unpack(m.value())[0])
    consumer.close()
    ages.sort()

    def pct(q: float) -> float:
        return ages[min(len(ages) - 1, int(len(ages) * q))] / 1e6 if ages else float("nan")

    _emit(
        {
            "records": len(ages),
            "p50_ms": pct(0.50),
            "p99_ms": pct(0.99),
            "p999_ms": pct(0.999),
            "max_ms": ages[-1] / 1e6 if ages else float("nan"),
        }
    )


ROLES = {
    "mock": role_mock,
    "produce": role_produce,
    "consume": role_consume,
    "kcat-consume": role_kcat_consume,
    "sink": role_sink,
    "send": role_send,
    "sendfile": role_sendfile,
    "paced-produce": role_paced_produce,
    "paced-consume": role_paced_consume,
}


if __name__ == "__main__":
    ROLES[sys.argv[1]](json.loads(sys.argv[2]) if len(sys.argv) > 2 else {})
