"""The Nodes, History and Scheduling pages are rendered once per read snapshot and what else they read (path,
query, page or fragment, user, the history's samples, the forecast), over real HTTP on 127.0.0.1: a second request
for the same page on the same snapshot renders nothing and answers the same bytes (its "x s ago" filled in from the
request's clock, as a render at that moment would show them); other users, other query parameters and a new
publication render anew."""

from __future__ import annotations

import html
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from published_cluster import (
    heartbeat,
    published_service,
    root_and_alice,
    serving,
)

from pooltree.server.service import SchedulerService

ROOT_TOKEN = "root-token-for-page-cache-0123456789"


@pytest.fixture
def pages_served(
    tmp_path: Path,
) -> Iterator[tuple[SchedulerService, str, list[float], dict[str, str], Counter[str]]]:
    """A service with authentication served on 127.0.0.1 on a clock the test moves (no loops: the test publishes),
    one node, one running operation, users root and alice with their tokens, and a count of template renders."""
    now = [1000.0]
    service = published_service(tmp_path, now, token=ROOT_TOKEN)
    tokens = root_and_alice(service, ROOT_TOKEN)
    renders: Counter[str] = Counter()
    env = service.web.env
    get_template = env.get_template

    def counted(name: Any, *args: Any, **kwargs: Any) -> Any:
        renders[str(name)] += 1
        return get_template(name, *args, **kwargs)

    env.get_template = counted  # type: ignore[method-assign]
    with serving(service) as url:
        yield service, url, now, tokens, renders


def _get(url: str, token: str, path: str, fragment: bool = False) -> str:
    headers = {"Authorization": f"OAuth {token}"}
    if fragment:
        headers["HX-Request"] = "true"
    answer = httpx.get(url + path, headers=headers, timeout=10.0)
    assert answer.status_code == 200, (path, answer.text[:300])
    return answer.text


def test_a_page_is_rendered_once_per_snapshot_and_key(
    pages_served: tuple[SchedulerService, str, list[float], dict[str, str], Counter[str]],
) -> None:
    service, url, now, tokens, renders = pages_served
    root, alice = tokens["root"], tokens["alice"]
    now[0] += 3.0  # the node's last heartbeat (at 1000.5) 2.5 s ago
    pages = ("/nodes", "/history", "/?page=scheduling&tree=default")
    for path, fragment in ((page, fragment) for page in pages for fragment in (False, True)):
        before = sum(renders.values())
        first = _get(url, root, path, fragment)
        assert sum(renders.values()) > before, path  # rendered
        rendered = sum(renders.values())
        assert _get(url, root, path, fragment) == first, path  # the same bytes...
        assert sum(renders.values()) == rendered, path  # ...and nothing rendered
    # The age a node shows follows the request's clock on a kept page, as a render at that moment shows it.
    page = _get(url, root, "/nodes", True)
    shown = float(re.findall(r">([0-9.]+) s ago<", page)[0])
    assert shown == 2.5
    now[0] += 2.0
    rendered = sum(renders.values())
    later = _get(url, root, "/nodes", True)
    assert sum(renders.values()) == rendered
    assert later == page.replace(f">{shown:.1f} s ago<", f">{shown + 2.0:.1f} s ago<") != page
    service.web.pages = type(service.web.pages)()  # what rendering anew at this moment answers
    assert _get(url, root, "/nodes", True) == later
    # Another user, other query parameters: each rendered for itself, never another's page.
    rendered = sum(renders.values())
    assert _get(url, alice, "/nodes", True) == later  # the same rows (the page shows no user)...
    assert sum(renders.values()) == rendered + 1  # ...rendered for alice
    whole = _get(url, root, "/nodes")
    other = _get(url, root, "/nodes?order=address")
    assert 'hx-get="/nodes"' in whole and 'hx-get="/nodes?order=address"' in other
    switch = _get(url, root, "/history").split('id="pool-switch"')[1].split("</select>")[0]
    pools = [html.unescape(pool) for pool in re.findall(r'<option value="([^"]+)"', switch)]
    assert len(pools) >= 2, pools
    charts = {pool: _get(url, root, f"/history?pool={quote(pool)}", True) for pool in pools}
    for pool, chart in charts.items():
        assert f'<span id="pool-name">{html.escape(pool)}</span>' in chart, pool
    assert len(set(charts.values())) == len(charts)
    # A new publication renders anew and shows what changed.
    heartbeat(service, "n2", now[0])
    rendered = sum(renders.values())
    assert "node-n2" not in _get(url, root, "/nodes", True)  # the last publication's
    assert sum(renders.values()) == rendered
    service.scheduler.update_fair_share("default", now[0] + 1)
    assert "node-n2" in _get(url, root, "/nodes", True)
    assert sum(renders.values()) == rendered + 1
