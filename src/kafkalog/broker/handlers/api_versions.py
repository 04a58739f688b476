"""ApiVersions (key 18): the APIs and versions this broker serves."""

from __future__ import annotations

import functools

from ..protocol import APIS, NONE, UNSUPPORTED_VERSION, ApiVersionsResponse, Response


def _api_keys() -> list:
    return [
        ApiVersionsResponse.ApiVersion(api_key=spec.key, min_version=spec.min_version, max_version=spec.max_version)
        for spec in sorted(APIS.values(), key=lambda s: s.key)
    ]


@functools.cache
def _encoded(version: int) -> bytes:
    """The answer at ``version``: the same for every request (ApiVersions is exempt from request quotas, so its
    throttle time stays 0), so it is encoded once per version rather than for every connection."""
    response = ApiVersionsResponse(version=version, error_code=NONE, api_keys=_api_keys(), throttle_time_ms=0)
    return bytes(response.encode(version=version))


async def handle(broker, header, request) -> Response:
    return Response([_encoded(header.api_version)])


def unsupported_version_response() -> Response:
    """Kafka's answer to an ApiVersions version it does not know: v0, UNSUPPORTED_VERSION, and the API list,
    from which the client picks a version both sides speak (KIP-511)."""
    response = ApiVersionsResponse(version=0, error_code=UNSUPPORTED_VERSION, api_keys=_api_keys())
    return Response.of(response, 0)
