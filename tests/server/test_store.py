"""The Store contract, run against a real SQLite file and a real PostgreSQL server."""

from __future__ import annotations

import math
import threading
from pathlib import Path

import pytest

from pooltree.errors import PooltreeError
from pooltree.server.store import JobRecord, OperationFilter, OperationRecord, StoreError, open_store, sql


def _op(i: int, **kw: object) -> OperationRecord:
    base: dict[str, object] = dict(
        id=f"op-{i}",
        type="vanilla",
        state="running",
        user="alice",
        pool="p1",
        start_time=100.0 + i,
        spec={"pool": "p1", "title": f"Задача {i}"},
        runtime_parameters={"scheduling_options_per_pool_tree": {"physical": {"pool": "p1", "weight": 1.0}}},
        document={"resource_limits": {"cpu": math.inf}},
    )
    base.update(kw)
    return OperationRecord(**base)  # type: ignore[arg-type]


def test_nodes_roundtrip_and_survive_reopen(store_url: str) -> None:
    store = open_store(store_url)
    store.save_nodes(
        {
            "//sys/pool_trees/physical": {"type": "scheduler_pool_tree", "attributes": {"config": {"a": 1}}},
            "//sys/pool_trees/physical/p1": {"type": "scheduler_pool", "attributes": {"weight": 2.5}},
        },
        [],
    )
    store.save_nodes(
        {"//sys/pool_trees/physical/p2": {"type": "scheduler_pool", "attributes": {}}},
        ["//sys/pool_trees/physical/p1"],
    )
    store.close()
    reopened = open_store(store_url)
    nodes = reopened.load_nodes()
    assert set(nodes) == {"//sys/pool_trees/physical", "//sys/pool_trees/physical/p2"}
    assert nodes["//sys/pool_trees/physical"]["attributes"]["config"] == {"a": 1}
    reopened.close()


def test_kv_values(store_url: str) -> None:
    with open_store(store_url) as store:
        assert store.get_value("//sys/pool_trees/@default_tree") is None
        assert store.get_value("missing", "dflt") == "dflt"
        store.set_value("//sys/pool_trees/@default_tree", "physical")
        store.set_value("//sys/pool_trees/@default_tree", "ключ")
        store.set_value("limits", {"cpu": math.inf})
        assert store.get_value("//sys/pool_trees/@default_tree") == "ключ"
        assert store.get_value("limits") == {"cpu": math.inf}
        assert store.delete_value("limits") is True
        assert store.delete_value("limits") is False


def test_operations_filters_and_paging(store_url: str) -> None:
    with open_store(store_url) as store:
        for i in range(6):
            store.put_operation(
                _op(i, state="completed" if i % 2 else "running", user="bob" if i >= 4 else "alice")
            )
        assert store.get_operation("op-3") == _op(3, state="completed")
        assert store.get_operation("nope") is None
        newest = store.list_operations(OperationFilter(limit=2))
        assert [op.id for op in newest] == ["op-5", "op-4"]
        older = store.list_operations(OperationFilter(limit=10, cursor_time=newest[-1].start_time))
        assert [op.id for op in older] == ["op-3", "op-2", "op-1", "op-0"]
        future = store.list_operations(OperationFilter(cursor_time=101.0, cursor_direction="future", limit=2))
        assert [op.id for op in future] == ["op-2", "op-3"]
        assert [op.id for op in store.list_operations(OperationFilter(state="running", user="alice"))] == [
            "op-2",
            "op-0",
        ]
        assert store.count_operations(OperationFilter(state="completed")) == 3
        assert store.count_operations(OperationFilter(from_time=102, to_time=104)) == 3
        changed = _op(1, state="failed", finish_time=200.5, document={"result": {"error": {"code": 1}}})
        store.put_operation(changed)
        assert store.get_operation("op-1") == changed
        assert store.count_operations() == 6


def test_a_page_reads_bodies_only_of_operations_the_caller_does_not_hold(store_url: str) -> None:
    """``list_operations(known=...)``: the same page in the same order; the held operations come partial (no body
    read), the others whole, as ``get_operation`` gives them (also past one ``IN`` list of bodies)."""
    with open_store(store_url) as store:
        for i in range(12):
            store.put_operation(_op(i, state="completed" if i % 3 else "running"))
        known = {"op-11", "op-6", "op-0"}
        for query in (OperationFilter(limit=20), OperationFilter(limit=5, cursor_time=108.0)):
            plain = store.list_operations(query)
            listed = store.list_operations(query, known=known)
            assert [r.id for r in listed] == [r.id for r in plain]
            for record in listed:
                if record.id in known:
                    assert (
                        record.partial
                        and record.spec == {}
                        and record.state == store.get_operation(record.id).state
                    )
                else:
                    assert record == store.get_operation(record.id) and not record.partial
        chunk, sql.BODY_CHUNK = sql.BODY_CHUNK, 2
        try:
            listed = store.list_operations(OperationFilter(limit=20), known={"op-5"})
        finally:
            sql.BODY_CHUNK = chunk
        assert [r.id for r in listed if not r.partial] == [f"op-{i}" for i in range(11, -1, -1) if i != 5]
        assert all(r == store.get_operation(r.id) for r in listed if not r.partial)


def test_a_page_of_ids_is_the_page_of_records_in_its_order(store_url: str) -> None:
    """``list_operation_ids``: the ids ``list_operations`` lists, in its order, for every filter and both
    directions; ids of any text (SQLite sends them as one row, each after its length), ties on the start time."""
    with open_store(store_url) as store:
        odd = ["op:1:", "12:op", "оп,7", "a;b", ""]
        for i in range(12):
            start = 100.0 + (i // 2) + (1e-7 if i % 4 == 0 else 0.0)  # ties two by two, some a hair apart
            store.put_operation(
                _op(
                    i,
                    id=odd[i] if i < len(odd) else f"op-{i}",
                    start_time=start,
                    state="completed" if i % 3 else "running",
                )
            )
        for query in (
            OperationFilter(limit=20),
            OperationFilter(limit=3),
            OperationFilter(limit=0),
            OperationFilter(limit=5, state="completed"),
            OperationFilter(limit=5, cursor_time=103.0),
            OperationFilter(limit=4, cursor_time=101.0, cursor_direction="future"),
            OperationFilter(limit=5, user="nobody"),
        ):
            assert store.list_operation_ids(query) == [r.id for r in store.list_operations(query)], query


def test_jobs_and_delete_cascade(store_url: str) -> None:
    with open_store(store_url) as store:
        store.put_operation(_op(1))
        store.put_job(JobRecord("op-1", "j2", "running", "node-1:9012", start_time=5.0))
        store.put_job(
            JobRecord(
                "op-1", "j1", "failed", "node-2:9012", 3.0, 4.0, "stderr/op-1/j1", {"error": {"code": 1}}
            )
        )
        assert [j.id for j in store.list_jobs("op-1")] == ["j1", "j2"]
        assert [j.id for j in store.list_jobs("op-1", state="failed")] == ["j1"]
        job = store.get_job("op-1", "j1")
        assert job is not None and job.stderr_ref == "stderr/op-1/j1" and job.finish_time == 4.0
        assert store.get_job("op-1", "zz") is None
        assert store.delete_operation("op-1") is True
        assert store.list_jobs("op-1") == []
        assert store.delete_operation("op-1") is False


def test_mutations(store_url: str) -> None:
    with open_store(store_url) as store:
        assert store.get_mutation("m1") == (False, None)
        store.remember_mutation("m1", {"object_id": "1-2-3-4"}, now=10.0)
        store.remember_mutation("m2", None, now=20.0)
        assert store.get_mutation("m1") == (True, {"object_id": "1-2-3-4"})
        assert store.get_mutation("m2") == (True, None)
        assert store.forget_mutations(older_than=15.0) == 1
        assert store.get_mutation("m1") == (False, None)


def test_concurrent_writers_all_land(store_url: str) -> None:
    with open_store(store_url) as store:

        def work(t: int) -> None:
            for i in range(10):
                store.set_value(f"k{t}-{i}", i)

        threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        assert all(store.get_value(f"k{t}-{i}") == i for t in range(4) for i in range(10))


def test_failed_transaction_leaves_nothing(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'a.db'}")
    with pytest.raises(TypeError):
        store.save_nodes({"//a": {"type": "map_node"}, "//b": {"bad": object()}}, [])
    assert store.load_nodes() == {}
    store.close()


def test_bad_urls(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="unknown store URL scheme"):
        open_store("mysql://x")
    with pytest.raises(StoreError, match="sqlite:///"):
        open_store("sqlite://relative")
    with pytest.raises(StoreError, match="non-empty"):
        open_store("")
    with pytest.raises(StoreError, match="cannot connect"):
        open_store("postgresql://nobody@127.0.0.1:1/none")
    with pytest.raises(PooltreeError, match="cursor_direction"):
        OperationFilter(cursor_direction="sideways")
    plain = open_store(str(tmp_path / "plain.db"))
    assert plain.get_value("x") is None
    plain.close()


def test_put_jobs_writes_a_batch_and_the_last_version_wins(store_url: str) -> None:
    """``put_jobs`` (one transaction per heartbeat) stores what ``put_job`` one by one would."""
    with open_store(store_url) as store:
        store.put_operation(_op(1))
        store.put_jobs([])
        store.put_jobs(
            [
                JobRecord("op-1", "a", "running", "n1", 1.0),
                JobRecord("op-1", "b", "completed", "n1", 1.0, 2.0, None, {"exit_code": 0}),
            ]
        )
        store.put_jobs([JobRecord("op-1", "a", "failed", "n1", 1.0, 3.0, None, {"exit_code": 1})])
        jobs = {job.id: job for job in store.list_jobs("op-1")}
        assert jobs["a"].state == "failed" and jobs["a"].document == {"exit_code": 1}
        assert jobs["b"].state == "completed" and jobs["b"].finish_time == 2.0
