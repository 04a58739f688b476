"""``kafkalog transactions``: kafka-transactions.sh (Kafka's tools/.../TransactionsCommand.java) against a broker.

    kafkalog transactions --bootstrap-server H:P list
    kafkalog transactions --bootstrap-server H:P describe --transactional-id ID
    kafkalog transactions --bootstrap-server H:P describe-producers --topic T --partition P [--broker-id B]
    kafkalog transactions --bootstrap-server H:P find-hanging (--broker-id B | --topic T [--partition P])
                                                              [--max-transaction-timeout MINUTES]
    kafkalog transactions --bootstrap-server H:P abort --topic T --partition P
                                                       (--start-offset O | --producer-id I --producer-epoch E
                                                        --coordinator-epoch C)

``--bootstrap-server`` and ``--command-config`` go before the command, as Kafka's tool takes them, or after it.
The output is Kafka's tool's: its columns, each value padded to the column's width and followed by a tab, and
its error lines (``<what failed>: <reason>. Enable debug logging for additional detail.``, exit status 1).
The client is kafka-python's admin client: ListTransactions (API 66), DescribeTransactions (65) at each
transactional id's coordinator, DescribeProducers (61) at the partition leader or ``--broker-id``, Metadata,
and WriteTxnMarkers (27) with an ABORT marker to the partition leader, so the command works against any Kafka
broker too.

``find-hanging`` is Kafka's: the partitions to search (the topic's, or every partition with a replica on the
broker); their producers with an open transaction whose last record is older than the maximum transaction
timeout; of those, each producer id's transactional id (ListTransactions filtered by producer id) and that
transaction's partitions (DescribeTransactions). A transaction is hanging when its producer has no
transactional id any more, the id is unknown to its coordinator, or the coordinator's transaction does not
include the partition: no coordinator will ever write its marker, and it holds back the last stable offset.
``abort`` then writes the marker (``abort --start-offset`` looks the producer up with DescribeProducers).
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

import click

from ..inspect.jvm_order import java_hash_set_order
from .client_config import admin_client

MAX_BATCH_SIZE = 500  # Kafka's FindHangingTransactionsCommand batches topics and partitions by this many


class TransactionsError(click.ClickException):
    """Kafka's printErrorAndExit: the message alone on stderr, exit status 1."""

    exit_code = 1

    def show(self, file: Any = None) -> None:
        click.echo(self.message, err=True)


def _fail(message: str, cause: BaseException | None = None) -> NoReturn:
    if cause is not None:
        message = f"{message}: {_reason(cause)}. Enable debug logging for additional detail."
    raise TransactionsError(message)


def _reason(e: BaseException) -> str:
    """The exception's message as Kafka's getMessage would give it (the error's name when it has none)."""
    text = str(e).strip()
    return text or type(e).__name__


# ----- the table ------------------------------------------------------------------------------------------------
def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Kafka's prettyPrintTable: each value left-aligned to its column's width, each followed by a tab."""
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
    lines = ["".join(value.ljust(widths[i]) + "\t" for i, value in enumerate(row)) for row in [headers, *rows]]
    return "\n".join(lines) + "\n"


def _tp(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def _optional(value: int) -> str:
    """An OptionalLong column: ``None`` when the broker said -1 (absent)."""
    return "None" if value < 0 else str(value)


# ----- the admin client -----------------------------------------------------------------------------------------
class Admin:
    """The calls the commands make, over one kafka-python admin client."""

    def __init__(self, bootstrap: str, command_config: Path | None) -> None:
        self.client = admin_client(bootstrap, command_config, "kafkalog-transactions")

    def close(self) -> None:
        self.client.close()

    def describe_producers(self, partitions: list[tuple[str, int]], broker_id: int | None) -> dict:
        from kafka import TopicPartition

        result = self.client.describe_producers([TopicPartition(t, p) for t, p in partitions], broker_id=broker_id)
        return {(tp.topic, tp.partition): state.active_producers for tp, state in result.items()}

    def list_transactions(self, producer_ids: list[int] | None = None) -> dict[int, list]:
        return dict(self.client.list_transactions(producer_id_filters=producer_ids))

    def describe_transactions(self, transactional_ids: list[str]) -> dict[str, Any]:
        """transactional id -> (coordinator id, the response's TransactionState) or an exception for that id.

        Sent by hand (not kafka-python's describe_transactions) to keep the response's partition order, which
        the Java client's HashSet order follows, and to keep one id's error from hiding the others'."""
        from kafka.errors import for_code
        from kafka.protocol.admin.transactions import DescribeTransactionsRequest
        from kafka.protocol.metadata import CoordinatorType

        client = self.client

        async def run() -> dict[str, Any]:
            coordinators = await client._find_coordinator_ids(transactional_ids, key_type=CoordinatorType.TRANSACTION)
            by_node: dict[int, list[str]] = {}
            for txn_id, node in coordinators.items():
                by_node.setdefault(node, []).append(txn_id)
            out: dict[str, Any] = {}
            for node, ids in by_node.items():
                response = await client._manager.send(DescribeTransactionsRequest(transactional_ids=ids), node_id=node)
                for state in response.transaction_states:
                    error = for_code(state.error_code)
                    out[state.transactional_id] = (node, state) if state.error_code == 0 else error()
            return out

        return dict(client._manager.run(run))

    def abort(self, topic: str, partition: int, producer_id: int, producer_epoch: int, coordinator_epoch: int) -> None:
        from kafka import TopicPartition
        from kafka.admin._transactions import AbortTransactionSpec

        spec = AbortTransactionSpec(TopicPartition(topic, partition), producer_id, producer_epoch, coordinator_epoch)
        self.client.abort_transaction(spec)

    def topics(self) -> list[str]:
        return list(self.client.list_topics())

    def describe_topics(self, topics: list[str]) -> list[dict]:
        described = self.client.describe_topics(topics)
        for topic in described:
            if topic.get("error_code"):
                from kafka.errors import for_code

                raise for_code(topic["error_code"])(f"topic {topic.get('name')}")
        return list(described)


def _spec_str(topic: str, partition: int, pid: int, epoch: int, coordinator_epoch: int) -> str:
    """Kafka's AbortTransactionSpec.toString."""
    return (
        f"AbortTransactionSpec(topicPartition={_tp(topic, partition)}, producerId={pid}, "
        f"producerEpoch={epoch}, coordinatorEpoch={coordinator_epoch})"
    )


# ----- the commands ---------------------------------------------------------------------------------------------
def list_command(admin: Admin) -> str:
    try:
        by_broker = admin.list_transactions()
    except Exception as e:
        _fail("Failed to list transactions", e)
    rows = [
        [listing.transactional_id, str(broker_id), str(listing.producer_id), _state_name(listing.state)]
        for broker_id, listings in by_broker.items()
        for listing in listings
    ]
    return table(["TransactionalId", "Coordinator", "ProducerId", "TransactionState"], rows)


def _state_name(state: Any) -> str:
    return str(getattr(state, "value", state))


def describe_command(admin: Admin, transactional_id: str, now_ms: int) -> str:
    failed = f"Failed to describe transaction state of transactional-id `{transactional_id}`"
    try:
        found = admin.describe_transactions([transactional_id]).get(transactional_id)
    except Exception as e:
        _fail(failed, e)
    if found is None:
        _fail(failed, RuntimeError(f"the coordinator did not answer for {transactional_id}"))
    if isinstance(found, BaseException):
        _fail(failed, found)
    coordinator, state = found
    partitions = java_hash_set_order((t.topic, p) for t in state.topics for p in t.partitions)
    start = state.transaction_start_time_ms
    row = [
        str(coordinator),
        transactional_id,
        str(state.producer_id),
        str(state.producer_epoch),
        state.transaction_state,
        str(state.transaction_timeout_ms),
        str(start) if start >= 0 else "None",
        str(now_ms - start) if start >= 0 else "None",
        ",".join(_tp(t, p) for t, p in partitions),
    ]
    headers = [
        "CoordinatorId",
        "TransactionalId",
        "ProducerId",
        "ProducerEpoch",
        "TransactionState",
        "TransactionTimeoutMs",
        "CurrentTransactionStartTimeMs",
        "TransactionDurationMs",
        "TopicPartitions",
    ]
    return table(headers, [row])


def describe_producers_command(admin: Admin, topic: str, partition: int, broker_id: int | None) -> str:
    try:
        producers = admin.describe_producers([(topic, partition)], broker_id)[(topic, partition)]
    except Exception as e:
        where = f"broker {broker_id}" if broker_id is not None else "leader"
        _fail(f"Failed to describe producers for partition {_tp(topic, partition)} on {where}", e)
    rows = [
        [
            str(p.producer_id),
            str(p.producer_epoch),
            str(p.coordinator_epoch if p.coordinator_epoch >= 0 else -1),
            str(p.last_sequence),
            str(p.last_timestamp),
            _optional(p.current_transaction_start_offset),
        ]
        for p in producers
    ]
    headers = [
        "ProducerId",
        "ProducerEpoch",
        "LatestCoordinatorEpoch",
        "LastSequence",
        "LastTimestamp",
        "CurrentTransactionStartOffset",
    ]
    return table(headers, rows)


def abort_command(
    admin: Admin,
    topic: str,
    partition: int,
    start_offset: int | None,
    producer_id: int | None,
    producer_epoch: int | None,
    coordinator_epoch: int | None,
) -> None:
    check_abort_arguments(start_offset, producer_id, producer_epoch, coordinator_epoch)
    if start_offset is None:
        assert producer_id is not None and producer_epoch is not None and coordinator_epoch is not None
        # A transaction started by a new producer id that hung before its first marker has coordinator epoch -1
        # in DescribeProducers; 0 is <= any coordinator epoch, so the marker is accepted (Kafka's tool does this).
        spec = (producer_id, producer_epoch, max(coordinator_epoch, 0))
    else:
        try:
            producers = admin.describe_producers([(topic, partition)], None)[(topic, partition)]
        except Exception as e:
            _fail(f"Failed to validate producer state for partition {_tp(topic, partition)}", e)
        found = next((p for p in producers if p.current_transaction_start_offset == start_offset), None)
        if found is None or start_offset < 0:
            _fail(
                f"Could not find any open transactions starting at offset {start_offset} on partition "
                f"{_tp(topic, partition)}"
            )
        spec = (found.producer_id, found.producer_epoch, max(found.coordinator_epoch, 0))
    try:
        admin.abort(topic, partition, *spec)
    except Exception as e:
        _fail(f"Failed to abort transaction {_spec_str(topic, partition, *spec)}", e)


def _batches(items: list, size: int = MAX_BATCH_SIZE) -> list[list]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def check_find_hanging_scope(broker_id: int | None, topic: str | None, partition: int | None) -> None:
    if topic is None and broker_id is None:
        _fail("The `find-hanging` command requires either --topic or --broker-id to limit the scope of the search")
    if partition is not None and topic is None:
        _fail("The --partition argument requires --topic to be provided")


def check_abort_arguments(
    start_offset: int | None, producer_id: int | None, producer_epoch: int | None, coordinator_epoch: int | None
) -> None:
    if start_offset is None and producer_id is None:
        _fail(
            "The transaction to abort must be identified either with --start-offset (for brokers on 3.0 or above) "
            "or with --producer-id, --producer-epoch, and --coordinator-epoch (for older brokers)"
        )
    if start_offset is None:
        if producer_epoch is None:
            _fail("Missing required argument --producer-epoch")
        if coordinator_epoch is None:
            _fail("Missing required argument --coordinator-epoch")


def find_hanging_command(
    admin: Admin,
    broker_id: int | None,
    topic: str | None,
    partition: int | None,
    max_timeout_minutes: int,
    now: Callable[[], int],
) -> str:
    check_find_hanging_scope(broker_id, topic, partition)
    max_timeout_ms = max_timeout_minutes * 60_000
    partitions = _partitions_to_search(admin, topic, partition, broker_id)
    candidates: list[tuple[tuple[str, int], Any]] = []
    for batch in _batches(partitions):
        try:
            described = admin.describe_producers(batch, broker_id)
        except Exception as e:
            _fail(f"Failed to describe producers for {len(batch)} partitions on broker {_java_optional(broker_id)}", e)
        current = now()
        for tp in batch:
            for producer in described.get(tp, []):
                if (
                    producer.current_transaction_start_offset >= 0
                    and current - producer.last_timestamp > max_timeout_ms
                ):
                    candidates.append((tp, producer))
    hanging: list[tuple[tuple[str, int], Any]] = []
    if candidates:
        by_producer: dict[int, list[tuple[tuple[str, int], Any]]] = {}
        for tp, producer in candidates:
            by_producer.setdefault(producer.producer_id, []).append((tp, producer))
        transactional_ids = _lookup_transactional_ids(admin, list(by_producer))
        descriptions = _describe_for_hanging(admin, sorted(set(transactional_ids.values())))
        for producer_id, open_txns in by_producer.items():
            txn_id = transactional_ids.get(producer_id)
            description = descriptions.get(txn_id) if txn_id is not None else None
            if description is None:  # no transactional id, or unknown to its coordinator: nobody will end it
                hanging.extend(open_txns)
                continue
            included = {(t.topic, p) for t in description.topics for p in t.partitions}
            hanging.extend((tp, p) for tp, p in open_txns if tp not in included)
    current = now()
    rows = [
        [
            tp[0],
            str(tp[1]),
            str(p.producer_id),
            str(p.producer_epoch),
            str(p.coordinator_epoch if p.coordinator_epoch >= 0 else -1),
            str(p.current_transaction_start_offset),
            str(p.last_timestamp),
            str(_to_minutes(current - p.last_timestamp)),
        ]
        for tp, p in hanging
    ]
    headers = [
        "Topic",
        "Partition",
        "ProducerId",
        "ProducerEpoch",
        "CoordinatorEpoch",
        "StartOffset",
        "LastTimestamp",
        "Duration(min)",
    ]
    return table(headers, rows)


def _to_minutes(ms: int) -> int:
    """Java's TimeUnit.MILLISECONDS.toMinutes: truncated toward zero (a clock behind the record's is negative)."""
    return ms // 60_000 if ms >= 0 else -((-ms) // 60_000)


def _java_optional(value: int | None) -> str:
    """Java's Optional.toString, as Kafka's message prints the broker id."""
    return "Optional.empty" if value is None else f"Optional[{value}]"


def _partitions_to_search(
    admin: Admin, topic: str | None, partition: int | None, broker_id: int | None
) -> list[tuple[str, int]]:
    if topic is not None and partition is not None:
        return [(topic, partition)]
    if topic is not None:
        topics = [topic]
    else:
        try:
            topics = admin.topics()
        except Exception as e:
            _fail("Failed to list topics", e)
    found: list[tuple[str, int]] = []
    for batch in _batches(topics):
        try:
            described = admin.describe_topics(batch)
        except Exception as e:
            _fail(f"Failed to describe {len(batch)} topics", e)
        for t in described:
            for p in t["partitions"]:
                if broker_id is None or broker_id in p["replica_nodes"]:
                    found.append((t["name"], p["partition_index"]))
    return found


def _lookup_transactional_ids(admin: Admin, producer_ids: list[int]) -> dict[int, str]:
    try:
        by_broker = admin.list_transactions(producer_ids)
    except Exception as e:
        _fail(f"Failed to list transactions for {len(producer_ids)} producers", e)
    wanted = set(producer_ids)
    return {
        listing.producer_id: listing.transactional_id
        for listings in by_broker.values()
        for listing in listings
        if listing.producer_id in wanted
    }


def _describe_for_hanging(admin: Admin, transactional_ids: list[str]) -> dict[str, Any]:
    """transactional id -> its TransactionState, or None when its coordinator does not know it."""
    from kafka.errors import TransactionalIdNotFoundError

    if not transactional_ids:
        return {}
    try:
        found = admin.describe_transactions(transactional_ids)
    except Exception as e:
        _fail(f"Failed to describe {len(transactional_ids)} transactions", e)
    out: dict[str, Any] = {}
    for txn_id in transactional_ids:
        result = found.get(txn_id)
        if isinstance(result, TransactionalIdNotFoundError):
            out[txn_id] = None
        elif isinstance(result, BaseException) or result is None:
            _fail(f"Failed to describe {len(transactional_ids)} transactions", result or RuntimeError(txn_id))
        else:
            out[txn_id] = result[1]
    return out


# ----- click ------------------------------------------------------------------------------------------------------
def _connection_options(f: Callable[..., Any]) -> Callable[..., Any]:
    f = click.option(
        "--command-config",
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        default=None,
        metavar="FILE",
        help="Property file containing configs to be passed to the admin client.",
    )(f)
    return click.option(
        "--bootstrap-server",
        metavar="host:port",
        default=None,
        help="Hostname and port for the broker to connect to (multiple comma-separated entries can be given).",
    )(f)


@click.group("transactions")
@_connection_options
@click.pass_context
def transactions_command(ctx: click.Context, bootstrap_server: str | None, command_config: Path | None) -> None:
    """Analyse the transactional state of producers; find and abort hanging transactions (kafka-transactions.sh)."""
    ctx.ensure_object(dict)
    ctx.obj["txn_connection"] = (bootstrap_server, command_config)


def _admin(ctx: click.Context, bootstrap_server: str | None, command_config: Path | None) -> Admin:
    group_bootstrap, group_config = ctx.obj.get("txn_connection", (None, None))
    bootstrap = bootstrap_server or group_bootstrap
    if not bootstrap:
        raise click.UsageError("argument --bootstrap-server is required")
    return Admin(bootstrap, command_config or group_config)


def _run(
    ctx: click.Context, bootstrap_server: str | None, command_config: Path | None, body: Callable[[Admin], Any]
) -> None:
    admin = _admin(ctx, bootstrap_server, command_config)
    try:
        out = body(admin)
    finally:
        admin.close()
    if out:
        sys.stdout.write(out)
        sys.stdout.flush()


def _now_ms() -> int:
    return int(time.time() * 1000)


def _subcommand(name: str) -> Callable[[Callable[..., Callable[[Admin], Any]]], click.Command]:
    """Registers a transactions sub-command. The decorated function takes the command's own options and returns
    what to do with the admin client; --bootstrap-server and --command-config (also taken before the command, on
    the group) are added here, and the client is opened, handed over, closed, and its output printed by
    :func:`_run`."""

    def register(body_of: Callable[..., Callable[[Admin], Any]]) -> click.Command:
        @functools.wraps(body_of)
        @click.pass_context
        def run(ctx: click.Context, bootstrap_server: str | None, command_config: Path | None, **options: Any) -> None:
            _run(ctx, bootstrap_server, command_config, body_of(**options))

        return transactions_command.command(name)(_connection_options(run))

    return register


@_subcommand("list")
def list_cmd() -> Callable[[Admin], Any]:
    """List transactions."""
    return list_command


@_subcommand("describe")
@click.option("--transactional-id", required=True, help="Transactional id.")
def describe_cmd(transactional_id: str) -> Callable[[Admin], Any]:
    """Describe the state of an active transactional-id."""
    return lambda admin: describe_command(admin, transactional_id, _now_ms())


@_subcommand("describe-producers")
@click.option(
    "--broker-id",
    type=int,
    default=None,
    help="Optional broker id to describe the producer state on a replica.",
)
@click.option("--topic", required=True, help="Topic name.")
@click.option("--partition", type=int, required=True, help="Partition number.")
def describe_producers_cmd(broker_id: int | None, topic: str, partition: int) -> Callable[[Admin], Any]:
    """Describe the states of active producers for a topic partition."""
    return lambda admin: describe_producers_command(admin, topic, partition, broker_id)


@_subcommand("abort")
@click.option("--topic", required=True, help="Topic name.")
@click.option("--partition", type=int, required=True, help="Partition number.")
@click.option("--start-offset", type=int, default=None, help="Start offset of the transaction to abort (brokers 3.0+).")
@click.option("--producer-id", type=int, default=None, help="Producer id (older brokers).")
@click.option(
    "--producer-epoch", type=click.IntRange(-32768, 32767), default=None, help="Producer epoch (older brokers)."
)
@click.option("--coordinator-epoch", type=int, default=None, help="Coordinator epoch (older brokers).")
def abort_cmd(**marker: Any) -> Callable[[Admin], Any]:
    """Abort a hanging transaction (requires administrative privileges)."""
    # the options are abort_command's parameters; checked here too, so that a usage error needs no broker
    check_abort_arguments(
        marker["start_offset"], marker["producer_id"], marker["producer_epoch"], marker["coordinator_epoch"]
    )
    return lambda admin: abort_command(admin, **marker)


@_subcommand("find-hanging")
@click.option("--broker-id", type=int, default=None, help="Broker id to search for hanging transactions.")
@click.option(
    "--max-transaction-timeout",
    type=int,
    default=15,
    show_default=True,
    help="Maximum transaction timeout in minutes to limit the scope of the search.",
)
@click.option("--topic", default=None, help="Topic name to limit search to.")
@click.option("--partition", type=int, default=None, help="Partition number.")
def find_hanging_cmd(
    broker_id: int | None, max_transaction_timeout: int, topic: str | None, partition: int | None
) -> Callable[[Admin], Any]:
    """Find hanging transactions."""
    check_find_hanging_scope(broker_id, topic, partition)
    return lambda admin: find_hanging_command(admin, broker_id, topic, partition, max_transaction_timeout, _now_ms)
