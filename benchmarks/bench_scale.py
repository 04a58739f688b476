"""Scale: 10,000 partitions and 1,000 client connections on one ``kafkalog serve`` (issue 23).

One broker on a fresh log dir, Kafka's defaults but for the listener and the log dir (segment.bytes 1 GiB,
segment.index.bytes 10 MiB, num.recovery.threads.per.data.dir 1, the default flush policy):

1. calibrate: the broker's descriptors, maps, threads and RSS with no topic; then a topic of ``calibration
   partitions`` partitions with one record each, and ``calibration connections`` raw connections that each did
   ApiVersions and Metadata: the RSS they added, per partition and per connection. The bounds of the run are
   computed from these and the configuration BEFORE the run (``predict``; formulas below).
2. create ``topics`` topics of ``partitions_per_topic`` partitions through CreateTopics (confluent-kafka's
   AdminClient, ``topics_per_request`` topics a request, each request within the client's default 30 s
   request.timeout.ms at the sizes used; replication factor -1: the broker's default.replication.factor).
3. open ``connections`` raw connections; each does ApiVersions and a Metadata of one topic, and stays open.
4. Metadata of every topic: the time of one request on an otherwise idle broker (repeated), and a storm:
   ``metadata_storm`` of the open connections ask for every topic at once, timed until the last answer is in.
   Every answer decoded in full must list every partition with this broker as leader.
5. produce and fetch across every partition: ``producers`` confluent-kafka producers (acks=all), each writing
   one record to each partition of its share of the topics; ``consumers`` consumers, each assigned every
   partition of its share from offset 0, must read each record exactly once.
6. every open raw connection still answers ApiVersions.
7. clean restart: SIGTERM (time to exit), then start (time until the listener is up); ListOffsets of every
   partition must give its log end offset as written; unclean restart: one more record to each partition, SIGKILL
   as soon as they are acknowledged, start (recovery of the unflushed segments), ListOffsets again: nothing
   acknowledged is lost (a process kill keeps the page cache). Both restarts then again with
   ``tuned_recovery_threads`` recovery threads (num.recovery.threads.per.data.dir; Kafka's default is 1), which
   open the logs at startup and close them at shutdown in parallel.

A sampler reads the broker's /proc every 250 ms all through: open descriptors, memory maps, RSS, threads; the
peaks are checked against the bounds (a bound exceeded fails the benchmark).

The bounds (computed before steps 2-7; P = partitions, C = raw connections, K = the client connections of the
confluent-kafka clients and the samplers, at most 4 per client: bootstrap, broker, and a spare):

- one descriptor per segment (its ``.log``; ``.index`` and ``.timeindex`` are memory maps that hold none, the
  ``.txnindex`` is opened only for a segment with aborted transactions), one per connection, and every thread
  may hold two for a moment (a checkpoint being written, an index file being mapped), and a client connection
  in the middle of a fetch answer one more (the region being sent, on a dup of its segment's descriptor, taken
  when its turn comes and released once sent):
  ``fds <= fds_base + P * segments_per_partition + C + 2 * K + 2 * threads``; segments_per_partition is 1 here: the
  run appends a few hundred bytes per partition, far below segment.bytes (1 GiB) and segment.ms (7 days); P counts
  the calibration topic and __consumer_offsets (offsets.topic.num.partitions = 50, created when the consumers
  look up their group coordinator) besides the run's topics.
- two maps per segment (offset and time index, mapped at segment.index.bytes, sparse: only touched pages are
  resident) and two per thread (stack and guard): ``maps <= maps_base + 2 * P * segments_per_partition +
  2 * threads + 64``; checked against vm.max_map_count too.
- ``RSS <= RSS_calibrated + 1.25 * ((P_run + 50) * c_partition + (C + K) * c_connection + response) + 32 MiB``,
  with c_partition and c_connection the RSS per partition and per connection measured in step 1, and
  ``response = P_all * (2 * 2 KiB + storm * 32 B)``: all-topics Metadata answers (P_all = every partition of the
  broker): each partition's answer objects in the broker's cache and in the one answer being built (the event
  loop builds one at a time), and the encoded answer of every connection of the storm waiting in its write
  buffer at worst; 25 % + 32 MiB cover the allocator.

The descriptor bound is also checked against the broker's RLIMIT_NOFILE before the run: a configuration that
needs more descriptors than the limit fails at once.

What this row found and what was done (profiles: py-spy on the broker, cProfile/process_time on a LogManager):

- A fetch answer dup'ed one descriptor per partition at read time and held them until sent: a consumer of 5,000
  partitions added 5,000 (peak 16,560 against a bound of 11,610; a consumer of all 10,000 beside 1,000
  connections would pass a 20,000 RLIMIT_NOFILE). Now a region takes its dup when its turn to be sent comes.
- An all-topics Metadata answer sized every log (describe_topic) and built a message object per partition per
  request; now it reads the topic index and reuses cached partition answers (about 1.6x fewer broker samples).
  What was left was kafka-python's encoder (about 60 %): ~0.37 s per answer of 10,000 partitions at load 11.
  Now each topic's entry is encoded once per state and version and answers are joined from the cached entries
  (handlers/metadata_encoding.py; A/B in benchmarks/ab_metadata.py).
  Topic-id lookups (Metadata by id, KIP-848 heartbeats) sized every log as well.
- Shutdown closed the logs one by one; now in num.recovery.threads.per.data.dir threads per dir, as Kafka.
  Per log a clean close does what Kafka's does (fsync of the log and of its dir when a segment is new, the
  producer snapshot, the time index entry, msync and truncation of the indexes); an unclean start rebuilds the
  indexes of each active segment (Kafka finds its preallocated time index corrupt too) and writes the producer
  snapshot twice. These are file-system calls, not Python: with the default single thread they are serial.
- The first append to each new partition used to write its leader-epoch checkpoint with two fsyncs on the
  event loop: a produce that was the first to thousands of partitions blocked the loop for seconds (hence the
  idempotent producers here). Kafka's makeLeader records the epoch when the partition becomes leader; so does
  Partition.make_leader now, its file written by the creation's background pass or off the loop before that first
  append (tools/first_produce_stall.py: 11-17 s -> 0.1-0.4 s at 2,000 partitions). A restart writes no epoch
  checkpoint whose bytes would not change (tools/restart_epoch_writes.py). Last row, on a loaded machine (load
  4-7): results/scale-run3.json.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import statistics
import struct
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from . import common

MiB = 1 << 20
# what one partition adds to an all-topics Metadata answer: its message objects (kafka-python's Struct with its
# lists, ~1.2 KB measured; rounded up), held once in the broker's cache of partition answers and once in the
# answer being built (the event loop builds one at a time), and its encoded bytes (26 at v12; rounded up), which
# wait in a connection's write buffer until the kernel takes them
METADATA_OBJECT_BYTES_PER_PARTITION = 2048
METADATA_ENCODED_BYTES_PER_PARTITION = 32
CONNECTIONS_PER_CLIENT = 4
OFFSETS_TOPIC_PARTITIONS = 50  # Kafka's offsets.topic.num.partitions default


@dataclass(frozen=True)
class ScaleParams:
    """The sizes of one run (see the module docstring)."""

    topics: int
    partitions_per_topic: int
    topics_per_request: int
    connections: int
    metadata_repeats: int
    metadata_storm: int
    producers: int
    consumers: int
    calibration_partitions: int
    calibration_connections: int
    # then the two restarts again with num.recovery.threads.per.data.dir raised, as an operator of this many
    # partitions would (Kafka's default is 1; 0 skips them)
    tuned_recovery_threads: int = 0
    settings: dict[str, str] = field(default_factory=dict)

    @property
    def partitions(self) -> int:
        return self.topics * self.partitions_per_topic


FULL = ScaleParams(
    topics=100,
    partitions_per_topic=100,
    topics_per_request=10,
    connections=1000,
    metadata_repeats=5,
    metadata_storm=100,
    producers=4,
    consumers=2,
    calibration_partitions=500,
    calibration_connections=200,
    tuned_recovery_threads=8,
)
QUICK = replace(
    FULL,
    topics=8,
    partitions_per_topic=50,
    topics_per_request=4,
    connections=300,
    metadata_repeats=3,
    metadata_storm=30,
    producers=2,
    consumers=1,
    calibration_partitions=100,
    calibration_connections=100,
    tuned_recovery_threads=0,
)


# ----- the broker's /proc ------------------------------------------------------------------------------------
def proc_figures(pid: int, maps: bool = True) -> dict[str, int]:
    """Open descriptors, memory maps, RSS (bytes) and threads of a process, from /proc."""
    out = {"fds": len(os.listdir(f"/proc/{pid}/fd"))}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key == "VmRSS":
            out["rss"] = int(value.split()[0]) * 1024
        elif key == "Threads":
            out["threads"] = int(value)
    if maps:
        with open(f"/proc/{pid}/maps", "rb") as f:
            out["maps"] = f.read().count(b"\n")
    return out


def nofile_limit(pid: int) -> int:
    """The process's soft RLIMIT_NOFILE (/proc/PID/limits)."""
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            return int(line.split()[3])
    raise AssertionError("no 'Max open files' in /proc/PID/limits")


def max_map_count() -> int:
    try:
        return int(Path("/proc/sys/vm/max_map_count").read_text())
    except OSError:
        return 65530


class Sampler:
    """Samples a process's /proc every ``interval`` seconds in a thread; keeps the peak of each figure."""

    def __init__(self, pid: int, interval: float = 0.25) -> None:
        self.pid = pid
        self.interval = interval
        self.peaks: dict[str, int] = {}
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="scale-sampler", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(OSError, ValueError):  # the process may be gone
                for key, value in proc_figures(self.pid).items():
                    self.peaks[key] = max(self.peaks.get(key, 0), value)
                self.samples += 1
            self._stop.wait(self.interval)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


# ----- the bounds --------------------------------------------------------------------------------------------
@dataclass
class Bounds:
    """Ceilings predicted before the run, and the terms they were made of."""

    fds: int
    maps: int
    rss_bytes: int
    terms: dict[str, Any]


def predict(p: ScaleParams, base: dict[str, int], calibrated: dict[str, Any]) -> Bounds:
    """The bounds of the module docstring from the configuration, the baseline and the calibration."""
    # one segment per partition: the run writes far below segment.bytes and segment.ms; the partitions are the
    # run's, the calibration topic's, and __consumer_offsets' (created by the consumers' FindCoordinator)
    segments = (p.partitions + p.calibration_partitions + OFFSETS_TOPIC_PARTITIONS) * 1
    clients = (p.producers + p.consumers + 2) * CONNECTIONS_PER_CLIENT  # + the admin client and the offsets reader
    threads = base["threads"] + 4  # the recovery pool, the scheduler's and asyncio's executor threads may start
    # + one descriptor per client connection in the middle of sending a fetch answer's region (FileRegion.open)
    fds = base["fds"] + segments + p.connections + 2 * clients + 2 * threads
    maps = base["maps"] + 2 * segments + 2 * threads + 64
    c_partition, c_connection = calibrated["c_partition"], calibrated["c_connection"]
    all_partitions = p.partitions + p.calibration_partitions + OFFSETS_TOPIC_PARTITIONS
    response = all_partitions * (
        2 * METADATA_OBJECT_BYTES_PER_PARTITION + p.metadata_storm * METADATA_ENCODED_BYTES_PER_PARTITION
    )
    dynamic = (
        (p.partitions + OFFSETS_TOPIC_PARTITIONS) * c_partition + (p.connections + clients) * c_connection + response
    )
    rss = int(calibrated["rss"] + 1.25 * dynamic + 32 * MiB)
    terms = {
        "segments": segments,
        "client connections (K)": clients,
        "threads": threads,
        "c_partition bytes": round(c_partition),
        "c_connection bytes": round(c_connection),
        "response bytes": response,
        "dynamic bytes": int(dynamic),
        "rss calibrated bytes": calibrated["rss"],
    }
    return Bounds(fds, maps, rss, terms)


def check_bounds(peaks: dict[str, int], bounds: Bounds, limits: dict[str, int]) -> list[str]:
    """The peaks against the bounds, and the bounds against the system's limits: the failures."""
    failures = []
    if bounds.fds > limits["nofile"]:
        failures.append(f"the configuration needs up to {bounds.fds} descriptors, RLIMIT_NOFILE is {limits['nofile']}")
    if bounds.maps > limits["max_map_count"]:
        failures.append(
            f"the configuration needs up to {bounds.maps} maps, vm.max_map_count is {limits['max_map_count']}"
        )
    if peaks.get("fds", 0) > bounds.fds:
        failures.append(f"peak open fds {peaks['fds']} above the bound {bounds.fds}")
    if peaks.get("maps", 0) > bounds.maps:
        failures.append(f"peak maps {peaks['maps']} above the bound {bounds.maps}")
    if peaks.get("rss", 0) > bounds.rss_bytes:
        failures.append(f"peak RSS {peaks['rss'] >> 20} MiB above the bound {bounds.rss_bytes >> 20} MiB")
    return failures


# ----- raw connections ---------------------------------------------------------------------------------------
METADATA_VERSION = 12
LIST_OFFSETS_VERSION = 7


def _frame(message: Any, version: int, correlation_id: int) -> bytes:
    from tests.brokertools import encode_request

    return encode_request(message, version, correlation_id)


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        buf += chunk
    return bytes(buf)


def _receive(sock: socket.socket) -> bytes:
    (size,) = struct.unpack(">i", _read_exactly(sock, 4))
    return _read_exactly(sock, size)


def _decode(api_key: int, version: int, body: bytes) -> Any:
    from kafkalog.broker.protocol import APIS

    spec = APIS[api_key]
    skip = 5 if spec.flexible(version) and api_key != 18 else 4
    return spec.response[version].decode(body[skip:])


def _api_versions() -> bytes:
    from kafka.protocol.metadata import ApiVersionsRequest

    return _frame(ApiVersionsRequest(client_software_name="scale", client_software_version="1"), 3, 1)


def _metadata(topics: list[str] | None) -> bytes:
    from kafka.protocol.metadata import MetadataRequest

    wanted = None if topics is None else [MetadataRequest.MetadataRequestTopic(name=t) for t in topics]
    return _frame(MetadataRequest(topics=wanted, allow_auto_topic_creation=False), METADATA_VERSION, 2)


def open_connections(host: str, port: int, count: int, topic_of: Any) -> list[socket.socket]:
    """``count`` connections, each answered an ApiVersions and a Metadata of one topic (checked), left open."""
    versions = _api_versions()
    conns = []
    for i in range(count):
        sock = socket.create_connection((host, port), timeout=120)
        conns.append(sock)
        topic = topic_of(i)
        sock.sendall(versions + _metadata([topic]))
        answer = _decode(18, 3, _receive(sock))
        if answer.error_code != 0:
            raise AssertionError(f"ApiVersions answered error {answer.error_code}")
        meta = _decode(3, METADATA_VERSION, _receive(sock))
        if [t.name for t in meta.topics] != [topic] or meta.topics[0].error_code != 0:
            raise AssertionError(f"Metadata of {topic} answered {meta.topics}")
    return conns


def check_metadata(meta: Any, expected: dict[str, int], node_id: int = 0) -> None:
    """Every expected topic with every partition, this node its leader and only replica, no error."""
    seen = {t.name: t for t in meta.topics}
    for name, count in expected.items():
        topic = seen.get(name)
        if topic is None or topic.error_code != 0:
            raise AssertionError(f"Metadata lacks {name} or answers an error for it: {topic}")
        indexes = sorted(p.partition_index for p in topic.partitions)
        if indexes != list(range(count)):
            raise AssertionError(f"Metadata of {name}: partitions {indexes[:5]}... ({len(indexes)}), expected {count}")
        for p in topic.partitions:
            if p.error_code != 0 or p.leader_id != node_id or list(p.replica_nodes) != [node_id]:
                raise AssertionError(f"Metadata of {name}-{p.partition_index}: {p}")


def metadata_all(host: str, port: int, expected: dict[str, int], repeats: int) -> dict[str, Any]:
    """All-topics Metadata on one connection, ``repeats`` times: the times, the answer's size, checked in full."""
    request = _metadata(None)
    times, size = [], 0
    with socket.create_connection((host, port), timeout=300) as sock:
        for _ in range(repeats):
            t0 = time.perf_counter()
            sock.sendall(request)
            body = _receive(sock)
            times.append(time.perf_counter() - t0)
            size = len(body)
        check_metadata(_decode(3, METADATA_VERSION, body), expected)
    return {"repeats": repeats, "p50_s": statistics.median(times), "max_s": max(times), "response_bytes": size}


def metadata_storm(conns: list[socket.socket], expected: dict[str, int]) -> dict[str, Any]:
    """Every connection of ``conns`` asks for every topic at once; the time until the last answer is in (each
    answer must have the first one's size; the first is decoded and checked in full)."""
    request = _metadata(None)
    t0 = time.perf_counter()
    for sock in conns:
        sock.sendall(request)
    sizes = []
    first = None
    for sock in conns:
        body = _receive(sock)
        first = first or body
        sizes.append(len(body))
    elapsed = time.perf_counter() - t0
    assert first is not None
    check_metadata(_decode(3, METADATA_VERSION, first), expected)
    if len(set(sizes)) != 1:
        raise AssertionError(f"all-topics Metadata answers of different sizes: {sorted(set(sizes))[:5]}")
    return {"connections": len(conns), "seconds": elapsed, "response_bytes": sizes[0]}


def still_answering(conns: list[socket.socket]) -> int:
    """How many of ``conns`` answer an ApiVersions (pipelined: all sent, then all read)."""
    request = _api_versions()
    for sock in conns:
        sock.sendall(request)
    ok = 0
    for sock in conns:
        with contextlib.suppress(OSError, ConnectionError):
            ok += _decode(18, 3, _receive(sock)).error_code == 0
    return ok


def end_offsets(host: str, port: int, expected: dict[str, int]) -> dict[tuple[str, int], int]:
    """Every partition's log end offset, by one ListOffsets (latest) request on a raw connection."""
    from kafka.protocol.consumer import ListOffsetsRequest

    L = ListOffsetsRequest.ListOffsetsTopic
    request = ListOffsetsRequest(
        replica_id=-1,
        isolation_level=0,
        topics=[
            L(
                name=name,
                partitions=[
                    L.ListOffsetsPartition(partition_index=i, current_leader_epoch=-1, timestamp=-1)
                    for i in range(count)
                ],
            )
            for name, count in expected.items()
        ],
    )
    with socket.create_connection((host, port), timeout=300) as sock:
        sock.sendall(_frame(request, LIST_OFFSETS_VERSION, 3))
        answer = _decode(2, LIST_OFFSETS_VERSION, _receive(sock))
    out = {}
    for t in answer.topics:
        for p in t.partitions:
            if p.error_code != 0:
                raise AssertionError(f"ListOffsets of {t.name}-{p.partition_index}: error {p.error_code}")
            out[(t.name, p.partition_index)] = p.offset
    return out


# ----- confluent-kafka clients -------------------------------------------------------------------------------
def create_topics(bootstrap: str, names: list[str], partitions: int, per_request: int) -> list[float]:
    """The topics created through CreateTopics, ``per_request`` a request; the seconds of each request."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 4})
    times = []
    for i in range(0, len(names), per_request):
        t0 = time.perf_counter()
        futures = admin.create_topics([NewTopic(n, partitions, -1) for n in names[i : i + per_request]])
        for future in futures.values():
            future.result(120)
        times.append(time.perf_counter() - t0)
    return times


def _value(topic: str, partition: int, round_: int) -> bytes:
    return f"{topic}/{partition}/{round_}".encode()


def _in_threads(work: Any, topics: list[str], clients: int, errors: list[str], what: str) -> float:
    """``work(share)`` in ``clients`` threads, each given every ``clients``-th topic; the seconds until all are
    done. Fails with the first ``errors`` they recorded."""
    t0 = time.perf_counter()
    threads = [threading.Thread(target=work, args=(topics[i::clients],)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise AssertionError(f"{what} failed: {errors[:5]} ({len(errors)} errors)")
    return time.perf_counter() - t0


def produce_everywhere(bootstrap: str, topics: list[str], partitions: int, round_: int, clients: int) -> float:
    """``clients`` idempotent producers (acks=all), in threads, each writing one record to every partition of its
    share of ``topics``; every delivery must succeed. The seconds until the last is acknowledged. Idempotent: a
    produce request of thousands of partitions can outlast librdkafka's 30 s request.timeout.ms on a loaded machine,
    and a plain producer's retry then writes its records twice (allowed by Kafka's semantics, and seen in a run)."""
    from confluent_kafka import Producer

    errors: list[str] = []

    def work(share: list[str]) -> None:
        producer = Producer(
            {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 20, "log_level": 3}
        )

        def report(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(f"{msg.topic()}-{msg.partition()}: {err}")

        for topic in share:
            for p in range(partitions):
                producer.produce(topic, _value(topic, p, round_), partition=p, on_delivery=report)
            producer.poll(0)
        left = producer.flush(300)
        if left:
            errors.append(f"{left} records not delivered")

    return _in_threads(work, topics, clients, errors, "produce")


def consume_everywhere(bootstrap: str, topics: list[str], partitions: int, rounds: int, clients: int) -> float:
    """``clients`` consumers, in threads, each assigned every partition of its share of ``topics`` from offset 0;
    each must read exactly the ``rounds`` records written to each of its partitions. The seconds it took."""
    from confluent_kafka import Consumer, TopicPartition

    errors: list[str] = []

    def work(share: list[str]) -> None:
        consumer = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": "scale", "enable.auto.commit": False, "log_level": 3}
        )
        consumer.assign([TopicPartition(t, p, 0) for t in share for p in range(partitions)])
        want = {_value(t, p, r) for t in share for p in range(partitions) for r in range(rounds)}
        deadline = time.monotonic() + 300
        while want and time.monotonic() < deadline:
            for m in consumer.consume(1000, 0.5):
                if m.error() is not None:
                    errors.append(str(m.error()))
                    continue
                value = m.value()
                if value not in want or not value.startswith(f"{m.topic()}/{m.partition()}/".encode()):
                    errors.append(f"unexpected or repeated record {value!r} in {m.topic()}-{m.partition()}")
                want.discard(value)
        consumer.close()
        if want:
            errors.append(f"{len(want)} records not read, e.g. {sorted(want)[:3]}")

    return _in_threads(work, topics, clients, errors, "consume")


# ----- the run -----------------------------------------------------------------------------------------------
def _started(log_dir: Path, settings: dict[str, str]) -> tuple[Any, float]:
    """A ``kafkalog serve`` on ``log_dir``; (the process, the seconds from its start to its listener being up)."""
    from tests.brokertools import BrokerProcess

    server = BrokerProcess(log_dir, settings)
    t0 = time.perf_counter()
    server.start(timeout=1800)
    return server, time.perf_counter() - t0


def calibrate(server: Any, p: ScaleParams) -> tuple[dict[str, int], dict[str, Any]]:
    """(the broker's figures with no topic, the RSS one partition and one connection add: see step 1)."""
    pid = server.proc.pid
    time.sleep(1.0)  # the startup's last threads settle
    base = proc_figures(pid)
    create_topics(server.bootstrap, ["calibration"], p.calibration_partitions, 1)
    produce_everywhere(server.bootstrap, ["calibration"], p.calibration_partitions, 0, 1)
    with_partitions = proc_figures(pid)
    conns = open_connections(server.host, server.port, p.calibration_connections, lambda i: "calibration")
    with_connections = proc_figures(pid)
    for sock in conns:
        sock.close()
    c_partition = max(0, with_partitions["rss"] - base["rss"]) / p.calibration_partitions
    c_connection = max(0, with_connections["rss"] - with_partitions["rss"]) / p.calibration_connections
    calibrated = {"rss": with_connections["rss"], "c_partition": c_partition, "c_connection": c_connection}
    return base, calibrated


def _restart(server: Any, log_dir: Path, settings: dict[str, str], how: signal.Signals) -> tuple[Any, dict]:
    """Stop ``server`` with ``how`` (SIGTERM: clean; SIGKILL: unclean), start a new one; the timings."""
    t0 = time.perf_counter()
    if how == signal.SIGTERM:
        code = server.stop(timeout=1800)
        if code != 0:
            raise AssertionError(f"kafkalog serve exited {code} on SIGTERM:\n{server.log[-3000:]}")
    else:
        server.proc.kill()
        server.proc.wait()
    stopped = time.perf_counter() - t0
    new, start_s = _started(log_dir, settings)
    return new, {"stop_s": stopped, "start_s": start_s}


def _check_offsets(server: Any, expected: dict[str, int], rounds: int) -> int:
    """Every partition's end offset is ``rounds`` (each round wrote one record to each): the partitions seen."""
    offsets = end_offsets(server.host, server.port, expected)
    wrong = {tp: o for tp, o in offsets.items() if o != rounds}
    if len(offsets) != sum(expected.values()) or wrong:
        raise AssertionError(f"{len(offsets)} partitions answered; end offsets not {rounds}: {list(wrong.items())[:5]}")
    return len(offsets)


def tuned_restarts(
    server: Any, p: ScaleParams, log_dir: Path, settings: dict[str, str], expected: dict[str, int], first_round: int
) -> tuple[Any, dict[str, Any]]:
    """The clean and the unclean restart again with ``tuned_recovery_threads`` recovery threads (which also close
    the logs at shutdown): the broker is restarted with them first (not timed), each restart follows a round of one
    record per partition (rounds ``first_round`` and the next), and every partition must have every round after."""
    tuned = settings | {"num.recovery.threads.per.data.dir": str(p.tuned_recovery_threads)}
    topics = list(expected)
    server, _ = _restart(server, log_dir, tuned, signal.SIGTERM)
    out: dict[str, Any] = {"threads": p.tuned_recovery_threads}
    for i, (kind, how) in enumerate((("clean", signal.SIGTERM), ("unclean", signal.SIGKILL))):
        produce_everywhere(server.bootstrap, topics, p.partitions_per_topic, first_round + i, p.producers)
        server, out[kind] = _restart(server, log_dir, tuned, how)
        out[kind]["partitions_loaded"] = _check_offsets(server, expected, first_round + i + 1)
    return server, out


def run_scale(p: ScaleParams, root: Path) -> dict[str, Any]:
    """Steps 1-7 of the module docstring on a broker in ``root``; the figures, the bounds and the failures."""
    log_dir = root / "logs"
    settings = dict(p.settings)
    topics = [f"scale-{i:04d}" for i in range(p.topics)]
    expected = dict.fromkeys(topics, p.partitions_per_topic)
    result: dict[str, Any] = {"params": asdict(p)}
    server, first_start = _started(log_dir, settings)
    conns: list[socket.socket] = []
    try:
        result["first_start_s"] = first_start
        base, calibrated = calibrate(server, p)
        limits = {"nofile": nofile_limit(server.proc.pid), "max_map_count": max_map_count()}
        bounds = predict(p, base, calibrated)
        result.update(base=base, calibrated=calibrated, limits=limits, bounds=asdict(bounds))
        failures = check_bounds({}, bounds, limits)
        if failures:
            raise AssertionError("; ".join(failures))
        expected_all = expected | {"calibration": p.calibration_partitions}
        with Sampler(server.proc.pid) as sampler:
            t0 = time.perf_counter()
            times = create_topics(server.bootstrap, topics, p.partitions_per_topic, p.topics_per_request)
            result["create"] = {
                "seconds": time.perf_counter() - t0,
                "requests": len(times),
                "max_request_s": max(times),
            }
            t0 = time.perf_counter()
            conns = open_connections(server.host, server.port, p.connections, lambda i: topics[i % len(topics)])
            result["connections"] = {"count": len(conns), "seconds": time.perf_counter() - t0}
            result["metadata_all"] = metadata_all(server.host, server.port, expected_all, p.metadata_repeats)
            result["metadata_storm"] = metadata_storm(conns[: p.metadata_storm], expected_all)
            result["produce_s"] = produce_everywhere(server.bootstrap, topics, p.partitions_per_topic, 0, p.producers)
            result["consume_s"] = consume_everywhere(server.bootstrap, topics, p.partitions_per_topic, 1, p.consumers)
            answering = still_answering(conns)
            result["connections"]["answering_after"] = answering
            if answering != len(conns):
                raise AssertionError(f"only {answering} of {len(conns)} connections still answer ApiVersions")
            result["rss_before_restart"] = proc_figures(server.proc.pid)["rss"]
        result["peaks"] = sampler.peaks
        for sock in conns:
            sock.close()
        conns = []
        server, clean = _restart(server, log_dir, settings, signal.SIGTERM)
        clean["partitions_loaded"] = _check_offsets(server, expected, 1)
        produce_everywhere(server.bootstrap, topics, p.partitions_per_topic, 1, p.producers)
        server, unclean = _restart(server, log_dir, settings, signal.SIGKILL)
        unclean["partitions_loaded"] = _check_offsets(server, expected, 2)
        result["restart"] = {"clean": clean, "unclean": unclean}
        if p.tuned_recovery_threads:
            server, result["restart_tuned"] = tuned_restarts(server, p, log_dir, settings, expected, first_round=2)
        result["failures"] = check_bounds(result["peaks"], bounds, limits)
        code = server.stop(timeout=1800)
        if code != 0:
            raise AssertionError(f"kafkalog serve exited {code}:\n{server.log[-3000:]}")
    finally:
        for sock in conns:
            sock.close()
        server.stop(timeout=1800)
    return result


def print_scale(console: Console, r: dict[str, Any]) -> None:
    p = r["params"]
    parts = p["topics"] * p["partitions_per_topic"]
    table = Table(title=f"Scale: {parts:,} partitions ({p['topics']} topics), {p['connections']:,} raw connections")
    table.add_column("measure")
    table.add_column("figure", justify="right")
    create = r["create"]
    table.add_row(
        f"CreateTopics, {p['topics_per_request']} topics a request",
        f"{create['seconds']:.1f} s ({create['seconds'] / parts * 1e3:.1f} ms/partition; slowest request "
        f"{create['max_request_s']:.1f} s)",
    )
    table.add_row(
        "raw connections opened (ApiVersions + Metadata of one topic each)", f"{r['connections']['seconds']:.1f} s"
    )
    m = r["metadata_all"]
    table.add_row(
        "Metadata of every topic, one at a time",
        f"p50 {m['p50_s'] * 1e3:.0f} ms, max {m['max_s'] * 1e3:.0f} ms ({m['response_bytes'] / MiB:.2f} MiB)",
    )
    s = r["metadata_storm"]
    table.add_row(f"Metadata of every topic from {s['connections']} connections at once", f"{s['seconds']:.1f} s")
    table.add_row(
        f"produce 1 record to every partition ({p['producers']} idempotent producers, acks=all)",
        f"{r['produce_s']:.1f} s",
    )
    table.add_row(f"consume every partition from 0 ({p['consumers']} consumers)", f"{r['consume_s']:.1f} s")
    table.add_row("raw connections still answering ApiVersions", f"{r['connections']['answering_after']:,}")
    restarts = [("restart", 1)] + ([("restart_tuned", r["restart_tuned"]["threads"])] if "restart_tuned" in r else [])
    for key, threads in restarts:
        for kind in ("clean", "unclean"):
            x = r[key][kind]
            how = "SIGTERM" if kind == "clean" else "SIGKILL"
            table.add_row(
                f"restart after {how}, {threads} recovery thread(s): stop, start (partitions loaded)",
                f"{x['stop_s']:.1f} s, {x['start_s']:.1f} s ({x['partitions_loaded']:,})",
            )
    console.print(table)
    b, peaks = r["bounds"], r["peaks"]
    bt = Table(title="Broker resources: peak against the bound computed before the run", caption=_formulas())
    for col in ("resource", "base", "peak", "bound", "limit"):
        bt.add_column(col, justify="right")
    base, limits = r["base"], r["limits"]
    bt.add_row("open fds", f"{base['fds']:,}", f"{peaks['fds']:,}", f"{b['fds']:,}", f"{limits['nofile']:,}")
    bt.add_row(
        "memory maps", f"{base['maps']:,}", f"{peaks['maps']:,}", f"{b['maps']:,}", f"{limits['max_map_count']:,}"
    )
    bt.add_row("RSS MiB", f"{base['rss'] / MiB:,.0f}", f"{peaks['rss'] / MiB:,.0f}", f"{b['rss_bytes'] / MiB:,.0f}", "")
    console.print(bt)
    console.print(
        f"calibration: {r['calibrated']['c_partition'] / 1024:.1f} KiB RSS per partition, "
        f"{r['calibrated']['c_connection'] / 1024:.1f} KiB per connection; failures: {r['failures'] or 'none'}"
    )


def _formulas() -> str:
    return (
        "fds <= fds_base + P*segments + C + 2*K + 2*threads; maps <= maps_base + 2*P*segments + 2*threads + 64; "
        "RSS <= RSS_cal + 1.25*((P_run+50)*c_partition + (C+K)*c_connection + P_all*(4 KiB + storm*32 B)) + 32 MiB"
    )


def run(*, quick: bool = False, results_dir: Path, console: Console | None = None) -> dict[str, Any]:
    """Run the scale benchmark, write ``results_dir/scale.json``, print its tables; return the result."""
    console = console or Console()
    p = QUICK if quick else FULL
    scratch = common.Scratch("scale")
    try:
        figures = run_scale(p, scratch.root)
    finally:
        scratch.cleanup()
    print_scale(console, figures)
    result = {"benchmark": "scale", "quick": quick, "platform": common.platform_info(), **figures}
    common.save_result(results_dir, "scale", result)
    if figures["failures"]:
        raise AssertionError("bounds exceeded: " + "; ".join(figures["failures"]))
    return result


if __name__ == "__main__":  # python -m benchmarks.bench_scale [--quick]: one run, JSON on stdout
    import sys

    out = run(quick="--quick" in sys.argv, results_dir=common.REPO / "benchmarks" / "results")
    print(json.dumps({k: out[k] for k in ("restart", "bounds", "peaks", "failures")}, default=str))
