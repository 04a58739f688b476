"""CreateAcls (30), DescribeAcls (29), DeleteAcls (31) over the node's ACL store.

Without an authorizer (``authorizer.class.name`` unset) they answer SECURITY_DISABLED, as Kafka's broker
does. Creating or deleting needs ALTER on the cluster, describing DESCRIBE on the cluster
(CLUSTER_AUTHORIZATION_FAILED otherwise).
"""

from __future__ import annotations

from ..protocol import (
    NONE,
    CreateAclsResponse,
    DeleteAclsResponse,
    DescribeAclsResponse,
    Response,
)
from ..security.acl import (
    NAMES,
    OPERATIONS,
    PATTERN_TYPES,
    PERMISSIONS,
    RESOURCE_TYPES,
    AclBinding,
    AclFilter,
    cluster_allowed,
)

CLUSTER_AUTHORIZATION_FAILED = 31
INVALID_REQUEST = 42
SECURITY_DISABLED = 54
_DISABLED = "No Authorizer is configured on the broker"
_CLUSTER_DENIED = "Cluster authorization failed."


def _name(kind: str, code: int) -> str:
    return NAMES[kind].get(code, "UNKNOWN")


# AclBinding's (and AclFilter's) fields in order: the field of an ACL creation and of an ACL filter in the request,
# and the kind of name its code stands for (None: text kept as it is).
_ACL_FIELDS = (
    ("resource_type", "resource_type_filter", "resource_type"),
    ("resource_name", "resource_name_filter", None),
    ("resource_pattern_type", "pattern_type_filter", "pattern_type"),  # v1+: v0 knows only LITERAL patterns
    ("principal", "principal_filter", None),
    ("host", "host_filter", None),
    ("operation", "operation", "operation"),
    ("permission_type", "permission_type", "permission"),
)
CREATION, FILTER = 0, 1
LITERAL = 3


def _acl_values(message, which: int, version: int) -> list:
    """The ACL fields of a creation or a filter (``which``) in AclBinding's order, codes turned into names."""
    values = []
    for row in _ACL_FIELDS:
        field, kind = row[which], row[2]
        value = LITERAL if kind == "pattern_type" and version < 1 else getattr(message, field)
        values.append(value if kind is None else _name(kind, value))
    return values


def _binding(c, version: int) -> AclBinding:
    return AclBinding(*_acl_values(c, CREATION, version))


def _filter(f, version: int) -> AclFilter:
    return AclFilter(*_acl_values(f, FILTER, version))


def _filter_problem(f: AclFilter) -> str | None:
    for value, kind in (
        (f.resource_type, "resource type"),
        (f.pattern_type, "pattern type"),
        (f.operation, "operation"),
        (f.permission, "permission type"),
    ):
        if value == "UNKNOWN":
            return f"Invalid {kind} filter"
    return None


async def handle_create(broker, header, request) -> Response:
    version = header.api_version
    R = CreateAclsResponse
    if broker.authorizer is None:
        results = [(SECURITY_DISABLED, _DISABLED)] * len(request.creations)
    elif not cluster_allowed(broker, "ALTER"):
        results = [(CLUSTER_AUTHORIZATION_FAILED, _CLUSTER_DENIED)] * len(request.creations)
    else:
        results, valid = [], []
        for c in request.creations:
            binding = _binding(c, version)
            problem = binding.validate()
            results.append((INVALID_REQUEST, problem) if problem else (NONE, None))
            if problem is None:
                valid.append(binding)
        if valid:
            broker.authorizer.store.add(valid)
    response = R(
        version=version,
        throttle_time_ms=0,
        results=[R.AclCreationResult(error_code=code, error_message=message) for code, message in results],
    )
    return Response.of(response, version)


async def handle_describe(broker, header, request) -> Response:
    version = header.api_version
    R = DescribeAclsResponse
    f = _filter(request, version)
    if broker.authorizer is None:
        code, message, found = SECURITY_DISABLED, _DISABLED, []
    elif not cluster_allowed(broker, "DESCRIBE"):
        code, message, found = CLUSTER_AUTHORIZATION_FAILED, _CLUSTER_DENIED, []
    elif (problem := _filter_problem(f)) is not None:
        code, message, found = INVALID_REQUEST, problem, []
    else:
        code, message = NONE, None
        found = sorted(b for b in broker.authorizer.store.bindings if f.matches(b))
    resources: dict[tuple[str, str, str], list[AclBinding]] = {}
    for b in found:
        resources.setdefault((b.resource_type, b.resource_name, b.pattern_type), []).append(b)
    response = R(
        version=version,
        throttle_time_ms=0,
        error_code=code,
        error_message=message,
        resources=[
            R.DescribeAclsResource(
                resource_type=RESOURCE_TYPES[rt],
                resource_name=name,
                pattern_type=PATTERN_TYPES[pt],
                acls=[
                    R.DescribeAclsResource.AclDescription(
                        principal=b.principal,
                        host=b.host,
                        operation=OPERATIONS[b.operation],
                        permission_type=PERMISSIONS[b.permission],
                    )
                    for b in bindings
                ],
            )
            for (rt, name, pt), bindings in resources.items()
        ],
    )
    return Response.of(response, version)


async def handle_delete(broker, header, request) -> Response:
    version = header.api_version
    R = DeleteAclsResponse
    Result = R.DeleteAclsFilterResult
    filters = [_filter(f, version) for f in request.filters]
    results = []
    if broker.authorizer is None or not cluster_allowed(broker, "ALTER"):
        code, message = (
            (SECURITY_DISABLED, _DISABLED)
            if broker.authorizer is None
            else (CLUSTER_AUTHORIZATION_FAILED, _CLUSTER_DENIED)
        )
        results = [Result(error_code=code, error_message=message, matching_acls=[]) for _ in filters]
    else:
        problems = [_filter_problem(f) for f in filters]
        deleted = broker.authorizer.store.remove(f for f, p in zip(filters, problems, strict=True) if p is None)
        groups = iter(deleted)
        for problem in problems:
            if problem is not None:
                results.append(Result(error_code=INVALID_REQUEST, error_message=problem, matching_acls=[]))
                continue
            results.append(
                Result(
                    error_code=NONE,
                    error_message=None,
                    matching_acls=[
                        Result.DeleteAclsMatchingAcl(
                            error_code=NONE,
                            error_message=None,
                            resource_type=RESOURCE_TYPES[b.resource_type],
                            resource_name=b.resource_name,
                            pattern_type=PATTERN_TYPES[b.pattern_type],
                            principal=b.principal,
                            host=b.host,
                            operation=OPERATIONS[b.operation],
                            permission_type=PERMISSIONS[b.permission],
                        )
                        for b in next(groups)
                    ],
                )
            )
    return Response.of(R(version=version, throttle_time_ms=0, filter_results=results), version)
