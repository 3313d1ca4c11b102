"""The command registry: what ``GET /api/v4`` advertises and what routing serves, and a handler's context.

``create_app`` (``server/app.py``) routes requests to the handlers registered here; the layers that add commands
(operations, files, batch, Cypress, security) import only this module, never the app.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from pooltree.errors import PooltreeError
from pooltree.security.policy import RULES, Rule
from pooltree.server.protocol import Format, YtError, parameter_error, parse_format, strip_attributes


@dataclass(frozen=True)
class Deferred:
    """A command's answer still being computed off the command threads (a dry run's forecast in the forecast
    worker): the dispatcher waits for ``future`` on the event loop, up to ``timeout`` seconds, without holding a
    command thread, then ``finish(future)`` (on the loop: cheap, no lock) is the answer. A deferred answer is not
    remembered for retries of its mutation id (only answers that change nothing are deferred)."""

    future: concurrent.futures.Future[Any]
    finish: Callable[[concurrent.futures.Future[Any]], Any]
    timeout: float


DATA_TYPES = ("null", "structured", "binary", "tabular")
_MISSING: Any = object()


@dataclass(frozen=True)
class Encoded:
    """A structured result already encoded in the requested output format (handlers that cache their answer)."""

    data: bytes
    content_type: str


def output_format(params: Mapping[str, Any]) -> Format:
    """The structured output format a request asks for (``output_format``, JSON by default)."""
    if "output_format" in params:
        return parse_format(params["output_format"], "output_format")
    return Format("json")


@dataclass(frozen=True)
class CommandDescriptor:
    """One advertised command, exactly as ``GET /api/v4`` lists it."""

    name: str
    input_type: str = "null"
    output_type: str = "structured"
    is_volatile: bool = False
    is_heavy: bool = False
    saves_mutation: bool = False
    """The handler saves the ``mutation_id`` in the commit of its own change (``start_operation``): the pipeline
    does not write the answer a second time."""
    rule: Rule | None = field(default=None, compare=False, repr=False)
    """Who may run it (``pooltree.security.policy``); the registry refuses a command without one."""

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "input_type": self.input_type,
            "output_type": self.output_type,
            "is_volatile": self.is_volatile,
            "is_heavy": self.is_heavy,
        }

    @property
    def method(self) -> str:
        """The HTTP method the official client uses for this command."""
        if self.input_type != "null":
            return "PUT"
        return "POST" if self.is_volatile else "GET"


@dataclass
class CommandContext:
    """Everything a command handler gets: decoded parameters, decoded input, the user."""

    name: str
    parameters: dict[str, Any]
    input: Any = None
    user: str = "root"
    headers: Mapping[str, str] = field(default_factory=dict)
    request_id: str = ""

    def param(self, name: str, default: Any = _MISSING) -> Any:
        """A parameter value; a missing required one is a YT error naming it."""
        if name in self.parameters and self.parameters[name] is not None:
            return self.parameters[name]
        if default is _MISSING:
            raise YtError(f"Missing required parameter {name!r}", attributes={"parameter": name})
        return default

    def str_param(self, name: str, default: Any = _MISSING) -> Any:
        value = self.param(name, default)
        if value is not default and not isinstance(value, str):
            raise parameter_error(name, f"expected a string, got {type(value).__name__}")
        return value

    def bool_param(self, name: str, default: bool = False) -> bool:
        value = self.param(name, default)
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "1", "0"):
            return value.lower() in ("true", "1")
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        raise parameter_error(name, f"expected a boolean, got {value!r}")

    def int_param(self, name: str, default: Any = _MISSING) -> Any:
        value = self.param(name, default)
        if value is default:
            return value
        if isinstance(value, str):
            try:
                value = int(value)
            except ValueError as error:
                raise parameter_error(name, f"expected an integer, got {value!r}") from error
        if isinstance(value, bool) or not isinstance(value, int):
            raise parameter_error(name, f"expected an integer, got {value!r}")
        return value

    def list_param(self, name: str, default: Any = None) -> Any:
        value = self.param(name, default)
        if value is default:
            return value
        if not isinstance(value, list) or not all(isinstance(strip_attributes(v), str) for v in value):
            raise parameter_error(name, "expected a list of strings")
        return [strip_attributes(v) for v in value]


Handler = Callable[[CommandContext], Any]


def _no_rule(name: str) -> PooltreeError:
    return PooltreeError(
        f"command {name!r} has no authorization rule: add one to pooltree.security.policy.RULES (or pass "
        "rule=...); a command without a rule is never served",
        attributes={"command": name},
    )


class CommandRegistry:
    """Commands by name: what discovery advertises is exactly what routing serves, and only commands with an
    authorization rule (``rules``, ``pooltree.security.policy.RULES`` by default, or the one given to
    ``register``) are registered: deny by default."""

    def __init__(self, rules: Mapping[str, Rule] = RULES) -> None:
        self.rules = rules
        self._commands: dict[str, tuple[CommandDescriptor, Handler]] = {}
        self._fast: dict[str, Callable[[CommandContext], Any]] = {}
        self._yielding: set[str] = set()
        """Commands whose fast path lets the cheaper ones waiting on the event loop go first (``register``)."""
        self._endpoints: dict[str, tuple[str, Handler]] = {}
        self._resolvers: dict[str, Callable[[dict[str, Any]], None]] = {}

    def register_resolver(self, parameter: str, resolver: Callable[[dict[str, Any]], None]) -> None:
        """``resolver(parameters)`` runs on a command's parameters that name ``parameter``, before the command is
        authorized (an operation alias becomes its operation id), so the rule and the handler read the same
        names. It may block (read the store): such commands skip their fast path."""
        self._resolvers[parameter] = resolver

    def resolves(self, parameters: dict[str, Any]) -> bool:
        """Whether ``parameters`` name anything a resolver rewrites."""
        return any(name in parameters for name in self._resolvers)

    def resolve(self, parameters: dict[str, Any]) -> None:
        """The resolvers of the names ``parameters`` hold (in place); a resolver's ``YtError`` refuses the command."""
        for name, resolver in self._resolvers.items():
            if name in parameters:
                resolver(parameters)

    def register(
        self,
        name: str,
        handler: Handler,
        *,
        input_type: str = "null",
        output_type: str = "structured",
        is_volatile: bool = False,
        is_heavy: bool = False,
        replace: bool = False,
        fast: Callable[[CommandContext], Any] | None = None,
        fast_yields: bool = False,
        saves_mutation: bool = False,
        rule: Rule | None = None,
    ) -> CommandDescriptor:
        """Add a command; ``replace`` allows overriding an existing one on purpose. ``rule`` (else the table's
        rule for ``name``) authorizes it; a command without one is refused here, so it is never served.

        ``fast(ctx)`` runs on the event loop before ``handler`` goes to the threadpool: it must never block (no
        locks waited for, no I/O) and returns the result, or None to fall back to ``handler``. ``fast_yields``: the
        fast path costs the loop more than the others' (a listing): it lets the other fast reads already waiting
        on the loop go first (``YtApi.after_cheaper_reads``).
        """
        for what, value in (("input_type", input_type), ("output_type", output_type)):
            if value not in DATA_TYPES:
                raise PooltreeError(
                    f"{what} of command {name!r} must be one of {', '.join(DATA_TYPES)}, got {value!r}"
                )
        if not name or not name.replace("_", "").isalnum():
            raise PooltreeError(f"command name must be letters, digits and underscores, got {name!r}")
        if name in self._commands and not replace:
            raise PooltreeError(f"command {name!r} is already registered")
        rule = rule if rule is not None else self.rules.get(name)
        if rule is None:
            raise _no_rule(name)
        descriptor = CommandDescriptor(
            name, input_type, output_type, is_volatile, is_heavy, saves_mutation, rule
        )
        self._commands[name] = (descriptor, handler)
        if fast is not None:
            self._fast[name] = fast
        else:
            self._fast.pop(name, None)
        if fast is not None and fast_yields:
            self._yielding.add(name)
        else:
            self._yielding.discard(name)
        return descriptor

    def register_endpoint(self, path: str, name: str, handler: Handler) -> None:
        """An HTTP path outside ``/api/v4`` that the proxy serves (``/auth/whoami``), answered as JSON.

        It is not a command (discovery does not list it) but passes the same pipeline: the caller is
        authenticated, then ``Security.authorize(name, ...)`` decides, so ``name`` needs a rule like any command.
        """
        if not path.startswith("/") or path.startswith("/api"):
            raise PooltreeError(f"endpoint path must start with / and lie outside /api, got {path!r}")
        if path in self._endpoints or name in self._commands:
            raise PooltreeError(f"endpoint {path!r} ({name!r}) is already registered")
        if name not in self.rules:
            raise _no_rule(name)
        self._endpoints[path] = (name, handler)

    def endpoints(self) -> dict[str, tuple[str, Handler]]:
        """``{path: (name, handler)}`` of the endpoints outside ``/api/v4``."""
        return dict(self._endpoints)

    def fast_handler(self, name: str) -> Callable[[CommandContext], Any] | None:
        return self._fast.get(name)

    def fast_yields(self, name: str) -> bool:
        """Whether ``name``'s fast path lets the cheaper fast reads waiting on the event loop go first."""
        return name in self._yielding

    def lookup(self, name: str) -> tuple[CommandDescriptor, Handler] | None:
        return self._commands.get(name)

    def descriptors(self) -> list[CommandDescriptor]:
        return [
            descriptor for descriptor, _ in sorted(self._commands.values(), key=lambda item: item[0].name)
        ]

    def __contains__(self, name: object) -> bool:
        return name in self._commands


class CommandProvider(Protocol):
    """A later layer (operations, jobs, transactions) that adds its commands to the registry."""

    def register_commands(self, registry: CommandRegistry) -> None: ...
