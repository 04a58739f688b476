"""Registers every kafkalog sub-command on the ``main`` group (one module per command family)."""

from __future__ import annotations

import importlib

import click

# (module, attribute holding the click command or group)
COMMANDS = [
    ("dump", "dump_command"),
    ("verify", "verify_command"),
    ("verify", "recover_command"),
    ("topics", "topics_command"),
    ("data", "produce_command"),
    ("data", "consume_command"),
    ("explain", "explain_command"),
    ("clean", "clean_command"),
    ("spark_jobs", "spark_command"),
    ("consumer_groups", "consumer_groups_command"),
    ("configs", "configs_command"),
    ("offsets", "get_offsets_command"),
    ("offsets", "delete_records_command"),
    ("log_dirs", "log_dirs_command"),
    ("acls", "acls_command"),
    ("leader_election", "leader_election_command"),
    ("transactions", "transactions_command"),
]


def register(group: click.Group) -> None:
    for module_name, attribute in COMMANDS:
        module = importlib.import_module(f"{__package__}.{module_name}")
        group.add_command(getattr(module, attribute))
