"""Fuzz targets and their oracles, shared by the hypothesis tests, the atheris harness and ``make reliability``.

Every target takes arbitrary bytes and feeds them to one parser. The only acceptable outcomes are a result
or a kafkalog error (a ``KafkaLogError``; for the few APIs documented to raise ``ValueError`` on bad input,
that too) whose message says where the bad bytes are: the file for file parsers, the byte position for
buffer parsers. Anything else raises ``UnexpectedOutcome``, chained to the original exception.

``mutate(seed, control)`` turns a valid seed into a hostile input (bit flips, truncations, huge length
fields, overwrites, splices) driven only by the ``control`` bytes, so hypothesis, atheris and a seeded
``random.Random`` can all drive the same mutations deterministically.
"""

from __future__ import annotations

import contextlib
import functools
import random
import shutil
import struct
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ..errors import KafkaLogError
from ..layout import (
    LEADER_EPOCH_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    META_PROPERTIES_FILE,
    RECOVERY_POINT_CHECKPOINT,
)
from ..record.checksums import crc32, crc32c


class UnexpectedOutcome(AssertionError):
    """A parser broke its contract: an undocumented exception type, or an error that does not say where."""


@dataclass(frozen=True)
class Target:
    """One parser under fuzz: the function, its valid seed inputs, and what its errors must name."""

    name: str
    run: Callable[[bytes, Path], object]
    seeds: Callable[[], list[bytes]]
    located: str  # "path": the error names the file; "position": a byte position; "": nothing required
    value_error_ok: bool = False  # the API documents ValueError for bad input


# ------------------------------------------------------------------------------------------------ seeds


def _v2_seeds() -> list[bytes]:
    from ..record import RecordBatchBuilder, control_batch
    from ..record.types import ControlRecordType

    out = []
    for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
        b = RecordBatchBuilder(compression=codec, base_offset=100, producer_id=7, producer_epoch=1, base_sequence=0)
        for i in range(4):
            hdrs = [("h", b"v" * i), ("n", None)] if i % 2 else []
            b.append(f"k{i}".encode() if i % 3 else None, b"value-%d" % i * (i + 1), timestamp=1_000 + i, headers=hdrs)
        out.append(b.build())
    out.append(control_batch(ControlRecordType.ABORT, 7, 1, 3, 5_000, base_offset=9))
    return out


def _legacy_seeds() -> list[bytes]:
    from ..record.legacy_builder import build_legacy

    records = [(0, 1_000, b"k0", b"v0"), (1, 1_001, None, b"v1"), (2, 1_002, b"k2", None)]
    out = []
    for magic in (0, 1):
        for codec in ("none", "gzip", "snappy", "lz4"):
            out.append(build_legacy(magic, records, compression_type=codec, timestamp_type=0, log_append_time=-1))
    return out


def batch_seeds() -> list[bytes]:
    v2, legacy = _v2_seeds(), _legacy_seeds()
    return [*v2, *legacy, v2[0] + v2[2] + v2[5], legacy[1] + legacy[5] + v2[4]]


def offset_index_seeds() -> list[bytes]:
    return [
        b"".join(struct.pack(">ii", i * 3, i * 4096) for i in range(6)),
        struct.pack(">ii", 1, 0) + b"\0" * 16,
        b"",
    ]


def time_index_seeds() -> list[bytes]:
    return [
        b"".join(struct.pack(">qi", 1_000 + i * 10, i * 3) for i in range(5)),
        b"\0" * 36,  # a preallocated tail of zero entries
        b"",
    ]


def txn_index_seeds() -> list[bytes]:
    from ..storage.txn_index import AbortedTxn

    txns = [AbortedTxn(7, 100 + i, 105 + i * 3, 100 + i) for i in range(3)]
    return [b"".join(t.to_bytes() for t in txns), txns[0].to_bytes()]


def snapshot_seeds() -> list[bytes]:
    from ..storage.producer_state import BatchMetadata, ProducerStateEntry, encode_snapshot

    entries = [
        ProducerStateEntry(7, 1, 2, 1_000, None, deque([BatchMetadata(4, 110, 4, 1_000)])),
        ProducerStateEntry(8, 0, -1, 2_000, 120, deque([BatchMetadata(0, 121, 0, 2_000)])),
    ]
    return [encode_snapshot(entries), encode_snapshot([])]


def offset_checkpoint_seeds() -> list[bytes]:
    return [b"0\n3\ntopic-a 0 100\ntopic-a 1 5\n__consumer_offsets 49 123456789\n", b"0\n0\n"]


def epoch_checkpoint_seeds() -> list[bytes]:
    return [b"0\n3\n0 0\n1 100\n4 2000\n", b"0\n0\n"]


def properties_seeds() -> list[bytes]:
    return [
        b"# comment\nlog.dirs=/tmp/a,/tmp/b\nlog.segment.bytes = 1048576\nlog.retention.hours:24\n"
        b"log.cleanup.policy=compact,\\\n    delete\nnode.id 3\nkey\\u0041=va\\tlue\n",
        b"cleanup.policy=compact\nsegment.bytes=1048576\nmin.cleanable.dirty.ratio=0.1\n",
        b"cluster.id=AAAAAAAAAAAAAAAAAAAAAA\nnode.id=1\nversion=1\n",
    ]


# ------------------------------------------------------------------------------------------------ mutations

_HUGE = (0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0x7FFFFFF0, 0x40000000, 0x00FFFFFF)


def fix_crcs(buf: bytearray) -> None:
    """Recompute the CRC of every batch that can be walked, so mutations reach past the CRC checks."""
    pos = 0
    while len(buf) - pos >= 17:
        size = struct.unpack_from(">i", buf, pos + 8)[0]
        if size < 14 or pos + 12 + size > len(buf):
            return
        if buf[pos + 16] == 2 and size >= 49:
            struct.pack_into(">I", buf, pos + 17, crc32c(bytes(buf[pos + 21 : pos + 12 + size])))
        elif buf[pos + 16] < 2:
            struct.pack_into(">I", buf, pos + 12, crc32(bytes(buf[pos + 16 : pos + 12 + size])))
        pos += 12 + size


def mutate(seed: bytes, control: bytes, *, fix: bool = False) -> bytes:
    """A hostile variant of ``seed``, fully determined by ``control`` (any bytes)."""
    rng = random.Random(control)
    buf = bytearray(seed)
    for _ in range(1 + rng.randrange(4)):
        op = rng.randrange(7)
        n = len(buf)
        if op == 0 and n:  # bit flip
            buf[rng.randrange(n)] ^= 1 << rng.randrange(8)
        elif op == 1 and n:  # truncation
            del buf[rng.randrange(n) :]
        elif op == 2 and n >= 4:  # a huge or negative 4-byte length field
            pos = rng.randrange(n - 3)
            struct.pack_into(">I", buf, pos, rng.choice(_HUGE))
        elif op == 3 and n:  # random byte overwrite
            buf[rng.randrange(n)] = rng.randrange(256)
        elif op == 4:  # splice random bytes in
            pos = rng.randrange(n + 1)
            buf[pos:pos] = rng.randbytes(rng.randrange(1, 16))
        elif op == 5 and n >= 8:  # a huge 8-byte field
            pos = rng.randrange(n - 7)
            struct.pack_into(">q", buf, pos, rng.choice((2**63 - 1, -(2**63), -1, 2**31)))
        elif op == 6 and n:  # duplicate a slice (a repeated batch/entry)
            a = rng.randrange(n)
            b = min(n, a + rng.randrange(1, 80))
            buf[b:b] = buf[a:b]
    if fix or rng.random() < 0.5:
        fix_crcs(buf)
    return bytes(buf)


def input_for(target: Target, control: bytes) -> bytes:
    """Map control bytes to an input: mostly a mutated seed, sometimes the raw bytes themselves."""
    seeds = target.seeds()
    if not control or control[0] < 40:
        return control[1:]
    return mutate(seeds[control[0] % len(seeds)], control[1:])


# ------------------------------------------------------------------------------------------------ parsers


def _touch_batches(data: bytes) -> None:
    from ..record import RecordBatch, iter_batches

    for batch in iter_batches(data):
        _ = (batch.base_offset, batch.last_offset, batch.next_offset, batch.magic, batch.max_timestamp)
        _ = (batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.last_sequence, batch.crc)
        _ = (batch.is_transactional, batch.is_control, batch.size_in_bytes, batch.timestamp_type)
        batch.is_valid()
        with contextlib.suppress(KafkaLogError):
            batch.ensure_valid()
        with contextlib.suppress(KafkaLogError):
            _ = batch.compression  # an unknown codec id is a documented error; iteration must still be clean
        for record in batch:
            tuple(record)
        if batch.is_control and isinstance(batch, RecordBatch):  # magic 2: legacy messages are never control
            batch.end_transaction_marker()


def _columnar(data: bytes) -> None:
    from ..record import to_arrow

    to_arrow(data, include_control=True)
    to_arrow(data, verify_crc=False, include_control=False, start_offset=101, end_offset=103)


def _write(workdir: Path, name: str, data: bytes) -> Path:
    path = workdir / name
    path.write_bytes(data)
    return path


def _offset_index(data: bytes, workdir: Path) -> None:
    from ..storage.index import OffsetIndex

    path = _write(workdir, "00000000000000000100.index", data)
    index = OffsetIndex(path, 100, writable=False)
    try:
        index.sanity_check()
        for target in (0, 100, 103, 2**31, 2**63 - 1):
            index.lookup(target)
        for n in range(min(index.entries, 64)):
            index.entry(n)
        index.fetch_upper_bound_offset(0, 4096)
    finally:
        index.close()


def _time_index(data: bytes, workdir: Path) -> None:
    from ..storage.index import TimeIndex

    path = _write(workdir, "00000000000000000100.timeindex", data)
    index = TimeIndex(path, 100, writable=False)
    try:
        index.sanity_check()
        for target in (-1, 0, 1_020, 2**62):
            index.lookup(target)
        for n in range(min(index.entries, 64)):
            index.entry(n)
        _ = index.last_entry
    finally:
        index.close()


def _txn_index(data: bytes, workdir: Path) -> None:
    from ..storage.txn_index import TransactionIndex

    path = _write(workdir, "00000000000000000100.txnindex", data)
    with TransactionIndex(path, 100) as index:
        index.sanity_check()
        index.all_aborted_txns()
        index.collect_aborted_txns(100, 110)
        index.is_empty()


def _snapshot(data: bytes, workdir: Path) -> None:
    from ..storage.producer_state import read_snapshot

    read_snapshot(_write(workdir, "00000000000000000100.snapshot", data))


def _offset_checkpoint(data: bytes, workdir: Path) -> None:
    from ..storage.checkpoints import OffsetCheckpointFile

    OffsetCheckpointFile(_write(workdir, RECOVERY_POINT_CHECKPOINT, data), create=False).read()


def _epoch_checkpoint(data: bytes, workdir: Path) -> None:
    from ..storage.checkpoints import LeaderEpochCheckpointFile

    LeaderEpochCheckpointFile(_write(workdir, LEADER_EPOCH_CHECKPOINT, data), create=False).read()


def _properties(data: bytes, workdir: Path) -> None:
    from ..logdir import MetaProperties
    from ..storage.config import BrokerConfig, LogConfig
    from ..storage.properties import load_properties

    path = _write(workdir, "server.properties", data)
    props = load_properties(path)
    with contextlib.suppress(KafkaLogError):
        BrokerConfig(props)  # unknown keys are ignored; a bad value of a known one is a clean error
    topic_props = {k: v for k, v in props.items() if "." in k and not k.startswith(("log.", "node.", "cluster."))}
    with contextlib.suppress(KafkaLogError):
        LogConfig(topic_props)
    _write(workdir, META_PROPERTIES_FILE, data)
    MetaProperties.read(workdir)


def _cli(args: list[str]) -> None:
    from click.testing import CliRunner

    from ..cli import main

    result = CliRunner().invoke(main, args)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    if result.exit_code not in (0, 1):
        raise UnexpectedOutcome(f"kafkalog {' '.join(args)} exited {result.exit_code}: {result.output[-500:]}")
    if result.exit_code == 1 and args[0] == "dump" and "Error:" not in (result.output + (result.stderr or "")):
        raise UnexpectedOutcome(f"kafkalog dump failed without saying why: {result.output[-500:]}")


def _cli_dump(data: bytes, workdir: Path) -> None:
    log = _write(workdir, "00000000000000000000.log", data)
    _cli(["dump", "--files", str(log), "--print-data-log"])
    _cli(["dump", "--files", str(log), "--json", "--offsets-decoder"])


def _cli_dump_files(data: bytes, workdir: Path) -> None:
    """The same hostile bytes as every other file kind dump understands."""
    names = [
        "00000000000000000000.index",
        "00000000000000000000.timeindex",
        "00000000000000000000.txnindex",
        "00000000000000000000.snapshot",
    ]
    _write(workdir, "00000000000000000000.log", b"")
    for name in names:
        _cli(["dump", "--files", str(_write(workdir, name, data))])


def _cli_verify(data: bytes, workdir: Path) -> None:
    partition = workdir / "topic-0"
    partition.mkdir(exist_ok=True)
    _write(partition, "00000000000000000000.log", data)
    _write(partition, "00000000000000000000.index", data[:48])
    _write(workdir, RECOVERY_POINT_CHECKPOINT, b"0\n1\ntopic 0 3\n")
    _cli(["verify", str(workdir)])


def _cli_recover(data: bytes, workdir: Path) -> None:
    """Offline recovery of a hostile partition: a dry run, the real run, then a dump of what is left."""
    partition = workdir / "topic-0"
    partition.mkdir(exist_ok=True)
    log = _write(partition, "00000000000000000000.log", data)
    _write(partition, "00000000000000000000.timeindex", data[-36:])
    _cli(["recover", "--dry-run", str(partition)])
    _cli(["recover", str(partition), "--segment-index-bytes", "4096"])
    if log.exists():
        _cli(["dump", "--files", str(log), "--deep-iteration"])


def _spark_logfiles(data: bytes, workdir: Path) -> None:
    """The Spark source's file reader (no JVM): offsets, ranges, timestamps and transactions of a hostile partition."""
    from ..partition import readonly as logfiles

    partition = workdir / "topic-0"
    partition.mkdir(exist_ok=True)
    _write(partition, "00000000000000000000.log", data)
    _write(partition, "00000000000000000000.index", data[-48:])
    _write(partition, "00000000000000000000.timeindex", data[:36])
    _write(partition, "00000000000000000000.txnindex", data[-68:])
    _write(workdir, LOG_START_OFFSET_CHECKPOINT, data[:40])
    parts = logfiles.discover([str(workdir)])
    for part in parts.values():
        d = part.directory
        offsets = logfiles.partition_offsets(part, {}, {}, None)
        end = offsets.latest if offsets.latest is not None else 0
        for table in logfiles.read_range(d, part.name, 0, max(end, 1), fail_on_data_loss=False, read_committed=True):
            _ = table.num_rows
        logfiles.offset_for_timestamp(d, 1_001, 0, end)
        logfiles.offset_for_timestamp(d, -3, 0, end)
        logfiles.last_stable_offset(d, 0, end)
    logfiles.read_checkpoint(str(workdir), LOG_START_OFFSET_CHECKPOINT)


def _parse_only(fn: Callable[[bytes], None]) -> Callable[[bytes, Path], None]:
    return lambda data, workdir: fn(data)


TARGETS: dict[str, Target] = {
    t.name: Target(t.name, t.run, functools.cache(t.seeds), t.located, t.value_error_ok)
    for t in [
        Target("batches", _parse_only(_touch_batches), batch_seeds, "position"),
        Target("columnar", _parse_only(_columnar), batch_seeds, "position"),
        Target("offset_index", _offset_index, offset_index_seeds, "path"),
        Target("time_index", _time_index, time_index_seeds, "path"),
        Target("txn_index", _txn_index, txn_index_seeds, "path"),
        Target("producer_snapshot", _snapshot, snapshot_seeds, "path"),
        Target("offset_checkpoint", _offset_checkpoint, offset_checkpoint_seeds, "path"),
        Target("epoch_checkpoint", _epoch_checkpoint, epoch_checkpoint_seeds, "path"),
        Target("properties", _properties, properties_seeds, "path"),
        Target("cli_dump", _cli_dump, batch_seeds, ""),
        Target("cli_dump_indexes", _cli_dump_files, lambda: offset_index_seeds() + snapshot_seeds(), ""),
        Target("cli_verify", _cli_verify, batch_seeds, ""),
        Target("cli_recover", _cli_recover, batch_seeds, ""),
        Target("spark_logfiles", _spark_logfiles, batch_seeds, "path"),
    ]
}


# ------------------------------------------------------------------------------------------------ the oracle

_local = threading.local()
SLOW_CASE_SECONDS = 10.0


@contextlib.contextmanager
def scratch_dir() -> Iterator[Path]:
    """A fresh empty directory for one case (file targets write their input there)."""
    root = getattr(_local, "root", None)
    if root is None or not root.exists():
        root = Path(tempfile.mkdtemp(prefix="kafkalog-fuzz-"))
        _local.root = root
    work = root / "case"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    try:
        yield work
    finally:
        shutil.rmtree(work, ignore_errors=True)


def check(target: Target | str, data: bytes) -> str:
    """Run one input through a target; return "ok" or "error" (a clean, located error), else raise."""
    if isinstance(target, str):
        target = TARGETS[target]
    started = time.monotonic()
    with scratch_dir() as work:
        try:
            target.run(data, work)
        except KafkaLogError as e:
            _check_located(target, e, work)
            return "error"
        except UnexpectedOutcome:
            raise
        except ValueError as e:
            if target.value_error_ok:
                return "error"
            raise UnexpectedOutcome(f"{target.name}: {type(e).__name__}: {e} on input {data[:64]!r}") from e
        except Exception as e:
            raise UnexpectedOutcome(f"{target.name}: {type(e).__name__}: {e} on input {data[:64]!r}") from e
        finally:
            elapsed = time.monotonic() - started
            if elapsed > SLOW_CASE_SECONDS:  # an input this slow is a hang in the making
                raise UnexpectedOutcome(f"{target.name}: one input took {elapsed:.1f} s: {data[:64]!r}")
    return "ok"


def _check_located(target: Target, e: KafkaLogError, work: Path) -> None:
    if target.located == "path" and (e.path is None or str(work) not in str(e)):
        raise UnexpectedOutcome(f"{target.name}: error does not name the file: {e!r}") from e
    if target.located == "position" and e.position is None:
        raise UnexpectedOutcome(f"{target.name}: error does not name the byte position: {e!r}") from e


def run_cases(name: str, cases: int, seed: int = 0) -> tuple[int, int, list[str]]:
    """Run ``cases`` seeded random inputs through a target: (cases run, unexpected outcomes, first messages)."""
    target = TARGETS[name]
    rng = random.Random(f"{name}-{seed}")
    unexpected: list[str] = []
    inputs = [*target.seeds(), b""]
    while len(inputs) < cases:
        inputs.append(input_for(target, rng.randbytes(rng.randrange(1, 300))))
    for data in inputs[:cases]:
        try:
            check(target, data)
        except UnexpectedOutcome as e:
            unexpected.append(str(e))
    return min(cases, len(inputs)), len(unexpected), unexpected[:5]


def atheris_entry(*names: str) -> Callable[[bytes], None]:
    """The function to hand to ``atheris.Setup``: raw bytes, through the same oracle as the tests.

    With several targets, the first byte picks one and the rest is its control bytes.
    """
    targets = [TARGETS[name] for name in names or TARGETS]

    def one_input(data: bytes) -> None:
        if len(targets) == 1:
            target, control = targets[0], data
        else:
            if not data:
                return
            target, control = targets[data[0] % len(targets)], data[1:]
        check(target, input_for(target, control))

    return one_input


def corpus(*names: str) -> dict[str, bytes]:
    """Starting inputs for a fuzzer driving ``atheris_entry(*names)``: every seed as raw bytes (file name → data)."""
    out = {}
    targets = [TARGETS[name] for name in names or TARGETS]
    for i, target in enumerate(targets):
        for j, seed in enumerate(target.seeds()):
            raw = b"\0" + seed  # a first control byte below 40: the rest is the input itself
            out[f"{target.name}-{j}"] = raw if len(targets) == 1 else bytes([i]) + raw
    return out
