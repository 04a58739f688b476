"""ACLs and SCRAM credentials of a ZooKeeper cluster, kept where Kafka's ZooKeeper mode keeps them, so that every
broker enforces the same ACLs and authenticates the same users (a single node keeps its files in the log dir).

- ACLs (Kafka's AclAuthorizer): LITERAL bindings of a resource in ``/kafka-acl/<Type>/<name>``, PREFIXED ones in
  ``/kafka-acl-extended/prefixed/<Type>/<name>``, each ``{"version":1,"acls":[{"principal","permissionType",
  "operation","host"}]}`` with Kafka's names (``Topic``, ``Allow``, ``DescribeConfigs``...). A change writes the
  resource's znode conditionally on its version, then a sequential notification: ``/kafka-acl-changes/acl_changes_N``
  holding ``Type:name`` (LITERAL) or ``/kafka-acl-extended-changes/acl_changes_N`` holding the pattern's JSON.
- SCRAM credentials (Kafka's ConfigCommand / AdminZkClient): ``/config/users/<sanitized user>`` as
  ``{"version":1,"config":{"SCRAM-SHA-256":"salt=...,stored_key=...,server_key=...,iterations=N"}}`` (other keys
  of the user's config, e.g. quotas, are kept), then ``/config/changes/config_change_N`` holding
  ``{"version":2,"entity_path":"users/<user>"}``.

Every broker watches the notification paths and reloads the whole set when one appears (a kafkalog cluster is
small): a change made through any broker is enforced by all within a ZooKeeper round trip. The stores keep the
in-memory interface of the file stores (``AclStore``, ``CredentialStore``), so the handlers and the SASL server
do not know where the data lives.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote, unquote

from ..security.acl import AclBinding, AclFilter, AclStore
from ..security.scram import MECHANISMS, CredentialStore, ScramCredential

log = logging.getLogger("kafka.authorizer.logger")

ACL_PATHS = {"LITERAL": "/kafka-acl", "PREFIXED": "/kafka-acl-extended/prefixed"}
LITERAL_CHANGES = "/kafka-acl-changes"
EXTENDED_CHANGES = "/kafka-acl-extended-changes"
CHANGE_PREFIX = "acl_changes_"
USERS = "/config/users"
CONFIG_CHANGES = "/config/changes"
CONFIG_CHANGE_PREFIX = "config_change_"


def _camel(name: str) -> str:
    """TRANSACTIONAL_ID -> TransactionalId (Kafka's SecurityUtils names in ZooKeeper's JSON and paths)."""
    return "".join(part.capitalize() for part in name.split("_"))


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).upper()


def sanitize(user: str) -> str:
    """Kafka's Sanitizer.sanitize: URL-encoding, so any user name is one znode name."""
    return quote(user, safe="-_.")


class _Reloader:
    """Runs ``reload`` in a thread of its own whenever a watch fires (never in kazoo's callback thread), at most
    one at a time, once more if a watch fired during a run."""

    def __init__(self, reload: Any, name: str) -> None:
        self._reload = reload
        self._name = name
        self._lock = threading.Lock()
        self._running = False
        self._again = False

    def __call__(self, *_args: Any) -> bool:
        with self._lock:
            if self._running:
                self._again = True
                return True
            self._running = True
        threading.Thread(target=self._run, name=self._name, daemon=True).start()
        return True

    def _run(self) -> None:
        while True:
            try:
                self._reload()
            except Exception as e:
                log.warning("Reloading %s from ZooKeeper failed: %s", self._name, e)
            with self._lock:
                if not self._again:
                    self._running = False
                    return
                self._again = False


def _attach(store: Any, zk: Any, paths: tuple[str, ...], change_paths: tuple[str, ...]) -> None:
    """Back a file store (AclStore, CredentialStore: their fields, no file) by ZooKeeper: create ``paths``, load
    the store, and reload it whenever a change notification appears under one of ``change_paths``."""
    store.zk = zk
    store.path = None
    store._lock = threading.Lock()
    for path in paths:
        zk.ensure_path(path)
    store.reload()
    reloader = _Reloader(store.reload, f"{type(store).__name__}-reload")
    for path in change_paths:
        zk.ChildrenWatch(path, reloader)


class ZkAclStore(AclStore):
    """The cluster's ACLs. Invariant: ``bindings`` is what ZooKeeper held at the last reload, and a change made
    here is in ZooKeeper (and notified) before it returns."""

    def __init__(self, zk: Any) -> None:  # no file: AclStore's fields only
        self.bindings = frozenset()
        self._literal = {}
        self._prefixed = {}
        _attach(self, zk, (*ACL_PATHS.values(), LITERAL_CHANGES, EXTENDED_CHANGES), (LITERAL_CHANGES, EXTENDED_CHANGES))

    @staticmethod
    def _resource_path(pattern_type: str, resource_type: str, name: str) -> str:
        return f"{ACL_PATHS[pattern_type]}/{_camel(resource_type)}/{name}"

    def reload(self) -> None:
        from kazoo.exceptions import NoNodeError

        found: set[AclBinding] = set()
        for pattern_type, root in ACL_PATHS.items():
            for type_name in self.zk.get_children(root):
                for name in self.zk.get_children(f"{root}/{type_name}"):
                    try:
                        data, _ = self.zk.get(f"{root}/{type_name}/{name}")
                    except NoNodeError:
                        continue
                    found.update(self._decode(pattern_type, _snake(type_name), name, data))
        self._set(frozenset(found))

    @staticmethod
    def _decode(pattern_type: str, resource_type: str, name: str, data: bytes) -> list[AclBinding]:
        if not data:
            return []
        try:
            entries = json.loads(data.decode("utf-8")).get("acls") or []
            return [
                AclBinding(
                    resource_type,
                    name,
                    pattern_type,
                    str(e["principal"]),
                    str(e["host"]),
                    _snake(str(e["operation"])),
                    str(e["permissionType"]).upper(),
                )
                for e in entries
            ]
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            log.warning("Ignoring unreadable ACLs of %s %s (%s): %s", resource_type, name, pattern_type, e)
            return []

    @staticmethod
    def _encode(bindings: Iterable[AclBinding]) -> bytes:
        acls = [
            {
                "principal": b.principal,
                "permissionType": _camel(b.permission),
                "operation": _camel(b.operation),
                "host": b.host,
            }
            for b in sorted(bindings)
        ]
        return json.dumps({"version": 1, "acls": acls}, separators=(",", ":")).encode()

    def _update_resource(self, key: tuple[str, str, str], change: Any) -> None:
        """Read-modify-write one resource's znode on its version (a concurrent change elsewhere: read again);
        an empty list deletes the znode. Then the change notification."""
        from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

        pattern_type, resource_type, name = key
        path = self._resource_path(pattern_type, resource_type, name)
        while True:
            try:
                data, stat = self.zk.get(path)
                current = set(self._decode(pattern_type, resource_type, name, data))
                version = stat.version
            except NoNodeError:
                current, version = set(), -1
            new = change(current)
            try:
                if version < 0:
                    if not new:
                        break
                    self.zk.create(path, self._encode(new), makepath=True)
                elif new:
                    self.zk.set(path, self._encode(new), version=version)
                else:
                    self.zk.delete(path, version=version)
                break
            except (BadVersionError, NodeExistsError, NoNodeError):
                continue
        if pattern_type == "LITERAL":
            notice = f"{_camel(resource_type)}:{name}".encode()
            self.zk.create(f"{LITERAL_CHANGES}/{CHANGE_PREFIX}", notice, sequence=True)
        else:
            body = {"version": 1, "resourceType": _camel(resource_type), "name": name, "patternType": "Prefixed"}
            self.zk.create(f"{EXTENDED_CHANGES}/{CHANGE_PREFIX}", json.dumps(body).encode(), sequence=True)

    def add(self, new: Iterable[AclBinding]) -> None:
        by_resource: dict[tuple[str, str, str], set[AclBinding]] = {}
        for b in new:
            by_resource.setdefault((b.pattern_type, b.resource_type, b.resource_name), set()).add(b)
        with self._lock:
            for key, added in by_resource.items():
                self._update_resource(key, lambda current, added=added: current | added)
            self.reload()

    def remove(self, filters: Iterable[AclFilter]) -> list[list[AclBinding]]:
        with self._lock:
            self.reload()
            filters = list(filters)
            matched = [sorted(b for b in self.bindings if f.matches(b)) for f in filters]
            by_resource: dict[tuple[str, str, str], set[AclBinding]] = {}
            for group in matched:
                for b in group:
                    by_resource.setdefault((b.pattern_type, b.resource_type, b.resource_name), set()).add(b)
            for key, gone in by_resource.items():
                self._update_resource(key, lambda current, gone=gone: current - gone)
            if by_resource:
                self.reload()
            return matched


class ZkCredentialStore(CredentialStore):
    """The cluster's SCRAM users. Invariant: ``_users`` is what ZooKeeper held at the last reload; a change made
    here is in ZooKeeper (and notified) before it returns."""

    def __init__(self, zk: Any) -> None:  # no file: CredentialStore's fields only
        self._users = {}
        _attach(self, zk, (USERS, CONFIG_CHANGES), (CONFIG_CHANGES,))

    def reload(self) -> None:
        from kazoo.exceptions import NoNodeError

        users: dict[str, dict[str, str]] = {}
        for child in self.zk.get_children(USERS):
            try:
                data, _ = self.zk.get(f"{USERS}/{child}")
            except NoNodeError:
                continue
            config = self._config(data)
            scram = {m: v for m, v in config.items() if m in MECHANISMS}
            valid = {}
            for mechanism, text in scram.items():
                try:
                    ScramCredential.from_text(text)
                    valid[mechanism] = text
                except (ValueError, KeyError) as e:
                    log.warning("Ignoring an unreadable %s credential of %s: %s", mechanism, unquote(child), e)
            if valid:
                users[unquote(child)] = valid
        self._users = users

    @staticmethod
    def _config(data: bytes) -> dict[str, str]:
        if not data:
            return {}
        try:
            body = json.loads(data.decode("utf-8"))
            return {str(k): str(v) for k, v in (body.get("config") or {}).items()}
        except (ValueError, AttributeError):
            return {}

    def apply(self, upserts: dict[tuple[str, str], ScramCredential], deletes: set[tuple[str, str]]) -> None:
        from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

        touched = sorted({u for u, _ in upserts} | {u for u, _ in deletes})
        with self._lock:
            for user in touched:
                path = f"{USERS}/{sanitize(user)}"
                while True:
                    try:
                        data, stat = self.zk.get(path)
                        config, version = self._config(data), stat.version
                    except NoNodeError:
                        config, version = {}, -1
                    for u, mechanism in deletes:
                        if u == user:
                            config.pop(mechanism, None)
                    for (u, mechanism), credential in upserts.items():
                        if u == user:
                            config[mechanism] = credential.to_text()
                    body = json.dumps({"version": 1, "config": config}, separators=(",", ":")).encode()
                    try:
                        if version < 0:
                            self.zk.create(path, body, makepath=True)
                        else:
                            self.zk.set(path, body, version=version)
                        break
                    except (BadVersionError, NodeExistsError, NoNodeError):
                        continue
                notice = {"version": 2, "entity_path": f"users/{sanitize(user)}"}
                self.zk.create(f"{CONFIG_CHANGES}/{CONFIG_CHANGE_PREFIX}", json.dumps(notice).encode(), sequence=True)
            self.reload()
