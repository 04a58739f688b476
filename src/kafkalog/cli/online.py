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
from pathlib import Path
from typing import Any

import click

from .client_config import admin_client, admin_kwargs
from .common import Interrupted
from .config_items import check_deletions
from .console import ConsumeRequest, DeferredSignals, Printed, kafka_python_timestamp_type, ranges, records_noun
from .topic_names import TopicsRequest

CLIENT_TIMEOUT_MS = 30000


def _client(factory: Any, what: str, bootstrap: str, command_config: Path | None, config: dict[str, Any]) -> Any:
    """A kafka-python producer or consumer (``factory``) for ``bootstrap``, with the --command-config security
    settings: a config kafka-python refuses is a usage error ("``what`` config: ..."), a broker it cannot reach
    one line saying so."""
    from kafka.errors import KafkaConfigurationError

    try:
        return factory(bootstrap_servers=bootstrap, **config, **admin_kwargs(command_config))
    except click.ClickException:
        raise
    except KafkaConfigurationError as e:
        raise click.UsageError(f"{what} config: {e}") from None
    except Exception as e:
        raise click.ClickException(f"Cannot connect to {bootstrap}: {type(e).__name__}: {e}") from None


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
def topics_online(bootstrap: str, command_config: Path | None, request: TopicsRequest) -> None:
    """kafka-topics.sh's --list, --describe, --create, --alter (partitions and config overrides) and --delete,
    through CreateTopics, Metadata, DescribeConfigs, CreatePartitions, IncrementalAlterConfigs and DeleteTopics."""
    action = request.action
    admin = admin_client(bootstrap, command_config, "kafkalog-topics")
    try:
        names = request.selected(sorted(admin.list_topics()))
        if request.topic and action in ("describe", "alter", "delete") and not names:
            if request.if_exists:
                return
            raise click.ClickException(f"Topic '{request.topic}' does not exist as expected")  # TopicCommand
        if action == "list":
            for name in names:
                click.echo(name)
        elif action == "describe":
            _describe_online(admin, names, request.topics_with_overrides)
        elif action == "create":
            _create_online(admin, request)
        elif action == "alter":
            _alter_online(admin, request.named_topic, request.partitions, request.overrides, request.delete_configs)
        else:
            topic = request.named_topic
            result = admin.delete_topics([topic], timeout_ms=CLIENT_TIMEOUT_MS, raise_errors=False)
            for deleted in result["topics"]:
                _raise_for(deleted["error_code"], f"Cannot delete topic {topic}", deleted.get("error_message"))
            click.echo(f"Topic {topic} is marked for deletion.")
    finally:
        admin.close()


def _create_online(admin: Any, request: TopicsRequest) -> None:
    """CreateTopics: -1 leaves the partition count or the replication factor to the broker's defaults."""
    topic = request.named_topic
    spec: dict[str, Any] = {
        "num_partitions": -1 if request.partitions is None else request.partitions,
        "replication_factor": -1 if request.replication_factor is None else request.replication_factor,
        "configs": request.overrides,
    }
    result = admin.create_topics({topic: spec}, timeout_ms=CLIENT_TIMEOUT_MS, raise_errors=False)
    for created in result["topics"]:
        if created["error_code"] == TOPIC_ALREADY_EXISTS and request.if_not_exists:
            return
        _raise_for(created["error_code"], f"Cannot create topic {topic}", created.get("error_message"))
    click.echo(f"Created topic {topic}.")


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

    if partitions is None and not overrides and not delete_configs:
        raise click.UsageError("--alter needs --partitions N, --config k=v or --delete-config k")
    if delete_configs:
        check_deletions(delete_configs, topic_overrides(admin, topic))
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
def producer_config(settings: Any) -> dict[str, Any]:
    """kafka-python's producer settings for the console producer's: acks, compression, linger.ms, batch.size, then
    every other --producer-property by its Kafka name (``max.request.size`` -> ``max_request_size``); a name
    kafka-python does not know is a usage error."""
    from kafka import KafkaProducer

    config: dict[str, Any] = {
        "acks": "all" if settings.acks == -1 else settings.acks,
        # Idempotence needs acks=all, as Kafka's producer: on for the default, off when acks is lowered.
        "enable_idempotence": settings.acks == -1,
        "compression_type": None if settings.codec == "none" else settings.codec,
        "linger_ms": settings.linger_ms,
        "batch_size": settings.batch_size,
        "max_block_ms": CLIENT_TIMEOUT_MS,
        "request_timeout_ms": CLIENT_TIMEOUT_MS,
        "client_id": "console-producer",
    }
    for key, value in settings.extra.items():
        name = key.replace(".", "_")
        if name not in KafkaProducer.DEFAULT_CONFIG or name in ("key_serializer", "value_serializer"):
            raise click.BadParameter(f"{key} is not a producer config kafkalog's client takes", param_hint=key)
        default = KafkaProducer.DEFAULT_CONFIG[name]
        config[name] = _typed(value, default, key)
    if "delivery.timeout.ms" not in settings.extra:  # as Kafka's producer: raised to linger + request timeout
        floor = config["linger_ms"] + config["request_timeout_ms"]
        config["delivery_timeout_ms"] = max(KafkaProducer.DEFAULT_CONFIG["delivery_timeout_ms"], floor)
    return config


def _typed(value: str, default: Any, key: str) -> Any:
    """A property's text as the type of kafka-python's default for it."""
    try:
        if isinstance(default, bool):
            return value.strip().lower() == "true"
        if isinstance(default, int):
            return int(value)
        if isinstance(default, float):
            return float(value)
    except ValueError:
        raise click.BadParameter(f"{key}={value!r} is not a number", param_hint="--producer-property") from None
    return value


class BrokerSink:
    """The console producer's records to a broker through kafka-python's producer, which batches them itself
    (batch.size, linger.ms). Each send's future is kept with its input line and settled (awaited) when the linger
    has passed, at the end, or at once with --sync, so that a refused record is reported with its line number as
    it happens and the summary counts exactly what the broker acknowledged (with acks=0: what was sent)."""

    def __init__(self, bootstrap: str, command_config: Path | None, topic: str, settings: Any) -> None:
        from kafka import KafkaProducer

        self.topic = topic
        self.settings = settings
        self.producer = _client(KafkaProducer, "producer", bootstrap, command_config, producer_config(settings))
        self.sent: list[tuple[int, Any]] = []  # (input line, future), not settled yet
        self.first_sent_at: float | None = None
        self.produced = 0
        self.failed: dict[int, str] = {}
        self.where: dict[int, list[int]] = {}
        self.stop: BaseException | None = None
        self.null_header_noted = False

    def partition_count(self) -> int:
        partitions = self.producer.partitions_for(self.topic)
        if not partitions:
            raise click.ClickException(f"Topic '{self.topic}' does not exist on the broker")
        return len(partitions)

    def send(self, partition: int, record: dict[str, Any]) -> None:
        headers = record["headers"]
        if headers and any(v is None for _, v in headers):
            if not self.null_header_noted:  # said once: kafka-python's send() takes bytes header values only
                click.echo(
                    f"Note: line {record['line']}: a null header value is sent as empty bytes (kafka-python's "
                    "producer cannot send a null header value; offline --log-dir writes it as null)",
                    err=True,
                )
                self.null_header_noted = True
            headers = [(k, v if v is not None else b"") for k, v in headers]
        future = self.producer.send(
            self.topic,
            value=record["value"],
            key=record["key"],
            headers=list(headers),
            partition=partition,
            timestamp_ms=record["timestamp"],
        )
        self.sent.append((record["line"], future))
        if self.first_sent_at is None:
            self.first_sent_at = time.monotonic()
        if self.settings.sync:
            self.flush()
            if record["line"] in self.failed:
                self.stop = click.ClickException(f"line {record['line']}: {self.failed[record['line']]}")

    def deadline(self) -> float | None:
        if self.first_sent_at is None:
            return None
        return self.first_sent_at + self.settings.linger_ms / 1000 + 0.05

    def flush(self) -> None:
        """Wait for every sent line's acknowledgement (or error). Each record's own future is awaited, not the
        producer's flush: a batch the broker refuses can leave the flush failing without saying which records."""
        if not self.sent:
            self.first_sent_at = None
            return
        deadline = time.monotonic() + CLIENT_TIMEOUT_MS / 1000
        # send what lingers now (a signal, the end of the input); its outcome is read from each record's future
        with contextlib.suppress(Exception):
            self.producer.flush(timeout=CLIENT_TIMEOUT_MS / 1000)
        failed: dict[str, list[int]] = {}
        for line, future in self.sent:
            try:
                meta = future.get(timeout=max(0.0, deadline - time.monotonic()))
            except Exception as error:
                reason = f"{type(error).__name__}: {error}" if future.is_done else "not acknowledged in time"
                self.failed[line] = reason
                failed.setdefault(reason, []).append(line)
                continue
            self.produced += 1
            if meta.offset is not None and meta.offset >= 0:
                span = self.where.setdefault(meta.partition, [meta.offset, meta.offset])
                span[0], span[1] = min(span[0], meta.offset), max(span[1], meta.offset)
        self.sent = []
        self.first_sent_at = None
        for reason, lines in failed.items():
            click.echo(
                f"Error when sending {records_noun(len(lines))} ({'line' if len(lines) == 1 else 'lines'} "
                f"{ranges(lines)}) to {self.topic}: {reason}",
                err=True,
            )

    def idle(self) -> None:
        """Nothing to let go of: an online producer holds no dir lock (the broker owns the log dir)."""

    def close(self) -> None:
        with contextlib.suppress(Exception):  # what close could still flush was awaited and reported by flush()
            self.producer.close(timeout=5, null_logger=True)


# ----- consume --------------------------------------------------------------------------------------------------
def consume_online(
    bootstrap: str, command_config: Path | None, request: ConsumeRequest, consumer_props: dict[str, str]
) -> None:
    """The console consumer against a broker. Without a group (``request.group``) the partitions are assigned (no
    group, nothing committed); with one the consumer joins it (subscribe, offsets committed, --from-beginning
    meaning auto.offset.reset=earliest), as kafka-console-consumer. It stops after --max-messages records, or once
    no record came for --timeout-ms, else runs until SIGINT/SIGTERM, which are taken between two polls: the group's
    offsets are committed, the consumer closed and the total printed, as Kafka's shutdown hook does."""
    from kafka import KafkaConsumer

    config = consumer_config(consumer_props, request)
    consumer = _client(KafkaConsumer, "consumer", bootstrap, command_config, config)
    printed = Printed()
    signals = DeferredSignals()
    try:
        with signals.installed():
            _subscribe(consumer, request)
            printed.last_record = time.monotonic()
            while not request.done(printed.count):
                if signals.received is not None:
                    raise Interrupted(signals.received)
                left = None if request.max_messages is None else request.max_messages - printed.count
                batch = consumer.poll(timeout_ms=200, max_records=left)
                records = [r for rs in batch.values() for r in rs]
                if not records:
                    if request.timed_out(printed.last_record):
                        break
                    continue
                printed.last_record = time.monotonic()
                _write(records, request, printed)
    finally:
        if request.group is not None and config["enable_auto_commit"]:
            with contextlib.suppress(Exception):  # what was printed is committed, as Kafka's close() does
                consumer.commit()
        consumer.close(autocommit=False)
        click.echo(f"Processed a total of {printed.count} messages", err=True)


def consumer_config(consumer_props: dict[str, str], request: ConsumeRequest) -> dict[str, Any]:
    """kafka-python's consumer settings: every --consumer-property by its Kafka name (a name kafka-python does
    not know is a usage error), then the group, the isolation level and where a partition without a committed
    offset starts (auto.offset.reset, earliest with --from-beginning); auto-commit only in a group."""
    from kafka import KafkaConsumer

    config: dict[str, Any] = {
        "client_id": "console-consumer",
        "request_timeout_ms": CLIENT_TIMEOUT_MS + 5000,
    }
    for key, value in consumer_props.items():
        name = key.replace(".", "_")
        if name not in KafkaConsumer.DEFAULT_CONFIG or name in ("key_deserializer", "value_deserializer"):
            raise click.BadParameter(f"{key} is not a consumer config kafkalog's client takes", param_hint=key)
        config[name] = _typed(value, KafkaConsumer.DEFAULT_CONFIG[name], key)
    config.update(
        group_id=request.group,
        isolation_level=request.isolation,
        auto_offset_reset="earliest" if request.from_beginning else config.get("auto_offset_reset", "latest"),
    )
    config.setdefault("enable_auto_commit", request.group is not None)
    return config


def _subscribe(consumer: Any, request: ConsumeRequest) -> None:
    """Joins the group (--group without --partition), else assigns the topic's partitions (or the one asked for)
    and positions them; a topic or partition the broker does not have is one line."""
    from kafka import TopicPartition

    topic, partition = request.topic, request.partition
    found = consumer.partitions_for_topic(topic)
    if not found:
        raise click.ClickException(f"Topic '{topic}' does not exist on the broker")
    if partition is not None and partition not in found:
        raise click.ClickException(f"Partition {partition} of topic '{topic}' does not exist")
    if request.group is not None and partition is None:
        consumer.subscribe([topic])
    else:
        tps = [TopicPartition(topic, p) for p in sorted(found) if partition is None or p == partition]
        consumer.assign(tps)
        _position(consumer, tps, request)


def _write(records: list[Any], request: ConsumeRequest, printed: Printed) -> None:
    """Writes polled records, no more than --max-messages allows; a reader gone away is said on stderr."""
    out = sys.stdout.buffer
    for record in records:
        if request.done(printed.count):
            break
        printed.count += 1
        try:
            out.write(request.render(record.partition, record, kafka_python_timestamp_type(record)))
        except BrokenPipeError:
            click.echo("Unable to write to standard out, closing consumer.", err=True)
            raise
    out.flush()


def _position(consumer: Any, tps: list[Any], request: ConsumeRequest) -> None:
    """Where assigned partitions start: the log start, an offset, the first record at or after a timestamp (the end
    when there is none, as offline), else the end."""
    offset, timestamp = request.offset, request.timestamp
    if request.from_beginning or offset == "earliest":
        consumer.seek_to_beginning(*tps)
    elif isinstance(offset, int):
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
