"""``kafkalog configs --entity-type topics|brokers``: kafka-configs.sh's --describe [--all] and --alter for topic and
broker configs, on a running broker (DescribeConfigs with synonyms, IncrementalAlterConfigs) or offline on log dirs.

The lines are ConfigCommand's (core/src/main/scala/kafka/admin/ConfigCommand.scala, describeResourceConfig):

    All configs for topic t are:
      retention.ms=1000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=1000}

"Dynamic configs for topic t are:" without --all, listing only the entries whose source is the entity's dynamic
one (DYNAMIC_TOPIC_CONFIG, DYNAMIC_BROKER_CONFIG); entries sorted by name. Offline, the entries are the ones the
broker's DescribeConfigs handler answers (broker/handlers/admin.py): each topic config's effective value from the
topic's overrides, the broker's server.properties (``--config``) or Kafka's default, with that source.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from ..storage.config import config_text
from .config_items import ConfigsRequest, check_deletions, config_values, deleted_configs

TOPIC_DYNAMIC = "DYNAMIC_TOPIC_CONFIG"
BROKER_DYNAMIC = "DYNAMIC_BROKER_CONFIG"
BROKER_DEFAULT_DYNAMIC = "DYNAMIC_DEFAULT_BROKER_CONFIG"
STATIC = "STATIC_BROKER_CONFIG"
DEFAULT = "DEFAULT_CONFIG"
SENSITIVE_WORDS = ("password", "secret", "sasl.jaas", "ssl.keystore.key", "ssl.keystore.certificate.chain",
                   "ssl.truststore.certificates")  # fmt: skip


@dataclass
class ConfigEntry:
    """One config as DescribeConfigs reports it (Kafka's ConfigEntry)."""

    name: str
    value: str | None
    source: str
    sensitive: bool = False
    synonyms: list[tuple[str, str, str | None]] = field(default_factory=list)  # (source, name, value)

    def line(self) -> str:
        synonyms = ", ".join(f"{s}:{n}={v}" for s, n, v in self.synonyms)
        return f"  {self.name}={self.value} sensitive={'true' if self.sensitive else 'false'} synonyms={{{synonyms}}}"


def _print(kind: str, entity: str, entries: list[ConfigEntry], describe_all: bool, dynamic: str) -> None:
    if entity == "":
        click.echo(f"Default configs for {kind}s in the cluster are:")
    else:
        click.echo(f"{'All' if describe_all else 'Dynamic'} configs for {kind} {entity} are:")
    for entry in sorted(entries, key=lambda e: e.name):
        if describe_all or entry.source == dynamic:
            click.echo(entry.line())


def resource_configs(
    log_dirs: tuple[Path, ...],
    bootstrap_server: str | None,
    command_config: Path | None,
    config_file: Path | None,
    request: ConfigsRequest,
) -> None:
    """--describe or --alter of topic or broker configs, on the broker of ``bootstrap_server`` or on log dirs."""
    name = request.name
    if request.entity_default and request.entity_type == "topics":
        raise click.UsageError("--entity-default is for brokers, users and clients (a topic has no default entity)")
    if request.entity_default and request.entity_name:
        raise click.UsageError("--entity-name and --entity-default cannot be used together")
    if request.alter:
        if name is None:
            raise click.UsageError("An entity name must be specified with --alter")
        if not request.add_config and not request.delete_config:
            raise click.UsageError("--alter needs --add-config or --delete-config")
    if request.entity_type == "brokers" and name not in (None, "") and not name.isdigit():
        raise click.UsageError(f"The entity name for brokers must be a valid integer broker id, found: {name}")
    if bootstrap_server is not None:
        _online(bootstrap_server, command_config, request)
    else:
        _offline(log_dirs, config_file, request)


# ----- online ---------------------------------------------------------------------------------------------------


def _online(bootstrap: str, command_config: Path | None, request: ConfigsRequest) -> None:
    from kafka.admin import ConfigResource, ConfigResourceType

    from .client_config import admin_client

    kind, name = request.kind, request.name
    rtype = ConfigResourceType.TOPIC if kind == "topic" else ConfigResourceType.BROKER
    dynamic = TOPIC_DYNAMIC if kind == "topic" else BROKER_DYNAMIC
    admin = admin_client(bootstrap, command_config, "kafkalog-configs")

    def entries_of(entity: str) -> list[ConfigEntry]:
        answer = admin.describe_configs([ConfigResource(rtype, entity)], include_synonyms=True, config_filter="all")
        found = answer.get(kind, {}).get(entity)
        if found is None:
            raise click.ClickException(f"The broker did not describe {kind} {entity!r}")
        return [
            ConfigEntry(
                key,
                e.get("value"),
                str(e.get("config_source")),
                bool(e.get("is_sensitive")),
                [(str(s["source"]), s["name"], s.get("value")) for s in e.get("synonyms") or []],
            )
            for key, e in found.items()
        ]

    try:
        if request.alter:
            assert name is not None
            current = {e.name: e.value or "" for e in entries_of(name) if e.source == dynamic}
            deleted = deleted_configs(request.delete_config)
            check_deletions(deleted, current)
            changes: dict[str, Any] = dict(config_values(request.add_config))
            changes.update({key: ("DELETE", None) for key in deleted})
            outcome = admin.alter_configs([ConfigResource(rtype, name, configs=changes)], incremental=True)
            status = outcome.get(kind, {}).get(name)
            if status != "OK":
                raise click.ClickException(f"Cannot alter the config of {kind} {name}: {status}")
            click.echo(f"Completed updating config for {kind} {name}.")
            return
        if name is not None:
            names = [name]
        elif kind == "topic":
            names = sorted(admin.list_topics())
        else:
            names = [str(b["broker_id"]) for b in admin.describe_cluster()["brokers"]] + [""]
        for entity in names:
            entries = entries_of(entity)
            _print(kind, entity, entries, request.describe_all, BROKER_DEFAULT_DYNAMIC if entity == "" else dynamic)
    finally:
        admin.close()


# ----- offline --------------------------------------------------------------------------------------------------


def topic_entries(overrides: dict[str, str], broker_props: dict[str, str]) -> list[ConfigEntry]:
    """A topic's every config with its effective value and source, as the broker's DescribeConfigs answers: the
    topic's override (DYNAMIC_TOPIC_CONFIG), else the broker's server.properties (STATIC_BROKER_CONFIG), else
    Kafka's default (DEFAULT_CONFIG); the synonyms are the override and the broker setting that are present."""
    from ..storage.config import TOPIC_SYNONYMS, BrokerConfig, LogConfig

    effective = LogConfig(overrides, broker=BrokerConfig(broker_props)).to_dict()
    entries = []
    for key, value in sorted(effective.items()):
        broker_key = TOPIC_SYNONYMS.get(key)
        synonyms: list[tuple[str, str, str | None]] = []
        if key in overrides:
            synonyms.append((TOPIC_DYNAMIC, key, config_text(overrides[key])))
        if broker_key is not None and broker_key in broker_props:
            synonyms.append((STATIC, broker_key, broker_props[broker_key]))
        source = TOPIC_DYNAMIC if key in overrides else STATIC if len(synonyms) else DEFAULT
        entries.append(ConfigEntry(key, config_text(value), source, False, synonyms))
    return entries


def broker_entries(broker_props: dict[str, str]) -> list[ConfigEntry]:
    """A broker's static configs (its server.properties), sensitive values hidden, as DescribeConfigs shows them."""
    entries = []
    for key, value in sorted(broker_props.items()):
        sensitive = any(word in key for word in SENSITIVE_WORDS)
        entries.append(ConfigEntry(key, None if sensitive else value, STATIC, sensitive, []))
    return entries


def _offline(log_dirs: tuple[Path, ...], config_file: Path | None, request: ConfigsRequest) -> None:
    from ..storage.properties import load_properties
    from .common import open_manager, open_readonly

    kind, name, alter, describe_all = request.kind, request.name, request.alter, request.describe_all

    props = {k: str(v) for k, v in load_properties(config_file).items()} if config_file else {}
    if kind == "broker":
        if alter:
            raise click.ClickException(
                "A broker's configs offline are its server.properties: edit that file (--alter of broker configs "
                "needs --bootstrap-server)"
            )
        from .log_dirs import _node_id

        node = str(_node_id(log_dirs))
        for entity in [name] if name is not None else [node, ""]:
            if entity not in (node, ""):
                raise click.ClickException(f"Broker {entity} does not own these log dirs (broker {node} does)")
            entries = broker_entries(props) if entity else []
            _print(kind, entity, entries, describe_all, BROKER_DEFAULT_DYNAMIC if entity == "" else BROKER_DYNAMIC)
        return
    if alter:
        assert name is not None
        manager = open_manager(log_dirs, config_file)
        try:
            if name not in manager.topics():
                raise click.ClickException(f"Topic '{name}' does not exist.")
            deleted = deleted_configs(request.delete_config)
            check_deletions(deleted, manager.describe_topic(name).config_overrides)
            updates: dict[str, str | None] = {**config_values(request.add_config), **{key: None for key in deleted}}
            manager.alter_topic_config(name, updates)
        finally:
            manager.shutdown()
        click.echo(f"Completed updating config for topic {name}.")
        return
    view = open_readonly(log_dirs)
    names = [name] if name is not None else view.topics()
    for topic in names:
        if topic not in view.topics():
            raise click.ClickException(f"Topic '{topic}' does not exist.")
        overrides = view.config_overrides(topic)
        _print(kind, topic, topic_entries(overrides, props), describe_all, TOPIC_DYNAMIC)
