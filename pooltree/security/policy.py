"""Which permission each command needs, on which object: ``RULES``, one ``Rule`` per command the API serves.

Deny by default: ``CommandRegistry`` refuses to register a command that has no rule here, and ``authorize`` refuses
(error 901) a command it finds no rule for. The rules follow YTsaurus's master and scheduler checks:

| command | needs |
| --- | --- |
| `get`, `list`, `exists` | `read` on the node (`//sys/users`, `//sys/groups`: every user) |
| `set PATH` | `write` on the node (on its nearest existing ancestor when new); replacing a composite node's value also `remove` on its descendants |
| `set PATH/@NAME` | `write` on the node; `administer` when NAME is `acl`, `inherit_acl` or `owner`; `use` on the account when NAME is `account` (also in a `set PATH/@` map and in `create`'s attributes) |
| `set PATH/@` (a map) | `write` and `administer` on the node (the map replaces every attribute, the ACL included) |
| `set POOL/@NAME` | also `administer` on the pool unless NAME is one of YTsaurus's user-managed pool attributes (`USER_MANAGED_POOL_ATTRIBUTES`): other pool options and custom attributes need it |
| `set POOL/@parent_name`, `set POOL/@name` | a move: `remove` on the pool and its descendants, `write` or `modify_children` on the old and the new parent |
| `create` | `write` or `modify_children` on the parent (the tree or the `parent_name` pool for object-style pools); `administer` there when `acl`, `inherit_acl` or `owner` are given; `remove` on the node (and its descendants) that `force` replaces; users, groups and accounts: superusers |
| `remove PATH` | `remove` on the node and every descendant, `write` or `modify_children` on its parent (YTsaurus `RemoveSelf`); users and groups: superusers |
| `remove PATH/@NAME` | `write` on the node; `administer` for `acl`, `inherit_acl`, `owner` or all attributes, and on a pool as `set POOL/@NAME` |
| `move` | `remove` on the source and its descendants, `write` or `modify_children` on the source's parent and on the destination's parent; `remove` on a destination `force` replaces |
| `transfer_pool_resources` | `write` on every pool whose guarantees or limits change (the source, the destination and their ancestors below their lowest common ancestor) |
| `read_file` | `read` on the file |
| `write_file` | `write` on the file |
| `lock` | `read` for a `snapshot` lock, else `write` (YTsaurus `Lock`) |
| `get_file_from_cache` | `read` on the cache directory |
| `put_file_to_cache` | `read` on the source file, `write` on the cache directory (checked before any MD5 is computed) |
| `start_transaction`, `ping_transaction`, `commit_transaction`, `abort_transaction` | any user; a `transaction_id` (any command's) must be the caller's own transaction |
| `start_operation` | `use` on the pool of every tree it runs in (an ephemeral pool: its parent; the tree when that is the root); `read` on every `file_paths` file |
| `update_operation_parameters` | `manage` on the operation, `use` on a new pool |
| `abort_operation`, `complete_operation`, `suspend_operation`, `resume_operation` | `manage` on the operation |
| `abort_job` | `manage` on the operation the job belongs to (found from the job id; `operation_id` is not needed) |
| `get_operation`, `list_jobs`, `get_job`, `get_job_stderr` | `read` on the operation |
| `list_operations` | any user; answers only the operations the user may `read` |
| `set_user_password`, `issue_token`, `list_user_tokens`, `revoke_token` | superusers, or the user themselves with their current password (YTsaurus `ValidateAuthenticationCommandPermissions`) |
| `add_member`, `remove_member` | superusers (`write` on the group) |
| `get_current_user`, `check_permission`, `check_operation_permission` | any user |
| `execute_batch` | each request its own command's rule |
| table and dynamic-table commands | any user; answered "not supported" |
| `auth_whoami` (`/auth/whoami`) | any user (it only names the caller) |

Superusers pass every check (ACL values are still validated). An operation's owner always may read and manage it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pooltree.errors import PooltreeError
from pooltree.security.acl import (
    AUTHORIZATION_ERROR,
    OPERATION_PERMISSIONS,
    AclNode,
    parse_acl,
    parse_inherit_acl,
)
from pooltree.security.vault import validate_secure_vault

if TYPE_CHECKING:
    from pooltree.security.guard import Security

SECURITY_ATTRIBUTES = ("acl", "inherit_acl", "owner")
"""Attributes only ``administer`` may change (``owner`` has no effect on checks here, as a changed owner would)."""
POOL_TREES = "//sys/pool_trees"
USER_MANAGED_POOL_ATTRIBUTES = frozenset(
    {
        "weight",
        "max_operation_count",
        "max_running_operation_count",
        "min_share_resources",
        "strong_guarantee_resources",
        "forbid_immediate_operations",
        "mode",
        "fifo_sort_parameters",
        "resource_limits",
        "create_ephemeral_subpools",
        "ephemeral_subpool_config",
        "abc",
        "integral_guarantees",
    }
)
"""Pool attributes ``write`` on the pool lets a user change (YTsaurus's ``IsUserManagedAttribute``); every other
pool option, and any custom attribute, needs ``administer`` as well. ``name`` and ``parent_name`` are moves."""
CHILD_CHANGE = ("write", "modify_children")
"""Adding or removing a child needs one of these on the parent (YTsaurus ``Write | ModifyChildren``)."""
SUBJECT_ROOTS = ("//sys/users", "//sys/groups")

Check = Callable[["Security", str, Mapping[str, Any], Any, bool], None]
"""``check(security, user, params, input, blocking)``: raises error 901 on a denial."""


@dataclass(frozen=True)
class Rule:
    """What a command needs (``needs``: the table's words) and the check that decides it."""

    needs: str
    check: Check
    validating: bool = False
    """Run for superusers too: the check validates ACL values before they are stored."""


def authorize(
    security: Security,
    command: str,
    user: str,
    params: Mapping[str, Any],
    input_value: Any,
    *,
    blocking: bool = True,
    rule: Rule | None = None,
) -> None:
    """Raise the YTsaurus authorization error (901) when ``user`` may not run ``command`` with ``params`` (a
    command without a rule is refused); raise ``WouldBlock`` when not ``blocking`` and the decision needs the
    store. ``rule`` overrides the table (commands registered with their own rule)."""
    rule = rule if rule is not None else RULES.get(command)
    if rule is None:
        raise no_rule_error(command, user)
    superuser = security.is_superuser(user)
    if not superuser:
        _own_transaction(security, user, params)
    if superuser and not rule.validating:
        return
    rule.check(security, user, params, input_value, blocking)


def no_rule_error(command: str, user: str) -> PooltreeError:
    return PooltreeError(
        f'Access denied for user "{user}": command "{command}" has no authorization rule, so it is refused',
        code=AUTHORIZATION_ERROR,
        attributes={"user": user, "command": command, "permission": "none", "object": f"command {command}"},
    )


# ---------------------------------------------------------------------- helpers


def _strip(value: Any) -> Any:
    while isinstance(value, dict) and "$value" in value and set(value) <= {"$value", "$attributes", "$type"}:
        value = value["$value"]
    return value


def _path(params: Mapping[str, Any], name: str = "path") -> str | None:
    value = _strip(params.get(name))
    return value if isinstance(value, str) and value else None


def _require_path(security: Security, user: str, permission: str, path: str) -> None:
    chain = security._resolver().acl_chain(path)
    security.require(user, permission, chain, path=path)


def _require_child_change(security: Security, user: str, parent: str) -> None:
    """``write`` or ``modify_children`` on ``parent`` (adding or removing one of its children); the error names
    ``write`` when neither is allowed."""
    chain = security._resolver().acl_chain(parent)
    if security.decide(user, CHILD_CHANGE[1], chain).allowed:
        return
    security.require(user, CHILD_CHANGE[0], chain, path=parent)


def _require_pool_attribute(security: Security, user: str, target: Any, name: str) -> None:
    """``administer`` on a pool for an attribute that is not user-managed (YTsaurus ``GuardedUpdate`` and
    ``GetCustomAttributeModifyPermission``)."""
    if target.node_type == "scheduler_pool" and name not in USER_MANAGED_POOL_ATTRIBUTES:
        _require_path(security, user, "administer", target.node)


POOL_SCHEMA_PATH = "//sys/schemas/scheduler_pool"


def _require_pool_name(security: Security, user: str, name: Any) -> None:
    """The pool name regex that applies to ``user`` (YTsaurus's scheduler pool manager): the administrators' one
    with ``administer`` on ``//sys/schemas/scheduler_pool``, else the users' one (``//sys/@config/
    scheduler_pool_manager``); Cypress checks the rest of the name rules."""
    if not isinstance(name, str):
        return  # Cypress names the bad name
    resolver = security._resolver()
    admin = security.decide(user, "administer", resolver.acl_chain(POOL_SCHEMA_PATH)).allowed
    error = resolver.pool_name_error(name, administrator=admin)
    if error is not None:
        raise error


def _require_subtree(security: Security, user: str, permission: str, path: str) -> None:
    """``permission`` on the node at ``path`` and on every node below it (YTsaurus ``This | Descendants``)."""
    _require_path(security, user, permission, path)
    security.require_each(user, permission, security._resolver().subtree_chains(path))


def _is_subject_path(node: str) -> bool:
    return any(node == root or node.startswith(root + "/") for root in SUBJECT_ROOTS)


def _require_account_use(security: Security, user: str, account: Any) -> None:
    """Charging a node to an account needs ``use`` on it (``//sys/accounts/NAME``), as on YTsaurus; an unknown
    account is named by Cypress."""
    name = _strip(account)
    if isinstance(name, str) and name and "/" not in name:
        _require_path(security, user, "use", f"//sys/accounts/{name}")


def _require_superuser(security: Security, user: str, permission: str, object_name: str) -> None:
    if not security.is_superuser(user):
        security.require(user, permission, [AclNode(object_name)])


def _validate_security_value(keys: tuple[str, ...], value: Any, where: str) -> None:
    if keys == ("acl",):
        parse_acl(value, where)
    elif keys == ("inherit_acl",):
        parse_inherit_acl(value, where)
    elif keys and keys[0] == "inherit_acl":
        raise PooltreeError(
            f"{where}: @inherit_acl is a boolean, it has no parts", attributes={"field": where}
        )
    # a part of @acl (@acl/0/action): Cypress checks that the ACL it leaves is valid, under the same lock as the
    # change (cypress_attributes); administer is required below as for the whole @acl


def _validate_attribute_map(value: Any, where: str) -> bool:
    """Validate the security attributes of an attribute map; True when it has any."""
    value = _strip(value)
    if not isinstance(value, dict):
        return False
    found = False
    for key in SECURITY_ATTRIBUTES:
        if key in value:
            found = True
            _validate_security_value((key,), value[key], f"{where}.{key}")
    return found


def _own_transaction(security: Security, user: str, params: Mapping[str, Any]) -> None:
    """A transaction belongs to the user who started it: nobody else may use, ping, commit or abort it."""
    tx_id = _strip(params.get("transaction_id"))
    if not isinstance(tx_id, str) or not tx_id or tx_id == "0-0-0-0":
        return
    owner = security._resolver().transaction_owner(tx_id)
    if owner is not None and owner != user:
        security.require(user, "write", [AclNode(f"transaction {tx_id}")], transaction_id=tx_id)


def _nothing(security: Security, user: str, params: Mapping[str, Any], value: Any, blocking: bool) -> None:
    """Any authenticated user (the transaction check above still applies)."""


# ---------------------------------------------------------------------- Cypress


def _read(security: Security, user: str, params: Mapping[str, Any], _input: Any, _b: bool) -> None:
    path = _path(params)
    if path is None:
        return  # the handler names the missing path
    target = security._resolver().locate(path)
    if _is_subject_path(target.node):
        return
    _require_path(security, user, "read", target.node)


def _set(security: Security, user: str, params: Mapping[str, Any], value: Any, _b: bool) -> None:
    path = _path(params)
    if path is None:
        return
    resolver = security._resolver()
    target = resolver.locate(path)
    attribute = target.attribute
    superuser = security.is_superuser(user)
    if attribute is None:
        wraps = _strip(value) is not value and isinstance(value, dict)
        new_security = wraps and _validate_attribute_map(value.get("$attributes"), "input.$attributes")
        if new_security and not superuser:
            _require_path(security, user, "administer", target.node if target.exists else target.parent)
        if superuser:
            return
        if not target.exists:
            _require_path(security, user, "write", target.parent)
            return
        _require_path(security, user, "write", target.node)
        if target.node_type == "map_node":  # its children are replaced by the new value
            security.require_each(user, "remove", resolver.subtree_chains(target.node))
        if target.has_security and target.node_type != _value_type(value):
            _require_path(security, user, "administer", target.node)  # a new type drops the attributes
        return
    if attribute and attribute[0] in SECURITY_ATTRIBUTES:
        _validate_security_value(attribute, value, f"{target.node}/@{'/'.join(attribute)}")
        if not superuser:
            _require_path(security, user, "administer", target.node)
        return
    if attribute == ():
        touches = _validate_attribute_map(value, f"{target.node}/@")
        if superuser:
            return
        if touches or target.has_security:
            _require_path(security, user, "administer", target.node)
        _require_path(security, user, "write", target.node)
        if isinstance(_strip(value), dict) and "account" in _strip(value):
            _require_account_use(security, user, _strip(value)["account"])
        return
    if superuser:
        return
    _require_path(security, user, "write", target.node)
    if attribute == ("account",):
        _require_account_use(security, user, value)
    if attribute in (("parent_name",), ("name",)) and target.node_type == "scheduler_pool":
        if attribute == ("name",):
            _require_pool_name(security, user, _strip(value))
        _require_subtree(security, user, "remove", target.node)
        _require_child_change(security, user, target.parent)
        new_parent = (
            _pool_parent(security, target.node, _strip(value)) if attribute[0] == "parent_name" else None
        )
        if new_parent is not None:
            _require_child_change(security, user, new_parent)
    elif attribute:
        _require_pool_attribute(security, user, target, attribute[0])


def _value_type(value: Any) -> str:
    """The node type a ``set`` value builds (the map/scalar split is all the check needs)."""
    return "map_node" if isinstance(value, dict) and _strip(value) is value else "scalar"


def _pool_parent(security: Security, pool_path: str, name: Any) -> str | None:
    if not isinstance(name, str):
        return None  # Cypress names the bad value
    tree = pool_path[len(POOL_TREES) + 1 :].split("/", 1)[0]
    if name == "<Root>":
        return f"{POOL_TREES}/{tree}"
    chain = security._resolver().pool_chain(tree, name)
    return None if not chain else chain[0].path


def _create(security: Security, user: str, params: Mapping[str, Any], _input: Any, _b: bool) -> None:
    node_type = _strip(params.get("type"))
    attributes = _strip(params.get("attributes")) or {}
    if not isinstance(attributes, dict):
        return  # the handler names the bad attributes
    path = _path(params)
    if node_type in ("user", "group") and path is None:
        _require_superuser(security, user, "create", f"{node_type} objects")
        return
    has_security = _validate_attribute_map(attributes, "attributes")
    if security.is_superuser(user):
        return
    if node_type == "account":  # accounts are made by administrators (YTsaurus: topmost accounts)
        _require_superuser(security, user, "create", "account objects")
    if "account" in attributes:
        _require_account_use(security, user, attributes["account"])
    resolver = security._resolver()
    if node_type == "scheduler_pool":
        _require_pool_name(
            security, user, _strip(attributes.get("name")) if path is None else path.rsplit("/", 1)[-1]
        )
    if path is not None:
        target = resolver.locate(path)
        parent = target.parent
        if target.exists and _strip(params.get("force")) in (True, "true") and target.node_type == node_type:
            _require_subtree(security, user, "remove", target.node)  # create --force replaces it
    elif node_type == "scheduler_pool_tree":
        parent = POOL_TREES
    elif node_type == "scheduler_pool":
        tree, parent_name = _strip(attributes.get("pool_tree")), _strip(attributes.get("parent_name"))
        if not isinstance(tree, str):
            return  # Cypress names the missing attribute
        parent = f"{POOL_TREES}/{tree}"
        if isinstance(parent_name, str) and parent_name != "<Root>":
            chain = resolver.pool_chain(tree, parent_name)
            if chain is None:
                return  # Cypress answers "parent pool does not exist"
            parent = chain[0].path or parent
    else:
        return  # Cypress answers "needs a path"
    _require_child_change(security, user, parent)
    if has_security:
        _require_path(security, user, "administer", parent)


def _remove(security: Security, user: str, params: Mapping[str, Any], _input: Any, _b: bool) -> None:
    path = _path(params)
    if path is None:
        return
    target = security._resolver().locate(path)
    if _is_subject_path(target.node):
        if target.attribute is None:
            _require_superuser(security, user, "remove", f"object {target.node}")
        return
    if not target.exists:
        return  # the handler answers "no such node" (or nothing with force)
    if target.attribute is not None:
        keys = target.attribute
        admin = (not keys and target.has_security) or (keys and keys[0] in SECURITY_ATTRIBUTES)
        _require_path(security, user, "administer" if admin else "write", target.node)
        if keys and not admin:
            _require_pool_attribute(security, user, target, keys[0])
        return
    _require_subtree(security, user, "remove", target.node)
    _require_child_change(security, user, target.parent)


def _move(security: Security, user: str, params: Mapping[str, Any], _input: Any, _b: bool) -> None:
    resolver = security._resolver()
    source_path, destination_path = _path(params, "source_path"), _path(params, "destination_path")
    if source_path is not None:
        source = resolver.locate(source_path)
        if source.exists:
            _require_subtree(security, user, "remove", source.node)
        _require_child_change(security, user, source.parent)
    if destination_path is not None:
        destination = resolver.locate(destination_path)
        if destination.exists and _strip(params.get("force")) in (True, "true"):
            _require_subtree(security, user, "remove", destination.node)
        _require_child_change(security, user, destination.parent)


def _transfer_pool_resources(
    security: Security, user: str, params: Mapping[str, Any], _input: Any, _b: bool
) -> None:
    tree = _strip(params.get("pool_tree"))
    names = (_strip(params.get("source_pool")), _strip(params.get("destination_pool")))
    if not isinstance(tree, str) or not all(isinstance(name, str) for name in names):
        return  # the handler names the missing parameter
    sides: list[list[str]] = []
    for name in names:
        if name == "<Root>":
            sides.append([])
            continue
        chain = security._resolver().pool_chain(tree, name)
        if chain is None:
            return  # the handler answers "does not exist"
        inside = f"{POOL_TREES}/{tree}/"  # the pools of the chain, not the tree and above
        sides.append([node.path for node in chain if node.path and node.path.startswith(inside)])
    common = set(sides[0]) & set(sides[1])
    for path in dict.fromkeys(p for side in sides for p in side if p not in common):
        _require_path(security, user, "write", path)


# ---------------------------------------------------------------------- files and the file cache


def _on_path(permission: str, name: str = "path") -> Check:
    def check(security: Security, user: str, params: Mapping[str, Any], _input: Any, _b: bool) -> None:
        path = _path(params, name)
        if path is not None:
            _require_path(security, user, permission, security._resolver().locate(path).node)

    return check


def _lock(security: Security, user: str, params: Mapping[str, Any], _input: Any, _b: bool) -> None:
    permission = "read" if _strip(params.get("mode")) == "snapshot" else "write"
    _on_path(permission)(security, user, params, _input, _b)


def _put_file_to_cache(
    security: Security, user: str, params: Mapping[str, Any], _input: Any, _b: bool
) -> None:
    _on_path("read")(security, user, params, _input, _b)
    cache_path = _path(params, "cache_path")
    if cache_path is not None:
        _require_path(security, user, "write", security._resolver().locate(cache_path).node)


# ---------------------------------------------------------------------- operations and jobs


def _operation_id(params: Mapping[str, Any]) -> str | None:
    """The operation a command names, read as the handler reads it (``operation_id``, else the alias)."""
    value = params.get("operation_id")
    if value is None:
        value = params.get("operation_alias")
    return value if isinstance(value, str) and value else None


def _on_operation(permission: str) -> Check:
    def check(security: Security, user: str, params: Mapping[str, Any], _input: Any, blocking: bool) -> None:
        operation_id = _operation_id(params)
        if operation_id is not None:
            security.require_operation(user, permission, operation_id, blocking=blocking)

    return check


def _abort_job(security: Security, user: str, params: Mapping[str, Any], _input: Any, blocking: bool) -> None:
    """``manage`` on the operation the job really belongs to (``yt abort-job`` sends only the job id)."""
    job_id = params.get("job_id")
    if not isinstance(job_id, str) or not job_id:
        return  # the handler names the missing job id
    operation_id = security._resolver().job_operation(job_id)
    if operation_id is not None:
        security.require_operation(user, "manage", operation_id, blocking=blocking)


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


def _file_paths(spec: Mapping[str, Any]) -> Iterable[str]:
    tasks = spec.get("tasks")
    if not isinstance(tasks, dict):
        return
    for task_spec in tasks.values():
        paths = task_spec.get("file_paths") if isinstance(task_spec, dict) else None
        if isinstance(paths, list):
            for item in paths:
                path = _strip(item)
                if isinstance(path, str) and path:
                    yield path


def _pools_are_names(spec: Mapping[str, Any]) -> bool:
    """Whether ``spec.pool`` and every ``scheduling_options_per_pool_tree.<tree>.pool`` are strings (or absent)."""
    pools = [spec.get("pool")]
    per_tree = spec.get("scheduling_options_per_pool_tree")
    if isinstance(per_tree, dict):
        pools.extend(options.get("pool") for options in per_tree.values() if isinstance(options, dict))
    return all(pool is None or isinstance(pool, str) for pool in pools)


def _start_operation(security: Security, user: str, params: Mapping[str, Any], _input: Any, _b: bool) -> None:
    spec = _strip(params.get("spec"))
    if not isinstance(spec, dict):
        return  # the handler names the bad spec
    if "acl" in spec:
        parse_acl(spec["acl"], "spec.acl", permissions=OPERATION_PERMISSIONS)
    validate_secure_vault(spec.get("secure_vault"))
    if security.is_superuser(user):
        return
    if not _pools_are_names(spec):
        return  # a pool given as a map or list: start_operation names the field (before, an internal error)
    resolver = security._resolver()
    for path in _file_paths(spec):
        try:
            node = resolver.locate(path).node
        except PooltreeError:
            continue  # the handler names the bad path
        _require_path(security, user, "read", node)
    try:
        pools = resolver.operation_pools(spec, user)
    except PooltreeError:
        return  # a bad pool or tree: start_operation answers it with the field named
    _use_pools(security, user, pools)


def _update_operation_parameters(
    security: Security, user: str, params: Mapping[str, Any], _input: Any, _b: bool
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


# ---------------------------------------------------------------------- users, groups, tokens


def _self_or_superuser(
    security: Security, user: str, params: Mapping[str, Any], _input: Any, _b: bool
) -> None:
    """Decided with the password by the command itself (``Security._require_user_admin``): the check needs the
    password, which is verified once, there."""


def _group_write(security: Security, user: str, params: Mapping[str, Any], _input: Any, _b: bool) -> None:
    group = params.get("group")
    _require_superuser(security, user, "write", f'group "{group}"')


def _batch(security: Security, user: str, params: Mapping[str, Any], _input: Any, _b: bool) -> None:
    """Each request of the batch is authorized by its own command's rule when it runs."""


READ_NODE = Rule("read on the node", _read)
ANY_USER = Rule("any authenticated user", _nothing)
UNSUPPORTED = Rule("any authenticated user (answered: not supported)", _nothing)
OPERATION_READ = Rule("read on the operation", _on_operation("read"))
OPERATION_MANAGE = Rule("manage on the operation", _on_operation("manage"))

RULES: dict[str, Rule] = {
    "get": READ_NODE,
    "list": READ_NODE,
    "exists": READ_NODE,
    "set": Rule("write on the node; administer for acl/inherit_acl/owner or a whole @ map", _set, True),
    "create": Rule("write on the parent; administer for acl; remove on a node force replaces", _create, True),
    "remove": Rule("remove on the node and its descendants, write on its parent", _remove),
    "move": Rule("remove on the source (and descendants), write on both parents", _move),
    "transfer_pool_resources": Rule(
        "write on the pools whose guarantees change (below the common ancestor)", _transfer_pool_resources
    ),
    "read_file": Rule("read on the file", _on_path("read")),
    "write_file": Rule("write on the file", _on_path("write")),
    "lock": Rule("read for a snapshot lock, else write on the node", _lock),
    "get_file_from_cache": Rule("read on the cache directory", _on_path("read", "cache_path")),
    "put_file_to_cache": Rule("read on the file, write on the cache directory", _put_file_to_cache),
    "start_transaction": Rule("any user (a parent transaction must be the caller's)", _nothing),
    "ping_transaction": Rule("the caller's own transaction", _nothing),
    "commit_transaction": Rule("the caller's own transaction", _nothing),
    "abort_transaction": Rule("the caller's own transaction", _nothing),
    "start_operation": Rule("use on the pools, read on file_paths", _start_operation, True),
    "update_operation_parameters": Rule(
        "manage on the operation, use on a new pool", _update_operation_parameters, True
    ),
    "abort_operation": OPERATION_MANAGE,
    "complete_operation": OPERATION_MANAGE,
    "suspend_operation": OPERATION_MANAGE,
    "resume_operation": OPERATION_MANAGE,
    "abort_job": Rule("manage on the job's operation", _abort_job),
    "get_operation": OPERATION_READ,
    "list_jobs": OPERATION_READ,
    "get_job": OPERATION_READ,
    "get_job_stderr": OPERATION_READ,
    "get_job_spec": OPERATION_READ,
    "list_operations": Rule("any user; lists the operations the user may read", _nothing),
    "get_current_user": ANY_USER,
    "auth_whoami": ANY_USER,
    "check_permission": ANY_USER,
    "check_operation_permission": ANY_USER,
    "set_user_password": Rule("superuser, or the user with their password", _self_or_superuser),
    "issue_token": Rule("superuser, or the user with their password", _self_or_superuser),
    "list_user_tokens": Rule("superuser, or the user with their password", _self_or_superuser),
    "revoke_token": Rule("superuser, or the user with their password", _self_or_superuser),
    "add_member": Rule("superuser (write on the group)", _group_write),
    "remove_member": Rule("superuser (write on the group)", _group_write),
    "execute_batch": Rule("each request its own rule", _batch),
}


@dataclass(frozen=True)
class RouteRule:
    """Who may call an HTTP route outside ``/api/v4/<command>`` (or ``/api/v4/<command>`` itself): ``access`` is
    ``public``, ``user`` (a token, or the web UI's cookie), ``node`` (the node secret from a node network),
    ``operator`` (a superuser's token or the node secret) or ``metrics`` (a token unless ``--metrics-public``)."""

    access: str
    needs: str


ROUTE_ACCESS = ("public", "user", "node", "operator", "metrics")
ROUTE_RULES: dict[str, RouteRule] = {
    "/api": RouteRule("public", "discovery: the API versions"),
    "/api/v4": RouteRule("public", "discovery: the commands"),
    "/api/v4/": RouteRule("public", "discovery: the commands"),
    "/hosts": RouteRule("public", "discovery: the proxies (none)"),
    "/api/v4/{command}": RouteRule("user", "a token; then the command's rule"),
    "/auth/whoami": RouteRule("user", "a token; then the rule of auth_whoami (any user)"),
    "/{rest:path}": RouteRule("public", 'answers "unknown endpoint"'),
    "/internal/node_heartbeat": RouteRule("node", "the node secret; the node speaks for its own address"),
    "/internal/file_blob/{blob_id}": RouteRule("node", "the node secret; blobs of running operations' files"),
    "/internal/job_stderr/{operation_id}/{job_id}": RouteRule("node", "the node secret"),
    "/internal/store_health": RouteRule("operator", "a superuser's token or the node secret"),
    "/metrics": RouteRule("metrics", "a token, unless the scheduler runs with --metrics-public"),
    "/internal/heartbeat_tail": RouteRule("metrics", "as /metrics: slow heartbeats and stalls"),
    "/": RouteRule("user", "a token (cookie); pages show what the user may read"),
    "/ui/": RouteRule("user", "a token (cookie)"),
    "/scheduling": RouteRule("user", "a token (cookie)"),
    "/operations": RouteRule("user", "a token (cookie); only operations the user may read"),
    "/operation/{operation_id}": RouteRule("user", "a token (cookie) and read on the operation"),
    "/history": RouteRule("user", "a token (cookie)"),
    "/nodes": RouteRule("user", "a token (cookie)"),
    "/job_stderr": RouteRule("user", "a token (cookie) and read on the operation"),
    "/login": RouteRule("public", "the login form and its post (checks the token)"),
    "/logout": RouteRule("public", "drops the cookie"),
    "/static/{name}": RouteRule("public", "the UI's scripts and styles"),
}
"""Every HTTP route the scheduler serves; ``RouteGuard`` (``pooltree.server.app``) refuses a route not listed."""
