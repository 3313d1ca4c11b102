"""Files a job spec carries (the operation's ``file_paths``), written into the sandbox before the command runs.

Wire shape (one entry of the spec's ``files``): ``{"name": "job.py", "executable": true, "blobs": [ids], "size": n}``
(the contents are the blobs in order, fetched from the scheduler's ``GET /internal/file_blob/<id>`` and kept in the
node's blob cache, so a 30 MB module archive of a Python task crosses the network once per node, not once per job)
or ``{"name": ..., "data": "<base64>"}`` inline. ``name`` is a relative path inside the sandbox (subdirectories
allowed, no ``..``, no absolute path); the file is created fresh (never through an existing symlink) with mode 0755
when executable, else 0644.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from pooltree.errors import ConfigError, PooltreeError, join_path

BlobSource = Callable[[str], bytes]
"""Blob id → its bytes (``BlobCache.get`` over ``http_blob_source``)."""
BLOB_PATH = "/internal/file_blob/"
STDERR_PATH = "/internal/job_stderr/"
_BLOB_ID_RE = re.compile(r"^[0-9a-f]{1,8}(-[0-9a-f]{1,8}){3}$")


@dataclass(frozen=True)
class JobFile:
    """One file of a job: where it goes in the sandbox, its bytes (inline or blob ids), whether it is executable."""

    name: str
    data: bytes = b""
    executable: bool = False
    blobs: tuple[str, ...] = ()


def http_blob_source(scheduler_url: Callable[[], str], headers: Callable[[], dict[str, str]]) -> BlobSource:
    """Fetch blobs from the scheduler the node heartbeats to (its URL and auth headers read at each fetch)."""

    def fetch(blob_id: str) -> bytes:
        try:
            response = httpx.get(
                scheduler_url().rstrip("/") + BLOB_PATH + blob_id, headers=headers(), timeout=60
            )
        except httpx.HTTPError as error:
            raise OSError(f"cannot fetch file blob {blob_id}: {type(error).__name__}: {error}") from error
        if response.status_code != 200:
            raise OSError(
                f"cannot fetch file blob {blob_id}: HTTP {response.status_code} {response.text[:300]}"
            )
        return response.content

    return fetch


class BlobCache:
    """Blobs on the node's disk (``directory/<id>``), fetched once from ``source``; blobs never change."""

    def __init__(self, directory: Path, source: BlobSource) -> None:
        self.directory = directory
        self.source = source
        self._lock = threading.Lock()

    def get(self, blob_id: str) -> bytes:
        if not _BLOB_ID_RE.match(blob_id):
            raise OSError(f"invalid blob id {blob_id!r}")
        path = self.directory / blob_id
        try:
            return path.read_bytes()
        except FileNotFoundError:
            pass
        data = self.source(blob_id)
        with self._lock:
            self.directory.mkdir(parents=True, exist_ok=True)
            partial = path.with_suffix(f".{threading.get_ident()}.part")
            partial.write_bytes(data)
            partial.replace(path)
        return data


def _check_name(name: Any, path: str) -> str:
    if not isinstance(name, str) or not name or "\0" in name:
        raise ConfigError(path, f"expected a non-empty file name, got {name!r}")
    parts = name.split("/")
    if name.startswith("/") or any(part in ("", ".", "..") for part in parts):
        raise ConfigError(
            path, f"{name!r} must be a relative path inside the sandbox (no '..', no empty parts)"
        )
    return name


def parse_job_files(value: Any, path: str = "files") -> tuple[JobFile, ...]:
    """The ``files`` of a job spec; every problem names the entry and field."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise ConfigError(path, f"expected a list of files, got {type(value).__name__}")
    files: list[JobFile] = []
    names: set[str] = set()
    for index, entry in enumerate(value):
        where = join_path(path, index)
        if not isinstance(entry, dict):
            raise ConfigError(where, f"expected a map, got {type(entry).__name__}")
        unknown = sorted(set(entry) - {"name", "data", "executable", "blobs", "size"})
        if unknown:
            raise ConfigError(
                join_path(where, str(unknown[0])),
                "unknown file field; known: blobs, data, executable, name, size",
            )
        name = _check_name(entry.get("name"), join_path(where, "name"))
        if name in names:
            raise ConfigError(join_path(where, "name"), f"{name!r} is given twice")
        names.add(name)
        executable = entry.get("executable", False)
        if not isinstance(executable, bool):
            raise ConfigError(join_path(where, "executable"), f"expected a boolean, got {executable!r}")
        data = entry.get("data", "")
        if not isinstance(data, str):
            raise ConfigError(join_path(where, "data"), "expected base64 text")
        try:
            content = base64.b64decode(data.encode("ascii"), validate=True)
        except (binascii.Error, UnicodeEncodeError) as error:
            raise ConfigError(join_path(where, "data"), f"not valid base64: {error}") from None
        blobs = entry.get("blobs", [])
        if not isinstance(blobs, list) or not all(isinstance(b, str) and _BLOB_ID_RE.match(b) for b in blobs):
            raise ConfigError(join_path(where, "blobs"), "expected a list of blob ids")
        if blobs and content:
            raise ConfigError(where, "give either data or blobs, not both")
        files.append(JobFile(name, content, executable, tuple(blobs)))
    return tuple(files)


def write_job_files(sandbox: Path, files: Sequence[JobFile], source: BlobSource | None = None) -> list[Path]:
    """Create each file under ``sandbox`` (parents as needed); refuses to follow symlinks or leave the sandbox.

    Returns the files and directories it created. Raises OSError, which the executor reports as "Failed to start
    user job"."""
    root = sandbox.resolve()
    created: list[Path] = []
    for job_file in files:
        target = sandbox / job_file.name
        missing = [p for p in reversed(target.parents) if p.is_relative_to(sandbox) and not p.exists()]
        target.parent.mkdir(parents=True, exist_ok=True)
        created.extend(missing)
        if not target.parent.resolve().is_relative_to(root):
            raise OSError(f"file {job_file.name!r} of the job leaves the sandbox")
        flags = (
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        )
        mode = 0o755 if job_file.executable else 0o644
        if job_file.blobs and source is None:
            raise OSError(
                f"file {job_file.name!r} is stored on the scheduler and this node has no blob source"
            )
        pieces = (
            [source(b) for b in job_file.blobs] if job_file.blobs and source is not None else [job_file.data]
        )
        fd = os.open(target, flags, mode)
        try:
            for piece in pieces:
                view = memoryview(piece)
                while view:
                    written = os.write(fd, view)
                    view = view[written:]
            os.fchmod(fd, mode)  # the umask must not drop the executable bit
        finally:
            os.close(fd)
        created.append(target)
    return created


SKIPPED = b"\n...skipped...\n"


def truncate_output(path: Path, limit: int) -> int:
    """Keep at most ``limit`` bytes of an output file the YTsaurus way: its first ``limit // 2`` bytes, the marker
    ``\n...skipped...\n`` and its last ``limit // 2`` bytes. Returns the size kept (0 for a missing file)."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return 0
    if size <= limit:
        return size
    half = limit // 2
    with open(path, "rb") as handle:
        head = handle.read(half)
        handle.seek(size - half)
        tail = handle.read(half)
    partial = path.with_name(path.name + ".cut")
    fd = os.open(
        partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600
    )  # private, as the job's output files are
    with os.fdopen(fd, "wb") as handle:
        handle.write(head + SKIPPED + tail)
    os.chmod(partial, path.stat().st_mode & 0o7777)
    partial.replace(path)
    return len(head) + len(SKIPPED) + len(tail)


def outputs_within_limit(directory: Path, limit: int) -> bool:
    """Whether neither output file of a finished job (``stdout``, ``stderr`` in ``directory``) is over ``limit``
    bytes (two ``stat``s): then ``truncate_output`` would not touch them."""
    for name in ("stdout", "stderr"):
        try:
            if os.stat(directory / name).st_size > limit:
                return False
        except FileNotFoundError:
            continue
        except OSError:
            return False
    return True


def upload_stderr(
    agent: Any, scheduler_url: str, headers: dict[str, str], client: Callable[..., Any] | None = None
) -> None:
    """Send the whole (truncated) stderr of finished jobs whose report carries only its tail to the scheduler
    (``PUT /internal/job_stderr/<operation_id>/<job_id>``), so ``get_job_stderr`` answers it all. Best effort: on
    failure the report's tail stays what the scheduler has."""
    for job_id, operation_id in agent.pending_stderr_uploads():
        try:
            data = agent.executor.stderr(job_id, agent.executor.stderr_limit + len(SKIPPED))
            put = client or httpx.put
            response = put(
                f"{scheduler_url.rstrip('/')}{STDERR_PATH}{operation_id}/{job_id}",
                content=data,
                headers=headers,
                timeout=60,
            )
        except (httpx.HTTPError, PooltreeError, OSError):
            continue
        if response.status_code == 200:
            agent.stderr_uploaded(job_id)
