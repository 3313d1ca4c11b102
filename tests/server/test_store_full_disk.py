"""A full disk under the SQLite store, for real: the store lives on a small tmpfs mounted for the test (root only;
skipped elsewhere), and another tenant fills it. Writes are refused with a clear error (nothing half-done),
reads and ``list_operations`` are served, the ``store_trouble`` alert is raised; when space returns the service
recovers by itself (no restart): writes succeed again and the alert clears."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from pooltree.server.service import SchedulerService
from pooltree.server.store import open_store

ROOT_TOKEN = "ytct-0000-" + "f011" * 8
MIB = 1 << 20


@contextlib.contextmanager
def _tmpfs(mount: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` at ``mount``, unmounted afterwards (skips the test where mounting is not allowed)."""
    mount.mkdir()
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {made.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs."""
    with _tmpfs(tmp_path / "small", "4m") as mount:
        yield mount


@pytest.fixture
def medium_disk(tmp_path: Path) -> Iterator[Path]:
    """A 24 MiB tmpfs (room for the store's reserve: twice the journal's bound)."""
    with _tmpfs(tmp_path / "medium", "24m") as mount:
        yield mount


def _fill(path: Path) -> int:
    """Write zeros into ``path`` until the filesystem is full; the bytes written."""
    written = 0
    with path.open("wb", buffering=0) as handle:
        chunk = b"\0" * 64 * 1024
        while True:
            try:
                handle.write(chunk)
                written += len(chunk)
            except OSError as error:
                assert error.errno == errno.ENOSPC
                break
        with contextlib.suppress(OSError):
            os.fsync(handle.fileno())
    return written


def _call(
    url: str, method: str, command: str, params: dict[str, Any], body: bytes | None = None
) -> httpx.Response:
    headers = {
        "Authorization": f"OAuth {ROOT_TOKEN}",
        "X-YT-Parameters": json.dumps(params),
        "X-YT-Header-Format": "json",
        "X-YT-Output-Format": "json",
    }
    return httpx.request(method, f"{url}/api/v4/{command}", headers=headers, content=body, timeout=30)


def _write(url: str, path: str, data: bytes) -> httpx.Response:
    """``create file`` (if missing) then ``write_file``, as the client does; the first refusal or the write."""
    created = _call(url, "POST", "create", {"type": "file", "path": path, "ignore_existing": True})
    if created.status_code != 200:
        return created
    return _call(url, "PUT", "write_file", {"path": path}, data)


def _alert_types(service: SchedulerService) -> set[str]:
    return {alert["attributes"]["alert_type"] for alert in service.scheduler.alert_center.scheduler_alerts()}


def test_a_full_disk_refuses_writes_serves_reads_and_recovers_by_itself(
    small_disk: Path, serve: Callable[[object], str]
) -> None:
    service = SchedulerService(open_store(f"sqlite:///{small_disk / 'pooltree.db'}"), token=ROOT_TOKEN)
    url = serve(service.app)
    assert _write(url, "//tmp/before", b"kept" * 1000).status_code == 200
    filler = small_disk / "other-tenant"
    assert _fill(filler) > 0

    answers = [_write(url, f"//tmp/f{index}", b"x" * (256 * 1024)) for index in range(10)]
    refused = [answer for answer in answers if answer.status_code != 200]
    assert len(refused) >= 9, [
        a.status_code for a in answers
    ]  # the first may still fit in free journal pages
    for answer in refused:
        assert answer.status_code == 503, answer.text
        assert "out of disk space" in answer.json()["message"] and "Internal error" not in answer.text
    assert _call(url, "GET", "read_file", {"path": "//tmp/before"}).content == b"kept" * 1000
    assert _call(url, "GET", "list", {"path": "//tmp"}).status_code == 200
    listed = _call(url, "GET", "list_operations", {})
    assert listed.status_code == 200, listed.text
    health = service.store_health()
    assert not health["ok"] and health["transient"] and "full" in health["error"], health
    assert "store_trouble" in _alert_types(service)

    filler.unlink()  # space returns; no restart
    service.store.probe()  # what the store watch does every second
    assert service.store_health()["ok"]
    assert "store_trouble" not in _alert_types(service)
    assert _write(url, "//tmp/after", b"y" * (256 * 1024)).status_code == 200
    assert _call(url, "GET", "read_file", {"path": "//tmp/after"}).content == b"y" * (256 * 1024)
    service.store.close()


def test_users_files_never_fill_the_disk_under_the_store(
    medium_disk: Path, serve: Callable[[object], str]
) -> None:
    """The issue's attack on a 24 MiB disk: alice writes 1 MiB files into //tmp (its quota is 1 GiB) until she
    is refused; the refusal comes while the disk still has room, so her ``remove`` works and the next write
    too, with no restart and no store trouble."""
    service = SchedulerService(open_store(f"sqlite:///{medium_disk / 'pooltree.db'}"), token=ROOT_TOKEN)
    url = serve(service.app)
    answers = [_write(url, f"//tmp/fill{index}", b"z" * MIB) for index in range(20)]
    codes = [answer.status_code for answer in answers]
    assert 200 in codes and 503 in codes, codes
    first_refused = codes.index(503)
    assert all(code == 503 for code in codes[first_refused:]), codes
    assert all("out of disk space" in answer.json()["message"] for answer in answers[first_refused:])
    assert service.store_health()["ok"]  # refused before the disk filled: no trouble at all
    for index in range(first_refused):
        removed = _call(url, "POST", "remove", {"path": f"//tmp/fill{index}"})
        assert removed.status_code == 200, (index, removed.text, os.statvfs(medium_disk).f_bavail * 4096)
    assert _write(url, "//tmp/again", b"z" * MIB).status_code == 200
    service.store.close()
