"""LogManager under concurrent use: producers, readers, retention, flushes and checkpoints on real threads.

Every thread runs for a bounded time. No thread may raise, except a read of an offset that retention (or
nothing else) moved below the log start offset; every batch a reader sees must be complete and CRC-valid, in
offset order, holding exactly the values the producers wrote. At the end the log dir reopens with every
retained record.
"""

from __future__ import annotations

import hashlib
import logging
import random
import sys
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from kafkalog import LogManager
from kafkalog.errors import OffsetOutOfRangeError
from kafkalog.record import RecordBatchBuilder
from kafkalog.storage.checkpoints import OffsetCheckpointFile

TOPIC = "busy"
PARTITIONS = 3
DURATION_S = 5.0
JOIN_TIMEOUT_S = 30.0


def make_value(producer: str, partition: int, seq: int) -> bytes:
    """A self-checking value: who wrote it, where, its sequence number, filler, and a digest of all that."""
    head = b"%s|%d|%d|" % (producer.encode(), partition, seq)
    body = head + b"." * ((seq * 13 + partition) % 90)
    return body + b"|" + hashlib.blake2b(body, digest_size=8).hexdigest().encode()


def parse_value(value: bytes) -> tuple[str, int, int]:
    producer, partition, seq = value.split(b"|", 3)[:3]
    parsed = producer.decode(), int(partition), int(seq)
    assert value == make_value(*parsed), f"malformed value {value!r}"
    return parsed


class ErrorLog(logging.Handler):
    """Collects ERROR records from kafkalog (e.g. an uncaught exception in a scheduled task)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(self.format(record))


class Harness:
    """Worker threads sharing a stop flag, an error list and per-thread operation counters."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.errors: list[str] = []
        self.counts: dict[str, Counter] = {}
        self.threads: list[threading.Thread] = []

    def spawn(
        self, name: str, step: Callable[[random.Random, Counter], None], seed: int, keep_going: bool = False
    ) -> None:
        """A thread repeating ``step`` until stopped; an exception stops everyone, unless ``keep_going``."""
        counter = self.counts.setdefault(name, Counter())
        rng = random.Random(seed)

        def run() -> None:
            while not self.stop.is_set():
                try:
                    step(rng, counter)
                except BaseException as e:
                    self.errors.append(f"{name}:\n{traceback.format_exc()}")
                    counter[f"error:{type(e).__name__}"] += 1
                    if not keep_going:
                        self.stop.set()
                        return

        self.threads.append(threading.Thread(target=run, name=name, daemon=True))

    def run_for(self, seconds: float) -> None:
        for thread in self.threads:
            thread.start()
        self.stop.wait(seconds)
        self.stop.set()
        for thread in self.threads:
            thread.join(JOIN_TIMEOUT_S)
        stuck = [t for t in self.threads if t.is_alive()]
        if stuck:
            frames = sys._current_frames()
            stacks = "\n".join(
                f"--- {t.name}\n" + "".join(traceback.format_stack(frames[t.ident])) for t in stuck if t.ident in frames
            )
            raise AssertionError(f"threads still running {JOIN_TIMEOUT_S}s after stop (deadlock?):\n{stacks}")

    def report(self) -> str:
        lines = [
            f"{name:>14}: " + ", ".join(f"{k}={v}" for k, v in sorted(c.items())) for name, c in self.counts.items()
        ]
        return "\n".join(lines)


def test_producers_readers_retention_flushes_and_checkpoints_at_once(tmp_path: Path) -> None:
    errors_log = ErrorLog()
    logging.getLogger("kafkalog").addHandler(errors_log)
    harness = Harness()
    expected: dict[tuple[int, int], bytes] = {}  # (partition, offset) -> value, filled once an append returns
    manager = LogManager(tmp_path)
    manager.startup()
    try:
        manager.create_topic(
            TOPIC,
            partitions=PARTITIONS,
            config={
                "segment.bytes": 4096,
                "retention.bytes": 16384,
                "index.interval.bytes": 256,
                "file.delete.delay.ms": 300,
            },
        )
        logs = [manager.get_log(TOPIC, p) for p in range(PARTITIONS)]
        warm = RecordBatchBuilder(compression="gzip")  # the first append pays for lazy imports: not in the race
        warm.append(None, make_value("warm-up", 0, 0))
        expected[(0, logs[0].append(warm).first_offset)] = make_value("warm-up", 0, 0)

        # ----- producers ------------------------------------------------------------------------------------
        seqs: dict[tuple[str, int], int] = {}

        def next_seq(producer: str, partition: int) -> int:
            seqs[(producer, partition)] = seqs.get((producer, partition), -1) + 1
            return seqs[(producer, partition)]

        def produce(rng: random.Random, c: Counter) -> None:
            p = rng.randrange(PARTITIONS)
            value = make_value("produce", p, next_seq("produce", p))
            partition, offset = manager.produce(TOPIC, value, key=b"k", partition=p)
            assert partition == p
            expected[(p, offset)] = value
            c["records"] += 1

        def appender(name: str) -> Callable[[random.Random, Counter], None]:
            def append(rng: random.Random, c: Counter) -> None:
                p = rng.randrange(PARTITIONS)
                values = [make_value(name, p, next_seq(name, p)) for _ in range(rng.randint(1, 20))]
                if rng.random() < 0.5:
                    info = logs[p].append([(None, v) for v in values])
                else:
                    builder = RecordBatchBuilder(compression=rng.choice(("none", "gzip", "lz4")))
                    for v in values:
                        builder.append(b"key", v)
                    info = logs[p].append(builder)
                assert info.last_offset - info.first_offset + 1 == len(values)
                for i, v in enumerate(values):
                    expected[(p, info.first_offset + i)] = v
                c["batches"] += 1
                c["records"] += len(values)

            return append

        # ----- readers --------------------------------------------------------------------------------------
        def check_batches(p: int, batches: list, fetch_offset: int) -> int:
            """Complete, valid, contiguous batches holding what was written; return the record count."""
            assert batches, f"partition {p}: empty read at retained offset {fetch_offset}"
            assert batches[0].base_offset <= fetch_offset <= batches[0].last_offset
            last_seq: dict[str, int] = {}
            n = 0
            previous_next = None
            for batch in batches:
                batch.ensure_valid()
                if previous_next is not None:
                    assert batch.base_offset == previous_next, f"partition {p}: gap before {batch.base_offset}"
                previous_next = batch.last_offset + 1
                offsets = []
                for record in batch:
                    offsets.append(record.offset)
                    producer, partition, seq = parse_value(record.value)
                    assert partition == p
                    assert seq > last_seq.get(producer, -1), f"partition {p}: {producer} out of order"
                    last_seq[producer] = seq
                    known = expected.get((p, record.offset))
                    assert known is None or known == record.value, f"partition {p} offset {record.offset}"
                    n += 1
                assert offsets == list(range(batch.base_offset, batch.last_offset + 1))
            return n

        def out_of_range(p: int, offset: int, error: OffsetOutOfRangeError, c: Counter) -> None:
            # only ever below the log start, which only moves forward: it must be below it now
            assert offset < logs[p].log_start_offset, f"partition {p}: {error} for offset {offset}"
            assert "starting from offset" in str(error), error
            c["out_of_range"] += 1

        def random_reads(rng: random.Random, c: Counter) -> None:
            p = rng.randrange(PARTITIONS)
            log = logs[p]
            start, hw = log.log_start_offset, log.high_watermark
            if hw <= start:
                time.sleep(0.001)
                return
            offset = rng.randrange(start, hw)
            try:
                fetch = log.read(offset, max_bytes=rng.choice((1, 200, 4096, 1 << 20)))
                batches = list(fetch.records.batches())
            except OffsetOutOfRangeError as e:
                out_of_range(p, offset, e, c)
                return
            c["records"] += check_batches(p, batches, offset)
            c["reads"] += 1

        def full_scans(rng: random.Random, c: Counter) -> None:
            p = rng.randrange(PARTITIONS)
            log = logs[p]
            start = log.log_start_offset
            begin = rng.choice((None, rng.randrange(start, max(start + 1, log.high_watermark))))
            use_consume = rng.random() < 0.3
            source = manager.consume(TOPIC, p, begin) if use_consume else log.records(begin)
            expected_next = begin
            last_seq: dict[str, int] = {}
            try:
                for n, record in enumerate(source):
                    if expected_next is None:
                        assert record.offset >= start
                    else:
                        assert record.offset == expected_next, f"partition {p}: {record.offset} != {expected_next}"
                    expected_next = record.offset + 1
                    producer, partition, seq = parse_value(record.value)
                    assert partition == p
                    assert seq > last_seq.get(producer, -1)
                    last_seq[producer] = seq
                    known = expected.get((p, record.offset))
                    assert known is None or known == record.value
                    c["records"] += 1
                    if n >= 2000:
                        break
            except OffsetOutOfRangeError as e:
                out_of_range(p, e.offset if e.offset is not None else expected_next, e, c)
                if expected_next is not None:
                    assert e.offset == expected_next
            c["consume_scans" if use_consume else "scans"] += 1
            if expected_next is None or expected_next == begin:
                time.sleep(0.001)  # nothing there yet: do not spin on the log lock

        # ----- background work ------------------------------------------------------------------------------
        def retention(rng: random.Random, c: Counter) -> None:
            c["segments_deleted"] += manager.cleanup_logs()
            c["passes"] += 1
            time.sleep(rng.uniform(0, 0.004))

        def checkpoints(rng: random.Random, c: Counter) -> None:
            starts = [lg.log_start_offset for lg in logs]
            manager.checkpoint_recovery_points()
            manager.checkpoint_log_start_offsets()
            manager.checkpoint_high_watermarks()
            recovery = OffsetCheckpointFile(tmp_path / "recovery-point-offset-checkpoint").read()
            log_start = OffsetCheckpointFile(tmp_path / "log-start-offset-checkpoint").read()
            hws = OffsetCheckpointFile(tmp_path / "replication-offset-checkpoint").read()
            assert set(recovery) == set(hws) == {(TOPIC, p) for p in range(PARTITIONS)}
            for (_, p), offset in recovery.items():
                assert offset <= logs[p].log_end_offset
            for (_, p), offset in hws.items():
                assert starts[p] <= offset <= logs[p].log_end_offset
            for (_, p), offset in log_start.items():
                assert starts[p] <= offset <= logs[p].log_start_offset
            c["rounds"] += 1
            time.sleep(rng.uniform(0, 0.004))

        def flushes(rng: random.Random, c: Counter) -> None:
            log = logs[rng.randrange(PARTITIONS)]
            if rng.random() < 0.5:
                log.flush()
            else:
                log.flush(rng.randrange(log.log_start_offset, log.log_end_offset + 1))
            manager.flush_dirty_logs()
            c["flushes"] += 1
            time.sleep(rng.uniform(0, 0.01))

        harness.spawn("produce", produce, 1)
        harness.spawn("append-a", appender("append-a"), 2)
        harness.spawn("append-b", appender("append-b"), 3)
        harness.spawn("random-reads", random_reads, 4)
        harness.spawn("random-reads-2", random_reads, 5)
        harness.spawn("full-scans", full_scans, 6)
        harness.spawn("retention", retention, 7)
        harness.spawn("checkpoints", checkpoints, 8)
        harness.spawn("flushes", flushes, 9)
        harness.run_for(DURATION_S)
        print("\noperations per thread:\n" + harness.report())
        assert not harness.errors, "\n".join(harness.errors)
        assert not errors_log.records, "\n".join(errors_log.records)
        for name, counter in harness.counts.items():
            assert sum(counter.values()) >= 10, f"{name} hardly ran: {counter}"
        assert harness.counts["retention"]["segments_deleted"] > 0

        # ----- the final state, then a clean restart ------------------------------------------------------
        manager.cleanup_logs()
        final = {}
        for p, log in enumerate(logs):
            start, end = log.log_start_offset, log.log_end_offset
            assert start > 0, f"partition {p}: retention never moved the log start"
            assert log.size <= 16384 + 4096
            got = [(r.offset, r.value) for r in log.records(start, isolation="log_end")]
            assert got == [(o, expected[(p, o)]) for o in range(start, end)]
            final[p] = (start, end, got)
    finally:
        harness.stop.set()
        manager.shutdown()
        logging.getLogger("kafkalog").removeHandler(errors_log)

    with LogManager(tmp_path) as manager:
        for p in range(PARTITIONS):
            log = manager.get_log(TOPIC, p)
            start, end, got = final[p]
            assert (log.log_start_offset, log.log_end_offset) == (start, end)
            assert [(r.offset, r.value) for r in log.records(start, isolation="log_end")] == got
            for segment in log.segments:
                for _, batch in segment.log.batches():
                    batch.ensure_valid()
            assert not list((tmp_path / f"{TOPIC}-{p}").glob("*.deleted"))


def test_concurrent_checkpoint_writes_never_fail_or_publish_a_torn_file(tmp_path: Path) -> None:
    """The scheduler's recovery-point checkpoint task and an explicit caller write the same file at once (Kafka
    serialises CheckpointFile.write with a lock): neither may fail, and a reader must always see a whole file."""
    errors_log = ErrorLog()
    logging.getLogger("kafkalog").addHandler(errors_log)
    broker = {"log.initial.task.delay.ms": 0, "log.flush.offset.checkpoint.interval.ms": 1}
    harness = Harness()
    try:
        with LogManager(tmp_path, broker) as manager:
            manager.create_topic("a", partitions=40)
            manager.create_topic("b", partitions=1)
            path = tmp_path / "recovery-point-offset-checkpoint"
            manager.get_log("b", 0).append([(None, b"warm-up")])

            def grow(rng: random.Random, c: Counter) -> None:
                # recovery points of very different widths, so two writes differ in length
                log = manager.get_log("b", 0)
                log.append([(None, b"x")] * rng.choice((1, 1000)))
                log.flush()
                c["appends"] += 1
                time.sleep(0.001)

            def write(rng: random.Random, c: Counter) -> None:
                manager.checkpoint_recovery_points()
                c["writes"] += 1

            def read(rng: random.Random, c: Counter) -> None:
                if not path.stat().st_size:
                    return  # not written yet
                entries = OffsetCheckpointFile(path).read()
                assert len(entries) == 41, entries
                c["reads"] += 1

            harness.spawn("grow", grow, 1)
            harness.spawn("write", write, 2, keep_going=True)
            harness.spawn("read", read, 3, keep_going=True)
            harness.run_for(1.5)
            print("\noperations per thread:\n" + harness.report())
    finally:
        harness.stop.set()
        logging.getLogger("kafkalog").removeHandler(errors_log)
    problems = harness.errors + errors_log.records
    summary = f"{len(errors_log.records)} failed scheduled checkpoint tasks; per thread:\n{harness.report()}"
    assert not problems, f"{summary}\nthe first problems:\n" + "\n".join(p[-600:] for p in problems[:2])
