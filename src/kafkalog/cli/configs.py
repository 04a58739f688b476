"""``kafkalog configs``: SCRAM users on a running broker, as ``kafka-configs.sh --entity-type users``.

    kafkalog configs --bootstrap-server HOST:PORT --alter --entity-type users --entity-name alice \\
        --add-config 'SCRAM-SHA-256=[iterations=8192,password=alice-secret],SCRAM-SHA-512=[password=alice-secret]'
    kafkalog configs --bootstrap-server HOST:PORT --alter --entity-type users --entity-name alice \\
        --delete-config SCRAM-SHA-512
    kafkalog configs --bootstrap-server HOST:PORT --describe --entity-type users [--entity-name alice]

The password is salted and hashed by the client (AlterUserScramCredentials carries SaltedPassword only); the
broker stores StoredKey and ServerKey.
"""

from __future__ import annotations

import re
from pathlib import Path

import click

from .client_config import admin_client

_ITEM = re.compile(r"\s*([A-Za-z0-9._-]+)\s*(?:=\s*(\[[^\]]*\]|[^,]*))?\s*(?:,|$)")
_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")


def parse_add_config(text: str) -> dict[str, dict[str, str]]:
    """``'SCRAM-SHA-256=[iterations=8192,password=x],SCRAM-SHA-512=[password=y]'`` -> mechanism -> settings."""
    result: dict[str, dict[str, str]] = {}
    pos = 0
    while pos < len(text):
        m = _ITEM.match(text, pos)
        if not m or m.end() == pos:
            raise click.BadParameter(f"cannot parse {text[pos:]!r}", param_hint="--add-config")
        key, value = m.group(1).upper(), (m.group(2) or "").strip()
        pos = m.end()
        if key not in _MECHANISMS:
            raise click.BadParameter(
                f"{key}: only SCRAM credentials ({', '.join(_MECHANISMS)}) are configured for users here",
                param_hint="--add-config",
            )
        if not (value.startswith("[") and value.endswith("]")):
            raise click.BadParameter(f"{key} needs [password=...]", param_hint="--add-config")
        settings = dict(item.split("=", 1) for item in value[1:-1].split(",") if "=" in item)
        if "password" not in settings:
            raise click.BadParameter(f"{key} needs a password", param_hint="--add-config")
        result[key] = settings
    return result


@click.command("configs")
@click.option("--bootstrap-server", required=True, help="The broker to connect to (host:port).")
@click.option(
    "--command-config",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Client properties (security.protocol, sasl.*, ssl.*), as Kafka's tools take.",
)
@click.option("--entity-type", type=click.Choice(["users"]), required=True)
@click.option("--entity-name", default=None)
@click.option("--alter", is_flag=True)
@click.option("--describe", is_flag=True)
@click.option("--add-config", default=None)
@click.option("--delete-config", default=None)
def configs_command(
    bootstrap_server, command_config, entity_type, entity_name, alter, describe, add_config, delete_config
) -> None:
    """Add, change, delete or describe users' SCRAM credentials on a running broker."""
    from kafka.admin import ScramMechanism, UserScramCredentialDeletion, UserScramCredentialUpsertion

    if alter == describe:
        raise click.UsageError("Command must include exactly one action: --alter or --describe")
    admin = admin_client(bootstrap_server, command_config, "kafkalog-configs")
    try:
        if describe:
            described = admin.describe_user_scram_credentials([entity_name] if entity_name else None)
            for user, info in sorted(described.items()):
                if info.get("error"):
                    raise click.ClickException(f"{user}: {info['error']}")
                credentials = ",".join(
                    f"{ScramMechanism(c['mechanism']).name.replace('_', '-')}=iterations={c['iterations']}"
                    for c in info["credential_infos"]
                )
                click.echo(f"SCRAM credential configs for user-principal '{user}' are {credentials}")
            return
        if not entity_name:
            raise click.UsageError("--alter needs --entity-name")
        if not add_config and not delete_config:
            raise click.UsageError("--alter needs --add-config or --delete-config")
        alterations: list = []
        for mechanism, settings in parse_add_config(add_config or "").items():
            iterations = int(settings["iterations"]) if "iterations" in settings else 4096
            alterations.append(
                UserScramCredentialUpsertion(
                    entity_name, ScramMechanism[mechanism.replace("-", "_")], settings["password"], iterations
                )
            )
        for name in (delete_config or "").split(","):
            name = name.strip().upper()
            if not name:
                continue
            if name not in _MECHANISMS:
                raise click.BadParameter(f"{name} is not a SCRAM mechanism", param_hint="--delete-config")
            alterations.append(UserScramCredentialDeletion(entity_name, ScramMechanism[name.replace("-", "_")]))
        results = admin.alter_user_scram_credentials(alterations)
        failed = {user: error for user, error in results.items() if error}
        if failed:
            raise click.ClickException("; ".join(f"{u}: {e}" for u, e in failed.items()))
        click.echo(f"Completed updating config for user {entity_name}.")
    finally:
        admin.close()
