"""The coordinators' broker configs, read from server.properties with Kafka's ConfigDef rules.

Each coordinator's config is a frozen dataclass whose fields are declared with ``config_field``: the field's
default is the config's default, and its ConfigDef entry (name, type, validator: ``storage.config.ConfigKey``) is
kept in the field's metadata, so ``from_properties`` parses every config in one loop and a bad value raises
InvalidConfigurationError worded as Kafka's ConfigException (``Invalid value X for configuration Y: <rule>``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, TypeVar

from ..storage.config import ConfigKey, Validator, at_least

__all__ = ["CoordinatorConfig", "at_least", "config_field"]

_KEY = "config_key"
C = TypeVar("C", bound="CoordinatorConfig")


def config_field(name: str, type_: str, default: Any, validator: Validator | None = None) -> Any:
    """A dataclass field for the broker config ``name`` of ConfigDef type ``type_`` ("INT", "BOOLEAN", ...)."""
    return dataclasses.field(default=default, metadata={_KEY: ConfigKey(name, type_, default, validator)})


class CoordinatorConfig:
    """Base of a coordinator's config dataclass: ``from_properties`` reads every field declared with
    ``config_field`` (a field without one keeps its default)."""

    @classmethod
    def from_properties(cls: type[C], props: Mapping[str, Any]) -> C:
        values = {}
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            key: ConfigKey | None = f.metadata.get(_KEY)
            if key is not None:
                values[f.name] = key.parse(props.get(key.name))
        return cls(**values)
