"""Broker and topic log configuration, with Kafka's names, types, defaults, ranges and precedence rules.

- ``properties.parse_properties`` / ``load_properties`` read ``server.properties`` (``java.util.Properties``).
- ``BrokerConfig`` holds the broker-level ``log.*`` configs (KafkaConfig's getters: ms > minutes > hours, ...).
- ``LogConfig`` holds one topic's configs: topic override > broker synonym (ServerTopicConfigSynonyms) > default.

Values follow Kafka's ConfigDef: strings are parsed as Kafka parses them (INT = 32-bit, LONG = 64-bit, ...),
and a bad value raises InvalidConfigurationError worded like Kafka's ConfigException:
``Invalid value X for configuration Y: <rule>``.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from os import PathLike
from typing import Any

from ..errors import InvalidConfigurationError
from ..layout import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN
from ..record.compression import GZIP, LEVELS, LZ4, ZSTD
from .properties import load_properties

DOUBLE_MAX = 1.7976931348623157e308
RECORD_OVERHEAD_V0 = 14  # LegacyRecord.RECORD_OVERHEAD_V0: the minimum segment.bytes

COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")  # BrokerCompressionType names
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
CLEANUP_POLICIES = ("compact", "delete")

MS_PER_MINUTE = 60_000
MS_PER_HOUR = 3_600_000

# ---------------------------------------------------------------------------------------------------------------
# ConfigDef: types and validators
# ---------------------------------------------------------------------------------------------------------------

_INT_RE = re.compile(r"[+-]?[0-9]+")
_DOUBLE_RE = re.compile(r"[+-]?(NaN|Infinity|([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?[fFdD]?)")
_LIST_SPLIT = re.compile(r"\s*,\s*")


def _show(value: Any) -> str:
    """A value as Java's toString would print it in a ConfigException."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    return str(value)


def config_text(value: Any) -> str | None:
    """A parsed config value as Kafka prints it (DescribeConfigs, kafka-configs): lists comma-joined, booleans in
    lower case, None (no value) as None."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return str(value)


def invalid(name: str, value: Any, rule: str) -> InvalidConfigurationError:
    """Kafka's ConfigException(name, value, message) wording."""
    return InvalidConfigurationError(f"Invalid value {_show(value)} for configuration {name}: {rule}")


def _parse_integer(name: str, value: Any, kind: str, lo: int, hi: int) -> int:
    bits = 32 if kind == "INT" else 64
    if isinstance(value, str):
        text = value.strip()
        if not _INT_RE.fullmatch(text) or not lo <= int(text) <= hi:
            raise invalid(name, value, f"Not a number of type {kind}")
        return int(text)
    if isinstance(value, int) and not isinstance(value, bool):
        if not lo <= value <= hi:
            raise invalid(name, value, f"Expected value to be a {bits}-bit integer, but it was out of range")
        return value
    raise invalid(name, value, f"Expected value to be a {bits}-bit integer, but it was a {type(value).__name__}")


def _parse_double(name: str, value: Any) -> float:
    if isinstance(value, str):
        text = value.strip()
        if not _DOUBLE_RE.fullmatch(text):
            raise invalid(name, value, "Not a number of type DOUBLE")
        text = text.rstrip("fFdD") if not text.endswith("Infinity") else text
        return float(text.replace("Infinity", "inf"))
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    raise invalid(name, value, f"Expected value to be a double, but it was a {type(value).__name__}")


def _parse_boolean(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise invalid(name, value, "Expected value to be either true or false")


def _parse_string(name: str, value: Any) -> str:
    if isinstance(value, str):
        return value.strip()
    raise invalid(name, value, f"Expected value to be a string, but it was a {type(value).__name__}")


def _parse_list(name: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        text = value.strip()
        return tuple(_LIST_SPLIT.split(text)) if text else ()
    if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise invalid(name, value, f"Expected a comma separated list, but it was a {type(value).__name__}")


_PARSERS: dict[str, Callable[[str, Any], Any]] = {
    "INT": lambda n, v: _parse_integer(n, v, "INT", INT32_MIN, INT32_MAX),
    "LONG": lambda n, v: _parse_integer(n, v, "LONG", INT64_MIN, INT64_MAX),
    "DOUBLE": _parse_double,
    "BOOLEAN": _parse_boolean,
    "STRING": _parse_string,
    "LIST": _parse_list,
}

Validator = Callable[[str, Any], None]


def at_least(minimum: int) -> Validator:
    """ConfigDef.Range.atLeast."""

    def check(name: str, value: Any) -> None:
        if value < minimum:
            raise invalid(name, value, f"Value must be at least {minimum}")

    return check


def between(minimum: int, maximum: int) -> Validator:
    """ConfigDef.Range.between (NaN passes, as Java's comparisons let it)."""

    def check(name: str, value: Any) -> None:
        if value < minimum:
            raise invalid(name, value, f"Value must be at least {minimum}")
        if value > maximum:
            raise invalid(name, value, f"Value must be no more than {maximum}")

    return check


def one_of(*allowed: str) -> Validator:
    """ConfigDef.ValidString.in (case-sensitive)."""

    def check(name: str, value: Any) -> None:
        if value not in allowed:
            raise invalid(name, value, f"String must be one of: {', '.join(allowed)}")

    return check


def each_one_of(*allowed: str) -> Validator:
    """ConfigDef.ValidList.in: every element must be one of ``allowed``."""

    def check(name: str, value: Any) -> None:
        for item in value:
            if item not in allowed:
                raise invalid(name, item, f"String must be one of: {', '.join(allowed)}")

    return check


def _gzip_level(name: str, value: Any) -> None:
    spec = LEVELS[GZIP]
    if value != spec.default and not spec.minimum <= value <= spec.maximum:
        raise invalid(name, value, f"Value must be between {spec.minimum} and {spec.maximum} or {spec.default}")


def _level_range(codec: int) -> Validator:
    return between(LEVELS[codec].minimum, LEVELS[codec].maximum)


_VERSION_RE = re.compile(r"0\.(8\.[0-2]|9\.0|10\.[0-2]|11\.0)(\.\d+)?(-IV\d+)?|[1-9]\d*\.\d+(\.\d+)?(-IV\d+)?")


def _metadata_version(name: str, value: Any) -> None:
    """An approximation of MetadataVersionValidator: the shape of a Kafka version string."""
    if not _VERSION_RE.fullmatch(value):
        raise invalid(name, value, f"Version {value} is not a valid version")


_REPLICA_RE = re.compile(r"\d+:\d+")


def _throttled_replicas(name: str, value: Any) -> None:
    """ThrottledReplicaListValidator: '*' or [partitionId]:[brokerId] entries."""
    if list(value) == ["*"] or all(_REPLICA_RE.fullmatch(v.strip()) for v in value):
        return
    raise invalid(name, value, "must be the literal '*' or a list of replicas in the following format: "
                  "[partitionId]:[brokerId],[partitionId]:[brokerId],...")  # fmt: skip


@dataclass(frozen=True)
class ConfigKey:
    """One config's ConfigDef entry: name, type, default (None = null) and validator."""

    name: str
    type: str
    default: Any
    validator: Validator | None = None

    def parse(self, value: Any) -> Any:
        """Parse and validate ``value``; None means unset, which yields the default."""
        if value is None:
            return self.default
        parsed = _PARSERS[self.type](self.name, value)
        if self.validator is not None:
            self.validator(self.name, parsed)
        return parsed


def _keys(*keys: ConfigKey) -> dict[str, ConfigKey]:
    return {k.name: k for k in keys}


def _parse_all(keys: Mapping[str, ConfigKey], values: Mapping[str, Any]) -> dict[str, Any]:
    return {name: key.parse(values.get(name)) for name, key in keys.items()}


# ---------------------------------------------------------------------------------------------------------------
# Broker configs (KafkaConfig / LogConfig.SERVER_CONFIG_DEF / CleanerConfig)
# ---------------------------------------------------------------------------------------------------------------

WEEK_MS = 7 * 24 * MS_PER_HOUR

BROKER_KEYS: dict[str, ConfigKey] = _keys(
    ConfigKey("log.dirs", "STRING", None),
    ConfigKey("log.dir", "STRING", "/tmp/kafka-logs"),
    ConfigKey("num.partitions", "INT", 1, at_least(1)),
    ConfigKey("log.segment.bytes", "INT", 1024**3, at_least(RECORD_OVERHEAD_V0)),
    ConfigKey("log.roll.ms", "LONG", None),
    ConfigKey("log.roll.hours", "INT", 168, at_least(1)),
    ConfigKey("log.roll.jitter.ms", "LONG", None),
    ConfigKey("log.roll.jitter.hours", "INT", 0, at_least(0)),
    ConfigKey("log.retention.ms", "LONG", None),
    ConfigKey("log.retention.minutes", "INT", None),
    ConfigKey("log.retention.hours", "INT", 168),
    ConfigKey("log.retention.bytes", "LONG", -1),
    ConfigKey("log.retention.check.interval.ms", "LONG", 300_000, at_least(1)),
    ConfigKey("log.cleanup.policy", "LIST", ("delete",), each_one_of(*CLEANUP_POLICIES)),
    ConfigKey("log.index.size.max.bytes", "INT", 10 * 1024 * 1024, at_least(4)),
    ConfigKey("log.index.interval.bytes", "INT", 4096, at_least(0)),
    ConfigKey("log.segment.delete.delay.ms", "LONG", 60_000, at_least(0)),
    ConfigKey("log.flush.interval.messages", "LONG", INT64_MAX, at_least(1)),
    ConfigKey("log.flush.interval.ms", "LONG", None),
    ConfigKey("log.flush.scheduler.interval.ms", "LONG", INT64_MAX),
    ConfigKey("log.flush.offset.checkpoint.interval.ms", "INT", 60_000, at_least(0)),
    ConfigKey("log.flush.start.offset.checkpoint.interval.ms", "INT", 60_000, at_least(0)),
    ConfigKey("log.preallocate", "BOOLEAN", False),
    ConfigKey("message.max.bytes", "INT", 1024 * 1024 + 12, at_least(0)),
    ConfigKey("log.message.timestamp.type", "STRING", "CreateTime", one_of(*TIMESTAMP_TYPES)),
    ConfigKey("log.message.timestamp.difference.max.ms", "LONG", INT64_MAX, at_least(0)),
    ConfigKey("log.message.timestamp.before.max.ms", "LONG", INT64_MAX, at_least(0)),
    ConfigKey("log.message.timestamp.after.max.ms", "LONG", INT64_MAX, at_least(0)),
    ConfigKey("log.message.format.version", "STRING", "3.0-IV1", _metadata_version),
    ConfigKey("compression.type", "STRING", "producer", one_of(*COMPRESSION_TYPES)),
    ConfigKey("compression.gzip.level", "INT", LEVELS[GZIP].default, _gzip_level),
    ConfigKey("compression.lz4.level", "INT", LEVELS[LZ4].default, _level_range(LZ4)),
    ConfigKey("compression.zstd.level", "INT", LEVELS[ZSTD].default, _level_range(ZSTD)),
    ConfigKey("log.cleaner.enable", "BOOLEAN", True),
    ConfigKey("log.cleaner.threads", "INT", 1, at_least(0)),
    ConfigKey("log.cleaner.dedupe.buffer.size", "LONG", 128 * 1024 * 1024),
    ConfigKey("log.cleaner.io.buffer.size", "INT", 512 * 1024, at_least(0)),
    ConfigKey("log.cleaner.io.buffer.load.factor", "DOUBLE", 0.9),
    ConfigKey("log.cleaner.io.max.bytes.per.second", "DOUBLE", DOUBLE_MAX),
    ConfigKey("log.cleaner.backoff.ms", "LONG", 15_000, at_least(0)),
    ConfigKey("log.cleaner.min.cleanable.ratio", "DOUBLE", 0.5, between(0, 1)),
    ConfigKey("log.cleaner.delete.retention.ms", "LONG", 24 * MS_PER_HOUR, at_least(0)),
    ConfigKey("log.cleaner.min.compaction.lag.ms", "LONG", 0, at_least(0)),
    ConfigKey("log.cleaner.max.compaction.lag.ms", "LONG", INT64_MAX, at_least(1)),
    ConfigKey("num.recovery.threads.per.data.dir", "INT", 1, at_least(1)),
    ConfigKey("log.initial.task.delay.ms", "LONG", 30_000, at_least(0)),
    ConfigKey("replica.high.watermark.checkpoint.interval.ms", "LONG", 5000),
    ConfigKey("min.insync.replicas", "INT", 1, at_least(1)),
    ConfigKey("unclean.leader.election.enable", "BOOLEAN", False),
    ConfigKey("log.local.retention.ms", "LONG", -2, at_least(-2)),
    ConfigKey("log.local.retention.bytes", "LONG", -2, at_least(-2)),
    # The broker's id (KafkaConfig: node.id in KRaft, broker.id its ZooKeeper-era synonym; -1 = unset), checked
    # against each log dir's meta.properties at startup and written into a new dir's.
    ConfigKey("node.id", "INT", -1),
    ConfigKey("broker.id", "INT", -1),
    # kafkalog's own: run deleting retention on topics whose configs kafkalog cannot know (partition dirs it did
    # not create, in log dirs without KRaft cluster metadata, e.g. a ZooKeeper-era broker's). Off until the
    # operator confirms that the broker defaults are right for them (see LogManager.unconfirmed_topics).
    ConfigKey("kafkalog.adopted.topics.retention.enable", "BOOLEAN", False),
)


def _csv(text: str | None) -> tuple[str, ...]:
    """Kafka's Csv.parseCsvList: split on commas with surrounding whitespace, dropping empty items."""
    if not text:
        return ()
    return tuple(item for item in _LIST_SPLIT.split(text) if item)


def _timestamp_bound(bound: int, difference: int) -> int:
    """The transition rule of KIP-937: a before/after bound left at Long.MAX falls back to the difference."""
    return bound if bound != INT64_MAX else difference


class _Frozen:
    """Attributes are set once in __init__; afterwards the object is immutable."""

    __slots__ = ()

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def _set(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)


class BrokerConfig(_Frozen):
    """The broker-level log configs of a server.properties, with KafkaConfig's derived values.

    Every known key is an attribute named after it with '.' → '_' (``log.segment.bytes`` → ``log_segment_bytes``).
    These attributes hold KafkaConfig's *effective* values:

    - ``log_dirs``: log.dirs, else log.dir, as a tuple of paths;
    - ``log_roll_ms`` / ``log_roll_jitter_ms``: the ms config, else hours × 3600000;
    - ``log_retention_ms``: ms, else minutes × 60000, else hours × 3600000; any negative result becomes -1;
    - ``log_flush_interval_ms``: the config, else log.flush.scheduler.interval.ms;
    - ``log_message_timestamp_before_max_ms`` / ``..._after_max_ms``: fall back to the difference config when
      left at Long.MAX.

    Unknown keys are kept in ``unknown`` without validation. ``get(name)`` returns a key's configured value.
    """

    __slots__ = ("__dict__",)

    _originals: dict[str, Any]
    _values: dict[str, Any]
    unknown: dict[str, Any]
    log_dirs: tuple[str, ...]
    log_dir: str
    num_partitions: int
    log_segment_bytes: int
    log_roll_ms: int
    log_roll_hours: int
    log_roll_jitter_ms: int
    log_roll_jitter_hours: int
    log_retention_ms: int
    log_retention_minutes: int | None
    log_retention_hours: int
    log_retention_bytes: int
    log_retention_check_interval_ms: int
    log_cleanup_policy: tuple[str, ...]
    log_index_size_max_bytes: int
    log_index_interval_bytes: int
    log_segment_delete_delay_ms: int
    log_flush_interval_messages: int
    log_flush_interval_ms: int
    log_flush_scheduler_interval_ms: int
    log_flush_offset_checkpoint_interval_ms: int
    log_flush_start_offset_checkpoint_interval_ms: int
    log_preallocate: bool
    message_max_bytes: int
    log_message_timestamp_type: str
    log_message_timestamp_difference_max_ms: int
    log_message_timestamp_before_max_ms: int
    log_message_timestamp_after_max_ms: int
    log_message_format_version: str
    compression_type: str
    compression_gzip_level: int
    compression_lz4_level: int
    compression_zstd_level: int
    log_cleaner_enable: bool
    log_cleaner_threads: int
    log_cleaner_dedupe_buffer_size: int
    log_cleaner_io_buffer_size: int
    log_cleaner_io_buffer_load_factor: float
    log_cleaner_io_max_bytes_per_second: float
    log_cleaner_backoff_ms: int
    log_cleaner_min_cleanable_ratio: float
    log_cleaner_delete_retention_ms: int
    log_cleaner_min_compaction_lag_ms: int
    log_cleaner_max_compaction_lag_ms: int
    num_recovery_threads_per_data_dir: int
    log_initial_task_delay_ms: int
    replica_high_watermark_checkpoint_interval_ms: int
    min_insync_replicas: int
    unclean_leader_election_enable: bool
    log_local_retention_ms: int
    log_local_retention_bytes: int
    node_id: int
    broker_id: int
    kafkalog_adopted_topics_retention_enable: bool

    def __init__(self, props: Mapping[str, Any] | None = None) -> None:
        originals = dict(props or {})
        values = _parse_all(BROKER_KEYS, originals)
        self._set("_originals", originals)
        self._set("_values", values)
        self._set("unknown", {k: v for k, v in originals.items() if k not in BROKER_KEYS})
        for name, value in values.items():
            self._set(name.replace(".", "_"), value)
        for name, value in self._effective(values).items():
            self._set(name, value)
        self._validate()

    @classmethod
    def from_file(cls, path: str | PathLike[str]) -> BrokerConfig:
        """Load a server.properties file."""
        return cls(load_properties(path))

    @staticmethod
    def _effective(v: Mapping[str, Any]) -> dict[str, Any]:
        """KafkaConfig's getters that combine several keys."""
        retention = v["log.retention.ms"]
        if retention is None:
            minutes = v["log.retention.minutes"]
            retention = minutes * MS_PER_MINUTE if minutes is not None else v["log.retention.hours"] * MS_PER_HOUR
        roll, jitter, flush = v["log.roll.ms"], v["log.roll.jitter.ms"], v["log.flush.interval.ms"]
        difference = v["log.message.timestamp.difference.max.ms"]
        return {
            "log_dirs": _csv(v["log.dirs"] if v["log.dirs"] is not None else v["log.dir"]),
            "log_roll_ms": roll if roll is not None else v["log.roll.hours"] * MS_PER_HOUR,
            "log_roll_jitter_ms": jitter if jitter is not None else v["log.roll.jitter.hours"] * MS_PER_HOUR,
            "log_retention_ms": -1 if retention < 0 else retention,
            "log_flush_interval_ms": flush if flush is not None else v["log.flush.scheduler.interval.ms"],
            "log_message_timestamp_before_max_ms": _timestamp_bound(
                v["log.message.timestamp.before.max.ms"], difference
            ),
            "log_message_timestamp_after_max_ms": _timestamp_bound(v["log.message.timestamp.after.max.ms"], difference),
            # KafkaConfig: node.id, else broker.id (synonyms); -1 when neither is set.
            "node_id": v["node.id"] if v["node.id"] >= 0 else v["broker.id"],
        }

    def _validate(self) -> None:
        """KafkaConfig.validateValues' log checks, and LogConfig.validateBrokerLogConfigValues."""
        if self.log_roll_ms < 1:
            raise invalid("log.roll.ms", self.log_roll_ms, "log.roll.ms must be greater than or equal to 1")
        if self.log_roll_jitter_ms < 0:
            raise invalid("log.roll.jitter.ms", self.log_roll_jitter_ms, "log.roll.jitter.ms must be at least 0")
        node, broker = self.get("node.id"), self.get("broker.id")
        if node >= 0 and broker >= 0 and node != broker:
            raise invalid("node.id", node, f"If both broker.id and node.id are set, they must be equal ({broker})")
        if self.log_retention_ms == 0:
            raise invalid("log.retention.ms", 0, "log.retention.ms must be unlimited (-1) or, at least 1")
        if not self.log_dirs:
            dirs = self.get("log.dirs") if self.get("log.dirs") is not None else self.log_dir
            raise invalid("log.dirs", dirs, "At least one log directory must be defined via log.dirs or log.dir.")
        threads, dedupe = self.log_cleaner_threads, self.log_cleaner_dedupe_buffer_size
        if threads == 0 or dedupe // threads <= 1024 * 1024:
            raise invalid(
                "log.cleaner.dedupe.buffer.size",
                dedupe,
                f"must be more than 1MB per cleaner thread ({threads} threads)",
            )
        _check_compaction_lags(
            self.log_cleaner_min_compaction_lag_ms,
            self.log_cleaner_max_compaction_lag_ms,
            "log.cleaner.min.compaction.lag.ms",
            "log.cleaner.max.compaction.lag.ms",
        )

    def get(self, name: str) -> Any:
        """The configured value of a known key (None for an unset nullable key), or an unknown key's raw value."""
        if name in self._values:
            return self._values[name]
        return self.unknown[name]

    @property
    def originals(self) -> dict[str, Any]:
        """A copy of the mapping this config was built from."""
        return dict(self._originals)

    def topic_defaults(self) -> dict[str, Any]:
        """The broker's value for each topic config with a synonym (KafkaConfig.extractLogConfigMap)."""
        return {topic: getattr(self, broker.replace(".", "_")) for topic, broker in TOPIC_SYNONYMS.items()}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BrokerConfig) and self._originals == other._originals

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        set_keys = {k: v for k, v in self._originals.items() if k in BROKER_KEYS}
        return f"BrokerConfig({set_keys!r})"


def _check_compaction_lags(min_lag: int, max_lag: int, min_name: str, max_name: str) -> None:
    """LogConfig.validateValues: the min compaction lag may not exceed the max."""
    if min_lag > max_lag:
        raise InvalidConfigurationError(
            f"Invalid value {min_lag} for configuration {min_name}: "
            f"conflict topic config setting {min_name} ({min_lag}) > {max_name} ({max_lag})"
        )


# ---------------------------------------------------------------------------------------------------------------
# Topic configs (LogConfig)
# ---------------------------------------------------------------------------------------------------------------

TOPIC_KEYS: dict[str, ConfigKey] = _keys(
    ConfigKey("segment.bytes", "INT", 1024**3, at_least(RECORD_OVERHEAD_V0)),
    ConfigKey("segment.ms", "LONG", WEEK_MS, at_least(1)),
    ConfigKey("segment.jitter.ms", "LONG", 0, at_least(0)),
    ConfigKey("segment.index.bytes", "INT", 10 * 1024 * 1024, at_least(4)),
    ConfigKey("flush.messages", "LONG", INT64_MAX, at_least(1)),
    ConfigKey("flush.ms", "LONG", INT64_MAX, at_least(0)),
    ConfigKey("retention.bytes", "LONG", -1),
    ConfigKey("retention.ms", "LONG", WEEK_MS, at_least(-1)),
    ConfigKey("max.message.bytes", "INT", 1024 * 1024 + 12, at_least(0)),
    ConfigKey("index.interval.bytes", "INT", 4096, at_least(0)),
    ConfigKey("delete.retention.ms", "LONG", 24 * MS_PER_HOUR, at_least(0)),
    ConfigKey("min.compaction.lag.ms", "LONG", 0, at_least(0)),
    ConfigKey("max.compaction.lag.ms", "LONG", INT64_MAX, at_least(1)),
    ConfigKey("file.delete.delay.ms", "LONG", 60_000, at_least(0)),
    ConfigKey("min.cleanable.dirty.ratio", "DOUBLE", 0.5, between(0, 1)),
    ConfigKey("cleanup.policy", "LIST", ("delete",), each_one_of(*CLEANUP_POLICIES)),
    ConfigKey("unclean.leader.election.enable", "BOOLEAN", False),
    ConfigKey("min.insync.replicas", "INT", 1, at_least(1)),
    ConfigKey("compression.type", "STRING", "producer", one_of(*COMPRESSION_TYPES)),
    ConfigKey("compression.gzip.level", "INT", LEVELS[GZIP].default, _gzip_level),
    ConfigKey("compression.lz4.level", "INT", LEVELS[LZ4].default, _level_range(LZ4)),
    ConfigKey("compression.zstd.level", "INT", LEVELS[ZSTD].default, _level_range(ZSTD)),
    ConfigKey("preallocate", "BOOLEAN", False),
    ConfigKey("message.format.version", "STRING", "3.0-IV1", _metadata_version),
    ConfigKey("message.timestamp.type", "STRING", "CreateTime", one_of(*TIMESTAMP_TYPES)),
    ConfigKey("message.timestamp.difference.max.ms", "LONG", INT64_MAX, at_least(0)),
    ConfigKey("message.timestamp.before.max.ms", "LONG", INT64_MAX, at_least(0)),
    ConfigKey("message.timestamp.after.max.ms", "LONG", INT64_MAX, at_least(0)),
    ConfigKey("local.retention.ms", "LONG", -2, at_least(-2)),
    ConfigKey("local.retention.bytes", "LONG", -2, at_least(-2)),
    # Known to Kafka but outside a local log's concern: accepted and validated, otherwise ignored.
    ConfigKey("message.downconversion.enable", "BOOLEAN", True),
    ConfigKey("remote.storage.enable", "BOOLEAN", False),
    ConfigKey("remote.log.copy.disable", "BOOLEAN", False),
    ConfigKey("remote.log.delete.on.disable", "BOOLEAN", False),
    ConfigKey("leader.replication.throttled.replicas", "LIST", (), _throttled_replicas),
    ConfigKey("follower.replication.throttled.replicas", "LIST", (), _throttled_replicas),
)

# ServerTopicConfigSynonyms: topic config → the broker config whose (resolved) value is its default. Where Kafka
# lists several broker synonyms (log.roll.ms, log.roll.hours), BrokerConfig's attribute already resolves them.
TOPIC_SYNONYMS: dict[str, str] = {
    "segment.bytes": "log.segment.bytes",
    "segment.ms": "log.roll.ms",
    "segment.jitter.ms": "log.roll.jitter.ms",
    "segment.index.bytes": "log.index.size.max.bytes",
    "flush.messages": "log.flush.interval.messages",
    "flush.ms": "log.flush.interval.ms",
    "retention.bytes": "log.retention.bytes",
    "retention.ms": "log.retention.ms",
    "max.message.bytes": "message.max.bytes",
    "index.interval.bytes": "log.index.interval.bytes",
    "delete.retention.ms": "log.cleaner.delete.retention.ms",
    "min.compaction.lag.ms": "log.cleaner.min.compaction.lag.ms",
    "max.compaction.lag.ms": "log.cleaner.max.compaction.lag.ms",
    "file.delete.delay.ms": "log.segment.delete.delay.ms",
    "min.cleanable.dirty.ratio": "log.cleaner.min.cleanable.ratio",
    "cleanup.policy": "log.cleanup.policy",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
    "min.insync.replicas": "min.insync.replicas",
    "compression.type": "compression.type",
    "compression.gzip.level": "compression.gzip.level",
    "compression.lz4.level": "compression.lz4.level",
    "compression.zstd.level": "compression.zstd.level",
    "preallocate": "log.preallocate",
    "message.format.version": "log.message.format.version",
    "message.timestamp.type": "log.message.timestamp.type",
    "message.timestamp.difference.max.ms": "log.message.timestamp.difference.max.ms",
    "message.timestamp.before.max.ms": "log.message.timestamp.before.max.ms",
    "message.timestamp.after.max.ms": "log.message.timestamp.after.max.ms",
    "local.retention.ms": "log.local.retention.ms",
    "local.retention.bytes": "log.local.retention.bytes",
}

_ATTRIBUTES = {
    "segment.bytes": "segment_bytes",
    "segment.ms": "segment_ms",
    "segment.jitter.ms": "segment_jitter_ms",
    "segment.index.bytes": "segment_index_bytes",
    "flush.messages": "flush_messages",
    "flush.ms": "flush_ms",
    "retention.bytes": "retention_bytes",
    "retention.ms": "retention_ms",
    "max.message.bytes": "max_message_bytes",
    "index.interval.bytes": "index_interval_bytes",
    "delete.retention.ms": "delete_retention_ms",
    "min.compaction.lag.ms": "min_compaction_lag_ms",
    "max.compaction.lag.ms": "max_compaction_lag_ms",
    "file.delete.delay.ms": "file_delete_delay_ms",
    "min.cleanable.dirty.ratio": "min_cleanable_dirty_ratio",
    "cleanup.policy": "cleanup_policy",
    "unclean.leader.election.enable": "unclean_leader_election_enable",
    "min.insync.replicas": "min_insync_replicas",
    "compression.type": "compression_type",
    "compression.gzip.level": "compression_gzip_level",
    "compression.lz4.level": "compression_lz4_level",
    "compression.zstd.level": "compression_zstd_level",
    "preallocate": "preallocate",
    "message.format.version": "message_format_version",
    "message.timestamp.type": "message_timestamp_type",
    "message.timestamp.difference.max.ms": "message_timestamp_difference_max_ms",
}

_DEFAULT_RNG = random.Random()


class LogConfig(_Frozen):
    """One topic's log configs: topic override > broker synonym > Kafka's default. Immutable.

    Attributes use snake_case names (``segment.bytes`` → ``segment_bytes``). ``message_timestamp_before_max_ms``
    and ``message_timestamp_after_max_ms`` are the effective bounds (falling back to
    message.timestamp.difference.max.ms when left at Long.MAX), and ``local_retention_ms`` /
    ``local_retention_bytes`` are the effective local limits (-2 → retention.*). ``to_dict()`` gives the configured
    values by Kafka name.
    """

    __slots__ = ("__dict__",)

    _values: dict[str, Any]
    _overrides: dict[str, Any]
    _broker: BrokerConfig | None
    segment_bytes: int
    segment_ms: int
    segment_jitter_ms: int
    segment_index_bytes: int
    flush_messages: int
    flush_ms: int
    retention_bytes: int
    retention_ms: int
    max_message_bytes: int
    index_interval_bytes: int
    delete_retention_ms: int
    min_compaction_lag_ms: int
    max_compaction_lag_ms: int
    file_delete_delay_ms: int
    min_cleanable_dirty_ratio: float
    cleanup_policy: tuple[str, ...]
    unclean_leader_election_enable: bool
    min_insync_replicas: int
    compression_type: str
    compression_gzip_level: int
    compression_lz4_level: int
    compression_zstd_level: int
    preallocate: bool
    message_format_version: str
    message_timestamp_type: str
    message_timestamp_difference_max_ms: int
    message_timestamp_before_max_ms: int
    message_timestamp_after_max_ms: int
    local_retention_ms: int
    local_retention_bytes: int
    compact: bool
    delete: bool

    def __init__(
        self, overrides: Mapping[str, Any] | None = None, broker: BrokerConfig | Mapping[str, Any] | None = None
    ) -> None:
        given = {k: v for k, v in (overrides or {}).items() if v is not None}
        for name in given:
            if name not in TOPIC_KEYS:
                raise InvalidConfigurationError(f"Unknown topic config name: {name}")
        if broker is not None and not isinstance(broker, BrokerConfig):
            broker = BrokerConfig(broker)
        inherited = broker.topic_defaults() if broker is not None else {}
        values = _parse_all(TOPIC_KEYS, {**inherited, **given})
        _check_compaction_lags(
            values["min.compaction.lag.ms"], values["max.compaction.lag.ms"], "min.compaction.lag.ms",
            "max.compaction.lag.ms",
        )  # fmt: skip
        self._set("_values", values)
        self._set("_overrides", {name: values[name] for name in given})
        self._set("_broker", broker)
        for name, attr in _ATTRIBUTES.items():
            self._set(attr, values[name])
        self._set_derived(values)

    def _set_derived(self, v: Mapping[str, Any]) -> None:
        difference = v["message.timestamp.difference.max.ms"]
        policy = [p.lower() for p in v["cleanup.policy"]]
        self._set("compact", "compact" in policy)
        self._set("delete", "delete" in policy)
        self._set("message_timestamp_before_max_ms", _timestamp_bound(v["message.timestamp.before.max.ms"], difference))
        self._set("message_timestamp_after_max_ms", _timestamp_bound(v["message.timestamp.after.max.ms"], difference))
        local_ms, local_bytes = v["local.retention.ms"], v["local.retention.bytes"]
        self._set("local_retention_ms", self.retention_ms if local_ms == -2 else local_ms)
        self._set("local_retention_bytes", self.retention_bytes if local_bytes == -2 else local_bytes)

    @property
    def max_segment_ms(self) -> int:
        """LogConfig.maxSegmentMs: segment.ms, capped by max.compaction.lag.ms for a compacted topic."""
        if self.compact and self.max_compaction_lag_ms > 0:
            return min(self.max_compaction_lag_ms, self.segment_ms)
        return self.segment_ms

    @property
    def initial_file_size(self) -> int:
        """LogConfig.initFileSize: segment.bytes when preallocating, else 0."""
        return self.segment_bytes if self.preallocate else 0

    def random_segment_jitter(self, rng: random.Random | None = None) -> int:
        """LogConfig.randomSegmentJitter: abs(a random Java int) % min(segment.jitter.ms, segment.ms), or 0."""
        if self.segment_jitter_ms == 0:
            return 0
        n = (rng or _DEFAULT_RNG).getrandbits(32) - 2**31  # a Java nextInt()
        magnitude = 0 if n == INT32_MIN else abs(n)  # Utils.abs
        return magnitude % min(self.segment_jitter_ms, self.segment_ms)

    @property
    def overrides(self) -> dict[str, Any]:
        """The topic configs set explicitly on this topic, parsed, by Kafka name."""
        return dict(self._overrides)

    @property
    def broker(self) -> BrokerConfig | None:
        """The broker config this topic config inherits from, if any."""
        return self._broker

    def get(self, name: str) -> Any:
        """The configured value of one topic config by Kafka name."""
        if name not in self._values:
            raise InvalidConfigurationError(f"Unknown topic config name: {name}")
        return self._values[name]

    def to_dict(self) -> dict[str, Any]:
        """Every topic config by Kafka name → its configured value."""
        return dict(self._values)

    def with_overrides(self, updates: Mapping[str, Any]) -> LogConfig:
        """A new LogConfig with ``updates`` applied to this topic's overrides; a None value removes an override."""
        merged = {**self._overrides, **updates}
        return LogConfig({k: v for k, v in merged.items() if v is not None}, self._broker)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LogConfig) and self._values == other._values and self._overrides == other._overrides

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"LogConfig(overrides={self._overrides!r})"


__all__ = [
    "BROKER_KEYS",
    "TOPIC_KEYS",
    "TOPIC_SYNONYMS",
    "BrokerConfig",
    "ConfigKey",
    "LogConfig",
]
