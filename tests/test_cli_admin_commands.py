"""get-offsets, delete-records, log-dirs, configs (topics, brokers) and kafka-topics.sh's options, each against a
``kafkalog serve`` subprocess (--bootstrap-server) and on a log dir (--log-dir), compared with the formats of
Kafka's tools; the Kafka source each format follows is named next to its assertions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from brokertools import BrokerProcess
from kafkalog.cli import main
from kafkalog.manager import LogManager

T0 = 1_700_000_000_000


def run(*args: str, input: str | None = None):
    return CliRunner().invoke(main, list(args), input=input)


def _fill(produce) -> None:
    """Topic t: partition 0 gets 5 records at T0..T0+4 (the max timestamp at offset 3), partition 1 none;
    topic u (retention.ms=60000 override) one record."""
    for i, ts in enumerate([T0, T0 + 1, T0 + 2, T0 + 9, T0 + 4]):
        produce("t", 0, b"k%d" % i, b"v%d" % i, ts)
    produce("u", 0, None, b"x", T0)


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    server = BrokerProcess(tmp_path_factory.mktemp("admin-broker")).start()
    from kafka import KafkaProducer
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap)
    admin.create_topics([NewTopic("t", 2, 1), NewTopic("u", 1, 1, topic_configs={"retention.ms": "60000"})])
    admin.close()
    producer = KafkaProducer(bootstrap_servers=server.bootstrap)
    _fill(lambda t, p, k, v, ts: producer.send(t, v, key=k, partition=p, timestamp_ms=ts))
    producer.flush()
    producer.close()
    yield server
    assert server.stop() == 0, server.log


@pytest.fixture()
def logdir(tmp_path: Path) -> Path:
    d = tmp_path / "logs"
    with LogManager([d], {"log.cleaner.enable": "false"}) as manager:
        manager.create_topic("t", 2)
        manager.create_topic("u", 1, {"retention.ms": "60000"})
        _fill(lambda t, p, k, v, ts: manager.produce(t, v, key=k, partition=p, timestamp=ts))
    return d


def _both(broker, logdir: Path) -> list[list[str]]:
    return [["--bootstrap-server", broker.bootstrap], ["--log-dir", str(logdir)]]


# ----- get-offsets (tools/src/main/java/org/apache/kafka/tools/GetOffsetShell.java) -----------------------------


def test_get_offsets_prints_topic_partition_offset_online_and_offline(broker, logdir: Path) -> None:
    """GetOffsetShell prints String.join(":", topic, partition, offset) per partition, sorted by
    TopicPartition.toString, and leaves out a partition whose offset is unknown (-1)."""
    for where in _both(broker, logdir):

        def offsets(*args: str, where: list[str] = where) -> list[str]:
            result = run("get-offsets", *where, *args)
            assert result.exit_code == 0, (where, args, result.output)
            return result.output.splitlines()

        assert offsets("--topic", "t") == ["t:0:5", "t:1:0"]  # --time defaults to latest
        assert offsets("--topic", "t", "--time", "-1") == ["t:0:5", "t:1:0"]
        assert offsets("--topic", "t", "--time", "earliest") == ["t:0:0", "t:1:0"]
        assert offsets("--topic", "t", "--time", "-2", "--partitions", "1") == ["t:1:0"]
        assert offsets("--topic", "t", "--time", "-3", "--partitions", "0") == ["t:0:3"]  # the max timestamp
        assert offsets("--topic", "t", "--time", str(T0 + 3)) == ["t:0:3"]  # first at or after; none in t-1
        assert offsets("--topic", "t", "--time", str(T0 + 99)) == []
        assert offsets("--topic-partitions", "t:1,u") == ["t:1:0", "u:0:1"]
        assert offsets("--topic", "t|u", "--time", "earliest") == ["t:0:0", "t:1:0", "u:0:0"]  # a regex
        none = run("get-offsets", *where, "--topic", "nope")
        assert none.exit_code == 1 and "Could not match any topic-partitions with the specified filters" in none.output
        bad = run("get-offsets", *where, "--topic", "t", "--time", "yesterday")
        assert bad.exit_code == 2 and "Malformed time argument yesterday" in bad.output
        mixed = run("get-offsets", *where, "--topic", "t", "--topic-partitions", "t:0")
        assert mixed.exit_code == 2 and "--topic-partitions cannot be used with --topic or --partitions" in mixed.output


# ----- delete-records (tools/src/main/java/org/apache/kafka/tools/DeleteRecordsCommand.java) ---------------------


def _offsets_file(tmp_path: Path, entries: list[dict], name: str = "offsets.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps({"partitions": entries, "version": 1}))
    return str(path)


def test_delete_records_online_and_offline(broker, logdir: Path, tmp_path: Path) -> None:
    """DeleteRecordsCommand prints 'Executing records delete operation', 'Records delete operation completed:' and
    'partition: %s\\tlow_watermark: %s' (or '\\terror: %s') per partition; its JSON file is
    {"partitions": [{"topic", "partition", "offset"}], "version": 1}."""
    for where in _both(broker, logdir):
        good = _offsets_file(tmp_path, [{"topic": "t", "partition": 0, "offset": 2}])
        result = run("delete-records", *where, "--offset-json-file", good)
        assert result.exit_code == 0, (where, result.output)
        assert result.output == (
            "Executing records delete operation\nRecords delete operation completed:\n"
            "partition: t-0\tlow_watermark: 2\n"
        )
        assert run("get-offsets", *where, "--topic", "t", "--time", "-2", "--partitions", "0").output == "t:0:2\n"
        # -1: up to the high watermark
        hw = _offsets_file(tmp_path, [{"topic": "u", "partition": 0, "offset": -1}], "hw.json")
        assert "partition: u-0\tlow_watermark: 1\n" in run("delete-records", *where, "--offset-json-file", hw).output
        # beyond the high watermark: that partition's error line, exit 1
        far = _offsets_file(tmp_path, [{"topic": "t", "partition": 1, "offset": 99}], "far.json")
        failed = run("delete-records", *where, "--offset-json-file", far)
        assert failed.exit_code == 1 and "partition: t-1\terror: OffsetOutOfRange" in failed.output
        dup = _offsets_file(tmp_path, [{"topic": "t", "partition": 0, "offset": 1}] * 2, "dup.json")
        twice = run("delete-records", *where, "--offset-json-file", dup)
        assert twice.exit_code == 1 and "Offset json file contains duplicate topic partitions: t-0" in twice.output
        (tmp_path / "bad.json").write_text("{not json")
        bad = run("delete-records", *where, "--offset-json-file", str(tmp_path / "bad.json"))
        assert bad.exit_code == 1 and "The input string is not a valid JSON" in bad.output


# ----- log-dirs (tools/src/main/java/org/apache/kafka/tools/LogDirsCommand.java) --------------------------------


def test_log_dirs_describe_online_and_offline(broker, logdir: Path) -> None:
    """LogDirsCommand: two lines, then Jackson's JSON of its HashMaps, keys in HashMap order (checked with a JVM:
    [brokers, version], [broker, logDirs], [partitions, error, logDir], [partition, size, offsetLag, isFuture])."""
    for where, directory in zip(_both(broker, logdir), [broker.log_dir, logdir], strict=True):
        result = run("log-dirs", *where, "--describe", "--topic-list", "t")
        assert result.exit_code == 0, (where, result.output)
        lines = result.output.splitlines()
        assert lines[:2] == [
            "Querying brokers for log directories information",
            "Received log directory information from brokers 0",
        ]
        assert lines[2].startswith('{"brokers":[{"broker":0,"logDirs":[{"partitions":[{"partition":"t-0","size":')
        assert lines[2].endswith(f'"error":null,"logDir":"{directory.absolute()}"}}]}}],"version":1}}')
        doc = json.loads(lines[2])
        parts = doc["brokers"][0]["logDirs"][0]["partitions"]
        sizes = {p["partition"]: p["size"] for p in parts}
        on_disk = {f"t-{n}": sum(f.stat().st_size for f in (directory / f"t-{n}").glob("*.log")) for n in (0, 1)}
        assert sizes == on_disk and sizes["t-0"] > 0
        assert all(p["offsetLag"] == 0 and p["isFuture"] is False for p in parts)
        assert list(parts[0]) == ["partition", "size", "offsetLag", "isFuture"]
        missing = run("log-dirs", *where, "--describe", "--broker-list", "7")
        assert missing.exit_code == 1
        assert "ERROR: The given brokers do not exist from --broker-list: 7. Current existent brokers: 0" in (
            missing.output
        )
        assert run("log-dirs", *where).exit_code == 2  # --describe is required


# ----- configs (core/src/main/scala/kafka/admin/ConfigCommand.scala) --------------------------------------------


def test_configs_describe_all_and_alter_topics_online_and_offline(broker, logdir: Path) -> None:
    """describeResourceConfig: "All configs for topic u are:" (or "Dynamic configs ...") then
    "  name=value sensitive=false synonyms={SOURCE:name=value, ...}", sorted by name; alterResourceConfig:
    'Invalid config(s): x' for a deleted config that is not set, then 'Completed updating config for topic u.'"""
    for where in _both(broker, logdir):
        dynamic = run("configs", *where, "--describe", "--entity-type", "topics", "--entity-name", "u")
        assert dynamic.exit_code == 0, (where, dynamic.output)
        assert dynamic.output.splitlines() == [
            "Dynamic configs for topic u are:",
            "  retention.ms=60000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=60000}",
        ]
        every = run("configs", *where, "--describe", "--all", "--entity-type", "topics", "--entity-name", "u")
        lines = every.output.splitlines()
        assert lines[0] == "All configs for topic u are:"
        names = [line.split("=", 1)[0].strip() for line in lines[1:]]
        assert names == sorted(names) and {"cleanup.policy", "segment.bytes", "retention.ms"} <= set(names)
        assert "  cleanup.policy=delete sensitive=false synonyms={}" in lines
        assert "  segment.bytes=1073741824 sensitive=false synonyms={}" in lines
        nope = run("configs", *where, "--alter", "--entity-type", "topics", "--entity-name", "u",
                   "--delete-config", "nope")  # fmt: skip
        assert nope.exit_code == 1 and nope.output == "Error: Invalid config(s): nope\n"
        altered = run("configs", *where, "--alter", "--entity-type", "topics", "--entity-name", "u",
                      "--add-config", "segment.bytes=1048576,cleanup.policy=[compact,delete]",
                      "--delete-config", "retention.ms")  # fmt: skip
        assert (altered.exit_code, altered.output) == (0, "Completed updating config for topic u.\n"), altered.output
        after = run("configs", *where, "--describe", "--entity-type", "topics", "--entity-name", "u").output
        assert after.splitlines()[1:] == [
            "  cleanup.policy=compact,delete sensitive=false "
            "synonyms={DYNAMIC_TOPIC_CONFIG:cleanup.policy=compact,delete}",
            "  segment.bytes=1048576 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:segment.bytes=1048576}",
        ]
        brokers = run("configs", *where, "--describe", "--entity-type", "brokers", "--entity-name", "0")
        assert brokers.exit_code == 0 and brokers.output.splitlines()[0] == "Dynamic configs for broker 0 are:"


def test_configs_offline_broker_all_reads_server_properties(logdir: Path, tmp_path: Path) -> None:
    props = tmp_path / "server.properties"
    props.write_text("log.retention.ms=5000\nsasl.jaas.config=secret-stuff\n")
    lines = run("configs", "--log-dir", str(logdir), "--config", str(props), "--describe", "--all",
                "--entity-type", "brokers", "--entity-name", "0").output.splitlines()  # fmt: skip
    assert lines == [
        "All configs for broker 0 are:",
        "  log.retention.ms=5000 sensitive=false synonyms={}",
        "  sasl.jaas.config=None sensitive=true synonyms={}",
    ]
    # a topic without its own retention.ms takes the broker's: STATIC_BROKER_CONFIG with its synonym
    topic = run("configs", "--log-dir", str(logdir), "--config", str(props), "--describe", "--all",
                "--entity-type", "topics", "--entity-name", "t").output.splitlines()  # fmt: skip
    assert "  retention.ms=5000 sensitive=false synonyms={STATIC_BROKER_CONFIG:log.retention.ms=5000}" in topic


# ----- topics' options online (tools/src/main/java/org/apache/kafka/tools/TopicCommand.java) --------------------


def test_topics_options_against_a_broker(broker) -> None:
    b = ["--bootstrap-server", broker.bootstrap]
    both = run("topics", *b, "--list", "--describe")
    assert both.exit_code == 2 and "Command must include exactly one action" in both.output
    assert run("topics", *b, "--create", "--topic", "t", "--if-not-exists").output == ""
    assert run("topics", *b, "--delete", "--topic", "ghost", "--if-exists").exit_code == 0
    assert run("topics", *b, "--describe", "--topic", "ghost", "--if-exists").output == ""
    missing = run("topics", *b, "--describe", "--topic", "ghost")
    assert missing.exit_code == 1 and "Topic 'ghost' does not exist as expected" in missing.output
    overrides = run("topics", *b, "--describe", "--topics-with-overrides").output.splitlines()
    assert len(overrides) == 1 and overrides[0].startswith("Topic: u\t")
    assert not overrides[0].endswith("Configs: ")  # u's overrides (another test may have changed which)
    nope = run("topics", *b, "--alter", "--topic", "u", "--delete-config", "nope")
    assert nope.exit_code == 1 and nope.output == "Error: Invalid config(s): nope\n"
    assert run("topics", *b, "--create", "--topic", "a.b").exit_code == 0
    clash = run("topics", *b, "--create", "--topic", "a_b")
    assert clash.exit_code == 1 and "Topic 'a_b' collides with existing topic: a.b" in clash.output
    grown = run("topics", *b, "--alter", "--topic", "a.b", "--partitions", "3")
    assert grown.exit_code == 0 and "PartitionCount: 3" in run("topics", *b, "--describe", "--topic", "a.b").output


def test_exclude_internal_online_and_offline(broker, logdir: Path) -> None:
    """TopicCommand's --exclude-internal and GetOffsetShell's --exclude-internal-topics leave out Topic.isInternal
    names (__consumer_offsets, __transaction_state)."""
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.describe_groups(["readers"])  # FindCoordinator: the group coordinator creates __consumer_offsets
    finally:
        admin.close()
    with LogManager([logdir], {"log.cleaner.enable": "false"}) as manager:
        manager.create_topic("__consumer_offsets", 1, {"cleanup.policy": "compact"})  # as the coordinator would
    for where in _both(broker, logdir):
        listed = run("topics", *where, "--list").output.split()
        assert "__consumer_offsets" in listed, (where, listed)
        assert "__consumer_offsets" not in run("topics", *where, "--list", "--exclude-internal").output.split()
        described = run("topics", *where, "--describe", "--exclude-internal").output
        assert "Topic: t\t" in described and "__consumer_offsets" not in described
        offsets = run("get-offsets", *where, "--exclude-internal-topics").output.splitlines()
        assert "t:0:5" in offsets and not any(line.startswith("__consumer_offsets:") for line in offsets)
        assert any(line.startswith("__consumer_offsets:") for line in run("get-offsets", *where).output.splitlines())


def test_topics_list_and_describe_take_a_regex_but_alter_and_delete_an_exact_name(broker, logdir: Path) -> None:
    """TopicCommand: --topic "also accepts a regular expression, except for --create" (IncludeList); kafkalog keeps
    --alter and --delete to the exact name, so a '.' never reaches another topic."""
    for where in _both(broker, logdir):
        assert run("topics", *where, "--list", "--topic", "t|u").output.split() == ["t", "u"]
        assert run("topics", *where, "--list", "--topic", "[tu]").output.split() == ["t", "u"]
        described = run("topics", *where, "--describe", "--topic", "t,u").output
        assert "Topic: t\t" in described and "Topic: u\t" in described
        wild = run("topics", *where, "--delete", "--topic", ".")
        assert wild.exit_code == 1 and "Topic '.' does not exist as expected" in wild.output
        assert run("topics", *where, "--list", "--topic", "t").output.split() == ["t"]
