"""Users, groups and tokens (YTsaurus ``//sys/users``, ``//sys/groups``, ``//sys/cypress_tokens``), persisted in
the store as one document under the key ``security``.

Built in, as in YTsaurus: user ``root`` (member of ``superusers``); groups ``superusers``, ``users`` (every user but
``guest`` is in it implicitly) and ``everyone`` (every user, implicitly). Users and groups share one namespace of
subjects. Group membership is transitive and may not form a cycle. Passwords are kept as scrypt hashes and tokens
as SHA-256 (see ``credentials``); nothing here ever holds a plain secret after the call that received it.
"""

from __future__ import annotations

import copy
import re
import secrets
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from pooltree.errors import PooltreeError
from pooltree.security.credentials import (
    hash_password,
    is_sha256,
    new_token,
    sha256_hex,
    token_prefix,
    verify_password,
)

STORE_KEY = "security"
ROOT = "root"
GUEST = "guest"
SUPERUSERS = "superusers"
USERS = "users"
EVERYONE = "everyone"
BUILTIN_USERS = (ROOT, GUEST)
BUILTIN_GROUPS = (SUPERUSERS, USERS, EVERYONE)
IMPLICIT_GROUPS = (USERS, EVERYONE)
NAME_RE = re.compile(r"^[A-Za-z0-9_.@-]{1,128}$")

# YTsaurus security error codes.
AUTHENTICATION_ERROR = 900
AUTHORIZATION_ERROR = 901
NO_SUCH_SUBJECT = 902
NO_SUCH_USER = 908
NO_SUCH_GROUP = 909
ALREADY_EXISTS = 501


class SecurityError(PooltreeError):
    """A refused security request (bad name, unknown subject, cycle, wrong password)."""


def _object_id() -> str:
    return "-".join(f"{secrets.randbits(32):x}" for _ in range(4))


def check_name(kind: str, name: Any) -> str:
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise SecurityError(
            f"{kind} name must be 1-128 letters, digits or _.@-, got {name!r}",
            attributes={"field": "name"},
        )
    return name


class Directory:
    """The users, groups and tokens of one cluster; thread-safe; every change is written through to the store."""

    def __init__(self, store: Any, *, clock: Callable[[], float] = time.time) -> None:
        self._store = store
        self._clock = clock
        self._lock = threading.RLock()
        self._doc = self._load()
        self._closure_cache: dict[str, frozenset[str]] = {}
        self.revision = 0
        """Moves with every change (a read process's copy, ``replica_document``, is sent again when it moves)."""

    # ------------------------------------------------------------------ persistence

    def _load(self) -> dict[str, Any]:
        doc = self._store.get_value(STORE_KEY) if self._store is not None else None
        if not isinstance(doc, dict):
            doc = {}
        doc.setdefault("users", {})
        doc.setdefault("groups", {})
        doc.setdefault("tokens", {})
        changed = False
        now = self._clock()
        for user in BUILTIN_USERS:
            if user not in doc["users"]:
                doc["users"][user] = {"id": _object_id(), "creation_time": now}
                changed = True
        for group in BUILTIN_GROUPS:
            if group not in doc["groups"]:
                members = [ROOT] if group == SUPERUSERS else []
                doc["groups"][group] = {"id": _object_id(), "creation_time": now, "members": members}
                changed = True
        if changed and self._store is not None:
            self._store.set_value(STORE_KEY, doc)
        return doc

    def _commit(self, doc: dict[str, Any]) -> None:
        if self._store is not None:
            self._store.set_value(STORE_KEY, doc)
        self._doc = doc
        self._closure_cache = {}
        self.revision += 1

    def _change(self, change: Callable[[dict[str, Any]], Any]) -> Any:
        with self._lock:
            doc = copy.deepcopy(self._doc)
            result = change(doc)
            self._commit(doc)
            return result

    # ------------------------------------------------------------------ reads

    def users(self) -> list[str]:
        with self._lock:
            return sorted(self._doc["users"])

    def groups(self) -> list[str]:
        with self._lock:
            return sorted(self._doc["groups"])

    def has_user(self, name: str) -> bool:
        return name in self._doc["users"]

    def has_group(self, name: str) -> bool:
        return name in self._doc["groups"]

    def has_subject(self, name: str) -> bool:
        return self.has_user(name) or self.has_group(name)

    def user_record(self, name: str) -> dict[str, Any]:
        with self._lock:
            record = self._doc["users"].get(name)
            if record is None:
                raise SecurityError(f"No such user {name!r}", code=NO_SUCH_USER, attributes={"user": name})
            return copy.deepcopy(record)

    def group_record(self, name: str) -> dict[str, Any]:
        with self._lock:
            record = self._doc["groups"].get(name)
            if record is None:
                raise SecurityError(f"No such group {name!r}", code=NO_SUCH_GROUP, attributes={"group": name})
            return copy.deepcopy(record)

    def members(self, group: str) -> list[str]:
        """A group's explicit members (``users`` and ``everyone`` list every user they implicitly hold)."""
        with self._lock:
            if group not in self._doc["groups"]:
                raise SecurityError(
                    f"No such group {group!r}", code=NO_SUCH_GROUP, attributes={"group": group}
                )
            if group == EVERYONE:
                return sorted(self._doc["users"])
            if group == USERS:
                return sorted(u for u in self._doc["users"] if u != GUEST)
            return list(self._doc["groups"][group]["members"])

    def member_of(self, subject: str) -> list[str]:
        """Groups that list ``subject`` directly (with the implicit ``users``/``everyone`` for users)."""
        with self._lock:
            direct = [g for g, r in self._doc["groups"].items() if subject in r["members"]]
            if subject in self._doc["users"]:
                direct.append(EVERYONE)
                if subject != GUEST:
                    direct.append(USERS)
            return sorted(set(direct))

    def subjects_of(self, user: str) -> frozenset[str]:
        """The user and every group it belongs to, directly or through other groups."""
        with self._lock:
            cached = self._closure_cache.get(user)
            if cached is not None:
                return cached
            seen = {user}
            frontier = [user]
            while frontier:
                subject = frontier.pop()
                for group in self.member_of(subject):
                    if group not in seen:
                        seen.add(group)
                        frontier.append(group)
            result = frozenset(seen)
            self._closure_cache[user] = result
            return result

    def is_superuser(self, user: str) -> bool:
        return SUPERUSERS in self.subjects_of(user)

    def replica_document(self) -> dict[str, Any]:
        """What a read process needs to authenticate and authorize as this directory does (``pooltree/reads``):
        the users, the groups with their members and the tokens' SHA-256s with their users; no password hash,
        token description or creation time. ``Directory(ReplicaStore(document))`` answers the same reads."""
        with self._lock:
            doc = self._doc
            return {
                "users": sorted(doc["users"]),
                "groups": {name: list(record["members"]) for name, record in doc["groups"].items()},
                "tokens": {digest: str(record["user"]) for digest, record in doc["tokens"].items()},
            }

    # ------------------------------------------------------------------ users and groups

    def create_user(self, name: Any, attributes: dict[str, Any] | None = None) -> str:
        name = check_name("User", name)
        if attributes:
            raise SecurityError(
                f'Attribute "{sorted(attributes)[0]}" cannot be set on a user at creation',
                attributes={"field": f"attributes.{sorted(attributes)[0]}"},
            )

        def change(doc: dict[str, Any]) -> str:
            self._check_free(doc, name)
            object_id = _object_id()
            doc["users"][name] = {"id": object_id, "creation_time": self._clock()}
            return object_id

        return str(self._change(change))

    def create_group(self, name: Any) -> str:
        name = check_name("Group", name)

        def change(doc: dict[str, Any]) -> str:
            self._check_free(doc, name)
            object_id = _object_id()
            doc["groups"][name] = {"id": object_id, "creation_time": self._clock(), "members": []}
            return object_id

        return str(self._change(change))

    @staticmethod
    def _check_free(doc: dict[str, Any], name: str) -> None:
        if name in doc["users"] or name in doc["groups"]:
            kind = "User" if name in doc["users"] else "Group"
            raise SecurityError(
                f"{kind} {name!r} already exists", code=ALREADY_EXISTS, attributes={"name": name}
            )

    def remove_user(self, name: str) -> None:
        if name in BUILTIN_USERS:
            raise SecurityError(f"Cannot remove built-in user {name!r}", attributes={"user": name})

        def change(doc: dict[str, Any]) -> None:
            if name not in doc["users"]:
                raise SecurityError(f"No such user {name!r}", code=NO_SUCH_USER, attributes={"user": name})
            del doc["users"][name]
            for group in doc["groups"].values():
                if name in group["members"]:
                    group["members"].remove(name)
            for digest in [d for d, t in doc["tokens"].items() if t["user"] == name]:
                del doc["tokens"][digest]

        self._change(change)

    def remove_group(self, name: str) -> None:
        if name in BUILTIN_GROUPS:
            raise SecurityError(f"Cannot remove built-in group {name!r}", attributes={"group": name})

        def change(doc: dict[str, Any]) -> None:
            if name not in doc["groups"]:
                raise SecurityError(f"No such group {name!r}", code=NO_SUCH_GROUP, attributes={"group": name})
            del doc["groups"][name]
            for group in doc["groups"].values():
                if name in group["members"]:
                    group["members"].remove(name)

        self._change(change)

    def add_member(self, member: str, group: str) -> None:
        def change(doc: dict[str, Any]) -> None:
            record = self._editable_group(doc, group)
            if member not in doc["users"] and member not in doc["groups"]:
                raise SecurityError(
                    f"No such subject {member!r}", code=NO_SUCH_SUBJECT, attributes={"member": member}
                )
            if member in record["members"]:
                raise SecurityError(
                    f"Member {member!r} is already present in group {group!r}",
                    attributes={"member": member, "group": group},
                )
            if member in doc["groups"] and self._reaches(doc, group, member):
                raise SecurityError(
                    f"Adding group {member!r} to group {group!r} would produce a cycle",
                    attributes={"member": member, "group": group},
                )
            record["members"].append(member)

        self._change(change)

    def remove_member(self, member: str, group: str) -> None:
        def change(doc: dict[str, Any]) -> None:
            record = self._editable_group(doc, group)
            if member not in record["members"]:
                raise SecurityError(
                    f"Member {member!r} is not present in group {group!r}",
                    attributes={"member": member, "group": group},
                )
            if group == SUPERUSERS and member == ROOT:
                raise SecurityError("Cannot remove user 'root' from group 'superusers'")
            record["members"].remove(member)

        self._change(change)

    @staticmethod
    def _editable_group(doc: dict[str, Any], group: str) -> dict[str, Any]:
        if group not in doc["groups"]:
            raise SecurityError(f"No such group {group!r}", code=NO_SUCH_GROUP, attributes={"group": group})
        if group in IMPLICIT_GROUPS:
            raise SecurityError(
                f"Cannot modify group {group!r}: its membership is implicit", attributes={"group": group}
            )
        return doc["groups"][group]

    @staticmethod
    def _reaches(doc: dict[str, Any], start: str, target: str) -> bool:
        """True when group ``start`` is ``target`` or a (transitive) member of group ``target``."""
        seen: set[str] = set()
        frontier = [target]
        while frontier:
            group = frontier.pop()
            if group == start:
                return True
            if group in seen:
                continue
            seen.add(group)
            frontier.extend(m for m in doc["groups"].get(group, {}).get("members", []) if m in doc["groups"])
        return False

    # ------------------------------------------------------------------ passwords

    def set_password(self, user: str, new_password_sha256: Any) -> None:
        if not is_sha256(new_password_sha256):
            raise SecurityError(
                "new_password_sha256 must be the lowercase hex SHA-256 of the password",
                attributes={"parameter": "new_password_sha256"},
            )
        hashed, salt = hash_password(new_password_sha256)

        def change(doc: dict[str, Any]) -> None:
            record = doc["users"].get(user)
            if record is None:
                raise SecurityError(f"No such user {user!r}", code=NO_SUCH_USER, attributes={"user": user})
            record["hashed_password"] = hashed
            record["password_salt"] = salt
            record["password_revision"] = int(record.get("password_revision", 0)) + 1

        self._change(change)

    def check_password(self, user: str, password_sha256: Any) -> bool:
        with self._lock:
            record = self._doc["users"].get(user) or {}
            hashed, salt = record.get("hashed_password"), record.get("password_salt")
        if not hashed or not salt or not isinstance(password_sha256, str):
            return False
        return verify_password(password_sha256, hashed, salt)

    def has_password(self, user: str) -> bool:
        with self._lock:
            return bool((self._doc["users"].get(user) or {}).get("hashed_password"))

    # ------------------------------------------------------------------ tokens

    def issue_token(self, user: str, description: str = "") -> str:
        """A new token for ``user``; only its SHA-256 is kept. The plain token is returned once."""
        token = new_token()
        self.add_token(user, token, description=description)
        return token

    def add_token(self, user: str, token: str, *, description: str = "", bootstrap: bool = False) -> str:
        """Register ``token`` (given by an operator) for ``user``; returns its SHA-256.

        ``bootstrap`` marks the superuser token the service was started with: registering a new one revokes the
        earlier bootstrap tokens, so a rotated token file takes effect at the next start.
        """
        if not isinstance(token, str) or len(token) < 16:
            raise SecurityError("a token must be a string of at least 16 characters")
        digest = sha256_hex(token)

        def change(doc: dict[str, Any]) -> str:
            if user not in doc["users"]:
                raise SecurityError(f"No such user {user!r}", code=NO_SUCH_USER, attributes={"user": user})
            if bootstrap:
                for old in [d for d, t in doc["tokens"].items() if t.get("bootstrap") and d != digest]:
                    del doc["tokens"][old]
            existing = doc["tokens"].get(digest)
            if existing is not None and existing["user"] != user:
                raise SecurityError("this token is already registered for another user")
            doc["tokens"][digest] = {
                "user": user,
                "creation_time": self._clock(),
                "token_prefix": token_prefix(token),
                "description": description,
                **({"bootstrap": True} if bootstrap else {}),
            }
            return digest

        with self._lock:
            known = self._doc["tokens"].get(digest)
            same = known is not None and known["user"] == user and bool(known.get("bootstrap")) == bootstrap
            others = [d for d, t in self._doc["tokens"].items() if t.get("bootstrap") and d != digest]
            if same and not (bootstrap and others):
                return digest
            return str(self._change(change))

    def user_of_token_sha256(self, digest: str) -> str | None:
        with self._lock:
            record = self._doc["tokens"].get(digest)
            return None if record is None else str(record["user"])

    def user_of_token(self, token: str) -> str | None:
        return self.user_of_token_sha256(sha256_hex(token))

    def list_tokens(self, user: str) -> list[str]:
        with self._lock:
            if user not in self._doc["users"]:
                raise SecurityError(f"No such user {user!r}", code=NO_SUCH_USER, attributes={"user": user})
            return sorted(d for d, t in self._doc["tokens"].items() if t["user"] == user)

    def token_metadata(self, digest: str) -> dict[str, Any]:
        with self._lock:
            record = self._doc["tokens"].get(digest) or {}
            return {k: record[k] for k in ("description", "token_prefix", "creation_time") if k in record}

    def revoke_token(self, user: str, token_sha256: Any) -> None:
        if not is_sha256(token_sha256):
            raise SecurityError(
                "token_sha256 must be the lowercase hex SHA-256 of the token",
                attributes={"parameter": "token_sha256"},
            )

        def change(doc: dict[str, Any]) -> None:
            record = doc["tokens"].get(token_sha256)
            if record is None or record["user"] != user:
                raise SecurityError(f"Provided token is not recognized as a valid token for user {user!r}")
            del doc["tokens"][token_sha256]

        self._change(change)

    def all_subjects(self) -> Iterable[str]:
        with self._lock:
            return [*self._doc["users"], *self._doc["groups"]]
