"""Accounts and their quotas, YTsaurus style: every Cypress node is charged to an account, and a change that would
take an account over its ``resource_limits`` is refused with YTsaurus's error 902 ("Account "tmp" is over disk
space limit").

* Accounts are ``account`` objects at ``//sys/accounts/NAME`` (``create account --attributes {name=...}``). Two are
  built in, as on YTsaurus: ``tmp`` (``//tmp`` and everything below it) and ``sys`` (every other node).
* A node's account is its ``account`` attribute when set, else its parent's (so a node moved elsewhere is charged
  to its new place, as YTsaurus's ``move`` does without ``preserve_account``).
* ``resource_usage`` of an account: ``node_count`` (every node charged to it, accounts themselves excepted) and
  ``disk_space`` (the bytes of its files, and of file writes staged in open transactions: YTsaurus counts
  uncommitted usage too). ``resource_limits`` is ``{disk_space; node_count}``; a missing key takes the default.
* Only increases are checked: a change that lowers an account's usage (``remove``) always passes, even over the
  limit (limits may be set below usage, as on YTsaurus).

Pure functions over the node tree (``Node``); ``Cypress`` calls ``check_change`` inside every mutation and
``FileCommands`` calls ``check_disk_space`` before a file's bytes reach the store.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pooltree.server.cypress_nodes import ACCOUNT_TYPE, ACCOUNTS, ACCOUNTS_PATH, Node, check_name
from pooltree.server.protocol import YtError

SYS_ACCOUNT = "sys"
TMP_ACCOUNT = "tmp"
ACCOUNT_LIMIT_EXCEEDED = 902
"""YTsaurus ``NSecurityClient::EErrorCode::AccountLimitExceeded``."""
RESOURCES = ("disk_space", "node_count")
DEFAULT_LIMITS: dict[str, dict[str, int]] = {
    SYS_ACCOUNT: {"disk_space": 1 << 50, "node_count": 1 << 40},
    TMP_ACCOUNT: {"disk_space": 1 << 30, "node_count": 100_000},
}
"""Limits of an account whose ``resource_limits`` omit a resource: ``tmp`` 1 GiB and 100,000 nodes (root raises
or lowers them with ``set //sys/accounts/tmp/@resource_limits/disk_space``), ``sys`` practically unlimited; a
created account starts with nothing (as on YTsaurus) until its limits are set."""


@dataclass
class Usage:
    disk_space: int = 0
    node_count: int = 0

    def to_json(self) -> dict[str, int]:
        return {"disk_space": self.disk_space, "node_count": self.node_count}


def _own_account(tokens: tuple[str, ...], node: Node, inherited: str) -> str:
    own = node.attributes.get("account")
    if isinstance(own, str):
        return own
    return TMP_ACCOUNT if tokens == ("tmp",) else inherited


def _charged(root: Node) -> Iterator[tuple[tuple[str, ...], Node, str]]:
    """Every node charged to an account, with the account (inherited down the tree)."""
    stack: list[tuple[tuple[str, ...], Node, str]] = [((), root, SYS_ACCOUNT)]
    while stack:
        tokens, node, inherited = stack.pop()
        account = _own_account(tokens, node, inherited)
        if node.type != ACCOUNT_TYPE:
            yield tokens, node, account
        for name, child in node.children.items():
            stack.append(((*tokens, name), child, account))


def account_of(root: Node, tokens: tuple[str, ...]) -> str:
    """The account a node at ``tokens`` is (or would be) charged to (a missing node: its nearest ancestor's)."""
    node = root
    account = _own_account((), root, SYS_ACCOUNT)
    for index, token in enumerate(tokens):
        child = node.children.get(token)
        if child is None:
            return TMP_ACCOUNT if tokens[:1] == ("tmp",) and index == 0 else account
        node = child
        account = _own_account(tokens[: index + 1], node, account)
    return account


def file_bytes(node: Node) -> int:
    if node.type != "file" or not isinstance(node.value, dict):
        return 0
    size = node.value.get("size")
    return int(size) if isinstance(size, int) and size > 0 else 0


def usage(root: Node) -> dict[str, Usage]:
    """Committed usage per account."""
    out: dict[str, Usage] = {}
    for _tokens, node, account in _charged(root):
        entry = out.setdefault(account, Usage())
        entry.node_count += 1
        entry.disk_space += file_bytes(node)
    return out


def accounts(root: Node) -> dict[str, Node]:
    """The account objects under ``//sys/accounts``."""
    holder = root.children.get(ACCOUNTS[0])
    holder = holder.children.get(ACCOUNTS[1]) if holder is not None else None
    if holder is None:
        return {}
    return {name: node for name, node in holder.children.items() if node.type == ACCOUNT_TYPE}


def limits(name: str, account: Node | None) -> dict[str, int]:
    """An account's limits, defaults filling what ``resource_limits`` omits."""
    base = dict(DEFAULT_LIMITS.get(name, {"disk_space": 0, "node_count": 0}))
    given = account.attributes.get("resource_limits") if account is not None else None
    if isinstance(given, Mapping):
        for resource in RESOURCES:
            value = given.get(resource)
            if isinstance(value, int) and not isinstance(value, bool):
                base[resource] = value
    return base


def account_attributes(root: Node, name: str, account: Node) -> dict[str, Any]:
    """The system attributes of an account object: ``name``, ``resource_usage``, ``resource_limits`` (defaults
    filled), ``violated_resource_limits``."""
    used = usage(root).get(name, Usage())
    limit = limits(name, account)
    return {
        "name": name,
        "resource_usage": used.to_json(),
        "resource_limits": limit,
        "violated_resource_limits": {
            "disk_space": used.disk_space > limit["disk_space"],
            "node_count": used.node_count > limit["node_count"],
        },
    }


def validate_limits(value: Any, where: str) -> None:
    """``resource_limits`` is a map of non-negative integers for ``disk_space`` / ``node_count``."""
    if not isinstance(value, Mapping):
        raise YtError(f"{where} must be a map of resources", attributes={"path": where})
    for key, amount in value.items():
        if key not in RESOURCES:
            raise YtError(
                f'{where}: unknown resource "{key}"; accounts limit {", ".join(RESOURCES)}',
                attributes={"path": where, "resource": str(key)},
            )
        if isinstance(amount, bool) or not isinstance(amount, int) or amount < 0:
            raise YtError(
                f"{where}/{key} must be a non-negative integer, got {amount!r}",
                attributes={"path": where, "resource": key},
            )


def over_limit_error(name: str, resource: str, used: int, limit: int) -> YtError:
    what = "disk space" if resource == "disk_space" else "node count"
    return YtError(
        f'Account "{name}" is over {what} limit',
        code=ACCOUNT_LIMIT_EXCEEDED,
        attributes={"account": name, "usage": used, "limit": limit},
    )


def check_change(before: Node, after: Node, staged: Mapping[str, int] | None = None) -> None:
    """Refuse a mutation that raises an account's usage above its limits; validate account objects and the
    ``account`` attributes of nodes (an existing account)."""
    known = accounts(after)
    _check_placement(after)
    for name, account in known.items():
        check_name("Account", name)
        if "resource_limits" in account.attributes:
            validate_limits(account.attributes["resource_limits"], f"{ACCOUNTS_PATH}/{name}/@resource_limits")
    old, new = usage(before), usage(after)
    for tokens, node, _account in _charged(after):
        own = node.attributes.get("account")
        if own is not None and (not isinstance(own, str) or own not in known):
            raise YtError(
                f'Account "{own}" does not exist',
                code=500,
                attributes={"path": "//" + "/".join(tokens), "account": str(own)},
            )
    for name, now in new.items():
        was = old.get(name, Usage())
        extra = (staged or {}).get(name, 0)
        limit = limits(name, known.get(name))
        if now.disk_space > was.disk_space and now.disk_space + extra > limit["disk_space"]:
            raise over_limit_error(name, "disk_space", now.disk_space + extra, limit["disk_space"])
        if now.node_count > was.node_count and now.node_count > limit["node_count"]:
            raise over_limit_error(name, "node_count", now.node_count, limit["node_count"])


def _check_placement(root: Node) -> None:
    """Accounts live directly in ``//sys/accounts`` and hold no children; nothing else lives there."""
    stack: list[tuple[tuple[str, ...], Node]] = [((), root)]
    while stack:
        tokens, node = stack.pop()
        here = tokens[:-1] == ACCOUNTS and len(tokens) == len(ACCOUNTS) + 1
        if here != (node.type == ACCOUNT_TYPE):
            raise YtError(
                f"Only account objects live in {ACCOUNTS_PATH}, and accounts live nowhere else "
                f"(create them with: create account --attributes {{name=...}})",
                attributes={"path": "//" + "/".join(tokens), "type": node.type},
            )
        if node.type == ACCOUNT_TYPE and node.children:
            raise YtError("Accounts have no children", attributes={"path": "//" + "/".join(tokens)})
        stack.extend(((*tokens, name), child) for name, child in node.children.items())


def check_disk_space(root: Node, tokens: tuple[str, ...], extra: int, staged: Mapping[str, int]) -> str:
    """Before ``extra`` bytes are written for the file at ``tokens``: refuse when its account would go over its
    disk space limit (committed usage, staged writes and these bytes); the account's name otherwise."""
    name = account_of(root, tokens)
    limit = limits(name, accounts(root).get(name))["disk_space"]
    used = usage(root).get(name, Usage()).disk_space + staged.get(name, 0)
    if extra > 0 and used + extra > limit:
        raise over_limit_error(name, "disk_space", used + extra, limit)
    return name
