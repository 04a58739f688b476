"""Log-dir root primitives: .lock, meta.properties, .kafka_cleanshutdown, partition.metadata, topic names,
and kafkalog's topic state file."""

from __future__ import annotations

import base64
import json
import logging
import os
import re
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest

from conftest import fixture_path
from kafkalog.errors import InvalidPartitionsError, InvalidTopicError, KafkaStorageError
from kafkalog.layout import TOPICS_FILE
from kafkalog.logdir import (
    ONE_UUID,
    ZERO_UUID,
    CleanShutdownFile,
    LogDirLock,
    MetaProperties,
    PartitionMetadataFile,
    has_collision_chars,
    is_valid_topic_name,
    new_uuid,
    parse_uuid,
    unify_collision_chars,
    validate_topic_name,
)
from kafkalog.storage.properties import parse_properties
from kafkalog.topic_store import TopicConfigStore, TopicState

BHEEM = ("broker-logs", "bheem6005-kafka", "kafka-logs")
MSCALDAS = ("broker-logs", "mscaldas-cp512-lz4", "kafka-data")
WILLIAM = ("broker-logs", "william0423-kafka", "kafka-logs")


# ---------------------------------------------------------------------------------------------------------------
# Uuid
# ---------------------------------------------------------------------------------------------------------------


def test_new_uuid_is_kafka_base64url():
    seen = set()
    for _ in range(500):
        text = new_uuid()
        assert len(text) == 22 and "=" not in text
        assert set(text) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
        assert not text.startswith("-") and text not in (ZERO_UUID, ONE_UUID)
        raw = parse_uuid(text)
        assert uuid.UUID(bytes=raw).version == 4  # a java.util.UUID.randomUUID, as Kafka's
        seen.add(text)
    assert len(seen) == 500


def test_parse_uuid_known_values():
    assert parse_uuid(ZERO_UUID) == bytes(16)
    assert parse_uuid(ONE_UUID) == bytes(15) + b"\x01"
    assert parse_uuid("Yjwa-XTYSF28JSz9pdcuyw") == base64.urlsafe_b64decode("Yjwa-XTYSF28JSz9pdcuyw==")
    assert parse_uuid("Yjwa-XTYSF28JSz9pdcuyw==") == parse_uuid("Yjwa-XTYSF28JSz9pdcuyw")


@pytest.mark.parametrize(
    "bad",
    ["", "abc", "A" * 21, "A" * 23, "A" * 25, "Yjwa+XTYSF28JSz9pdcuyw", "Yjwa/XTYSF28JSz9pdcuyw", "Yjwa XTYSF28J"],
)
def test_parse_uuid_rejects(bad):
    with pytest.raises(ValueError):
        parse_uuid(bad)


def test_parse_uuid_too_long_message():
    with pytest.raises(ValueError, match="is too long to be decoded as a base64 UUID"):
        parse_uuid("A" * 30)


# ---------------------------------------------------------------------------------------------------------------
# .lock
# ---------------------------------------------------------------------------------------------------------------

_HOLDER = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
print("locked", flush=True)
sys.stdin.read()
"""


def test_lock_creates_file_and_context_manager(tmp_path):
    lock = LogDirLock(tmp_path)
    assert not lock.is_locked
    with lock as held:
        assert held is lock and lock.is_locked
        assert (tmp_path / ".lock").is_file()
    assert not lock.is_locked
    assert (tmp_path / ".lock").exists()  # Kafka leaves the file behind
    lock.release()  # releasing twice is harmless


def test_lock_held_by_another_process(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(tmp_path / ".lock")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(KafkaStorageError) as info:
            LogDirLock(tmp_path).acquire()
        assert str(info.value).startswith(
            f"Failed to acquire lock on file .lock in {tmp_path.absolute()}. "
            "A Kafka instance in another process or thread is using this directory."
        )
        assert f" Held by process {holder.pid} (" in str(info.value)  # from /proc/locks
    finally:
        holder.stdin.close()  # the holder exits, and the kernel drops its lock
        holder.wait(timeout=10)
    with LogDirLock(tmp_path) as lock:
        assert lock.is_locked


def test_our_lock_blocks_another_process(tmp_path):
    with LogDirLock(tmp_path):
        probe = subprocess.run(
            [
                sys.executable,
                "-c",
                "import fcntl, os, sys\n"
                "fd = os.open(sys.argv[1], os.O_RDWR)\n"
                "try:\n    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\nexcept BlockingIOError:\n    sys.exit(7)\n",
                str(tmp_path / ".lock"),
            ],
            timeout=30,
        )
        assert probe.returncode == 7


def test_lock_conflicts_within_one_process(tmp_path):
    first = LogDirLock(tmp_path).acquire()
    try:
        with pytest.raises(KafkaStorageError, match="another process or thread"):
            LogDirLock(tmp_path).acquire()
        with pytest.raises(KafkaStorageError, match="another process or thread"):
            first.acquire()  # the same handle twice
        errors = []

        def other_thread():
            try:
                LogDirLock(tmp_path).acquire()
            except KafkaStorageError as e:
                errors.append(e)

        t = threading.Thread(target=other_thread)
        t.start()
        t.join(10)
        assert len(errors) == 1
    finally:
        first.release()
    LogDirLock(tmp_path).acquire().release()  # free again


def test_lock_on_missing_directory(tmp_path):
    with pytest.raises(KafkaStorageError, match="Failed to create lock file"):
        LogDirLock(tmp_path / "absent").acquire()


def test_lock_released_when_collected(tmp_path):
    LogDirLock(tmp_path).acquire()  # dropped at once
    LogDirLock(tmp_path).acquire().release()


# ---------------------------------------------------------------------------------------------------------------
# meta.properties
# ---------------------------------------------------------------------------------------------------------------


def test_read_fixture_v0_with_cluster_id():
    meta = MetaProperties.read(fixture_path(*BHEEM))
    assert meta == MetaProperties(version=0, cluster_id="P4mWrUMKRvm3AylnZYNBaQ", node_id=0, directory_id=None)


def test_read_fixture_v0_without_cluster_id():
    meta = MetaProperties.read(fixture_path(*MSCALDAS))
    assert meta == MetaProperties(version=0, cluster_id=None, node_id=1001, directory_id=None)


def test_read_missing_is_none(tmp_path):
    assert MetaProperties.read(tmp_path) is None


def test_v0_round_trip_keeps_broker_id(tmp_path):
    meta = MetaProperties.read(fixture_path(*MSCALDAS))
    meta.write(tmp_path)
    text = (tmp_path / "meta.properties").read_text()
    assert "broker.id=1001" in text and "node.id" not in text
    assert MetaProperties.read(tmp_path) == meta


def test_write_format(tmp_path):
    meta = MetaProperties(version=1, cluster_id="P4mWrUMKRvm3AylnZYNBaQ", node_id=3, directory_id=ONE_UUID)
    meta.write(tmp_path)
    lines = (tmp_path / "meta.properties").read_text(encoding="ascii").split("\n")
    assert lines[0] == "#"
    assert lines[1].startswith("#") and " UTC " in lines[1]
    assert lines[2:] == [
        "version=1",
        "cluster.id=P4mWrUMKRvm3AylnZYNBaQ",
        "node.id=3",
        f"directory.id={ONE_UUID}",
        "",
    ]
    assert not (tmp_path / "meta.properties.tmp").exists()
    assert MetaProperties.read(tmp_path) == meta


def test_date_comment_looks_like_java():
    text = MetaProperties(version=0).to_text(now_s=1645952438)  # 2022-02-27 09:00:38 UTC, a Sunday
    assert text == "#\n#Sun Feb 27 09:00:38 UTC 2022\nversion=0\n"


def test_header_has_the_shape_kafka_writes():
    date = re.compile(r"#(Mon|Tue|Wed|Thu|Fri|Sat|Sun) [A-Z][a-z]{2} \d{2} \d{2}:\d{2}:\d{2} [A-Z]+ \d{4}")
    for fixture in (BHEEM, MSCALDAS):
        first, second = fixture_path(*fixture, "meta.properties").read_text().split("\n")[:2]
        assert first == "#" and date.fullmatch(second), second
    first, second = MetaProperties.generate().to_text().split("\n")[:2]
    assert first == "#" and date.fullmatch(second), second


def test_generate():
    meta = MetaProperties.generate()
    assert meta.version == 1 and meta.node_id == 0
    assert len(meta.cluster_id) == 22 and len(meta.directory_id) == 22
    assert meta.cluster_id != meta.directory_id
    again = MetaProperties.generate(cluster_id=meta.cluster_id, node_id=5)
    assert again.cluster_id == meta.cluster_id and again.node_id == 5
    assert again.directory_id != meta.directory_id  # every dir gets its own id
    assert MetaProperties.generate(node_id=None).node_id == 0
    assert len(MetaProperties.new_uuid()) == 22


def test_generate_write_read(tmp_path):
    meta = MetaProperties.generate(node_id=7)
    meta.write(tmp_path)
    assert MetaProperties.read(tmp_path) == meta


def test_properties_escaping_round_trip(tmp_path):
    meta = MetaProperties(version=0, cluster_id="a b=c:d#e!f\\g\tü", node_id=None)
    meta.write(tmp_path)
    text = (tmp_path / "meta.properties").read_text(encoding="ascii")
    assert "cluster.id=a b\\=c\\:d\\#e\\!f\\\\g\\t\\u00FC" in text
    assert parse_properties(text)["cluster.id"] == meta.cluster_id
    assert MetaProperties.read(tmp_path) == meta


def write_props(directory: Path, text: str) -> None:
    (directory / "meta.properties").write_text(text, encoding="iso-8859-1")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("version=x\n", "Invalid meta.properties version string 'x'"),
        ("version=3\nnode.id=1\n", "Unknown meta.properties version number 3"),
        ("version=1\ncluster.id=abc\n", "Failed to find node.id"),
        ("version=1\nnode.id=1\n", "cluster.id was not found."),
        ("version=1\ncluster.id=c\nnode.id=one\n", "Unable to read node.id as a base-10 number."),
        ("version=1\ncluster.id=c\nnode.id=99999999999\n", "Unable to read node.id as a base-10 number."),
        ("version=0\nbroker.id=x\n", "Unable to read broker.id as a base-10 number."),
        ("version=1\ncluster.id=c\nnode.id=1\ndirectory.id=nope\n", "Unable to read directory.id as a Uuid"),
        ("version=2\nnode.id=1\n", "directory.id was not found."),
    ],
)
def test_read_rejects(tmp_path, text, message):
    write_props(tmp_path, text)
    with pytest.raises(KafkaStorageError, match=r"Invalid meta\.properties") as info:
        MetaProperties.read(tmp_path)
    assert message in str(info.value)


def test_read_version_defaults_to_0_and_v2_cluster_optional(tmp_path):
    write_props(tmp_path, "broker.id=4\n")
    assert MetaProperties.read(tmp_path) == MetaProperties(version=0, node_id=4)
    write_props(tmp_path, f"version=2\nnode.id=1\ndirectory.id={ONE_UUID}\n")
    assert MetaProperties.read(tmp_path) == MetaProperties(version=2, node_id=1, directory_id=ONE_UUID)


def test_write_rejects_incomplete(tmp_path):
    with pytest.raises(ValueError, match=r"cluster\.id was not found"):
        MetaProperties(version=1, node_id=1).write(tmp_path)
    with pytest.raises(ValueError, match=r"directory\.id"):
        MetaProperties(version=1, cluster_id="c", node_id=1, directory_id="bad").write(tmp_path)
    assert not (tmp_path / "meta.properties").exists()


def test_read_unreadable(tmp_path):
    (tmp_path / "meta.properties").mkdir()  # reading a directory fails with an OSError
    with pytest.raises(KafkaStorageError, match="Failed to read"):
        MetaProperties.read(tmp_path)


def test_write_into_missing_directory(tmp_path):
    with pytest.raises(KafkaStorageError, match="Failed to write"):
        MetaProperties.generate().write(tmp_path / "absent")


# ---------------------------------------------------------------------------------------------------------------
# .kafka_cleanshutdown
# ---------------------------------------------------------------------------------------------------------------


def test_clean_shutdown_fixture_is_an_empty_legacy_marker():
    marker = CleanShutdownFile(fixture_path(*WILLIAM))
    assert marker.exists()
    assert marker.read() is None


def test_clean_shutdown_write_read_delete(tmp_path):
    marker = CleanShutdownFile(tmp_path)
    assert not marker.exists() and marker.read() is None
    marker.write(42)
    assert (tmp_path / ".kafka_cleanshutdown").read_bytes() == b'{"version":0,"brokerEpoch":42}'
    assert marker.exists() and marker.read() == 42
    marker.write(2**40)  # a long, as in Kafka
    assert CleanShutdownFile(tmp_path).read() == 2**40
    assert marker.delete() is True
    assert not marker.exists() and marker.delete() is False


@pytest.mark.parametrize(
    "content",
    [b"", b"garbage", b"[]", b'{"version":0}', b'{"version":0,"brokerEpoch":"x"}', b'{"brokerEpoch":true}', b"\xff"],
)
def test_clean_shutdown_unreadable_content_is_no_epoch(tmp_path, content):
    (tmp_path / ".kafka_cleanshutdown").write_bytes(content)
    marker = CleanShutdownFile(tmp_path)
    assert marker.exists() and marker.read() is None


def test_clean_shutdown_ignores_unknown_fields(tmp_path):
    (tmp_path / ".kafka_cleanshutdown").write_text('{"version":1,"brokerEpoch":7,"extra":true}')
    assert CleanShutdownFile(tmp_path).read() == 7


def test_clean_shutdown_write_failure(tmp_path):
    with pytest.raises(KafkaStorageError):
        CleanShutdownFile(tmp_path / "absent").write(1)


# ---------------------------------------------------------------------------------------------------------------
# partition.metadata
# ---------------------------------------------------------------------------------------------------------------


def test_partition_metadata_fixture():
    path = fixture_path(*BHEEM, "cities-0")
    metadata = PartitionMetadataFile(path)
    assert metadata.exists()
    assert metadata.read() == "Yjwa-XTYSF28JSz9pdcuyw"


def test_partition_metadata_write_is_byte_identical_to_kafka(tmp_path):
    fixture = fixture_path(*BHEEM, "cities-0", "partition.metadata")
    metadata = PartitionMetadataFile(tmp_path)
    assert not metadata.exists()
    metadata.write("Yjwa-XTYSF28JSz9pdcuyw")
    assert (tmp_path / "partition.metadata").read_bytes() == fixture.read_bytes()
    assert (tmp_path / "partition.metadata").read_bytes() == b"version: 0\ntopic_id: Yjwa-XTYSF28JSz9pdcuyw"
    assert not (tmp_path / "partition.metadata.tmp").exists()
    assert metadata.read() == "Yjwa-XTYSF28JSz9pdcuyw"


def test_partition_metadata_round_trip_and_overwrite(tmp_path):
    metadata = PartitionMetadataFile(tmp_path)
    first, second = new_uuid(), new_uuid()
    metadata.write(first)
    assert metadata.read() == first
    metadata.write(second)
    assert PartitionMetadataFile(tmp_path).read() == second
    assert metadata.delete() and not metadata.exists()


def test_partition_metadata_write_rejects_bad_ids(tmp_path):
    with pytest.raises(ValueError, match="zero topic id"):
        PartitionMetadataFile(tmp_path).write(ZERO_UUID)
    with pytest.raises(ValueError):
        PartitionMetadataFile(tmp_path).write("not-a-uuid")
    assert not (tmp_path / "partition.metadata").exists()


def test_partition_metadata_write_failure(tmp_path):
    with pytest.raises(KafkaStorageError, match="Error while writing partition metadata file"):
        PartitionMetadataFile(tmp_path / "absent").write(new_uuid())


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "Malformed line in partition metadata file [{p}]: None"),
        ("version: 0", "Malformed line in partition metadata file [{p}]: None"),
        ("version 0\ntopic_id: Yjwa-XTYSF28JSz9pdcuyw", "Malformed line in partition metadata file [{p}]: version 0"),
        ("version:0\ntopic_id: Yjwa-XTYSF28JSz9pdcuyw", "Malformed line in partition metadata file [{p}]: version:0"),
        ("version: x\ntopic_id: Yjwa-XTYSF28JSz9pdcuyw", "Malformed line in partition metadata file [{p}]: version: x"),
        ("vers: 0\ntopic_id: Yjwa-XTYSF28JSz9pdcuyw", "Malformed line in partition metadata file [{p}]: vers: 0"),
        ("version: -1\ntopic_id: Yjwa-XTYSF28JSz9pdcuyw", "Unrecognized version of partition metadata file ({p}): -1"),
        ("version: 0\ntopicid: Yjwa-XTYSF28JSz9pdcuyw", "Malformed line in partition metadata file [{p}]: topicid: "),
        ("version: 0\ntopic_id: short", "Malformed line in partition metadata file [{p}]: topic_id: short"),
        (f"version: 0\ntopic_id: {ZERO_UUID}", "Invalid topic ID in partition metadata file ({p})"),
    ],
)
def test_partition_metadata_read_rejects(tmp_path, text, message):
    (tmp_path / "partition.metadata").write_text(text)
    metadata = PartitionMetadataFile(tmp_path)
    with pytest.raises(KafkaStorageError) as info:
        metadata.read()
    assert str(info.value).startswith(message.format(p=metadata.path.absolute()))


def test_partition_metadata_read_tolerates_what_kafka_tolerates(tmp_path):
    # Kafka splits on ':\s+' (several spaces or a tab are fine), reads lines with any line ending,
    # and only refuses versions below 0, so a newer file stays readable after a downgrade.
    (tmp_path / "partition.metadata").write_text("version:\t 1\r\ntopic_id:   Yjwa-XTYSF28JSz9pdcuyw\n", newline="")
    assert PartitionMetadataFile(tmp_path).read() == "Yjwa-XTYSF28JSz9pdcuyw"


def test_partition_metadata_read_missing(tmp_path):
    with pytest.raises(KafkaStorageError, match="Error while reading partition metadata file"):
        PartitionMetadataFile(tmp_path).read()


# ---------------------------------------------------------------------------------------------------------------
# Topic names
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["a", "cities", "my.topic_name-1", "A" * 249, "__consumer_offsets", "-x", ".a", "a.."])
def test_valid_topic_names(name):
    validate_topic_name(name)
    assert is_valid_topic_name(name)


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("", "the empty string is not allowed"),
        (".", "'.' is not allowed"),
        ("..", "'..' is not allowed"),
        ("a" * 250, f"the length of '{'a' * 250}' is longer than the max allowed length 249"),
        ("../x", "'../x' contains one or more characters other than ASCII alphanumerics, '.', '_' and '-'"),
        ("a/b", "'a/b' contains one or more characters other than ASCII alphanumerics, '.', '_' and '-'"),
        ("ünicode", "'ünicode' contains one or more characters other than ASCII alphanumerics, '.', '_' and '-'"),
    ],
)
def test_invalid_topic_names_with_kafka_messages(name, reason):
    with pytest.raises(InvalidTopicError) as info:
        validate_topic_name(name)
    assert str(info.value) == f"Topic name is invalid: {reason}"
    assert not is_valid_topic_name(name)


@pytest.mark.parametrize(
    "name",
    ["../etc", "..\\x", "/abs", "a\x00b", "a b", "a\nb", "x/../../y", "~root", "$HOME", "a:b", "٣", "ａ", "\u200b"],
)
def test_path_traversal_and_odd_names_are_rejected(name):
    with pytest.raises(InvalidTopicError):
        validate_topic_name(name)


def test_length_counts_utf16_units_like_java():
    # 125 astral characters are 250 Java chars: too long, before the character check.
    with pytest.raises(InvalidTopicError, match="longer than the max allowed length 249"):
        validate_topic_name("😀" * 125)


def test_non_string_topic_name():
    with pytest.raises(InvalidTopicError):
        validate_topic_name(None)  # type: ignore[arg-type]


def test_every_valid_name_stays_inside_the_log_dir(tmp_path):
    for name in ["a", "-", "_", "...", ".a", "a.", "-.-", "A" * 249]:
        validate_topic_name(name)
        target = (tmp_path / f"{name}-0").resolve()
        assert target.parent == tmp_path.resolve()


def test_collision_chars():
    assert has_collision_chars("a.b") and has_collision_chars("a_b")
    assert not has_collision_chars("ab-c")
    assert unify_collision_chars("a.b_c") == "a_b_c"


# ---------------------------------------------------------------------------------------------------------------
# kafkalog-topics.json
# ---------------------------------------------------------------------------------------------------------------


@pytest.fixture
def dirs(tmp_path):
    result = [tmp_path / "d1", tmp_path / "d2", tmp_path / "d3"]
    for d in result:
        d.mkdir()
    return result


def read_copy(directory: Path) -> dict:
    return json.loads((directory / TOPICS_FILE).read_text())


def test_store_empty(dirs):
    store = TopicConfigStore(dirs).load()
    assert store.topics() == [] and store.get("x") is None and store.generation == 0
    assert not any((d / TOPICS_FILE).exists() for d in dirs)


def test_store_put_get_remove_persist(dirs):
    store = TopicConfigStore(dirs)
    a = TopicState(new_uuid(), 3, {"retention.ms": "1000"})
    b = TopicState(new_uuid(), 1)
    store.put("a", a)
    store.put("b", b)
    assert store.topics() == ["a", "b"] and "a" in store
    assert store.get("a") == a and store.get("b") == b
    assert store.generation == 2
    for d in dirs:
        copy = read_copy(d)
        assert copy["generation"] == 2 and sorted(copy["topics"]) == ["a", "b"]
        assert copy["topics"]["a"] == {
            "topic_id": a.topic_id,
            "partitions": 3,
            "config": {"retention.ms": "1000"},
            "origin": "kafkalog",
        }
        assert not (d / (TOPICS_FILE + ".tmp")).exists()

    reopened = TopicConfigStore(dirs).load()
    assert reopened.get("a") == a and reopened.generation == 2

    assert reopened.remove("a") is True
    assert reopened.remove("a") is False
    assert reopened.topics() == ["b"] and reopened.generation == 3
    assert TopicConfigStore(dirs).topics() == ["b"]  # loads lazily on first use


def test_store_returns_copies(dirs):
    store = TopicConfigStore(dirs)
    state = TopicState(new_uuid(), 2, {"k": "v"})
    store.put("t", state)
    state.config["k"] = "changed"
    got = store.get("t")
    got.config["k"] = "changed too"
    assert store.get("t").config == {"k": "v"}


def test_store_takes_the_highest_generation(dirs):
    store = TopicConfigStore(dirs)
    store.put("old", TopicState(new_uuid(), 1))
    stale = (dirs[0] / TOPICS_FILE).read_bytes()
    store.put("new", TopicState(new_uuid(), 2))
    (dirs[0] / TOPICS_FILE).write_bytes(stale)  # d1 missed the last write
    (dirs[2] / TOPICS_FILE).unlink()  # d3 lost its copy
    reloaded = TopicConfigStore(dirs).load()
    assert reloaded.generation == 2 and reloaded.topics() == ["new", "old"]
    # The order of the dirs does not matter.
    assert TopicConfigStore(list(reversed(dirs))).load().topics() == ["new", "old"]
    # The next write brings every copy up to date.
    reloaded.put("third", TopicState(new_uuid(), 1))
    assert all(read_copy(d)["generation"] == 3 for d in dirs)


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"{not json",
        b"\xff\xfe",
        b"[]",
        b'{"version": 1, "topics": {}}',
        b'{"version": 99, "generation": 9, "topics": {}}',
        b'{"version": 1, "generation": -1, "topics": {}}',
        b'{"version": 1, "generation": "9", "topics": {}}',
        b'{"version": 1, "generation": 9, "topics": []}',
        b'{"version": 1, "generation": 9, "topics": {"t": {"partitions": 1}}}',
        b'{"version": 1, "generation": 9, "topics": {"t": {"topic_id": "Yjwa-XTYSF28JSz9pdcuyw", "partitions": 0}}}',
        b'{"version": 1, "generation": 9, "topics": {"../x": {"topic_id": "Yjwa-XTYSF28JSz9pdcuyw", "partitions": 1}}}',
        b'{"version": 1, "generation": 9, "topics": {"t": {"topic_id": "bad", "partitions": 1}}}',
        b'{"version": 1, "generation": 9, "topics": {"t": {"topic_id": "Yjwa-XTYSF28JSz9pdcuyw", "partitions": 1, '
        b'"config": {"k": 1}}}}',
    ],
)
def test_store_ignores_corrupt_copies(dirs, caplog, content):
    store = TopicConfigStore(dirs)
    good = TopicState(new_uuid(), 4)
    store.put("good", good)
    (dirs[1] / TOPICS_FILE).write_bytes(content)
    with caplog.at_level(logging.WARNING, logger="kafkalog.logdir"):
        reloaded = TopicConfigStore(dirs).load()
    assert reloaded.topics() == ["good"] and reloaded.get("good") == good
    assert any("Ignoring the unreadable topic state file" in r.getMessage() for r in caplog.records)


def test_store_all_copies_corrupt_starts_empty(dirs, caplog):
    for d in dirs:
        (d / TOPICS_FILE).write_text("garbage")
    with caplog.at_level(logging.WARNING, logger="kafkalog.logdir"):
        store = TopicConfigStore(dirs).load()
    assert store.topics() == [] and store.generation == 0
    assert len(caplog.records) == 3


def test_store_unreadable_copy(dirs):
    TopicConfigStore(dirs).put("t", TopicState(new_uuid(), 1))
    (dirs[0] / TOPICS_FILE).unlink()
    (dirs[0] / TOPICS_FILE).mkdir()  # reading it raises IsADirectoryError
    assert TopicConfigStore(dirs).load().topics() == ["t"]


def test_store_survives_a_dir_failing_on_write(dirs, caplog):
    store = TopicConfigStore(dirs).load()
    os.rmdir(dirs[1])  # this dir is gone
    with caplog.at_level(logging.WARNING, logger="kafkalog.logdir"):
        store.put("t", TopicState(new_uuid(), 1))
    assert store.topics() == ["t"]
    assert any("Failed to write the topic state file" in r.getMessage() for r in caplog.records)
    assert read_copy(dirs[0])["topics"].keys() == {"t"}


def test_store_fails_when_no_copy_can_be_written(tmp_path):
    store = TopicConfigStore([tmp_path / "gone1", tmp_path / "gone2"]).load()
    with pytest.raises(KafkaStorageError, match="every log dir"):
        store.put("t", TopicState(new_uuid(), 1))
    assert store.topics() == [] and store.generation == 0  # nothing was committed


def test_store_validates_what_it_stores(dirs):
    store = TopicConfigStore(dirs)
    with pytest.raises(InvalidTopicError):
        store.put("../escape", TopicState(new_uuid(), 1))
    with pytest.raises(InvalidPartitionsError):
        store.put("t", TopicState(new_uuid(), 0))
    with pytest.raises(ValueError, match="Invalid topic id"):
        store.put("t", TopicState("nope", 1))
    with pytest.raises(ValueError, match="strings to strings"):
        store.put("t", TopicState(new_uuid(), 1, {"k": 5}))  # type: ignore[dict-item]
    assert store.topics() == []
    assert not any((d / TOPICS_FILE).exists() for d in dirs)


def test_store_needs_a_dir():
    with pytest.raises(ValueError):
        TopicConfigStore([])


def test_store_concurrent_puts(dirs):
    store = TopicConfigStore(dirs)
    names = [f"t{i}" for i in range(20)]
    threads = [threading.Thread(target=store.put, args=(n, TopicState(new_uuid(), 1))) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert store.topics() == sorted(names) and store.generation == 20
    assert TopicConfigStore(dirs).load().topics() == sorted(names)
