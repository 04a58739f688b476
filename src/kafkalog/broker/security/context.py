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


NO_CONTEXT = RequestContext(ANONYMOUS, "", "", "PLAINTEXT")  # outside a request (frozen: safe to share)
CURRENT: ContextVar[RequestContext] = ContextVar("kafkalog_request_context", default=NO_CONTEXT)
