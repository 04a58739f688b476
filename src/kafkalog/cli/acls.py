"""``kafkalog acls``: ACLs on a running broker, as ``kafka-acls.sh``.

    kafkalog acls --bootstrap-server H:P --add --allow-principal User:alice --operation Write --topic orders
    kafkalog acls --bootstrap-server H:P --add --deny-principal User:bob --operation Read \\
        --topic orders- --resource-pattern-type prefixed
    kafkalog acls --bootstrap-server H:P --add --allow-principal User:carol --consumer --topic t --group g
    kafkalog acls --bootstrap-server H:P --list [--topic orders] [--principal User:alice]
    kafkalog acls --bootstrap-server H:P --remove --allow-principal User:alice --operation Write --topic orders --force

The broker must run an authorizer (``authorizer.class.name``); the client's principal needs ALTER on the
cluster to change ACLs and DESCRIBE to list them (``--command-config`` gives its security settings).
"""

from __future__ import annotations

from pathlib import Path

import click

from .client_config import admin_client

CLUSTER = "kafka-cluster"
_OPERATIONS = {
    name.replace("_", ""): name
    for name in (
        "ALL",
        "READ",
        "WRITE",
        "CREATE",
        "DELETE",
        "ALTER",
        "DESCRIBE",
        "CLUSTER_ACTION",
        "DESCRIBE_CONFIGS",
        "ALTER_CONFIGS",
        "IDEMPOTENT_WRITE",
    )
}


def _operation(text: str) -> str:
    name = _OPERATIONS.get(text.replace("_", "").replace("-", "").upper())
    if name is None:
        raise click.BadParameter(f"{text}: one of {', '.join(sorted(_OPERATIONS))}", param_hint="--operation")
    return name


def _resources(o) -> list[tuple[str, str]]:
    resources = [("TOPIC", t) for t in o["topic"]] + [("GROUP", g) for g in o["group"]]
    resources += [("TRANSACTIONAL_ID", t) for t in o["transactional_id"]]
    if o["cluster"]:
        resources.append(("CLUSTER", CLUSTER))
    return resources


def _pattern_text(rtype: str, name: str, ptype: str) -> str:
    return f"ResourcePattern(resourceType={rtype}, name={name}, patternType={ptype})"


def _entry_text(principal: str, host: str, operation: str, permission: str) -> str:
    return f"(principal={principal}, host={host}, operation={operation}, permissionType={permission})"


def _bindings(o) -> list[tuple[str, str, str, str, str, str, str]]:
    """(resource type, name, pattern type, principal, host, operation, permission) for --add/--remove."""
    ptype = o["resource_pattern_type"].upper()
    resources = _resources(o)
    if not resources:
        raise click.UsageError("You must specify one of: --topic, --cluster, --group, --transactional-id")
    principals = [(p, "ALLOW") for p in o["allow_principal"]] + [(p, "DENY") for p in o["deny_principal"]]
    if not principals:
        raise click.UsageError("You must specify one of: --allow-principal, --deny-principal")
    per_resource: dict[str, list[str]] = {}
    if o["producer"] or o["consumer"]:
        if o["producer"]:
            per_resource.setdefault("TOPIC", []).extend(["WRITE", "DESCRIBE", "CREATE"])
            per_resource.setdefault("TRANSACTIONAL_ID", []).extend(["WRITE", "DESCRIBE"])
            if o["idempotent"]:
                per_resource.setdefault("CLUSTER", []).append("IDEMPOTENT_WRITE")
        if o["consumer"]:
            if not o["group"]:
                raise click.UsageError("--consumer needs --group")
            per_resource.setdefault("TOPIC", []).extend(["READ", "DESCRIBE"])
            per_resource.setdefault("GROUP", []).append("READ")
        if o["idempotent"] and not any(r == "CLUSTER" for r, _ in resources):
            resources.append(("CLUSTER", CLUSTER))
    operations = [_operation(op) for op in o["operation"]] or ["ALL"]
    result = []
    for rtype, name in resources:
        ops = per_resource.get(rtype, []) if (o["producer"] or o["consumer"]) else operations
        for principal, permission in principals:
            hosts = (o["allow_host"] if permission == "ALLOW" else o["deny_host"]) or ("*",)
            for host in hosts:
                for op in dict.fromkeys(ops):
                    result.append(
                        (rtype, name, "LITERAL" if rtype == "CLUSTER" else ptype, principal, host, op, permission)
                    )
    return result


def _binding(
    filter_: bool,
    rtype: str,
    name: str | None,
    ptype: str,
    principal: str | None,
    host: str | None,
    op: str,
    permission: str,
):
    """kafka-python's ACL (``filter_`` False: one binding to create) or ACLFilter (what to list or delete; None
    and ANY match every value) from the names of Kafka's enums."""
    from kafka.admin import (
        ACL,
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        ResourcePattern,
        ResourcePatternFilter,
        ResourceType,
    )

    acl, pattern = (ACLFilter, ResourcePatternFilter) if filter_ else (ACL, ResourcePattern)
    resource = pattern(ResourceType[rtype], name, ACLResourcePatternType[ptype])
    return acl(principal, host, ACLOperation[op], ACLPermissionType[permission], resource)


def _acl(b):
    """One (resource type, name, pattern type, principal, host, operation, permission) binding to create."""
    return _binding(False, *b)


def _filter(
    rtype: str,
    name: str | None,
    ptype: str,
    principal: str | None = None,
    host: str | None = None,
    op: str = "ANY",
    permission: str = "ANY",
):
    return _binding(True, rtype, name, ptype, principal, host, op, permission)


def _print_listing(acls) -> None:
    by_resource: dict[tuple[str, str, str], list[str]] = {}
    for a in acls:
        rp = a.resource_pattern
        key = (rp.resource_type.name, rp.resource_name, rp.pattern_type.name)
        by_resource.setdefault(key, []).append(
            _entry_text(a.principal, a.host, a.operation.name, a.permission_type.name)
        )
    for (rtype, name, ptype), entries in sorted(by_resource.items()):
        click.echo(f"Current ACLs for resource `{_pattern_text(rtype, name, ptype)}`: ")
        for entry in sorted(entries):
            click.echo(f" \t{entry} ")
        click.echo("")


@click.command("acls")
@click.option("--bootstrap-server", required=True, help="The broker to connect to (host:port).")
@click.option(
    "--command-config",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Client properties (security.protocol, sasl.*, ssl.*), as Kafka's tools take.",
)
@click.option("--add", is_flag=True, help="Add the ACLs described by the other options.")
@click.option("--remove", is_flag=True, help="Remove the ACLs described by the other options.")
@click.option("--list", "list_", is_flag=True, help="List ACLs (of --topic/--group/... or all; --principal filters).")
@click.option("--allow-principal", multiple=True)
@click.option("--deny-principal", multiple=True)
@click.option("--allow-host", multiple=True)
@click.option("--deny-host", multiple=True)
@click.option("--principal", default=None, help="With --list: only this principal's ACLs.")
@click.option(
    "--operation",
    multiple=True,
    help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, "
    "DescribeConfigs, AlterConfigs, IdempotentWrite, All (default All).",
)
@click.option("--topic", multiple=True)
@click.option("--group", multiple=True)
@click.option("--transactional-id", multiple=True)
@click.option("--cluster", is_flag=True)
@click.option(
    "--resource-pattern-type",
    default="literal",
    type=click.Choice(["literal", "prefixed", "any", "match"], case_sensitive=False),
)
@click.option("--producer", is_flag=True, help="The ACLs of a producer: WRITE, DESCRIBE, CREATE on the topics.")
@click.option("--consumer", is_flag=True, help="The ACLs of a consumer: READ, DESCRIBE on topics, READ on the group.")
@click.option("--idempotent", is_flag=True, help="With --producer: IDEMPOTENT_WRITE on the cluster.")
@click.option("--force", is_flag=True, help="Remove without asking.")
def acls_command(**o) -> None:
    """Add, remove or list ACLs on a running broker (kafka-acls.sh)."""
    if sum((o["add"], o["remove"], o["list_"])) != 1:
        raise click.UsageError("Command must include exactly one action: --list, --add, --remove.")
    ptype = o["resource_pattern_type"].upper()
    if o["add"] and ptype not in ("LITERAL", "PREFIXED"):
        raise click.UsageError(f"A '--resource-pattern-type' value of '{ptype}' is not valid when adding acls.")
    admin = admin_client(o["bootstrap_server"], o["command_config"], "kafkalog-acls")
    try:
        if o["list_"]:
            filters = [_filter(r, n, ptype if ptype != "LITERAL" or n else "ANY") for r, n in _resources(o)]
            if not filters:
                filters = [_filter("ANY", None, "ANY")]
            found = []
            for f in filters:
                f.principal = o["principal"]
                acls, error = admin.describe_acls(f)
                if error.errno:
                    raise click.ClickException(f"Error while listing ACLs: {error.__class__.__name__}: {error}")
                found.extend(acls)
            _print_listing(found)
            return
        bindings = _bindings(o)
        if o["add"]:
            by_resource: dict[tuple[str, str, str], list[str]] = {}
            for b in bindings:
                by_resource.setdefault(b[:3], []).append(_entry_text(*b[3:]))
            for key, entries in by_resource.items():
                click.echo(f"Adding ACLs for resource `{_pattern_text(*key)}`: ")
                for entry in entries:
                    click.echo(f" \t{entry} ")
                click.echo("")
            result = admin.create_acls([_acl(b) for b in bindings])
            if result.get("failed"):  # kafka-python gives the error classes of the failed creations
                raise click.ClickException(
                    "Error while executing ACL command: "
                    + "; ".join(sorted({f"{e.__name__}: {getattr(e, 'description', '')}" for e in result["failed"]}))
                )
        else:
            if not o["force"] and not click.confirm("Are you sure you want to remove ACLs?", default=False):
                return
            results = admin.delete_acls([_filter(*b) for b in bindings])
            for _, _, error in results:
                if error.errno:
                    raise click.ClickException(f"Error while removing ACLs: {error.__class__.__name__}: {error}")
    finally:
        admin.close()
