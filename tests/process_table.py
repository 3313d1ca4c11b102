"""Finding a test's processes in the host's process table by a marker in their command line (``/proc``)."""

from __future__ import annotations

import os


def processes_with(marker: str) -> list[int]:
    """Live (not zombie) processes whose command line holds ``marker``."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as handle:
                cmdline = handle.read()
            with open(f"/proc/{name}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue
        if marker.encode() in cmdline and stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3] not in b"ZX":
            found.append(int(name))
    return found


def describe(pids: list[int]) -> list[str]:
    """One line per live process: pid, command line, state, parent, pids in its namespaces, uid."""
    out = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as handle:
                fields = dict(line.split(":", 1) for line in handle if ":" in line)
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                cmdline = handle.read().replace(b"\0", b" ").decode()
        except OSError:
            continue
        keys = ("State", "PPid", "NSpid", "Uid")
        out.append(f"{pid} {cmdline!r} " + " ".join(f"{k}={fields.get(k, '').strip()}" for k in keys))
    return out
