"""``kafkalog topics``: kafka-topics.sh for log dirs (create, list, describe, alter, delete)."""

from __future__ import annotations

from pathlib import Path

import click

from ..partition.readonly import ReadOnlyLogDir
from ..storage.config import load_properties
from .common import open_manager, open_readonly, parse_key_values


@click.command("topics")
@click.option(
    "--log-dir",
    "log_dirs",
    multiple=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="A Kafka log dir (repeat for several, as log.dirs); or --bootstrap-server.",
)
@click.option(
    "--bootstrap-server",
    help="A running broker (host:port) to ask instead of log dirs: --list, --describe (leader, replicas and ISR "
    "from its Metadata) and --create (with --replication-factor), as kafka-topics.sh --bootstrap-server.",
)
@click.option(
    "--replication-factor",
    type=click.IntRange(min=1),
    default=None,
    help="Replicas of each partition of a new topic (--bootstrap-server; default: the broker's).",
)
@click.option("--create", "action", flag_value="create", help="Create a topic.")
@click.option("--list", "action", flag_value="list", help="List the topics.")
@click.option("--describe", "action", flag_value="describe", help="Describe topics and their partitions.")
@click.option("--alter", "action", flag_value="alter", help="Change a topic's config overrides.")
@click.option("--delete", "action", flag_value="delete", help="Delete a topic.")
@click.option("--topic", help="The topic (for --describe, all topics when left out).")
@click.option(
    "--partitions", type=click.IntRange(min=1), default=1, show_default=True, help="Partitions of a new topic."
)
@click.option(
    "--config",
    "configs",
    multiple=True,
    help="A topic config override k=v (Kafka's topic config names; repeatable), or the path of a "
    "broker server.properties.",
)
@click.option("--delete-config", "delete_configs", multiple=True, help="A topic config override to remove (--alter).")
def topics_command(
    log_dirs: tuple[Path, ...],
    bootstrap_server: str | None,
    replication_factor: int | None,
    action: str | None,
    topic: str | None,
    partitions: int,
    configs: tuple[str, ...],
    delete_configs: tuple[str, ...],
) -> None:
    """Create, list, describe, alter or delete topics in log dirs, with kafka-topics.sh's conventions."""
    if action is None:
        raise click.UsageError(
            "Command must include exactly one action: --list, --describe, --create, --alter or --delete"
        )
    overrides, broker_files = _split_configs(configs)
    if action in ("create", "alter", "delete") and not topic:
        raise click.UsageError(f"--topic is required with --{action}")
    if bootstrap_server is not None:
        if log_dirs:
            raise click.UsageError("Give either --log-dir or --bootstrap-server, not both")
        _on_broker(bootstrap_server, action, topic, partitions, replication_factor, overrides)
        return
    if not log_dirs:
        raise click.UsageError("Missing option '--log-dir' (or --bootstrap-server)")
    if replication_factor not in (None, 1):
        raise click.UsageError("--replication-factor above 1 needs a cluster: use --bootstrap-server")
    if action in ("list", "describe"):
        _show(log_dirs, action, topic)
        return
    manager = open_manager(log_dirs, broker_files[0] if broker_files else None)
    try:
        if action == "create":
            manager.create_topic(topic, partitions, overrides)
            click.echo(f"Created topic {topic}.")
        elif action == "alter":
            updates = {**overrides, **{key: None for key in delete_configs}}
            if not updates:
                raise click.UsageError("--alter needs --config k=v or --delete-config k")
            manager.alter_topic_config(topic, updates)
            click.echo(f"Completed updating config for topic {topic}.")
        else:
            manager.delete_topic(topic)
            click.echo(f"Topic {topic} is marked for deletion.")
    finally:
        manager.shutdown()


def _split_configs(configs: tuple[str, ...]) -> tuple[dict[str, str], list[Path]]:
    files = [Path(c) for c in configs if "=" not in c]
    for path in files:
        if not path.is_file():
            raise click.BadParameter(f"{path} is neither k=v nor a properties file", param_hint="--config")
        load_properties(path)
    return parse_key_values(tuple(c for c in configs if "=" in c), "--config"), files


def _show(log_dirs: tuple[Path, ...], action: str, topic: str | None) -> None:
    """--list and --describe, on the read-only view of the log dirs: no lock taken, nothing written."""
    view = open_readonly(log_dirs)
    if action == "list":
        for name in view.topics():
            click.echo(name)
        return
    for name in [topic] if topic else view.topics():
        _describe(view, name)


def _describe(view: ReadOnlyLogDir, name: str) -> None:
    """kafka-topics --describe's lines, with the storage facts a log dir has. A high watermark derived from
    the log end because the replication-offset-checkpoint lags it is followed by why."""
    partitions = view.partitions_of(name)
    configs = ",".join(f"{k}={v}" for k, v in sorted(view.config_overrides(name).items()))
    click.echo(
        f"Topic: {name}\tTopicId: {view.topic_id(name)}\tPartitionCount: {len(partitions)}\t"
        f"ReplicationFactor: 1\tConfigs: {configs}"
    )
    for p in partitions:
        note = p.high_watermark_note
        hw = f"{p.high_watermark} ({note})" if note is not None and p.checkpointed_high_watermark is not None else ""
        click.echo(
            f"\tTopic: {name}\tPartition: {p.partition}\tLeader: 0\tReplicas: 0\tIsr: 0\t"
            f"LogDir: {p.log_dir}\tLogStartOffset: {p.log_start_offset}\tLogEndOffset: {p.log_end_offset}\t"
            f"HighWatermark: {hw or p.high_watermark}\tSegments: {p.segment_count}\tSize: {p.size_bytes}"
        )


def _on_broker(
    bootstrap: str,
    action: str,
    topic: str | None,
    partitions: int,
    replication_factor: int | None,
    overrides: dict[str, str],
) -> None:
    """kafka-topics.sh --bootstrap-server: the cluster's view (leaders, replicas, ISR) from a running broker."""
    from kafka.admin import NewTopic

    from .client_config import admin_client

    admin = admin_client(bootstrap, None, "kafkalog-topics")
    try:
        if action == "list":
            for name in sorted(admin.list_topics()):
                click.echo(name)
        elif action == "describe":
            described = admin.describe_topics([topic] if topic else None)
            for t in sorted(described, key=lambda d: d["name"]):
                _describe_metadata(t, topic is not None)
        elif action == "create":
            new = NewTopic(topic, partitions, replication_factor or -1, topic_configs=overrides)
            response = admin.create_topics([new], timeout_ms=30000, raise_errors=False)
            for result in response.get("topics", []):
                if result.get("error_code"):
                    raise click.ClickException(
                        f"Error while executing topic command: {result.get('error_message')} "
                        f"(error code {result['error_code']})"
                    )
            click.echo(f"Created topic {topic}.")
        else:
            raise click.UsageError(f"--{action} with --bootstrap-server is not supported yet; use --log-dir")
    finally:
        admin.close()


def _kafka_topic_id(value: object) -> str:
    """Kafka's printed form of a topic id (base64url, no padding) from kafka-python's UUID string."""
    import base64
    import uuid

    if not value:
        return ""
    return base64.urlsafe_b64encode(uuid.UUID(str(value)).bytes).rstrip(b"=").decode()


def _describe_metadata(t: dict, asked: bool) -> None:
    """kafka-topics --describe's lines from one topic of a Metadata response (kafka-python's dict)."""
    name = t["name"]
    if t.get("error_code"):
        if asked:
            raise click.ClickException(f"Topic '{name}': error code {t['error_code']} from the broker")
        return
    parts = sorted(t["partitions"], key=lambda p: p["partition_index"])
    rf = len(parts[0]["replica_nodes"]) if parts else 0
    click.echo(
        f"Topic: {name}\tTopicId: {_kafka_topic_id(t.get('topic_id'))}\tPartitionCount: {len(parts)}\t"
        f"ReplicationFactor: {rf}"
    )
    for p in parts:
        leader = p["leader_id"]
        offline = p.get("offline_replicas") or []
        line = (
            f"\tTopic: {name}\tPartition: {p['partition_index']}\tLeader: {leader if leader >= 0 else 'none'}\t"
            f"Replicas: {','.join(map(str, p['replica_nodes']))}\tIsr: {','.join(map(str, p['isr_nodes']))}"
        )
        if offline:
            line += f"\tOffline: {','.join(map(str, offline))}"
        click.echo(line)
