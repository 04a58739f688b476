"""``kafkalog topics``: kafka-topics.sh for log dirs (create, list, describe, alter, delete), or for a running
broker with ``--bootstrap-server`` (cli/online.py)."""

from __future__ import annotations

from pathlib import Path

import click

from ..partition.readonly import ReadOnlyLogDir
from ..storage.config import load_properties
from .common import log_dir_or_broker_options, online_or_offline, open_manager, open_readonly, parse_key_values

DEFAULT_PARTITIONS = 1  # offline; a broker applies its num.partitions


@click.command("topics")
@log_dir_or_broker_options
@click.option("--create", "action", flag_value="create", help="Create a topic.")
@click.option("--list", "action", flag_value="list", help="List the topics.")
@click.option("--describe", "action", flag_value="describe", help="Describe topics and their partitions.")
@click.option(
    "--alter", "action", flag_value="alter", help="Change a topic's config overrides, or grow it (--partitions)."
)
@click.option("--delete", "action", flag_value="delete", help="Delete a topic.")
@click.option("--topic", help="The topic (for --describe, all topics when left out).")
@click.option(
    "--partitions",
    type=click.IntRange(min=1),
    default=None,
    help="Partitions of a new topic (default 1 offline, the broker's num.partitions online), or the new total "
    "with --alter.",
)
@click.option(
    "--replication-factor",
    type=click.IntRange(min=1),
    default=None,
    help="Replicas of each partition of a new topic (a log dir holds one replica: 1 offline).",
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
    command_config: Path | None,
    action: str | None,
    topic: str | None,
    partitions: int | None,
    replication_factor: int | None,
    configs: tuple[str, ...],
    delete_configs: tuple[str, ...],
) -> None:
    """Create, list, describe, alter or delete topics in log dirs (--log-dir) or on a running broker
    (--bootstrap-server), with kafka-topics.sh's conventions."""
    online = online_or_offline(log_dirs, bootstrap_server, command_config)
    if action is None:
        raise click.UsageError(
            "Command must include exactly one action: --list, --describe, --create, --alter or --delete"
        )
    overrides, broker_files = _split_configs(configs)
    if action in ("create", "alter", "delete") and not topic:
        raise click.UsageError(f"--topic is required with --{action}")
    if replication_factor is not None and action != "create":
        raise click.UsageError("--replication-factor is only valid with --create")
    if partitions is not None and action not in ("create", "alter"):
        raise click.UsageError("--partitions is only valid with --create or --alter")
    if online:
        if broker_files:
            raise click.UsageError("--config takes k=v with --bootstrap-server (a properties file is for --log-dir)")
        from .online import topics_online

        assert bootstrap_server is not None
        topics_online(
            bootstrap_server, command_config, action, topic, partitions, replication_factor, overrides, delete_configs
        )
        return
    if replication_factor not in (None, 1):
        raise click.UsageError(f"--replication-factor {replication_factor}: a log dir holds one replica (use 1)")
    if action in ("list", "describe"):
        _show(log_dirs, action, topic)
        return
    manager = open_manager(log_dirs, broker_files[0] if broker_files else None)
    try:
        if action == "create":
            manager.create_topic(topic, partitions or DEFAULT_PARTITIONS, overrides)
            click.echo(f"Created topic {topic}.")
        elif action == "alter":
            updates = {**overrides, **{key: None for key in delete_configs}}
            if not updates and partitions is None:
                raise click.UsageError("--alter needs --partitions N, --config k=v or --delete-config k")
            if partitions is not None:
                manager.create_partitions(topic, partitions)
                click.echo(f"Topic {topic} now has {partitions} partitions.")
            if updates:
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
