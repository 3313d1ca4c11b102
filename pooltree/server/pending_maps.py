"""A queued operation's ``get_operation`` answer from a template: what its place in the queues does not move is
encoded once, the place is filled in per read.

Every start into a pool moves the queue length of each operation queued there ("position X of N"), so a pending
operation's attribute map was built and encoded again on nearly every read: ~0.27 ms in process with 1,500 queued,
~0.09 ms the map and ~0.12 ms its normalization and JSON. Here the map is built once per *base* (the map's
fingerprint without the queue numbers: the operation's change mark, its trees' updates and forecast, and in each tree
whether and in which pool it waits), encoded with markers in place of the values the queue numbers decide, and cut
at the markers. A read fills in those values, each encoded alone: per tree where a pool's running-operation count
holds it, ``pending_position``, ``pending_reason`` and the ``pending_allocations_reason`` made of them
(``alerts.count_limit_reason``), and the forecast's ``waiting_for`` (the first of its trees' reasons).

A read process's templates (``forecast_apart``, ``pooltree/reads``) make the whole ``scheduling_forecast`` map a
slot too: its replica fills it from the forecast it was sent, so a new forecast keeps them. The scheduler builds such
a template's map and the replica makes the template of it (``read_template``: the encoding and the cut are the read
process's CPU, not the scheduler's).

Only JSON without pretty printing (what ``yt.wrapper`` asks for): there a value's encoding is the same wherever it
stands in the document. The bytes are those of the whole map built and encoded anew (tested).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pooltree.alerts import count_limit_reason
from pooltree.server.commands import CommandContext, output_format
from pooltree.server.protocol import Format, encode_structured

PLACEMENT_KEYS = ("pending_pool", "pending_reason", "pending_position", "running")
"""What ``progress/scheduling_info_per_pool_tree/<tree>`` shows of the operation's placement in the tree
(``PoolTreeViews.operation_orchid``)."""
QUEUE_KEYS = ("pending_position", "pending_reason", "pending_allocations_reason")
"""Of a tree's scheduling info, what the queue numbers decide (filled in per read)."""
WAITING_FOR = "waiting_for"
FORECAST = "scheduling_forecast"
"""The slot key of the whole ``scheduling_forecast`` map in a template made ``forecast_apart`` (a read process's:
its replica holds the forecast apart and fills the map in per answer, so a new forecast keeps the templates)."""
BUILD_TIME = "build_time"
"""The slot key of the map's build time (``progress/build_time``, ``brief_progress/build_time``) in a template made
``with_time`` (a read process's: it shows when it answered, ``pooltree/reads``)."""

_MARK = f"pooltree-slot-{secrets.token_hex(8)}-"
"""Markers put in place of the filled values: plain ASCII, unchanged by the encoder, never in a real map."""


def templated(fmt: Format) -> bool:
    """Whether answers in ``fmt`` are made from templates (JSON, not pretty)."""
    return fmt.name == "json" and fmt.attributes.get("format") != "pretty"


def base_of(placement: Sequence[tuple[Any, ...]]) -> tuple[tuple[Any, ...], ...]:
    """Of a pending operation's placement (per tree: ``(tree, running)`` or ``(tree, pool, position, queue length,
    running count, running limit)``, ``OperationCommands._placement``), what its template depends on: the tree and
    whether it waits there and in which pool."""
    return tuple(place[:2] for place in placement)


@dataclass(frozen=True)
class Template:
    """An encoded answer cut where the filled values go: ``pieces[0] + value(slots[0]) + pieces[1] + ...``."""

    pieces: tuple[bytes, ...]
    slots: tuple[tuple[str | None, str], ...]
    """(tree, key) per gap; (None, ``WAITING_FOR``) for the forecast's reason, (None, ``FORECAST``) for the whole
    forecast map, (None, ``BUILD_TIME``) for the build time."""
    fixed_reasons: tuple[tuple[str, Any], ...]
    """The operation's trees in order, each with its ``pending_allocations_reason`` when that is not filled in
    (None for the trees whose reason is)."""
    content_type: str

    @property
    def trees(self) -> tuple[str, ...]:
        """The operation's trees in order (those of ``fixed_reasons``)."""
        return tuple(tree for tree, _ in self.fixed_reasons)

    def fill(
        self,
        placements: Mapping[str, Mapping[str, Any]],
        fmt: Format,
        build_time: str | None = None,
        forecast: Callable[[list[Any]], Any] | None = None,
    ) -> bytes | None:
        """The answer with the operation's placement (``operation_orchid``) in each tree where it waits in a pool
        (and ``build_time``, the map's build time as shown, in a template made ``with_time``; the forecast map,
        ``forecast`` of the trees' ``pending_allocations_reason`` in ``trees``' order, in one made
        ``forecast_apart``); None when a slot's tree is missing from ``placements``, a build time slot has no
        ``build_time`` or a forecast slot no ``forecast``."""
        if any(tree is not None and tree not in placements for tree, _ in self.slots):
            return None
        reasons: dict[str, Any] = {}
        for tree, fixed in self.fixed_reasons:
            placement = placements.get(tree)
            reasons[tree] = count_limit_reason(placement) if placement is not None else fixed
        values = []
        for tree, key in self.slots:
            if tree is None and key == BUILD_TIME:
                if build_time is None:
                    return None
                values.append(build_time)
            elif tree is None and key == FORECAST:
                if forecast is None:
                    return None
                values.append(forecast(list(reasons.values())))
            elif tree is None:
                values.append(next((reason for reason in reasons.values() if reason), None))
            elif key == "pending_allocations_reason":
                values.append(reasons[tree])
            else:
                placement = placements.get(tree)
                if placement is None or key not in placement:
                    return None
                values.append(placement[key])
        return self.join(values, fmt)

    def join(self, values: Sequence[Any], fmt: Format) -> bytes:
        """The answer with ``values`` (one per slot, in order) each encoded alone in its gap."""
        parts = [self.pieces[0]]
        for value, piece in zip(values, self.pieces[1:], strict=True):
            parts.append(encode_structured(value, fmt, plain=True)[0])
            parts.append(piece)
        return b"".join(parts)


def make_template(
    attributes: Mapping[str, Any],
    trees: Sequence[str],
    waiting: Sequence[str],
    fmt: Format,
    select: Callable[[dict[str, Any]], dict[str, Any]],
    *,
    with_time: bool = False,
    forecast_apart: bool = False,
) -> tuple[Template, list[Any]] | None:
    """The template of ``attributes`` (a pending operation's map, its trees ``trees`` in order, waiting in a pool in
    the trees ``waiting``) encoded in ``fmt`` after ``select`` (the requested attributes), and the values its slots
    had in ``attributes`` (``template.join(values, fmt)`` is ``attributes``' answer); None when a marker is not
    found where it was put (then the map is encoded whole per read). ``with_time``: the map's build time is a slot
    too (``BUILD_TIME``, filled by ``fill``'s ``build_time``). ``forecast_apart``: the whole ``scheduling_forecast``
    map is a slot (``FORECAST``, filled by ``fill``'s ``forecast``), and every tree of ``trees`` must be in the map's
    scheduling info (``fill`` gives ``forecast`` their reasons in order; else None)."""
    marked = dict(attributes)
    slots: list[tuple[str | None, str]] = []
    originals: list[Any] = []

    def mark(slot: tuple[str | None, str], original: Any) -> str:
        slots.append(slot)
        originals.append(original)
        return f"{_MARK}{len(slots) - 1}"

    progress = marked.get("progress")
    per_tree = progress.get("scheduling_info_per_pool_tree") if isinstance(progress, dict) else None
    if waiting and not isinstance(per_tree, dict):
        return None
    fixed: list[tuple[str, Any]] = []
    if isinstance(per_tree, dict):
        marked["progress"] = progress = dict(progress)
        progress["scheduling_info_per_pool_tree"] = per_tree = dict(per_tree)
        for tree in trees:
            info = per_tree.get(tree)
            if tree not in waiting:
                fixed.append(
                    (tree, info.get("pending_allocations_reason") if isinstance(info, dict) else None)
                )
                continue
            if not isinstance(info, dict) or any(key not in info for key in QUEUE_KEYS):
                return None
            fixed.append((tree, None))
            per_tree[tree] = info = dict(info)
            for key in QUEUE_KEYS:
                info[key] = mark((tree, key), info[key])
    if with_time:
        for name in ("progress", "brief_progress"):
            part = marked.get(name)
            if isinstance(part, dict) and BUILD_TIME in part:
                marked[name] = part = dict(part)
                part[BUILD_TIME] = mark((None, BUILD_TIME), part[BUILD_TIME])
    forecast = marked.get(FORECAST)
    if forecast_apart and FORECAST in marked:
        if len(fixed) != len(trees):
            return None
        marked[FORECAST] = mark((None, FORECAST), forecast)
    elif isinstance(forecast, dict) and WAITING_FOR in forecast:
        marked[FORECAST] = forecast = dict(forecast)
        forecast[WAITING_FOR] = mark((None, WAITING_FOR), forecast[WAITING_FOR])
    data, content_type = encode_structured(select(marked), fmt, plain=True)
    found: list[tuple[int, int, int]] = []  # (offset, length, slot index), sorted: the document's order
    for index in range(len(slots)):
        quoted = json.dumps(f"{_MARK}{index}").encode()
        count = data.count(quoted)
        if count > 1:
            return None
        if count == 1:  # else not among the requested attributes
            found.append((data.index(quoted), len(quoted), index))
    found.sort()
    pieces: list[bytes] = []
    start = 0
    for offset, length, _ in found:
        pieces.append(data[start:offset])
        start = offset + length
    pieces.append(data[start:])
    if any(_MARK.encode() in piece for piece in pieces):
        return None
    kept = [index for _, _, index in found]
    template = Template(tuple(pieces), tuple(slots[i] for i in kept), tuple(fixed), content_type)
    return template, [originals[i] for i in kept]


def select_attributes(attributes: dict[str, Any], wanted: list[str] | None) -> dict[str, Any]:
    """Of an operation's map, the ``attributes`` a ``get_operation`` asked for (``wanted``; None: all)."""
    if wanted is None:
        return attributes
    return {key: attributes[key] for key in wanted if key in attributes}


def read_template(
    attributes: Mapping[str, Any],
    trees: Sequence[str],
    waiting: Sequence[str],
    parameters: Mapping[str, Any],
) -> Template | None:
    """A read process's template (its build time and its forecast map slots too) of a pending operation's answer to
    ``get_operation`` with ``parameters``, from its map ``attributes`` (``trees``, ``waiting`` as in
    ``make_template``); None when the format is not templated or ``make_template`` gives none. The scheduler builds
    the map (``OperationCommands.read_map``), the read process's replica makes the template of it."""
    ctx = CommandContext("get_operation", dict(parameters))
    fmt = output_format(ctx.parameters)
    if not templated(fmt):
        return None
    wanted = ctx.list_param("attributes")
    made = make_template(
        attributes,
        trees,
        waiting,
        fmt,
        lambda marked: select_attributes(marked, wanted),
        with_time=True,
        forecast_apart=True,
    )
    return None if made is None else made[0]


def placements_of(
    placement: Sequence[tuple[Any, ...]], orchid: Callable[[str, int], dict[str, Any]]
) -> dict[str, dict[str, Any]]:
    """Per tree where the operation waits in a pool (``placement`` as in ``base_of``), its ``operation_orchid`` at
    the position ``placement`` read (``orchid(tree, position)``)."""
    return {place[0]: orchid(place[0], place[2]) for place in placement if len(place) > 2}
