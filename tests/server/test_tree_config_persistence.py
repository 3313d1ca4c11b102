"""``remove //sys/pool_trees/T/@config`` resets the tree's options to ``{}``, and reads back the same before and after
a restart (the store and the served state never disagree about it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pooltree.server.cypress import Cypress
from pooltree.server.store import open_store


@pytest.mark.parametrize("removed", ["//sys/pool_trees/t/@config", "//sys/pool_trees/t/@"])
def test_removed_tree_config_reads_back_the_same_after_a_restart(tmp_path: Path, removed: str) -> None:
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    store = open_store(url)
    cypress = Cypress(store)
    cypress.create("scheduler_pool_tree", "//sys/pool_trees/t")
    cypress.set("//sys/pool_trees/t/@config/max_running_operation_count_per_pool", 5)
    cypress.remove(removed)
    before = cypress.get("//sys/pool_trees/t/@config")
    store.close()
    store = open_store(url)
    try:
        after = Cypress(store).get("//sys/pool_trees/t/@config")
    finally:
        store.close()
    assert before == after == {}
