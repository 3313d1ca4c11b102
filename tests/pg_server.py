"""A throwaway PostgreSQL server in a temp dir on 127.0.0.1 that a test (or bench) can stop and start again.

Runs as user ``postgres`` when the caller is root. ``PgServer.create()`` raises ``PgUnavailable`` with the reason
when the binaries or the user are missing (tests skip with it).
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

from loopback import free_port


class PgUnavailable(Exception):
    """PostgreSQL cannot run here (the message says why)."""


def pg_bin(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    for candidate in sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"), reverse=True):
        return str(candidate)
    return None


class PgServer:
    """One PostgreSQL cluster: ``start()``, ``stop()`` (fast shutdown: sessions are terminated), ``destroy()``."""

    def __init__(self, root: Path, prefix: list[str], user: str, pg_ctl: str) -> None:
        self.root = root
        self.data = root / "data"
        self.prefix = prefix
        self.user = user
        self.pg_ctl = pg_ctl
        self.port = free_port()
        self.url = f"postgresql://{user}@127.0.0.1:{self.port}/postgres"

    @classmethod
    def create(cls) -> PgServer:
        initdb, pg_ctl = pg_bin("initdb"), pg_bin("pg_ctl")
        if not initdb or not pg_ctl:
            raise PgUnavailable(
                "PostgreSQL binaries (initdb, pg_ctl) not found in PATH or /usr/lib/postgresql/*/bin"
            )
        prefix: list[str] = []
        user = pwd.getpwuid(os.getuid()).pw_name
        root = Path(tempfile.mkdtemp(prefix="pooltree-pg-"))
        if os.getuid() == 0:
            try:
                entry = pwd.getpwnam("postgres")
            except KeyError:
                shutil.rmtree(root, ignore_errors=True)
                raise PgUnavailable(
                    "running as root and there is no 'postgres' user to run PostgreSQL"
                ) from None
            runuser = shutil.which("runuser")
            if not runuser:
                shutil.rmtree(root, ignore_errors=True)
                raise PgUnavailable("running as root and runuser is not available to drop privileges")
            os.chown(root, entry.pw_uid, entry.pw_gid)
            prefix = [runuser, "-u", "postgres", "--"]
            user = "postgres"
        server = cls(root, prefix, user, pg_ctl)
        try:
            server._run(initdb, "-D", str(server.data), "-U", user, "--auth=trust", "--no-sync", "-E", "UTF8")
            server.start()
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as error:
            log = server.log_tail()
            server.destroy()
            raise PgUnavailable(
                f"cannot start PostgreSQL: {error}; {getattr(error, 'stderr', b'')!r} {log}"
            ) from None
        return server

    def _run(self, *args: str, timeout: float = 60) -> None:
        subprocess.run([*self.prefix, *args], check=True, capture_output=True, timeout=timeout, cwd=self.root)

    def log_tail(self) -> str:
        log = self.root / "log.txt"
        return log.read_text(errors="replace")[-500:] if log.exists() else ""

    def start(self) -> None:
        self._run(
            self.pg_ctl, "-D", str(self.data), "-w", "-t", "30", "-l", str(self.root / "log.txt"),
            "-o", f"-h 127.0.0.1 -p {self.port} -k {self.root} -F",
            "start",
        )  # fmt: skip

    def stop(self) -> None:
        self._run(self.pg_ctl, "-D", str(self.data), "-m", "fast", "-w", "-t", "30", "stop")

    def destroy(self) -> None:
        subprocess.run(
            [*self.prefix, self.pg_ctl, "-D", str(self.data), "-m", "immediate", "-w", "-t", "30", "stop"],
            capture_output=True,
            timeout=60,
            cwd=self.root,
        )
        shutil.rmtree(self.root, ignore_errors=True)
