"""ZooKeeper paths and JSON shapes, as Kafka 3.x's ``kafka.zk.ZkData`` writes and reads them.

Only the znodes a kafkalog cluster uses are here. Every encoder writes the fields Kafka writes, with Kafka's
version numbers; every decoder accepts what Kafka writes (extra fields are ignored).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

BROKER_IDS = "/brokers/ids"
BROKER_TOPICS = "/brokers/topics"
BROKER_SEQID = "/brokers/seqid"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
CLUSTER_ID = "/cluster/id"
CONFIG_TOPICS = "/config/topics"
CONFIG_CHANGES = "/config/changes"
DELETE_TOPICS = "/admin/delete_topics"
ISR_CHANGE_NOTIFICATION = "/isr_change_notification"
# The persistent paths Kafka's KafkaZkClient.createTopLevelPaths makes on startup.
PERSISTENT_PATHS = (
    "/consumers",
    BROKER_IDS,
    BROKER_TOPICS,
    CONFIG_CHANGES,
    "/admin",
    DELETE_TOPICS,
    BROKER_SEQID,
    ISR_CHANGE_NOTIFICATION,
    "/latest_producer_id_block",
    "/log_dir_event_notification",
    CONFIG_TOPICS,
    "/config/clients",
    "/config/users",
    "/config/brokers",
    "/config/ips",
)

NO_LEADER = -1  # LeaderAndIsr.NoLeader


def _now_ms() -> str:
    return str(int(time.time() * 1000))


def _dump(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode("utf-8")


def _load(data: bytes) -> dict[str, Any]:
    value = json.loads(data.decode("utf-8"))
    if not isinstance(value, dict):
        raise ValueError(f"Expected a JSON object, found {data[:80]!r}")
    return value


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{BROKER_TOPICS}/{topic}"


def partitions_path(topic: str) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions/{partition}/state"


def topic_config_path(topic: str) -> str:
    return f"{CONFIG_TOPICS}/{topic}"


@dataclass(frozen=True)
class BrokerInfo:
    """``/brokers/ids/N`` (BrokerIdZNode v5: endpoints, the listener map, features), ephemeral.

    ``host``/``port``/``listener`` are the inter-broker endpoint (the one replica fetchers and the controller
    use); ``endpoints`` holds every advertised listener as (name, security protocol, host, port), the inter-broker
    one first, so that Metadata answers each client with the endpoints of the listener it came in on."""

    broker_id: int
    host: str
    port: int
    listener: str = "PLAINTEXT"
    rack: str | None = None
    endpoints: tuple[tuple[str, str, str, int], ...] = ()

    def all_endpoints(self) -> tuple[tuple[str, str, str, int], ...]:
        return self.endpoints or ((self.listener, "PLAINTEXT", self.host, self.port),)

    def endpoint_for(self, listener: str) -> tuple[str, int] | None:
        """(host, port) of ``listener`` on this broker, None when it has no such listener."""
        for name, _, host, port in self.all_endpoints():
            if name == listener:
                return host, port
        return None

    def encode(self) -> bytes:
        endpoints = self.all_endpoints()
        body: dict[str, Any] = {
            "features": {},
            "listener_security_protocol_map": {name: protocol for name, protocol, _, _ in endpoints},
            "endpoints": [f"{name}://{host}:{port}" for name, _, host, port in endpoints],
            "jmx_port": -1,
            "port": self.port,
            "host": self.host,
            "version": 5,
            "timestamp": _now_ms(),
        }
        if self.rack is not None:
            body["rack"] = self.rack
        return _dump(body)

    @classmethod
    def decode(cls, broker_id: int, data: bytes) -> BrokerInfo:
        body = _load(data)
        protocols = {str(k): str(v) for k, v in (body.get("listener_security_protocol_map") or {}).items()}
        parsed = []
        for text in body.get("endpoints") or []:  # v2+
            name, _, rest = str(text).partition("://")
            host, _, port = rest.rpartition(":")
            parsed.append((name, protocols.get(name, name), host.strip("[]"), int(port)))
        if parsed:  # the first endpoint is the inter-broker one (kafkalog writes it first)
            name, _, host, port = parsed[0]
            return cls(broker_id, host, port, name, body.get("rack"), tuple(parsed))
        return cls(broker_id, str(body["host"]), int(body["port"]), "PLAINTEXT", body.get("rack"))


@dataclass(frozen=True)
class TopicAssignment:
    """``/brokers/topics/T`` (TopicZNode v3): replicas of each partition, the topic id, reassignment state."""

    partitions: dict[int, list[int]]
    topic_id: str | None = None

    def encode(self) -> bytes:
        body: dict[str, Any] = {
            "version": 3,
            "partitions": {str(p): list(r) for p, r in sorted(self.partitions.items())},
            "adding_replicas": {},
            "removing_replicas": {},
        }
        if self.topic_id is not None:
            body["topic_id"] = self.topic_id
        return _dump(body)

    @classmethod
    def decode(cls, data: bytes) -> TopicAssignment:
        body = _load(data)
        partitions = {int(p): [int(r) for r in replicas] for p, replicas in (body.get("partitions") or {}).items()}
        return cls(partitions, body.get("topic_id"))


@dataclass(frozen=True)
class LeaderAndIsr:
    """``/brokers/topics/T/partitions/P/state`` (TopicPartitionStateZNode v1), with its znode version.

    ``zk_version`` is the znode's data version when read: every ISR change is a conditional write on it, so
    two writers (the controller and the leader) never overwrite each other's change unseen.
    """

    leader: int
    leader_epoch: int
    isr: list[int]
    controller_epoch: int
    zk_version: int = field(default=-1, compare=False)

    def encode(self) -> bytes:
        return _dump(
            {
                "controller_epoch": self.controller_epoch,
                "leader": self.leader,
                "version": 1,
                "leader_epoch": self.leader_epoch,
                "isr": list(self.isr),
            }
        )

    @classmethod
    def decode(cls, data: bytes, zk_version: int = -1) -> LeaderAndIsr:
        body = _load(data)
        return cls(
            int(body["leader"]),
            int(body["leader_epoch"]),
            [int(r) for r in body["isr"]],
            int(body["controller_epoch"]),
            zk_version,
        )


def encode_controller(broker_id: int) -> bytes:
    """``/controller`` (ControllerZNode v1), ephemeral: who the controller is."""
    return _dump({"version": 1, "brokerid": broker_id, "timestamp": _now_ms()})


def decode_controller(data: bytes) -> int:
    return int(_load(data)["brokerid"])


def encode_cluster_id(cluster_id: str) -> bytes:
    """``/cluster/id`` (ClusterIdZNode): Kafka writes the version as a string."""
    return _dump({"version": "1", "id": cluster_id})


def decode_cluster_id(data: bytes) -> str:
    return str(_load(data)["id"])


def encode_topic_config(config: dict[str, str]) -> bytes:
    """``/config/topics/T`` (ConfigEntityZNode): the topic's config overrides."""
    return _dump({"version": 1, "config": dict(config)})


def decode_topic_config(data: bytes) -> dict[str, str]:
    if not data:
        return {}
    return {str(k): str(v) for k, v in (_load(data).get("config") or {}).items()}
