"""Input documents: YAML, JSON and YSON files as plain Python values, and Cypress dumps of ``//sys/pool_trees``.

Plain values are dict / list / str / int / float / bool / None (a YSON entity ``#`` is None). A YSON value
that carries attributes becomes ``{"$attributes": {...}, "$value": ...}``, the same shape YTsaurus uses in JSON,
so Cypress dumps look alike in both formats. Duplicate map keys are errors in every format (YAML and JSON
would silently keep the last one, hiding a duplicated pool).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
import yt.yson as yson

from pooltree.errors import ConfigError, join_path

DocumentFormat = Literal["yaml", "json", "yson"]
FORMATS_BY_SUFFIX: dict[str, DocumentFormat] = {
    ".yaml": "yaml",
    ".yml": "yaml",
    ".json": "json",
    ".yson": "yson",
}
ATTRIBUTES_KEY = "$attributes"
VALUE_KEY = "$value"

# Cypress system attributes a full attribute dump of a pool node may carry; they are not pool options.
CYPRESS_SYSTEM_ATTRIBUTES = frozenset(
    {
        "id",
        "type",
        "name",
        "path",
        "key",
        "parent_id",
        "parent_name",
        "pool_tree",
        "full_path",
        "creation_time",
        "modification_time",
        "access_time",
        "access_counter",
        "revision",
        "attribute_revision",
        "content_revision",
        "ref_counter",
        "builtin",
        "account",
        "owner",
        "acl",
        "inherit_acl",
        "effective_acl",
        "resource_usage",
        "child_count",
        "annotation",
        "annotation_path",
    }
)


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate keys in a mapping."""


def _construct_unique_mapping(
    loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False
) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    result: dict[Any, Any] = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in result:
            mark = key_node.start_mark
            raise ConfigError("", f"duplicate key {key!r} at line {mark.line + 1}, column {mark.column + 1}")
        result[key] = loader.construct_object(value_node, deep=deep)
    return result


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_unique_mapping)
# Keep YAML timestamps as strings: documents stay plain (JSON/YSON have no time type), times parse later.
_UniqueKeyLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _unique_json_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ConfigError("", f"duplicate key {key!r}")
        result[key] = value
    return result


def from_yson(value: Any) -> Any:
    """Convert parsed YSON (``yt.yson`` types) to plain Python; attributed values become ``$attributes``/``$value``."""
    attributes = getattr(value, "attributes", None) if hasattr(value, "has_attributes") else None
    if isinstance(value, yson.YsonEntity) or value is None:
        plain: Any = None
    elif isinstance(value, yson.YsonBoolean | bool):
        plain = bool(value)
    elif isinstance(value, int):
        plain = int(value)
    elif isinstance(value, float):
        plain = float(value)
    elif isinstance(value, bytes):
        try:
            plain = value.decode("utf-8")
        except UnicodeDecodeError:
            plain = value.decode("latin-1")
    elif isinstance(value, str):
        plain = str(value)
    elif isinstance(value, Mapping):
        plain = {}
        for key, item in value.items():
            name = from_yson(key)
            if name in plain:
                raise ConfigError("", f"duplicate key {name!r}")
            plain[name] = from_yson(item)
    elif isinstance(value, list | tuple):
        plain = [from_yson(item) for item in value]
    else:
        raise ConfigError("", f"unsupported YSON value of type {type(value).__name__}")
    if attributes:
        return {ATTRIBUTES_KEY: from_yson(dict(attributes)), VALUE_KEY: plain}
    return plain


def loads_document(text: str | bytes, format: DocumentFormat, *, source: str = "<document>") -> Any:
    """Parse a document from text; errors are ConfigError naming ``source`` (and line/column when known)."""
    try:
        if format == "yaml":
            return yaml.load(text, Loader=_UniqueKeyLoader)
        if format == "json":
            return json.loads(text, object_pairs_hook=_unique_json_pairs)
        if format == "yson":
            data = text.encode("utf-8") if isinstance(text, str) else text
            if not data.strip():
                return None
            return from_yson(yson.loads(data))
    except ConfigError as error:
        raise ConfigError(source, f"invalid {format.upper()}: {error.reason}") from None
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise ConfigError(source, f"invalid YAML{where}: {error.problem or error}") from None
    except yaml.YAMLError as error:
        raise ConfigError(source, f"invalid YAML: {error}") from None
    except json.JSONDecodeError as error:
        raise ConfigError(
            source, f"invalid JSON at line {error.lineno}, column {error.colno}: {error.msg}"
        ) from None
    except UnicodeDecodeError as error:
        raise ConfigError(source, f"invalid {format.upper()}: not UTF-8 text ({error.reason})") from None
    except Exception as error:  # yt.yson raises YsonError (a YtError) and sometimes plain Python errors
        message = getattr(error, "message", None) or str(error)
        raise ConfigError(source, f"invalid YSON: {message}") from None
    raise ConfigError(source, f"unknown document format {format!r}; use yaml, json or yson")


def format_of(path: str | Path) -> DocumentFormat:
    """The document format from a file extension (.yaml/.yml, .json, .yson)."""
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS_BY_SUFFIX:
        raise ConfigError(str(path), f"unknown file extension {suffix!r}; use .yaml, .yml, .json or .yson")
    return FORMATS_BY_SUFFIX[suffix]


def load_document(path: str | Path) -> Any:
    """Read and parse a YAML/JSON/YSON file chosen by extension; errors name the file."""
    document_format = format_of(path)
    try:
        data = Path(path).read_bytes()
    except OSError as error:
        raise ConfigError(str(path), f"cannot read file: {error.strerror or error}") from None
    return loads_document(data, document_format, source=str(path))


def split_attributes(node: Any) -> tuple[dict[str, Any], Any]:
    """``({attributes}, value)`` of a possibly attributed node (``$attributes``/``$value`` form)."""
    if isinstance(node, Mapping) and ATTRIBUTES_KEY in node:
        attributes = node[ATTRIBUTES_KEY] or {}
        return dict(attributes), node.get(VALUE_KEY)
    return {}, node


def _pool_from_cypress(node: Any, path: str) -> dict[str, Any]:
    attributes, value = split_attributes(node)
    pool = {key: item for key, item in attributes.items() if key not in CYPRESS_SYSTEM_ATTRIBUTES}
    if value is None:
        return pool
    if not isinstance(value, Mapping):
        raise ConfigError(path, f"a pool node must be a map of child pools, got {type(value).__name__}")
    children = {name: _pool_from_cypress(child, join_path(path, str(name))) for name, child in value.items()}
    if children:
        pool["pools"] = children
    return pool


def cypress_dump_to_pool_trees(document: Any, path: str = "//sys/pool_trees") -> dict[str, Any]:
    """Convert a ``yt get //sys/pool_trees`` dump (pool options as node attributes) into the nested form.

    Tree nodes carry the tree config in their ``config`` attribute; pool nodes carry pool options as
    attributes and child pools as map entries. Cypress system attributes (id, type, ...) are dropped.
    Accepts plain documents (``$attributes``/``$value``) or values straight from ``yt.yson``.
    """
    if isinstance(document, yson.YsonType):
        document = from_yson(document)
    _, trees = split_attributes(document)
    if trees is None:
        return {}
    if not isinstance(trees, Mapping):
        raise ConfigError(path, f"expected a map of pool trees, got {type(trees).__name__}")
    result: dict[str, Any] = {}
    for name, node in trees.items():
        tree_path = f"{path}/{name}"
        attributes, pools = split_attributes(node)
        if pools is not None and not isinstance(pools, Mapping):
            raise ConfigError(
                tree_path, f"a pool tree node must be a map of pools, got {type(pools).__name__}"
            )
        tree: dict[str, Any] = {}
        if attributes.get("config") is not None:
            tree["config"] = attributes["config"]
        tree["pools"] = {
            pool: _pool_from_cypress(child, f"{tree_path}/{pool}") for pool, child in (pools or {}).items()
        }
        result[str(name)] = tree
    return result


def cypress_default_tree(document: Any) -> str | None:
    """The ``default_tree`` attribute of a ``//sys/pool_trees`` dump, if present."""
    if isinstance(document, yson.YsonType):
        document = from_yson(document)
    if isinstance(document, yson.YsonType):
        document = from_yson(document)
    attributes, _ = split_attributes(document)
    value = attributes.get("default_tree")
    return None if value is None else str(value)
