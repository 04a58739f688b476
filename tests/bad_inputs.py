"""The bad-input catalogue: one bad value per field at every entrance, and how to grade the answer.

``bad_inputs()`` lists every entry (Log.append, topic configs, topic names, checkpoint/snapshot/properties files,
CLI arguments); ``try_bad_input`` runs one and says whether it was rejected clearly: the documented error type,
a message naming the field, and the bytes already stored in the log dir unchanged. ``bad_input_summary()``
counts them per entrance. ``tests/test_bad_input.py`` runs each case; ``make reliability`` prints the summary
(``tools/reliability/checks.py`` loads this file).
"""

from __future__ import annotations

import shutil
import struct
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from kafkalog.errors import KafkaLogError


class CliRejected(Exception):
    """A CLI invocation that exited non-zero; the message is its output."""


@dataclass
class Env:
    """A scratch log dir holding a little data: a started LogManager with topic ``t`` (2 partitions)."""

    root: Path
    manager: object = None
    extra: dict = field(default_factory=dict)

    @property
    def log(self):
        return self.manager.get_log("t", 0)


@dataclass(frozen=True)
class BadInput:
    """One bad value at one entrance, the error it must raise, and the text that message must contain."""

    entrance: str
    label: str
    attempt: Callable[[Env], object]
    names: str  # the field (or file) the error message must name
    errors: tuple[type[BaseException], ...] = (KafkaLogError,)


def _good_batch() -> bytes:
    from kafkalog.record import RecordBatchBuilder

    b = RecordBatchBuilder()
    b.append(b"k1", b"v1", timestamp=1_000)
    b.append(b"k2", b"v2", timestamp=1_001)
    return b.build()


def _patched(fmt: str, pos: int, value: int, crc: bool = True) -> bytes:
    from kafkalog.testing.fuzz import fix_crcs

    out = bytearray(_good_batch())
    struct.pack_into(fmt, out, pos, value)
    if crc:
        fix_crcs(out)
    return bytes(out)


def _fixed(data: bytes) -> bytes:
    from kafkalog.testing.fuzz import fix_crcs

    out = bytearray(data)
    fix_crcs(out)
    return bytes(out)


def _flipped_crc() -> bytes:
    out = bytearray(_good_batch())
    out[-1] ^= 0x01
    return bytes(out)


def _legacy_bad_crc() -> bytes:
    from kafkalog.record.legacy_builder import build_legacy

    out = bytearray(
        build_legacy(1, [(0, 1_000, b"k", b"v")], compression_type="none", timestamp_type=0, log_append_time=-1)
    )
    out[-1] ^= 0x01
    return bytes(out)


def _bomb(codec: str) -> bytes:
    """A one-record batch of ``codec`` whose records section decodes (or says it decodes) to 3 GiB: a
    decompression bomb of a few bytes, refused by its stated sizes before anything is decoded."""
    from kafkalog.record import RecordBatchBuilder

    size = 3 << 30
    if codec == "zstd":  # one frame of 128 KiB RLE blocks of zeros, no content size
        rle = ((128 << 10) << 3 | 2).to_bytes(3, "little") + b"\0"
        last = ((128 << 10) << 3 | 3).to_bytes(3, "little") + b"\0"
        section = struct.pack("<I", 0xFD2FB528) + bytes([0, 7 << 3]) + rle * (size // (128 << 10) - 1) + last
    else:  # gzip: a member whose trailer says 3 GiB
        section = b"\x1f\x8b\x08\0\0\0\0\0\0\xff\x03\0" + struct.pack("<II", 0, size)
    b = RecordBatchBuilder(compression=codec)
    b.append(b"k", b"v", timestamp=1_000)
    out = bytearray(b.build()[:61]) + section
    struct.pack_into(">i", out, 8, len(out) - 12)
    return _fixed(bytes(out))


def _appending(make: Callable[[], bytes]) -> Callable[[Env], object]:
    return lambda env: env.log.append(make())


def _append_cases() -> list[BadInput]:
    good = _good_batch()
    cases = [
        ("magic 3", lambda: _patched(">b", 16, 3, crc=False), "magic"),
        ("magic 255", lambda: _patched(">B", 16, 255, crc=False), "magic"),
        ("bad CRC", _flipped_crc, "crc"),
        ("bad legacy CRC", _legacy_bad_crc, "crc"),
        ("batch length below the header", lambda: _patched(">i", 8, 20), "size"),
        ("batch length negative", lambda: _patched(">i", 8, -1), "size"),
        ("batch length 2 GiB", lambda: _patched(">i", 8, 0x7FFFFFFF), "batch"),
        ("batch length past the end", lambda: _patched(">i", 8, len(good)), "batch"),
        ("truncated batch", lambda: good[:-3], "batch"),
        ("trailing garbage", lambda: good + b"\0\0\0", "batch"),
        ("record count too high", lambda: _patched(">i", 57, 5), "count"),
        ("record count negative", lambda: _patched(">i", 57, -1), "count"),
        ("record count 2^31-1", lambda: _patched(">i", 57, 0x7FFFFFFF), "count"),
        ("last offset delta too high", lambda: _patched(">i", 23, 7), "offset"),
        ("last offset delta negative", lambda: _patched(">i", 23, -1), "offset"),
        ("base offset not 0", lambda: _patched(">q", 0, 5), "baseOffset"),
        ("unknown codec id", lambda: _patched(">h", 21, 7), "compression"),
        ("control batch from a client", lambda: _patched(">h", 21, 0x20), "control"),
        ("record length overruns", lambda: _fixed(good[:61] + b"\xfe\xff\xff\xff\x0f" + good[66:]), "size"),
        ("zstd decompression bomb (3 GiB)", lambda: _bomb("zstd"), "limit"),
        ("gzip decompression bomb (3 GiB)", lambda: _bomb("gzip"), "limit"),
    ]
    out = [BadInput("Log.append", label, _appending(make), names) for label, make, names in cases]
    out += [
        BadInput("Log.append", "a str", lambda env: env.log.append("hello"), "records", (TypeError,)),
        BadInput("Log.append", "an int", lambda env: env.log.append(64), "records", (TypeError,)),
        BadInput("Log.append", "None", lambda env: env.log.append(None), "records", (TypeError,)),
        BadInput(
            "Log.append_as_follower",
            "offsets going backwards",
            lambda env: env.log.append_as_follower(good),
            "offset",
        ),
        BadInput(
            "Log.append_as_follower",
            "negative base offset",
            lambda env: env.log.append_as_follower(_patched(">q", 0, -5)),
            "offset",
        ),
        BadInput(
            "Log.append_as_follower",
            "last offset Long.MAX",
            lambda env: env.log.append_as_follower(_patched(">q", 0, 2**63 - 2)),
            "offset",
        ),
        BadInput(
            "Log.append_as_follower", "a str", lambda env: env.log.append_as_follower("x"), "records", (TypeError,)
        ),
    ]
    return out


def _bad_config_values() -> list[tuple[str, str]]:
    """(config, bad value) for every topic config: a wrong type, and out-of-range values where there is a range."""
    from kafkalog.storage.config import TOPIC_KEYS, InvalidConfigurationError

    wrong_type = {"INT": "ten", "LONG": "1.5", "DOUBLE": "half", "BOOLEAN": "maybe", "STRING": None, "LIST": None}
    ranged = {
        "INT": ["-1", "-3", "0", "2147483648", "-2147483649"],
        "LONG": ["-1", "-3", "0", "9223372036854775808"],
        "DOUBLE": ["-0.1", "1.5", "NaN"],
        "STRING": ["bogus"],
        "LIST": ["bogus", "compact,bogus"],
    }
    out = []
    for name, key in TOPIC_KEYS.items():
        bad = wrong_type.get(key.type)
        if bad is not None:
            out.append((name, bad))
        for value in ranged.get(key.type, []):
            try:
                key.parse(value)
            except InvalidConfigurationError:
                out.append((name, value))
    return out


def _config_cases() -> list[BadInput]:
    out = []
    for name, value in _bad_config_values():
        out.append(
            BadInput(
                "topic config (create)",
                f"{name}={value}",
                (lambda n, v: lambda env: env.manager.create_topic("new-topic", 1, {n: v}))(name, value),
                name,
            )
        )
        out.append(
            BadInput(
                "topic config (alter)",
                f"{name}={value}",
                (lambda n, v: lambda env: env.manager.alter_topic_config("t", {n: v}))(name, value),
                name,
            )
        )
    out.append(
        BadInput(
            "topic config (create)",
            "unknown name",
            lambda env: env.manager.create_topic("new-topic", 1, {"segment.byte": "1"}),
            "segment.byte",
        )
    )
    out.append(
        BadInput(
            "topic config (create)",
            "min lag above max lag",
            lambda env: env.manager.create_topic(
                "new-topic", 1, {"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"}
            ),
            "min.compaction.lag.ms",
        )
    )
    return out


BAD_TOPIC_NAMES = [
    "",
    ".",
    "..",
    "a" * 250,
    "a/b",
    "../escape",
    "..\\escape",
    "/abs",
    "a\0b",
    "nul\0",
    "sp ace",
    "tab\t",
    "new\nline",
    "quote'",
    "star*",
    "colon:",
    "ünïcode",
    "emoji-🙂",
    "t-0/../../x",
    "~home",
]


def _topic_name_cases() -> list[BadInput]:
    out = [
        BadInput(
            "topic name", repr(name)[:40], (lambda n: lambda env: env.manager.create_topic(n, 1))(name), "Topic name"
        )
        for name in BAD_TOPIC_NAMES
    ]
    out.append(BadInput("topic name", "not a str", lambda env: env.manager.create_topic(42, 1), "Topic name"))
    out.append(BadInput("topic name", "existing topic", lambda env: env.manager.create_topic("t", 1), "'t'"))
    out.append(BadInput("partitions", "0 partitions", lambda env: env.manager.create_topic("u", 0), "partitions"))
    out.append(BadInput("partitions", "-1 partitions", lambda env: env.manager.create_topic("u", -1), "partitions"))
    return out


BAD_CHECKPOINTS = {
    "bad version": b"1\n1\nt 0 3\n",
    "version not a number": b"x\n1\nt 0 3\n",
    "count not a number": b"0\nmany\nt 0 3\n",
    "negative count": b"0\n-1\n",
    "count above the lines": b"0\n5\nt 0 3\n",
    "count 2^31-1": b"0\n2147483647\nt 0 3\n",
    "count below the lines": b"0\n0\nt 0 3\n",
    "too few fields": b"0\n1\nt 0\n",
    "too many fields": b"0\n1\nt 0 3 4\n",
    "offset not a number": b"0\n1\nt 0 x\n",
    "offset beyond a long": b"0\n1\nt 0 9223372036854775808\n",
    "partition beyond an int": b"0\n1\nt 2147483648 3\n",
    "not UTF-8": b"0\n1\n\xff\xfe 0 3\n",
    "binary": bytes(range(256)),
}


def _checkpoint_cases() -> list[BadInput]:
    from kafkalog.storage.checkpoints import LeaderEpochCheckpointFile, OffsetCheckpointFile

    def offset(data: bytes) -> Callable[[Env], object]:
        def attempt(env: Env) -> object:
            path = env.root / "scratch" / "recovery-point-offset-checkpoint"
            path.write_bytes(data)
            return OffsetCheckpointFile(path, create=False).read()

        return attempt

    def epoch(data: bytes) -> Callable[[Env], object]:
        def attempt(env: Env) -> object:
            path = env.root / "scratch" / "leader-epoch-checkpoint"
            path.write_bytes(data.replace(b"t 0 ", b"0 ").replace(b"t 2147483648 ", b"2147483648 "))
            return LeaderEpochCheckpointFile(path, create=False).read()

        return attempt

    out = [
        BadInput("offset checkpoint file", label, offset(data), "recovery-point-offset-checkpoint")
        for label, data in BAD_CHECKPOINTS.items()
    ]
    out += [
        BadInput("leader-epoch checkpoint file", label, epoch(data), "leader-epoch-checkpoint")
        for label, data in BAD_CHECKPOINTS.items()
        if label not in ("too many fields", "too few fields")
    ]
    return out


def _snapshot_cases() -> list[BadInput]:
    from kafkalog.storage.producer_state import ProducerStateEntry, encode_snapshot, read_snapshot

    good = encode_snapshot([ProducerStateEntry(7, 1, 2, 1_000, None)])

    def snap(data: bytes) -> Callable[[Env], object]:
        def attempt(env: Env) -> object:
            path = env.root / "scratch" / "00000000000000000010.snapshot"
            path.write_bytes(data)
            return read_snapshot(path)

        return attempt

    def at(pos: int, fmt: str, value: int) -> bytes:
        out = bytearray(good)
        struct.pack_into(fmt, out, pos, value)
        return bytes(out)

    flipped = bytearray(good)
    flipped[-1] ^= 1
    cases = {
        "empty": b"",
        "short header": good[:5],
        "unknown version": at(0, ">h", 9),
        "bad CRC": bytes(flipped),
        "negative count": at(6, ">i", -1),
        "count 2^31-1": at(6, ">i", 0x7FFFFFFF),
        "truncated entry": good[:-4],
    }
    return [BadInput("producer snapshot file", label, snap(data), ".snapshot") for label, data in cases.items()]


def _properties_cases() -> list[BadInput]:
    from kafkalog.logdir import MetaProperties
    from kafkalog.storage.config import BrokerConfig
    from kafkalog.storage.properties import load_properties

    def props(text: bytes, loader: str) -> Callable[[Env], object]:
        def attempt(env: Env) -> object:
            if loader == "meta":
                path = env.root / "scratch" / "meta.properties"
                path.write_bytes(text)
                return MetaProperties.read(path.parent)
            path = env.root / "scratch" / "server.properties"
            path.write_bytes(text)
            return load_properties(path) if loader == "load" else BrokerConfig.from_file(path)

        return attempt

    return [
        BadInput("properties file", "bad \\u escape", props(b"a=\\u12G4\n", "load"), "server.properties"),
        BadInput("properties file", "short \\u escape", props(b"a=\\u12", "load"), "server.properties"),
        BadInput(
            "properties file", "log.segment.bytes=abc", props(b"log.segment.bytes=abc\n", "broker"), "log.segment.bytes"
        ),
        BadInput("properties file", "num.partitions=0", props(b"num.partitions=0\n", "broker"), "num.partitions"),
        BadInput(
            "properties file",
            "log.cleanup.policy=bogus",
            props(b"log.cleanup.policy=bogus\n", "broker"),
            "log.cleanup.policy",
        ),
        BadInput("meta.properties", "no cluster.id", props(b"version=1\nnode.id=1\n", "meta"), "meta.properties"),
        BadInput("meta.properties", "bad version", props(b"version=x\n", "meta"), "meta.properties"),
        BadInput(
            "meta.properties",
            "node.id not a number",
            props(b"version=1\ncluster.id=AAAAAAAAAAAAAAAAAAAAAA\nnode.id=x\n", "meta"),
            "node.id",
        ),
    ]


def _cli(*args: str) -> Callable[[Env], object]:
    def attempt(env: Env) -> object:
        from click.testing import CliRunner

        from kafkalog.cli import main

        argv = [a.replace("{root}", str(env.root)) for a in args]
        (env.root / "scratch" / "cli-logs").mkdir(exist_ok=True)  # a log dir of its own: env's is locked
        result = CliRunner().invoke(main, argv)
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise result.exception
        if result.exit_code != 0:
            raise CliRejected(result.output)
        return result

    return attempt


CLI_LOGS = "{root}/scratch/cli-logs"


def _cli_cases() -> list[BadInput]:
    seg = "{root}/a/t-0/00000000000000000000.log"
    cases = [
        ("dump without --files", ("dump",), "--files"),
        ("dump --files missing", ("dump", "--files", "{root}/nope.log"), "nope.log"),
        ("dump --max-bytes -1", ("dump", "--files", seg, "--max-bytes", "-1"), "--max-bytes"),
        ("dump --max-bytes x", ("dump", "--files", seg, "--max-bytes", "x"), "--max-bytes"),
        ("dump --max-message-size -5", ("dump", "--files", seg, "--max-message-size", "-5"), "--max-message-size"),
        (
            "dump --key-decoder-class bogus",
            ("dump", "--files", seg, "--key-decoder-class", "bogus"),
            "--key-decoder-class",
        ),
        ("verify missing dir", ("verify", "{root}/nope"), "nope"),
        ("verify a file", ("verify", seg), "PATH"),
        (
            "verify --index-interval-bytes -1",
            ("verify", "{root}/a", "--index-interval-bytes", "-1"),
            "--index-interval-bytes",
        ),
        ("recover missing dir", ("recover", "{root}/nope"), "nope"),
        ("topics --create ../x", ("topics", "--log-dir", CLI_LOGS, "--create", "--topic", "../x"), "Topic name"),
        ("topics --create a/b", ("topics", "--log-dir", CLI_LOGS, "--create", "--topic", "a/b"), "Topic name"),
        (
            "topics --config segment.bytes=abc",
            ("topics", "--log-dir", CLI_LOGS, "--create", "--topic", "ok", "--config", "segment.bytes=abc"),
            "segment.bytes",
        ),
        (
            "topics --config no value",
            ("topics", "--log-dir", CLI_LOGS, "--create", "--topic", "ok", "--config", "segment.bytes"),
            "segment.bytes",
        ),
        (
            "topics --partitions 0",
            ("topics", "--log-dir", CLI_LOGS, "--create", "--topic", "ok", "--partitions", "0"),
            "--partitions",
        ),
        ("topics --log-dir missing", ("topics", "--log-dir", "{root}/nope", "--list"), "nope"),
        ("unknown command", ("frobnicate",), "frobnicate"),
        ("unknown option", ("dump", "--frob"), "--frob"),
    ]
    return [BadInput("CLI arguments", label, _cli(*args), names, (CliRejected,)) for label, args, names in cases]


def bad_inputs() -> list[BadInput]:
    """Every bad input of every entrance."""
    return [
        *_append_cases(),
        *_config_cases(),
        *_topic_name_cases(),
        *_checkpoint_cases(),
        *_snapshot_cases(),
        *_properties_cases(),
        *_cli_cases(),
    ]


def _stored_bytes(root: Path) -> dict[str, bytes]:
    """Every file under the log dirs (not the scratch dir), by relative path."""
    out = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if rel.parts[0] == "scratch" or not path.is_file() or path.name.endswith(".lock"):
            continue
        out[str(rel)] = path.read_bytes()
    return out


def _open_env(root: Path) -> Env:
    from kafkalog.manager import LogManager
    from kafkalog.testing import MockTime

    (root / "scratch").mkdir()
    manager = LogManager([root / "a", root / "b"], config={"log.index.size.max.bytes": "4096"}, clock=MockTime())
    manager.startup()
    manager.create_topic("t", 2, {"segment.index.bytes": "4096"})
    manager.get_log("t", 0).append(_good_batch())
    manager.get_log("t", 1).append(_good_batch())
    return Env(root, manager)


@dataclass(frozen=True)
class Outcome:
    case: BadInput
    clear: bool
    detail: str


def open_env(root: Path) -> Env:
    """A started LogManager over two log dirs under ``root``, topic ``t`` with a batch in each partition."""
    return _open_env(root)


def close_env(env: Env) -> None:
    env.manager.shutdown()
    shutil.rmtree(env.root, ignore_errors=True)


def try_bad_input(case: BadInput, env: Env | None = None) -> Outcome:
    """Run one bad input; ``clear`` when it was rejected as the contract says and no stored byte changed.

    Without ``env`` a fresh log dir is made (and removed) for the case.
    """
    own = env is None
    if own:
        env = _open_env(Path(tempfile.mkdtemp(prefix="kafkalog-bad-input-")))
    try:
        before = _stored_bytes(env.root)
        try:
            case.attempt(env)
        except case.errors as e:
            message = str(e)
            if case.names.lower() not in message.lower():
                return Outcome(case, False, f"{type(e).__name__} does not name {case.names!r}: {message[:300]}")
            detail = f"{type(e).__name__}: {message[:200]}"
        except Exception as e:
            return Outcome(case, False, f"unexpected {type(e).__name__}: {e}")
        else:
            return Outcome(case, False, "accepted")
        after = _stored_bytes(env.root)
        if after != before:
            changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
            return Outcome(case, False, f"stored bytes changed: {changed[:5]}")
        return Outcome(case, True, detail)
    finally:
        if own:
            close_env(env)


def bad_input_summary() -> list[tuple[str, int, int]]:
    """(entrance, inputs tried, rejected clearly) per entrance; one scratch log dir per entrance."""
    rows: dict[str, list[int]] = {}
    envs: dict[str, Env] = {}
    try:
        for case in bad_inputs():
            env = envs.get(case.entrance)
            if env is None:
                env = envs[case.entrance] = _open_env(Path(tempfile.mkdtemp(prefix="kafkalog-bad-input-")))
            row = rows.setdefault(case.entrance, [0, 0])
            row[0] += 1
            row[1] += try_bad_input(case, env).clear
    finally:
        for env in envs.values():
            close_env(env)
    return [(entrance, tried, clear) for entrance, (tried, clear) in rows.items()]
