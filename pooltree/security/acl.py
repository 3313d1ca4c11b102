"""ACL evaluation as YTsaurus does it: pure functions over ACEs, an object's ancestors and a user's subjects.

An ACE is ``{action=allow|deny; subjects=[...]; permissions=[...]; inheritance_mode=...}``. To decide whether a user
may do ``permission`` on an object, walk from the object up through its parents, taking each ACE whose inheritance
mode reaches the object from that depth, until a node with ``inherit_acl=%false`` (its own ACEs still count). An ACE
matches when one of its subjects is the user or a group the user is in (transitively) and it lists the permission.
Any matching ``deny`` wins; otherwise any matching ``allow`` allows; otherwise access is denied ("not allowed by any
matching ACE"). Superusers are allowed everything before any ACE is read.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pooltree.errors import PooltreeError

AUTHORIZATION_ERROR = 901

PERMISSIONS = ("read", "write", "use", "administer", "create", "remove", "mount", "manage", "modify_children")
OPERATION_PERMISSIONS = ("read", "manage")
ACTIONS = ("allow", "deny")
INHERITANCE_MODES = (
    "object_and_descendants",
    "object_only",
    "descendants_only",
    "immediate_descendants_only",
)
ACE_KEYS = ("action", "subjects", "permissions", "inheritance_mode")


class AclError(PooltreeError):
    """A malformed ACL; ``attributes.field`` names the bad part."""


def _fail(field_path: str, reason: str) -> AclError:
    return AclError(f"Error parsing ACL: {field_path}: {reason}", attributes={"field": field_path})


@dataclass(frozen=True)
class Ace:
    action: str
    subjects: tuple[str, ...]
    permissions: tuple[str, ...]
    inheritance_mode: str = "object_and_descendants"

    def to_json(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "subjects": list(self.subjects),
            "permissions": list(self.permissions),
            "inheritance_mode": self.inheritance_mode,
        }

    def reaches(self, depth: int) -> bool:
        """Whether this ACE, set ``depth`` levels above an object (0 = on it), applies to the object."""
        mode = self.inheritance_mode
        if depth == 0:
            return mode in ("object_and_descendants", "object_only")
        if depth == 1:
            return mode != "object_only"
        return mode in ("object_and_descendants", "descendants_only")


def _strip(value: Any) -> Any:
    while isinstance(value, dict) and "$value" in value and set(value) <= {"$value", "$attributes", "$type"}:
        value = value["$value"]
    return value


def parse_acl(
    value: Any, field_path: str = "acl", *, permissions: Sequence[str] = PERMISSIONS
) -> tuple[Ace, ...]:
    """Validate an ACL value (a list of ACE maps); every error names the field and the reason."""
    value = _strip(value)
    if value is None:
        return ()
    if not isinstance(value, list):
        raise _fail(field_path, f"expected a list of ACEs, got {type(value).__name__}")
    out: list[Ace] = []
    for index, raw in enumerate(value):
        where = f"{field_path}[{index}]"
        raw = _strip(raw)
        if not isinstance(raw, dict):
            raise _fail(where, f"expected an ACE map, got {type(raw).__name__}")
        unknown = sorted(set(raw) - set(ACE_KEYS))
        if unknown:
            raise _fail(f"{where}.{unknown[0]}", f"unknown ACE key; known: {', '.join(ACE_KEYS)}")
        for key in ("action", "subjects", "permissions"):
            if key not in raw:
                raise _fail(f"{where}.{key}", "required ACE key is missing")
        action = _strip(raw["action"])
        if action not in ACTIONS:
            raise _fail(f"{where}.action", f"expected allow or deny, got {action!r}")
        subjects = _strings(raw["subjects"], f"{where}.subjects")
        perms = _strings(raw["permissions"], f"{where}.permissions")
        for perm in perms:
            if perm not in permissions:
                raise _fail(
                    f"{where}.permissions", f"unknown permission {perm!r}; known: {', '.join(permissions)}"
                )
        mode = _strip(raw.get("inheritance_mode", "object_and_descendants"))
        if mode not in INHERITANCE_MODES:
            raise _fail(
                f"{where}.inheritance_mode", f"expected one of {', '.join(INHERITANCE_MODES)}, got {mode!r}"
            )
        out.append(Ace(action, tuple(subjects), tuple(perms), mode))
    return tuple(out)


def _strings(value: Any, where: str) -> list[str]:
    value = _strip(value)
    if not isinstance(value, list):
        raise _fail(where, f"expected a list of strings, got {type(value).__name__}")
    items = [_strip(item) for item in value]
    for item in items:
        if not isinstance(item, str) or not item:
            raise _fail(where, f"expected non-empty strings, got {item!r}")
    return items


def parse_inherit_acl(value: Any, field_path: str = "inherit_acl") -> bool:
    value = _strip(value)
    if value is None:
        return True
    if not isinstance(value, bool):
        raise _fail(field_path, f"expected a boolean, got {value!r}")
    return value


@dataclass(frozen=True)
class AclNode:
    """One object on the way from the checked object to the root: how to name it, its ACL, ``inherit_acl``."""

    name: str
    acl: tuple[Ace, ...] = ()
    inherit_acl: bool = True
    path: str | None = None


@dataclass(frozen=True)
class Decision:
    """The answer of a check, shaped like YTsaurus's ``check_permission`` result."""

    action: str
    permission: str
    user: str
    object_name: str
    reason: str = ""
    ace_owner: str | None = None
    subject: str | None = None
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def allowed(self) -> bool:
        return self.action == "allow"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"action": self.action}
        if self.ace_owner is not None:
            out["object_name"] = self.ace_owner
        if self.subject is not None:
            out["subject_name"] = self.subject
        return out

    def error(self) -> PooltreeError:
        """The YTsaurus authorization error (code 901) for a denial."""
        if self.subject is not None and self.ace_owner is not None:
            tail = f'is denied for "{self.subject}" by ACE at {self.ace_owner}'
        else:
            tail = "is not allowed by any matching ACE"
        attributes: dict[str, Any] = {
            "user": self.user,
            "permission": self.permission,
            "object": self.object_name,
            **self.details,
        }
        if self.subject is not None:
            attributes["denied_for"] = self.subject
        if self.ace_owner is not None:
            attributes["denied_by"] = self.ace_owner
        return PooltreeError(
            f'Access denied for user "{self.user}": "{self.permission}" permission for {self.object_name} {tail}',
            code=AUTHORIZATION_ERROR,
            attributes=attributes,
        )


def check(
    chain: Sequence[AclNode],
    user: str,
    subjects: Iterable[str],
    permission: str,
    *,
    superuser: bool = False,
) -> Decision:
    """Decide ``permission`` for ``user`` (member of ``subjects``) on ``chain[0]`` with ancestors ``chain[1:]``."""
    target = chain[0].name if chain else "object"
    if superuser:
        return Decision("allow", permission, user, target, reason="superuser")
    who = frozenset(subjects) | {user}
    allow: tuple[str, str] | None = None
    for depth, node in enumerate(chain):
        for ace in node.acl:
            if permission not in ace.permissions or not ace.reaches(depth):
                continue
            matched = next((s for s in ace.subjects if s in who), None)
            if matched is None:
                continue
            if ace.action == "deny":
                return Decision(
                    "deny", permission, user, target, "denied", ace_owner=node.name, subject=matched
                )
            if allow is None:
                allow = (node.name, matched)
        if not node.inherit_acl:
            break
    if allow is not None:
        return Decision("allow", permission, user, target, "allowed", ace_owner=allow[0], subject=allow[1])
    return Decision("deny", permission, user, target, "no matching ACE")
