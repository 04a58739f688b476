"""Broker and topic configs: Kafka's defaults (spec section 13), precedence, validation, properties parsing."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from conftest import fixture_path
from kafkalog.errors import InvalidConfigurationError
from kafkalog.layout import INT64_MAX as LONG_MAX
from kafkalog.storage.config import TOPIC_KEYS, BrokerConfig, LogConfig
from kafkalog.storage.properties import load_properties, parse_properties

HOUR = 3_600_000
WEEK = 168 * HOUR

# ---------------------------------------------------------------------------------------------------------------
# java.util.Properties
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("a=1\nb=2\n", {"a": "1", "b": "2"}),
        ("a:1", {"a": "1"}),
        ("a 1", {"a": "1"}),
        ("a\t \f1", {"a": "1"}),
        ("a = 1", {"a": "1"}),
        ("a : = 1", {"a": "= 1"}),  # only one separator is consumed
        ("a==1", {"a": "=1"}),
        ("   a=1", {"a": "1"}),  # leading whitespace
        ("a=1   ", {"a": "1   "}),  # trailing whitespace stays in the value
        ("a", {"a": ""}),
        ("a=", {"a": ""}),
        ("# comment\n! also\n  # indented\n\n   \na=1", {"a": "1"}),
        ("a=1#not a comment", {"a": "1#not a comment"}),
        ("a=1\na=2", {"a": "2"}),  # the last duplicate wins
        ("a\\=b=c", {"a=b": "c"}),  # escaped separators in keys
        ("a\\:b:c", {"a:b": "c"}),
        ("a\\ b c", {"a b": "c"}),
        ("a=\\u0041\\u00e9\\u4e2d", {"a": "Aé中"}),
        ("\\u0041=x", {"A": "x"}),
        ("a=\\t\\n\\r\\f", {"a": "\t\n\r\f"}),
        ("a=\\q\\\\", {"a": "q\\"}),  # an unknown escape is the char itself; \\ is a backslash
        ("a=x\\\n   y\\\n\tz", {"a": "xyz"}),  # continuations drop the next line's leading whitespace
        ("a=x\\\r\n  y", {"a": "xy"}),
        ("a=x\\\r  y", {"a": "xy"}),
        ("a=x\\\\\nb=y", {"a": "x\\", "b": "y"}),  # an even run of backslashes does not continue
        ("a=x\\\n# not a comment", {"a": "x# not a comment"}),
        ("a=x\\\n   \nb=y", {"a": "x", "b": "y"}),  # a blank continuation line ends the value
        ("a=x\\", {"a": "x"}),  # a backslash at end of file is dropped
        ("# ends with backslash \\\na=1", {"a": "1"}),  # comments never continue
        ("k\\\n  ey=v", {"key": "v"}),
        ("a=1\r\nb=2\rc=3", {"a": "1", "b": "2", "c": "3"}),
        ("", {}),
    ],
)
def test_parse_properties(text: str, expected: dict[str, str]) -> None:
    assert parse_properties(text) == expected


def test_malformed_unicode_escape_names_the_line() -> None:
    with pytest.raises(InvalidConfigurationError, match=r"Malformed \\uxxxx encoding on line 3"):
        parse_properties("a=1\n# x\nb=\\u12G4\n")
    with pytest.raises(InvalidConfigurationError, match="line 1"):
        parse_properties("b=\\u12")


def test_load_properties_reads_latin1_and_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_bytes(b"name=caf\xe9\nlog.dirs=/data/a,/data/b\n")
    assert load_properties(path) == {"name": "café", "log.dirs": "/data/a,/data/b"}
    path.write_bytes(b"x=\\uZZZZ\n")
    with pytest.raises(InvalidConfigurationError) as info:
        load_properties(path)
    assert info.value.path == str(path)


def test_load_real_meta_properties() -> None:
    path = fixture_path("broker-logs", "donaldy-kafka271", "kafka-logs", "meta.properties")
    assert load_properties(path) == {"cluster.id": "d0053poFTbGwSWThjV1DEg", "version": "0", "broker.id": "0"}


# ---------------------------------------------------------------------------------------------------------------
# BrokerConfig
# ---------------------------------------------------------------------------------------------------------------

BROKER_DEFAULTS = {
    "log_dirs": ("/tmp/kafka-logs",),
    "num_partitions": 1,
    "log_segment_bytes": 1073741824,
    "log_roll_ms": 604800000,
    "log_roll_jitter_ms": 0,
    "log_index_size_max_bytes": 10485760,
    "log_index_interval_bytes": 4096,
    "log_retention_ms": 604800000,
    "log_retention_bytes": -1,
    "log_retention_check_interval_ms": 300000,
    "log_cleanup_policy": ("delete",),
    "log_segment_delete_delay_ms": 60000,
    "log_flush_interval_messages": 9223372036854775807,
    "log_flush_interval_ms": 9223372036854775807,
    "log_flush_scheduler_interval_ms": 9223372036854775807,
    "log_flush_offset_checkpoint_interval_ms": 60000,
    "log_flush_start_offset_checkpoint_interval_ms": 60000,
    "log_preallocate": False,
    "message_max_bytes": 1048588,
    "log_message_timestamp_type": "CreateTime",
    "log_message_timestamp_before_max_ms": LONG_MAX,
    "log_message_timestamp_after_max_ms": LONG_MAX,
    "log_message_timestamp_difference_max_ms": LONG_MAX,
    "log_message_format_version": "3.0-IV1",
    "compression_type": "producer",
    "compression_gzip_level": -1,
    "compression_lz4_level": 9,
    "compression_zstd_level": 3,
    "log_cleaner_enable": True,
    "log_cleaner_threads": 1,
    "log_cleaner_dedupe_buffer_size": 134217728,
    "log_cleaner_io_buffer_size": 524288,
    "log_cleaner_io_buffer_load_factor": 0.9,
    "log_cleaner_io_max_bytes_per_second": 1.7976931348623157e308,
    "log_cleaner_backoff_ms": 15000,
    "log_cleaner_min_cleanable_ratio": 0.5,
    "log_cleaner_delete_retention_ms": 86400000,
    "log_cleaner_min_compaction_lag_ms": 0,
    "log_cleaner_max_compaction_lag_ms": LONG_MAX,
    "num_recovery_threads_per_data_dir": 1,
    "log_initial_task_delay_ms": 30000,
    "replica_high_watermark_checkpoint_interval_ms": 5000,
    "min_insync_replicas": 1,
    "unclean_leader_election_enable": False,
}


@pytest.mark.parametrize("attr, expected", BROKER_DEFAULTS.items())
def test_broker_defaults(attr: str, expected: object) -> None:
    assert getattr(BrokerConfig(), attr) == expected


def test_broker_nullable_keys_default_to_none() -> None:
    b = BrokerConfig()
    for name in ("log.dirs", "log.roll.ms", "log.roll.jitter.ms", "log.retention.ms", "log.retention.minutes"):
        assert b.get(name) is None
    assert b.get("log.flush.interval.ms") is None and b.log_flush_interval_ms == LONG_MAX


@pytest.mark.parametrize(
    "props, expected",
    [
        ({"log.retention.hours": "1"}, HOUR),
        ({"log.retention.minutes": "30", "log.retention.hours": "1"}, 30 * 60_000),
        ({"log.retention.ms": "1234", "log.retention.minutes": "30", "log.retention.hours": "1"}, 1234),
        ({"log.retention.ms": "-5"}, -1),  # any negative is unlimited
        ({"log.retention.hours": "-1"}, -1),
        ({"log.retention.minutes": "-10", "log.retention.hours": "5"}, -1),
        ({"log.retention.hours": "2147483647"}, 2147483647 * HOUR),  # a long product, no int overflow
    ],
)
def test_retention_precedence(props: dict, expected: int) -> None:
    assert BrokerConfig(props).log_retention_ms == expected


def test_roll_and_jitter_precedence() -> None:
    assert BrokerConfig({"log.roll.hours": "2"}).log_roll_ms == 2 * HOUR
    assert BrokerConfig({"log.roll.hours": "2", "log.roll.ms": "500"}).log_roll_ms == 500
    assert BrokerConfig({"log.roll.jitter.hours": "3"}).log_roll_jitter_ms == 3 * HOUR
    assert BrokerConfig({"log.roll.jitter.hours": "3", "log.roll.jitter.ms": "7"}).log_roll_jitter_ms == 7


def test_log_dirs_win_over_log_dir() -> None:
    assert BrokerConfig({"log.dir": "/a"}).log_dirs == ("/a",)
    assert BrokerConfig({"log.dir": "/a", "log.dirs": "/b , /c,"}).log_dirs == ("/b", "/c")


def test_flush_interval_falls_back_to_scheduler_interval() -> None:
    assert BrokerConfig({"log.flush.scheduler.interval.ms": "2000"}).log_flush_interval_ms == 2000
    b = BrokerConfig({"log.flush.scheduler.interval.ms": "2000", "log.flush.interval.ms": "10"})
    assert b.log_flush_interval_ms == 10


def test_timestamp_bounds_fall_back_to_difference() -> None:
    b = BrokerConfig({"log.message.timestamp.difference.max.ms": "1000"})
    assert b.log_message_timestamp_before_max_ms == 1000 and b.log_message_timestamp_after_max_ms == 1000
    b = BrokerConfig({"log.message.timestamp.difference.max.ms": "1000", "log.message.timestamp.after.max.ms": "5"})
    assert b.log_message_timestamp_before_max_ms == 1000 and b.log_message_timestamp_after_max_ms == 5


def test_python_values_and_strings_agree() -> None:
    strings = BrokerConfig({"log.segment.bytes": "2048", "log.preallocate": "TRUE", "log.cleanup.policy": "compact"})
    values = BrokerConfig({"log.segment.bytes": 2048, "log.preallocate": True, "log.cleanup.policy": ["compact"]})
    for attr in ("log_segment_bytes", "log_preallocate", "log_cleanup_policy"):
        assert getattr(strings, attr) == getattr(values, attr)
    assert strings.log_preallocate is True and strings.log_cleanup_policy == ("compact",)


def test_unknown_keys_are_kept_unvalidated() -> None:
    b = BrokerConfig({"broker.id": "0", "listeners": "PLAINTEXT://:9092", "zookeeper.connect": "??"})
    assert b.unknown == {"listeners": "PLAINTEXT://:9092", "zookeeper.connect": "??"}
    assert b.get("broker.id") == 0 and b.node_id == 0  # broker.id is known: node.id's ZooKeeper-era synonym
    assert b.originals["listeners"] == "PLAINTEXT://:9092"


@pytest.mark.parametrize(
    "key, value, rule",
    [
        ("log.segment.bytes", "13", "Value must be at least 14"),
        ("log.segment.bytes", "2147483648", "Not a number of type INT"),
        ("log.segment.bytes", "1e6", "Not a number of type INT"),
        ("log.segment.bytes", "1_000", "Not a number of type INT"),
        ("log.segment.bytes", True, "Expected value to be a 32-bit integer"),
        ("num.partitions", "0", "Value must be at least 1"),
        ("log.roll.hours", "0", "Value must be at least 1"),
        ("log.roll.ms", "0", "log.roll.ms must be greater than or equal to 1"),
        ("log.roll.jitter.ms", "-1", "log.roll.jitter.ms must be at least 0"),
        ("log.retention.ms", "0", "unlimited \\(-1\\) or, at least 1"),
        ("log.retention.bytes", "9223372036854775808", "Not a number of type LONG"),
        ("log.retention.check.interval.ms", "0", "Value must be at least 1"),
        ("log.cleanup.policy", "compact,remove", "String must be one of: compact, delete"),
        ("log.cleanup.policy", "Compact", "String must be one of"),
        ("log.index.size.max.bytes", "3", "Value must be at least 4"),
        ("log.flush.interval.messages", "0", "Value must be at least 1"),
        ("log.preallocate", "yes", "Expected value to be either true or false"),
        ("log.message.timestamp.type", "createtime", "String must be one of: CreateTime, LogAppendTime"),
        ("log.message.timestamp.before.max.ms", "-1", "Value must be at least 0"),
        ("compression.type", "brotli", "String must be one of"),
        ("compression.gzip.level", "0", "Value must be between 1 and 9 or -1"),
        ("compression.gzip.level", "10", "between 1 and 9 or -1"),
        ("compression.lz4.level", "18", "Value must be no more than 17"),
        ("compression.zstd.level", "23", "Value must be no more than 22"),
        ("compression.zstd.level", "-131073", "Value must be at least -131072"),
        ("log.cleaner.min.cleanable.ratio", "1.5", "Value must be no more than 1"),
        ("log.cleaner.min.cleanable.ratio", "half", "Not a number of type DOUBLE"),
        ("log.cleaner.max.compaction.lag.ms", "0", "Value must be at least 1"),
        ("log.cleaner.dedupe.buffer.size", "1048576", "must be more than 1MB per cleaner thread"),
        ("log.cleaner.threads", "0", "must be more than 1MB per cleaner thread"),
        ("log.cleaner.threads", "-1", "Value must be at least 0"),
        ("num.recovery.threads.per.data.dir", "0", "Value must be at least 1"),
        ("min.insync.replicas", "0", "Value must be at least 1"),
        ("log.message.format.version", "banana", "Version banana is not a valid version"),
        ("log.dirs", " , ", "At least one log directory must be defined"),
        ("log.cleaner.min.compaction.lag.ms", "10", None),  # with max 5 below
    ],
)
def test_broker_validation_names_key_value_and_rule(key: str, value: object, rule: str | None) -> None:
    props = {key: value}
    if rule is None:
        props["log.cleaner.max.compaction.lag.ms"] = "5"
        rule = r"conflict topic config setting log.cleaner.min.compaction.lag.ms \(10\) > .*\(5\)"
    with pytest.raises(InvalidConfigurationError, match=rule) as info:
        BrokerConfig(props)
    message = str(info.value)
    assert message.startswith("Invalid value ")
    assert " for configuration " in message


def test_broker_error_wording_matches_kafka() -> None:
    with pytest.raises(InvalidConfigurationError) as info:
        BrokerConfig({"log.segment.bytes": "13"})
    assert str(info.value) == "Invalid value 13 for configuration log.segment.bytes: Value must be at least 14"


def test_double_parsing_follows_java() -> None:
    assert BrokerConfig({"log.cleaner.io.buffer.load.factor": " 0.75d "}).log_cleaner_io_buffer_load_factor == 0.75
    assert BrokerConfig({"log.cleaner.io.max.bytes.per.second": "1e3"}).log_cleaner_io_max_bytes_per_second == 1000.0
    assert BrokerConfig({"log.cleaner.min.cleanable.ratio": 1}).log_cleaner_min_cleanable_ratio == 1.0
    with pytest.raises(InvalidConfigurationError):
        BrokerConfig({"log.cleaner.io.buffer.load.factor": "inf"})  # Java spells it Infinity


def test_broker_from_file_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text(
        "# Kafka broker\n"
        "broker.id=3\n"
        "log.dirs=/var/kafka/a,\\\n"
        "         /var/kafka/b\n"
        "log.segment.bytes : 52428800\n"
        "log.retention.minutes 90\n"
        "log.cleanup.policy=compact, delete\n"
        "log.preallocate=true\n"
        "compression.type=zstd\n"
        "log.cleaner.threads=2\n",
        encoding="iso-8859-1",
    )
    b = BrokerConfig.from_file(path)
    assert b.log_dirs == ("/var/kafka/a", "/var/kafka/b")
    assert b.log_segment_bytes == 52428800
    assert b.log_retention_ms == 90 * 60_000
    assert b.log_cleanup_policy == ("compact", "delete")
    assert b.log_preallocate is True and b.compression_type == "zstd" and b.log_cleaner_threads == 2
    assert b.unknown == {} and b.node_id == 3
    assert b == BrokerConfig(load_properties(path))


def test_broker_config_is_immutable() -> None:
    b = BrokerConfig()
    with pytest.raises(AttributeError):
        b.log_segment_bytes = 5  # type: ignore[misc]


# ---------------------------------------------------------------------------------------------------------------
# LogConfig
# ---------------------------------------------------------------------------------------------------------------

TOPIC_DEFAULTS = {
    "segment_bytes": 1073741824,
    "segment_ms": WEEK,
    "segment_jitter_ms": 0,
    "segment_index_bytes": 10485760,
    "index_interval_bytes": 4096,
    "retention_ms": WEEK,
    "retention_bytes": -1,
    "cleanup_policy": ("delete",),
    "file_delete_delay_ms": 60000,
    "flush_messages": LONG_MAX,
    "flush_ms": LONG_MAX,
    "preallocate": False,
    "max_message_bytes": 1048588,
    "message_timestamp_type": "CreateTime",
    "message_timestamp_before_max_ms": LONG_MAX,
    "message_timestamp_after_max_ms": LONG_MAX,
    "message_timestamp_difference_max_ms": LONG_MAX,
    "compression_type": "producer",
    "compression_gzip_level": -1,
    "compression_lz4_level": 9,
    "compression_zstd_level": 3,
    "min_cleanable_dirty_ratio": 0.5,
    "delete_retention_ms": 86400000,
    "min_compaction_lag_ms": 0,
    "max_compaction_lag_ms": LONG_MAX,
    "min_insync_replicas": 1,
    "unclean_leader_election_enable": False,
    "message_format_version": "3.0-IV1",
    "local_retention_ms": WEEK,  # -2 → retention.ms
    "local_retention_bytes": -1,  # -2 → retention.bytes
    "compact": False,
    "delete": True,
    "max_segment_ms": WEEK,
    "initial_file_size": 0,
}


@pytest.mark.parametrize("attr, expected", TOPIC_DEFAULTS.items())
def test_topic_defaults(attr: str, expected: object) -> None:
    assert getattr(LogConfig(), attr) == expected


def test_default_topic_config_equals_one_built_from_a_default_broker() -> None:
    assert LogConfig().to_dict() == LogConfig(broker=BrokerConfig()).to_dict()
    assert LogConfig(broker={}).to_dict() == LogConfig().to_dict()


def test_to_dict_holds_every_topic_config() -> None:
    d = LogConfig().to_dict()
    assert set(d) == set(TOPIC_KEYS)
    assert d["local.retention.ms"] == -2 and d["message.timestamp.before.max.ms"] == LONG_MAX
    assert d["cleanup.policy"] == ("delete",)


@pytest.mark.parametrize(
    "broker, topic_name, attr, expected",
    [
        ({"log.segment.bytes": "1024"}, "segment.bytes", "segment_bytes", 1024),
        ({"log.roll.hours": "1"}, "segment.ms", "segment_ms", HOUR),
        ({"log.roll.ms": "77", "log.roll.hours": "1"}, "segment.ms", "segment_ms", 77),
        ({"log.roll.jitter.hours": "1"}, "segment.jitter.ms", "segment_jitter_ms", HOUR),
        ({"log.index.size.max.bytes": "4096"}, "segment.index.bytes", "segment_index_bytes", 4096),
        ({"log.index.interval.bytes": "100"}, "index.interval.bytes", "index_interval_bytes", 100),
        ({"log.retention.minutes": "2"}, "retention.ms", "retention_ms", 120_000),
        ({"log.retention.hours": "-1"}, "retention.ms", "retention_ms", -1),
        ({"log.retention.bytes": "999"}, "retention.bytes", "retention_bytes", 999),
        ({"log.cleanup.policy": "compact"}, "cleanup.policy", "cleanup_policy", ("compact",)),
        ({"log.segment.delete.delay.ms": "5"}, "file.delete.delay.ms", "file_delete_delay_ms", 5),
        ({"log.flush.interval.messages": "10"}, "flush.messages", "flush_messages", 10),
        ({"log.flush.scheduler.interval.ms": "3000"}, "flush.ms", "flush_ms", 3000),
        ({"log.flush.interval.ms": "20"}, "flush.ms", "flush_ms", 20),
        ({"log.preallocate": "true"}, "preallocate", "preallocate", True),
        ({"message.max.bytes": "500"}, "max.message.bytes", "max_message_bytes", 500),
        ({"log.message.timestamp.type": "LogAppendTime"}, "message.timestamp.type", "message_timestamp_type",
         "LogAppendTime"),
        ({"log.message.timestamp.before.max.ms": "9"}, "message.timestamp.before.max.ms",
         "message_timestamp_before_max_ms", 9),
        ({"log.message.timestamp.after.max.ms": "8"}, "message.timestamp.after.max.ms",
         "message_timestamp_after_max_ms", 8),
        ({"compression.type": "lz4"}, "compression.type", "compression_type", "lz4"),
        ({"compression.gzip.level": "9"}, "compression.gzip.level", "compression_gzip_level", 9),
        ({"compression.lz4.level": "1"}, "compression.lz4.level", "compression_lz4_level", 1),
        ({"compression.zstd.level": "-5"}, "compression.zstd.level", "compression_zstd_level", -5),
        ({"log.cleaner.min.cleanable.ratio": "0.1"}, "min.cleanable.dirty.ratio", "min_cleanable_dirty_ratio", 0.1),
        ({"log.cleaner.delete.retention.ms": "6"}, "delete.retention.ms", "delete_retention_ms", 6),
        ({"log.cleaner.min.compaction.lag.ms": "4"}, "min.compaction.lag.ms", "min_compaction_lag_ms", 4),
        ({"log.cleaner.max.compaction.lag.ms": "3"}, "max.compaction.lag.ms", "max_compaction_lag_ms", 3),
        ({"min.insync.replicas": "2"}, "min.insync.replicas", "min_insync_replicas", 2),
        ({"unclean.leader.election.enable": "true"}, "unclean.leader.election.enable",
         "unclean_leader_election_enable", True),
        ({"log.message.format.version": "2.8"}, "message.format.version", "message_format_version", "2.8"),
        ({"log.local.retention.ms": "11"}, "local.retention.ms", "local_retention_ms", 11),
    ],
)  # fmt: skip
def test_synonym_precedence_topic_over_broker_over_default(
    broker: dict, topic_name: str, attr: str, expected: object
) -> None:
    assert getattr(LogConfig(broker=broker), attr) == expected  # broker synonym beats the default
    override = TOPIC_KEYS[topic_name].default
    topic = LogConfig({topic_name: override}, broker=broker)
    assert topic.get(topic_name) == override  # the topic override beats the broker
    assert topic.overrides == {topic_name: override}
    assert LogConfig(broker=broker).overrides == {}


def test_topic_overrides_parse_strings_and_python_values() -> None:
    c = LogConfig({"segment.bytes": "2048", "cleanup.policy": "compact, delete", "preallocate": "true"})
    assert c.segment_bytes == 2048 and c.cleanup_policy == ("compact", "delete") and c.preallocate is True
    assert c.compact and c.delete
    c = LogConfig({"segment.bytes": 2048, "cleanup.policy": ["compact"], "min.cleanable.dirty.ratio": 0.25})
    assert c.cleanup_policy == ("compact",) and c.compact and not c.delete and c.min_cleanable_dirty_ratio == 0.25


def test_empty_cleanup_policy_neither_compacts_nor_deletes() -> None:
    c = LogConfig({"cleanup.policy": ""})
    assert c.cleanup_policy == () and not c.compact and not c.delete


def test_unknown_topic_config_name() -> None:
    with pytest.raises(InvalidConfigurationError, match=r"Unknown topic config name: log\.segment\.bytes"):
        LogConfig({"log.segment.bytes": "1024"})
    with pytest.raises(InvalidConfigurationError, match=r"Unknown topic config name: segment\.size"):
        LogConfig({"segment.size": "1"})


def test_kafka_topic_configs_outside_storage_are_accepted() -> None:
    c = LogConfig({"remote.storage.enable": "false", "leader.replication.throttled.replicas": "0:1,1:2"})
    assert c.overrides["leader.replication.throttled.replicas"] == ("0:1", "1:2")
    with pytest.raises(InvalidConfigurationError, match=r"follower\.replication\.throttled\.replicas"):
        LogConfig({"follower.replication.throttled.replicas": "x"})


@pytest.mark.parametrize(
    "name, value, rule",
    [
        ("segment.bytes", "13", "Value must be at least 14"),
        ("segment.ms", "0", "Value must be at least 1"),
        ("segment.jitter.ms", "-1", "Value must be at least 0"),
        ("segment.index.bytes", "3", "Value must be at least 4"),
        ("index.interval.bytes", "-1", "Value must be at least 0"),
        ("retention.ms", "-2", "Value must be at least -1"),
        ("flush.messages", "0", "Value must be at least 1"),
        ("flush.ms", "-1", "Value must be at least 0"),
        ("max.message.bytes", "-1", "Value must be at least 0"),
        ("file.delete.delay.ms", "-1", "Value must be at least 0"),
        ("delete.retention.ms", "-1", "Value must be at least 0"),
        ("min.compaction.lag.ms", "-1", "Value must be at least 0"),
        ("max.compaction.lag.ms", "0", "Value must be at least 1"),
        ("min.cleanable.dirty.ratio", "-0.1", "Value must be at least 0"),
        ("min.cleanable.dirty.ratio", "1.01", "Value must be no more than 1"),
        ("cleanup.policy", "remove", "String must be one of: compact, delete"),
        ("min.insync.replicas", "0", "Value must be at least 1"),
        ("compression.type", "none", "String must be one of: uncompressed, zstd, lz4, snappy, gzip, producer"),
        ("compression.type", "GZIP", "String must be one of"),
        ("compression.gzip.level", "0", "between 1 and 9 or -1"),
        ("compression.lz4.level", "0", "Value must be at least 1"),
        ("compression.zstd.level", "99", "Value must be no more than 22"),
        ("preallocate", "1", "Expected value to be either true or false"),
        ("message.timestamp.type", "NoTime", "String must be one of: CreateTime, LogAppendTime"),
        ("message.timestamp.before.max.ms", "-1", "Value must be at least 0"),
        ("message.timestamp.after.max.ms", "x", "Not a number of type LONG"),
        ("message.timestamp.difference.max.ms", "-1", "Value must be at least 0"),
        ("local.retention.ms", "-3", "Value must be at least -2"),
        ("local.retention.bytes", "-3", "Value must be at least -2"),
        ("unclean.leader.election.enable", "maybe", "either true or false"),
        ("segment.bytes", 1.5, "Expected value to be a 32-bit integer"),
    ],
)
def test_topic_validation_names_key_value_and_rule(name: str, value: object, rule: str) -> None:
    with pytest.raises(InvalidConfigurationError, match=rule) as info:
        LogConfig({name: value})
    assert str(info.value).startswith(f"Invalid value {value} for configuration {name}: ")


def test_list_errors_name_the_bad_element() -> None:
    """ValidList checks each element, and Kafka's message shows the element, not the whole list."""
    with pytest.raises(InvalidConfigurationError) as info:
        LogConfig({"cleanup.policy": "delete,"})
    assert str(info.value) == "Invalid value  for configuration cleanup.policy: String must be one of: compact, delete"
    with pytest.raises(InvalidConfigurationError, match=r"Invalid value remove for configuration log\.cleanup\.policy"):
        BrokerConfig({"log.cleanup.policy": "compact, remove"})


def test_min_compaction_lag_may_not_exceed_max() -> None:
    with pytest.raises(InvalidConfigurationError, match=r"min.compaction.lag.ms \(10\) > max.compaction.lag.ms"):
        LogConfig({"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"})
    with pytest.raises(InvalidConfigurationError, match="conflict"):  # the broker's max, the topic's min
        LogConfig({"min.compaction.lag.ms": "10"}, broker={"log.cleaner.max.compaction.lag.ms": "5"})


def test_bad_broker_values_fail_through_log_config() -> None:
    with pytest.raises(InvalidConfigurationError, match=r"log\.segment\.bytes"):
        LogConfig(broker={"log.segment.bytes": "1"})


def test_effective_timestamp_bounds() -> None:
    c = LogConfig({"message.timestamp.difference.max.ms": "1000"})
    assert c.message_timestamp_before_max_ms == 1000 and c.message_timestamp_after_max_ms == 1000
    c = LogConfig({"message.timestamp.difference.max.ms": "1000", "message.timestamp.before.max.ms": "7"})
    assert c.message_timestamp_before_max_ms == 7 and c.message_timestamp_after_max_ms == 1000
    assert c.to_dict()["message.timestamp.after.max.ms"] == LONG_MAX  # to_dict keeps the configured value
    c = LogConfig(broker={"log.message.timestamp.difference.max.ms": "500"})
    assert c.message_timestamp_before_max_ms == 500 and c.message_timestamp_after_max_ms == 500


@pytest.mark.parametrize(
    "overrides, expected",
    [
        ({}, WEEK),
        ({"segment.ms": "1000"}, 1000),
        ({"cleanup.policy": "compact"}, WEEK),  # max.compaction.lag.ms Long.MAX does not cap
        ({"cleanup.policy": "compact", "max.compaction.lag.ms": "500"}, 500),
        ({"cleanup.policy": "compact,delete", "max.compaction.lag.ms": "500", "segment.ms": "100"}, 100),
        ({"cleanup.policy": "delete", "max.compaction.lag.ms": "500"}, WEEK),  # only compacted topics
    ],
)
def test_max_segment_ms(overrides: dict, expected: int) -> None:
    assert LogConfig(overrides).max_segment_ms == expected


def test_initial_file_size() -> None:
    assert LogConfig({"segment.bytes": "4096"}).initial_file_size == 0
    assert LogConfig({"segment.bytes": "4096", "preallocate": "true"}).initial_file_size == 4096
    assert LogConfig(broker={"log.preallocate": "true"}).initial_file_size == 1073741824


def test_random_segment_jitter() -> None:
    assert LogConfig().random_segment_jitter(random.Random(1)) == 0  # jitter 0 → always 0
    c = LogConfig({"segment.jitter.ms": "1000"})
    draws = [c.random_segment_jitter(random.Random(seed)) for seed in range(200)]
    assert all(0 <= d < 1000 for d in draws) and len(set(draws)) > 100
    assert draws == [c.random_segment_jitter(random.Random(seed)) for seed in range(200)]  # seeded → repeatable
    # the bound is min(segment.jitter.ms, segment.ms)
    c = LogConfig({"segment.jitter.ms": "1000000", "segment.ms": "10"})
    assert all(0 <= c.random_segment_jitter(random.Random(s)) < 10 for s in range(100))
    assert 0 <= LogConfig({"segment.jitter.ms": "5"}).random_segment_jitter() < 5


def test_random_segment_jitter_matches_java_abs_of_next_int() -> None:
    class Fixed(random.Random):
        def __init__(self, bits: int) -> None:
            super().__init__()
            self.bits = bits

        def getrandbits(self, k: int) -> int:
            return self.bits

    c = LogConfig({"segment.jitter.ms": "1000"})
    assert c.random_segment_jitter(Fixed(0)) == 0  # Integer.MIN_VALUE → Utils.abs gives 0
    assert c.random_segment_jitter(Fixed(2**31 - 123)) == 123  # nextInt() == -123
    assert c.random_segment_jitter(Fixed(2**31 + 4321)) == 321  # nextInt() == 4321


def test_with_overrides() -> None:
    broker = BrokerConfig({"log.retention.hours": "1"})
    c = LogConfig({"segment.bytes": "2048"}, broker)
    d = c.with_overrides({"retention.ms": "5000", "cleanup.policy": "compact"})
    assert d.retention_ms == 5000 and d.segment_bytes == 2048 and d.compact
    assert d.overrides == {"segment.bytes": 2048, "retention.ms": 5000, "cleanup.policy": ("compact",)}
    assert c.retention_ms == HOUR and c.overrides == {"segment.bytes": 2048}  # the original is untouched
    e = d.with_overrides({"retention.ms": None})  # None deletes the override: back to the broker's value
    assert e.retention_ms == HOUR and "retention.ms" not in e.overrides
    assert e.broker is broker
    with pytest.raises(InvalidConfigurationError, match="Unknown topic config name"):
        c.with_overrides({"bogus": "1"})
    with pytest.raises(InvalidConfigurationError, match=r"segment\.ms"):
        c.with_overrides({"segment.ms": "0"})


def test_log_config_is_immutable_and_comparable() -> None:
    c = LogConfig({"segment.bytes": "2048"})
    with pytest.raises(AttributeError):
        c.segment_bytes = 1  # type: ignore[misc]
    with pytest.raises(AttributeError):
        del c.retention_ms
    assert c == LogConfig({"segment.bytes": 2048})
    assert c != LogConfig()
    assert "segment.bytes" in repr(c)
    c.overrides["segment.bytes"] = 1  # a copy
    assert c.segment_bytes == 2048


def test_log_config_from_a_broker_file(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text("log.roll.hours=24\nlog.cleanup.policy=compact\nlog.cleaner.max.compaction.lag.ms=3600000\n")
    c = LogConfig({"segment.bytes": "1048576"}, BrokerConfig.from_file(path))
    assert c.segment_ms == 24 * HOUR and c.max_segment_ms == HOUR and c.segment_bytes == 1048576
