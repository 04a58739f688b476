"""KRaft metadata: the record decoder (kafkalog.record.kraft), the snapshot/log replay
(kafkalog.storage.cluster_metadata) and ``kafkalog dump --cluster-metadata-decoder``.

Expected values come from bytes built here by Kafka's framing rules, from the fixture's PROVENANCE.md
(``cleanup.policy=compact`` for ``__consumer_offsets``, ``__transaction_state`` and the Connect topics) and from
files Kafka wrote beside the snapshots (each partition's ``partition.metadata`` topic id).
"""

from __future__ import annotations

import base64
import json
import struct
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import fixture_path
from kafkalog.cli import main
from kafkalog.errors import MetadataParseError
from kafkalog.logdir import PartitionMetadataFile
from kafkalog.record import RecordBatchBuilder
from kafkalog.record.kraft import decode_control_value, decode_metadata_record, java_double_text, to_json_text
from kafkalog.record.varint import encode_unsigned_varint as uvarint
from kafkalog.storage.cluster_metadata import (
    TOPIC_RESOURCE,
    list_snapshots,
    load_cluster_metadata,
    read_snapshot,
)

KRAFT_DIR = ("broker-logs", "itumelengmogase-cp77-kraft", "kafka-data")
COMPACTED_BY_PROVENANCE = (
    "__consumer_offsets",
    "__transaction_state",
    "docker-connect-configs",
    "docker-connect-offsets",
    "docker-connect-status",
    "_schemas",
)


def compact_string(text: str | None) -> bytes:
    if text is None:
        return b"\x00"
    data = text.encode()
    return uvarint(len(data) + 1) + data


def uuid_bytes(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "==")


def frame(api_key: int, version: int, body: bytes) -> bytes:
    """AbstractApiMessageSerde's frame: frame version 1, api key, version (unsigned varints), then the message."""
    return uvarint(1) + uvarint(api_key) + uvarint(version) + body


TOPIC_ID = "vH1Xu-ntQPu9P3I3F8wp8Q"


# ------------------------------------------------------------------------------------------------- decoder


def test_topic_record_from_its_schema():
    value = frame(2, 0, compact_string("orders") + uuid_bytes(TOPIC_ID) + b"\x00")
    record = decode_metadata_record(value)
    assert record.type == "TOPIC_RECORD"
    assert record.to_json() == {"type": "TOPIC_RECORD", "version": 0, "data": {"name": "orders", "topicId": TOPIC_ID}}


def test_config_record_with_a_null_value_deletes():
    body = b"\x02" + compact_string("orders") + compact_string("retention.ms") + compact_string(None) + b"\x00"
    record = decode_metadata_record(frame(4, 0, body))
    assert record.to_json()["data"] == {
        "resourceType": 2,
        "resourceName": "orders",
        "name": "retention.ms",
        "value": None,
    }


def test_partition_change_record_tagged_fields_and_an_unknown_tag():
    # PartitionChangeRecord v0: PartitionId, TopicId, then tagged fields: Isr (tag 0) and Leader (tag 1) sent,
    # plus tag 30, which the schema does not know and a reader must skip.
    isr = uvarint(3) + struct.pack(">ii", 1, 2)
    leader = struct.pack(">i", 2)
    tags = uvarint(3) + uvarint(0) + uvarint(len(isr)) + isr + uvarint(1) + uvarint(4) + leader
    tags += uvarint(30) + uvarint(2) + b"\xab\xcd"
    body = struct.pack(">i", 7) + uuid_bytes(TOPIC_ID) + tags
    record = decode_metadata_record(frame(5, 0, body))
    assert record.to_json()["data"] == {"partitionId": 7, "topicId": TOPIC_ID, "isr": [1, 2], "leader": 2}
    # Tagged fields not sent take their defaults: null replicas, leader -2 ("no change") when absent.
    assert record["replicas"] is None
    bare = decode_metadata_record(frame(5, 0, struct.pack(">i", 7) + uuid_bytes(TOPIC_ID) + b"\x00"))
    assert bare["leader"] == -2
    assert bare.to_json()["data"] == {"partitionId": 7, "topicId": TOPIC_ID}


def test_frame_and_framing_errors_use_kafkas_words():
    topic = compact_string("orders") + uuid_bytes(TOPIC_ID) + b"\x00"
    with pytest.raises(MetadataParseError, match="frame version 0"):
        decode_metadata_record(uvarint(0) + uvarint(2) + uvarint(0) + topic)
    with pytest.raises(MetadataParseError, match="unknown frame version 2"):
        decode_metadata_record(uvarint(2) + uvarint(2) + uvarint(0) + topic)
    with pytest.raises(MetadataParseError, match="Unknown metadata id 999"):
        decode_metadata_record(frame(999, 0, topic))
    with pytest.raises(MetadataParseError, match=r"Found 1 byte\(s\) of garbage after 2"):
        decode_metadata_record(frame(2, 0, topic + b"\x00"))
    with pytest.raises(MetadataParseError, match="Failed to deserialize record with type 2") as info:
        decode_metadata_record(frame(2, 0, topic[:5]))
    assert info.value.__cause__ is not None
    with pytest.raises(MetadataParseError, match="Failed to deserialize record with type 2"):
        decode_metadata_record(frame(2, 7, topic))  # TopicRecord has version 0 only


def test_non_nullable_string_sent_as_null_is_refused():
    with pytest.raises(MetadataParseError):
        decode_metadata_record(frame(2, 0, compact_string(None) + uuid_bytes(TOPIC_ID) + b"\x00"))


def test_snapshot_header_control_value():
    value = struct.pack(">hq", 0, 1728594221482) + b"\x00"
    message = decode_control_value(3, value)
    assert message.to_json() == {"version": 0, "lastContainedLogTimestamp": 1728594221482}


def test_json_text_is_jacksons():
    assert to_json_text({"a": [1, None, True], "b": "é\n"}) == '{"a":[1,null,true],"b":"é\\n"}'
    assert [java_double_text(v) for v in (1.0, 0.5, 1e7, 1.5e-4, 123456.75, -2e20)] == [
        "1.0",
        "0.5",
        "1.0E7",
        "1.5E-4",
        "123456.75",
        "-2.0E20",
    ]


# --------------------------------------------------------------------------------------- the KRaft fixture


def metadata_dir() -> Path:
    return fixture_path(*KRAFT_DIR, "__cluster_metadata-0")


def test_fixture_snapshots_are_listed_and_read_whole():
    directory = metadata_dir()
    snapshots = list_snapshots(directory)
    assert [(s.end_offset, s.epoch) for s in snapshots] == [(7364, 1), (21265, 6), (60500, 25)]
    for snapshot in snapshots:
        records = read_snapshot(directory / snapshot.file_name)
        names = {r.name for _, r in records}
        assert {"TopicRecord", "PartitionRecord", "ConfigRecord", "FeatureLevelRecord"} <= names


def test_fixture_image_topics_ids_and_configs():
    image = load_cluster_metadata(metadata_dir())
    assert image.snapshot.end_offset == 60500  # the latest snapshot; the fixture has no .log after it
    data_dir = fixture_path(*KRAFT_DIR)
    partition_dirs = [d for d in data_dir.iterdir() if d.is_dir() and d.name != "__cluster_metadata-0"]
    topics_on_disk = {d.name.rsplit("-", 1)[0] for d in partition_dirs}
    assert set(image.topics) == topics_on_disk
    for directory in partition_dirs:
        topic = directory.name.rsplit("-", 1)[0]
        assert image.topics[topic].topic_id == PartitionMetadataFile(directory).read()
        assert int(directory.name.rsplit("-", 1)[1]) in image.topics[topic].partitions
    for topic in COMPACTED_BY_PROVENANCE:
        assert image.topic_configs(topic)["cleanup.policy"] == "compact", topic
    assert (TOPIC_RESOURCE, "patient_admissions") not in image.configs
    assert image.features["metadata.version"] == 19  # 3.7-IV4: Kafka 3.7, as PROVENANCE says (CP 7.7)
    # The broker's registration names the directory id of the dir's meta.properties.
    meta = (data_dir / "meta.properties").read_text()
    assert f"directory.id={image.brokers[1]['logDirs'][0]}" in meta


def test_a_truncated_latest_snapshot_falls_back_to_the_one_before(tmp_path):
    src = metadata_dir()
    for snapshot in list_snapshots(src)[-2:]:
        (tmp_path / snapshot.file_name).write_bytes((src / snapshot.file_name).read_bytes())
    latest = list_snapshots(tmp_path)[-1]
    data = (tmp_path / latest.file_name).read_bytes()
    (tmp_path / latest.file_name).write_bytes(data[:-40])  # the footer batch is cut
    image = load_cluster_metadata(tmp_path)
    assert image.snapshot == list_snapshots(tmp_path)[0]
    assert image.topic_configs("__consumer_offsets")["cleanup.policy"] == "compact"


def test_the_log_after_the_snapshot_is_replayed_with_transactions(tmp_path):
    """A metadata log segment after the snapshot: a config change, an aborted transaction and a committed one."""
    src = metadata_dir()
    latest = list_snapshots(src)[-1]
    (tmp_path / latest.file_name).write_bytes((src / latest.file_name).read_bytes())

    def config(name: str, key: str, value: str | None) -> bytes:
        return frame(4, 0, b"\x02" + compact_string(name) + compact_string(key) + compact_string(value) + b"\x00")

    name = compact_string("t")
    begin = frame(23, 0, uvarint(1) + uvarint(0) + uvarint(len(name)) + name)  # Name is tagged field 0
    end = frame(24, 0, b"\x00")
    abort = frame(25, 0, b"\x00")
    values = [
        config("_schemas", "retention.ms", "1000"),  # at the snapshot's end offset: applied
        begin,
        config("_schemas", "cleanup.policy", "delete"),
        abort,
        begin,
        config("patient_admissions", "retention.ms", "60000"),
        end,
        config("_schemas", "retention.ms", None),
    ]
    builder = RecordBatchBuilder(base_offset=latest.end_offset - 1)  # the first record sits before the snapshot
    builder.append(None, config("_schemas", "cleanup.policy", "delete"), 1)
    for value in values:
        builder.append(None, value, 1)
    (tmp_path / f"{0:020d}.log").write_bytes(builder.build())
    image = load_cluster_metadata(tmp_path)
    assert image.topic_configs("_schemas") == {"cleanup.policy": "compact"}
    assert image.topic_configs("patient_admissions") == {"retention.ms": "60000"}
    assert image.last_offset == latest.end_offset - 1 + len(values)


# ------------------------------------------------------------------------------------------------- the CLI


def test_dump_cluster_metadata_decoder_prints_the_snapshot_records():
    directory = metadata_dir()
    latest = list_snapshots(directory)[-1]
    path = directory / latest.file_name
    result = CliRunner().invoke(main, ["dump", "--files", str(path), "--cluster-metadata-decoder"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[1] == f"Snapshot end offset: {latest.end_offset}, epoch: {latest.epoch}"
    payloads = [json.loads(line.split(" payload: ", 1)[1]) for line in lines if " payload: " in line]
    record_lines = [line for line in lines if line.startswith("| offset: ")]
    assert len(payloads) == len(record_lines) - 2  # every record but the header and footer control records
    assert "SnapshotHeader {" in record_lines[0] and "SnapshotFooter {" in record_lines[-1]
    assert all(set(p) == {"type", "version", "data"} for p in payloads)
    topics = {p["data"]["name"]: p["data"]["topicId"] for p in payloads if p["type"] == "TOPIC_RECORD"}
    assert topics["__consumer_offsets"] == PartitionMetadataFile(directory.parent / "__consumer_offsets-0").read()
    policies = {
        p["data"]["resourceName"]: p["data"]["value"]
        for p in payloads
        if p["type"] == "CONFIG_RECORD" and p["data"]["name"] == "cleanup.policy"
    }
    for topic in COMPACTED_BY_PROVENANCE:
        assert policies[topic] == "compact"
    # Kafka's line shape: no key, " payload: " straight after the record metadata.
    assert any(
        line.endswith(
            'payload: {"type":"FEATURE_LEVEL_RECORD","version":0,"data":{"name":"metadata.version","featureLevel":19}}'
        )
        for line in lines
    )


def test_dump_cluster_metadata_decoder_reports_a_bad_record_and_goes_on(tmp_path):
    builder = RecordBatchBuilder(base_offset=0)
    builder.append(None, b"\x01\x63\x00\x00", 1)  # api key 99: unknown
    builder.append(None, frame(2, 0, compact_string("orders") + uuid_bytes(TOPIC_ID) + b"\x00"), 1)
    path = tmp_path / f"{0:020d}.log"
    path.write_bytes(builder.build())
    result = CliRunner().invoke(main, ["dump", "--files", str(path), "--cluster-metadata-decoder"])
    assert result.exit_code == 0, result.output
    assert "payload: Error at 0, skipping. Unknown metadata id 99" in result.output
    assert f'payload: {{"type":"TOPIC_RECORD","version":0,"data":{{"name":"orders","topicId":"{TOPIC_ID}"}}}}' in (
        result.output
    )
