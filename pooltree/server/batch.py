"""``execute_batch`` and the answer to commands pooltree does not serve.

The official client batches reads and writes (``yt.wrapper.create_batch_client``, and internally before
operations and uploads): ``execute_batch(requests=[{command, parameters, input}])`` answers
``{"results": [{"output": ...} | {"error": ...}]}`` in request order. Each request runs through the same handler
as a single command; one failing request does not fail the others. Commands with binary or tabular data cannot be
batched (as in YTsaurus). A request with a mutation id runs once, as a single command does: a batch retried with the
same ids answers the saved answers of its requests (``run_mutation``) instead of applying them again.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import logging
from collections.abc import Callable
from typing import Any

from pooltree.errors import PooltreeError
from pooltree.security.policy import UNSUPPORTED as UNSUPPORTED_RULE
from pooltree.server.commands import (
    CommandContext,
    CommandDescriptor,
    CommandRegistry,
    Deferred,
    Encoded,
    Handler,
)
from pooltree.server.protocol import YtError, error_to_dict, parameter_error

log = logging.getLogger(__name__)

MAX_BATCH_SIZE = 1000
MUTATION_WAIT = 30.0
"""Seconds a request waits for a request with its mutation id still running (the batch holds its own meanwhile)."""
UNSUPPORTED = (
    "pooltree is a scheduler: it runs vanilla operations (yt vanilla, run_operation with a VanillaSpecBuilder) and "
    "serves Cypress nodes, files, transactions, pool trees, operations and jobs; table I/O and map, reduce, sort, "
    "merge and other data-processing operations are not available"
)


UNSUPPORTED_COMMANDS = (
    "read_table",
    "write_table",
    "read_blob_table",
    "lookup_rows",
    "select_rows",
    "insert_rows",
    "delete_rows",
    "lock_rows",
    "mount_table",
    "unmount_table",
    "remount_table",
    "reshard_table",
    "alter_table",
    "concatenate",
    "partition_tables",
    "get_table_columnar_statistics",
)
"""Data commands the client sends without checking discovery first in some paths; advertised so that they reach
the server and get the clear answer instead of the client's bare "not supported by api/v4"."""


def unsupported_command(name: str) -> YtError:
    """The one error for a command pooltree does not serve (``GET /api/v4`` lists those it does)."""
    return YtError(
        f'Command "{name}" is not supported: {UNSUPPORTED} (GET /api/v4 lists the supported commands)',
        attributes={"command": name},
    )


def register_unsupported_commands(registry: CommandRegistry) -> None:
    """``UNSUPPORTED_COMMANDS``, each answering ``unsupported_command``."""

    def refuse(ctx: CommandContext) -> Any:
        raise unsupported_command(ctx.name)

    for name in UNSUPPORTED_COMMANDS:
        if name not in registry:
            tabular = name in ("read_table", "write_table", "read_blob_table", "select_rows", "lookup_rows")
            registry.register(
                name,
                refuse,
                input_type="tabular"
                if name in ("write_table", "insert_rows", "delete_rows", "lookup_rows")
                else "null",
                output_type="tabular" if tabular and name != "write_table" else "null",
                is_volatile=name not in ("read_table", "read_blob_table", "select_rows", "lookup_rows"),
                is_heavy=tabular,
                rule=UNSUPPORTED_RULE,
            )


def batched_request(
    registry: CommandRegistry, index: int, request: Any
) -> tuple[str, CommandDescriptor, Handler, dict[str, Any]]:
    """Request ``index`` of a batch checked: its command's name, descriptor and handler, and its parameters
    without output and input formats (the batch's own answer is one map)."""
    if not isinstance(request, dict):
        raise YtError(f"Batch request {index} must be a map of command, parameters and input")
    name = request.get("command")
    if not isinstance(name, str):
        raise YtError(f'Batch request {index} needs a "command" string', attributes={"index": index})
    found = registry.lookup(name)
    if found is None or name == "execute_batch":
        raise (unsupported_command(name) if found is None else YtError("execute_batch cannot be nested"))
    descriptor, handler = found
    if descriptor.input_type in ("binary", "tabular") or descriptor.output_type in (
        "binary",
        "tabular",
    ):
        raise YtError(
            f'Command "{name}" moves {descriptor.input_type if descriptor.input_type != "null" else descriptor.output_type} '
            "data and cannot be batched; send it on its own",
            attributes={"command": name},
        )
    parameters = request.get("parameters") or {}
    if not isinstance(parameters, dict):
        raise YtError(f'"parameters" of batch request {index} must be a map', attributes={"index": index})
    return (
        name,
        descriptor,
        handler,
        {k: v for k, v in parameters.items() if k not in ("output_format", "input_format")},
    )


def register_batch_command(
    registry: CommandRegistry,
    *,
    host: str,
    clock: Callable[[], float],
    run_mutation: Callable[..., Any],
    authorize: Callable[[CommandDescriptor, str, dict[str, Any], Any], None],
) -> None:
    """Add ``execute_batch`` over the commands already in ``registry`` (register it last); ``authorize`` checks
    each request by its own command's rule, as if it came on its own, and ``run_mutation`` runs one with a mutation
    id (``YtApi.run_mutation``: once per id, its answer saved)."""

    def run_one(ctx: CommandContext, index: int, request: Any) -> dict[str, Any]:
        try:
            name, descriptor, handler, parameters = batched_request(registry, index, request)
            sub = CommandContext(
                name,
                parameters,
                input=request.get("input"),
                user=ctx.user,
                headers=ctx.headers,
                request_id=f"{ctx.request_id}.{index}",
            )
            authorize(descriptor, ctx.user, parameters, sub.input)
            mutation_id = parameters.get("mutation_id") if descriptor.is_volatile else None
            if mutation_id is None:
                result = handler(sub)
            elif str(mutation_id) == str(ctx.parameters.get("mutation_id")):
                raise YtError(
                    f"Batch request {index} carries the mutation id of the batch itself",
                    attributes={"index": index, "mutation_id": str(mutation_id)},
                )
            else:
                result = run_mutation(descriptor, handler, sub, mutation_id, wait=MUTATION_WAIT)
            if isinstance(result, Deferred):  # inside a batch (already on a command thread): waited for here
                with contextlib.suppress(concurrent.futures.TimeoutError):
                    result.future.result(timeout=result.timeout)
                result = result.finish(result.future)
        except PooltreeError as error:
            return {"error": error_to_dict(error, host=host, now=clock())}
        except Exception as error:
            command = request.get("command") if isinstance(request, dict) else None
            log.exception("batch request %d (%r) failed unexpectedly", index, command)  # never its parameters
            wrapped = YtError(f"Internal error while executing the command: {type(error).__name__}: {error}")
            return {"error": error_to_dict(wrapped, host=host, now=clock())}
        if descriptor.output_type == "null":
            return {}
        if isinstance(result, Encoded):
            result = json.loads(result.data)
        return {"output": result}

    def execute_batch(ctx: CommandContext) -> dict[str, Any]:
        requests = ctx.param("requests")
        if not isinstance(requests, list):
            raise parameter_error("requests", "expected a list of {command; parameters; input} maps")
        if len(requests) > MAX_BATCH_SIZE:
            raise parameter_error("requests", f"at most {MAX_BATCH_SIZE} requests in one batch")
        return {"results": [run_one(ctx, index, request) for index, request in enumerate(requests)]}

    registry.register("execute_batch", execute_batch, is_volatile=True)
