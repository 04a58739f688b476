"""Kafka message schemas (``common/message/*.json``, Apache License 2.0) that kafka-python 3.0.12 does not ship.

They are loaded by kafka-python's schema classes exactly as its own resources are (``load_json=`` this package),
so the broker encodes and decodes them with the same generated codec as every other API.
"""

import sys

from kafka.protocol.api_message import ApiMessage

_HERE = sys.modules[__name__]


class ConsumerGroupHeartbeatRequest(ApiMessage, load_json=_HERE):
    """KIP-848's heartbeat (API key 68), versions 0-1."""


class ConsumerGroupHeartbeatResponse(ApiMessage, load_json=_HERE):
    pass


class ConsumerGroupDescribeRequest(ApiMessage, load_json=_HERE):
    """KIP-848's describe (API key 69), version 0: the admin's view of consumer-protocol groups."""


class ConsumerGroupDescribeResponse(ApiMessage, load_json=_HERE):
    pass


class ControlledShutdownRequest(ApiMessage, load_json=_HERE):
    """A broker's request to the controller to move its leaderships away before it stops (API key 7)."""


class ControlledShutdownResponse(ApiMessage, load_json=_HERE):
    pass


class StopReplicaRequest(ApiMessage, load_json=_HERE):
    """The controller's request to a broker to stop (and here always delete) replicas (API key 5), v0-1."""


class StopReplicaResponse(ApiMessage, load_json=_HERE):
    pass


__all__ = [
    "ConsumerGroupDescribeRequest",
    "ConsumerGroupDescribeResponse",
    "ConsumerGroupHeartbeatRequest",
    "ConsumerGroupHeartbeatResponse",
    "ControlledShutdownRequest",
    "ControlledShutdownResponse",
    "StopReplicaRequest",
    "StopReplicaResponse",
]
