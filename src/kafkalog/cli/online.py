"""``kafkalog topics``, ``produce`` and ``consume`` against a running broker (``--bootstrap-server``).

The offline paths (``--log-dir``) live in topics.py and data.py; this module is their online twin, with
kafka-python's admin client, producer and consumer (kafka-python is a core dependency, as for
``consumer-groups``, ``acls`` and ``configs``). The output is the offline output's wherever the same information
exists, so that a script can switch between a log dir and a broker: the same ``--describe`` lines (without the
storage facts only a log dir has), the same records on stdout, the same summaries on stderr.
"""

from __future__ import annotations

import base64
import contextlib
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import click

from .client_config import admin_client, admin_kwargs

CLIENT_TIMEOUT_MS = 30000


def _connect_error(bootstrap: str, e: Exception) -> click.ClickException:
    return click.ClickException(f"Cannot connect to {bootstrap}: {type(e).__name__}: {e}")


def _raise_for(code: int, what: str, message: str | None = None) -> None:
    """A Kafka error code in a response as one clear line (Kafka's exception name, then the broker's message)."""
    if not code:
        return
    import kafka.errors as errors

    name = errors.for_code(code).__name__
    raise click.ClickException(f"{what}: {name}" + (f": {message}" if message else "") + f" (error code {code})")


def kafka_uuid(value: Any) -> str:
    """A topic id as Kafka prints it (URL-safe base64 of its 16 bytes, no padding), from a UUID or its text."""
    if value is None:
        return ""
    raw = value.bytes if isinstance(value, uuid.UUID) else uuid.UUID(str(value)).bytes
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


# ----- topics ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TopicsOptions:
    """kafka-topics.sh's modifiers of an action (TopicCommand.java)."""

    if_exists: bool = False
    if_not_exists: bool = False
    topics_with_overrides: bool = False
    exclude_internal: bool = False


def topics_online(
    bootstrap: str,
    command_config: Path | None,
    action: str,
    topic: str | None,
    partitions: int | None,
    replication_factor: int | None,
    overrides: dict[str, str],
    delete_configs: tuple[str, ...],
    options: TopicsOptions | None = None,
) -> None:
    """kafka-topics.sh's --list, --describe, --create, --alter (partitions and config overrides) and --delete,
    through CreateTopics, Metadata, DescribeConfigs, CreatePartitions, IncrementalAlterConfigs and DeleteTopics."""
    from .topics import KAFKA_INTERNAL_TOPICS

    opts = options or TopicsOptions()
    admin = admin_client(bootstrap, command_config, "kafkalog-topics")
    try:
        names = sorted(n for n in admin.list_topics() if not (opts.exclude_internal and n in KAFKA_INTERNAL_TOPICS))
        if topic and action in ("list", "describe", "alter", "delete"):
            names = [n for n in names if n == topic]
            if not names and action != "list":
                if opts.if_exists:
                    return
                raise click.ClickException(f"Topic '{topic}' does not exist as expected")  # TopicCommand
        if action == "list":
            for name in names:
                click.echo(name)
        elif action == "describe":
            _describe_online(admin, names, opts.topics_with_overrides)
        elif action == "create":
            assert topic is not None
            spec: dict[str, Any] = {
                "num_partitions": -1 if partitions is None else partitions,
                "replication_factor": -1 if replication_factor is None else replication_factor,
                "configs": overrides,
            }
            result = admin.create_topics({topic: spec}, timeout_ms=CLIENT_TIMEOUT_MS, raise_errors=False)
            for created in result["topics"]:
                if created["error_code"] == TOPIC_ALREADY_EXISTS and opts.if_not_exists:
                    return
                _raise_for(created["error_code"], f"Cannot create topic {topic}", created.get("error_message"))
            click.echo(f"Created topic {topic}.")
        elif action == "alter":
            assert topic is not None
            _alter_online(admin, topic, partitions, overrides, delete_configs)
        else:
            assert topic is not None
            result = admin.delete_topics([topic], timeout_ms=CLIENT_TIMEOUT_MS, raise_errors=False)
            for deleted in result["topics"]:
                _raise_for(deleted["error_code"], f"Cannot delete topic {topic}", deleted.get("error_message"))
            click.echo(f"Topic {topic} is marked for deletion.")
    finally:
        admin.close()


TOPIC_ALREADY_EXISTS = 36


def topic_overrides(admin: Any, name: str) -> dict[str, str]:
    """A topic's config overrides (DescribeConfigs, the entries whose source is the topic's own config)."""
    from kafka.admin import ConfigResource, ConfigResourceType

    configs = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, name)], config_filter="modified")
    return {k: v["value"] for k, v in configs.get("topic", {}).get(name, {}).items()}


def _alter_online(
    admin: Any, topic: str, partitions: int | None, overrides: dict[str, str], delete_configs: tuple[str, ...]
) -> None:
    from kafka.admin import ConfigResource, ConfigResourceType

    from .topics import _check_deletions

    if partitions is None and not overrides and not delete_configs:
        raise click.UsageError("--alter needs --partitions N, --config k=v or --delete-config k")
    if delete_configs:
        _check_deletions(delete_configs, topic_overrides(admin, topic))
    if partitions is not None:
        response = admin.create_partitions({topic: partitions}, timeout_ms=CLIENT_TIMEOUT_MS, raise_errors=False)
        for result in response.results:
            _raise_for(result.error_code, f"Cannot alter the partitions of {topic}", result.error_message)
        click.echo(f"Topic {topic} now has {partitions} partitions.")
    if overrides or delete_configs:
        changes: dict[str, Any] = dict(overrides)
        changes.update({key: ("DELETE", None) for key in delete_configs})
        resource = ConfigResource(ConfigResourceType.TOPIC, topic, configs=changes)
        outcome = admin.alter_configs([resource], raise_on_unknown=False, incremental=True)
        status = outcome.get("topic", {}).get(topic)
        if status != "OK":
            raise click.ClickException(f"Cannot alter the config of {topic}: {status}")
        click.echo(f"Completed updating config for topic {topic}.")


def _describe_online(admin: Any, names: list[str], with_overrides: bool = False) -> None:
    """kafka-topics --describe's lines from Metadata and DescribeConfigs: the header line (TopicId,
    PartitionCount, ReplicationFactor, Configs = the topic's overrides) and one line per partition
    (Leader, or none while it has none; Replicas, Isr; Offline replicas when there are), the offline lines'
    common prefix. With ``with_overrides`` only the header line of the topics that have overrides."""
    if not names:
        return
    described = admin.describe_topics(names)
    described.sort(key=lambda t: t["name"])
    for info in described:
        name = info["name"]
        if info["error_code"]:
            continue  # a topic deleted between the listing and the description
        overrides = topic_overrides(admin, name)
        if with_overrides and not overrides:
            continue
        text = ",".join(f"{k}={v}" for k, v in sorted(overrides.items()))
        parts = sorted(info["partitions"], key=lambda p: p["partition_index"])
        replication = len(parts[0]["replica_nodes"]) if parts else 0
        click.echo(
            f"Topic: {name}\tTopicId: {kafka_uuid(info.get('topic_id'))}\tPartitionCount: {len(parts)}\t"
            f"ReplicationFactor: {replication}\tConfigs: {text}"
        )
        if with_overrides:
            continue
        for p in parts:
            replicas = ",".join(str(n) for n in p["replica_nodes"])
            isr = ",".join(str(n) for n in p["isr_nodes"])
            leader = p["leader_id"] if p["leader_id"] >= 0 else "none"
            line = f"\tTopic: {name}\tPartition: {p['partition_index']}\tLeader: {leader}\tReplicas: {replicas}"
            line += f"\tIsr: {isr}"
            offline = p.get("offline_replicas") or []
            if offline:  # as kafka-topics.sh, only when some replica's log dir is offline
                line += "\tOffline: " + ",".join(str(n) for n in offline)
            click.echo(line)


# ----- produce --------------------------------------------------------------------------------------------------
class OnlineProducer:
    """Sends records with kafka-python's producer and keeps, per input line, the future of its send, so that the
    summary says exactly which lines the broker acknowledged and which failed (and why)."""

    def __init__(self, bootstrap: str, command_config: Path | None, topic: str, codec: str, acks: int) -> None:
        from kafka import KafkaProducer

        self.topic = topic
        self.acks = acks
        try:
            self.producer = KafkaProducer(
                bootstrap_servers=bootstrap,
                client_id="kafkalog-console-producer",
                acks="all" if acks == -1 else acks,
                # Idempotence needs acks=all, as Kafka's producer: on for the default, off when acks is lowered.
                enable_idempotence=acks == -1,
                compression_type=None if codec == "none" else codec,
                linger_ms=5,
                max_block_ms=CLIENT_TIMEOUT_MS,
                request_timeout_ms=CLIENT_TIMEOUT_MS,
                **admin_kwargs(command_config),
            )
        except click.ClickException:
            raise
        except Exception as e:
            raise _connect_error(bootstrap, e) from None
        self.sent: list[tuple[int, Any]] = []  # (input line, future)
        self.produced = 0
        self.failed: dict[int, str] = {}  # line -> error
        self.where: dict[int, list[int]] = {}  # partition -> [first offset, last offset] acknowledged

    def partition_count(self) -> int:
        partitions = self.producer.partitions_for(self.topic)
        if not partitions:
            raise click.ClickException(f"Topic '{self.topic}' does not exist on the broker")
        return len(partitions)

    def add(self, partition: int, record: dict[str, Any]) -> None:
        future = self.producer.send(
            self.topic,
            value=record["value"],
            key=record["key"],
            headers=list(record["headers"]),
            partition=partition,
            timestamp_ms=record["timestamp"],
        )
        self.sent.append((record["line"], future))

    def settle(self) -> None:
        """Wait for every sent line's acknowledgement (or error), then sort the lines into acknowledged or failed.
        Each record's own future is awaited, not the producer's flush: a batch the broker refuses can leave the
        flush failing without saying which records."""
        self.producer._sender.wakeup()
        deadline = time.monotonic() + CLIENT_TIMEOUT_MS / 1000
        for line, future in self.sent:
            try:
                meta = future.get(timeout=max(0.0, deadline - time.monotonic()))
            except Exception as error:
                self.failed[line] = f"{type(error).__name__}: {error}" if future.is_done else "not acknowledged in time"
                continue
            self.produced += 1
            if meta.offset is not None and meta.offset >= 0:
                span = self.where.setdefault(meta.partition, [meta.offset, meta.offset])
                span[0], span[1] = min(span[0], meta.offset), max(span[1], meta.offset)
        self.sent = []

    def close(self) -> None:
        with contextlib.suppress(Exception):  # what close could still flush was awaited and reported by settle()
            self.producer.close(timeout=5, null_logger=True)


def produce_online(
    bootstrap: str,
    command_config: Path | None,
    topic: str,
    partition: int | None,
    compression_codec: str,
    acks: int,
    input_file: IO[bytes],
    parse: Any,
) -> None:
    """The console producer against a broker. ``parse(line, number)`` turns an input line into the record dict
    of the offline path (key, value, headers, timestamp, partition). Lines are sent as they are read; a bad line
    stops the reading, and what was sent before it is still produced, as kafka-console-producer. The summary on
    stderr counts what the broker acknowledged (with acks=0: what was sent) and lists the lines that failed."""
    from ..record import default_partition

    producer = OnlineProducer(bootstrap, command_config, topic, compression_codec, acks)
    number = 0
    bad: Exception | None = None
    bad_line: int | None = None
    try:
        count = producer.partition_count()
        turn = 0
        for number, raw in enumerate(input_file, start=1):
            try:
                record = parse(raw.rstrip(b"\r\n"), number)
                target = record.pop("partition")
                if target is None:
                    target = partition
                if target is None:
                    if record["key"] is not None:
                        target = default_partition(record["key"], count)
                    else:
                        target, turn = turn % count, turn + 1
                if not 0 <= target < count:
                    raise click.BadParameter(f"line {number}: partition {target} does not exist ({count} partitions)")
            except Exception as e:
                bad, bad_line = e, number
                break
            record["line"] = number
            producer.add(target, record)
        producer.settle()
    finally:
        producer.close()
    if bad is None and not producer.failed:
        click.echo(f"Produced {producer.produced} records to {topic}.", err=True)
        return
    where = ", ".join(f"partition {p} offsets {a}-{b}" for p, (a, b) in sorted(producer.where.items()))
    click.echo(
        f"Produced {producer.produced} records to {topic} before the error" + (f" ({where})" if where else ""),
        err=True,
    )
    not_written = dict(producer.failed)
    if bad_line is not None:
        not_written[bad_line] = str(bad)
    from .data import _ranges

    noun = "line" if len(not_written) == 1 else "lines"
    click.echo(
        f"Not produced: {len(not_written)} of the {number} lines read: {noun} {_ranges(sorted(not_written))}", err=True
    )
    for reason in sorted(set(producer.failed.values())):
        click.echo(f"  {reason}", err=True)
    if bad is not None:
        click.echo(f"Input after line {number} was not read.", err=True)
        raise bad
    raise click.ClickException(
        f"The broker did not acknowledge {len(producer.failed)} of the {number} records sent to {topic}"
    )


# ----- consume --------------------------------------------------------------------------------------------------
def consume_online(
    bootstrap: str,
    command_config: Path | None,
    topic: str,
    partition: int | None,
    group: str | None,
    from_beginning: bool,
    offset: int | None,
    timestamp: int | None,
    max_messages: int | None,
    timeout_ms: int | None,
    isolation_level: str,
    formatter: Any,
) -> None:
    """The console consumer against a broker. Without --group the partitions are assigned (no group, nothing
    committed); with --group the consumer joins it (subscribe, offsets committed, --from-beginning meaning
    auto.offset.reset=earliest), as kafka-console-consumer. It stops after --max-messages records, or once no
    record came for --timeout-ms, else runs until interrupted; the total goes to stderr as offline."""
    from kafka import KafkaConsumer, TopicPartition

    try:
        consumer = KafkaConsumer(
            bootstrap_servers=bootstrap,
            client_id="kafkalog-console-consumer",
            group_id=group,
            enable_auto_commit=group is not None,
            auto_offset_reset="earliest" if from_beginning else "latest",
            isolation_level=isolation_level,
            request_timeout_ms=CLIENT_TIMEOUT_MS + 5000,
            **admin_kwargs(command_config),
        )
    except click.ClickException:
        raise
    except Exception as e:
        raise _connect_error(bootstrap, e) from None
    printed = 0
    try:
        found = consumer.partitions_for_topic(topic)
        if not found:
            raise click.ClickException(f"Topic '{topic}' does not exist on the broker")
        if partition is not None and partition not in found:
            raise click.ClickException(f"Partition {partition} of topic '{topic}' does not exist")
        if group is not None and partition is None:
            consumer.subscribe([topic])
        else:
            tps = [TopicPartition(topic, p) for p in sorted(found) if partition is None or p == partition]
            consumer.assign(tps)
            _position(consumer, tps, from_beginning, offset, timestamp)
        out = sys.stdout.buffer
        last_record = time.monotonic()
        while max_messages is None or printed < max_messages:
            batch = consumer.poll(timeout_ms=200, max_records=None if max_messages is None else max_messages - printed)
            records = [r for rs in batch.values() for r in rs]
            if not records:
                if timeout_ms is not None and (time.monotonic() - last_record) * 1000 >= timeout_ms:
                    break
                continue
            last_record = time.monotonic()
            for record in records:
                if max_messages is not None and printed >= max_messages:
                    break
                out.write(formatter(record.partition, record))
                printed += 1
            out.flush()
        if group is not None:
            consumer.commit()
    except KeyboardInterrupt:
        pass
    finally:
        consumer.close(autocommit=False)
        click.echo(f"Processed a total of {printed} messages", err=True)


def _position(consumer: Any, tps: list[Any], from_beginning: bool, offset: int | None, timestamp: int | None) -> None:
    """Where assigned partitions start: the log start, an offset, the first record at or after a timestamp (the end
    when there is none, as offline), else the end."""
    if from_beginning:
        consumer.seek_to_beginning(*tps)
    elif offset is not None:
        for tp in tps:
            consumer.seek(tp, offset)
    elif timestamp is not None:
        found = consumer.offsets_for_times({tp: timestamp for tp in tps})
        for tp in tps:
            hit = found.get(tp)
            if hit is None:
                consumer.seek_to_end(tp)
            else:
                consumer.seek(tp, hit.offset)
    else:
        consumer.seek_to_end(*tps)
