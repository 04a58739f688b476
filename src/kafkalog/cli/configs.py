"""``kafkalog configs``: SCRAM users and client quotas on a running broker, as ``kafka-configs.sh``.

    kafkalog configs --bootstrap-server HOST:PORT --alter --entity-type users --entity-name alice \\
        --add-config 'SCRAM-SHA-256=[iterations=8192,password=alice-secret],SCRAM-SHA-512=[password=alice-secret]'
    kafkalog configs --bootstrap-server HOST:PORT --alter --entity-type users --entity-name alice \\
        --delete-config SCRAM-SHA-512
    kafkalog configs --bootstrap-server HOST:PORT --describe --entity-type users [--entity-name alice]

    kafkalog configs --bootstrap-server HOST:PORT --alter --entity-type clients --entity-name app \\
        --add-config producer_byte_rate=1048576,consumer_byte_rate=2097152
    kafkalog configs --bootstrap-server HOST:PORT --alter --entity-type users --entity-default \\
        --add-config consumer_byte_rate=1048576
    kafkalog configs --bootstrap-server HOST:PORT --describe --entity-type clients

The password is salted and hashed by the client (AlterUserScramCredentials carries SaltedPassword only); the
broker stores StoredKey and ServerKey.
"""

from __future__ import annotations

from pathlib import Path

import click

from .client_config import admin_client
from .common import log_dir_or_broker_options, online_or_offline
from .config_items import ConfigsRequest, config_items
from .resource_configs import resource_configs

_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")


QUOTA_KEYS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage", "controller_mutation_rate")


def parse_quotas(text: str) -> dict[str, float]:
    """The quota settings of an --add-config value (its SCRAM items are left to parse_add_config)."""
    result = {}
    for key, value in config_items(text):
        if key.upper() in _MECHANISMS:
            continue
        if key not in QUOTA_KEYS:
            raise click.BadParameter(f"{key}: not a SCRAM mechanism or a quota ({', '.join(QUOTA_KEYS)})")
        try:
            result[key] = float(value)
        except ValueError:
            raise click.BadParameter(f"{key}={value}: not a number", param_hint="--add-config") from None
    return result


def parse_add_config(text: str) -> dict[str, dict[str, str]]:
    """``'SCRAM-SHA-256=[iterations=8192,password=x],SCRAM-SHA-512=[password=y]'`` -> mechanism -> settings."""
    result: dict[str, dict[str, str]] = {}
    for key, value in config_items(text):
        key = key.upper()
        if key not in _MECHANISMS:
            continue
        if not (value.startswith("[") and value.endswith("]")):
            raise click.BadParameter(f"{key} needs [password=...]", param_hint="--add-config")
        settings = dict(item.split("=", 1) for item in value[1:-1].split(",") if "=" in item)
        if "password" not in settings:
            raise click.BadParameter(f"{key} needs a password", param_hint="--add-config")
        result[key] = settings
    return result


@click.command("configs")
@log_dir_or_broker_options
@click.option("--entity-type", type=click.Choice(["topics", "brokers", "users", "clients"]), required=True)
@click.option("--entity-name", default=None)
@click.option("--entity-default", is_flag=True, help="The default user or client id (quotas).")
@click.option("--alter", is_flag=True)
@click.option("--describe", is_flag=True)
@click.option("--all", "describe_all", is_flag=True, help="With --describe: every config, with defaults and sources.")
@click.option("--add-config", default=None, help="k1=v1,k2=[v1,v2] (lists in square brackets).")
@click.option("--delete-config", default=None, help="k1,k2")
@click.option(
    "--config",
    "config_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Offline: the broker's server.properties (its static configs and topic defaults).",
)
def configs_command(
    log_dirs,
    bootstrap_server,
    command_config,
    entity_type,
    entity_name,
    entity_default,
    alter,
    describe,
    describe_all,
    add_config,
    delete_config,
    config_file,
) -> None:
    """Describe or change configs as kafka-configs.sh: topics and brokers (online, or offline on log dirs), SCRAM
    credentials and client quotas (online)."""
    online = online_or_offline(log_dirs, bootstrap_server, command_config)
    if alter == describe:
        raise click.UsageError("Command must include exactly one action: --alter or --describe")
    if describe_all and not describe:
        raise click.UsageError("--all is only valid with --describe")
    if config_file is not None and online:
        raise click.UsageError("--config (a broker's server.properties) applies to --log-dir only")
    request = ConfigsRequest(entity_type, entity_name, entity_default, alter, describe_all, add_config, delete_config)
    if entity_type in ("topics", "brokers"):
        resource_configs(log_dirs, bootstrap_server, command_config, config_file, request)
        return
    if not online:
        raise click.UsageError(f"--entity-type {entity_type} needs --bootstrap-server (they live on a broker)")
    assert bootstrap_server is not None
    _users_and_clients(bootstrap_server, command_config, request)


def _users_and_clients(bootstrap_server: str, command_config: Path | None, request: ConfigsRequest) -> None:
    """Add, change, delete or describe SCRAM credentials and client quotas on a running broker."""
    from kafka.admin import ScramMechanism, UserScramCredentialDeletion, UserScramCredentialUpsertion

    entity_name, entity_default, alter = request.entity_name, request.entity_default, request.alter
    add_config, delete_config = request.add_config, request.delete_config
    describe = not alter
    if entity_default and entity_name:
        raise click.UsageError("--entity-name and --entity-default cannot be used together")
    quota_type = "user" if request.entity_type == "users" else "client-id"
    admin = admin_client(bootstrap_server, command_config, "kafkalog-configs")
    try:
        if describe and (request.entity_type == "clients" or entity_default):
            _describe_quotas(admin, quota_type, entity_name, entity_default)
            return
        quota_items = parse_quotas(add_config or "")
        quota_removals = [k for k in (delete_config or "").split(",") if k.strip() in QUOTA_KEYS]
        if alter and (request.entity_type == "clients" or entity_default or quota_items or quota_removals):
            _alter_quotas(admin, quota_type, entity_name, add_config or "", delete_config or "")
            add_config = ",".join(f"{k}={v}" for k, v in config_items(add_config or "") if k.upper() in _MECHANISMS)
            delete_config = ",".join(k for k in (delete_config or "").split(",") if k.strip() not in QUOTA_KEYS)
            if not add_config and not delete_config:
                click.echo(f"Completed updating config for {_entity_text(quota_type, entity_name)}.")
                return
        if describe:
            _describe_quotas(admin, quota_type, entity_name, False)
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
            raise click.UsageError("--alter of SCRAM credentials needs --entity-name")
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


def _entity_text(quota_type: str, name: str | None) -> str:
    kind = "user-principal" if quota_type == "user" else "client-id"
    return f"the default {kind}" if name is None else f"{kind} '{name}'"


def _send(admin, request):
    # kafka-python's admin client has no client-quota methods; its request manager (the same path its own
    # create_acls takes) sends the request to a broker. kafka-python is pinned in pyproject.toml.
    return admin._manager.run(admin._manager.send, request)


def _alter_quotas(admin, quota_type: str, name: str | None, add_config: str, delete_config: str) -> None:
    from kafka.protocol.admin import AlterClientQuotasRequest as Req

    values = parse_quotas(add_config)
    removed = [k.strip() for k in delete_config.split(",") if k.strip() in QUOTA_KEYS]
    ops = [Req.EntryData.OpData(key=k, value=v, remove=False) for k, v in values.items()]
    ops += [Req.EntryData.OpData(key=k, value=0.0, remove=True) for k in removed]
    entity = [Req.EntryData.EntityData(entity_type=quota_type, entity_name=name)]
    response = _send(admin, Req(version=1, entries=[Req.EntryData(entity=entity, ops=ops)], validate_only=False))
    for entry in response.entries:
        if entry.error_code:
            raise click.ClickException(f"Error while altering quotas: {entry.error_message} (error {entry.error_code})")


def _describe_quotas(admin, quota_type: str, name: str | None, default: bool, quiet_if_none: bool = False) -> None:
    from kafka.protocol.admin import DescribeClientQuotasRequest as Req

    if default:
        component = Req.ComponentData(entity_type=quota_type, match_type=1, match=None)
    elif name:
        component = Req.ComponentData(entity_type=quota_type, match_type=0, match=name)
    else:
        component = Req.ComponentData(entity_type=quota_type, match_type=2, match=None)
    response = _send(admin, Req(version=1, components=[component], strict=True))
    if response.error_code:
        raise click.ClickException(f"Error while describing quotas: {response.error_message}")
    for entry in response.entries or []:
        entity_name = entry.entity[0].entity_name
        values = ", ".join(f"{v.key}={v.value}" for v in entry.values)
        click.echo(f"Quota configs for {_entity_text(quota_type, entity_name)} are {values}")
