"""Kafka's ACL model and authorizer (AclAuthorizer / StandardAuthorizer semantics), ACLs kept in the log dir.

An ACL binding is a resource pattern (type, name, LITERAL or PREFIXED) and an entry (principal, host,
operation, ALLOW or DENY). A request by ``principal`` from ``host`` to do ``operation`` on a resource is:

- allowed if the principal is one of ``super.users``;
- otherwise, among the bindings whose pattern matches the resource (LITERAL with the same name or ``*``,
  PREFIXED with a prefix of the name) and whose entry names the principal (or ``User:*``) and the host
  (or ``*``): denied if a DENY binding has the operation or ALL (deny wins); allowed if an ALLOW binding
  has the operation, ALL, or an operation implying it (READ, WRITE, DELETE, ALTER imply DESCRIBE;
  ALTER_CONFIGS implies DESCRIBE_CONFIGS);
- when no binding matches the resource at all: ``allow.everyone.if.no.acl.found`` (default false).

The bindings of this node are one JSON file (``acls.json`` in the first log dir), replaced atomically.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from ...errors import (
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    InvalidConfigurationError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
)
from ..file_store import JsonFileStore
from .context import CURRENT

log = logging.getLogger("kafka.authorizer.logger")

STORE_FILE = "acls.json"
CLUSTER_NAME = "kafka-cluster"
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"
AUTHORIZERS = (
    "kafka.security.authorizer.AclAuthorizer",
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "kafka.security.auth.SimpleAclAuthorizer",
)

# Kafka's wire codes (org.apache.kafka.common.resource.ResourceType, PatternType, acl.AclOperation,
# acl.AclPermissionType).
RESOURCE_TYPES = {
    "ANY": 1,
    "TOPIC": 2,
    "GROUP": 3,
    "CLUSTER": 4,
    "TRANSACTIONAL_ID": 5,
    "DELEGATION_TOKEN": 6,
    "USER": 7,
}
PATTERN_TYPES = {"ANY": 1, "MATCH": 2, "LITERAL": 3, "PREFIXED": 4}
OPERATIONS = {
    "ANY": 1,
    "ALL": 2,
    "READ": 3,
    "WRITE": 4,
    "CREATE": 5,
    "DELETE": 6,
    "ALTER": 7,
    "DESCRIBE": 8,
    "CLUSTER_ACTION": 9,
    "DESCRIBE_CONFIGS": 10,
    "ALTER_CONFIGS": 11,
    "IDEMPOTENT_WRITE": 12,
    "CREATE_TOKENS": 13,
    "DESCRIBE_TOKENS": 14,
}
PERMISSIONS = {"ANY": 1, "DENY": 2, "ALLOW": 3}
NAMES = {
    "resource_type": {v: k for k, v in RESOURCE_TYPES.items()},
    "pattern_type": {v: k for k, v in PATTERN_TYPES.items()},
    "operation": {v: k for k, v in OPERATIONS.items()},
    "permission": {v: k for k, v in PERMISSIONS.items()},
}
_IMPLIED_BY = {
    "DESCRIBE": ("DESCRIBE", "READ", "WRITE", "DELETE", "ALTER"),
    "DESCRIBE_CONFIGS": ("DESCRIBE_CONFIGS", "ALTER_CONFIGS"),
}


@dataclass(frozen=True, order=True)
class AclBinding:
    """One ACL, with names (not wire codes): e.g. TOPIC, orders-, PREFIXED, User:alice, *, WRITE, ALLOW."""

    resource_type: str
    resource_name: str
    pattern_type: str
    principal: str
    host: str
    operation: str
    permission: str

    def validate(self) -> str | None:
        """Why Kafka would refuse to create this binding (None if it is valid)."""
        if self.resource_type not in RESOURCE_TYPES or self.resource_type == "ANY":
            return f"Invalid resource type {self.resource_type}"
        if self.pattern_type not in ("LITERAL", "PREFIXED"):
            return f"Invalid pattern type {self.pattern_type}: ACLs are LITERAL or PREFIXED"
        if self.operation not in OPERATIONS or self.operation == "ANY":
            return f"Invalid operation {self.operation}"
        if self.permission not in ("ALLOW", "DENY"):
            return f"Invalid permission type {self.permission}"
        if not self.resource_name:
            return "Resource name must not be empty"
        if self.resource_type == "CLUSTER" and self.resource_name != CLUSTER_NAME:
            return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
        if ":" not in self.principal:
            return f"Could not parse principal from `{self.principal}` (no colon is found)."
        if self.pattern_type == "PREFIXED" and self.resource_name == WILDCARD:
            return "PREFIXED ACLs must not have the wildcard name '*'"
        return None


@dataclass(frozen=True)
class AclFilter:
    """A DescribeAcls / DeleteAcls filter: None matches anything; pattern MATCH matches every pattern that
    would apply to the named resource, ANY every pattern type."""

    resource_type: str = "ANY"
    resource_name: str | None = None
    pattern_type: str = "ANY"
    principal: str | None = None
    host: str | None = None
    operation: str = "ANY"
    permission: str = "ANY"

    def matches(self, b: AclBinding) -> bool:
        if self.resource_type != "ANY" and b.resource_type != self.resource_type:
            return False
        if self.pattern_type == "MATCH":
            if self.resource_name is not None and not _pattern_matches(b, self.resource_name):
                return False
        else:
            if self.pattern_type != "ANY" and b.pattern_type != self.pattern_type:
                return False
            if self.resource_name is not None and b.resource_name != self.resource_name:
                return False
        return (
            (self.principal is None or b.principal == self.principal)
            and (self.host is None or b.host == self.host)
            and (self.operation == "ANY" or b.operation == self.operation)
            and (self.permission == "ANY" or b.permission == self.permission)
        )


def _pattern_matches(b: AclBinding, name: str) -> bool:
    if b.pattern_type == "LITERAL":
        return b.resource_name in (name, WILDCARD)
    return b.pattern_type == "PREFIXED" and name.startswith(b.resource_name)


class AclStore(JsonFileStore):
    """The bindings of this node. Invariant: the file equals ``bindings`` whenever a change has returned."""

    def __init__(self, log_dir: str | Path) -> None:
        super().__init__(log_dir, STORE_FILE, "ACLs")
        self.bindings: frozenset[AclBinding] = frozenset()
        self._literal: dict[tuple[str, str], list[AclBinding]] = {}
        self._prefixed: dict[str, list[AclBinding]] = {}
        self._set(self._load(lambda items: frozenset(AclBinding(**item) for item in items)) or frozenset())

    def _set(self, bindings: frozenset[AclBinding]) -> None:
        """Install ``bindings`` with their index (literal by (type, name), prefixed by type), built off to the
        side and swapped in, so a reader sees the old or the new set."""
        literal: dict[tuple[str, str], list[AclBinding]] = {}
        prefixed: dict[str, list[AclBinding]] = {}
        for b in bindings:
            if b.pattern_type == "LITERAL":
                literal.setdefault((b.resource_type, b.resource_name), []).append(b)
            else:
                prefixed.setdefault(b.resource_type, []).append(b)
        self._literal, self._prefixed, self.bindings = literal, prefixed, bindings

    def matching(self, resource_type: str, name: str) -> list[AclBinding]:
        """The bindings whose pattern matches the resource: LITERAL name or '*', PREFIXED prefix of the name."""
        found = self._literal.get((resource_type, name), []) + self._literal.get((resource_type, WILDCARD), [])
        found += [b for b in self._prefixed.get(resource_type, ()) if name.startswith(b.resource_name)]
        return found

    def add(self, new: Iterable[AclBinding]) -> None:
        with self._lock:
            bindings = self.bindings | set(new)
            self._write(bindings)
            self._set(bindings)

    def remove(self, filters: Iterable[AclFilter]) -> list[list[AclBinding]]:
        """Delete the bindings each filter matches; per filter, the bindings it deleted."""
        with self._lock:
            filters = list(filters)
            matched = [sorted(b for b in self.bindings if f.matches(b)) for f in filters]
            gone = {b for group in matched for b in group}
            if gone:
                bindings = self.bindings - gone
                self._write(bindings)
                self._set(bindings)
            return matched

    def _write(self, bindings: Iterable[AclBinding]) -> None:
        self._save([asdict(b) for b in sorted(bindings)], indent=1)


class Authorizer:
    """Decides requests against the ACL store; see the module docstring for the rules."""

    def __init__(self, store: AclStore, super_users: Iterable[str], allow_if_no_acl: bool) -> None:
        self.store = store
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl

    @classmethod
    def from_config(
        cls, props: Mapping[str, str], log_dir: str | Path, store: AclStore | None = None
    ) -> Authorizer | None:
        """The configured authorizer (None without ``authorizer.class.name``), over ``store`` if given (a cluster's
        ZooKeeper store), else the ACL file of ``log_dir``."""
        name = props.get("authorizer.class.name", "").strip()
        if not name:
            return None
        if name not in AUTHORIZERS:
            raise InvalidConfigurationError(
                f"authorizer.class.name {name}: supported authorizers are {', '.join(AUTHORIZERS)}"
            )
        super_users = [u.strip() for u in props.get("super.users", "").split(";") if u.strip()]
        allow = props.get("allow.everyone.if.no.acl.found", "false").strip().lower()
        if allow not in ("true", "false"):
            raise InvalidConfigurationError(
                f"Invalid value {allow} for configuration allow.everyone.if.no.acl.found: "
                "Expected value to be a boolean"
            )
        return cls(store if store is not None else AclStore(log_dir), super_users, allow == "true")

    def authorize(
        self, principal: str, host: str, operation: str, resource_type: str, name: str, log_denied: bool = True
    ) -> bool:
        if principal in self.super_users:
            return True
        matching = self.store.matching(resource_type, name)
        if not matching:
            allowed = self.allow_if_no_acl
        else:
            mine = [
                b for b in matching if b.principal in (principal, WILDCARD_PRINCIPAL) and b.host in (host, WILDCARD)
            ]
            if any(b.permission == "DENY" and b.operation in (operation, "ALL") for b in mine):
                allowed = False
            else:
                ops = (*_IMPLIED_BY.get(operation, (operation,)), "ALL")
                allowed = any(b.permission == "ALLOW" and b.operation in ops for b in mine)
        if not allowed and (log_denied or log.isEnabledFor(logging.DEBUG)):
            log.log(
                logging.INFO if log_denied else logging.DEBUG,
                "Principal = %s is Denied operation = %s from host = %s on resource = %s:LITERAL:%s",
                principal,
                operation,
                host,
                resource_type.title().replace("_", ""),
                name,
            )
        return allowed


def allowed(broker, operation: str, resource_type: str, name: str, log_denied: bool = True) -> bool:
    """Whether the request being handled may do ``operation`` on the resource (always, without an authorizer).

    ``log_denied=False`` for a check that only filters what is shown (Metadata's topic list, ListGroups): a
    refusal is then logged at DEBUG, as Kafka's authorizer does for such checks."""
    authorizer = getattr(broker, "authorizer", None)
    if authorizer is None:
        return True
    ctx = CURRENT.get()
    return bool(authorizer.authorize(ctx.principal, ctx.client_host, operation, resource_type, name, log_denied))


def cluster_allowed(broker, operation: str, log_denied: bool = True) -> bool:
    return allowed(broker, operation, "CLUSTER", CLUSTER_NAME, log_denied)


# Kafka's AclEntry.supportedOperations of the resource types whose authorized operations Metadata answers report
SUPPORTED_OPERATIONS = {
    "TOPIC": ("READ", "WRITE", "CREATE", "DESCRIBE", "DELETE", "ALTER", "DESCRIBE_CONFIGS", "ALTER_CONFIGS"),
    "CLUSTER": (
        "CREATE",
        "CLUSTER_ACTION",
        "DESCRIBE_CONFIGS",
        "ALTER_CONFIGS",
        "IDEMPOTENT_WRITE",
        "ALTER",
        "DESCRIBE",
    ),
}


def authorized_operations(broker, resource_type: str, name: str) -> set[int]:
    """The codes of the operations on the resource that the request being handled may do (Kafka's
    AuthHelper.authorizedOperations: every supported one without an authorizer; refusals not logged)."""
    return {
        OPERATIONS[op] for op in SUPPORTED_OPERATIONS[resource_type] if allowed(broker, op, resource_type, name, False)
    }


_DENIED_ERRORS = {
    "TOPIC": (TopicAuthorizationFailedError, "Not authorized to access topics: [{}]"),
    "GROUP": (GroupAuthorizationFailedError, "Not authorized to access group: {}"),
    "CLUSTER": (ClusterAuthorizationFailedError, "Cluster authorization failed."),
    "TRANSACTIONAL_ID": (TransactionalIdAuthorizationFailedError, "Transactional Id authorization failed."),
}


def require(broker, operation: str, resource_type: str, name: str = CLUSTER_NAME) -> None:
    """Raise Kafka's authorization error for the resource type unless the request may do ``operation``."""
    if not allowed(broker, operation, resource_type, name):
        error, message = _DENIED_ERRORS[resource_type]
        raise error(message.format(name))
