"""What the scheduler's feed (``feed.py``) sends the read process's replica (``replica.py``): plain JSON-able maps,
one ``kind`` each, applied in the order sent.

* ``counter`` ``{value}``: every message before it is applied; the scheduler stamps its answers with the counter
  its next batch will carry (``ReadFeed.stamp``), so a replica at or past an answer's stamp shows what it showed.
* ``security`` ``{authentication, host, document}``: the directory as ``Directory.replica_document`` gives it
  (users, groups and members, token SHA-256s with their users: never a token, password or vault value) and the
  ``X-YT-Proxy`` host the scheduler answers with.
* ``template`` ``{operation, key, map, waits, access}``: a pending operation's map for its ``get_operation`` answer in
  one request shape (``encoding_key``): ``{attributes, trees, waiting, parameters}``, of which the replica makes the
  answer's template (``pending_maps.read_template``: encoded and cut where its queue numbers, build time and
  forecast go) when a get first asks for it (``UnmadeTemplate``: the scheduler only builds the map); or, instead of
  ``map``, the template made (``template``: ``pending_maps.Template``, pieces as Latin-1 text so that any byte
  survives JSON); the pools it waits in per tree, and who may read it (``OperationAccess``: owner, ACEs,
  ``owners``).
* ``queue`` ``{tree, pool, running, max_running, ids, start}``: a pool's pending queue from position ``start``
  (0: the whole queue; else these ids were appended to a queue ``start`` long) and its running counts; ``ids`` None:
  the queue is unknown (its operations are relayed until it is sent whole).
* ``void`` ``{operation}`` or ``{all: true}``: what the replica holds of an operation (or of every operation and
  queue) no longer holds.
* ``forecast`` ``{error, result}``: the forecast the scheduler's maps show now (``OperationCommands.forecast_shown``):
  the last refresh's error, and the latest ``Forecast`` (None before the first): its fields the attribute reads,
  and per operation id its ``(id, OperationForecast)`` pickled, as Latin-1 text (opened on the first get of it). A
  template's ``scheduling_forecast`` is a slot the replica fills from it (``pending_maps.FORECAST``): a new forecast
  voids no template.
"""

from __future__ import annotations

import json
import logging
import pickle
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pooltree.errors import PooltreeError
from pooltree.forecast.run import Forecast, OperationForecast
from pooltree.security.acl import OPERATION_PERMISSIONS, parse_acl
from pooltree.security.guard import OperationAccess
from pooltree.server.pending_maps import Template, read_template

COUNTER = "counter"
SECURITY = "security"
TEMPLATE = "template"
QUEUE = "queue"
VOID = "void"
FORECAST = "forecast"
KINDS = (COUNTER, SECURITY, TEMPLATE, QUEUE, VOID, FORECAST)

log = logging.getLogger(__name__)


class BadMessage(ValueError):
    """A feed message that does not have the shape ``wire.py`` gives (it is not applied)."""


def encoding_key(parameters: Mapping[str, Any]) -> str | None:
    """What a ``get_operation``'s answer is made of besides the operation (its output format and attribute list),
    as text both sides make from the parameters they decoded; None when these are not plain JSON values."""
    try:
        return json.dumps(
            [parameters.get("output_format"), parameters.get("attributes")], sort_keys=True, allow_nan=False
        )
    except (TypeError, ValueError):
        return None


def map_message(
    operation_id: str,
    key: str,
    attributes: Mapping[str, Any],
    trees: Sequence[str],
    waiting: Sequence[str],
    parameters: Mapping[str, Any],
    waits: Sequence[tuple[str, str]],
    access: OperationAccess,
) -> dict[str, Any]:
    """The ``template`` message of a pending operation's map (the replica makes the template: ``UnmadeTemplate``)."""
    return {
        "kind": TEMPLATE,
        "operation": operation_id,
        "key": key,
        "map": {
            "attributes": attributes,
            "trees": list(trees),
            "waiting": list(waiting),
            "parameters": {name: value for name, value in parameters.items() if name != "operation_id"},
        },
        "waits": [list(wait) for wait in waits],
        "access": _access_json(access),
    }


def _access_json(access: OperationAccess) -> dict[str, Any]:
    return {
        "owner": access.owner,
        "acl": [ace.to_json() for ace in access.acl],
        "owners": list(access.owners),
    }


@dataclass(frozen=True)
class UnmadeTemplate:
    """A ``template`` message's map, made into the template when a get first asks for it (``make``): the
    encoding and the cut are the read process's CPU, and only for the operations and shapes gets ask for."""

    attributes: dict[str, Any]
    trees: tuple[str, ...]
    waiting: tuple[str, ...]
    parameters: dict[str, Any]

    def make(self) -> Template | None:
        """The template (``pending_maps.read_template``, as the scheduler would make it); None when none can be
        made of this map (then its gets are relayed)."""
        try:
            return read_template(self.attributes, self.trees, self.waiting, self.parameters)
        except Exception as error:  # a map the scheduler's code does not take: relayed, never a crash
            log.error("read replica: no template of a map: %r", error)
            return None


def unmade_of(raw: Any) -> UnmadeTemplate:
    """The ``UnmadeTemplate`` a ``template`` message's ``map`` carries (``BadMessage`` when it is not one)."""
    if not isinstance(raw, dict):
        raise BadMessage("map: expected a map")
    attributes, parameters = raw.get("attributes"), raw.get("parameters")
    if not isinstance(attributes, dict) or not isinstance(parameters, dict):
        raise BadMessage("map: attributes and parameters are maps")
    return UnmadeTemplate(
        attributes,
        tuple(_strings(raw.get("trees"), "map.trees")),
        tuple(_strings(raw.get("waiting"), "map.waiting")),
        parameters,
    )


def _strings(value: Any, what: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise BadMessage(f"{what}: expected a list of strings")
    return value


def template_of(raw: Any) -> Template:
    """The ``Template`` a ``template`` message carries (``BadMessage`` when it is not one)."""
    if not isinstance(raw, dict):
        raise BadMessage("template: expected a map")
    pieces = _strings(raw.get("pieces"), "template.pieces")
    slots = raw.get("slots")
    fixed = raw.get("fixed_reasons")
    content_type = raw.get("content_type")
    if not isinstance(slots, list) or not isinstance(fixed, list) or not isinstance(content_type, str):
        raise BadMessage("template: slots, fixed_reasons and content_type are required")
    parsed_slots: list[tuple[str | None, str]] = []
    for slot in slots:
        if not (isinstance(slot, list) and len(slot) == 2 and isinstance(slot[1], str)):
            raise BadMessage("template.slots: expected [tree or null, key] pairs")
        if slot[0] is not None and not isinstance(slot[0], str):
            raise BadMessage("template.slots: a tree is a string")
        parsed_slots.append((slot[0], slot[1]))
    parsed_fixed: list[tuple[str, Any]] = []
    for item in fixed:
        if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str)):
            raise BadMessage("template.fixed_reasons: expected [tree, reason] pairs")
        parsed_fixed.append((item[0], item[1]))
    if len(pieces) != len(parsed_slots) + 1:
        raise BadMessage("template: one piece more than slots expected")
    return Template(
        tuple(piece.encode("latin-1") for piece in pieces),
        tuple(parsed_slots),
        tuple(parsed_fixed),
        content_type,
    )


def access_of_message(operation_id: str, raw: Any) -> OperationAccess:
    """The ``OperationAccess`` a ``template`` message carries (its ACL parsed as the scheduler parses one)."""
    if not isinstance(raw, dict) or not isinstance(raw.get("owner"), str):
        raise BadMessage("access: expected a map with the owner")
    try:
        acl = parse_acl(raw.get("acl"), "acl", permissions=OPERATION_PERMISSIONS)
    except PooltreeError as error:
        raise BadMessage(f"access.acl: {error}") from error
    owners = tuple(_strings(raw.get("owners", []), "access.owners"))
    return OperationAccess(operation_id, raw["owner"], acl, owners)


def waits_of(raw: Any) -> tuple[tuple[str, str], ...]:
    if not isinstance(raw, list) or not all(
        isinstance(item, list) and len(item) == 2 and all(isinstance(part, str) for part in item)
        for item in raw
    ):
        raise BadMessage("waits: expected [tree, pool] pairs")
    return tuple((item[0], item[1]) for item in raw)


def forecast_message(
    result: Forecast | None, error: str | None, pickled: Sequence[bytes] | None = None
) -> dict[str, Any]:
    """The ``forecast`` message of ``result`` and ``error``: what ``live_scheduling_forecast`` reads of the forecast
    as a whole, and per operation its ``(id, OperationForecast)`` pickled on its own (``pickled``: those the worker
    sent, in ``result.operations``' order, ``ForecastService.latest_parcel``; else pickled here), as Latin-1 text.
    The replica opens an operation's when a get first asks for it: a forecast of thousands of operations is a few
    thousand strings on the pipe, not tens of thousands of maps for the read process to unpickle and collect
    (``bench/read_feed.py``'s ``forecast``)."""
    data: dict[str, Any] | None = None
    if result is not None:
        if pickled is None or len(pickled) != len(result.operations):
            pickled = [pickle.dumps(item, pickle.HIGHEST_PROTOCOL) for item in result.operations.items()]
        data = {
            "now": result.now,
            "horizon": result.horizon,
            "seeds": result.seeds,
            "simulated": result.simulated,
            "arrivals": result.arrivals,
            "operations": {
                operation_id: entry.decode("latin-1")
                for operation_id, entry in zip(result.operations, pickled, strict=True)
            },
        }
    return {"kind": FORECAST, "error": error, "result": data}


def _number(value: Any, what: str, *, optional: bool = False) -> Any:
    if (value is None and optional) or (isinstance(value, int | float) and not isinstance(value, bool)):
        return value
    raise BadMessage(f"{what}: expected a number")


def forecast_of(raw: Any) -> tuple[Forecast | None, dict[str, str], str | None]:
    """What a ``forecast`` message carries (``BadMessage`` when it is not one): the forecast without its operations
    (the work counters the attribute does not read are 0), its operations' entries unopened (``opened_entry``), the
    last refresh's error."""
    if not isinstance(raw, dict):
        raise BadMessage("forecast: expected a map")
    error, data = raw.get("error"), raw.get("result")
    if error is not None and not isinstance(error, str):
        raise BadMessage("forecast.error: expected a string or null")
    if data is None:
        return None, {}, error
    if not isinstance(data, dict):
        raise BadMessage("forecast.result: expected a map or null")
    entries, arrivals, seeds = data.get("operations"), data.get("arrivals"), data.get("seeds")
    if not isinstance(entries, dict) or not isinstance(arrivals, dict):
        raise BadMessage("forecast.result: operations and arrivals are maps")
    if not all(isinstance(key, str) and isinstance(value, str) for key, value in entries.items()):
        raise BadMessage("forecast.result.operations: expected id -> pickled entry as text")
    if not isinstance(seeds, int) or isinstance(seeds, bool):
        raise BadMessage("forecast.result.seeds: expected an integer")
    head = Forecast(
        now=_number(data.get("now"), "forecast.result.now"),
        horizon=_number(data.get("horizon"), "forecast.result.horizon"),
        seeds=seeds,
        operations={},
        events=0,
        simulated=_number(data.get("simulated"), "forecast.result.simulated", optional=True),
        arrivals=arrivals,
    )
    return head, entries, error


def opened_entry(operation_id: str, entry: str) -> OperationForecast:
    """An operation's forecast from its ``forecast`` message's entry (``BadMessage`` when it is not one: the pickle
    is the scheduler's, from the read process's own parent)."""
    try:
        found = pickle.loads(entry.encode("latin-1"))
    except Exception as error:  # any unpickling failure: the entry is not one the feed made
        raise BadMessage(f"forecast entry of {operation_id}: {error}") from error
    if not (
        isinstance(found, tuple)
        and len(found) == 2
        and found[0] == operation_id
        and isinstance(found[1], OperationForecast)
    ):
        raise BadMessage(f"forecast entry of {operation_id}: not its (id, OperationForecast)")
    return found[1]
