"""The issue-16 property: after a kill -9, a single-replica partition shows every record it holds.

A forked child runs a LogManager and appends batches of random sizes (1 to ~2,200 records; the largest take
the overlapped append path) through the replica manager with acks=-1, writing each acknowledged append to
a pipe. The parent SIGKILLs it at a random moment and, before anything reopens the dir, scans the segment
files with a reader of its own (the record layer's batch parser, CRC-checked, no storage code): every record in
the valid batches on disk. Then a LogManager restarts the dir (an unclean recovery) and the property is:

- the recovered log end offset is the end of the valid batches (nothing valid is cut, nothing torn is kept),
  and every acknowledged record is below it;
- the high watermark equals the log end offset (a single-replica leader, Kafka's maybeIncrementLeaderHW on
  becoming leader), so nothing on disk is hidden;
- every record of a valid batch below the log end is readable, with its value, through
  ``Partition.fetch_records``, ``LogManager.consume``, the ``kafkalog consume`` command and the Spark
  data source's reader (``KafkaLogDataSource``, without a Spark session).
"""

from __future__ import annotations

import json
import os
import random
import select
import shutil
import signal
import time
import traceback
from pathlib import Path

from kafkalog.manager import LogManager, TopicPartition
from kafkalog.record import RecordBatchBuilder
from kafkalog.record.scan import iter_batches
from kafkalog.testing import MockTime

TOPIC = "hw"
SEGMENT_BYTES = 1024 * 1024


def _value(run: int, seq: int, length: int) -> bytes:
    head = b"%d:%d:" % (run, seq)
    return head + b"x" * max(0, length - len(head))


def _broker(log_dir: Path) -> dict:
    return {"log.dirs": str(log_dir), "log.initial.task.delay.ms": 0, "log.cleaner.enable": "false"}


def setup_dir(log_dir: Path) -> None:
    """A fresh log dir with the topic (small segments, so that runs cross rolls)."""
    shutil.rmtree(log_dir, ignore_errors=True)
    with LogManager([log_dir], _broker(log_dir), clock=MockTime()) as manager:
        manager.create_topic(TOPIC, 1, {"segment.bytes": SEGMENT_BYTES})
        # The first appends import and warm up the append paths (small and large batches): here, once, in the
        # parent, so that forked children append from their first moment.
        manager.create_topic("warm-up", 1)
        tp = TopicPartition("warm-up", 0)
        for n in (1, 2000):
            builder = RecordBatchBuilder()
            for i in range(n):
                builder.append(None, _value(0, i, 100))
            manager.replica_manager.append_records({tp: builder.build()}, -1)
        manager.delete_topic("warm-up")


def _child(log_dir: Path, run: int, wfd: int, seed: int) -> None:
    """In the forked child: append random-size batches through the replica manager, one ack line per append."""
    code = 0
    try:
        rng = random.Random(seed)
        with LogManager([log_dir], _broker(log_dir)) as manager:
            tp = TopicPartition(TOPIC, 0)
            rm = manager.replica_manager
            os.write(wfd, b"R\n")  # started: the parent's random moment counts from here
            seq = 0
            while True:
                shape = rng.random()  # mostly small batches; some large ones take the overlapped append path
                if shape < 0.05:
                    n, size = rng.randint(1800, 2200), rng.randint(150, 200)
                else:
                    n, size = (rng.randint(1, 5), rng.randint(8, 200)) if shape < 0.75 else (rng.randint(20, 300), 40)
                builder = RecordBatchBuilder()
                for i in range(n):
                    builder.append(None, _value(run, seq + i, size))
                result = rm.append_records({tp: builder.build()}, -1)[tp]
                if result.error is not None:
                    raise result.error
                os.write(wfd, b"A %d %d\n" % (result.info.first_offset, n))
                seq += n
    except BaseException:
        os.write(wfd, b"E " + traceback.format_exc().replace("\n", " | ").encode()[:3000] + b"\n")
        code = 1
    finally:
        os._exit(code)


def _run_child(
    log_dir: Path, run: int, rng: random.Random, max_delay: float
) -> tuple[list[tuple[int, int]], str | None]:
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(rfd)
        _child(log_dir, run, wfd, rng.randrange(1 << 30))
    os.close(wfd)
    data = bytearray()
    started = time.monotonic() + 30  # at most: a child that cannot start is killed and reported
    while b"R\n" not in data and b"E " not in data and (left := started - time.monotonic()) > 0:
        ready, _, _ = select.select([rfd], [], [], left)
        if ready:
            chunk = os.read(rfd, 1 << 16)
            if not chunk:
                break
            data += chunk
    deadline = time.monotonic() + rng.uniform(0.0, max_delay)
    while (left := deadline - time.monotonic()) > 0:
        ready, _, _ = select.select([rfd], [], [], left)
        if ready:
            chunk = os.read(rfd, 1 << 16)
            if not chunk:
                break
            data += chunk
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    while chunk := os.read(rfd, 1 << 16):
        data += chunk
    os.close(rfd)
    lines = bytes(data).split(b"\n")[:-1]
    error = next((line.decode(errors="replace") for line in lines if line.startswith(b"E ")), None)
    acks = [tuple(map(int, line.split()[1:])) for line in lines if line.startswith(b"A ")]
    return acks, error


def scan_valid_records(partition_dir: Path) -> dict[int, bytes]:
    """offset -> value of every record in the valid batches of the segment files, in order, stopping at the
    first batch that is torn or fails its CRC (the recovery boundary). Reads the files, writes nothing."""
    records: dict[int, bytes] = {}
    for path in sorted(partition_dir.glob("*.log")):
        data = path.read_bytes()
        try:
            for batch in iter_batches(memoryview(data), 0):
                batch.ensure_valid()
                for record in batch:
                    records[record.offset] = bytes(record.value)
        except Exception:
            return records  # a torn or corrupt batch: nothing after it counts
    return records


def check_run(log_dir: Path, run: int, rng: random.Random, max_delay: float = 0.3) -> tuple[int, list[str]]:
    """One kill -9 run and the property after it; return (acknowledged records, problems)."""
    from click.testing import CliRunner

    from kafkalog.cli import main

    acks, error = _run_child(log_dir, run, rng, max_delay)
    problems = [f"child failed: {error}"] if error is not None else []
    on_disk = scan_valid_records(log_dir / f"{TOPIC}-0")
    valid_end = max(on_disk) + 1 if on_disk else 0
    if sorted(on_disk) != list(range(valid_end)):
        problems.append("the valid batches on disk do not hold contiguous offsets from 0")
    acked_end = max((first + n for first, n in acks), default=0)
    with LogManager([log_dir], _broker(log_dir), clock=MockTime()) as manager:  # an unclean restart
        partition = manager.replica_manager.get_partition(TOPIC, 0)
        leo, hw = partition.log_end_offset, partition.high_watermark
        if leo != valid_end:
            problems.append(f"recovered log end {leo}, but valid batches on disk end at {valid_end}")
        if acked_end > leo:
            problems.append(f"acknowledged records up to {acked_end} but the log ends at {leo}")
        if hw != leo:
            problems.append(f"high watermark {hw} != log end offset {leo} after the restart")
        fetched = _fetch_all(partition)
        consumed = {r.offset: r.value for r in manager.consume(TOPIC, 0)}
    expected = {o: v for o, v in on_disk.items() if o < leo}
    for name, got in (("Partition.fetch_records", fetched), ("LogManager.consume", consumed)):
        if got != expected:
            problems.append(_difference(name, expected, got))
    result = CliRunner().invoke(
        main, ["consume", "--log-dir", str(log_dir), "--topic", TOPIC, "--partition", "0", "--from-beginning", "--json"]
    )
    if result.exit_code != 0:
        problems.append(f"kafkalog consume failed: {result.output[-300:]}")
    else:
        lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
        cli = {o["offset"]: o["value"].encode() for o in lines}
        if cli != expected:
            problems.append(_difference("kafkalog consume", expected, cli))
    spark = _spark_reader(log_dir)
    if spark != expected:
        problems.append(_difference("the Spark reader", expected, spark))
    return sum(n for _, n in acks), problems


def _fetch_all(partition) -> dict[int, bytes]:
    got: dict[int, bytes] = {}
    offset = partition.log_start_offset
    while True:
        batches = list(partition.fetch_records(offset, 1 << 20, "read_uncommitted").records.batches())
        if not batches:
            return got
        for batch in batches:
            for record in batch:
                if record.offset >= offset:
                    got[record.offset] = bytes(record.value)
        offset = batches[-1].next_offset


def _spark_reader(log_dir: Path) -> dict[int, bytes]:
    """The Spark data source's read path (planning and Arrow reads) without a Spark session."""
    from kafkalog.spark.options import kafka_schema
    from kafkalog.spark.source import KafkaLogDataSource

    source = KafkaLogDataSource({"path": str(log_dir), "subscribe": TOPIC})
    reader = source.reader(kafka_schema())
    got: dict[int, bytes] = {}
    for part in reader.partitions():
        for table in reader.read(part):
            for offset, value in zip(
                table.column("offset").to_pylist(), table.column("value").to_pylist(), strict=True
            ):
                got[offset] = value
    return got


def _difference(name: str, expected: dict[int, bytes], got: dict[int, bytes]) -> str:
    missing = sorted(set(expected) - set(got))
    extra = sorted(set(got) - set(expected))
    wrong = sorted(o for o in set(expected) & set(got) if expected[o] != got[o])
    more = "..." if len(missing) > 5 else ""
    return (
        f"{name}: {len(got)} records of {len(expected)} expected; missing {missing[:5]}{more}"
        f", extra {extra[:5]}, different values at {wrong[:5]}"
    )


def hw_property(iterations: int, root: Path, seed: int, cycle: int = 5):
    """The property over ``iterations`` kill -9 runs (a fresh dir every ``cycle`` runs); a reliability Row."""
    from .runner import Row

    row = Row("kill -9 at random: HW == LEO and every valid record readable (consume, fetch, Spark reader)")
    rng = random.Random(seed)
    log_dir = root / "hw-property"
    for run in range(iterations):
        if run % cycle == 0:
            setup_dir(log_dir)
        acked, problems = check_run(log_dir, run, rng)
        row.runs += 1
        row.acked += acked
        row.corrupt += len(problems)
        row.failures += [f"run {run}: {p}" for p in problems]
    row.note = "restart = unclean recovery; readers compared with an own scan of the files"
    return row
