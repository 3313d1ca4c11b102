"""``pooltree node --scheduler URL1,URL2``: a leader and its standbys, tried in turn (issue 13)."""

from __future__ import annotations

import pytest

from pooltree.errors import ConfigError
from pooltree.node.service import BACKOFF_INITIAL, NodeLoop, parse_scheduler_urls


class _Agent:
    """Only what ``NodeLoop.__init__`` and ``_failed`` touch."""


def test_parse_scheduler_urls() -> None:
    assert parse_scheduler_urls("http://a:1/, http://b:2") == ["http://a:1", "http://b:2"]
    with pytest.raises(ConfigError, match="ftp://b"):
        parse_scheduler_urls("http://a:1,ftp://b", "--scheduler")
    with pytest.raises(ConfigError, match="scheduler"):
        parse_scheduler_urls(None)


def test_a_failed_heartbeat_moves_to_the_next_scheduler_without_backoff_until_all_failed() -> None:
    loop = NodeLoop(_Agent(), "http://a:1,http://b:2")  # type: ignore[arg-type]
    assert loop.scheduler_url == "http://a:1"
    loop._failed("a is gone")
    assert loop.scheduler_url == "http://b:2" and loop.retry_delay() == 0.0
    loop._failed("b is a standby")
    assert loop.scheduler_url == "http://a:1" and loop.retry_delay() == BACKOFF_INITIAL
    single = NodeLoop(_Agent(), "http://a:1")  # type: ignore[arg-type]
    single._failed("down")
    assert single.scheduler_url == "http://a:1" and single.retry_delay() == BACKOFF_INITIAL
