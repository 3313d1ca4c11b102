"""The specs the unchanged-structure build re-makes for elements whose shares changed (`build_rows._respec`) are exact
copies with the new values, and each is one object for the garbage collector: no ``__dict__`` of its own."""

from __future__ import annotations

import dataclasses
import gc
from typing import Any

import numpy as np
from test_build_unchanged_structure import Step, Usage, definition, spec

from pooltree.strategy.build_rows import _operation_with_shares, _pool_with_shares
from pooltree.strategy.model import SchedulingStatus
from pooltree.strategy.snapshot import ElementSpec
from pooltree.tree import PoolTree


def _own_dict(element: ElementSpec) -> bool:
    """Whether the collector sees a separate ``__dict__`` object holding the fields (CPython: a dict is made when
    ``__dict__`` is read or assigned; attributes stored one by one stay in the object)."""
    return any(type(referent) is dict and "fair_share" in referent for referent in gc.get_referents(element))


def test_copies_replace_the_given_fields_and_keep_every_other_one() -> None:
    values: dict[str, Any] = {}
    for index, spec_field in enumerate(dataclasses.fields(ElementSpec)):
        values[spec_field.name] = object() if spec_field.name not in ("id", "parent") else f"v{index}"
    original = ElementSpec(**values)
    share, demand = np.full(5, 0.25), np.full(5, 0.5)
    pool = _pool_with_shares(original, share, demand, SchedulingStatus.BELOW_FAIR_SHARE)
    operation = _operation_with_shares(original, share, demand, SchedulingStatus.NORMAL, 2.5, 7)
    expected_pool = {
        **values,
        "fair_share": share,
        "demand_share": demand,
        "scheduling_status": SchedulingStatus.BELOW_FAIR_SHARE,
    }
    expected_operation = {
        **expected_pool,
        "scheduling_status": SchedulingStatus.NORMAL,
        "weight": 2.5,
        "fifo_index": 7,
    }
    for copy, expected in ((pool, expected_pool), (operation, expected_operation)):
        assert type(copy) is ElementSpec and copy is not original
        for spec_field in dataclasses.fields(ElementSpec):
            assert getattr(copy, spec_field.name) is expected[spec_field.name], spec_field.name
        assert not _own_dict(copy)
    assert _own_dict(ElementSpec(**{**values, "fair_share": np.zeros(5)})) is False  # __init__ stores alike
    assert original.weight is values["weight"]  # the original is untouched


def test_respecced_elements_keep_no_dict_of_their_own() -> None:
    tree = PoolTree(definition())
    usage = Usage()
    tree.register_operation("op1", user="u", pool="a1", spec=spec("a1"))
    tree.register_operation("op2", user="u", pool="b", spec=spec("b"), now=1.0)
    usage.set("op1", 1, 10)
    usage.set("op2", 2, 10)
    step = Step(tree, usage)
    _, first = step.run()
    assert _own_dict(first.elements["op1"])  # the element walk's specs are built through their __dict__
    usage.set("op1", 8, 12)
    _, moved = step.run()  # the unchanged-structure build: changed specs re-made by _respec
    changed = [key for key in first.elements if moved.elements[key] is not first.elements[key]]
    assert "op1" in changed and "a1" in changed
    for key in changed:
        assert not _own_dict(moved.elements[key]), key


def test_prepared_tuples_are_what_publish_computes_from_the_specs() -> None:
    tree = PoolTree(definition())
    usage = Usage()
    tree.register_operation("op1", user="u", pool="a1", spec=spec("a1"))
    tree.register_operation("op2", user="u", pool="b", spec=spec("b"), now=1.0)
    usage.set("op1", 1, 10)
    usage.set("op2", 2, 10)
    step = Step(tree, usage)
    _, first = step.run()
    assert len(first.prepared) == 0
    usage.set("op2", 9, 30)
    _, moved = step.run()
    changed = {key for key in first.elements if moved.elements[key] is not first.elements[key]}
    assert changed and set(moved.prepared) == changed and len(moved.prepared) == len(changed)
    for key in changed:
        element = moved.elements[key]
        fair, demand = element.fair_share.tolist(), element.demand_share.tolist()
        expected = (tuple(fair), tuple(demand), tuple(f >= d for f, d in zip(fair, demand, strict=True)))
        assert moved.prepared[key] == expected == moved.prepared.get(key)
    assert moved.prepared.get("no such element") is None
