"""``kafkalog topics``: kafka-topics.sh for log dirs (create, list, describe, alter, delete), or for a running
broker with ``--bootstrap-server`` (cli/online.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from ..layout import METADATA_TOPIC
from ..logdir import validate_topic_name
from ..manager import LogManager
from ..partition.readonly import ReadOnlyLogDir
from ..storage.config import BrokerConfig, LogConfig
from ..storage.properties import load_properties
from .common import log_dir_or_broker_options, online_or_offline, open_manager, open_readonly, parse_key_values
from .config_items import check_deletions
from .topic_names import KAFKA_INTERNAL_TOPICS, TopicsRequest

DEFAULT_PARTITIONS = 1  # offline; a broker applies its num.partitions


# kafka-topics.sh's actions, exactly one per command (TopicCommandOptions.checkArgs), with their help.
ACTIONS = {
    "create": "Create a topic.",
    "list": "List the topics.",
    "describe": "Describe topics and their partitions.",
    "alter": "Change a topic's config overrides, or grow it (--partitions).",
    "delete": "Delete a topic.",
}
# The flags that modify an action: the actions each applies to (TopicCommandOptions.checkInvalidArgs, which
# :func:`_check_option_actions` enforces) and what it does there; its help says both.
MODIFIERS = {
    "--if-exists": (("alter", "delete", "describe"), "do nothing when the topic is absent."),
    "--if-not-exists": (("create",), "do nothing if the topic exists already."),
    "--topics-with-overrides": (("describe",), "only the topics that have config overrides, their summary line only."),
    "--exclude-internal": (
        ("list", "describe"),
        "leave out Kafka's internal topics (__consumer_offsets, __transaction_state).",
    ),
}


def _either(actions: tuple[str, ...]) -> str:
    """``--alter, --delete or --describe``."""
    names = [f"--{a}" for a in actions]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def _param(option: str) -> str:
    """The parameter click gives a flag: ``--if-exists`` -> ``if_exists`` (a TopicsRequest field of that name)."""
    return option[2:].replace("-", "_")


def _action_flags(command: Callable[..., Any]) -> Callable[..., Any]:
    """--create, --list, --describe, --alter, --delete, from :data:`ACTIONS`."""
    for action, what in reversed(ACTIONS.items()):
        command = click.option(f"--{action}", is_flag=True, help=what)(command)
    return command


def _modifier_flags(command: Callable[..., Any]) -> Callable[..., Any]:
    """The flags of :data:`MODIFIERS`, each help saying which actions it applies to."""
    for name, (actions, what) in reversed(MODIFIERS.items()):
        command = click.option(name, is_flag=True, help=f"With {_either(actions)}: {what}")(command)
    return command


@click.command("topics")
@log_dir_or_broker_options
@_action_flags
@click.option("--topic", help="The topic (for --list and --describe, all topics when left out).")
@click.option(
    "--partitions",
    type=click.IntRange(min=1),
    default=None,
    help="Partitions of a new topic (default 1 offline, the broker's num.partitions online), or the new total "
    "with --alter.",
)
@click.option(
    "--replication-factor",
    type=click.IntRange(min=1, max=32767),
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
@_modifier_flags
def topics_command(
    log_dirs: tuple[Path, ...],
    bootstrap_server: str | None,
    command_config: Path | None,
    topic: str | None,
    partitions: int | None,
    replication_factor: int | None,
    configs: tuple[str, ...],
    delete_configs: tuple[str, ...],
    **flags: bool,
) -> None:
    """Create, list, describe, alter or delete topics in log dirs (--log-dir) or on a running broker
    (--bootstrap-server), with kafka-topics.sh's conventions (TopicCommand.java: its options, its checks, its
    messages)."""
    chosen = [action for action in ACTIONS if flags[action]]
    if len(chosen) != 1:  # TopicCommandOptions.checkArgs
        raise click.UsageError(
            "Command must include exactly one action: --list, --describe, --create, --alter or --delete"
        )
    online = online_or_offline(log_dirs, bootstrap_server, command_config)
    overrides, broker_files = _split_configs(configs)
    request = TopicsRequest(
        chosen[0], topic, partitions, replication_factor, overrides, delete_configs,
        *(flags[_param(name)] for name in MODIFIERS),
    )  # fmt: skip
    _check_request(request)
    if online:
        if broker_files:
            raise click.UsageError("--config takes k=v with --bootstrap-server (a properties file is for --log-dir)")
        from .online import topics_online

        assert bootstrap_server is not None
        topics_online(bootstrap_server, command_config, request)
    else:
        _topics_offline(log_dirs, broker_files[0] if broker_files else None, request)


def _check_request(request: TopicsRequest) -> None:
    """What TopicCommandOptions.checkArgs refuses before anything is read: an action without the --topic it
    needs, an option given with an action it does not apply to."""
    action = request.action
    if action in ("create", "alter", "delete") and not request.topic:
        raise click.UsageError(f"--topic is required with --{action}")
    given = {
        "--replication-factor": (request.replication_factor is not None, ("create",)),
        "--partitions": (request.partitions is not None, ("create", "alter")),
        **{name: (getattr(request, _param(name)), actions) for name, (actions, _) in MODIFIERS.items()},
        "--delete-config": (bool(request.delete_configs), ("alter",)),
    }
    _check_option_actions(action, given)


def _topics_offline(log_dirs: tuple[Path, ...], broker_file: Path | None, request: TopicsRequest) -> None:
    """The action on log dirs: --list and --describe on the read-only view, the others through a LogManager."""
    action = request.action
    if request.replication_factor not in (None, 1):
        raise click.UsageError(
            f"--replication-factor {request.replication_factor}: a log dir holds one replica (use 1)"
        )
    if action in ("list", "describe"):
        _show(log_dirs, request)
        return
    topic = request.named_topic
    if action == "create":
        _refuse_internal(topic)
        # what would refuse the topic is checked before a missing log dir is created for it
        validate_topic_name(topic)
        LogConfig(request.overrides, broker=BrokerConfig(load_properties(broker_file)) if broker_file else None)
        _create_missing_log_dirs(log_dirs)
    manager = open_manager(log_dirs, broker_file)
    try:
        exists = topic in manager.topics()
        if action == "create":
            if exists and request.if_not_exists:
                return  # TopicCommand: a TopicExistsException with --if-not-exists is not an error
            manager.create_topic(topic, request.partitions or DEFAULT_PARTITIONS, request.overrides)
            click.echo(f"Created topic {topic}.")
        elif not exists:
            if not request.if_exists:
                raise click.ClickException(f"Topic '{topic}' does not exist as expected")  # TopicCommand's message
        elif action == "alter":
            _alter_offline(manager, topic, request)
        else:
            manager.delete_topic(topic)
            click.echo(f"Topic {topic} is marked for deletion.")
    finally:
        manager.shutdown()


def _alter_offline(manager: LogManager, topic: str, request: TopicsRequest) -> None:
    """--alter on log dirs: the partitions grown, then the config overrides set and removed."""
    updates: dict[str, str | None] = {**request.overrides, **{key: None for key in request.delete_configs}}
    if not updates and request.partitions is None:
        raise click.UsageError("--alter needs --partitions N, --config k=v or --delete-config k")
    check_deletions(request.delete_configs, manager.describe_topic(topic).config_overrides)
    if request.partitions is not None:
        manager.create_partitions(topic, request.partitions)
        click.echo(f"Topic {topic} now has {request.partitions} partitions.")
    if updates:
        manager.alter_topic_config(topic, updates)
        click.echo(f"Completed updating config for topic {topic}.")


def _check_option_actions(action: str, options: dict[str, tuple[bool, tuple[str, ...]]]) -> None:
    """TopicCommandOptions.checkInvalidArgs: an option given with an action it does not apply to is a usage
    error in CommandLineUtils.checkInvalidArgs' words (``Option "[partitions]" can't be used with option
    "[list]"``), followed by the actions it applies to."""
    for name, (given, valid) in options.items():
        if given and action not in valid:
            allowed = " or ".join(f"--{a}" for a in valid)
            raise click.UsageError(
                f'Option "[{name[2:]}]" can\'t be used with option "[{action}]" (it applies to {allowed})'
            )


def _refuse_internal(topic: str | None) -> None:
    """Kafka's internal topics are not created by hand offline: the group and transaction coordinators create
    ``__consumer_offsets`` and ``__transaction_state`` on first use (offsets.topic.num.partitions /
    transaction.state.log.num.partitions partitions, compacted), and a broker refuses to create
    ``__cluster_metadata`` (KafkaApis, ControllerApis: "Creation of internal topic __cluster_metadata is
    prohibited.")."""
    if topic == METADATA_TOPIC:
        raise click.ClickException(f"Creation of internal topic {METADATA_TOPIC} is prohibited.")
    if topic in KAFKA_INTERNAL_TOPICS:
        raise click.ClickException(
            f"Topic '{topic}' is internal: its coordinator creates it on first use (with its partition count and "
            "cleanup.policy=compact); it is not created with topics --create"
        )


def _create_missing_log_dirs(log_dirs: tuple[Path, ...]) -> None:
    """A broker creates each missing log.dirs entry when it starts (LogManager.createAndValidateLogDirs), so
    ``topics --create``, the one command that starts a log dir from nothing, does too; it says so on stderr.
    A path that exists but is not a directory is refused. Reading commands never create a dir."""
    for directory in log_dirs:
        if directory.exists():
            continue
        directory.mkdir(parents=True)
        click.echo(f"Created log dir {directory}", err=True)


def _split_configs(configs: tuple[str, ...]) -> tuple[dict[str, str], list[Path]]:
    files = [Path(c) for c in configs if "=" not in c]
    for path in files:
        if not path.is_file():
            raise click.BadParameter(f"{path} is neither k=v nor a properties file", param_hint="--config")
        load_properties(path)
    return parse_key_values(tuple(c for c in configs if "=" in c), "--config"), files


def _show(log_dirs: tuple[Path, ...], request: TopicsRequest) -> None:
    """--list and --describe, on the read-only view of the log dirs: no lock taken, nothing written."""
    view = open_readonly(log_dirs)
    names = request.selected(view.topics())
    if request.topic and not names and not request.if_exists and request.action == "describe":
        raise click.ClickException(f"Topic '{request.topic}' does not exist as expected")  # TopicCommand's message
    if request.action == "list":
        for name in names:
            click.echo(name)
        return
    for name in names:
        if request.topics_with_overrides:
            if view.config_overrides(name):
                _describe(view, name, partitions=False)
            continue
        _describe(view, name)


def _describe(view: ReadOnlyLogDir, name: str, partitions: bool = True) -> None:
    """kafka-topics --describe's lines, with the storage facts a log dir has. A high watermark derived from
    the log end because the replication-offset-checkpoint lags it is followed by why. Without ``partitions``
    only the topic's summary line (--topics-with-overrides)."""
    parts = view.partitions_of(name)
    configs = ",".join(f"{k}={v}" for k, v in sorted(view.config_overrides(name).items()))
    click.echo(
        f"Topic: {name}\tTopicId: {view.topic_id(name)}\tPartitionCount: {len(parts)}\t"
        f"ReplicationFactor: 1\tConfigs: {configs}"
    )
    if not partitions:
        return
    for p in parts:
        note = p.high_watermark_note
        hw = f"{p.high_watermark} ({note})" if note is not None and p.checkpointed_high_watermark is not None else ""
        click.echo(
            f"\tTopic: {name}\tPartition: {p.partition}\tLeader: 0\tReplicas: 0\tIsr: 0\t"
            f"LogDir: {p.log_dir}\tLogStartOffset: {p.log_start_offset}\tLogEndOffset: {p.log_end_offset}\t"
            f"HighWatermark: {hw or p.high_watermark}\tSegments: {p.segment_count}\tSize: {p.size_bytes}"
        )
