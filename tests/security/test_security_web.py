"""The web UI answers as the API does: a user sees an operation's page, its jobs' stderr and its row in the list
only when the operation's ACL lets them read it."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from pooltree.server.service import SchedulerService
from pooltree.server.store import open_store

ROOT_TOKEN = "ytct-0000-" + "b0" * 16


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_pages_follow_the_operation_acl(tmp_path: Path) -> None:
    service = SchedulerService(
        open_store(f"sqlite:///{tmp_path / 'db.sqlite'}"), token=ROOT_TOKEN, create_default_tree=True
    )
    await service.start()
    try:
        directory = service.security.directory
        directory.create_user("alice")
        directory.create_user("bob")
        alice = directory.issue_token("alice")
        spec = {"tasks": {"main": {"command": "true", "job_count": 1}}}
        denied = {**spec, "acl": [{"action": "deny", "subjects": ["alice"], "permissions": ["read"]}]}
        hidden = service.scheduler.start_operation("vanilla", denied, "bob", service.clock())
        shown = service.scheduler.start_operation("vanilla", spec, "bob", service.clock())
        transport = httpx.ASGITransport(app=service.app)
        headers = {"Authorization": f"OAuth {alice}"}
        async with httpx.AsyncClient(transport=transport, base_url="http://test", headers=headers) as web:
            page = await web.get(f"/operation/{hidden.id}")
            assert page.status_code == 400 and "Access denied" in page.text
            stderr = await web.get("/job_stderr", params={"operation_id": hidden.id, "job_id": "x"})
            assert stderr.status_code == 400
            assert (await web.get(f"/operation/{shown.id}")).status_code == 200
            listing = (await web.get("/operations")).text
            assert shown.id in listing and hidden.id not in listing
        root = {"Authorization": f"OAuth {ROOT_TOKEN}"}
        async with httpx.AsyncClient(transport=transport, base_url="http://test", headers=root) as web:
            assert (await web.get(f"/operation/{hidden.id}")).status_code == 200
            assert hidden.id in (await web.get("/operations")).text
    finally:
        await service.stop()
        service.store.close()
