"""What several commands share: opening a log dir through the LogManager, and config options."""

from __future__ import annotations

from pathlib import Path

import click

from ..manager import LogManager
from ..storage.config import load_properties

log_dir_option = click.option(
    "--log-dir",
    "log_dirs",
    required=True,
    multiple=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="A Kafka log dir (repeat for several, as log.dirs).",
)
broker_config_option = click.option(
    "--config",
    "config_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A broker server.properties (log.* settings: retention check interval, defaults for topics).",
)


def open_manager(
    log_dirs: tuple[Path, ...], config_file: Path | None = None, topic_configs: dict[str, str] | None = None
) -> LogManager:
    """A started LogManager over existing log dirs (a missing dir is an error, not created)."""
    for directory in log_dirs:
        if not directory.is_dir():
            raise click.UsageError(f"Log dir {directory} does not exist")
    broker = dict(load_properties(config_file)) if config_file else {}
    broker.pop("log.dirs", None)
    broker.pop("log.dir", None)
    # A command never compacts behind the user's back: `kafkalog clean` runs the cleaner explicitly.
    broker["log.cleaner.enable"] = "false"
    manager = LogManager(list(log_dirs), broker)
    manager.startup()
    return manager


def parse_key_values(items: tuple[str, ...], what: str) -> dict[str, str]:
    """``k=v`` pairs into a dict, with a clear error for anything else."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected key=value, got {item!r}", param_hint=what)
        out[key.strip()] = value.strip()
    return out
