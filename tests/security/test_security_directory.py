"""Users, groups, passwords and tokens of ``pooltree.security``: what is stored, who is in which group, and the
rules YTsaurus keeps (built-ins, no cycles, tokens and passwords only as hashes)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from pooltree.security import Directory, SecurityError
from pooltree.security.credentials import (
    hash_password,
    new_token,
    read_secret_file,
    sha256_hex,
    verify_password,
    write_secret_file,
)
from pooltree.server.store import open_store


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    return tmp_path / "state.db"


def _directory(path: Path) -> Directory:
    return Directory(open_store(f"sqlite:///{path}"))


def test_builtins_and_implicit_groups(store_path: Path) -> None:
    directory = _directory(store_path)
    assert {"root", "guest"} <= set(directory.users())
    assert {"superusers", "users", "everyone"} <= set(directory.groups())
    assert directory.is_superuser("root")
    directory.create_user("alice")
    assert directory.subjects_of("alice") == {"alice", "users", "everyone"}
    assert not directory.is_superuser("alice")
    assert "guest" not in directory.members("users") and "guest" in directory.members("everyone")
    with pytest.raises(SecurityError, match="implicit"):
        directory.add_member("alice", "users")
    with pytest.raises(SecurityError, match="built-in"):
        directory.remove_user("root")
    with pytest.raises(SecurityError, match="root"):
        directory.remove_member("root", "superusers")


def test_groups_nest_without_cycles_and_removal_cleans_up(store_path: Path) -> None:
    directory = _directory(store_path)
    directory.create_user("alice")
    directory.create_group("devs")
    directory.create_group("staff")
    directory.add_member("alice", "devs")
    directory.add_member("devs", "staff")
    assert {"devs", "staff"} <= directory.subjects_of("alice")
    with pytest.raises(SecurityError, match="cycle"):
        directory.add_member("staff", "devs")
    with pytest.raises(SecurityError, match="cycle"):
        directory.add_member("staff", "staff")
    with pytest.raises(SecurityError, match="already exists"):
        directory.create_group("alice")  # users and groups share one namespace
    with pytest.raises(SecurityError, match="No such subject"):
        directory.add_member("nobody", "devs")
    with pytest.raises(SecurityError, match="already present"):
        directory.add_member("alice", "devs")
    directory.add_member("alice", "superusers")
    assert directory.is_superuser("alice")
    directory.remove_group("devs")
    assert directory.subjects_of("alice") == {"alice", "users", "everyone", "superusers"}
    directory.remove_user("alice")
    assert "alice" not in directory.members("superusers")
    with pytest.raises(SecurityError, match="name"):
        directory.create_user("bad name")


def test_tokens_and_passwords_are_stored_only_as_hashes(store_path: Path) -> None:
    directory = _directory(store_path)
    directory.create_user("alice")
    token = directory.issue_token("alice", "laptop")
    assert token.startswith("ytct-") and len(token) == len("ytct-abcd-") + 32
    password = sha256_hex("correct horse battery staple")
    directory.set_password("alice", password)
    assert directory.user_of_token(token) == "alice"
    assert directory.list_tokens("alice") == [sha256_hex(token)]
    assert directory.check_password("alice", password)
    assert not directory.check_password("alice", sha256_hex("wrong"))
    # what reaches the database: the token's SHA-256 and a salted scrypt hash, never the secrets
    raw = "\n".join(row[0] for row in sqlite3.connect(store_path).execute("SELECT value FROM kv"))
    assert token not in raw and token[10:] not in raw and password not in raw
    assert sha256_hex(token) in raw
    stored = json.loads(raw)["users"]["alice"]
    assert stored["hashed_password"] != password and len(stored["password_salt"]) == 32
    # a second password with the same value gets another salt
    directory.create_user("bob")
    directory.set_password("bob", password)
    assert (
        json.loads(next(iter(sqlite3.connect(store_path).execute("SELECT value FROM kv")))[0])["users"][
            "bob"
        ]["hashed_password"]
        != stored["hashed_password"]
    )
    # everything survives a restart
    again = _directory(store_path)
    assert again.user_of_token(token) == "alice" and again.check_password("alice", password)
    again.revoke_token("alice", sha256_hex(token))
    assert again.user_of_token(token) is None
    with pytest.raises(SecurityError, match="not recognized"):
        again.revoke_token("alice", sha256_hex(token))


def test_bootstrap_token_rotates(store_path: Path) -> None:
    directory = _directory(store_path)
    first, second = new_token(), new_token()
    directory.add_token("root", first, bootstrap=True)
    issued = directory.issue_token("root")
    directory.add_token("root", second, bootstrap=True)
    assert directory.user_of_token(first) is None  # the earlier start token no longer works
    assert directory.user_of_token(second) == "root" and directory.user_of_token(issued) == "root"
    with pytest.raises(SecurityError, match="16 characters"):
        directory.add_token("root", "short")


def test_password_hash_is_scrypt_with_salt() -> None:
    digest = sha256_hex("pw")
    hashed, salt = hash_password(digest)
    assert verify_password(digest, hashed, salt)
    assert not verify_password(sha256_hex("other"), hashed, salt)
    assert not verify_password("not-a-sha256", hashed, salt)
    assert hash_password(digest, bytes.fromhex(salt))[0] == hashed


def test_secret_files_are_0600_and_others_refused(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "token"
    write_secret_file(path, "ytct-abcd-" + "0" * 32)
    assert path.stat().st_mode & 0o777 == 0o600
    assert read_secret_file(path, "token") == "ytct-abcd-" + "0" * 32
    path.chmod(0o644)
    with pytest.raises(Exception, match="chmod 600"):
        read_secret_file(path, "token")
    empty = tmp_path / "empty"
    write_secret_file(empty, "")
    with pytest.raises(Exception, match="empty"):
        read_secret_file(empty, "token")
