"""Building blocks shared by every configuration model: resource maps, durations and error translation.

Every model derives from :class:`ConfigModel`. Models of YTsaurus's own configs (``KEEP_UNRECOGNIZED``: pool tree,
pool and operation spec structs) keep an option name they do not know, as YTsaurus's YSON structs do, and
:meth:`ConfigModel.unrecognized_options` lists it for the "unrecognized options" alert, which names the closest
known option (``support.unrecognized_options``); pooltree's own documents refuse such a name with an error naming
the closest known option. YTsaurus options pooltree does not implement are accepted through ``ACCEPTED_EXTRA``
(see ``support.py``), the YTsaurus aliases of an option are accepted (``ALIASES``), and pydantic errors (a bad
value of a known option) become one :class:`~pooltree.errors.ConfigError` whose path names the offending option.
Options the user set explicitly (directly or through a preset) are in ``model_fields_set``, so inheriting
components can tell "unset" from "set to the default".
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from typing import Annotated, Any, ClassVar, Self

import numpy as np
from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError, model_validator
from pydantic_core import PydanticCustomError, core_schema

from pooltree.config.support import closest_option, unknown_option_reason
from pooltree.config.tags import TagFilter
from pooltree.errors import ConfigError, join_path
from pooltree.resources import (
    RESOURCE_ALIASES,
    RESOURCES,
    Vector,
    parse_duration,
    parse_resources,
    parse_size,
    resources_to_dict,
    specified_keys,
)

_CONFIG_ERROR = "pooltree_config"


def as_validation_error(error: ConfigError) -> PydanticCustomError:
    """Carry a ConfigError raised inside a validator through pydantic, keeping its sub-path."""
    return invalid(error.reason, error.path)


def invalid(reason: str, subpath: str = "") -> PydanticCustomError:
    """A validator error with a reason and a path relative to the field (or model) being validated."""
    return PydanticCustomError(_CONFIG_ERROR, "{reason}", {"reason": reason, "subpath": subpath})


class Resources:
    """An immutable resource map: the vector plus which resources were written explicitly.

    ``vector`` is a read-only numpy array in the order of :data:`pooltree.resources.RESOURCES`; resources the
    map leaves out hold ``missing`` (0 for guarantees and usage, ``inf`` for limits). ``specified`` keeps the
    canonical names given in the input, which guarantee validation needs ("a child may guarantee only what
    its parent guarantees") and which the fair-share update needs for implicit guarantees.
    """

    __slots__ = ("_specified", "_vector", "missing")

    def __init__(self, vector: Vector, specified: frozenset[str], missing: float):
        array = np.array(vector, dtype=float)
        array.setflags(write=False)
        self._vector = array
        self._specified = frozenset(specified)
        self.missing = float(missing)

    @classmethod
    def parse(cls, value: Any, path: str = "", *, missing: float = 0.0) -> Resources:
        """Parse a YTsaurus resource map (``memory`` accepts sizes; ``user_memory`` is an alias)."""
        if isinstance(value, Resources):
            value = value.to_dict()
        return cls(parse_resources(value, path, missing=missing), specified_keys(value), missing)

    @classmethod
    def zero(cls) -> Resources:
        return cls(np.zeros(len(RESOURCES)), frozenset(), 0.0)

    @classmethod
    def unlimited(cls) -> Resources:
        return cls(np.full(len(RESOURCES), math.inf), frozenset(), math.inf)

    @property
    def vector(self) -> Vector:
        """The read-only five-component vector (copy it before changing it)."""
        return self._vector

    @property
    def specified(self) -> frozenset[str]:
        """Canonical names of the resources written in the input map."""
        return self._specified

    def is_specified(self, name: str) -> bool:
        return RESOURCE_ALIASES.get(name, name) in self._specified

    def __getitem__(self, name: str) -> float:
        return float(self._vector[RESOURCES.index(RESOURCE_ALIASES.get(name, name))])

    def __iter__(self) -> Iterator[str]:
        return iter(RESOURCES)

    def items(self) -> Iterator[tuple[str, float]]:
        return ((name, float(self._vector[index])) for index, name in enumerate(RESOURCES))

    def to_dict(self, *, only_specified: bool = True) -> dict[str, float | int]:
        """The map as written (only specified resources by default), cpu as float, the rest as integers."""
        full = resources_to_dict(self._vector)
        if not only_specified:
            return full
        return {name: full[name] for name in RESOURCES if name in self._specified}

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Resources):
            return NotImplemented
        return (
            self._specified == other._specified
            and self.missing == other.missing
            and bool(np.array_equal(self._vector, other._vector))
        )

    def __hash__(self) -> int:
        return hash((self._specified, self.missing, tuple(self._vector.tolist())))

    def __repr__(self) -> str:
        return f"Resources({self.to_dict()!r})"

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> core_schema.CoreSchema:
        return core_schema.no_info_plain_validator_function(
            lambda value: value if isinstance(value, Resources) else cls.parse(value),
            serialization=core_schema.plain_serializer_function_ser_schema(lambda value: value.to_dict()),
        )


def _resources_validator(missing: float) -> BeforeValidator:
    def validate(value: Any) -> Resources:
        if isinstance(value, Resources):
            return value
        try:
            return Resources.parse(value, "", missing=missing)
        except ConfigError as error:
            raise as_validation_error(error) from None

    return BeforeValidator(validate)


def _scalar_validator(parser: Any, kind: str) -> BeforeValidator:
    def validate(value: Any) -> Any:
        try:
            return parser(value, "")
        except ConfigError as error:
            raise as_validation_error(error) from None

    validate.__name__ = f"parse_{kind}"
    return BeforeValidator(validate)


GuaranteeResources = Annotated[Resources, _resources_validator(0.0)]
"""A resource map where unset resources are 0 (guarantees, usage, thresholds-as-written)."""

LimitResources = Annotated[Resources, _resources_validator(math.inf)]
"""A resource map where unset resources are unlimited (``inf``)."""

Duration = Annotated[float, _scalar_validator(parse_duration, "duration")]
"""Seconds; input is YTsaurus integer milliseconds or a string with a unit (``30s``, ``5m``)."""

Size = Annotated[float, _scalar_validator(parse_size, "size")]
"""Bytes; input is an integer or a string with a binary suffix (``512Mi``)."""


def _parse_tag_filter_text(value: Any, path: str) -> str:
    if value is None:
        return ""
    return TagFilter.parse(value, path).text


TagFilterText = Annotated[str, _scalar_validator(_parse_tag_filter_text, "tag_filter")]
"""A ``node_tag_filter`` / ``scheduling_tag_filter`` formula, checked on input, stored as text."""


def config_error_from_validation(error: ValidationError, path: str) -> ConfigError:
    """Turn a pydantic ValidationError into a ConfigError naming the first offending field."""
    details = error.errors(include_url=False)
    reasons: list[dict[str, str]] = []
    for detail in details:
        field_path = path
        for part in detail["loc"]:
            if (isinstance(part, str) and part.startswith("function-")) or part == "model_validator":
                continue
            field_path = join_path(field_path, part)
        ctx = detail.get("ctx") or {}
        if detail["type"] == _CONFIG_ERROR:
            reason = str(ctx.get("reason"))
            if ctx.get("subpath"):
                field_path = join_path(field_path, str(ctx["subpath"]))
        elif detail["type"] == "extra_forbidden":
            reason = f"unknown option {detail['loc'][-1]!r}" if detail["loc"] else "unknown option"
        elif detail["type"] == "missing":
            reason = "required option is missing"
        else:
            reason = str(detail["msg"])
            if reason.startswith("Value error, "):
                reason = reason[len("Value error, ") :]
        reasons.append({"path": field_path, "reason": reason})
    first = reasons[0]
    return ConfigError(first["path"], first["reason"], attributes={"errors": reasons})


class ConfigModel(BaseModel):
    """Base of the configuration models: strict about unknown options, tolerant of YTsaurus aliases."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=False)

    ALIASES: ClassVar[Mapping[str, str]] = {}
    """Old or alternative YTsaurus option names → canonical field name."""

    ACCEPTED_EXTRA: ClassVar[frozenset[str]] = frozenset()
    """YTsaurus options accepted without a field (kept in ``model_extra``; needs ``extra="allow"``)."""

    KEEP_UNRECOGNIZED: ClassVar[bool] = False
    """A model of a YTsaurus config struct: an unknown option name is kept (``model_extra``; needs
    ``extra="allow"``) and reported by :meth:`unrecognized_options` instead of refused, as YTsaurus does."""

    @model_validator(mode="before")
    @classmethod
    def _apply_aliases(cls, data: Any) -> Any:
        if isinstance(data, BaseModel):
            return data
        if data is None:
            return {}
        if not isinstance(data, Mapping):
            raise ValueError(f"expected a map of options, got {type(data).__name__}")
        result: dict[str, Any] = {}
        written_as: dict[str, str] = {}
        for key, value in data.items():
            if not isinstance(key, str):
                raise ValueError(f"option names must be strings, got {key!r}")
            canonical = cls.ALIASES.get(key, key)
            if canonical in result:
                raise invalid(
                    f"option {canonical!r} is given twice (as {written_as[canonical]!r} and {key!r})", key
                )
            result[canonical] = value
            written_as[canonical] = key
        if not cls.KEEP_UNRECOGNIZED and (cls.model_config.get("extra") != "allow" or cls.ACCEPTED_EXTRA):
            known = set(cls.model_fields) | cls.ACCEPTED_EXTRA
            for key in result:
                if key not in known:
                    raise invalid(
                        unknown_option_reason(written_as[key], known | set(cls.ALIASES)), written_as[key]
                    )
        return result

    @classmethod
    def parse(cls, data: Any, path: str = "") -> Self:
        """Validate ``data`` (a plain map) into the model; errors are ConfigError with ``path`` as prefix."""
        try:
            return cls.model_validate(data)
        except ValidationError as error:
            raise config_error_from_validation(error, path) from None

    @classmethod
    def known_options(cls) -> frozenset[str]:
        """Every option name this model knows: its fields, their YTsaurus aliases and ``ACCEPTED_EXTRA``."""
        extra = cls.ACCEPTED_EXTRA | getattr(cls, "KNOWN_EXTRA", frozenset())
        return frozenset(cls.model_fields) | frozenset(cls.ALIASES) | extra

    def unrecognized_options(self, path: str = "") -> list[tuple[str, str, str | None]]:
        """Option names set in the input that this model (or a nested model) does not know, as
        ``(path, name, closest known option or None)``, in input order, nested models after the model's own."""
        found: list[tuple[str, str, str | None]] = []
        known = type(self).known_options()
        for name in self.model_extra or {}:
            if name not in known:
                found.append((join_path(path, name), name, closest_option(name, known)))
        for name in type(self).model_fields:
            value = getattr(self, name)
            if isinstance(value, ConfigModel):
                found.extend(value.unrecognized_options(join_path(path, name)))
            elif isinstance(value, Mapping):
                for key, item in value.items():
                    if isinstance(item, ConfigModel):
                        found.extend(item.unrecognized_options(join_path(join_path(path, name), str(key))))
        return found

    def explicit(self, name: str) -> bool:
        """Whether option ``name`` was set in the input (or by a preset) rather than defaulted."""
        return name in self.model_fields_set

    def to_document(self) -> dict[str, Any]:
        """The explicitly set options as a plain document (resource maps as written, durations in seconds)."""
        return self.model_dump(mode="python", exclude_unset=True)


def check_option_map(raw: Any, path: str, known: Iterable[str]) -> Mapping[str, Any]:
    """A nested option map kept raw in extras (YTsaurus's sub-configs): a map whose keys are all ``known``."""
    if not isinstance(raw, Mapping):
        raise ConfigError(path, f"expected a map, got {type(raw).__name__}")
    names = set(known)
    for key in raw:
        if key not in names:
            raise ConfigError(join_path(path, str(key)), f"unknown option; expected one of {sorted(names)}")
    return raw


def raw_extras(config: Any) -> Mapping[str, Any]:
    """The options a config keeps raw (a pydantic model's extras), or the map itself when given a plain map."""
    if isinstance(config, Mapping):
        return config
    return getattr(config, "model_extra", None) or {}


def option_flag(raw: Mapping[str, Any], name: str, path: str, default: bool = False) -> bool:
    """Boolean option ``name`` of a raw option map (``default`` when absent); a ``ConfigError`` names a non-boolean."""
    value = raw.get(name, default)
    if not isinstance(value, bool):
        raise ConfigError(join_path(path, name), f"expected a boolean, got {value!r}")
    return value
