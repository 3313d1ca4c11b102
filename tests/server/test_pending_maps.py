"""A queued operation's ``get_operation`` answer from its template (``server/pending_maps.py``): after starts into
its pool and aborts ahead of it, every answer is byte for byte the whole map built and encoded anew, and only a
change of more than its queue numbers builds the map again."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pooltree.server.app import CommandContext
from pooltree.server.commands import output_format
from pooltree.server.pending_maps import Template, make_template, templated
from pooltree.server.protocol import Format, encode_structured
from pooltree.server.service import SchedulerService
from pooltree.server.store import open_store

TOKEN = "ytct-0000-" + "9a9a" * 8
NOW = 1_700_000_000.0
SPEC = {"pool": "queue", "tasks": {"main": {"command": "true", "job_count": 1}}}


@pytest.fixture
def service(tmp_path: Path) -> Iterator[SchedulerService]:
    made = SchedulerService(
        open_store(f"sqlite:///{tmp_path / 'db.sqlite'}"),
        create_default_tree=True,
        token=TOKEN,
        clock=lambda: NOW,  # a fixed clock: a map built anew carries the same build time
    )
    asyncio.run(made.start())
    made.cypress.create(
        "scheduler_pool",
        None,
        attributes={"name": "queue", "pool_tree": "default", "max_running_operation_count": 0},
    )
    try:
        yield made
    finally:
        asyncio.run(made.stop())
        made.store.close()


def _ctx(operation_id: str, **parameters: Any) -> CommandContext:
    return CommandContext(
        "get_operation", {"operation_id": operation_id, **parameters}, user="root", headers={}, request_id="r"
    )


def _fresh(service: SchedulerService, ctx: CommandContext) -> bytes:
    """The answer from the whole map built and encoded anew."""
    commands = service.commands
    op = service.scheduler.operations[ctx.parameters["operation_id"]]
    built = commands._live_attributes(op)
    return encode_structured(
        commands._select(built, ctx.list_param("attributes")), output_format(ctx.parameters)
    )[0]


def test_a_queued_operation_is_answered_from_its_template_as_built_anew(service: SchedulerService) -> None:
    scheduler, commands = service.scheduler, service.commands
    ops = [scheduler.start_operation("vanilla", SPEC, "root", NOW) for _ in range(12)]
    watched = [ops[3].id, ops[7].id, ops[11].id]
    selections: list[dict[str, Any]] = [
        {},
        {"attributes": ["id", "state", "progress"]},
        {"attributes": ["progress", "scheduling_forecast"]},
        {"attributes": ["id"]},
        {"output_format": "yson"},  # not templated: built whole, still the same answer
    ]
    builds = 0
    real_build = commands._live_attributes

    def counted(op: Any) -> dict[str, Any]:
        nonlocal builds
        builds += 1
        return real_build(op)

    for operation_id in watched:  # read once: a template is made from the second read of an operation on
        assert commands.get_operation_fast(_ctx(operation_id)) is not None
    commands._live_attributes = counted  # type: ignore[method-assign]
    for step in range(10):
        if step % 3 == 2:  # an abort ahead of the watched operations moves their positions
            service.commands.abort_operation(_ctx(ops[step].id))
        else:
            scheduler.start_operation("vanilla", SPEC, "root", NOW)  # their queue grows
        before = builds
        for operation_id in watched:
            for parameters in selections:
                ctx = _ctx(operation_id, **parameters)
                answer = commands.get_operation_fast(ctx)
                assert answer is not None
                commands._live_attributes = real_build  # type: ignore[method-assign]
                try:
                    assert answer.data == _fresh(service, ctx), (step, operation_id, parameters)
                finally:
                    commands._live_attributes = counted  # type: ignore[method-assign]
        if step > 0:  # only the YSON answers (no template) were built whole once the templates were made
            assert builds - before == len(watched), (step, builds - before)


def test_templates_only_for_plain_json() -> None:
    assert templated(Format("json"))
    assert templated(Format("json", {"encode_utf8": False}))
    assert not templated(Format("json", {"format": "pretty"}))
    assert not templated(Format("yson"))


def test_a_template_refuses_a_map_without_its_values() -> None:
    """A tree said to hold the operation in a queue whose scheduling info lacks the queue values gives no template
    (the answer is then built whole)."""
    attributes = {"id": "x", "progress": {"scheduling_info_per_pool_tree": {"t": {"pool": "p"}}}}
    assert make_template(attributes, ["t"], ["t"], Format("json"), dict) is None
    made = make_template(attributes, ["t"], [], Format("json"), dict)
    assert made is not None
    template, values = made
    assert isinstance(template, Template) and template.slots == () and values == []
    assert template.fill({}, Format("json")) == encode_structured(attributes, Format("json"))[0]


def test_a_template_made_forecast_apart_fills_the_forecast_map_per_answer() -> None:
    """A read process's template (``forecast_apart``): the whole ``scheduling_forecast`` map is one slot, filled by
    the caller's forecast of the trees' reasons (in the trees' order); the bytes are the whole map's encoding. A map
    without scheduling info gives none (the forecast is given every tree's reason from there)."""
    fmt = Format("json")
    info = {"t": {"pool": "p", "pending_allocations_reason": {"reason": "fixed"}}, "u": {"pool": "q"}}
    forecast = {"waiting_for": {"reason": "fixed"}, "state": "ready", "seeds": 8}
    attributes = {
        "id": "x",
        "progress": {"scheduling_info_per_pool_tree": info},
        "scheduling_forecast": forecast,
    }
    made = make_template(attributes, ["t", "u"], [], fmt, dict, forecast_apart=True)
    assert made is not None
    template, values = made
    assert template.slots == ((None, "scheduling_forecast"),) and template.trees == ("t", "u")
    assert template.join(values, fmt) == encode_structured(attributes, fmt)[0]
    asked: list[list[Any]] = []

    def filled(reasons: list[Any]) -> dict[str, Any]:
        asked.append(reasons)
        return {**forecast, "state": "computing"}

    data = template.fill({}, fmt, forecast=filled)
    assert asked == [[{"reason": "fixed"}, None]]
    assert data == encode_structured({**attributes, "scheduling_forecast": filled([])}, fmt)[0]
    assert template.fill({}, fmt) is None  # no forecast to fill it with
    bare = {"id": "x", "scheduling_forecast": forecast}  # no scheduling info: no reasons to give the forecast
    assert make_template(bare, ["t"], [], fmt, dict, forecast_apart=True) is None
    assert make_template(bare, ["t"], [], fmt, dict) is not None


def test_a_queued_operation_moved_while_read_is_read_again_on_the_loop(service: SchedulerService) -> None:
    """A start into its pool while a queued operation's map is built (read without the lock) makes that read give
    up; the event loop reads it again instead of handing it to a worker thread, where it would queue behind every
    listing waiting for one (session 28: ~1% of the reads, 140-210 ms each). The answer is the one built anew."""
    scheduler, commands = service.scheduler, service.commands
    ops = [scheduler.start_operation("vanilla", SPEC, "root", NOW) for _ in range(3)]
    real_build = commands._live_attributes
    moves = 0

    def moved_while_read(op: Any) -> dict[str, Any]:
        nonlocal moves
        if moves == 0:  # another thread's start lands while this read is under way
            moves += 1
            scheduler.start_operation("vanilla", SPEC, "root", NOW)
        return real_build(op)

    commands._live_attributes = moved_while_read  # type: ignore[method-assign]
    ctx = _ctx(ops[1].id)
    answer = commands.get_operation_fast(ctx)
    commands._live_attributes = real_build  # type: ignore[method-assign]
    assert moves == 1
    assert answer is not None, "a read that saw its queue move went to a worker thread"
    assert answer.data == _fresh(service, ctx)
