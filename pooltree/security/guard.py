"""``Security``: the one object the API layer asks who a request comes from and whether it may do what it asks.

* ``authenticate(headers)`` turns ``Authorization: OAuth <token>`` into a user (YT error 900 otherwise);
  ``X-Started-By`` is never trusted for identity.
* ``authenticate_node(headers, peer)`` checks the cluster node secret of a heartbeat (nodes are not users: a user
  token, even root's, is refused there, and the node secret is no user token).
* ``authorize(command, user, params)`` is called once per command before its handler runs; it resolves the objects
  the command touches through the ``ObjectResolver`` the service installs (pool ACL chains from Cypress, operation
  owners and ACLs from the scheduler) and raises the YTsaurus authorization error (901) on a denial.
* The authentication commands (``set_user_password``, ``issue_token``, ``list_user_tokens``, ``revoke_token``,
  ``add_member``, ``remove_member``, ``check_permission``, ``check_operation_permission``) and the ``user``/``group``
  objects under ``//sys/users`` and ``//sys/groups`` are served here; the app only registers them.
"""

from __future__ import annotations

import functools
import ipaddress
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pooltree.errors import PooltreeError
from pooltree.security.acl import (
    AUTHORIZATION_ERROR,
    OPERATION_PERMISSIONS,
    PERMISSIONS,
    Ace,
    AclNode,
    Decision,
    check,
    parse_acl,
    parse_inherit_acl,
)
from pooltree.security.credentials import constant_time_equal, is_sha256
from pooltree.security.directory import (
    AUTHENTICATION_ERROR,
    EVERYONE,
    ROOT,
    USERS,
    Directory,
    SecurityError,
)
from pooltree.security.policy import Rule, authorize
from pooltree.security.throttle import PASSWORD_CHECK_LIMITS, PasswordThrottle

log = logging.getLogger(__name__)

NODE_SECRET_HEADER = "x-pooltree-node-secret"
"""The header a node sends its cluster node secret in (never ``Authorization``: nodes are not users)."""
SECURITY_ATTRIBUTES = frozenset({"acl", "inherit_acl"})
OPERATION_BASE_ACL = (Ace("allow", (EVERYONE,), ("read",)),)
"""Every user may read (see) every operation unless an ACE denies it (YTsaurus ``operation_base_acl``)."""
POOL_TREES_ROOT_ACL = (Ace("allow", (USERS,), ("read", "use")),)
"""``//sys/pool_trees``: users may read the trees and use every pool unless an ACE below denies it; creating,
changing and removing trees and pools is for superusers and whoever an ACE grants ``write``/``administer``."""
ROOT_ACL = (Ace("allow", (EVERYONE,), ("read",)),)
TMP_ACL = (Ace("allow", (USERS,), ("read", "write", "create", "remove")),)
"""``//tmp`` is every user's scratch space, as in YTsaurus."""
TMP_ACCOUNT_ACL = (Ace("allow", (USERS,), ("use",)),)
"""``//sys/accounts/tmp``: every user may charge nodes to the ``tmp`` account (YTsaurus's built-in ACL); ``sys``
and created accounts grant ``use`` only through their own ACL."""


class WouldBlock(Exception):
    """The resolver needs the store to answer; the caller retries off the event loop."""


def _auth_error(message: str) -> PooltreeError:
    return PooltreeError(message, code=AUTHENTICATION_ERROR)


def _denied(message: str, **attributes: Any) -> PooltreeError:
    return PooltreeError(message, code=AUTHORIZATION_ERROR, attributes=attributes)


@dataclass(frozen=True)
class OperationAccess:
    """What decides who may read or manage an operation: its owner (authenticated user), ``owners``, ``acl``."""

    operation_id: str
    owner: str
    acl: tuple[Ace, ...] = ()
    owners: tuple[str, ...] = ()


def access_of(
    operation_id: str, owner: str, spec: Mapping[str, Any], runtime: Mapping[str, Any] | None
) -> OperationAccess:
    """An operation's access from its spec and runtime parameters (``acl``/``owners`` updated at runtime win);
    an ACL that does not parse denies everyone but the owner and superusers."""
    runtime = runtime if isinstance(runtime, Mapping) else {}
    raw_acl = runtime.get("acl", spec.get("acl"))
    raw_owners = runtime.get("owners", spec.get("owners"))
    try:
        acl = parse_acl(raw_acl, "acl", permissions=OPERATION_PERMISSIONS)
    except PooltreeError:
        acl = (Ace("deny", (EVERYONE,), OPERATION_PERMISSIONS),)
    owners = tuple(o for o in raw_owners if isinstance(o, str)) if isinstance(raw_owners, list) else ()
    return OperationAccess(operation_id, owner, acl, owners)


@dataclass(frozen=True)
class Target:
    """Where a path points, for a permission check: the node's canonical path (or the path a new node would
    take), the attribute keys (None for the node itself, ``()`` for ``/@``), the parent's path, and whether the
    node exists, its type and whether it carries ``acl``/``inherit_acl``/``owner`` of its own."""

    node: str
    attribute: tuple[str, ...] | None
    parent: str
    exists: bool
    node_type: str | None = None
    has_security: bool = False


class ObjectResolver(Protocol):
    """How ``Security`` finds the ACLs of the objects a command touches (installed by the service)."""

    def locate(self, path: str) -> Target:
        """Parse ``path`` (YT error naming it when malformed) and say where it points."""
        ...

    def subtree_chains(self, path: str) -> Iterable[list[AclNode]]:
        """The ACL chain of every node below ``path`` (not the node itself)."""
        ...

    def job_operation(self, job_id: str) -> str | None:
        """The operation a running job belongs to; None for an unknown job."""
        ...

    def transaction_owner(self, transaction_id: str) -> str | None:
        """The user who started a transaction; None for an unknown one."""
        ...

    def acl_chain(self, path: str) -> list[AclNode]:
        """The node at ``path`` (or its nearest existing ancestor) and its ancestors up to the root."""
        ...

    def pool_chain(self, tree: str, pool: str) -> list[AclNode] | None:
        """Pool ``pool`` of ``tree`` and its ancestors; None when there is no such pool."""
        ...

    def tree_chain(self, tree: str) -> list[AclNode]: ...

    def pool_name_error(self, name: str, *, administrator: bool) -> PooltreeError | None:
        """The error for a pool name the caller may not give (the administrators' or the users' regex)."""
        ...

    def operation_access(self, operation_id: str, *, blocking: bool = True) -> OperationAccess | None:
        """None for an unknown operation; raises ``WouldBlock`` when not ``blocking`` and the store is needed."""
        ...

    def operation_pools(self, spec: Mapping[str, Any], user: str) -> list[tuple[str, str, str | None]]:
        """(tree, pool, the existing pool whose ``use`` decides or None for the tree root) per tree."""
        ...

    def pool_of(self, tree: str, pool: str, user: str) -> tuple[str, str | None]: ...

    def operation_trees(self, operation_id: str) -> list[str]: ...


def bootstrap_operator_check(
    root_token: str | None, node_secret: str | None, *, authentication: bool = True
) -> Callable[[Mapping[str, str]], None]:
    """``authenticate_operator`` for a process that has no ``Security`` yet (a standby, a leader between stores):
    the superuser token it was started with, or the node secret; raises 900 otherwise."""

    def check(headers: Mapping[str, str]) -> None:
        if not authentication:
            return
        secret = headers.get(NODE_SECRET_HEADER, "")
        if secret and node_secret is not None and constant_time_equal(secret, node_secret):
            return
        scheme, _, credentials = headers.get("authorization", "").partition(" ")
        token = credentials.strip()
        bearer = scheme.lower() in ("oauth", "bearer") and bool(token)
        if bearer and root_token is not None and constant_time_equal(token, root_token):
            return
        raise _auth_error(
            "Authentication failed: the store health is for superusers (their token) and nodes (the node secret)"
        )

    return check


def parse_networks(
    text: str | Iterable[str] | None,
) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    """``'127.0.0.1/32,10.0.0.0/8'`` → networks; every bad item is named."""
    if text is None:
        return ()
    items = text.split(",") if isinstance(text, str) else list(text)
    out = []
    for item in items:
        item = item.strip()
        if not item:
            continue
        try:
            out.append(ipaddress.ip_network(item, strict=False))
        except ValueError as error:
            raise PooltreeError(f"node network {item!r} is not an IP address or network: {error}") from None
    return tuple(out)


LOOPBACK_NETWORKS = parse_networks("127.0.0.0/8,::1/128")


def is_loopback(host: str) -> bool:
    if host in ("localhost", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@functools.lru_cache(maxsize=4096)
def _peer_ip(peer: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """``peer`` parsed as an IP address (None if it is not one); kept per peer, as every heartbeat of a node comes
    from the same address (parsing was ~3% of a scheduler answering 1,000 idle nodes)."""
    try:
        return ipaddress.ip_address(peer)
    except ValueError:
        return None


def check_node_credentials(secret: str, peer: str | None, node_secret: str | None, networks: Any) -> None:
    """A node's secret must be the cluster's and its peer address in a node network (``networks`` None: any);
    the check ``Security.authenticate_node`` makes, also made by node shard processes (``pooltree/shards``)."""
    if node_secret is None or not secret or not constant_time_equal(secret, node_secret):
        raise _auth_error("Node authentication failed: the heartbeat carries no valid node secret")
    if networks is not None:
        ip = _peer_ip(peer or "")
        if ip is None:
            raise _auth_error(f"Node heartbeat from unknown peer {peer!r} refused")
        if not _in_networks(ip, tuple(networks)):
            raise _auth_error(f"Node heartbeat from {peer} refused: not a registered node network")


@functools.lru_cache(maxsize=4096)
def _in_networks(ip: ipaddress.IPv4Address | ipaddress.IPv6Address, networks: tuple[Any, ...]) -> bool:
    """Whether ``ip`` is in one of ``networks``; kept per (address, networks), as every heartbeat of a node asks
    the same (the walk over the networks was ~4% of a scheduler answering 1,000 nodes)."""
    return any(ip in network for network in networks)


class Security:
    """Identity and permissions of one cluster (see the module docstring)."""

    def __init__(
        self,
        store: Any,
        *,
        clock: Callable[[], float] = time.time,
        authentication: bool = True,
        root_token: str | None = None,
        node_secret: str | None = None,
        node_networks: Sequence[Any] | None = None,
        metrics_public: bool = False,
        password_checks: str = PASSWORD_CHECK_LIMITS,
    ) -> None:
        self.directory = Directory(store, clock=clock)
        self.password_throttle = PasswordThrottle(password_checks)
        self.clock = clock
        self.authentication = authentication
        self.node_secret = node_secret
        self.node_networks = tuple(node_networks) if node_networks is not None else None
        self.metrics_public = metrics_public
        self.resolver: ObjectResolver | None = None
        self._node_peers: dict[str, str] = {}
        self._node_lock = threading.Lock()
        if root_token is not None:
            if not isinstance(root_token, str) or not root_token.strip() or root_token != root_token.strip():
                raise PooltreeError("the superuser token must be a non-empty string without spaces around it")
            self.directory.add_token(ROOT, root_token, description="superuser token", bootstrap=True)

    # ------------------------------------------------------------------ authentication

    def authenticate(self, headers: Mapping[str, str]) -> str:
        """The user a request comes from (its token's owner); raises the YT authentication error (900)."""
        if not self.authentication:
            return ROOT
        header = headers.get("authorization", "")
        if not header:
            raise _auth_error("Client is missing credentials: send Authorization: OAuth <token>")
        scheme, _, credentials = header.partition(" ")
        token = credentials.strip()
        if scheme.lower() not in ("oauth", "bearer") or not token:
            raise _auth_error("Authentication failed: expected Authorization: OAuth <token>")
        user = self.directory.user_of_token(token)
        if user is None:
            raise _auth_error("Authentication failed: the token is not valid")
        return user

    def authenticate_metrics(self, headers: Mapping[str, str]) -> None:
        if not self.metrics_public:
            self.authenticate(headers)

    def authenticate_node(self, headers: Mapping[str, str], peer: str | None) -> None:
        """A heartbeat must carry the cluster node secret and come from a network nodes are registered on."""
        if not self.authentication:
            return
        check_node_credentials(
            headers.get(NODE_SECRET_HEADER, ""), peer, self.node_secret, self.node_networks
        )

    def authenticate_operator(self, headers: Mapping[str, str], peer: str | None) -> str:
        """Who may read the process's own state (``/internal/store_health``): a node (its secret, from a node
        network) or a superuser's token; anyone else gets 900 (no credentials) or 901 (not a superuser)."""
        if not self.authentication:
            return ROOT
        if headers.get(NODE_SECRET_HEADER):
            self.authenticate_node(headers, peer)
            return "node"
        user = self.authenticate(headers)
        if not self.directory.is_superuser(user):
            raise Decision("deny", "administer", user, "the scheduler's store health").error()
        return user

    def bind_node(self, address: str, peer: str | None) -> None:
        """A node address stays bound to the host it first heartbeated from until it times out, so another host
        holding the secret cannot take over a running node's jobs by claiming its address."""
        if not self.authentication or peer is None:
            return
        with self._node_lock:
            bound = self._node_peers.setdefault(address, peer)
        if bound != peer:
            raise _auth_error(
                f"Node heartbeat for {address!r} from {peer} refused: that node is registered from {bound}"
            )

    def forget_node(self, address: str) -> None:
        """Unbind a node address from its host (the node timed out; it may come back from elsewhere)."""
        with self._node_lock:
            self._node_peers.pop(address, None)

    # ------------------------------------------------------------------ authorization of commands

    def authorize(
        self,
        command: str,
        user: str,
        params: Mapping[str, Any],
        input_value: Any = None,
        *,
        rule: Rule | None = None,
        blocking: bool = True,
    ) -> bool:
        """The one permission check of a command, before its handler runs: ``rule`` (the command's, as
        registered) or ``policy.RULES``; a command without a rule is refused (901). Not ``blocking`` (on the
        event loop), False when deciding would need the store: call it again blocking, off the loop."""
        try:
            authorize(self, command, user, params, input_value, blocking=blocking, rule=rule)
        except WouldBlock:
            return False
        return True

    # ------------------------------------------------------------------ decisions

    def is_superuser(self, user: str) -> bool:
        return self.directory.is_superuser(user)

    def decide(self, user: str, permission: str, chain: Sequence[AclNode]) -> Decision:
        return check(
            chain,
            user,
            self.directory.subjects_of(user),
            permission,
            superuser=self.directory.is_superuser(user),
        )

    def require(self, user: str, permission: str, chain: Sequence[AclNode], **details: Any) -> None:
        decision = self.decide(user, permission, chain)
        if not decision.allowed:
            error = decision.error()
            error.attributes.update(details)
            raise error

    def require_each(self, user: str, permission: str, chains: Iterable[Sequence[AclNode]]) -> None:
        """``require`` on many objects (a node's descendants), the user's groups looked up once."""
        if self.directory.is_superuser(user):
            return
        subjects = self.directory.subjects_of(user)
        for chain in chains:
            decision = check(chain, user, subjects, permission)
            if not decision.allowed:
                error = decision.error()
                error.attributes["path"] = chain[0].path
                raise error

    def operation_decision(self, user: str, permission: str, access: OperationAccess) -> Decision:
        """``read``/``manage`` on an operation: superusers and the owner always; then ``owners``, the spec's ACL
        and the base ACL (everyone may read)."""
        name = f"operation {access.operation_id}"
        if self.directory.is_superuser(user):
            return Decision("allow", permission, user, name, "superuser")
        if user == access.owner:
            return Decision("allow", permission, user, name, "owner", ace_owner=name, subject=user)
        acl = list(access.acl)
        if access.owners:
            acl.append(Ace("allow", access.owners, ("read", "manage")))
        acl.extend(OPERATION_BASE_ACL)
        return check([AclNode(name, tuple(acl))], user, self.directory.subjects_of(user), permission)

    def operation_visible(
        self,
        user: str,
        operation_id: str,
        owner: str,
        spec: Mapping[str, Any],
        runtime: Mapping[str, Any] | None,
    ) -> bool:
        """Whether ``list_operations`` shows the operation to ``user`` (``read`` on it). Superusers and the owner
        are told before the operation's ACL is parsed (``operation_decision`` allows them whatever it says): a
        listing asks this of every operation on its page."""
        if user == owner or self.directory.is_superuser(user):
            return True
        return self.operation_decision(user, "read", access_of(operation_id, owner, spec, runtime)).allowed

    def require_operation(
        self, user: str, permission: str, operation_id: str, *, blocking: bool = True
    ) -> None:
        if self.directory.is_superuser(user):
            return
        access = self._resolver().operation_access(operation_id, blocking=blocking)
        if access is None:
            return  # the command answers "no such operation" itself
        decision = self.operation_decision(user, permission, access)
        if not decision.allowed:
            error = decision.error()
            error.attributes["operation_id"] = operation_id
            raise error

    def _resolver(self) -> ObjectResolver:
        if self.resolver is None:
            raise PooltreeError("security: no object resolver installed")
        return self.resolver

    # ------------------------------------------------------------------ authentication commands

    def _require_user_admin(self, caller: str, user: str, password_sha256: Any, action: str) -> None:
        """YTsaurus ``ValidateAuthenticationCommandPermissions``: administer on the user, or the user themselves
        with their current password."""
        if not self.directory.has_user(user):
            raise SecurityError(f"No such user {user!r}", code=908, attributes={"user": user})
        if self.directory.is_superuser(caller):
            return
        if caller != user:
            raise _denied(
                f'{action} can be performed either by user themselves or by a user having "administer" '
                "permission on the user",
                user=user,
                authenticated_user=caller,
            )
        self.password_throttle.admit(user)  # before the scrypt: a flood of checks costs nothing more
        if not self.directory.check_password(user, password_sha256):
            raise _denied(
                f"{action} requires the current password of user {user!r}: it is missing or wrong",
                user=user,
            )

    def set_user_password(self, caller: str, params: Mapping[str, Any]) -> None:
        user = _str(params, "user")
        self._require_user_admin(caller, user, params.get("current_password_sha256"), "Password change")
        self.directory.set_password(user, params.get("new_password_sha256"))
        log.info("password of user %s changed by %s", user, caller)

    def issue_token(self, caller: str, params: Mapping[str, Any]) -> str:
        user = _str(params, "user")
        self._require_user_admin(caller, user, params.get("password_sha256"), "Token issuance")
        description = params.get("description") or ""
        token = self.directory.issue_token(user, str(description))
        log.info("token issued for user %s by %s", user, caller)
        return token

    def list_user_tokens(self, caller: str, params: Mapping[str, Any]) -> Any:
        user = _str(params, "user")
        self._require_user_admin(caller, user, params.get("password_sha256"), "Tokens listing")
        tokens = self.directory.list_tokens(user)
        if params.get("with_metadata") in (True, "true"):
            return {"tokens": tokens, "metadata": {t: self.directory.token_metadata(t) for t in tokens}}
        return tokens

    def revoke_token(self, caller: str, params: Mapping[str, Any]) -> None:
        user = _str(params, "user")
        digest = params.get("token_sha256")
        if not is_sha256(digest):
            raise SecurityError(
                "Parameter 'token_sha256' must be the lowercase hex SHA-256 of the token",
                attributes={"parameter": "token_sha256"},
            )
        if self.directory.user_of_token_sha256(digest) != user:
            raise SecurityError(f"Provided token is not recognized as a valid token for user {user!r}")
        self._require_user_admin(caller, user, params.get("password_sha256"), "Token revocation")
        self.directory.revoke_token(user, digest)
        log.info("token of user %s revoked by %s", user, caller)

    def add_member(self, caller: str, params: Mapping[str, Any]) -> None:
        group, member = _str(params, "group"), _str(params, "member")
        self._require_superuser(caller, "write", f'group "{group}"')
        self.directory.add_member(member, group)

    def remove_member(self, caller: str, params: Mapping[str, Any]) -> None:
        group, member = _str(params, "group"), _str(params, "member")
        self._require_superuser(caller, "write", f'group "{group}"')
        self.directory.remove_member(member, group)

    def _require_superuser(self, caller: str, permission: str, object_name: str) -> None:
        if not self.directory.is_superuser(caller):
            raise Decision("deny", permission, caller, object_name).error()

    # ------------------------------------------------------------------ users and groups as objects

    def create_subject(self, caller: str, kind: str, attributes: Mapping[str, Any] | None) -> str:
        self._require_superuser(caller, "create", f"{kind} objects")
        attrs = dict(attributes or {})
        name = attrs.pop("name", None)
        if name is None:
            raise SecurityError(
                f'Attribute "name" is required to create a {kind}', attributes={"attribute": "name"}
            )
        if kind == "user":
            return self.directory.create_user(name, attrs)
        if attrs:
            raise SecurityError(f'Attribute "{sorted(attrs)[0]}" cannot be set on a group at creation')
        return self.directory.create_group(name)

    def remove_subject(self, caller: str, kind: str, name: str) -> None:
        self._require_superuser(caller, "remove", f'{kind} "{name}"')
        if kind == "user":
            self.directory.remove_user(name)
        else:
            self.directory.remove_group(name)

    def subject_attributes(self, kind: str, name: str) -> dict[str, Any]:
        """The attributes ``yt get //sys/users/NAME/@`` shows (never a password hash or a token)."""
        directory = self.directory
        record = directory.user_record(name) if kind == "user" else directory.group_record(name)
        attributes: dict[str, Any] = {
            "id": record["id"],
            "type": kind,
            "name": name,
            "member_of": directory.member_of(name),
            "member_of_closure": sorted(directory.subjects_of(name) - {name}),
        }
        if kind == "group":
            attributes["members"] = directory.members(name)
        else:
            attributes["has_password"] = directory.has_password(name)
        return attributes

    # ------------------------------------------------------------------ check_permission

    def user_object_chain(self, name: str) -> list[AclNode]:
        return [AclNode(f'user "{name}"'), AclNode("//sys/users")]

    def check_permission(self, caller: str, params: Mapping[str, Any]) -> dict[str, Any]:
        user = _str(params, "user")
        permission = _str(params, "permission")
        path = _str(params, "path")
        if permission not in PERMISSIONS:
            raise SecurityError(
                f"Unknown permission {permission!r}; known: {', '.join(PERMISSIONS)}",
                attributes={"parameter": "permission"},
            )
        if not self.directory.has_user(user):
            raise SecurityError(f"No such user {user!r}", code=908, attributes={"user": user})
        stripped = path.rstrip("/")
        if stripped.startswith(("//sys/users/", "//sys/groups/")) or stripped in (
            "//sys/users",
            "//sys/groups",
        ):
            chain = [AclNode(stripped)]
        else:
            chain = self._resolver().acl_chain(path)
        return self.decide(user, permission, chain).to_json()

    def check_operation_permission(self, caller: str, params: Mapping[str, Any]) -> dict[str, Any]:
        operation_id = params.get("operation_id") or params.get("operation_alias")
        if not isinstance(operation_id, str) or not operation_id:
            raise SecurityError(
                "Missing required parameter 'operation_id'", attributes={"parameter": "operation_id"}
            )
        user = _str(params, "user")
        permission = _str(params, "permission")
        if permission not in OPERATION_PERMISSIONS:
            raise SecurityError(
                f"Unknown operation permission {permission!r}; known: {', '.join(OPERATION_PERMISSIONS)}",
                attributes={"parameter": "permission"},
            )
        if not self.directory.has_user(user):
            raise SecurityError(f"No such user {user!r}", code=908, attributes={"user": user})
        access = self._resolver().operation_access(operation_id)
        if access is None:
            raise PooltreeError(
                f"No such operation {operation_id}", code=1915, attributes={"operation_id": operation_id}
            )
        return self.operation_decision(user, permission, access).to_json()


def _str(params: Mapping[str, Any], name: str) -> str:
    value = params.get(name)
    if value is None:
        raise SecurityError(f"Missing required parameter {name!r}", attributes={"parameter": name})
    if not isinstance(value, str) or not value:
        raise SecurityError(
            f"Error parsing parameter {name!r}: expected a non-empty string", attributes={"parameter": name}
        )
    return value


def validate_security_attribute(name: str, value: Any, field_path: str) -> None:
    """Check an ``acl`` / ``inherit_acl`` value before it is stored on a Cypress node."""
    if name == "acl":
        parse_acl(value, field_path)
    elif name == "inherit_acl":
        parse_inherit_acl(value, field_path)


SUBJECT_ROOTS = {"users": "user", "groups": "group"}


def subject_path(tokens: Sequence[str]) -> tuple[str, str | None] | None:
    """``("sys", "users", "alice")`` → ``("user", "alice")``; ``("sys", "groups")`` → ``("group", None)``;
    None for paths that are not users or groups."""
    if len(tokens) < 2 or tokens[0] != "sys" or tokens[1] not in SUBJECT_ROOTS or len(tokens) > 3:
        return None
    return SUBJECT_ROOTS[tokens[1]], (tokens[2] if len(tokens) == 3 else None)


def subjects_get(
    security: Security, kind: str, name: str | None, attribute: Sequence[str] | None, *, listing: bool = False
) -> Any:
    """``get``/``list`` of ``//sys/users``, ``//sys/groups`` and their members' attributes."""
    directory = security.directory
    if name is None:
        if attribute is not None:
            return {} if not attribute else _missing_attribute(f"//sys/{kind}s", attribute[0])
        names = directory.users() if kind == "user" else directory.groups()
        return list(names) if listing else dict.fromkeys(names)
    exists = directory.has_user(name) if kind == "user" else directory.has_group(name)
    if not exists:
        raise PooltreeError(
            f"Error resolving path //sys/{kind}s/{name}",
            code=500,
            attributes={"path": f"//sys/{kind}s/{name}"},
        )
    if listing:
        raise PooltreeError(f"//sys/{kind}s/{name} is a {kind}, not a map node", code=500)
    if attribute is None:
        return None
    attributes = security.subject_attributes(kind, name)
    if not attribute:
        return attributes
    value: Any = attributes
    for key in attribute:
        if not isinstance(value, dict) or key not in value:
            return _missing_attribute(f"//sys/{kind}s/{name}", key)
        value = value[key]
    return value


def _missing_attribute(path: str, key: str) -> Any:
    raise PooltreeError(f'Attribute "{key}" is not found at {path}', code=500, attributes={"path": path})
