"""The request context: who sent the request being handled, from where, on which listener.

Handlers are called as ``handle(broker, header, request)``; the router sets :data:`CURRENT` before calling one,
so an authorization check or a per-listener answer (Metadata's endpoints) reads it without a new parameter.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass

ANONYMOUS = "User:ANONYMOUS"  # Kafka's KafkaPrincipal.ANONYMOUS: PLAINTEXT, or SSL without a client certificate


@dataclass(frozen=True)
class RequestContext:
    """``principal`` is ``Type:name`` (Kafka's KafkaPrincipal.toString); ``client_host`` a bare address."""

    principal: str
    client_host: str
    listener: str
    security_protocol: str
    client_id: str = ""
    request_size: int = 0  # bytes of the request frame (what a produce quota counts)

    @property
    def user(self) -> str:
        """The principal's name, the ``user`` of client quotas."""
        return self.principal.partition(":")[2]


NO_CONTEXT = RequestContext(ANONYMOUS, "", "", "PLAINTEXT")  # outside a request (frozen: safe to share)
CURRENT: ContextVar[RequestContext] = ContextVar("kafkalog_request_context", default=NO_CONTEXT)

# Milliseconds a handler asks to throttle the current request's connection for (client quotas); the router reads
# it after the handler returns.
THROTTLE_MS: ContextVar[list[int]] = ContextVar("kafkalog_throttle_ms")


def throttle(ms: int) -> None:
    """Ask for the connection of the current request to be throttled for ``ms`` (the largest ask wins)."""
    holder = THROTTLE_MS.get(None)
    if holder is not None and ms > holder[0]:
        holder[0] = ms
