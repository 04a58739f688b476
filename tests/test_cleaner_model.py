"""Model-based property tests of log compaction through the LogManager (spec 12, and 9 for restarts).

Hypothesis generates operation sequences on one compacted partition: plain writes (uncompressed or with
each codec) and tombstones of a few keys, idempotent writes, transactions (several producers, interleaved,
committed or aborted), clock advances, rolls, cleaner passes and restarts. A plain-Python model keeps every
write with the offset it must get and its fate (plain, committed, aborted, still open), and after every
cleaner pass, restart and at the end it checks:

- read_committed from the log start folds ("last write wins", a tombstone deletes) to the model's map,
  and every key's latest write is still there at its own offset (compaction never loses a live key);
- every record read is byte-for-byte the record written at that offset; offsets strictly increase;
  nothing of an aborted or still-open transaction is ever returned by read_committed;
- read_uncommitted folds to the model for the keys no aborted or open transaction ever wrote;
- a tombstone that is its key's latest write stays readable until ``delete.retention.ms`` after the first
  clean that covered it (the delete horizon), and is gone once a clean covering it ran at or after the
  horizon;
- after a clean, no key appears twice below the offset the clean reached (the cleaned range is compacted);
- the log end offset (and log start offset) never move because of cleaning, and restarts change nothing.

The model knows nothing of segments or of the cleaner's internals: the only things it takes from the
cleaner are which pass cleaned this log, when, and up to which offset (``LogCleanResult.end_offset``).
Every sequence ends by settling: transactions ended, two cleans past every horizon, then no tombstone and
one record per live key must remain.

Also here: the delete horizon to the millisecond, an offset map too small for the dirty section (partial
cleans that converge), and a regression test for a read_committed bug in ``Log.records`` that the model
found (a fetch of only aborted batches ended the read).
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from batchtools import fold, read_committed
from kafkalog import LogManager
from kafkalog.record import ControlRecordType, RecordBatchBuilder
from kafkalog.testing import MockTime

T0 = 1_700_000_000_000
TOPIC = "compacted"
RETENTION_MS = 1000  # delete.retention.ms: the tombstone delete horizon is this long after the first clean
BROKER = {
    "log.cleaner.enable": "false",  # cleaning happens only in explicit clean_once() calls
    "log.cleaner.dedupe.buffer.size": str(2 * 1024 * 1024),
}
TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "segment.bytes": "1024",  # a handful of records per segment: many segments, many groups
    "min.cleanable.dirty.ratio": "0.01",
    "delete.retention.ms": str(RETENTION_MS),
}
KEYS = (b"a", b"b", b"c", b"d", b"e")
FILLER_KEY = b"zz-filler"
PRODUCERS = (4000, 4001, 4002)  # transactional producers
IDEMPOTENT_PRODUCER = 5000
EPOCH = 0


def scratch_dir() -> tempfile.TemporaryDirectory:
    """A temporary directory, on tmpfs when there is one: each example fsyncs hundreds of times (rolls,
    swaps, shutdowns), and nothing here is about power loss, so the page cache is durable enough."""
    shm = Path("/dev/shm")
    base = str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None
    return tempfile.TemporaryDirectory(prefix="cleaner-model-", dir=base)


# ----- operations ---------------------------------------------------------------------------------------

records_st = st.lists(
    st.tuples(st.sampled_from(KEYS), st.one_of(st.none(), st.integers(0, 160))),  # None: a tombstone
    min_size=1,
    max_size=3,
)
codec_st = st.sampled_from(["none", "none", "gzip", "snappy", "lz4", "zstd"])
op_st = st.one_of(
    st.tuples(st.just("write"), records_st, codec_st),
    st.tuples(st.just("idempotent_write"), records_st),
    st.tuples(st.just("burst"), st.lists(records_st, min_size=3, max_size=12)),
    st.tuples(st.just("txn_write"), st.integers(0, len(PRODUCERS) - 1), records_st),
    st.tuples(st.just("txn_write"), st.integers(0, len(PRODUCERS) - 1), records_st),
    st.tuples(st.just("txn_end"), st.integers(0, len(PRODUCERS) - 1), st.booleans()),
    st.tuples(st.just("advance"), st.sampled_from([1, 300, 700, 1200])),
    st.tuples(st.just("roll")),
    st.tuples(st.just("clean")),
    st.tuples(st.just("restart")),
)
ops_st = st.lists(op_st, min_size=20, max_size=60)

# ----- the model ------------------------------------------------------------------------------------------


@dataclass
class Write:
    key: bytes
    value: bytes | None
    txn: int | None  # None: a plain (non-transactional) write; else the transaction's id in Model.txn_state


@dataclass
class Model:
    """What the log must show, computed from the operations alone."""

    writes: dict[int, Write] = field(default_factory=dict)  # offset → the record appended there
    txn_state: list[str] = field(default_factory=list)  # txn id → "open" | "committed" | "aborted"
    open_txn: dict[int, int] = field(default_factory=dict)  # producer id → open txn id
    txn_first_offset: dict[int, int] = field(default_factory=dict)  # txn id → its first offset
    sequence: dict[int, int] = field(default_factory=dict)  # producer id → next sequence number
    log_end_offset: int = 0
    cleans: list[tuple[int, int]] = field(default_factory=list)  # (clock ms, end offset) of each clean of our log
    serial: int = 0

    def value_for(self, pad: int | None) -> bytes | None:
        self.serial += 1
        return None if pad is None else b"v%d:" % self.serial + b"x" * pad

    @property
    def last_stable_offset(self) -> int:
        open_firsts = [self.txn_first_offset[t] for t in self.open_txn.values()]
        return min(open_firsts) if open_firsts else self.log_end_offset

    def status(self, write: Write) -> str:
        return "plain" if write.txn is None else self.txn_state[write.txn]

    def committed_view(self) -> list[tuple[int, Write]]:
        """The writes read_committed may return: plain or committed, below the last stable offset."""
        lso = self.last_stable_offset
        return [(o, w) for o, w in sorted(self.writes.items()) if o < lso and self.status(w) in ("plain", "committed")]

    def tainted_keys(self) -> set[bytes]:
        """Keys written by an aborted or still-open transaction (read_uncommitted may or may not show those)."""
        return {w.key for w in self.writes.values() if self.status(w) in ("aborted", "open")}

    def horizon_of(self, offset: int) -> int | None:
        """The delete horizon of a tombstone at ``offset``: retention after the first clean that covered it."""
        first = next((ms for ms, end in self.cleans if end > offset), None)
        return None if first is None else first + RETENTION_MS

    def removal_due(self, offset: int) -> bool:
        """A clean covering ``offset`` ran at or after that tombstone's delete horizon."""
        horizon = self.horizon_of(offset)
        return horizon is not None and any(ms >= horizon and end > offset for ms, end in self.cleans)


# ----- the harness ----------------------------------------------------------------------------------------


class Harness:
    """One compacted partition in a LogManager on a MockTime, driven by operations and checked against the
    model after every clean, every restart and whenever asked (``check``)."""

    def __init__(self, path: Path, broker: dict | None = None) -> None:
        self.path = path
        self.broker = dict(BROKER if broker is None else broker)
        self.clock = MockTime(start_ms=T0)
        self.model = Model()
        self.step = 0  # operations run so far (for failure messages)
        self.manager: LogManager | None = None
        self._open()
        self.manager.create_topic(TOPIC, config=dict(TOPIC_CONFIG))

    def _open(self) -> None:
        manager = LogManager(self.path, dict(self.broker), clock=self.clock)
        manager.startup()
        self.manager = manager

    @property
    def log(self):
        return self.manager.get_log(TOPIC)

    def close(self) -> None:
        if self.manager is not None:
            self.manager.shutdown()
            self.manager = None

    # ----- operations -------------------------------------------------------------------------------

    def run(self, op: tuple) -> None:
        self.step += 1
        kind, *args = op
        if kind == "write":
            self.write(*args)
        elif kind == "idempotent_write":
            self.idempotent_write(*args)
        elif kind == "burst":
            for rows in args[0]:
                self.write(rows)
        elif kind == "txn_write":
            self.txn_write(*args)
        elif kind == "txn_end":
            self.end_txn(*args)
        elif kind == "advance":
            self.advance(*args)
        elif kind == "roll":
            self.roll()
        elif kind == "clean":
            self.clean()
        elif kind == "restart":
            self.restart()
        else:
            raise AssertionError(f"unknown operation {op!r}")

    def _append(self, builder: RecordBatchBuilder, rows, txn: int | None = None) -> int:
        """Append one batch of ``rows`` ((key, pad or None)); the model says which offsets it must get."""
        model = self.model
        now = self.clock.milliseconds()
        written = []
        for key, pad in rows:
            value = model.value_for(pad)
            builder.append(key, value, now)
            written.append(Write(key, value, txn))
        info = self.log.append(builder)
        first = model.log_end_offset
        assert (info.first_offset, info.last_offset) == (first, first + len(written) - 1), (
            f"step {self.step}: appended at [{info.first_offset}, {info.last_offset}], the model says {first}"
        )
        for i, write in enumerate(written):
            model.writes[first + i] = write
        model.log_end_offset += len(written)
        return first

    def write(self, rows, codec: str = "none") -> int:
        """A plain batch (no producer id) of ``rows``, compressed with ``codec``; returns its first offset."""
        return self._append(RecordBatchBuilder(codec, clock=self.clock), rows)

    def idempotent_write(self, rows) -> int:
        pid = IDEMPOTENT_PRODUCER
        sequence = self.model.sequence.get(pid, 0)
        builder = RecordBatchBuilder(producer_id=pid, producer_epoch=EPOCH, base_sequence=sequence, clock=self.clock)
        first = self._append(builder, rows)
        self.model.sequence[pid] = sequence + len(rows)
        return first

    def txn_write(self, producer: int, rows) -> int:
        """A transactional batch of PRODUCERS[producer], opening its transaction if none is open."""
        model, pid = self.model, PRODUCERS[producer]
        txn = model.open_txn.get(pid)
        if txn is None:
            txn = len(model.txn_state)
            model.txn_state.append("open")
            model.open_txn[pid] = txn
            model.txn_first_offset[txn] = model.log_end_offset
        sequence = model.sequence.get(pid, 0)
        builder = RecordBatchBuilder(
            producer_id=pid, producer_epoch=EPOCH, base_sequence=sequence, is_transactional=True, clock=self.clock
        )
        first = self._append(builder, rows, txn)
        model.sequence[pid] = sequence + len(rows)
        return first

    def end_txn(self, producer: int, commit: bool) -> None:
        """The coordinator's COMMIT or ABORT marker for PRODUCERS[producer]'s open transaction (if any)."""
        model, pid = self.model, PRODUCERS[producer]
        txn = model.open_txn.pop(pid, None)
        if txn is None:
            return  # no transaction of this producer includes the partition: the coordinator writes nothing
        kind = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
        info = self.log.append_end_txn_marker(kind, pid, EPOCH, coordinator_epoch=1)
        assert info.first_offset == model.log_end_offset, f"step {self.step}: marker at {info.first_offset}"
        model.log_end_offset += 1
        model.txn_state[txn] = "committed" if commit else "aborted"

    def advance(self, ms: int) -> None:
        self.clock.advance(ms)

    def roll(self) -> None:
        self.log.roll()

    def _snapshot(self) -> tuple:
        """Everything a consumer can observe: offsets and both reads, record by record."""
        log = self.log
        return (
            log.log_start_offset,
            log.log_end_offset,
            log.last_stable_offset,
            [(r.offset, r.key, r.value) for r in log.records(isolation="read_uncommitted")],
            [(r.offset, r.key, r.value) for r in read_committed(log)],
        )

    def clean(self) -> list:
        """One cleaner pass; returns this log's results (empty when the pass left it alone), then checks."""
        model = self.model
        log = self.log
        before = (log.log_start_offset, log.log_end_offset, log.last_stable_offset)
        lso = model.last_stable_offset
        result = self.manager.clean_once()
        mine = [r for r in result.cleaned if (r.topic, r.partition) == (TOPIC, 0)]
        assert len(mine) <= 1, mine
        for outcome in mine:
            assert outcome.error is None, f"step {self.step}: the clean failed: {outcome.error}"
            previous = model.cleans[-1][1] if model.cleans else 0
            assert previous <= outcome.end_offset <= lso, (
                f"step {self.step}: a clean reached {outcome.end_offset} (previous {previous}, last stable {lso})"
            )
            model.cleans.append((self.clock.milliseconds(), outcome.end_offset))
        after = (log.log_start_offset, log.log_end_offset, log.last_stable_offset)
        assert after == before, f"step {self.step}: cleaning moved (log start, log end, LSO) from {before} to {after}"
        self.check("after a clean" if mine else "after a pass that left the log alone")
        return mine

    def restart(self) -> None:
        """A clean shutdown and a new LogManager on the same directories and clock: nothing may change."""
        before = self._snapshot()
        self.manager.shutdown()
        self.manager = None
        self._open()
        after = self._snapshot()
        assert after == before, f"step {self.step}: the restart changed the log"
        self.check("after a restart")

    # ----- checks -----------------------------------------------------------------------------------

    def check(self, label: str) -> None:
        where = f"step {self.step}, {label}"
        model, log = self.model, self.log
        assert log.log_end_offset == model.log_end_offset, f"{where}: log end {log.log_end_offset}"
        assert log.log_start_offset == 0, f"{where}: log start {log.log_start_offset}"
        lso = model.last_stable_offset
        assert log.last_stable_offset == lso, f"{where}: LSO {log.last_stable_offset}, the model says {lso}"

        # read_committed: as written, in order, nothing aborted or open, the model's fold, every live key's latest.
        committed = [(r.offset, r.key, r.value) for r in read_committed(log)]
        offsets = [o for o, _, _ in committed]
        present = set(offsets)
        assert offsets == sorted(present), f"{where}: offsets not increasing: {offsets}"
        for offset, key, value in committed:
            write = model.writes.get(offset)
            assert write is not None and (write.key, write.value) == (key, value), (
                f"{where}: offset {offset} reads {key!r}={value!r}, written {write}"
            )
            assert offset < lso, f"{where}: read_committed returned {offset}, at or past the LSO {lso}"
            status = model.status(write)
            assert status in ("plain", "committed"), f"{where}: read_committed returned {offset} ({status})"
        view = model.committed_view()
        assert fold((k, v) for _, k, v in committed) == fold((w.key, w.value) for _, w in view), where
        latest = {w.key: o for o, w in view}

        # read_uncommitted: as written, in order; agrees with the model on the keys no aborted/open txn wrote.
        uncommitted = [(r.offset, r.key, r.value) for r in log.records(isolation="read_uncommitted")]
        u_offsets = [o for o, _, _ in uncommitted]
        assert u_offsets == sorted(set(u_offsets)), f"{where}: offsets not increasing: {u_offsets}"
        for offset, key, value in uncommitted:
            write = model.writes.get(offset)
            assert write is not None and (write.key, write.value) == (key, value), (
                f"{where}: offset {offset} reads {key!r}={value!r} (read_uncommitted), written {write}"
            )
        u_present = set(u_offsets)
        assert present <= u_present, f"{where}: read_committed saw records read_uncommitted did not"
        tainted = model.tainted_keys()
        untainted = [(w.key, w.value) for _, w in sorted(model.writes.items()) if w.key not in tainted]
        assert fold((k, v) for _, k, v in uncommitted if k not in tainted) == fold(untainted), where

        # Live keys are never lost; a latest tombstone stays until a clean at or past its horizon, then goes.
        for key, offset in latest.items():
            if model.writes[offset].value is not None:
                assert offset in present, f"{where}: the latest value of {key!r} (offset {offset}) was lost"
            elif model.removal_due(offset):
                assert offset not in u_present, (
                    f"{where}: the tombstone of {key!r} at {offset} outlived its horizon "
                    f"{model.horizon_of(offset)} (cleans {model.cleans})"
                )
            else:
                assert offset in present, (
                    f"{where}: the tombstone of {key!r} at {offset} went before its horizon "
                    f"{model.horizon_of(offset)} (now {self.clock.milliseconds()}, cleans {model.cleans})"
                )

        # Below the offset the cleans reached: one record per key, nothing aborted; the checkpoint says the same.
        checkpoint = self.manager.cleaner.all_cleaner_checkpoints().get((TOPIC, 0))
        if model.cleans:
            cleaned_below = model.cleans[-1][1]
            assert checkpoint == cleaned_below, f"{where}: cleaner checkpoint {checkpoint}, cleans {model.cleans}"
            below = [(o, k) for o, k, _ in uncommitted if o < cleaned_below]
            keys = [k for _, k in below]
            assert len(keys) == len(set(keys)), f"{where}: a key appears twice below {cleaned_below}: {below}"
            for offset, _ in below:
                status = model.status(model.writes[offset])
                assert status in ("plain", "committed"), f"{where}: {status} record {offset} survived a clean"
        else:
            assert checkpoint is None, f"{where}: a cleaner checkpoint {checkpoint} with no clean"

    def settle(self) -> None:
        """End every transaction, clean twice past every horizon: no tombstone, one record per live key."""
        for producer in range(len(PRODUCERS)):
            self.end_txn(producer, commit=producer % 2 == 0)
        assert not self.model.open_txn
        self.check("every transaction ended")
        for round_ in (1, 2):
            # Past every horizon set so far (all were set at most RETENTION_MS after a clean <= now); the
            # filler dirties the log and the roll makes everything cleanable.
            self.advance(RETENTION_MS)
            self.write([(FILLER_KEY, round_)])
            self.roll()
            assert self.clean(), f"settling clean {round_} did not run"
            assert self.model.cleans[-1][1] == self.model.log_end_offset, "a settling clean stopped short"
        expected = fold(
            (w.key, w.value)
            for _, w in sorted(self.model.writes.items())
            if self.model.status(w) in ("plain", "committed")
        )
        self._check_settled("settled", expected)
        self.restart()
        self._check_settled("settled and restarted", expected)

    def _check_settled(self, label: str, expected: dict[bytes, bytes]) -> None:
        """Both reads hold exactly one record per live key, its latest value, and no tombstone."""
        for isolation in ("read_uncommitted", "read_committed"):
            records = [(r.key, r.value) for r in self.log.records(isolation=isolation)]
            assert not [k for k, v in records if v is None], f"{label}: tombstones left ({isolation})"
            keys = [k for k, _ in records]
            assert len(keys) == len(set(keys)), f"{label}: more than one record of a key ({isolation}): {keys}"
            assert dict(records) == expected, f"{label}: {isolation} reads {records}, expected {expected}"


@settings(max_examples=40, derandomize=True, deadline=None)
@given(ops_st)
def test_compaction_preserves_the_model_through_cleans_restarts_and_transactions(ops) -> None:
    """Any interleaving of writes, tombstones, transactions, rolls, time, cleans and restarts keeps the
    log equal to the last-write-wins model, with tombstones kept until their delete horizon and removed
    after it, and the log end offset untouched by cleaning."""
    with scratch_dir() as tmp:
        harness = Harness(Path(tmp) / "logs")
        try:
            for op in ops:
                harness.run(op)
            harness.check("end of the sequence")
            harness.settle()
        finally:
            harness.close()


def test_tombstone_lifecycle_is_horizon_exact() -> None:
    """A tombstone survives every clean strictly before ``first clean + delete.retention.ms`` and is
    removed by the first clean at the horizon; the key's older value never reappears."""
    with scratch_dir() as tmp:
        harness = Harness(Path(tmp) / "logs")
        try:
            harness.write([(b"a", 10), (b"b", 10)])
            harness.write([(b"a", None)])
            harness.roll()
            assert harness.clean(), "the first clean must run"
            first_clean_ms = harness.model.cleans[0][0]
            tombstone = max(o for o, w in harness.model.writes.items() if w.key == b"a")
            # Dirty the log and clean just before the horizon: the tombstone stays.
            harness.advance(RETENTION_MS - 1)
            harness.write([(b"c", 10)])
            harness.roll()
            assert harness.clean()
            assert harness.clock.milliseconds() == first_clean_ms + RETENTION_MS - 1
            assert tombstone in {r.offset for r in harness.log.records()}
            # At the horizon exactly (now >= horizon): gone.
            harness.advance(1)
            harness.write([(b"d", 10)])
            harness.roll()
            assert harness.clean()
            assert b"a" not in {r.key for r in harness.log.records()}
            harness.restart()
        finally:
            harness.close()


def test_a_full_offset_map_cleans_a_prefix_and_later_cleans_finish_the_job() -> None:
    """With an offset map of ~200 entries and ~400 distinct keys, each clean maps only part of the dirty
    section and stops there (its end offset is below the first uncleanable offset); every partial clean
    keeps the model and compacts what it covered, and repeated cleans reach the end of the log."""
    broker = dict(BROKER)
    broker["log.cleaner.dedupe.buffer.size"] = str(1024 * 1024 + 24)  # the minimum: > 1 MiB per thread
    broker["log.cleaner.io.buffer.load.factor"] = "0.005"  # ~218 entries
    with scratch_dir() as tmp:
        harness = Harness(Path(tmp) / "logs", broker)
        try:
            for r in range(3):
                for i in range(200):
                    key = b"key-%04d" % ((i * 7 + r * 131) % 400)
                    harness.write([(key, 20 + r)], "none" if i % 4 else "lz4")
            harness.roll()
            log_end = harness.model.log_end_offset
            ends = []
            for _ in range(20):
                cleaned = harness.clean()  # checks the model and the compaction of [0, end)
                if not cleaned:
                    break
                ends.append(cleaned[-1].end_offset)
            assert len(ends) >= 2 and ends[0] < log_end, f"the map never filled: {ends}"
            assert ends == sorted(ends) and ends[-1] == log_end, ends
            records = list(harness.log.records())
            expected = fold((w.key, w.value) for _, w in harness.model.committed_view())
            assert {r.key: r.value for r in records} == expected
            assert len(records) == len(expected), "a fully cleaned log holds one record per key"
            harness.restart()
        finally:
            harness.close()


def test_records_read_committed_reads_past_a_fetch_of_only_aborted_batches(tmp_path: Path) -> None:
    """An aborted transactional batch that ends a segment (so a fetch returns it alone) must not end a
    read_committed scan: the plain records after it are committed data and must be returned."""
    clock = MockTime(start_ms=T0)
    with LogManager(tmp_path, dict(BROKER), clock=clock) as manager:
        manager.create_topic(TOPIC, config=dict(TOPIC_CONFIG))
        log = manager.get_log(TOPIC)
        log.append([(b"a", b"plain-0", T0)])  # offset 0
        txn = RecordBatchBuilder(producer_id=PRODUCERS[0], producer_epoch=EPOCH, base_sequence=0, is_transactional=True)
        txn.append(b"a", b"aborted", T0)
        log.append(txn)  # offset 1: the last batch of segment 0
        log.roll()
        log.append([(b"b", b"plain-2", T0)])  # offset 2
        log.append_end_txn_marker(ControlRecordType.ABORT, PRODUCERS[0], EPOCH, coordinator_epoch=1)  # offset 3
        log.append([(b"c", b"plain-4", T0)])  # offset 4
        expected = [(0, b"plain-0"), (2, b"plain-2"), (4, b"plain-4")]
        assert [(r.offset, r.value) for r in read_committed(log)] == expected  # the consumer's view
        assert [(r.offset, r.value) for r in log.records(isolation="read_committed")] == expected
