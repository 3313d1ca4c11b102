"""Which permission each command needs, on which object: one function, called once per command by the app
(and once per request of ``execute_batch``), before the handler runs.

| command | needs |
| --- | --- |
| `get`, `list`, `exists` | `read` on the node (everyone may read unless an ACE denies it) |
| `set` | `write` on the node; `administer` for `@acl` / `@inherit_acl`; moving a pool by `@parent_name` also `write` on the new parent |
| `create` | `write` on the parent (the pool tree or `parent_name` pool for object-style pools); `administer` there too when the new node carries `acl` / `inherit_acl` |
| `remove` | `write` on the parent (`administer` on the node for `@acl`) |
| `move` | `write` on the source's parent and on the destination's parent |
| `start_operation` | `use` on the pool of every tree the operation runs in (for an ephemeral pool: on its parent; the tree itself when that is the root) |
| `update_operation_parameters` | `manage` on the operation, and `use` on a new pool |
| `abort_operation`, `complete_operation`, `suspend_operation`, `resume_operation`, `abort_job` | `manage` on the operation |
| `get_operation`, `list_jobs`, `get_job`, `get_job_stderr`, `get_job_spec` | `read` on the operation |
| `list_operations` | answers only the operations the user may `read` (a filter, not a refusal) |
| `auth_whoami` (`/auth/whoami`) | an authenticated caller (it only names the caller) |

Users, groups and tokens are checked by ``Security``'s own commands. Superusers pass every check; an operation's
owner always may read and manage it. ``acl`` values are validated here, so a malformed ACL never reaches the store.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pooltree.errors import PooltreeError
from pooltree.security.acl import OPERATION_PERMISSIONS, AclNode, parse_acl, parse_inherit_acl
from pooltree.security.vault import validate_secure_vault
from pooltree.ypath import join_tokens, parse_ypath

if TYPE_CHECKING:
    from pooltree.security.guard import Security

SECURITY_ATTRIBUTES = ("acl", "inherit_acl")
OPERATION_READ = frozenset({"get_operation", "list_jobs", "get_job", "get_job_stderr", "get_job_spec"})
OPERATION_MANAGE = frozenset(
    {"abort_operation", "complete_operation", "suspend_operation", "resume_operation", "abort_job"}
)
POOL_TREES = ("sys", "pool_trees")


def authorize(
    security: Security,
    command: str,
    user: str,
    params: Mapping[str, Any],
    input_value: Any,
    *,
    blocking: bool = True,
) -> None:
    """Raise the YTsaurus authorization error (901) when ``user`` may not run ``command`` with ``params``; raise
    ``WouldBlock`` when not ``blocking`` and the decision needs the store."""
    handler = _HANDLERS.get(command)
    if command in OPERATION_READ or command in OPERATION_MANAGE:
        operation_id = _operation_id(params)
        if operation_id is not None:
            permission = "read" if command in OPERATION_READ else "manage"
            security.require_operation(user, permission, operation_id, blocking=blocking)
        return
    if handler is None:
        return
    if security.is_superuser(user) and command not in _VALIDATING:
        return
    handler(security, user, params, input_value)


def _operation_id(params: Mapping[str, Any]) -> str | None:
    value = params.get("operation_id") or params.get("operation_alias")
    return value if isinstance(value, str) and value else None


def _strip(value: Any) -> Any:
    while isinstance(value, dict) and "$value" in value and set(value) <= {"$value", "$attributes", "$type"}:
        value = value["$value"]
    return value


def _path(params: Mapping[str, Any], name: str = "path") -> str | None:
    value = _strip(params.get(name))
    return value if isinstance(value, str) and value else None


def _split(path: str) -> tuple[str, tuple[str, ...] | None]:
    """``(node path, attribute keys or None)`` of a YPath (``//a/b/@acl/0`` → ``("//a/b", ("acl", "0"))``)."""

    ypath = parse_ypath(path)
    if ypath.object_id is not None:
        node = "#" + ypath.object_id + ("/" + "/".join(ypath.tokens) if ypath.tokens else "")
        return node, ypath.attribute
    return join_tokens(ypath.tokens), ypath.attribute


def _parent(path: str) -> str:

    tokens = parse_ypath(path).tokens
    return join_tokens(tokens[:-1]) if tokens else "/"


def _require_path(security: Security, user: str, permission: str, path: str) -> None:
    chain = security._resolver().acl_chain(path)
    security.require(user, permission, chain, path=path)


def _read(security: Security, user: str, params: Mapping[str, Any], _input: Any) -> None:
    path = _path(params)
    if path is None:
        return
    node, _ = _split(path)
    if node.startswith(("//sys/users", "//sys/groups")):
        return
    _require_path(security, user, "read", node)


def _validate_security_value(keys: tuple[str, ...], value: Any, where: str) -> None:
    if keys == ("acl",):
        parse_acl(value, where)
    elif keys == ("inherit_acl",):
        parse_inherit_acl(value, where)
    elif keys and keys[0] in SECURITY_ATTRIBUTES:
        raise PooltreeError(
            f"{where}: set the whole @{keys[0]} at once, not a part of it", attributes={"field": where}
        )


def _set(security: Security, user: str, params: Mapping[str, Any], value: Any) -> None:
    path = _path(params)
    if path is None:
        return
    node, attribute = _split(path)
    if attribute and attribute[0] in SECURITY_ATTRIBUTES:
        _validate_security_value(attribute, value, f"{node}/@{'/'.join(attribute)}")
        if not security.is_superuser(user):
            _require_path(security, user, "administer", node)
        return
    if security.is_superuser(user):
        return
    if attribute is None and isinstance(value, dict) and any(k in value for k in SECURITY_ATTRIBUTES):
        _require_path(security, user, "administer", node)
    _require_path(security, user, "write", node)
    if attribute == ("parent_name",) and isinstance(_strip(value), str):
        target = _pool_by_name(security, node, _strip(value))
        if target is not None:
            _require_path(security, user, "write", target)


def _pool_by_name(security: Security, pool_path: str, name: str) -> str | None:

    tokens = parse_ypath(pool_path).tokens
    if len(tokens) < 3 or tokens[:2] != POOL_TREES:
        return None
    if name == "<Root>":
        return f"//sys/pool_trees/{tokens[2]}"
    chain = security._resolver().pool_chain(tokens[2], name)
    return None if not chain else chain[0].path


def _create(security: Security, user: str, params: Mapping[str, Any], _input: Any) -> None:
    node_type = _strip(params.get("type"))
    attributes = _strip(params.get("attributes")) or {}
    if not isinstance(attributes, dict) or node_type in ("user", "group"):
        return
    for key in SECURITY_ATTRIBUTES:
        if key in attributes:
            _validate_security_value((key,), attributes[key], f"attributes.{key}")
    if security.is_superuser(user):
        return
    path = _path(params)
    if path is not None:
        parent = _parent(_split(path)[0])
    elif node_type == "scheduler_pool_tree":
        parent = "//sys/pool_trees"
    elif node_type == "scheduler_pool":
        tree, parent_name = _strip(attributes.get("pool_tree")), _strip(attributes.get("parent_name"))
        if not isinstance(tree, str):
            return  # Cypress names the missing attribute
        parent = f"//sys/pool_trees/{tree}"
        if isinstance(parent_name, str) and parent_name != "<Root>":
            chain = security._resolver().pool_chain(tree, parent_name)
            if chain is None:
                return  # Cypress answers "parent pool does not exist"
            parent = chain[0].path or parent
    else:
        return
    _require_path(security, user, "write", parent)
    if any(key in attributes for key in SECURITY_ATTRIBUTES):
        _require_path(security, user, "administer", parent)


def _remove(security: Security, user: str, params: Mapping[str, Any], _input: Any) -> None:
    path = _path(params)
    if path is None:
        return
    node, attribute = _split(path)
    if node.startswith(("//sys/users", "//sys/groups")):
        return  # Security's own check
    if attribute is not None:
        permission = "administer" if attribute and attribute[0] in SECURITY_ATTRIBUTES else "write"
        _require_path(security, user, permission, node)
        return
    _require_path(security, user, "write", _parent(node))


def _move(security: Security, user: str, params: Mapping[str, Any], _input: Any) -> None:
    for name in ("source_path", "destination_path"):
        path = _path(params, name)
        if path is not None:
            _require_path(security, user, "write", _parent(_split(path)[0]))


def _use_pools(security: Security, user: str, pools: list[tuple[str, str, str | None]]) -> None:
    resolver = security._resolver()
    for tree, pool, holder in pools:
        chain: list[AclNode] | None = None
        if holder is not None:
            chain = resolver.pool_chain(tree, holder)
        if chain is None:
            chain = resolver.tree_chain(tree)
        details: dict[str, Any] = {"pool": pool, "pool_tree": tree}
        if holder != pool:
            details["ephemeral_pool_parent"] = holder or "<Root>"
        security.require(user, "use", chain, **details)


def _start_operation(security: Security, user: str, params: Mapping[str, Any], _input: Any) -> None:
    spec = _strip(params.get("spec"))
    if not isinstance(spec, dict):
        return  # the handler names the bad spec
    if "acl" in spec:
        parse_acl(spec["acl"], "spec.acl", permissions=OPERATION_PERMISSIONS)
    validate_secure_vault(spec.get("secure_vault"))
    if security.is_superuser(user):
        return
    try:
        pools = security._resolver().operation_pools(spec, user)
    except PooltreeError:
        return  # a bad pool or tree: start_operation answers it with the field named
    _use_pools(security, user, pools)


def _update_operation_parameters(
    security: Security, user: str, params: Mapping[str, Any], _input: Any
) -> None:
    operation_id = _operation_id(params)
    parameters = _strip(params.get("parameters"))
    if operation_id is None or not isinstance(parameters, dict):
        return
    if "acl" in parameters:
        parse_acl(parameters["acl"], "parameters.acl", permissions=OPERATION_PERMISSIONS)
    security.require_operation(user, "manage", operation_id)
    if security.is_superuser(user):
        return
    resolver = security._resolver()
    wanted: list[tuple[str, str]] = []
    trees = resolver.operation_trees(operation_id)
    if isinstance(parameters.get("pool"), str):
        wanted.extend((tree, parameters["pool"]) for tree in trees)
    per_tree = parameters.get("scheduling_options_per_pool_tree")
    if isinstance(per_tree, dict):
        for tree, options in per_tree.items():
            if isinstance(options, dict) and isinstance(options.get("pool"), str) and tree in trees:
                wanted.append((tree, options["pool"]))
    pools: list[tuple[str, str, str | None]] = []
    for tree, pool in wanted:
        try:
            placed, holder = resolver.pool_of(tree, pool, user)
        except PooltreeError:
            continue  # the handler names the bad pool
        pools.append((tree, placed, holder))
    _use_pools(security, user, pools)


def _authenticated(_security: Security, _user: str, _params: Mapping[str, Any], _input: Any) -> None:
    """Any authenticated caller: the request pipeline has already refused callers without a valid token."""


_HANDLERS = {
    "auth_whoami": _authenticated,
    "get": _read,
    "list": _read,
    "exists": _read,
    "set": _set,
    "create": _create,
    "remove": _remove,
    "move": _move,
    "start_operation": _start_operation,
    "update_operation_parameters": _update_operation_parameters,
}
_VALIDATING = frozenset({"set", "create", "start_operation", "update_operation_parameters"})
"""Commands whose ACL values are validated even for superusers (the handler then runs the permission part)."""
