"""The text of kafka-configs.sh's --add-config and --delete-config, and its check of a deletion, shared by
``configs`` (SCRAM users, client quotas, topic and broker configs) and ``topics --alter`` (offline and online)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

import click

_ITEM = re.compile(r"\s*([A-Za-z0-9._-]+)\s*(?:=\s*(\[[^\]]*\]|[^,]*))?\s*(?:,|$)")


def config_items(text: str) -> list[tuple[str, str]]:
    """``a=1,B=[x=1,y=2]`` -> [(a, 1), (B, [x=1,y=2])]: the items in order, a bracketed value kept whole."""
    items = []
    pos = 0
    while pos < len(text):
        m = _ITEM.match(text, pos)
        if not m or m.end() == pos:
            raise click.BadParameter(f"cannot parse {text[pos:]!r}", param_hint="--add-config")
        items.append((m.group(1), (m.group(2) or "").strip()))
        pos = m.end()
    return items


def config_values(text: str | None) -> dict[str, str]:
    """ConfigCommand.parseConfigsToBeAdded: ``k1=v1,k2=[v1,v2]`` (a list value in square brackets)."""
    out = {}
    for key, value in config_items(text or ""):
        if value.startswith("[") and value.endswith("]"):
            value = value[1:-1]
        out[key] = value
    return out


def deleted_configs(text: str | None) -> list[str]:
    """The names of a --delete-config value ``k1,k2``, blanks dropped."""
    return [k.strip() for k in (text or "").split(",") if k.strip()]


def check_deletions(deleted: Iterable[str], current: dict[str, str]) -> None:
    """ConfigCommand.alterResourceConfig: deleting a config the entity does not set fails the whole command
    (nothing is changed) with ``Invalid config(s): a,b``."""
    invalid = [key for key in deleted if key not in current]
    if invalid:
        raise click.ClickException(f"Invalid config(s): {','.join(invalid)}")


@dataclass(frozen=True)
class ConfigsRequest:
    """What one ``kafkalog configs`` asks for: kafka-configs.sh's entity options and its action (--alter, else
    --describe), with the --add-config / --delete-config texts as given."""

    entity_type: str  # topics, brokers, users or clients
    entity_name: str | None
    entity_default: bool
    alter: bool
    describe_all: bool
    add_config: str | None
    delete_config: str | None

    @property
    def kind(self) -> str:
        """The entity type in ConfigCommand's singular: topic, broker, user, client."""
        return self.entity_type[:-1]

    @property
    def name(self) -> str | None:
        """The entity's name, "" for the default entity (--entity-default), None for every entity."""
        return "" if self.entity_default else self.entity_name
