"""``kafkalog log-dirs --describe``: kafka-log-dirs.sh (Kafka's LogDirsCommand), on a running broker
(``--bootstrap-server``, DescribeLogDirs, API key 35) or on log dirs (``--log-dir``, read-only).

The output is LogDirsCommand's (tools/src/main/java/org/apache/kafka/tools/LogDirsCommand.java): two lines, then
one JSON line as its Jackson ObjectMapper writes the HashMaps it builds, with their keys in Java's HashMap
iteration order ({"brokers", "version"}, {"broker", "logDirs"}, {"partitions", "error", "logDir"},
{"partition", "size", "offsetLag", "isFuture"}; checked with a JVM) and no spaces. Partitions and log dirs,
which Kafka keeps in hash maps, are sorted here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from .common import log_dir_or_broker_options, online_or_offline

# The exception class names LogDirsCommand prints in "error" (error().getClass().getName())
_ERROR_CLASSES = {
    57: "org.apache.kafka.common.errors.KafkaStorageException",
    58: "org.apache.kafka.common.errors.LogDirNotFoundException",
}


def _partition_entry(topic: str, partition: int, size: int, offset_lag: int, is_future: bool) -> dict[str, Any]:
    return {"partition": f"{topic}-{partition}", "size": size, "offsetLag": offset_lag, "isFuture": is_future}


def _log_dir_entry(log_dir: str, error: str | None, partitions: list[dict[str, Any]]) -> dict[str, Any]:
    return {"partitions": partitions, "error": error, "logDir": log_dir}


def format_log_dirs(brokers: dict[int, list[dict[str, Any]]]) -> str:
    """LogDirsCommand.formatAsJson's text for {broker id: [log dir entries]}."""
    doc = {"brokers": [{"broker": b, "logDirs": dirs} for b, dirs in sorted(brokers.items())], "version": 1}
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False)


def _split(text: str) -> list[str]:
    return [x for x in text.split(",") if x]


@click.command("log-dirs")
@log_dir_or_broker_options
@click.option("--describe", is_flag=True, help="Describe the log directories (required, as kafka-log-dirs.sh).")
@click.option("--topic-list", default="", help="Topics to show, as topic1,topic2 (all when left out).")
@click.option("--broker-list", default="", help="Brokers to query, as 0,1,2 (all when left out; online only).")
def log_dirs_command(
    log_dirs: tuple[Path, ...],
    bootstrap_server: str | None,
    command_config: Path | None,
    describe: bool,
    topic_list: str,
    broker_list: str,
) -> None:
    """Describe log directories: each dir's partitions with their sizes, as kafka-log-dirs.sh prints them."""
    if not describe:
        raise click.UsageError('Missing required argument "[describe]"')  # CommandLineUtils.checkRequiredArgs
    online = online_or_offline(log_dirs, bootstrap_server, command_config)
    topics = set(_split(topic_list))
    try:
        wanted = {int(b) for b in _split(broker_list)}
    except ValueError:
        raise click.BadParameter(f"not a list of broker ids: {broker_list}", param_hint="--broker-list") from None
    if online:
        assert bootstrap_server is not None
        brokers = _describe_online(bootstrap_server, command_config, topics, wanted)
    else:
        brokers = _describe_offline(log_dirs, topics, wanted)
    click.echo("Querying brokers for log directories information")
    click.echo(f"Received log directory information from brokers {','.join(str(b) for b in sorted(brokers))}")
    click.echo(format_log_dirs(brokers))


def _node_id(log_dirs: tuple[Path, ...]) -> int:
    """The broker the dirs belong to: meta.properties' node.id (broker.id in a ZooKeeper-era file), else 0."""
    from ..storage.properties import load_properties

    for directory in log_dirs:
        meta = directory / "meta.properties"
        if meta.is_file():
            props = dict(load_properties(meta))
            for key in ("node.id", "broker.id"):
                if props.get(key, "").lstrip("-").isdigit():
                    return int(props[key])
    return 0


def _describe_offline(
    log_dirs: tuple[Path, ...], topics: set[str], wanted: set[int]
) -> dict[int, list[dict[str, Any]]]:
    """What DescribeLogDirs would answer for these dirs (the read-only view: nothing written, no lock): each
    partition's size is its segments' bytes (Kafka's UnifiedLog.size), its offset lag 0 (the dir is the current
    replica of a single-replica leader); a dir that cannot be read is listed with KafkaStorageException."""
    from ..partition.readonly import ReadOnlyLogDir, log_dir_problem

    node = _node_id(log_dirs)
    if wanted and wanted != {node}:
        others = ",".join(str(b) for b in sorted(wanted - {node}))
        raise click.ClickException(
            f"ERROR: The given brokers do not exist from --broker-list: {others}. Current existent brokers: {node}"
        )
    entries = []
    for directory in log_dirs:
        if log_dir_problem(directory) is not None:
            entries.append(_log_dir_entry(str(directory.absolute()), _ERROR_CLASSES[57], []))
            continue
        view = ReadOnlyLogDir([directory])
        parts = [
            _partition_entry(p.topic, p.partition, p.size_bytes, 0, False)
            for name in view.topics()
            if not topics or name in topics
            for p in view.partitions_of(name)
        ]
        entries.append(_log_dir_entry(str(directory.absolute()), None, parts))
    return {node: entries}


def _describe_online(
    bootstrap: str, command_config: Path | None, topics: set[str], wanted: set[int]
) -> dict[int, list[dict[str, Any]]]:
    """DescribeLogDirs (API key 35) to each broker, through kafka-python's admin client."""
    from .client_config import admin_client

    admin = admin_client(bootstrap, command_config, "log-dirs-tool")
    try:
        cluster = {int(b["broker_id"]) for b in admin.describe_cluster()["brokers"]}
        missing = wanted - cluster
        if missing:
            raise click.ClickException(
                "ERROR: The given brokers do not exist from --broker-list: "
                f"{','.join(str(b) for b in sorted(missing))}. Current existent brokers: "
                f"{','.join(str(b) for b in sorted(cluster))}"
            )
        chosen = sorted(wanted or cluster)
        answers = admin.describe_log_dirs(brokers=chosen)  # [{"broker": id, "log_dirs": [...]}]
        return {int(answer["broker"]): _log_dir_entries(answer["log_dirs"], topics) for answer in answers}
    finally:
        admin.close()


def _log_dir_entries(results: list[dict[str, Any]], topics: set[str]) -> list[dict[str, Any]]:
    """One broker's DescribeLogDirs results (kafka-python's dicts) as LogDirsCommand's entries."""
    entries = []
    for result in results:
        code = result["error_code"]
        parts = [
            _partition_entry(
                topic["name"], p["partition_index"], p["partition_size"], p["offset_lag"], bool(p["is_future_key"])
            )
            for topic in result["topics"]
            if not topics or topic["name"] in topics
            for p in topic["partitions"]
        ]
        parts.sort(key=lambda e: e["partition"])
        error = _ERROR_CLASSES.get(code, f"error code {code}") if code else None
        entries.append(_log_dir_entry(result["log_dir"], error, parts))
    entries.sort(key=lambda e: e["logDir"])
    return entries
