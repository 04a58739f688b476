"""KafkaJS (Node.js, from the npm registry) against ``kafkalog serve``, as the Python clients and kcat are tested.

KafkaJS 2.2.4 speaks older protocol versions than the other clients (Produce v3-7, Fetch v4-11, Metadata
v1-6, ListOffsets v2-3, JoinGroup v0-5), and consumes only through a consumer group, so it also exercises the
group coordinator. It produces with every codec (gzip natively; snappy, lz4 and zstd through the npm plugins
``kafkajs-snappy``, ``kafkajs-lz4`` and ``@kafkajs/zstd``), headers, null keys and values, idempotence on,
acks -1/1/0; it consumes from the earliest offset, a given offset (``consumer.seek``), the latest offset, and a
timestamp (``admin.fetchTopicOffsetsByTimestamp``). What comes back must be exactly what was sent, and each
stored batch must carry the codec it was sent with.

One Node process (tests/kafkajs/driver.js) runs every step against one broker, so the module costs one Node
start-up. The npm packages (tests/kafkajs/package-lock.json) are installed with ``npm ci`` once into a cache
outside the repository, keyed by the lock file's hash, and reused by later runs; the tests skip, saying what
failed, when ``node`` or ``npm`` is missing or the install fails.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from brokertools import BrokerProcess

HERE = Path(__file__).resolve().parent / "kafkajs"
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
ACKS = [-1, 1, 0]
TIMESTAMPS = [1_000_000, 2_000_000, 3_000_000]


def messages(tag: str, n: int = 12) -> list[tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]]:
    """Records covering null keys, null values, empty values, binary bytes and several headers."""
    out = []
    for i in range(n):
        key = None if i % 4 == 0 else f"{tag}-k{i}".encode()
        value = None if i % 5 == 1 else (b"" if i % 7 == 2 else f"{tag}-v{i}".encode() + bytes(range(i * 3)))
        headers = [] if i % 3 == 0 else [("h1", f"x{i}".encode()), ("h2", b"\x00\xff")]
        out.append((key, value, headers))
    return out


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def _unb64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


def _wire(records, timestamps=None) -> list[dict]:
    out = []
    for i, (key, value, headers) in enumerate(records):
        message = {"key": _b64(key), "value": _b64(value), "headers": [[h, _b64(v)] for h, v in headers]}
        if timestamps is not None:
            message["timestamp"] = str(timestamps[i])
        message["partition"] = 0
        out.append(message)
    return out


def _read_back(result: dict) -> list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]]:
    return [
        (_unb64(r["key"]), _unb64(r["value"]), [(h, _unb64(v)) for h, v in r["headers"]]) for r in result["records"]
    ]


def _offsets(result: dict) -> list[int]:
    return [int(r["offset"]) for r in result["records"]]


# ----- installing KafkaJS ------------------------------------------------------------------------------------
def _cache_root() -> Path:
    configured = os.environ.get("KAFKALOG_NODE_CACHE")
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kafkalog"


def _install_kafkajs() -> Path:
    """The node_modules directory holding KafkaJS and its codec plugins, installed on first use.

    ``npm ci`` installs exactly the committed lock file into a fresh directory, which is renamed into place
    only when complete, so an interrupted install is never reused. The plugins are optional dependencies: one
    whose native build fails (``lz4`` and ``cppzst`` compile C++) leaves the others installed, and the driver
    reports that codec as unavailable. CXXFLAGS=-std=c++17 because cppzst's build asks for an older C++
    standard than Node 20's headers need.
    """
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        missing = " and ".join(name for name, path in (("node", node), ("npm", npm)) if path is None)
        pytest.skip(f"{missing} not on PATH: the KafkaJS tests need Node.js 18+ and npm (apt-get install nodejs npm)")
    lock = (HERE / "package-lock.json").read_bytes()
    digest = hashlib.sha256((HERE / "package.json").read_bytes() + lock).hexdigest()[:16]
    target = _cache_root() / f"kafkajs-{digest}"
    if (target / "node_modules" / "kafkajs" / "package.json").exists():
        return target / "node_modules"
    staging = target.with_name(f"{target.name}.tmp{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    for name in ("package.json", "package-lock.json"):
        shutil.copy(HERE / name, staging / name)
    env = dict(os.environ, CXXFLAGS="-std=c++17", npm_config_update_notifier="false")
    try:
        done = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=staging,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
    except subprocess.TimeoutExpired:
        shutil.rmtree(staging, ignore_errors=True)
        pytest.skip(f"`npm ci` of tests/kafkajs did not finish in 600 s (is the npm registry reachable?) in {staging}")
    if done.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-15:])
        pytest.skip(f"`npm ci` of tests/kafkajs failed (exit {done.returncode}):\n{tail}")
    try:
        staging.rename(target)
    except OSError:  # another session installed the same lock file meanwhile: use theirs
        shutil.rmtree(staging, ignore_errors=True)
    return target / "node_modules"


# ----- one broker, one KafkaJS run -----------------------------------------------------------------------------
def _steps() -> list[dict]:
    steps: list[dict] = []
    for codec in CODECS:
        topic = f"kjs-{codec}"
        sent = _wire(messages(topic))
        # three send() calls: three batches, the first holding several records
        steps.append(
            {
                "op": "produce",
                "topic": topic,
                "codec": codec,
                "acks": -1,
                "idempotent": True,
                "sends": [sent[:7], sent[7:10], sent[10:]],
            }
        )
        steps.append({"op": "consume", "topic": topic, "partition": 0, "from": "earliest", "count": 12, "group": topic})
    for acks in ACKS:
        topic = f"kjs-acks{acks}"
        sends = [[m] for m in _wire(messages(topic, 6))]
        steps.append(
            {"op": "produce", "topic": topic, "codec": "none", "acks": acks, "idempotent": acks == -1, "sends": sends}
        )
        steps.append({"op": "consume", "topic": topic, "partition": 0, "from": "earliest", "count": 6, "group": topic})
    steps.append(
        {
            "op": "consume",
            "topic": "kjs-gzip",
            "partition": 0,
            "from": "offset",
            "offset": "5",
            "count": 7,
            "group": "g-seek",
        }
    )
    positions = [(None, b"old%d" % i, []) for i in range(len(TIMESTAMPS))]
    steps.append(
        {
            "op": "produce",
            "topic": "kjs-positions",
            "codec": "none",
            "acks": 1,
            "sends": [[m] for m in _wire(positions, TIMESTAMPS)],
        }
    )
    steps.append({"op": "offsets", "topic": "kjs-positions", "timestamp": "1500000"})
    steps.append({"op": "offsets", "topic": "kjs-positions", "timestamp": "9000000"})
    steps.append(
        {
            "op": "consume",
            "topic": "kjs-positions",
            "partition": 0,
            "from": "latest",
            "count": 1,
            "group": "g-latest",
            "produceAfterFirstFetch": {
                "op": "produce",
                "topic": "kjs-positions",
                "codec": "none",
                "acks": -1,
                "idempotent": True,
                "sends": [_wire([(b"k", b"new", [("h", b"v")])])],
            },
        }
    )
    steps.append(
        {
            "op": "consume",
            "topic": "kjs-positions",
            "partition": 0,
            "from": "offset",
            "offset": "1",
            "count": 3,
            "group": "g-ts",
        }
    )
    steps += _trap_steps()
    return steps


BIG = [b"\x07" * 200_000, b"\x08" * 300_000, b"\x09" * 100_000]


def _trap_steps() -> list[dict]:
    """Steps for the known traps, as KafkaJS meets them: KIP-74, LogAppendTime, refusals, committed offsets."""
    big = _wire([(None, v, []) for v in BIG])
    small_value = _wire([(None, b"x" * 5000, [])])
    return [
        # records far larger than the fetch's max bytes (1 KiB) still come back whole: the first batch is
        # returned even when it exceeds the limits (KIP-74)
        {"op": "produce", "topic": "kjs-big", "codec": "gzip", "acks": -1, "sends": [big[:2], big[2:]]},
        {
            "op": "consume",
            "topic": "kjs-big",
            "partition": 0,
            "from": "earliest",
            "count": 3,
            "group": "kjs-big",
            "maxBytes": 1024,
        },
        {"op": "createTopic", "topic": "kjs-logappend", "configs": {"message.timestamp.type": "LogAppendTime"}},
        {
            "op": "produce",
            "topic": "kjs-logappend",
            "codec": "lz4",
            "acks": 1,
            "sends": [_wire([(b"k", b"v", [])], [1000])],
        },
        {"op": "consume", "topic": "kjs-logappend", "partition": 0, "from": "earliest", "count": 1, "group": "kjs-la"},
        {"op": "createTopic", "topic": "kjs-small", "configs": {"max.message.bytes": "1000"}},
        {
            "op": "produce",
            "topic": "kjs-small",
            "codec": "none",
            "acks": -1,
            "sends": [small_value],
            "expectError": True,
        },
        {
            "op": "produce",
            "topic": "kjs-acks5",
            "codec": "none",
            "acks": 5,
            "sends": [_wire([(None, b"v", [])])],
            "expectError": True,
        },
        {"op": "offsets", "topic": "kjs-small", "timestamp": "0"},
        # a group that commits: the second member of the group resumes at the first one's committed offset
        {
            "op": "consume",
            "topic": "kjs-none",
            "partition": 0,
            "from": "earliest",
            "count": 7,
            "group": "g-resume",
            "commit": True,
            "name": "resume-1",
        },
        {
            "op": "consume",
            "topic": "kjs-none",
            "partition": 0,
            "from": "committed",
            "count": 5,
            "group": "g-resume",
            "commit": True,
            "name": "resume-2",
        },
    ]


@pytest.fixture(scope="module")
def kafkajs(tmp_path_factory):
    """Every step run by one KafkaJS process against one broker: (broker, {"codecs", "results"} by step)."""
    modules = _install_kafkajs()
    steps = _steps()
    assert len({_key(s) for s in steps}) == len(steps), "two steps share a result key"
    # group.initial.rebalance.delay.ms=0 as in Kafka's own test configs: each consume step is a new group
    server = BrokerProcess(
        tmp_path_factory.mktemp("broker-kafkajs"), {"num.partitions": "1", "group.initial.rebalance.delay.ms": "0"}
    ).start()
    try:
        env = dict(os.environ, NODE_PATH=str(modules), KAFKAJS_NO_PARTITIONER_WARNING="1")
        run = subprocess.run(
            [shutil.which("node") or "node", str(HERE / "driver.js")],
            input=json.dumps({"brokers": [server.bootstrap], "steps": steps}),
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
        assert run.returncode == 0, f"KafkaJS driver failed:\n{run.stderr}\nbroker log:\n{server.log}"
        output = json.loads(run.stdout)
        results = dict(zip((_key(s) for s in steps), output["results"], strict=True))
        results["stderr"] = run.stderr
        yield server, output["codecs"], results
    finally:
        code = server.stop()
    assert code == 0, server.log


def _key(step: dict) -> tuple | str:
    """How a test finds a step's result: its "name", else (op, topic, from, timestamp)."""
    return step.get("name") or (step["op"], step["topic"], step.get("from"), step.get("timestamp"))


def _batch_codecs(log_dir: Path, topic: str) -> list[str]:
    """The compression codec of every batch stored for partition 0 of ``topic``, as ``kafkalog dump`` prints it."""
    from kafkalog.cli import main

    segment = log_dir / f"{topic}-0" / "00000000000000000000.log"
    result = CliRunner().invoke(main, ["dump", "--files", str(segment)])
    assert result.exit_code == 0, result.output
    return re.findall(r"compresscodec: (\w+)", result.output)


# ----- the tests -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("codec", CODECS)
def test_kafkajs_round_trip_with_every_codec(kafkajs, codec):
    server, codecs, results = kafkajs
    if codecs[codec] is not None:
        pytest.skip(f"KafkaJS has no {codec} codec here: {codecs[codec]}")
    topic = f"kjs-{codec}"
    produced = results[("produce", topic, None, None)]["sends"]
    assert [[(m["partition"], int(m["baseOffset"]), m["errorCode"]) for m in send] for send in produced] == [
        [(0, 0, 0)],
        [(0, 7, 0)],
        [(0, 10, 0)],
    ]
    got = results[("consume", topic, "earliest", None)]
    assert _offsets(got) == list(range(12))
    assert _read_back(got) == messages(topic)
    assert _batch_codecs(server.log_dir, topic) == [codec] * 3  # the attributes kept as KafkaJS sent them


@pytest.mark.parametrize("acks", ACKS)
def test_kafkajs_acks(kafkajs, acks):
    _, _, results = kafkajs
    topic = f"kjs-acks{acks}"
    produced = results[("produce", topic, None, None)]["sends"]
    if acks == 0:
        assert produced == [[]] * 6  # no response to wait for, so no metadata (KafkaJS returns an empty list)
    else:
        assert [int(m["baseOffset"]) for send in produced for m in send] == list(range(6))
    got = results[("consume", topic, "earliest", None)]
    assert _offsets(got) == list(range(6))
    assert _read_back(got) == messages(topic, 6)


def test_kafkajs_consume_from_a_given_offset(kafkajs):
    _, _, results = kafkajs
    got = results[("consume", "kjs-gzip", "offset", None)]
    assert _offsets(got) == list(range(5, 12))
    assert _read_back(got) == messages("kjs-gzip")[5:]


def test_kafkajs_offsets_by_timestamp_and_consume_from_there(kafkajs):
    _, _, results = kafkajs
    middle = results[("offsets", "kjs-positions", None, "1500000")]
    assert middle["offsets"] == [{"partition": 0, "low": "0", "high": "3"}]
    assert middle["byTimestamp"] == [{"partition": 0, "offset": "1"}]
    # past the last timestamp Kafka answers -1 and KafkaJS substitutes the high watermark
    assert results[("offsets", "kjs-positions", None, "9000000")]["byTimestamp"] == [{"partition": 0, "offset": "3"}]
    got = results[("consume", "kjs-positions", "offset", None)]
    assert _offsets(got) == [1, 2, 3]
    assert [r["value"] and _unb64(r["value"]) for r in got["records"]] == [b"old1", b"old2", b"new"]
    assert [int(r["timestamp"]) for r in got["records"]][:2] == TIMESTAMPS[1:]


def test_kafkajs_consume_from_latest(kafkajs):
    _, _, results = kafkajs
    got = results[("consume", "kjs-positions", "latest", None)]
    # the consumer resolved the log end (3) before the new record was produced, and reads only that record
    assert _offsets(got) == [3]
    assert _read_back(got) == [(b"k", b"new", [("h", b"v")])]
    assert [int(m["baseOffset"]) for send in got["produced"]["sends"] for m in send] == [3]


def test_kafkajs_fetch_returns_a_first_batch_larger_than_max_bytes(kafkajs):
    _, _, results = kafkajs
    got = results[("consume", "kjs-big", "earliest", None)]
    assert _offsets(got) == [0, 1, 2]
    assert [_unb64(r["value"]) for r in got["records"]] == BIG


def test_kafkajs_log_append_time(kafkajs):
    _, _, results = kafkajs
    (sent,) = results[("produce", "kjs-logappend", None, None)]["sends"]
    append_time = int(sent[0]["logAppendTime"])
    assert append_time > 1000  # the broker's clock, not the 1000 the producer put in the record
    got = results[("consume", "kjs-logappend", "earliest", None)]
    assert [int(r["timestamp"]) for r in got["records"]] == [append_time]


def test_kafkajs_sees_kafkas_errors_and_nothing_is_written(kafkajs):
    _, _, results = kafkajs
    too_large = results[("produce", "kjs-small", None, None)]
    assert too_large == {"sends": [], "error": {"name": "KafkaJSProtocolError", "type": "MESSAGE_TOO_LARGE"}}
    bad_acks = results[("produce", "kjs-acks5", None, None)]
    assert bad_acks == {"sends": [], "error": {"name": "KafkaJSProtocolError", "type": "INVALID_REQUIRED_ACKS"}}
    assert results[("offsets", "kjs-small", None, "0")]["offsets"] == [{"partition": 0, "low": "0", "high": "0"}]


def test_kafkajs_group_resumes_at_the_committed_offset(kafkajs):
    _, _, results = kafkajs
    first = results["resume-1"]
    assert _offsets(first) == list(range(7))  # pausing after the 7th record: it is the last one processed
    resumed = results["resume-2"]
    assert _offsets(resumed) == list(range(7, 12))
    assert _read_back(resumed) == messages("kjs-none")[7:]


def test_kafkajs_logged_no_errors(kafkajs):
    """KafkaJS logs a broker's error responses and its retries at ERROR: a run that passed only by retrying fails."""
    _, _, results = kafkajs
    lines = results["stderr"].splitlines()
    unexpected = [x for x in lines if x.startswith("[kafkajs ERROR ") and not x.startswith("[kafkajs ERROR (expected)")]
    assert unexpected == [], results["stderr"]  # the refusals the error test asks for are marked "(expected)"


def test_install_skips_saying_why_without_node(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(pytest.skip.Exception, match="node and npm not on PATH"):
        _install_kafkajs()


def test_log_dir_written_for_kafkajs_passes_verify(kafkajs):
    from kafkalog.cli import main

    server, _, _ = kafkajs
    assert server.stop() == 0, server.log  # the last test of the module: verify the log dir after a clean shutdown
    result = CliRunner().invoke(main, ["verify", str(server.log_dir)])
    assert result.exit_code == 0, result.output
