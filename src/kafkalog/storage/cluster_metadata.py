"""A KRaft broker's ``__cluster_metadata-0`` directory: its snapshots and log, replayed into an image.

A Kafka 3.x/4.x broker (KRaft) keeps the topics, their ids and partitions, and the dynamic configs outside the
partition directories, in the metadata log ``__cluster_metadata-0``. Its state at a point is the latest snapshot
``<end offset>-<epoch>.checkpoint`` (record batches framed by a SnapshotHeader and a SnapshotFooter control
record) followed by the log's records from the snapshot's end offset on (Kafka's MetadataLoader: the snapshot
replaces the image, then each committed batch is a delta). ``load_cluster_metadata(dir)`` does that replay,
read-only, and returns a ``ClusterMetadataImage``.

What the image keeps is what a log dir needs: topics (name, id, partitions with replicas, ISR, leader and
epochs), configs by resource (topic configs are resource type 2), feature levels, registered brokers and the
next producer id. Records inside a metadata transaction (BeginTransactionRecord .. End/AbortTransactionRecord)
are applied at its end, or dropped if it was aborted.

A limit of reading files only: KRaft's high watermark is not on disk, so the log is replayed to its last valid
batch; a tail that the quorum had not committed when the broker stopped would be included.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import CorruptRecordError, KafkaLogError, MetadataParseError
from ..layout import KRAFT_SNAPSHOT_SUFFIX, filename_prefix
from ..record.kraft import MetadataRecord, decode_control_value, decode_metadata_record
from ..record.types import ControlRecordType, Record, control_record_type
from .file_records import FileRecords

log = logging.getLogger(__name__)

__all__ = [
    "BROKER_RESOURCE",
    "TOPIC_RESOURCE",
    "ClusterMetadataImage",
    "PartitionImage",
    "SnapshotId",
    "TopicImage",
    "list_snapshots",
    "load_cluster_metadata",
    "read_metadata_log",
    "read_snapshot",
]

TOPIC_RESOURCE = 2  # ConfigResource.Type.TOPIC
BROKER_RESOURCE = 4  # ConfigResource.Type.BROKER
_SNAPSHOT_NAME = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")  # Snapshots.parse
_SEGMENT_NAME = re.compile(r"^(\d{20})\.log$")


@dataclass(frozen=True, order=True)
class SnapshotId:
    """Kafka's OffsetAndEpoch of a snapshot: the offset the snapshot ends at (exclusive) and its epoch."""

    end_offset: int
    epoch: int

    @property
    def file_name(self) -> str:
        return f"{filename_prefix(self.end_offset)}-{self.epoch:010d}{KRAFT_SNAPSHOT_SUFFIX}"


@dataclass
class PartitionImage:
    """One partition as the metadata describes it (PartitionRegistration)."""

    partition: int
    replicas: list[int]
    isr: list[int]
    leader: int
    leader_epoch: int
    partition_epoch: int


@dataclass
class TopicImage:
    name: str
    topic_id: str
    partitions: dict[int, PartitionImage] = field(default_factory=dict)


@dataclass
class ClusterMetadataImage:
    """The metadata a broker had applied: what the snapshot and the log after it say, in order."""

    topics: dict[str, TopicImage] = field(default_factory=dict)  # by name
    configs: dict[tuple[int, str], dict[str, str]] = field(default_factory=dict)  # (resource type, name) -> configs
    features: dict[str, int] = field(default_factory=dict)
    brokers: dict[int, MetadataRecord] = field(default_factory=dict)  # broker id -> its RegisterBrokerRecord
    next_producer_id: int | None = None
    snapshot: SnapshotId | None = None
    last_offset: int = -1  # the offset of the last record applied (-1: none)
    records_applied: int = 0

    def topic(self, name: str) -> TopicImage | None:
        return self.topics.get(name)

    def topic_by_id(self, topic_id: str) -> TopicImage | None:
        return next((t for t in self.topics.values() if t.topic_id == topic_id), None)

    def topic_configs(self, name: str) -> dict[str, str]:
        """The dynamic configs the metadata holds for a topic (its overrides), a copy."""
        return dict(self.configs.get((TOPIC_RESOURCE, name), {}))

    # ----- replay (MetadataDelta.replay) -----------------------------------------------------------------
    def apply(self, record: MetadataRecord, offset: int) -> None:
        """Apply one committed metadata record (outside a transaction)."""
        handler = _HANDLERS.get(record.name)
        if handler is not None:
            handler(self, record)
        self.last_offset = offset
        self.records_applied += 1


def _topic_record(image: ClusterMetadataImage, r: MetadataRecord) -> None:
    image.topics[r["name"]] = TopicImage(r["name"], r["topicId"])


def _partition_record(image: ClusterMetadataImage, r: MetadataRecord) -> None:
    topic = image.topic_by_id(r["topicId"])
    if topic is None:
        log.warning("PartitionRecord for unknown topic id %s (partition %d)", r["topicId"], r["partitionId"])
        return
    topic.partitions[r["partitionId"]] = PartitionImage(
        r["partitionId"], list(r["replicas"]), list(r["isr"]), r["leader"], r["leaderEpoch"], r["partitionEpoch"]
    )


def _partition_change_record(image: ClusterMetadataImage, r: MetadataRecord) -> None:
    topic = image.topic_by_id(r["topicId"])
    part = topic.partitions.get(r["partitionId"]) if topic is not None else None
    if part is None:
        log.warning("PartitionChangeRecord for unknown partition %s-%d", r["topicId"], r["partitionId"])
        return
    if r["isr"] is not None:
        part.isr = list(r["isr"])
    if r["replicas"] is not None:
        part.replicas = list(r["replicas"])
    if r["leader"] != -2:  # -2: the leader did not change
        part.leader = r["leader"]
        part.leader_epoch += 1  # PartitionRegistration.merge: a new leader means a new leader epoch
    part.partition_epoch += 1


def _remove_topic_record(image: ClusterMetadataImage, r: MetadataRecord) -> None:
    topic = image.topic_by_id(r["topicId"])
    if topic is None:
        log.warning("RemoveTopicRecord for unknown topic id %s", r["topicId"])
        return
    del image.topics[topic.name]
    image.configs.pop((TOPIC_RESOURCE, topic.name), None)  # MetadataDelta drops the topic's configs with it


def _config_record(image: ClusterMetadataImage, r: MetadataRecord) -> None:
    key = (r["resourceType"], r["resourceName"])
    if r["value"] is None:
        configs = image.configs.get(key)
        if configs is not None:
            configs.pop(r["name"], None)
            if not configs:
                del image.configs[key]
    else:
        image.configs.setdefault(key, {})[r["name"]] = r["value"]


def _feature_level_record(image: ClusterMetadataImage, r: MetadataRecord) -> None:
    if r["featureLevel"] == 0:
        image.features.pop(r["name"], None)
    else:
        image.features[r["name"]] = r["featureLevel"]


def _register_broker_record(image: ClusterMetadataImage, r: MetadataRecord) -> None:
    image.brokers[r["brokerId"]] = r


def _unregister_broker_record(image: ClusterMetadataImage, r: MetadataRecord) -> None:
    image.brokers.pop(r["brokerId"], None)


def _producer_ids_record(image: ClusterMetadataImage, r: MetadataRecord) -> None:
    image.next_producer_id = r["nextProducerId"]


_HANDLERS = {
    "TopicRecord": _topic_record,
    "PartitionRecord": _partition_record,
    "PartitionChangeRecord": _partition_change_record,
    "RemoveTopicRecord": _remove_topic_record,
    "ConfigRecord": _config_record,
    "FeatureLevelRecord": _feature_level_record,
    "RegisterBrokerRecord": _register_broker_record,
    "UnregisterBrokerRecord": _unregister_broker_record,
    "ProducerIdsRecord": _producer_ids_record,
}
_TRANSACTION_BEGIN = "BeginTransactionRecord"
_TRANSACTION_END = "EndTransactionRecord"
_TRANSACTION_ABORT = "AbortTransactionRecord"


# ------------------------------------------------------------------------------------------------ reading


def list_snapshots(directory: str | Path) -> list[SnapshotId]:
    """The complete snapshots in a metadata partition dir, oldest first (``.part`` and ``.deleted`` left out)."""
    found = []
    for child in Path(directory).iterdir():
        match = _SNAPSHOT_NAME.match(child.name)
        if match and child.is_file():
            found.append(SnapshotId(int(match.group(1)), int(match.group(2))))
    return sorted(found)


def _records(path: Path, start_offset: int = 0) -> Iterator[tuple[int, bool, Record]]:
    """(offset, is_control, record) of every record at or after ``start_offset`` in one file of batches.

    A batch with a bad CRC raises CorruptRecordError; a partial batch at the end ends the file quietly.
    """
    records = FileRecords.open(path, mutable=False)
    try:
        for position, batch in records.batches():
            if batch.last_offset < start_offset:
                continue
            if batch.magic < 2:
                raise CorruptRecordError(f"A metadata batch must be magic 2, not {batch.magic}", position=position)
            if not batch.is_valid():
                reason = f"Record batch at offset {batch.base_offset} is corrupt (bad CRC)"
                raise CorruptRecordError(reason, position=position, path=str(path))
            for record in batch:
                if record.offset >= start_offset:
                    yield record.offset, batch.is_control, record
    finally:
        records.close_handlers()


def read_snapshot(path: str | Path) -> list[tuple[int, MetadataRecord]]:
    """Every metadata record of a snapshot file, checking its SnapshotHeader (first) and SnapshotFooter (last).

    Raises MetadataParseError or CorruptRecordError if the file is not a whole, readable snapshot.
    """
    path = Path(path)
    out: list[tuple[int, MetadataRecord]] = []
    header = footer = False
    for offset, is_control, record in _records(path):
        if footer:
            raise MetadataParseError(f"Snapshot {path.name} has records after its SnapshotFooter (offset {offset})")
        if is_control:
            kind = control_record_type(record.key)
            if kind == ControlRecordType.SNAPSHOT_HEADER:
                if header or out:
                    raise MetadataParseError(f"Snapshot {path.name}: a SnapshotHeader at offset {offset}, not first")
                decode_control_value(int(kind), record.value or b"")
                header = True
            elif kind == ControlRecordType.SNAPSHOT_FOOTER:
                decode_control_value(int(kind), record.value or b"")
                footer = True
            continue
        if not header:
            raise MetadataParseError(f"Snapshot {path.name} does not start with a SnapshotHeader")
        out.append((offset, _decode(record, path)))
    if not header:
        raise MetadataParseError(f"Snapshot {path.name} does not start with a SnapshotHeader")
    if not footer:
        raise MetadataParseError(f"Snapshot {path.name} does not end with a SnapshotFooter (incomplete file)")
    return out


def _decode(record: Record, path: Path) -> MetadataRecord:
    if record.value is None:
        raise MetadataParseError(f"Metadata record at offset {record.offset} of {path.name} has no value")
    try:
        return decode_metadata_record(record.value)
    except MetadataParseError as e:
        raise e.located(offset=record.offset, path=str(path)) from e.__cause__


def read_metadata_log(directory: str | Path, start_offset: int = 0) -> Iterator[tuple[int, MetadataRecord]]:
    """The metadata records of the log's segments from ``start_offset`` on, in offset order (control records
    such as LeaderChange are skipped). Offsets only move forward: a record at or below one already read (a
    segment overlapping the one before it) is not read twice."""
    segments = sorted(
        (int(m.group(1)), child) for child in Path(directory).iterdir() if (m := _SEGMENT_NAME.match(child.name))
    )
    next_offset = start_offset
    for _base, path in segments:
        for offset, is_control, record in _records(path, next_offset):
            if offset < next_offset:
                continue
            next_offset = offset + 1
            if not is_control:
                yield offset, _decode(record, path)


def load_cluster_metadata(directory: str | Path) -> ClusterMetadataImage:
    """Replay a ``__cluster_metadata-0`` dir: the latest readable snapshot, then the log after it.

    A snapshot that cannot be read is skipped for the one before it (with a warning). The log is read up to its
    first unreadable batch (with a warning). Raises MetadataParseError only if nothing at all can be read from a
    dir that has snapshots or segments.
    """
    directory = Path(directory)
    image = ClusterMetadataImage()
    problems: list[str] = []
    for snapshot in reversed(list_snapshots(directory)):
        try:
            records = read_snapshot(directory / snapshot.file_name)
        except (KafkaLogError, OSError) as e:
            problems.append(f"{snapshot.file_name}: {e}")
            log.warning("Skipping the unreadable metadata snapshot %s: %s", directory / snapshot.file_name, e)
            continue
        for offset, record in records:
            image.apply(record, offset)
        image.snapshot = snapshot
        image.last_offset = snapshot.end_offset - 1
        break
    start = image.snapshot.end_offset if image.snapshot is not None else 0
    pending: list[tuple[int, MetadataRecord]] | None = None
    try:
        for offset, record in read_metadata_log(directory, start):
            if record.name == _TRANSACTION_BEGIN:
                pending = []
            elif record.name == _TRANSACTION_END:
                for tx_offset, tx_record in pending or []:
                    image.apply(tx_record, tx_offset)
                pending = None
            elif record.name == _TRANSACTION_ABORT:
                pending = None
            elif pending is not None:
                pending.append((offset, record))
            else:
                image.apply(record, offset)
    except (KafkaLogError, OSError) as e:
        problems.append(f"log: {e}")
        log.warning("The metadata log in %s is read up to offset %d only: %s", directory, image.last_offset, e)
    if pending:
        log.warning("The metadata log in %s ends inside a transaction; left out: %d records", directory, len(pending))
    if problems and image.snapshot is None and image.records_applied == 0:
        raise MetadataParseError(f"No readable cluster metadata in {directory}: " + "; ".join(problems))
    return image
