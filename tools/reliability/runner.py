"""``python -m tools.reliability [--quick] [--json PATH]``: crash and I/O-fault checks, one table.

- kill -9: a forked child runs a LogManager and appends; after each ``append`` returns it writes the
  acknowledged offsets to a pipe. The parent SIGKILLs it at a random moment, restarts the log dir (an
  unclean recovery) and checks that every acknowledged record is there, byte for byte, that the records
  served before are unchanged, and that nothing else is served but the one batch that was in flight.
  Done with the default flush policy and with ``flush.messages=1``. kill -9 does not drop the page
  cache, so this proves process-crash durability, not power-loss durability.
- kill -9, the partition layer's property (issue 16): a child appends random-size batches through the
  replica manager and is SIGKILLed at a random moment; after the restart the high watermark equals the log
  end offset and every record of a valid batch on disk below it is readable through Partition.fetch_records,
  LogManager.consume, ``kafkalog consume`` and the Spark reader (``tools.reliability.hw_property``; 200 runs,
  3 with ``--quick``).
- injected I/O faults: ``FaultInjectingFileIO`` makes a write or an fsync in one of two log dirs fail
  with ENOSPC, EIO or EFBIG. The append must fail with KafkaStorageError, that dir must go offline (its
  logs refuse appends and reads) while the other keeps serving; after a restart every acknowledged
  record must be there and the files must hold no corrupt or unacknowledged bytes.
- a real size limit: a child under ``RLIMIT_FSIZE`` (SIGXFSZ ignored) appends until the kernel says EFBIG.
- load: 10,000 partitions (1,000 with ``--quick``), appender and reader threads, size and time retention and the
  log cleaner at work; peak open fds, RSS and memory maps against bounds predicted from the configuration, no
  deadlock, no descriptor or map left on a deleted file, every acknowledged record readable
  (``tools.reliability.load``).
- exactly-once (full runs; the quick form is tests/test_eos_loop.py): a confluent-kafka consume-transform-produce
  program against ``kafkalog serve``, SIGKILLed at random moments and restarted until it has consumed its input;
  every input's output exactly once in the read_committed output (``tools.reliability.eos``; 50 runs).
- cluster transactions (full runs, or ``--cluster-txn-only``; quick form tests/test_cluster_transactions.py): three
  brokers, a transactional producer committing across partitions led by different brokers while the coordinator (2
  in 3) or another broker is SIGKILLed 20 times; every committed transaction read once, completely, nothing else
  (``tools.reliability.cluster_txn``).
- kill -9 of ``kafkalog serve`` (full runs, or ``--broker-only``): an idempotent acks=all librdkafka producer and
  a consumer group under 200 broker SIGKILLs per flush policy; nothing acknowledged lost or duplicated, the group
  resumes at its committed offsets (``tools.reliability.broker_kill9``); a tmpfs log dir that fills up under
  librdkafka goes offline with KAFKA_STORAGE_ERROR while the other dir serves (``tools.reliability.broker_disk_full``).
- replication (full runs, or ``--replication-only``): three brokers and ZooKeeper, acks=all under broker SIGKILLs
  and a ZooKeeper restart, every replica checked; records/s with acks=1 and acks=all; failover time
  (``tools.reliability.replication``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import random
import resource
import select
import shutil
import signal
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path

from kafkalog.errors import CorruptSnapshotError, KafkaStorageError
from kafkalog.manager import LogManager
from kafkalog.storage.fileio import FaultInjectingFileIO, injected
from kafkalog.storage.log import Log
from kafkalog.storage.producer_state import read_snapshot
from kafkalog.testing import MockTime

TOPIC = "acks"
MAX_BATCH = 5
BROKER_KILL9_RUNS = 200  # per flush policy


@dataclass(frozen=True)
class AppendShape:
    """What the kill -9 child appends: records per batch, value sizes, and the topic's segment size."""

    records: tuple[int, int] = (1, MAX_BATCH)
    value_bytes: tuple[int, int] = (8, 300)
    segment_bytes: int = 16384
    cycle: int = 25  # runs between fresh log dirs
    label: str = "1-5 small records per batch"


SMALL_BATCHES = AppendShape()
# ~270-440 KB batches: above OVERLAP_MIN_BYTES, so each is checked on the background thread while it is written
LARGE_BATCHES = AppendShape((900, 1100), (300, 400), 8 << 20, 5, "~350 KB batches, checked while written")


# ----- values that check themselves ----------------------------------------------------------------
def make_value(run: int, seq: int, length: int) -> bytes:
    head = b"%d:%d:%d:" % (run, seq, length)
    filler = hashlib.blake2b(head, digest_size=32).hexdigest().encode()
    return head + (filler * (length // len(filler) + 1))[:length]


def value_ok(value: bytes | None) -> bool:
    try:
        run, seq, length, _ = value.split(b":", 3)
        return value == make_value(int(run), int(seq), int(length))
    except (AttributeError, ValueError):
        return False


def value_key(value: bytes) -> tuple[int, int]:
    run, seq, _ = value.split(b":", 2)
    return int(run), int(seq)


# ----- results ---------------------------------------------------------------------------------------
@dataclass
class Row:
    check: str
    runs: int = 0
    acked: int = 0
    lost: int = 0
    corrupt: int = 0
    failures: list[str] = field(default_factory=list)
    note: str = ""

    @property
    def ok(self) -> bool:
        return self.lost == 0 and self.corrupt == 0 and not self.failures


def _verify_log(lg: Log, known: list[bytes]) -> tuple[list[bytes], list[str]]:
    """Every batch's CRC, contiguous offsets from the log start, self-checking values, an unchanged prefix."""
    problems = []
    for segment in lg.segments:
        for position, batch in segment.log.batches():
            try:
                batch.ensure_valid()
            except Exception as e:
                problems.append(f"bad batch at {segment.log.path}:{position}: {e}")
    values = []
    for expected_offset, record in enumerate(lg.records(isolation="log_end"), start=lg.log_start_offset):
        if record.offset != expected_offset:
            problems.append(f"offset {record.offset} where {expected_offset} was expected")
            break
        if not value_ok(record.value):
            problems.append(f"garbage value at offset {record.offset}: {record.value[:40]!r}")
        values.append(record.value)
    if len(values) != lg.log_end_offset - lg.log_start_offset:
        problems.append(f"{len(values)} records served, log end says {lg.log_end_offset - lg.log_start_offset}")
    for i, old in enumerate(known[: len(values)]):
        if values[i] != old:
            problems.append(f"record at offset {i} changed after a restart")
            break
    return values, problems


# ----- kill -9 ---------------------------------------------------------------------------------------
def _broker(log_dir: Path) -> dict:
    return {"log.dirs": str(log_dir), "log.flush.offset.checkpoint.interval.ms": 25, "log.initial.task.delay.ms": 0}


def _child_append_forever(log_dir: Path, run: int, wfd: int, seed: int, shape: AppendShape) -> None:
    """In the forked child: a real-clock LogManager, appends forever, one ack line per returned append."""
    code = 0
    try:
        rng = random.Random(seed)
        with LogManager([log_dir], _broker(log_dir)) as manager:
            lg = manager.get_log(TOPIC)
            seq = 0
            while True:
                n = rng.randint(*shape.records)
                values = [make_value(run, seq + i, rng.randint(*shape.value_bytes)) for i in range(n)]
                info = lg.append([(None, v) for v in values])
                os.write(wfd, b"A %d %d %d\n" % (info.first_offset, n, seq))  # < PIPE_BUF: atomic
                seq += n
    except BaseException:
        os.write(wfd, b"E " + traceback.format_exc().replace("\n", " | ").encode()[:3000] + b"\n")
        code = 1
    finally:
        os._exit(code)


def _setup_dir(log_dir: Path, flush_messages: int | None, shape: AppendShape) -> None:
    shutil.rmtree(log_dir, ignore_errors=True)
    config = {"segment.bytes": shape.segment_bytes}
    if flush_messages is not None:
        config["flush.messages"] = flush_messages
    with LogManager([log_dir], _broker(log_dir), clock=MockTime()) as manager:
        manager.create_topic(TOPIC, 1, config)
        # The first append imports and warms up the append path: do it here, once, not in every child.
        manager.create_topic("warm-up", 1)
        manager.get_log("warm-up").append([(None, make_value(0, 0, 8))])
        manager.delete_topic("warm-up")


def _run_child(
    log_dir: Path, run: int, rng: random.Random, max_delay: float, shape: AppendShape
) -> tuple[list[bytes], str | None]:
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(rfd)
        _child_append_forever(log_dir, run, wfd, rng.randrange(1 << 30), shape)
    os.close(wfd)
    deadline = time.monotonic() + rng.uniform(0.0, max_delay)
    data = bytearray()
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
    lines = bytes(data).split(b"\n")[:-1]  # a line without its newline was never fully acknowledged
    error = next((line.decode(errors="replace") for line in lines if line.startswith(b"E ")), None)
    return [line for line in lines if line.startswith(b"A ")], error


def kill9(
    iterations: int, flush_messages: int | None, root: Path, seed: int, shape: AppendShape = SMALL_BATCHES
) -> Row:
    label = "flush.messages=1 (fsync per append)" if flush_messages == 1 else "default flush policy"
    if shape is not SMALL_BATCHES:
        label += f", {shape.label}"
    row = Row(f"kill -9 while appending, {label}")
    rng = random.Random(seed)
    log_dir = root / f"kill9-{flush_messages or 'default'}-{shape.segment_bytes}"
    known: list[bytes] = []
    for run in range(iterations):
        if run % shape.cycle == 0:
            _setup_dir(log_dir, flush_messages, shape)
            known = []
        acks, error = _run_child(log_dir, run, rng, 0.4, shape)
        if error is not None:
            row.failures.append(f"run {run}: child failed: {error}")
        with LogManager([log_dir], _broker(log_dir), clock=MockTime()) as manager:  # unclean restart
            values, problems = _verify_log(manager.get_log(TOPIC), known)
        row.runs += 1
        row.corrupt += len(problems)
        row.failures += [f"run {run}: {p}" for p in problems]
        acked_end = len(known)
        for line in acks:
            first, n, seq = map(int, line.split()[1:])
            row.acked += n
            for j in range(n):
                offset = first + j
                if offset >= len(values) or value_key(values[offset]) != (run, seq + j):
                    row.lost += 1
            acked_end = max(acked_end, first + n)
        extra = len(values) - acked_end
        if extra > shape.records[1] or any(value_key(v)[0] != run for v in values[acked_end:]):
            row.corrupt += 1
            row.failures.append(f"run {run}: {extra} unacknowledged records served, more than one batch in flight")
        known = values
    row.note = "restart = unclean recovery; page cache survives kill -9"
    return row


# ----- injected faults -------------------------------------------------------------------------------
class _TwoDirs:
    """A LogManager over two log dirs, topic ``a`` in dir 0 (where faults go) and ``b`` in dir 1, with the
    records acknowledged so far; the checks every fault case makes, before and after a restart."""

    def __init__(self, row: Row, base: Path, config: dict, seed: str) -> None:
        shutil.rmtree(base, ignore_errors=True)
        self.row = row
        self.dirs = [base / "d0", base / "d1"]
        self.broker = {"log.dirs": ",".join(map(str, self.dirs))}
        self.rng = random.Random(seed)
        self.acked: dict[str, list[bytes]] = {"a": [], "b": []}
        self.manager = LogManager(self.dirs, self.broker, clock=MockTime())
        self.manager.startup()
        self.manager.create_topic("a", 1, config)
        self.manager.create_topic("b", 1, config)
        self.la, self.lb = self.manager.get_log("a"), self.manager.get_log("b")
        self.bad_dir = self.la.directory.parent

    def fail(self, message: str) -> None:
        self.row.failures.append(message)

    def append(self, name: str, seq: int) -> None:
        value = make_value(0 if name == "a" else 1, seq, self.rng.randint(8, 400))
        (self.la if name == "a" else self.lb).append([(None, value)])
        self.acked[name].append(value)

    def check_error(self, error: Exception | None, what: str) -> None:
        if error is None:
            self.fail(f"no {what} failed")
        elif str(self.bad_dir) not in str(error):
            self.fail(f"the error does not name the log dir: {error}")

    def check_offline(self, serving: bool = True) -> None:
        """Dir 0 offline; with ``serving``, its log refuses requests while dir 1 keeps serving."""
        if self.manager.offline_log_dirs != [self.bad_dir]:
            self.fail(f"offline dirs {self.manager.offline_log_dirs}, expected [{self.bad_dir}]")
        if not serving:
            return
        for action in (lambda: self.la.append([(None, b"x")]), lambda: self.la.read(0)):
            try:
                action()
            except KafkaStorageError:
                continue
            self.fail("an offline log served a request")
        for i in range(100, 110):
            self.append("b", i)
        if [r.value for r in self.lb.records(isolation="log_end")] != self.acked["b"]:
            self.fail("the healthy dir's log does not serve its records")

    def check_restart(self, allowed_extra_in_a: int = 0) -> None:
        """A restart: no dir offline, every acknowledged record served, no garbage, and at most
        ``allowed_extra_in_a`` unacknowledged records in ``a``; then ``a`` takes appends again."""
        row = self.row
        with LogManager(self.dirs, self.broker, clock=MockTime()) as restarted:
            if restarted.offline_log_dirs:
                self.fail("dirs still offline after a restart")
            for name in ("a", "b"):
                values, problems = _verify_log(restarted.get_log(name), [])
                acked = self.acked[name]
                row.corrupt += len(problems)
                row.failures += problems
                row.acked += len(acked)
                row.lost += sum(1 for i, v in enumerate(acked) if i >= len(values) or values[i] != v)
                if len(values) > len(acked) + (allowed_extra_in_a if name == "a" else 0):
                    row.corrupt += 1
                    self.fail(f"{name}: {len(values) - len(acked)} unacknowledged records after restart")
            restarted.get_log("a").append([(None, make_value(0, 999, 10))])  # writable again


def fault_case(root: Path, err: str, op: str, *, nth: int = 7, torn: bool = True, then_fail=()) -> Row:
    """Two log dirs; a fault in dir 0 while appending to its log; checks before and after a restart."""
    what = {"write": "append", "fsync": "flush"}[op]
    label = f"{err} on {what}" + (", rollback fails too" if then_fail else "")
    row = Row(f"injected {label}")
    config = {"segment.bytes": 4096}
    if op == "fsync":
        config["flush.messages"] = 1
    case = _TwoDirs(row, root / f"fault-{err}-{op}-{len(then_fail)}", config, f"{err}{op}")
    try:
        for i in range(20):
            case.append("a", i)
            case.append("b", i)
        fault = FaultInjectingFileIO(op, err, nth=nth, path_contains=str(case.bad_dir), torn=torn, then_fail=then_fail)
        error = None
        with injected(fault):
            for i in range(20, 200):
                try:
                    case.append("a", i)
                except KafkaStorageError as e:
                    error = e
                    break
        row.runs = fault.injected
        case.check_error(error, "append")
        case.check_offline()
    finally:
        case.manager.shutdown()
    # A failed write is rolled back; a failed fsync leaves its (unacknowledged) record in the page cache.
    case.check_restart(allowed_extra_in_a=1 if (op == "fsync" or then_fail) else 0)
    row.note = "dir offline, other dir serving, restart recovers"
    return row


# ----- faults on reads and on producer-state snapshots -----------------------------------------------
def other_fault_case(root: Path, err: str, trigger: str) -> Row:
    """Two log dirs; a fault in dir 0 on a read (``trigger="read"``), on the producer snapshot a roll writes
    (``"roll"``), or on the snapshot's fsync at a clean shutdown (``"shutdown"``). The request that hit it
    fails with KafkaStorageError naming the dir (for the shutdown: the dir is left without a clean-shutdown
    marker), the dir goes offline, the other dir keeps serving, no half-written snapshot is left to load,
    and a restart serves every acknowledged record and nothing else."""
    op, what = {
        "read": ("read", "read"),
        "roll": ("write", "producer snapshot write (roll)"),
        "shutdown": ("fsync", "producer snapshot fsync (shutdown)"),
    }[trigger]
    row = Row(f"injected {err} on {what}")
    case = _TwoDirs(row, root / f"fault-{err}-{trigger}", {"segment.bytes": 4096}, f"{err}{trigger}")
    try:
        for i in range(20 if trigger != "roll" else 5):
            case.append("a", i)
            case.append("b", i)
        suffix = None if trigger == "read" else ".snapshot"
        fault = FaultInjectingFileIO(op, err, path_contains=str(case.bad_dir), suffix=suffix, torn=trigger == "roll")
        error = None
        with injected(fault):
            if trigger == "read":
                try:
                    list(case.la.records(isolation="log_end"))
                except KafkaStorageError as e:
                    error = e
            elif trigger == "roll":
                for i in range(5, 200):
                    try:
                        case.append("a", i)
                    except KafkaStorageError as e:
                        error = e
                        break
            else:
                case.manager.shutdown()
        if trigger != "shutdown":
            case.check_error(error, trigger)
        case.check_offline(serving=trigger != "shutdown")
    finally:
        case.manager.shutdown()
    row.runs = fault.injected
    clean = [(d / ".kafka_cleanshutdown").exists() for d in case.dirs]
    if trigger == "shutdown" and clean != [d != case.bad_dir for d in case.dirs]:
        case.fail("the clean-shutdown marker is not missing from the failed dir only")
    for snapshot in sorted(case.bad_dir.glob("a-0/*.snapshot")):
        try:
            read_snapshot(snapshot)
        except CorruptSnapshotError as e:
            case.fail(f"a half-written snapshot was left behind: {e}")
    case.check_restart()
    row.note = "dir offline, other dir serving, no half snapshot, restart recovers"
    return row


# ----- a real file size limit ------------------------------------------------------------------------
def rlimit_fsize(root: Path, limit: int = 1 << 20) -> Row:
    row = Row("RLIMIT_FSIZE: real EFBIG from the kernel")
    log_dir = root / "fsize" / f"{TOPIC}-0"
    shutil.rmtree(log_dir.parent, ignore_errors=True)
    config = {"segment.bytes": 64 << 20, "segment.index.bytes": 65536}
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(rfd)
        code = 0
        try:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
            rng = random.Random(7)
            lg = Log.open(log_dir, config)
            seq = 0
            while True:
                values = [make_value(0, seq + i, rng.randint(100, 3000)) for i in range(rng.randint(1, MAX_BATCH))]
                try:
                    info = lg.append([(None, v) for v in values])
                except KafkaStorageError as e:
                    errno_name = getattr(getattr(e, "io_error", None), "errno", None)
                    os.write(wfd, b"F %s %s\n" % (str(errno_name).encode(), str(e).encode()[:500]))
                    break
                os.write(wfd, b"A %d %d %d\n" % (info.first_offset, len(values), seq))
                seq += len(values)
        except BaseException:
            os.write(wfd, b"E " + traceback.format_exc().replace("\n", " | ").encode()[:3000] + b"\n")
            code = 1
        finally:
            os._exit(code)
    os.close(wfd)
    data = b""
    while chunk := os.read(rfd, 1 << 16):
        data += chunk
    os.close(rfd)
    os.waitpid(pid, 0)
    lines = data.split(b"\n")[:-1]
    acks = [line for line in lines if line.startswith(b"A ")]
    final = [line for line in lines if not line.startswith(b"A ")]
    row.runs = 1
    if not final or not final[0].startswith(b"F 27 "):  # errno 27 = EFBIG
        row.failures.append(f"the append did not fail with EFBIG: {final[:1]}")
    with Log.open(log_dir, config, had_clean_shutdown=False) as lg:  # full recovery
        values, problems = _verify_log(lg, [])
    row.corrupt += len(problems)
    row.failures += problems
    for line in acks:
        first, n, seq = map(int, line.split()[1:])
        row.acked += n
        row.lost += sum(1 for j in range(n) if first + j >= len(values) or value_key(values[first + j]) != (0, seq + j))
    if len(values) != row.acked:
        row.corrupt += 1
        row.failures.append(f"{len(values)} records after reopening, {row.acked} acknowledged")
    row.note = f"limit {limit // 1024} KiB; reopened with every acked record"
    return row


# ----- load: many partitions and threads, retention and the cleaner, fds / RSS / maps against bounds --
def load_row(quick: bool, root: Path) -> Row:
    """The load test (``tools.reliability.load``, in a child process) as a row: runs = appends + reads, the
    acknowledged records and how many were lost or corrupt, and in the note peak fds, RSS and maps against the
    bounds predicted from the configuration. A bound exceeded, a deadlock or a leak fails the row."""
    from .load import FULL, QUICK, run_load

    result = run_load(QUICK if quick else FULL, root)
    config, figures = result.config, result.figures
    counters, verified = figures.get("counters", {}), figures.get("verify", {})
    row = Row(
        f"load: {config.partitions:,} partitions, {config.appenders} appenders + {config.readers} readers, "
        f"retention + cleaner, {config.duration_s:.0f} s",
        runs=counters.get("appends", 0) + counters.get("reads", 0),
        acked=verified.get("acked_records", 0),
        lost=verified.get("lost", 0),
        corrupt=verified.get("corrupt", 0),
        failures=list(result.failures),
        note=result.summary(),
    )
    if not verified and not row.failures:
        row.failures.append("the acknowledged records were not verified")
    return row


# ----- the run and its table -------------------------------------------------------------------------
def run(quick: bool = False, iterations: int | None = None, seed: int = 1, root: Path | None = None) -> list[Row]:
    iterations = iterations if iterations is not None else (20 if quick else 500)
    logging.getLogger("kafkalog").setLevel(logging.CRITICAL)  # the faults below log errors on purpose
    own_root = root is None
    root = Path(tempfile.mkdtemp(prefix="kafkalog-reliability-")) if root is None else Path(root)
    try:
        per_mode = max(1, iterations // 2)
        rows = [kill9(per_mode, None, root, seed), kill9(iterations - per_mode, 1, root, seed + 1)]
        rows.append(kill9(max(2, iterations // 20), None, root, seed + 2, LARGE_BATCHES))
        from .hw_property import hw_property

        rows.append(hw_property(3 if quick else 200, root, seed + 3))
        for err in ("ENOSPC", "EIO", "EFBIG"):
            for op in ("write", "fsync"):
                rows.append(fault_case(root, err, op))
        rows.append(fault_case(root, "EIO", "write", then_fail=("truncate",)))
        rows.append(other_fault_case(root, "EIO", "read"))
        for err in ("ENOSPC", "EIO"):
            rows.append(other_fault_case(root, err, "roll"))
        rows.append(other_fault_case(root, "EIO", "shutdown"))
        rows.append(rlimit_fsize(root))
        rows.append(load_row(quick, root))
        if not quick:  # the quick forms are tests/test_replication.py, test_broker_kill9.py and test_eos_loop.py
            from .eos import eos_row
            from .replication import replication_rows

            rows += replication_rows(False, root, seed + 4)
            rows += broker_rows(False, root, seed + 5)
            rows.append(eos_row(50, root, seed + 6))
            from .cluster_txn import cluster_txn_row

            rows.append(cluster_txn_row(root, 20, seed + 7))
        return rows
    finally:
        if own_root:
            shutil.rmtree(root, ignore_errors=True)


def broker_rows(quick: bool, root: Path, seed: int) -> list[Row]:
    """kill -9 of ``kafkalog serve`` under librdkafka clients, both flush policies (tools.reliability.broker_kill9):
    BROKER_KILL9_RUNS rounds each (4 with ``quick``); a log dir that fills up (tools.reliability.broker_disk_full,
    which mounts a tmpfs: as root only)."""
    from .broker_disk_full import MountNotPermitted, disk_full
    from .broker_kill9 import broker_kill9

    runs = 4 if quick else BROKER_KILL9_RUNS
    rows = [broker_kill9(runs, 1, root, seed), broker_kill9(runs, None, root, seed + 1)]
    try:
        rows.append(disk_full(root))
    except MountNotPermitted as e:  # not root: the row says why it did not run
        rows.append(Row("a log dir fills up (tmpfs as one of two log.dirs)", note=f"not run: {e}"))
    return rows


def checks(quick: bool) -> list[Row]:
    """Fuzz cases per parser (unexpected exceptions count as corruption) and bad inputs per entrance (any not
    rejected with a clear error, or that changed stored bytes, counts too): see tools.reliability.checks."""
    from .checks import bad_input_summary, fuzz_summary

    rows = []
    for parser, cases, unexpected in fuzz_summary(quick):
        rows.append(Row(f"fuzz: {parser}", runs=cases, corrupt=unexpected, note="unexpected exceptions as corruption"))
    for entrance, tried, clear in bad_input_summary():
        rows.append(Row(f"bad input: {entrance}", runs=tried, corrupt=tried - clear, note=f"{clear} rejected clearly"))
    return rows


def render(rows: list[Row], elapsed: float) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"kafkalog reliability ({elapsed:.0f} s)")
    for name, justify in (
        ("Check", "left"),
        ("Runs / faults", "right"),
        ("Acked records", "right"),
        ("Acked lost", "right"),
        ("Corruption or garbage after restart", "right"),
        ("Notes", "left"),
    ):
        table.add_column(name, justify=justify)
    for row in rows:
        status = "" if row.ok else f" [red]FAILED: {'; '.join(row.failures[:3])}[/red]"
        table.add_row(row.check, str(row.runs), str(row.acked), str(row.lost), str(row.corrupt), row.note + status)
    Console(width=160).print(table)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.reliability", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="20 kill -9 iterations instead of 500, and the 1,000-partition load test (for CI)",
    )
    parser.add_argument("--iterations", type=int, help="kill -9 iterations (split between the two flush modes)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", type=Path, help="also write the rows here")
    parser.add_argument(
        "--replication-only",
        action="store_true",
        help="only the replication rows: 3 brokers + ZooKeeper under kills, and the throughput/failover figures",
    )
    parser.add_argument(
        "--broker-only",
        action="store_true",
        help="only the broker rows: kill -9 of kafkalog serve under librdkafka clients, a log dir that fills up",
    )
    parser.add_argument(
        "--eos-only",
        action="store_true",
        help="only the exactly-once row: a consume-transform-produce program under kill -9 (50 runs, 3 with --quick)",
    )
    parser.add_argument(
        "--cluster-txn-only",
        action="store_true",
        help="only the cluster transaction row: 3 brokers, the coordinator SIGKILLed (20 kills, 3 with --quick)",
    )
    args = parser.parse_args(argv)
    start = time.monotonic()
    if args.cluster_txn_only:
        from .cluster_txn import cluster_txn_row

        root = Path(tempfile.mkdtemp(prefix="kafkalog-cluster-txn-"))
        try:
            rows = [cluster_txn_row(root, 3 if args.quick else 20, args.seed + 7)]
        finally:
            shutil.rmtree(root, ignore_errors=True)
    elif args.eos_only:
        from .eos import eos_row

        root = Path(tempfile.mkdtemp(prefix="kafkalog-eos-"))
        try:
            rows = [eos_row(3 if args.quick else 50, root, args.seed + 6)]
        finally:
            shutil.rmtree(root, ignore_errors=True)
    elif args.broker_only:
        root = Path(tempfile.mkdtemp(prefix="kafkalog-broker-reliability-"))
        try:
            rows = broker_rows(args.quick, root, args.seed)
        finally:
            shutil.rmtree(root, ignore_errors=True)
    elif args.replication_only:
        from .replication import replication_rows

        root = Path(tempfile.mkdtemp(prefix="kafkalog-replication-"))
        try:
            rows = replication_rows(args.quick, root, args.seed)
        finally:
            shutil.rmtree(root, ignore_errors=True)
    else:
        rows = run(quick=args.quick, iterations=args.iterations, seed=args.seed) + checks(args.quick)
    render(rows, time.monotonic() - start)
    if args.json:
        args.json.write_text(json.dumps([asdict(r) | {"ok": r.ok} for r in rows], indent=2))
    return 0 if all(r.ok for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
