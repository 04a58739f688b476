"""``kafkalog consumer-groups``: kafka-consumer-groups.sh against a running broker (kafkalog serve or Kafka).

Actions (exactly one): ``--list``; ``--describe`` (committed offsets, log end offsets and lag per partition;
``--members`` for the members, ``--state`` for the group's state); ``--reset-offsets`` with one of
``--to-earliest``, ``--to-latest``, ``--to-offset N``, ``--to-datetime``, ``--shift-by N``, ``--to-current``,
for ``--topic T[:P,...]`` or ``--all-topics``, printed only (``--dry-run``, the default, as Kafka's) or
committed (``--execute``), and only while the group has no active member; ``--delete``.

The output is Kafka's tool's: the same columns, widths and messages. The client is kafka-python's admin client
(a core dependency): FindCoordinator, ListGroups, DescribeGroups (then ConsumerGroupDescribe for KIP-848 groups),
OffsetFetch, ListOffsets, OffsetCommit and DeleteGroups over the wire, so the command works against any Kafka broker.
"""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime

import click

from ..coordinator.group.records import consumer_assignment

INACTIVE_STATES = ("Empty", "Dead")


def _admin(bootstrap: str, timeout_ms: int):
    from kafka.admin import KafkaAdminClient

    try:
        return KafkaAdminClient(
            bootstrap_servers=bootstrap, request_timeout_ms=timeout_ms, client_id="kafkalog-consumer-groups"
        )
    except Exception as e:
        raise click.ClickException(f"Cannot connect to {bootstrap}: {e}") from None


def _table(header: tuple[str, ...], rows: list[tuple], widths: list[int | None]) -> str:
    """Kafka's printf format: each column left-aligned to its width (None: the last, unpadded)."""
    lines = []
    for row in [header, *rows]:
        cells = []
        for value, width in zip(row, widths, strict=True):
            text = "-" if value is None else str(value)
            cells.append(text if width is None else text.ljust(width))
        lines.append(" ".join(cells))
    return "\n" + "\n".join(lines) + "\n"


def _width(minimum: int, values) -> int:
    return max([minimum, *(len(str(v)) for v in values)])


def _describe(admin, groups: list[str]) -> dict[str, dict]:
    """DescribeGroups, then ConsumerGroupDescribe for the groups it calls Dead, as Kafka's admin client: a KIP-848
    (consumer protocol) group is invisible to the classic DescribeGroups (v0-5 answer Dead)."""
    described = admin.describe_groups(groups)
    infos = {g: described.get(g) or {} for g in groups}
    missing = [g for g, info in infos.items() if info.get("group_state") in (None, "Dead")]
    if missing:
        infos.update(_describe_consumer_protocol(admin, missing))
    return infos


def _describe_consumer_protocol(admin, groups: list[str]) -> dict[str, dict]:
    """ConsumerGroupDescribe (API 69) at each group's coordinator; only the groups it finds, in the shape of
    kafka-python's describe_groups (the member's current assignment as ``member_assignment``). A broker without
    the API (Kafka before 3.7, or without KIP-848) leaves them all out."""
    from kafka.errors import KafkaError

    from ..broker.messages import ConsumerGroupDescribeRequest

    async def run() -> dict[str, dict]:
        by_node: dict[int, list[str]] = {}
        for group, node_id in (await admin._find_coordinator_ids(groups)).items():
            by_node.setdefault(node_id, []).append(group)
        out: dict[str, dict] = {}
        for node_id, ids in by_node.items():
            request = ConsumerGroupDescribeRequest(group_ids=ids, include_authorized_operations=False)
            response = await admin._manager.send(request, node_id=node_id)
            for g in response.groups:
                if g.error_code == 0:
                    out[g.group_id] = _consumer_group_info(g)
        return out

    try:
        return admin._manager.run(run)
    except (KafkaError, OSError):
        return {}


def _consumer_group_info(g) -> dict:
    def partitions(assignment) -> dict:
        return {
            "assigned_partitions": [
                {"topic": tp.topic_name, "partitions": list(tp.partitions)} for tp in assignment.topic_partitions
            ]
        }

    return {
        "group_id": g.group_id,
        "group_state": g.group_state,
        "protocol_type": "consumer",
        "protocol_data": g.assignor_name,
        "members": [
            {
                "member_id": m.member_id,
                "group_instance_id": m.instance_id,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "member_assignment": partitions(m.assignment),
            }
            for m in g.members
        ],
    }


def _assigned(member: dict) -> list[tuple[str, int]]:
    assignment = member.get("member_assignment")
    if isinstance(assignment, bytes | bytearray):  # a client library that left it encoded
        with contextlib.suppress(ValueError):
            assignment = {
                "assigned_partitions": [
                    {"topic": t["topic"], "partitions": t["partitions"]}
                    for t in consumer_assignment(bytes(assignment))["assignedPartitions"]
                ]
            }
    if not isinstance(assignment, dict):
        return []
    return [(t["topic"], p) for t in assignment.get("assigned_partitions") or [] for p in t["partitions"]]


def _log_end_offsets(admin, partitions) -> dict:
    from kafka import TopicPartition
    from kafka.admin import OffsetSpec

    if not partitions:
        return {}
    found = admin.list_partition_offsets({TopicPartition(t, p): OffsetSpec.LATEST for t, p in partitions})
    return {(tp.topic, tp.partition): o.offset for tp, o in found.items()}


def _committed(admin, group: str) -> dict[tuple[str, int], int]:
    found = admin.list_group_offsets(group).get(group) or {}
    return {(tp.topic, tp.partition): om.offset for tp, om in found.items() if om.offset is not None and om.offset >= 0}


def _describe_offsets(admin, group: str, info: dict) -> str:
    committed = _committed(admin, group)
    rows_with, owned = [], set()
    for member in info.get("members") or []:
        for tp in sorted(_assigned(member)):
            owned.add(tp)
            rows_with.append((tp, member["member_id"], member.get("client_host"), member.get("client_id")))
    rows_without = [(tp, None, None, None) for tp in sorted(set(committed) - owned)]
    ends = _log_end_offsets(admin, [tp for tp, *_ in rows_with + rows_without])
    rows = []
    for (topic, partition), member_id, host, client in rows_with + rows_without:
        current, end = committed.get((topic, partition)), ends.get((topic, partition))
        lag = end - current if current is not None and end is not None else None
        rows.append((group, topic, partition, current, end, lag, member_id, host, client))
    header = (
        "GROUP",
        "TOPIC",
        "PARTITION",
        "CURRENT-OFFSET",
        "LOG-END-OFFSET",
        "LAG",
        "CONSUMER-ID",
        "HOST",
        "CLIENT-ID",
    )
    widths = [
        _width(15, [r[0] for r in rows]),
        _width(15, [r[1] for r in rows]),
        10,
        15,
        15,
        15,
        _width(15, [r[6] or "-" for r in rows]),
        _width(15, [r[7] or "-" for r in rows]),
        None,
    ]
    return _table(header, rows, widths)


def _describe_members(group: str, info: dict, verbose: bool) -> str:
    rows = []
    for m in info.get("members") or []:
        assigned = _assigned(m)
        row: tuple = (group, m["member_id"], m.get("client_host"), m.get("client_id"), len(assigned))
        if verbose:
            by_topic: dict[str, list[int]] = {}
            for topic, partition in sorted(assigned):
                by_topic.setdefault(topic, []).append(partition)
            text = ",".join(f"{t}({','.join(map(str, ps))})" for t, ps in by_topic.items()) or "-"
            row = (*row, text)
        rows.append(row)
    header: tuple[str, ...] = ("GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS")
    widths: list[int | None] = [
        _width(15, [r[0] for r in rows]),
        _width(15, [r[1] for r in rows]),
        _width(15, [r[2] for r in rows]),
        _width(15, [r[3] for r in rows]),
        None,
    ]
    if verbose:
        header, widths = (*header, "ASSIGNMENT"), [*widths[:-1], 15, None]
    return _table(header, rows, widths)


def _describe_state(admin, group: str, info: dict) -> str:
    coordinator = "-"
    with contextlib.suppress(Exception):
        node_id = admin._manager.run(admin._find_coordinator_ids, [group])[group]  # FindCoordinator is internal
        broker = admin._client.cluster.broker_metadata(node_id)
        coordinator = f"{broker.host}:{broker.port} ({node_id})"
    row = (group, coordinator, info.get("protocol_data") or "", info.get("group_state"), len(info.get("members") or []))
    header = ("GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS")
    widths: list[int | None] = [_width(15, [group]), _width(25, [coordinator]), 20, 15, None]
    return _table(header, [row], widths)


# ----- reset ------------------------------------------------------------------------------------------------------
def _parse_topics(admin, specs: tuple[str, ...], all_topics: bool, group: str) -> list[tuple[str, int]]:
    if all_topics:
        return sorted(_committed(admin, group))
    partitions: list[tuple[str, int]] = []
    for spec in specs:
        topic, _, listed = spec.partition(":")
        if listed:
            try:
                partitions += [(topic, int(p)) for p in listed.split(",") if p.strip()]
            except ValueError:
                raise click.UsageError(f"Invalid partitions in --topic {spec!r}: expected TOPIC:0,1,...") from None
            continue
        metadata = admin.describe_topics([topic])
        found = [t for t in metadata if t.get("name") == topic and not t.get("error_code")]
        if not found:
            raise click.ClickException(f"Topic '{topic}' does not exist")
        partitions += sorted((topic, p["partition_index"]) for p in found[0]["partitions"])
    return partitions


def _parse_datetime(text: str) -> int:
    """Kafka's --to-datetime: 'YYYY-MM-DDTHH:mm:SS.sss', with an optional zone (Z, +hh:mm); local time without."""
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise click.UsageError(
            f"Error parsing timestamp {text!r}: expected yyyy-MM-ddTHH:mm:SS.sss (optionally with a zone)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.astimezone()
    return int(moment.astimezone(UTC).timestamp() * 1000)


def _targets(admin, group: str, partitions, scenario: str, value) -> dict[tuple[str, int], int]:
    from kafka import TopicPartition
    from kafka.admin import OffsetSpec

    def offsets(spec) -> dict[tuple[str, int], int]:
        found = admin.list_partition_offsets({TopicPartition(t, p): spec for t, p in partitions})
        return {(tp.topic, tp.partition): o.offset for tp, o in found.items()}

    earliest, latest = offsets(OffsetSpec.EARLIEST), offsets(OffsetSpec.LATEST)

    def clamp(tp, offset: int) -> int:
        return max(earliest[tp], min(latest[tp], offset))

    if scenario == "to_earliest":
        return dict(earliest)
    if scenario == "to_latest":
        return dict(latest)
    if scenario == "to_offset":
        return {tp: clamp(tp, value) for tp in partitions}
    if scenario == "to_datetime":
        found = offsets(_parse_datetime(value))
        return {tp: latest[tp] if found.get(tp, -1) < 0 else found[tp] for tp in partitions}
    committed = _committed(admin, group)
    missing = [tp for tp in partitions if tp not in committed]
    if missing:
        names = ", ".join(f"{t}-{p}" for t, p in missing)
        raise click.ClickException(f"Group '{group}' has no committed offset for {names}: nothing to shift from")
    shift = value if scenario == "shift_by" else 0
    return {tp: clamp(tp, committed[tp] + shift) for tp in partitions}


def _reset(admin, group: str, info: dict, partitions, scenario: str, value, execute: bool) -> str:
    from kafka import TopicPartition
    from kafka.structs import OffsetAndMetadata

    state = info.get("group_state") or "Dead"
    if state not in INACTIVE_STATES:
        raise click.ClickException(
            f"Assignments can only be reset if the group '{group}' is inactive, but the current state is {state}."
        )
    targets = _targets(admin, group, partitions, scenario, value)
    if execute:
        admin.alter_group_offsets(
            group, {TopicPartition(t, p): OffsetAndMetadata(o, "", -1) for (t, p), o in targets.items()}
        )
    rows = [(group, t, p, o) for (t, p), o in sorted(targets.items())]
    # Kafka's format: "%-30s %-30s %-10s %-15s"
    lines = [
        f"{g!s:<30} {t!s:<30} {p!s:<10} {o!s:<15}"
        for g, t, p, o in [("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"), *rows]
    ]
    return "\n" + "\n".join(lines) + "\n"


# ----- the command ------------------------------------------------------------------------------------------------
@click.command("consumer-groups")
@click.option("--bootstrap-server", required=True, help="The broker to connect to (host:port).")
@click.option("--list", "list_", is_flag=True, help="List all consumer groups.")
@click.option("--describe", is_flag=True, help="Describe the groups: offsets and lag (default), --members or --state.")
@click.option("--delete", is_flag=True, help="Delete the groups (they must have no active member).")
@click.option("--reset-offsets", is_flag=True, help="Reset the groups' committed offsets (dry run unless --execute).")
@click.option("--group", "groups", multiple=True, help="A consumer group (repeatable).")
@click.option("--all-groups", is_flag=True, help="Every group (with --describe, --delete, --reset-offsets).")
@click.option("--members", is_flag=True, help="With --describe: the members.")
@click.option("--state", is_flag=True, help="With --describe: the group's state (with --list: each group's state).")
@click.option("--offsets", is_flag=True, help="With --describe: offsets and lag (the default).")
@click.option("--verbose", is_flag=True, help="With --describe --members: each member's assignment.")
@click.option("--topic", "topics", multiple=True, help="With --reset-offsets: TOPIC or TOPIC:P1,P2 (repeatable).")
@click.option("--all-topics", is_flag=True, help="With --reset-offsets: every topic the group has offsets for.")
@click.option("--to-earliest", is_flag=True)
@click.option("--to-latest", is_flag=True)
@click.option("--to-current", is_flag=True)
@click.option("--to-offset", type=int)
@click.option("--to-datetime", help="YYYY-MM-DDTHH:mm:SS.sss, with an optional zone (local time without).")
@click.option("--shift-by", type=int)
@click.option("--dry-run", is_flag=True, help="Print the new offsets only (the default).")
@click.option("--execute", is_flag=True, help="Commit the new offsets.")
@click.option("--timeout", "timeout_ms", default=5000, show_default=True, help="Request timeout in milliseconds.")
def consumer_groups_command(**o) -> None:
    """List, describe, delete consumer groups and reset their offsets (kafka-consumer-groups.sh)."""
    actions = [a for a in ("list_", "describe", "delete", "reset_offsets") if o[a]]
    if len(actions) != 1:
        raise click.UsageError("Command must include exactly one action: --list, --describe, --delete, --reset-offsets")
    action = actions[0]
    if action != "list_" and not o["groups"] and not o["all_groups"]:
        raise click.UsageError("Option --group or --all-groups is required with --describe, --delete, --reset-offsets")
    admin = _admin(o["bootstrap_server"], o["timeout_ms"])
    try:
        if action == "list_":
            listed = sorted(admin.list_groups(), key=lambda g: g["group_id"])
            if o["state"]:
                rows = [(g["group_id"], g.get("group_state")) for g in listed]
                click.echo(_table(("GROUP", "STATE"), rows, [_width(15, [r[0] for r in rows]), None]).strip("\n"))
            else:
                for g in listed:
                    click.echo(g["group_id"])
            return
        groups = list(o["groups"]) or sorted(g["group_id"] for g in admin.list_groups())
        if action == "delete":
            return _delete(admin, groups)
        infos = _describe(admin, groups)
        if action == "describe":
            for group in groups:
                info = infos[group]
                if info.get("group_state") in (None, "Dead"):
                    click.echo(f"Error: Consumer group '{group}' does not exist.", err=True)
                    continue
                if o["state"]:
                    click.echo(_describe_state(admin, group, info), nl=False)
                    continue
                if not info.get("members"):
                    click.echo(f"\nConsumer group '{group}' has no active members.")
                if o["members"]:
                    click.echo(_describe_members(group, info, o["verbose"]), nl=False)
                else:
                    click.echo(_describe_offsets(admin, group, info), nl=False)
            return
        scenarios = [
            (name, o[name])
            for name in ("to_earliest", "to_latest", "to_current", "to_offset", "to_datetime", "shift_by")
            if o[name] not in (None, False)
        ]
        if len(scenarios) != 1:
            raise click.UsageError(
                "Option --reset-offsets needs exactly one of --to-earliest, --to-latest, --to-current, --to-offset, "
                "--to-datetime, --shift-by"
            )
        if bool(o["topics"]) == bool(o["all_topics"]):
            raise click.UsageError("Option --reset-offsets needs one of --topic or --all-topics")
        if o["dry_run"] and o["execute"]:
            raise click.UsageError("Options --dry-run and --execute are mutually exclusive")
        if not o["dry_run"] and not o["execute"]:
            click.echo(
                "WARN: No action will be performed as the --execute option is missing. In a future major release, "
                "the default behavior of this command will be to prompt the user before executing the reset rather "
                "than doing a dry run. You should add the --dry-run option explicitly if you are scripting this "
                "command and want to keep the current default behavior without prompting.",
                err=True,
            )
        scenario, value = scenarios[0]
        for group in groups:
            partitions = _parse_topics(admin, o["topics"], o["all_topics"], group)
            click.echo(_reset(admin, group, infos[group], partitions, scenario, value, o["execute"]), nl=False)
    finally:
        admin.close()


def _delete(admin, groups: list[str]) -> None:
    results = admin.delete_groups(groups)
    failed = {g: r for g, r in results.items() if r != "OK"}
    if not failed:
        names = ", ".join(f"'{g}'" for g in groups)
        click.echo(f"Deletion of requested consumer groups ({names}) was successful.")
        return
    click.echo("Error: Deletion of some consumer groups failed:", err=True)
    for group, error in failed.items():
        click.echo(f"* Group '{group}' could not be deleted due to: {error}", err=True)
    ok = [g for g in groups if g not in failed]
    if ok:
        click.echo("\nThese consumer groups were deleted successfully: " + ", ".join(f"'{g}'" for g in ok))
    raise SystemExit(1)
