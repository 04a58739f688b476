"""A log dir that fills up under ``kafkalog serve`` (issue 23's reliability row; quick form in
tests/test_broker_disk_full.py, the same check).

A small tmpfs (8 MiB, mounted here: needs root) is the first of two ``log.dirs``; the second is an ordinary
directory. A topic of two partitions gets one replica in each (the log manager puts a new partition in the dir
with the fewest). A librdkafka producer (acks=all, no retries, so each failure reports the broker's own error)
sends 1 KB records to both partitions until the tmpfs is full. Then, as Kafka's LogDirFailureChannel does:

- the produce that hit ENOSPC is answered KAFKA_STORAGE_ERROR, and so is every later produce to that dir's
  partition (a raw Produce request shows the code); nothing of a failed append stays in the log;
- the dir is offline: Metadata says LEADER_NOT_AVAILABLE with the replica in offline_replicas, and the Prometheus
  endpoint (``kafka_log_logmanager_offlinelogdirectorycount``) says so; a group whose __consumer_offsets partition
  is in that dir gets COORDINATOR_NOT_AVAILABLE from FindCoordinator, one whose partition is in the other dir a
  coordinator;
- the other dir keeps serving: its partition takes produces and serves fetches, and a new topic is placed there;
- a clean shutdown writes nothing into the failed dir (no clean-shutdown marker: the next start recovers it)
  and after a restart -- the tmpfs still full -- every acknowledged record of both partitions is served, at the
  offset it was acknowledged at, and nothing else.

The tmpfs is unmounted in a ``finally``.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

from tools.cluster.raw import request as raw_request

from .broker_kill9 import Broker
from .runner import Row

TOPIC = "filling"
VALUE_BYTES = 1000
TMPFS_SIZE = "8m"
KAFKA_STORAGE_ERROR = 56
LEADER_NOT_AVAILABLE = 5
_METRICS = re.compile(r"Prometheus metrics endpoint on http://[^:]+:(\d+)/metrics")


class MountNotPermitted(Exception):
    """``mount -t tmpfs`` was refused (not root, or no mount namespace to use)."""


@contextlib.contextmanager
def tmpfs(directory: Path, size: str = TMPFS_SIZE):  # type: ignore[no-untyped-def]
    """A tmpfs of ``size`` mounted on ``directory`` for the duration; MountNotPermitted when it cannot be."""
    directory.mkdir(parents=True, exist_ok=True)
    try:
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(directory)],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise MountNotPermitted(f"mount could not be run: {e}") from e
    if done.returncode != 0:
        raise MountNotPermitted(f"mount -t tmpfs was refused: {done.stderr.strip() or done.returncode}")
    try:
        yield directory
    finally:
        for _ in range(20):
            if subprocess.run(["umount", str(directory)], capture_output=True).returncode == 0:
                break
            time.sleep(0.5)  # a process may still be closing its files there


def value_for(partition: int, seq: int) -> bytes:
    head = b"p%d:%d:" % (partition, seq)
    return head + b"x" * (VALUE_BYTES - len(head))


def _find_coordinator(bootstrap: str, group: str) -> int:
    """One FindCoordinator v1 for ``group``: its error code."""
    from kafka.protocol.metadata import FindCoordinatorRequest

    from kafkalog.broker.protocol import APIS

    body = raw_request(bootstrap, 10, 1, FindCoordinatorRequest(key=group, key_type=0).encode(version=1))
    return int(APIS[10].response[1].decode(body).error_code)


def _group_on(offsets_partition: int, partitions: int) -> str:
    """A group id whose __consumer_offsets partition is ``offsets_partition`` (Kafka's partitionFor)."""
    from kafkalog.coordinator.internal_topic import partition_for

    return next(g for i in range(1000) if partition_for(g := f"group-{i}", partitions) == offsets_partition)


def _raw_produce(bootstrap: str, partition: int, value: bytes) -> int:
    """One Produce v7 (acks=-1) of one record to ``partition``: the partition's error code."""
    from kafka.protocol.producer import ProduceRequest

    from kafkalog.broker.protocol import APIS
    from kafkalog.record import RecordBatchBuilder

    builder = RecordBatchBuilder()
    builder.append(None, value)
    data = ProduceRequest.TopicProduceData
    request = ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout_ms=5000,
        topic_data=[
            data(name=TOPIC, partition_data=[data.PartitionProduceData(index=partition, records=builder.build())])
        ],
    )
    body = raw_request(bootstrap, 0, 7, request.encode(version=7))
    response = APIS[0].response[7].decode(body)
    return int(response.responses[0].partition_responses[0].error_code)


class _Producer:
    """acks=all, no retries: every delivery report carries the broker's answer to the first attempt."""

    def __init__(self, bootstrap: str) -> None:
        from confluent_kafka import Producer

        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": False,
                "retries": 0,
                "linger.ms": 5,
                "message.timeout.ms": 15000,
                "topic.metadata.refresh.interval.ms": 500,
                "log_level": 2,
            }
        )
        self.acked: dict[int, dict[int, bytes]] = {}  # partition -> offset -> value
        self.errors: list[tuple[int, str]] = []  # (partition, error name), in report order
        self.seq = 0

    def send(self, partition: int, count: int) -> None:
        def report(err, msg) -> None:  # type: ignore[no-untyped-def]
            if err is None:
                self.acked.setdefault(msg.partition(), {})[msg.offset()] = bytes(msg.value())
            else:
                self.errors.append((msg.partition(), err.name()))

        for _ in range(count):
            self.producer.produce(TOPIC, value_for(partition, self.seq), partition=partition, on_delivery=report)
            self.seq += 1
            self.producer.poll(0)
        self.producer.flush(60)


def _read_all(bootstrap: str, topic: str, partition: int) -> dict[int, bytes]:
    """Every record of a partition, offset -> value, read from the beginning to its high watermark."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "disk-full-reader", "enable.auto.commit": False, "log_level": 2}
    )
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), 10)
        consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
        out: dict[int, bytes] = {}
        deadline = time.monotonic() + 60
        while len(out) < high and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                out[message.offset()] = bytes(message.value())
        return out
    finally:
        consumer.close()


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
        return response.read().decode()


def _partition_dirs(dirs: list[Path], topic: str) -> dict[int, Path]:
    out = {}
    for d in dirs:
        for child in d.glob(f"{topic}-*"):
            out[int(child.name.rsplit("-", 1)[1])] = d
    return out


def disk_full(root: Path) -> Row:
    """The row; ``runs`` is the number of produces answered KAFKA_STORAGE_ERROR. Raises MountNotPermitted."""
    row = Row(f"a log dir fills up (tmpfs {TMPFS_SIZE} as one of two log.dirs), librdkafka acks=all")
    base = root / "disk-full"
    shutil.rmtree(base, ignore_errors=True)
    full_dir, roomy_dir = base / "small", base / "roomy"
    roomy_dir.mkdir(parents=True)
    with tmpfs(full_dir):
        broker = Broker(
            base / "unused",
            {
                "log.dirs": f"{full_dir},{roomy_dir}",
                "metrics.port": "0",
                "metrics.host": "127.0.0.1",
                "offsets.topic.num.partitions": "2",
            },
        )
        try:
            _fill_and_check(row, broker, [full_dir, roomy_dir])
        finally:
            broker.stop()
    return row


def _fill_and_check(row: Row, broker: Broker, dirs: list[Path]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    full_dir, roomy_dir = dirs
    fail = row.failures.append
    broker.start()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 2, 1)])[TOPIC].result(30)
    placement = _partition_dirs(dirs, TOPIC)
    small = next((p for p, d in placement.items() if d == full_dir), None)
    roomy = next((p for p, d in placement.items() if d == roomy_dir), None)
    if small is None or roomy is None:
        fail(f"the partitions were not spread over both dirs: {placement}")
        return
    if _find_coordinator(broker.bootstrap, "disk-full-probe") != 0:  # creates __consumer_offsets, one per dir
        fail("FindCoordinator failed before the fault")
    offsets = _partition_dirs(dirs, "__consumer_offsets")
    groups = {d: _group_on(p, 2) for p, d in offsets.items()}
    producer = _Producer(broker.bootstrap)
    rounds = 0
    while not any(p == small for p, _ in producer.errors) and rounds < 40:  # 8 MiB is ~8,000 records
        producer.send(small, 400)
        producer.send(roomy, 50)
        rounds += 1
    errors_small = [name for p, name in producer.errors if p == small]
    if not errors_small:
        fail(f"the tmpfs never filled: {sum(map(len, producer.acked.values()))} records acknowledged")
        return
    if errors_small[0] != "KAFKA_STORAGE_ERROR":
        fail(f"the first failed produce to the full dir got {errors_small[0]}, not KAFKA_STORAGE_ERROR")
    if any(p == roomy for p, _ in producer.errors):
        fail(f"produces to the healthy dir failed: {[e for e in producer.errors if e[0] == roomy][:3]}")
    # later produces to the failed dir's partition: KAFKA_STORAGE_ERROR, not written
    codes = [_raw_produce(broker.bootstrap, small, value_for(small, 10**9 + i)) for i in range(3)]
    row.runs = sum(1 for name in errors_small if name == "KAFKA_STORAGE_ERROR") + codes.count(KAFKA_STORAGE_ERROR)
    if set(codes) != {KAFKA_STORAGE_ERROR}:
        fail(f"produces to the offline dir's partition were answered {codes}, not KAFKA_STORAGE_ERROR (56)")
    # the dir is offline, for Metadata and for the metrics
    metadata = admin.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions
    small_md, roomy_md = metadata[small], metadata[roomy]
    if small_md.leader != -1 or small_md.error is None or small_md.error.code() != LEADER_NOT_AVAILABLE:
        fail(f"Metadata of the offline partition: leader {small_md.leader}, error {small_md.error}")
    if roomy_md.leader != 0 or roomy_md.error is not None:
        fail(f"Metadata of the healthy partition: leader {roomy_md.leader}, error {roomy_md.error}")
    port = next((int(m.group(1)) for line in broker.lines if (m := _METRICS.search(line))), None)
    if port is None:
        fail("the broker did not report its metrics endpoint")
    else:
        text = _scrape(port)
        if "kafka_log_logmanager_offlinelogdirectorycount 1.0" not in text:
            fail("the metrics do not count one offline log dir")
        if f'kafka_log_logmanager_logdirectoryoffline{{logDirectory="{full_dir}"}} 1.0' not in text:
            fail("the metrics do not mark the full dir offline")
    # a group whose offsets partition is in the failed dir has no coordinator; one in the other dir has
    if set(groups) == {full_dir, roomy_dir}:
        codes = {d: _find_coordinator(broker.bootstrap, g) for d, g in groups.items()}
        if codes != {full_dir: 15, roomy_dir: 0}:
            fail(
                f"FindCoordinator after the fault: {codes} (COORDINATOR_NOT_AVAILABLE (15) for the failed dir's groups)"
            )
    else:
        fail(f"__consumer_offsets was not spread over both dirs: {offsets}")
    # the other dir keeps serving: produce, fetch, a new topic placed there
    before = len(producer.acked.get(roomy, {}))
    producer.send(roomy, 200)
    if len(producer.acked.get(roomy, {})) != before + 200:
        fail("the healthy dir's partition did not take 200 more records")
    if _read_all(broker.bootstrap, TOPIC, roomy) != producer.acked.get(roomy, {}):
        fail("the healthy dir's partition does not serve exactly its acknowledged records")
    admin.create_topics([NewTopic("after-the-fault", 1, 1)])["after-the-fault"].result(30)
    if _partition_dirs(dirs, "after-the-fault") != {0: roomy_dir}:
        fail(f"a new topic was not placed in the online dir: {_partition_dirs(dirs, 'after-the-fault')}")
    # a clean shutdown leaves the failed dir alone; a restart (tmpfs still full) serves every acknowledged record
    broker.stop()
    markers = {d: (d / ".kafka_cleanshutdown").exists() for d in dirs}
    if markers != {full_dir: False, roomy_dir: True}:
        fail(f"clean-shutdown markers after the fault: {markers} (only the healthy dir should have one)")
    broker.start()
    for partition in (small, roomy):
        acked = producer.acked.get(partition, {})
        stored = _read_all(broker.bootstrap, TOPIC, partition)
        row.acked += len(acked)
        lost = [o for o, v in acked.items() if stored.get(o) != v]
        extra = [o for o in stored if o not in acked]
        row.lost += len(lost)
        row.corrupt += len(extra)
        if lost or extra:
            fail(
                f"partition {partition}: {len(lost)} acknowledged records lost, {len(extra)} never acknowledged served"
            )
    row.note = (
        f"{len(producer.acked.get(small, {}))} records filled the tmpfs; its dir went offline, the other kept serving; "
        "restart recovers it"
    )
