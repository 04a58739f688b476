"""Topic configs of log dirs kafkalog did not write: from a KRaft broker's cluster metadata, or unknown (a
ZooKeeper-era broker's dir), through the LogManager, its MockTime schedule and the CLI.

Expected values come from the fixtures: PROVENANCE.md says the KRaft dir's snapshots make ``__consumer_offsets``,
``__transaction_state``, ``_schemas`` and the Connect topics compacted (the partition dirs do not say so); topic
ids are the ones in each partition's ``partition.metadata``; record contents are read from the original files.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import fixture_path
from kafkalog.cli import main
from kafkalog.layout import TOPICS_FILE
from kafkalog.logdir import PartitionMetadataFile
from kafkalog.manager import LogManager
from kafkalog.storage.checkpoints import OffsetCheckpointFile
from kafkalog.storage.file_records import FileRecords
from kafkalog.testing import MockTime
from kafkalog.topic_store import TopicConfigStore

KRAFT = ("broker-logs", "itumelengmogase-cp77-kraft", "kafka-data")
ZK_ERA = ("broker-logs", "mscaldas-cp512-lz4", "kafka-data")  # Kafka 2.1 (CP 5.1.2): configs lived in ZooKeeper
COMPACTED_BY_PROVENANCE = (
    "__consumer_offsets",
    "__transaction_state",
    "_schemas",
    "docker-connect-configs",
    "docker-connect-offsets",
    "docker-connect-status",
)
WEEK_MS = 7 * 24 * 3600 * 1000  # retention.ms's default
DAY_MS = 24 * 3600 * 1000


def copy_dir(parts: tuple[str, ...], tmp_path: Path) -> Path:
    """A writable copy of a fixture log dir (the fixtures are read-only)."""
    target = tmp_path / parts[-2]
    shutil.copytree(fixture_path(*parts), target)
    for root, _dirs, files in os.walk(target):
        os.chmod(root, 0o755)
        for name in files:
            os.chmod(os.path.join(root, name), 0o644)
    (target / ".lock").unlink(missing_ok=True)
    return target


def records_of(path: Path) -> list[tuple[int, int, bytes | None, bytes | None]]:
    """(offset, timestamp, key, value) of every data record in a partition dir's segments, in offset order."""
    out = []
    for segment in sorted(path.glob("*.log")):
        records = FileRecords.open(segment, mutable=False)
        try:
            for _, batch in records.batches():
                if not batch.is_control:
                    out.extend((r.offset, r.timestamp, r.key, r.value) for r in batch)
        finally:
            records.close_handlers()
    return out


def log_bytes(directory: Path) -> dict[str, bytes]:
    return {
        f"{p.name}/{s.name}": s.read_bytes()
        for p in sorted(directory.iterdir())
        if p.is_dir()
        for s in sorted(p.glob("*.log"))
    }


def newest_timestamp(directory: Path) -> int:
    return max(t for p in directory.iterdir() if p.is_dir() for _, t, _, _ in records_of(p))


# ------------------------------------------------------------------------------------------ a KRaft broker's dir


def test_kraft_dir_topics_load_with_the_configs_and_ids_of_its_snapshots(tmp_path):
    data = copy_dir(KRAFT, tmp_path)
    with LogManager([data], {}, MockTime()) as manager:
        assert manager.unconfirmed_topics == {}
        assert manager.cluster_metadata.snapshot.end_offset == 60500
        for topic in COMPACTED_BY_PROVENANCE:
            description = manager.describe_topic(topic)
            assert description.config["cleanup.policy"] == ("compact",), topic
            assert manager.get_log(topic, description.partitions[0].partition).config.compact
        for path in data.iterdir():
            if path.is_dir() and path.name != "__cluster_metadata-0":
                topic = path.name.rsplit("-", 1)[0]
                assert manager.describe_topic(topic).topic_id == PartitionMetadataFile(path).read()
        # Snapshot values beyond cleanup.policy (the ksqlDB command topic keeps its records forever).
        ksql = manager.describe_topic("_confluent-ksql-default__command_topic")
        assert ksql.config["retention.ms"] == -1 and ksql.config["cleanup.policy"] == ("delete",)
        assert manager.describe_topic("__consumer_offsets").config["segment.bytes"] == 104857600
        assert manager.describe_topic("patient_admissions").config_overrides == {}
    # kafkalog records where they came from; the next start reads the metadata again.
    state = TopicConfigStore([data]).load().get("_schemas")
    assert state.origin == "cluster-metadata" and state.config == {"cleanup.policy": "compact"}


def test_kraft_dir_under_default_settings_keeps_its_compacted_topics_and_compacts_them(tmp_path):
    """Several retention periods after the last record, the retention task deletes what is old in a topic of
    cleanup.policy=delete but keeps every byte of the compacted topics; then the cleaner compacts them."""
    data = copy_dir(KRAFT, tmp_path)
    compacted = sorted(
        p.name
        for p in data.iterdir()
        if p.is_dir() and p.name.rsplit("-", 1)[0] in COMPACTED_BY_PROVENANCE and records_of(p)
    )
    assert compacted == [
        "__consumer_offsets-29",
        "__consumer_offsets-37",
        "__transaction_state-44",
        "_schemas-0",
        "docker-connect-configs-0",
    ]
    originals = {name: records_of(data / name) for name in compacted}
    before = log_bytes(data)
    clock = MockTime(start_ms=newest_timestamp(data) + 3 * WEEK_MS)  # three retention periods later
    with LogManager([data], {}, clock) as manager:
        # A delete-policy topic with a record a day older than retention.ms: the retention task's witness.
        manager.produce(
            "patient_admissions", b"admitted", key=b"p1", partition=0, timestamp=clock.milliseconds() - WEEK_MS - DAY_MS
        )
        assert manager.get_log("patient_admissions", 0).log_end_offset == 1
        clock.advance(30_000 + 4 * 300_000)  # log.initial.task.delay.ms, then four retention checks
        assert manager.get_log("patient_admissions", 0).log_start_offset == 1  # retention ran and deleted it
        after = log_bytes(data)
        for name in compacted:
            assert after[f"{name}/{0:020d}.log"] == before[f"{name}/{0:020d}.log"], name
            assert manager.get_log(*_tp(name)).log_start_offset == 0
        # Appending rolls each (week-old) active segment, so the cleaner may clean the old one.
        for name in compacted:
            key = originals[name][-1][2]
            manager.produce(_tp(name)[0], b"new", key=key, partition=_tp(name)[1])
        clock.advance(60_000)  # the cleaner's backoff is 15 s
        cleaned = {
            f"{t}-{p}": offset
            for (t, p), offset in OffsetCheckpointFile(data / "cleaner-offset-checkpoint").read().items()
        }
        for name in compacted:
            original = originals[name]
            latest = {}
            for offset, _ts, key, value in original:
                latest[key] = (offset, value)
            kept = [(r.offset, r.key, r.value) for r in manager.get_log(*_tp(name)).records()]
            # Kafka's compaction: the last record of each key in the cleaned part, then the new record.
            expected = [(o, k, v) for k, (o, v) in sorted(latest.items(), key=lambda kv: kv[1][0])]
            assert kept[:-1] == expected, name
            assert kept[-1][1:] == (original[-1][2], b"new")
            assert cleaned[name] == original[-1][0] + 1, name
            assert len(original) > len(expected)  # there was something to compact


def _tp(name: str) -> tuple[str, int]:
    topic, partition = name.rsplit("-", 1)
    return topic, int(partition)


def test_kraft_dir_cli_explain_and_clean_see_compact(tmp_path):
    data = copy_dir(KRAFT, tmp_path)
    runner = CliRunner()
    result = runner.invoke(
        main, ["explain", "compaction", str(data), "--topic", "__consumer_offsets", "--partition", "29"]
    )
    assert result.exit_code == 0, result.output
    assert "does not include compact" not in result.output
    result = runner.invoke(main, ["explain", "compaction", str(data), "--topic", "_schemas", "--partition", "0"])
    assert result.exit_code == 0 and "does not include compact" not in result.output
    result = runner.invoke(
        main, ["explain", "compaction", str(data), "--topic", "patient_admissions", "--partition", "0"]
    )
    assert result.exit_code == 0 and "cleanup.policy=delete does not include compact" in result.output
    result = runner.invoke(main, ["topics", "--describe", "--log-dir", str(data), "--topic", "docker-connect-configs"])
    assert result.exit_code == 0, result.output
    assert "cleanup.policy=compact" in result.output


def test_kafkalog_topics_stay_kafkalog_s_in_a_kraft_dir(tmp_path):
    """A topic kafkalog created keeps its own configs; a topic whose configs the operator set through kafkalog
    follows kafkalog's store from then on, not the metadata."""
    data = copy_dir(KRAFT, tmp_path)
    with LogManager([data], {}, MockTime()) as manager:
        manager.create_topic("mine", 1, {"retention.ms": "1234"})
        manager.alter_topic_config("_schemas", {"min.compaction.lag.ms": "5000"})
    with LogManager([data], {}, MockTime()) as manager:
        assert manager.describe_topic("mine").config_overrides == {"retention.ms": "1234"}
        overrides = manager.describe_topic("_schemas").config_overrides
        assert overrides == {"cleanup.policy": "compact", "min.compaction.lag.ms": "5000"}
    assert TopicConfigStore([data]).load().get("_schemas").origin == "kafkalog"


def test_internal_topics_are_compacted_whatever_the_store_says(tmp_path):
    data = copy_dir(KRAFT, tmp_path)
    with LogManager([data], {}, MockTime()) as manager:
        manager.alter_topic_config("__consumer_offsets", {"cleanup.policy": "delete"})
        assert manager.get_log("__consumer_offsets", 29).config.compact


def test_legacy_store_entries_of_a_kraft_dir_take_the_metadata(tmp_path):
    """A store written by a kafkalog that adopted the dir without reading the metadata (config {}, no origin):
    the metadata, which knows the topic under the same id, gives the configs now."""
    data = copy_dir(KRAFT, tmp_path)
    topic_id = PartitionMetadataFile(data / "_schemas-0").read()
    legacy = {
        "version": 1,
        "generation": 1,
        "topics": {"_schemas": {"topic_id": topic_id, "partitions": 1, "config": {}}},
    }
    (data / TOPICS_FILE).write_text(json.dumps(legacy))
    with LogManager([data], {}, MockTime()) as manager:
        assert manager.describe_topic("_schemas").config["cleanup.policy"] == ("compact",)


def test_a_stray_partition_of_an_older_topic_is_unconfirmed(tmp_path):
    data = copy_dir(KRAFT, tmp_path)
    PartitionMetadataFile(data / "_schemas-0").write("AAAAAAAAAAAAAAAAAAAAAw")
    with LogManager([data], {}, MockTime()) as manager:
        assert "stray" in manager.unconfirmed_topics["_schemas"]


# --------------------------------------------------------------------------------- a ZooKeeper-era broker's dir


def test_zookeeper_era_dir_runs_no_deleting_retention_until_confirmed(tmp_path, caplog):
    data = copy_dir(ZK_ERA, tmp_path)
    before = log_bytes(data)
    start = newest_timestamp(data) + 3 * WEEK_MS
    user_topics = {p.name.rsplit("-", 1)[0] for p in data.iterdir() if p.is_dir()} - {"__consumer_offsets"}
    with caplog.at_level(logging.WARNING, logger="kafkalog.manager"):
        clock = MockTime(start_ms=start)
        with LogManager([data], {}, clock) as manager:
            assert set(manager.unconfirmed_topics) == user_topics
            clock.advance(30_000 + 3 * 300_000)
    result = CliRunner().invoke(main, ["explain", "retention", str(data), "--topic", "test10"])
    assert result.exit_code == 0, result.output
    assert "Retention does not run on this topic: its configs are unknown" in " ".join(result.output.split())
    warning = next(
        r.getMessage() for r in caplog.records if "kafkalog.adopted.topics.retention.enable" in r.getMessage()
    )
    assert "_schemas" in warning and "ZooKeeper" in warning
    assert log_bytes(data) == before  # nothing deleted, in any topic

    # The operator confirms one topic by setting its configs: its retention runs, the others' still does not.
    clock = MockTime(start_ms=start)
    with LogManager([data], {}, clock) as manager:
        manager.alter_topic_config("test10", {"retention.ms": str(WEEK_MS)})
        assert "test10" not in manager.unconfirmed_topics
        clock.advance(30_000 + 300_000)
        assert manager.get_log("test10", 0).log_start_offset == manager.get_log("test10", 0).log_end_offset
        assert manager.get_log("_schemas", 0).log_start_offset == 0
    with LogManager([data], {}, MockTime(start_ms=start)) as manager:
        assert "test10" not in manager.unconfirmed_topics and "_schemas" in manager.unconfirmed_topics

    # Or for every topic, with the setting: then the broker defaults hold (delete after 7 days).
    clock = MockTime(start_ms=start)
    with LogManager([data], {"kafkalog.adopted.topics.retention.enable": "true"}, clock) as manager:
        clock.advance(30_000 + 300_000)
        log = manager.get_log("_schemas", 0)
        assert log.log_start_offset == log.log_end_offset > 0
        assert manager.get_log("__consumer_offsets", 29).config.compact  # internal: compacted all the same


def test_zookeeper_era_confirmation_setting_is_a_checked_boolean():
    from kafkalog.errors import InvalidConfigurationError
    from kafkalog.storage.config import BrokerConfig

    assert BrokerConfig({}).kafkalog_adopted_topics_retention_enable is False
    with pytest.raises(InvalidConfigurationError):
        BrokerConfig({"kafkalog.adopted.topics.retention.enable": "maybe"})


def test_dynamic_broker_log_configs_in_the_metadata_are_named(tmp_path, caplog):
    """kafkalog takes its broker config from its own settings: a dynamic log.* broker config in the metadata is
    named in a warning rather than silently ignored."""
    from kafkalog.record import RecordBatchBuilder
    from kafkalog.record.varint import encode_unsigned_varint as uvarint
    from kafkalog.topic_origins import read_cluster_metadata

    def text(s: str) -> bytes:
        return uvarint(len(s) + 1) + s.encode()

    config = uvarint(1) + uvarint(4) + uvarint(0) + b"\x04" + text("") + text("log.retention.ms") + text("60000")
    builder = RecordBatchBuilder()
    builder.append(None, config + b"\x00", 1)
    (tmp_path / "__cluster_metadata-0").mkdir()
    (tmp_path / "__cluster_metadata-0" / f"{0:020d}.log").write_bytes(builder.build())
    with caplog.at_level(logging.WARNING, logger="kafkalog.topic_origins"):
        image = read_cluster_metadata([tmp_path])
    assert image.configs == {(4, ""): {"log.retention.ms": "60000"}}
    assert "log.retention.ms=60000 (cluster default)" in caplog.text


def test_kraft_dir_cli_clean_compacts_the_metadata_s_compacted_topics(tmp_path):
    """After an append rolls the week-old segments, `kafkalog clean` cleans the topics the metadata makes
    compacted (and only those)."""
    data = copy_dir(KRAFT, tmp_path)
    clock = MockTime(start_ms=newest_timestamp(data) + 3 * WEEK_MS)
    with LogManager([data], {"log.cleaner.enable": "false"}, clock) as manager:
        for topic, partition in (("_schemas", 0), ("__consumer_offsets", 29)):
            key = records_of(data / f"{topic}-{partition}")[-1][2]
            manager.produce(topic, b"new", key=key, partition=partition)
    result = CliRunner().invoke(main, ["clean", str(data)])
    assert result.exit_code == 0, result.output
    assert "_schemas-0" in result.output and "__consumer_offsets-29" in result.output
    assert "No log is eligible" not in result.output
    assert len(records_of(data / "_schemas-0")) == 2  # the latest of its one key, and the new record


def test_new_partitions_of_an_adopted_topic_keep_its_configs_and_origin(tmp_path):
    data = copy_dir(KRAFT, tmp_path)
    with LogManager([data], {}, MockTime()) as manager:
        manager.create_partitions("_schemas", 2)
        assert manager.get_log("_schemas", 1).config.compact
    state = TopicConfigStore([data]).load().get("_schemas")
    assert (state.partitions, state.origin) == (2, "cluster-metadata")
