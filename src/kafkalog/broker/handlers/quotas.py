"""DescribeClientQuotas (48) and AlterClientQuotas (49) over the node's quota store (see ..quota)."""

from __future__ import annotations

from ..protocol import NONE, AlterClientQuotasResponse, DescribeClientQuotasResponse, Response
from ..quota import ENTITY_TYPES, KEYS, entity_key, value_problem
from ..security.acl import cluster_allowed

INVALID_REQUEST = 42
CLUSTER_AUTHORIZATION_FAILED = 31
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2


def _entity_problem(pairs) -> str | None:
    types = [t for t, _ in pairs]
    if not types:
        return "Invalid empty client quota entity"
    for t in types:
        if t not in ENTITY_TYPES:
            return f"Unhandled client quota entity type: {t}"
    if len(set(types)) != len(types):
        return f"Duplicate {types[0]} entity type in client quota entity"
    return None


async def handle_describe(broker, header, request) -> Response:
    version = header.api_version
    R = DescribeClientQuotasResponse
    if not cluster_allowed(broker, "DESCRIBE_CONFIGS"):
        response = R(
            version=version,
            throttle_time_ms=0,
            error_code=CLUSTER_AUTHORIZATION_FAILED,
            error_message="Cluster authorization failed.",
            entries=None,
        )
        return Response.of(response, version)
    components = [(c.entity_type, c.match_type, c.match) for c in request.components]
    for entity_type, match_type, _ in components:
        if entity_type not in ENTITY_TYPES or match_type not in (0, 1, 2):
            response = R(
                version=version,
                throttle_time_ms=0,
                error_code=INVALID_REQUEST,
                error_message=f"Invalid client quota filter component {entity_type}/{match_type}",
                entries=None,
            )
            return Response.of(response, version)
    entries = []
    for entity, values in sorted(broker.quota_store.entries.items(), key=str):
        names = dict(entity)
        ok = True
        for entity_type, match_type, match in components:
            if entity_type not in names:
                ok = False
            elif match_type == MATCH_EXACT:
                ok = ok and names[entity_type] == match
            elif match_type == MATCH_DEFAULT:
                ok = ok and names[entity_type] is None
            else:
                ok = ok and names[entity_type] is not None
        if request.strict and set(names) != {c[0] for c in components}:
            ok = False
        if ok:
            entries.append(
                R.EntryData(
                    entity=[R.EntryData.EntityData(entity_type=t, entity_name=n) for t, n in entity],
                    values=[R.EntryData.ValueData(key=k, value=float(v)) for k, v in sorted(values.items())],
                )
            )
    response = R(version=version, throttle_time_ms=0, error_code=NONE, error_message=None, entries=entries)
    return Response.of(response, version)


async def handle_alter(broker, header, request) -> Response:
    version = header.api_version
    R = AlterClientQuotasResponse
    may = cluster_allowed(broker, "ALTER_CONFIGS")
    results, changes = [], []
    for entry in request.entries:
        pairs = [(e.entity_type, e.entity_name) for e in entry.entity]
        problem = None if may else "Cluster authorization failed."
        code = CLUSTER_AUTHORIZATION_FAILED if not may else NONE
        if problem is None:
            problem = _entity_problem(pairs)
        ops: dict[str, float | None] = {}
        if problem is None:
            for op in entry.ops:
                if op.key not in KEYS:
                    problem = f"Invalid configuration key {op.key}"
                elif not op.remove:
                    problem = problem or value_problem(op.key, op.value)
                ops[op.key] = None if op.remove else float(op.value)
        if problem is not None and code == NONE:
            code = INVALID_REQUEST
        if problem is None:
            changes.append((entity_key(pairs), ops))
        results.append(
            R.EntryData(
                error_code=code,
                error_message=problem,
                entity=[R.EntryData.EntityData(entity_type=t, entity_name=n) for t, n in pairs],
            )
        )
    if changes and not request.validate_only:
        broker.quota_store.alter(changes)
    return Response.of(R(version=version, throttle_time_ms=0, entries=results), version)
