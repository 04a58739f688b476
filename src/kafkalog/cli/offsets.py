"""``kafkalog get-offsets`` (kafka-get-offsets.sh, Kafka's GetOffsetShell) and ``kafkalog delete-records``
(kafka-delete-records.sh, Kafka's DeleteRecordsCommand), on a running broker (``--bootstrap-server``) or on log
dirs (``--log-dir``).

Their options, JSON input and output lines are Kafka's tools' (tools/src/main/java/org/apache/kafka/tools/
GetOffsetShell.java and DeleteRecordsCommand.java). Where Kafka's tool prints a per-partition error and exits 0,
kafkalog prints the same line and exits 1 (a data error), as its other commands do.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from .common import log_dir_or_broker_options, online_or_offline, open_manager, open_readonly
from .topic_names import include_list, listed_topics

# ListOffsetsRequest's special timestamps, and GetOffsetShell's names for them
EARLIEST, LATEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED = -2, -1, -3, -4, -5
_TIME_NAMES = {
    "earliest": EARLIEST,
    "latest": LATEST,
    "max-timestamp": MAX_TIMESTAMP,
    "earliest-local": EARLIEST_LOCAL,
    "latest-tiered": LATEST_TIERED,
}
# GetOffsetShell.TOPIC_PARTITION_PATTERN: TopicPattern(:PartitionPattern)? with NUMBER | NUMBER-(NUMBER)? | -NUMBER
_TOPIC_PARTITION = re.compile(r"([^:,]*)(?::(?:([0-9]*)|(?:([0-9]*)-([0-9]*))))?")
INT32_MAX = 2**31 - 1


def parse_time(text: str) -> int:
    """GetOffsetShell.parseOffsetSpec: a name, one of its numbers, or a timestamp in ms."""
    if text in _TIME_NAMES:
        return _TIME_NAMES[text]
    try:
        return int(text)
    except ValueError:
        raise click.BadParameter(
            f"Malformed time argument {text}. Please use -1 or latest / -2 or earliest / -3 or max-timestamp / "
            "-4 or earliest-local / -5 or latest-tiered, or a specified long format timestamp",
            param_hint="--time",
        ) from None


@dataclass(frozen=True)
class _Rule:
    topics: re.Pattern[str]
    low: int
    high: int  # exclusive, as PartitionRangeFilter
    only: int | None = None

    def allows(self, topic: str, partition: int) -> bool:
        if not self.topics.fullmatch(topic):
            return False
        if self.only is not None:
            return partition == self.only
        return self.low <= partition < self.high


class PartitionFilter:
    """GetOffsetShell's topic-partition filter: --topic-partitions rules, or --topic and --partitions."""

    def __init__(self, topic: str | None, partitions: str | None, topic_partitions: str | None) -> None:
        if topic_partitions is not None and (topic is not None or partitions is not None):
            raise click.UsageError("--topic-partitions cannot be used with --topic or --partitions")
        self.rules: list[_Rule] = []
        self.partition_set: set[int] = set()
        if topic_partitions is not None:
            for spec in topic_partitions.split(","):
                m = _TOPIC_PARTITION.fullmatch(spec)
                if m is None:
                    raise click.BadParameter(f"Invalid rule specification: {spec}", param_hint="--topic-partitions")
                topics = include_list(m.group(1)) if m.group(1) else re.compile(".*")
                if m.group(2):
                    self.rules.append(_Rule(topics, 0, 0, int(m.group(2))))
                else:
                    low = int(m.group(3)) if m.group(3) else 0
                    high = int(m.group(4)) if m.group(4) else INT32_MAX
                    self.rules.append(_Rule(topics, low, high))
            return
        if partitions:
            try:
                self.partition_set = {int(p) for p in partitions.split(",")}
            except ValueError:
                raise click.BadParameter(
                    "--partitions expects a comma separated list of numeric partition ids, but received: " + partitions,
                    param_hint="--partitions",
                ) from None
        self.rules.append(_Rule(include_list(topic) if topic is not None else re.compile(".*"), 0, INT32_MAX))

    def allows(self, topic: str, partition: int) -> bool:
        if self.partition_set and partition not in self.partition_set:
            return False
        return any(rule.allows(topic, partition) for rule in self.rules)


def _print_offsets(found: dict[tuple[str, int], int]) -> None:
    """``topic:partition:offset`` lines, sorted as GetOffsetShell's TreeMap sorts them (by "topic-partition"
    text); an unknown offset (-1) is not printed, as there."""
    for (topic, partition), offset in sorted(found.items(), key=lambda kv: f"{kv[0][0]}-{kv[0][1]}"):
        if offset != -1:
            click.echo(f"{topic}:{partition}:{offset}")


@click.command("get-offsets")
@log_dir_or_broker_options
@click.option("--topic", default=None, help="The topic (a regular expression); all topics when left out.")
@click.option("--partitions", default=None, help="Comma-separated partition ids; all partitions when left out.")
@click.option(
    "--topic-partitions", default=None, help="Patterns topic1:1,topic2:0-3,topic3,topic4:5-,topic5:-3 (instead)."
)
@click.option(
    "--time",
    "time_text",
    default="latest",
    show_default=True,
    help="-1 or latest / -2 or earliest / -3 or max-timestamp / -4 or earliest-local / -5 or latest-tiered, or a "
    "timestamp in ms (the first offset whose timestamp is at or after it).",
)
@click.option("--exclude-internal-topics", is_flag=True, help="Leave out Kafka's internal topics.")
def get_offsets_command(
    log_dirs: tuple[Path, ...],
    bootstrap_server: str | None,
    command_config: Path | None,
    topic: str | None,
    partitions: str | None,
    topic_partitions: str | None,
    time_text: str,
    exclude_internal_topics: bool,
) -> None:
    """Offsets of topic partitions, earliest, latest or by time, as kafka-get-offsets.sh prints them
    (topic:partition:offset)."""
    online = online_or_offline(log_dirs, bootstrap_server, command_config)
    spec = parse_time(time_text)
    where = PartitionFilter(topic, partitions, topic_partitions)
    if online:
        assert bootstrap_server is not None
        found = _offsets_online(bootstrap_server, command_config, where, spec, exclude_internal_topics)
    else:
        found = _offsets_offline(log_dirs, where, spec, exclude_internal_topics)
    _print_offsets(found)


def _offsets_offline(
    log_dirs: tuple[Path, ...], where: PartitionFilter, spec: int, exclude_internal: bool
) -> dict[tuple[str, int], int]:
    """The offsets a single-replica leader of these log dirs would answer ListOffsets with (read-only view)."""
    view = open_readonly(log_dirs)
    chosen = [
        p
        for name in listed_topics(view.topics(), exclude_internal)
        for p in view.partitions_of(name)
        if where.allows(name, p.partition)
    ]
    if not chosen:
        raise click.ClickException("Could not match any topic-partitions with the specified filters")
    found = {}
    for p in chosen:
        if spec == LATEST_TIERED:  # no tiered storage in a log dir: Kafka answers the unknown offset
            offset = -1
        elif spec in (EARLIEST, EARLIEST_LOCAL):
            offset = p.log_start_offset
        elif spec == LATEST:
            offset = p.high_watermark
        else:
            hit = p.offset_for_timestamp(spec)
            offset = -1 if hit is None else int(getattr(hit, "offset", hit))
        found[(p.topic, p.partition)] = offset
    return found


def _offsets_online(
    bootstrap: str, command_config: Path | None, where: PartitionFilter, spec: int, exclude_internal: bool
) -> dict[tuple[str, int], int]:
    """ListOffsets through kafka-python's admin client, for the partitions Metadata lists."""
    from kafka import TopicPartition

    from .client_config import admin_client

    admin = admin_client(bootstrap, command_config, "GetOffsetShell")
    try:
        names = listed_topics(admin.list_topics(), exclude_internal)
        chosen = [
            TopicPartition(info["name"], p["partition_index"])
            for info in (admin.describe_topics(names) if names else [])
            if not info["error_code"]
            for p in info["partitions"]
            if where.allows(info["name"], p["partition_index"])
        ]
        if not chosen:
            raise click.ClickException("Could not match any topic-partitions with the specified filters")
        answers = admin.list_partition_offsets({tp: spec for tp in chosen})
        return {(tp.topic, tp.partition): int(answer.offset) for tp, answer in answers.items()}
    finally:
        admin.close()


# ----- delete-records ---------------------------------------------------------------------------------------


def parse_offset_json(text: str, source: str) -> dict[tuple[str, int], int]:
    """DeleteRecordsCommand.parseOffsetJsonStringWithoutDedup: {"partitions": [{"topic", "partition", "offset"}],
    "version": 1}; a partition given twice is refused with Kafka's message."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        raise click.ClickException(f"The input string is not a valid JSON ({source})") from None
    if not isinstance(data, dict):
        raise click.ClickException(f"The input string is not a valid JSON object ({source})")
    version = data.get("version", 1)
    if version != 1:
        raise click.ClickException(f"Not supported version field value {version}")
    if "partitions" not in data:
        raise click.ClickException("Missing partitions field")
    offsets: dict[tuple[str, int], int] = {}
    duplicates: list[str] = []
    for i, entry in enumerate(data["partitions"] if isinstance(data["partitions"], list) else [None]):
        try:
            topic, partition, offset = entry["topic"], entry["partition"], entry["offset"]
            if not isinstance(topic, str) or type(partition) is not int or type(offset) is not int:
                raise TypeError
        except (KeyError, TypeError):
            raise click.ClickException(
                f'partitions[{i}] in {source} needs "topic" (a string), "partition" and "offset" (integers)'
            ) from None
        if (topic, partition) in offsets:
            duplicates.append(f"{topic}-{partition}")
        offsets[(topic, partition)] = offset
    if duplicates:
        raise click.ClickException(f"Offset json file contains duplicate topic partitions: {','.join(duplicates)}")
    return offsets


@click.command("delete-records")
@log_dir_or_broker_options
@click.option(
    "--offset-json-file",
    required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help='{"partitions": [{"topic": "foo", "partition": 1, "offset": 1}], "version": 1}; offset -1: the high '
    "watermark.",
)
def delete_records_command(
    log_dirs: tuple[Path, ...], bootstrap_server: str | None, command_config: Path | None, offset_json_file: Path
) -> None:
    """Delete the records of partitions below the given offsets (move their log start offsets), as
    kafka-delete-records.sh does."""
    online = online_or_offline(log_dirs, bootstrap_server, command_config)
    offsets = parse_offset_json(offset_json_file.read_text(encoding="utf-8"), str(offset_json_file))
    click.echo("Executing records delete operation")
    if online:
        assert bootstrap_server is not None
        results = _delete_online(bootstrap_server, command_config, offsets)
    else:
        results = _delete_offline(log_dirs, offsets)
    click.echo("Records delete operation completed:")
    failed = 0
    for (topic, partition), outcome in sorted(results.items(), key=lambda kv: f"{kv[0][0]}-{kv[0][1]}"):
        if isinstance(outcome, int):
            click.echo(f"partition: {topic}-{partition}\tlow_watermark: {outcome}")
        else:
            failed += 1
            click.echo(f"partition: {topic}-{partition}\terror: {outcome}")
    if failed:
        raise click.ClickException(f"{failed} of {len(results)} partitions were not changed (see above)")


def _error_text(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def _delete_offline(log_dirs: tuple[Path, ...], offsets: dict[tuple[str, int], int]) -> dict[tuple[str, int], Any]:
    """Through the log manager's replica manager, as the broker's DeleteRecords handler: the log start offset
    moves (up to the high watermark; -1 means the high watermark) and the log-start-offset-checkpoint is written
    at shutdown. Segments wholly below the new start stay until a broker's next retention check deletes them
    (Kafka's "log start offset breach"): this command runs no retention, which would also delete by age."""
    from ..broker.replica_access import delete_records
    from ..errors import KafkaLogError
    from ..manager import TopicPartition

    manager = open_manager(log_dirs)
    results: dict[tuple[str, int], Any] = {}
    try:
        for (topic, partition), offset in offsets.items():
            try:
                results[(topic, partition)] = delete_records(
                    manager.replica_manager, TopicPartition(topic, partition), offset
                )
            except KafkaLogError as e:
                results[(topic, partition)] = _error_text(e)
    finally:
        manager.shutdown()
    return results


def _delete_online(
    bootstrap: str, command_config: Path | None, offsets: dict[tuple[str, int], int]
) -> dict[tuple[str, int], Any]:
    """DeleteRecords through kafka-python's admin client, one partition at a time so that each gets its own
    answer (the client raises for the whole request on any partition's error)."""
    from kafka import TopicPartition

    from .client_config import admin_client

    admin = admin_client(bootstrap, command_config, "kafkalog-delete-records")
    results: dict[tuple[str, int], Any] = {}
    try:
        for (topic, partition), offset in offsets.items():
            tp = TopicPartition(topic, partition)
            try:
                answer = admin.delete_records({tp: offset})
                low = answer[tp]
                results[(topic, partition)] = int(low["low_watermark"] if isinstance(low, dict) else low)
            except Exception as e:
                results[(topic, partition)] = _error_text(e)
    finally:
        admin.close()
    return results
