"""The broker's server.properties (Kafka's KafkaConfig, the socket-server and broker keys).

The log keys (log.dirs, num.partitions, message.max.bytes, min.insync.replicas, every ``log.*``) are the
storage layer's BrokerConfig; this module adds what only a network broker has: listeners, node id, the
socket limits and the topic auto-creation switch, with Kafka's names and defaults.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ..coordinator.group import GroupCoordinatorConfig
from ..coordinator.transaction import TransactionCoordinatorConfig
from ..errors import InvalidConfigurationError
from ..storage.config import BrokerConfig
from ..storage.properties import load_properties

DEFAULT_LISTENER = "PLAINTEXT://127.0.0.1:9092"
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
# socket.send.buffer.bytes / socket.receive.buffer.bytes: the OS's (Kafka's default is 102400; see KafkaConfig)
SOCKET_BUFFER_DEFAULT = -1
# Kafka's default listener.security.protocol.map: each security protocol's name maps to itself.
DEFAULT_PROTOCOL_MAP = "SASL_SSL:SASL_SSL,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT"


@dataclass(frozen=True)
class Endpoint:
    """One listener: ``NAME://host:port`` (an empty host binds every interface, as Kafka's), and the security
    protocol its name maps to in ``listener.security.protocol.map``."""

    name: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"

    @property
    def tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    @classmethod
    def parse(cls, text: str, key: str, protocol_map: Mapping[str, str] | None = None) -> Endpoint:
        name, sep, rest = text.strip().partition("://")
        if not sep or not name:
            raise InvalidConfigurationError(
                f"Invalid value {text!r} for configuration {key}: expected NAME://host:port"
            )
        if rest.startswith("["):  # [ipv6]:port
            host, _, port = rest[1:].partition("]:")
        else:
            host, _, port = rest.rpartition(":")
        try:
            number = int(port)
        except ValueError:
            raise InvalidConfigurationError(f"Invalid port in {text!r} for configuration {key}") from None
        if not 0 <= number <= 65535:
            raise InvalidConfigurationError(f"Invalid port {number} in {text!r} for configuration {key}")
        name = name.upper()
        protocols = protocol_map if protocol_map is not None else parse_protocol_map(DEFAULT_PROTOCOL_MAP)
        protocol = protocols.get(name)
        if protocol is None:
            raise InvalidConfigurationError(
                f"No security protocol defined for listener {name} (listener.security.protocol.map)"
            )
        return cls(name, host, number, protocol)


def parse_protocol_map(value: str) -> dict[str, str]:
    """``listener.security.protocol.map``: ``NAME:PROTOCOL`` pairs, each protocol one of Kafka's four."""
    result: dict[str, str] = {}
    for item, name, protocol in _colon_pairs(value):
        protocol = protocol.strip().upper()
        if not name.strip() or protocol not in SECURITY_PROTOCOLS:
            raise InvalidConfigurationError(
                f"Invalid value {value!r} for configuration listener.security.protocol.map: {item!r} is "
                f"not NAME:PROTOCOL with PROTOCOL one of {', '.join(SECURITY_PROTOCOLS)}"
            )
        result[name.strip().upper()] = protocol
    return result


def _colon_pairs(value: str, *, last: bool = False) -> list[tuple[str, str, str]]:
    """The non-blank items of a comma-separated ``KEY:VALUE`` list as (item, key, value), each split at its first
    colon (its last one with ``last``: a host may hold colons); key and value are empty for an item without one."""
    pairs = []
    for item in value.split(","):
        item = item.strip()
        if item:
            key, sep, rest = item.rpartition(":") if last else item.partition(":")
            pairs.append((item, key, rest) if sep else (item, "", ""))
    return pairs


def _endpoints(value: str, key: str, protocol_map: Mapping[str, str]) -> list[Endpoint]:
    endpoints = [Endpoint.parse(part, key, protocol_map) for part in value.split(",") if part.strip()]
    if not endpoints:
        raise InvalidConfigurationError(f"No listener in configuration {key}")
    names = [e.name for e in endpoints]
    duplicate = next((n for n in names if names.count(n) > 1), None)
    if duplicate is not None:
        raise InvalidConfigurationError(f"{key} contains listener {duplicate} more than once: each name must be unique")
    ports = [e.port for e in endpoints if e.port != 0]
    clash = next((port for port in ports if ports.count(port) > 1), None)
    if key == "listeners" and clash is not None:
        raise InvalidConfigurationError(f"{key} contains port {clash} more than once: each listener needs its own port")
    return endpoints


def _int(props: Mapping[str, str], key: str, default: int, minimum: int | None = None) -> int:
    raw = props.get(key)
    if raw is None:
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise InvalidConfigurationError(
            f"Invalid value {raw} for configuration {key}: Not a number of type INT"
        ) from None
    if minimum is not None and value < minimum:
        raise InvalidConfigurationError(
            f"Invalid value {value} for configuration {key}: Value must be at least {minimum}"
        )
    return value


def _buffer_bytes(props: Mapping[str, str], key: str, default: int) -> int:
    """A socket buffer size (SO_SNDBUF/SO_RCVBUF): -1 for the OS default, else a positive byte count. Kafka's
    definition takes any INT and fails later, on the first socket (Java refuses a size below 1); here at once."""
    value = _int(props, key, default, -1)
    if value == 0:
        raise InvalidConfigurationError(
            f"Invalid value 0 for configuration {key}: Value must be -1 (the OS default) or a positive number of bytes"
        )
    return value


def _per_ip_overrides(value: str) -> dict[str, int]:
    """``max.connections.per.ip.overrides``: ``host:count`` pairs."""
    result: dict[str, int] = {}
    for _, host, count in _colon_pairs(value, last=True):
        if not host or not count.strip().isdigit():
            raise InvalidConfigurationError(
                f"Invalid value {value!r} for configuration max.connections.per.ip.overrides: expected host:count pairs"
            )
        result[host] = int(count)
    return result


def listener_property(props: Mapping[str, str], listener: str, key: str, *, prefixed_only: bool = False) -> str | None:
    """A listener's value of ``key``: ``listener.name.<listener>.<key>`` first, then ``key`` itself (Kafka's
    listener-prefixed overrides; the prefix's listener name is lower case)."""
    value = props.get(f"listener.name.{listener.lower()}.{key}")
    if value is not None or prefixed_only:
        return value
    return props.get(key)


def _bool(props: Mapping[str, str], key: str, default: bool) -> bool:
    raw = props.get(key)
    if raw is None:
        return default
    text = str(raw).strip().lower()
    if text not in ("true", "false"):
        raise InvalidConfigurationError(f"Invalid value {raw} for configuration {key}: Expected value to be a boolean")
    return text == "true"


class KafkaConfig:
    """server.properties for ``kafkalog serve``.

    Invariant: ``log`` is the storage BrokerConfig built from the same properties, so the log manager and the
    broker never disagree about a log key; ``listeners`` has at least one endpoint and ``advertised`` as many.

    ``queued.max.requests`` is read and validated, but bounds nothing more here: Kafka's request queue sits
    between network and handler threads, while this broker serves a request on its connection's task as soon
    as it is read and reads that connection's next request only after answering (each connection holds at
    most one request, as Kafka mutes a channel while its request is served).
    """

    def __init__(self, props: Mapping[str, str] | None = None) -> None:
        self.props = {k: str(v) for k, v in (props or {}).items()}
        p = self.props
        self.protocol_map = parse_protocol_map(p.get("listener.security.protocol.map", DEFAULT_PROTOCOL_MAP))
        self.listeners = _endpoints(p.get("listeners", DEFAULT_LISTENER), "listeners", self.protocol_map)
        advertised = p.get("advertised.listeners")
        self.advertised = (
            _endpoints(advertised, "advertised.listeners", self.protocol_map) if advertised else list(self.listeners)
        )
        self.max_connections = _int(p, "max.connections", 2**31 - 1, 0)
        self.max_connections_per_ip = _int(p, "max.connections.per.ip", 2**31 - 1, 0)
        self.max_connections_per_ip_overrides = _per_ip_overrides(p.get("max.connections.per.ip.overrides", ""))
        self.connections_max_idle_ms = _int(p, "connections.max.idle.ms", 600000, -1)
        self.connections_max_reauth_ms = _int(p, "connections.max.reauth.ms", 0, 0)
        self.failed_authentication_delay_ms = _int(p, "connection.failed.authentication.delay.ms", 100, 0)
        self.quota_window_num = _int(p, "quota.window.num", 11, 1)
        self.quota_window_size_seconds = _int(p, "quota.window.size.seconds", 1, 1)
        node = p.get("node.id", p.get("broker.id"))
        self.node_id = _int({"node.id": node} if node is not None else {}, "node.id", 0, 0)
        if "node.id" in p and "broker.id" in p and p["node.id"].strip() != p["broker.id"].strip():
            raise InvalidConfigurationError(
                f"node.id ({p['node.id']}) and broker.id ({p['broker.id']}) must be equal when both are set"
            )
        self.auto_create_topics_enable = _bool(p, "auto.create.topics.enable", True)
        self.default_replication_factor = _int(p, "default.replication.factor", 1, 1)
        if self.default_replication_factor != 1 and not p.get("zookeeper.connect", "").strip():
            raise InvalidConfigurationError(
                "default.replication.factor must be 1 on a single node "
                "(set zookeeper.connect to run a replicated cluster)"
            )
        self.inter_broker_listener = self._inter_broker_listener()
        self.socket_request_max_bytes = _int(p, "socket.request.max.bytes", 100 * 1024 * 1024, 1)
        # Kafka's SocketServer: SO_RCVBUF of the listening sockets (accepted ones inherit it), SO_SNDBUF of each
        # accepted socket, the listen backlog; the follower's fetch connection's SO_RCVBUF (BrokerBlockingSender).
        # The two socket server sizes default to -1 (the OS's, autotuned on Linux), not Kafka's 102400: with a fixed
        # 100 KiB buffer this broker's one event loop wakes per ~100-200 KiB sent or received instead of per request,
        # which measured 0.55x the consume rate of a 1 GiB topic and 1.35x the broker CPU per GB produced
        # (benchmarks/results/socket-buffers-ab-1gib.json). Set 102400 for Kafka's behaviour.
        self.socket_send_buffer_bytes = _buffer_bytes(p, "socket.send.buffer.bytes", SOCKET_BUFFER_DEFAULT)
        self.socket_receive_buffer_bytes = _buffer_bytes(p, "socket.receive.buffer.bytes", SOCKET_BUFFER_DEFAULT)
        self.socket_listen_backlog_size = _int(p, "socket.listen.backlog.size", 50, 1)
        self.replica_socket_receive_buffer_bytes = _buffer_bytes(p, "replica.socket.receive.buffer.bytes", 64 * 1024)
        self.queued_max_requests = _int(p, "queued.max.requests", 500, 1)
        self.group_initial_rebalance_delay_ms = _int(p, "group.initial.rebalance.delay.ms", 3000, 0)
        # KIP-227's session cache (broker/fetch_session.py), Kafka's names and defaults.
        self.max_incremental_fetch_session_cache_slots = _int(p, "max.incremental.fetch.session.cache.slots", 1000, 0)
        self.min_incremental_fetch_session_eviction_ms = _int(p, "min.incremental.fetch.session.eviction.ms", 120000, 0)
        # The Prometheus endpoint (broker/metrics.py): off unless metrics.port is set (0 = any free port).
        self.metrics_port = _int(p, "metrics.port", 0, 0) if p.get("metrics.port", "").strip() else None
        if self.metrics_port is not None and self.metrics_port > 65535:
            raise InvalidConfigurationError(
                f"Invalid value {self.metrics_port} for configuration metrics.port: Value must be at most 65535"
            )
        self.metrics_host = p.get("metrics.host", "").strip()
        self.group_coordinator = GroupCoordinatorConfig.from_properties(p)  # offsets.*, group.* (checked here)
        self.transaction_coordinator = TransactionCoordinatorConfig.from_properties(p)  # transaction.* (checked)
        self.log = BrokerConfig(self.props)

    def _inter_broker_listener(self) -> str:
        """The listener brokers of a cluster talk to each other on (Kafka's inter.broker.listener.name, else the
        listener named after security.inter.broker.protocol, PLAINTEXT by default). A cluster's broker must
        advertise it (cluster/interbroker.py connects over it with its TLS and SASL settings)."""
        p = self.props
        named = p.get("inter.broker.listener.name", "").strip().upper()
        protocol = p.get("security.inter.broker.protocol", "").strip().upper()
        if named and protocol:
            raise InvalidConfigurationError(
                "Only one of inter.broker.listener.name and security.inter.broker.protocol should be set."
            )
        name = named or protocol or "PLAINTEXT"
        if not p.get("zookeeper.connect", "").strip():
            return name
        endpoint = next((e for e in self.advertised if e.name == name), None)
        if endpoint is None:
            raise InvalidConfigurationError(
                f"inter.broker.listener.name must be a listener name defined in advertised.listeners. "
                f"The valid options based on currently configured listeners are "
                f"{','.join(e.name for e in self.advertised)}"
            )
        return name

    @classmethod
    def load(cls, path: str | Path | None = None, overrides: Iterable[str] = ()) -> KafkaConfig:
        """A server.properties file (if any), then ``key=value`` overrides, as kafka-server-start.sh's --override."""
        props: dict[str, str] = dict(load_properties(path)) if path is not None else {}
        for item in overrides:
            key, sep, value = item.partition("=")
            if not sep or not key.strip():
                raise InvalidConfigurationError(f"Invalid --override {item!r}: expected key=value")
            props[key.strip()] = value.strip()
        return cls(props)

    @property
    def log_dirs(self) -> list[Path]:
        return [Path(d) for d in self.log.log_dirs]

    @property
    def num_partitions(self) -> int:
        return int(self.log.num_partitions)

    @property
    def message_max_bytes(self) -> int:
        return int(self.log.message_max_bytes)

    @property
    def min_insync_replicas(self) -> int:
        return int(self.log.min_insync_replicas)
