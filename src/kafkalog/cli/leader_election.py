"""``kafkalog leader-election``: Kafka's kafka-leader-election.sh (ElectLeaders, API key 43, sent to the controller)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from .client_config import admin_client

_TYPES = {"PREFERRED": 0, "UNCLEAN": 1}
_ELECTION_NOT_NEEDED = 84


def _partitions_from_json(path: Path) -> dict[str, list[int]]:
    """The ``{"partitions": [{"topic": ..., "partition": ...}]}`` file kafka-leader-election.sh reads."""
    try:
        body = json.loads(path.read_text())
        wanted: dict[str, list[int]] = {}
        for entry in body["partitions"]:
            wanted.setdefault(str(entry["topic"]), []).append(int(entry["partition"]))
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise click.ClickException(f"{path}: not a partitions JSON file ({type(e).__name__}: {e})") from None
    return wanted


@click.command("leader-election")
@click.option("--bootstrap-server", required=True, help="A broker of the cluster, host:port.")
@click.option(
    "--admin.config",
    "command_config",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Client properties (security.protocol, sasl.*, ssl.*).",
)
@click.option("--election-type", required=True, type=click.Choice(list(_TYPES), case_sensitive=False))
@click.option("--topic", help="The topic whose leader to elect (with --partition).")
@click.option("--partition", type=int, help="The partition of --topic.")
@click.option("--all-topic-partitions", is_flag=True, help="Every partition of every topic.")
@click.option(
    "--path-to-json-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help='{"partitions": [{"topic": "t", "partition": 0}, ...]}',
)
def leader_election_command(
    bootstrap_server: str,
    command_config: Path | None,
    election_type: str,
    topic: str | None,
    partition: int | None,
    all_topic_partitions: bool,
    path_to_json_file: Path | None,
) -> None:
    """Elect the preferred replica (PREFERRED) or any live replica of an offline partition (UNCLEAN) as leader."""
    chosen = sum([topic is not None, all_topic_partitions, path_to_json_file is not None])
    if chosen != 1:
        raise click.UsageError("One and only one of --topic, --all-topic-partitions and --path-to-json-file is needed")
    if (topic is None) != (partition is None):
        raise click.UsageError("--topic and --partition go together")
    wanted: dict[str, list[int]] | None
    if all_topic_partitions:
        wanted = None
    elif path_to_json_file is not None:
        wanted = _partitions_from_json(path_to_json_file)
    else:
        assert topic is not None and partition is not None
        wanted = {topic: [partition]}
    kind = election_type.upper()
    admin = admin_client(bootstrap_server, command_config, "kafkalog-leader-election")
    try:
        response = admin.elect_leaders(_TYPES[kind], wanted, raise_errors=False)
    except Exception as e:
        raise click.ClickException(f"Leader election failed: {type(e).__name__}: {e}") from None
    finally:
        admin.close()
    done, not_needed, failed = [], [], []
    for result in response.replica_election_results:
        for p in result.partition_result:
            name = f"{result.topic}-{p.partition_id}"
            if p.error_code == 0:
                done.append(name)
            elif p.error_code == _ELECTION_NOT_NEEDED:
                not_needed.append(name)
            else:
                failed.append(f"{name}: {p.error_message or f'error code {p.error_code}'}")
    top = getattr(response, "error_code", 0)
    if top and not failed:
        failed.append(f"error code {top}")
    if done:
        click.echo(f"Successfully completed leader election ({kind}) for partitions {', '.join(sorted(done))}")
    if not_needed:
        click.echo(f"Valid replica already elected for partitions {', '.join(sorted(not_needed))}")
    if failed:
        for line in failed:
            click.echo(f"Error completing leader election ({kind}) for partition: {line}", err=True)
        raise click.ClickException(f"{len(failed)} replica(s) could not be elected")
