"""Cypress ``file`` nodes, the transactions the client writes them in, the file cache, and files for jobs.

Where contents live: in the store, next to the metadata. A file node's record (``cypress_nodes``) holds its
metadata (``{"chunks": [blob ids], "size": bytes}``); each written piece is one immutable blob in the store's
key-value table (``blob/<id>``, base64). Keeping both in the store means a standby scheduler on the same
PostgreSQL database serves the same files after a failover, operations revived after a restart still find their
files, and one backup holds everything; a data directory would tie files to one machine. A blob is deleted when no
file node refers to it any more (checked after each Cypress mutation).

Transactions (``start_transaction``/``ping``/``commit``/``abort``) are the master's as far as files are concerned:
``write_file`` under a transaction stages the piece in it, a nested commit hands the staged writes to the parent,
the top-level commit applies them to the file nodes at once, an abort (or a missed ping past ``timeout``) drops
them. Other Cypress commands sent under a transaction apply at once (pooltree's Cypress has no branches); nodes a
transaction created are removed when it aborts. Transactions live in the leader's memory: a restart aborts them.

Files for jobs: ``file_paths`` of a task are resolved when the operation starts (``<file_name=..;
executable=%true>`` attributes, else the node's ``@file_name`` / ``@executable``, else its name), the snapshot is
kept with the operation in the store, and each job spec carries the contents, which the node writes into the
sandbox before the command runs (``pooltree/node/files.py``).
"""

from __future__ import annotations

import base64
import copy
import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from pooltree.server import quotas
from pooltree.server.commands import CommandContext, CommandRegistry
from pooltree.server.cypress import Cypress
from pooltree.server.cypress_edits import find, resolve_tokens
from pooltree.server.cypress_nodes import Node, new_id
from pooltree.server.protocol import (
    PARAMETER_ATTRIBUTES,
    RESOLVE_ERROR,
    YtError,
    attributes_of,
    parameter_error,
    strip_attributes,
)
from pooltree.server.store import Store
from pooltree.ypath import join_tokens, parse_ypath

NO_SUCH_TRANSACTION = 11000
NULL_TRANSACTION = "0-0-0-0"
MAX_JOB_FILES_BYTES = 1024**3
"""Files of one task (nodes fetch them once and cache them); more is refused when the operation starts."""
CONTENT_CACHE_BYTES = 64 * 1024 * 1024
DEFAULT_TIMEOUT_MS = 15_000
MAX_TIMEOUT_MS = 24 * 3600 * 1000
BLOB_PREFIX = "blob/"
OPERATION_FILES_PREFIX = "operation_files/"


def _blob_key(blob_id: str) -> str:
    return BLOB_PREFIX + blob_id


def file_metadata(node: Node) -> dict[str, Any]:
    """``{"chunks": [...], "size": n}`` of a file node (empty for a new one)."""
    value = node.value if isinstance(node.value, dict) else {}
    return {"chunks": list(value.get("chunks") or []), "size": int(value.get("size") or 0)}


@dataclass
class StagedWrite:
    path: str
    append: bool
    blob_id: str
    size: int


@dataclass
class Transaction:
    id: str
    parent: str | None
    timeout: float
    last_ping: float
    attributes: dict[str, Any]
    writes: list[StagedWrite] = field(default_factory=list)
    snapshots: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Files snapshot-locked by the transaction: path → the contents' metadata at lock time."""
    created: list[str] = field(default_factory=list)
    children: set[str] = field(default_factory=set)
    owner: str = ""
    """The user who started it: only they (and superusers) may use, ping, commit or abort it."""


def _path_param(value: Any, name: str, ctx: CommandContext | None = None) -> tuple[str, dict[str, Any]]:
    """A YPath parameter as ``(path, attributes)``: ``<append=%true>//tmp/f`` arrives as an attributed value (in a
    batch) or with its attributes kept aside by ``decode_parameters``."""
    attrs = attributes_of(value)
    if not attrs and ctx is not None:
        attrs = dict((ctx.parameters.get(PARAMETER_ATTRIBUTES) or {}).get(name) or {})
    bare = strip_attributes(value)
    if not isinstance(bare, str) or not bare:
        raise parameter_error(name, f"expected a path, got {bare!r}")
    return bare, attrs


class FileService:
    """Files, transactions and the file cache over one ``Cypress`` and its ``Store``."""

    def __init__(self, cypress: Cypress, store: Store, *, clock: Callable[[], float] = time.time) -> None:
        self.cypress = cypress
        self.store = store
        self.clock = clock
        self._lock = threading.Lock()
        self._transactions: dict[str, Transaction] = {}
        self._operation_files: dict[str, dict[str, list[dict[str, Any]]]] = {}
        self._contents: OrderedDict[str, str] = OrderedDict()
        self._contents_bytes = 0
        cypress.blob_released = self._release_blobs

    # ------------------------------------------------------------------ blobs

    def _put_blob(self, data: bytes) -> str:
        blob_id = new_id()
        self.store.set_value(_blob_key(blob_id), base64.b64encode(data).decode("ascii"))
        return blob_id

    def _blob_text(self, blob_id: str) -> str:
        with self._lock:
            cached = self._contents.get(blob_id)
            if cached is not None:
                self._contents.move_to_end(blob_id)
                return cached
        text = self.store.get_value(_blob_key(blob_id))
        if not isinstance(text, str):
            raise YtError(
                f"File content {blob_id} is missing from the store", attributes={"blob_id": blob_id}
            )
        with self._lock:
            if blob_id not in self._contents:
                self._contents[blob_id] = text
                self._contents_bytes += len(text)
                while self._contents_bytes > CONTENT_CACHE_BYTES and len(self._contents) > 1:
                    _, dropped = self._contents.popitem(last=False)
                    self._contents_bytes -= len(dropped)
        return text

    def _blob(self, blob_id: str) -> bytes:
        return base64.b64decode(self._blob_text(blob_id))

    def _release_blobs(self, blob_ids: set[str]) -> None:
        """Blobs no file node refers to any more (called by Cypress after a committed mutation)."""
        staged = {w.blob_id for tx in self._transactions.values() for w in tx.writes}
        staged |= {
            b for tx in self._transactions.values() for meta in tx.snapshots.values() for b in meta["chunks"]
        }
        for blob_id in blob_ids - staged - self.referenced_blobs():
            self.store.delete_value(_blob_key(blob_id))
            with self._lock:
                text = self._contents.pop(blob_id, None)
                if text is not None:
                    self._contents_bytes -= len(text)

    # ------------------------------------------------------------------ transactions

    def _expire(self, now: float) -> None:
        expired = [tx.id for tx in self._transactions.values() if now - tx.last_ping > tx.timeout]
        for tx_id in expired:
            if tx_id in self._transactions:
                self._abort(tx_id)

    def _get(self, tx_id: Any) -> Transaction:
        self._expire(self.clock())
        tx = self._transactions.get(tx_id) if isinstance(tx_id, str) else None
        if tx is None:
            raise YtError(
                f"No such transaction {tx_id}",
                code=NO_SUCH_TRANSACTION,
                attributes={"transaction_id": str(tx_id)},
            )
        return tx

    def start_transaction(self, ctx: CommandContext) -> dict[str, Any]:
        timeout = ctx.int_param("timeout", DEFAULT_TIMEOUT_MS)
        if not 0 < timeout <= MAX_TIMEOUT_MS:
            raise parameter_error("timeout", f"must be between 1 and {MAX_TIMEOUT_MS} milliseconds")
        attributes = ctx.param("attributes", {})
        if not isinstance(attributes, dict):
            raise parameter_error("attributes", "expected a map")
        parent = ctx.param("transaction_id", None)
        if parent == NULL_TRANSACTION:
            parent = None
        with self.cypress.lock:
            parent_tx = self._get(parent) if parent is not None else None
            tx = Transaction(
                new_id(), parent, timeout / 1000.0, self.clock(), dict(attributes), owner=ctx.user
            )
            self._transactions[tx.id] = tx
            if parent_tx is not None:
                parent_tx.children.add(tx.id)
        return {"transaction_id": tx.id}

    def transaction_owner(self, tx_id: str) -> str | None:
        """Who started transaction ``tx_id`` (None when there is no such transaction)."""
        tx = self._transactions.get(tx_id)
        return None if tx is None else tx.owner

    def ping_transaction(self, ctx: CommandContext) -> None:
        with self.cypress.lock:
            tx = self._get(ctx.param("transaction_id"))
            now = self.clock()
            tx.last_ping = now
            if ctx.bool_param("ping_ancestor_transactions"):
                parent = tx.parent
                while parent is not None and parent in self._transactions:
                    self._transactions[parent].last_ping = now
                    parent = self._transactions[parent].parent

    def commit_transaction(self, ctx: CommandContext) -> None:
        with self.cypress.lock:
            tx = self._get(ctx.param("transaction_id"))
            for child in list(tx.children):
                if child in self._transactions:
                    raise YtError(
                        f"Transaction {tx.id} has an active nested transaction {child}",
                        attributes={"transaction_id": tx.id, "nested_transaction_id": child},
                    )
            if tx.parent is not None and tx.parent in self._transactions:
                parent = self._transactions[tx.parent]
                parent.writes.extend(tx.writes)
                parent.created.extend(tx.created)
                parent.children.discard(tx.id)
                del self._transactions[tx.id]
                return
            writes = tx.writes
            del self._transactions[tx.id]
            if writes:
                self._apply(writes)

    def abort_transaction(self, ctx: CommandContext) -> None:
        with self.cypress.lock:
            self._abort(self._get(ctx.param("transaction_id")).id)

    def _abort(self, tx_id: str) -> None:
        tx = self._transactions.pop(tx_id)
        for child in list(tx.children):
            if child in self._transactions:
                self._abort(child)
        if tx.parent in self._transactions:
            self._transactions[tx.parent].children.discard(tx_id)
        for write in tx.writes:
            self.store.delete_value(_blob_key(write.blob_id))
        for path in reversed(tx.created):
            try:
                self.cypress.remove(path, recursive=True, force=True)
            except YtError:
                continue

    def lock(self, ctx: CommandContext) -> dict[str, Any]:
        """``lock`` under a transaction: a file's contents as of now are what the transaction reads afterwards.

        pooltree's Cypress applies every mutation under one lock, so shared and exclusive locks never conflict and
        need no bookkeeping; a snapshot of a file is the part the client relies on (read_file reads under it).
        """
        path, _ = _path_param(ctx.param("path"), "path")
        mode = ctx.str_param("mode", "exclusive")
        if mode not in ("snapshot", "shared", "exclusive"):
            raise parameter_error("mode", "expected snapshot, shared or exclusive")
        with self.cypress.lock:
            tx = self._get(ctx.param("transaction_id"))
            ypath = parse_ypath(path)
            root = self.cypress.root
            node, _ = find(root, resolve_tokens(root, ypath), ypath.text)
            if node is None:
                raise YtError(f"{path} cannot be locked: it is in the orchid", attributes={"path": path})
            if node.type == "file":
                tx.snapshots[ypath.text] = file_metadata(node)
            return {"lock_id": new_id(), "node_id": node.id, "revision": int(node.modification_time * 1e6)}

    # ------------------------------------------------------------------ files

    def _file_node(self, path: str) -> Node:
        ypath = parse_ypath(path)
        root = self.cypress.root
        tokens = resolve_tokens(root, ypath)
        node, _ = find(root, tokens, ypath.text)
        if node is None or node.type != "file":
            kind = "orchid" if node is None else node.type
            raise YtError(
                f"{ypath.text} is not a file (it is a {kind})",
                attributes={"path": ypath.text, "type": kind},
            )
        return node

    def _apply(self, writes: list[StagedWrite]) -> None:
        """Apply writes to their file nodes in one Cypress mutation (all or none)."""

        def change(root: Node, now: float) -> None:
            for write in writes:
                ypath = parse_ypath(write.path)
                tokens = resolve_tokens(root, ypath)
                node, _ = find(root, tokens, ypath.text)
                if node is None or node.type != "file":
                    raise YtError(f"{ypath.text} is not a file", attributes={"path": ypath.text})
                meta = file_metadata(node) if write.append else {"chunks": [], "size": 0}
                meta["chunks"].append(write.blob_id)
                meta["size"] += write.size
                node.value = meta
                node.modification_time = now

        self.cypress.mutate(change)

    def write_file(self, ctx: CommandContext) -> None:
        path, attrs = _path_param(ctx.param("path"), "path", ctx)
        data = ctx.input if isinstance(ctx.input, bytes | bytearray) else b""
        tx_id = ctx.param("transaction_id", None)
        with self.cypress.lock:
            tx = self._get(tx_id) if tx_id is not None and tx_id != NULL_TRANSACTION else None
            self._file_node(path)
            self._check_disk_space(path, len(data))  # before the bytes reach the store
            blob_id = self._put_blob(bytes(data))
            write = StagedWrite(path, bool(attrs.get("append", False)), blob_id, len(data))
            if tx is not None:
                tx.writes.append(write)
                return
            try:
                self._apply([write])
            except Exception:
                self.store.delete_value(_blob_key(blob_id))
                raise

    def _check_disk_space(self, path: str, size: int) -> None:
        """Refuse a write that would take its file's account over its disk space limit (YTsaurus error 902),
        counting the bytes staged in open transactions too (``pooltree.server.quotas``)."""
        root = self.cypress.root
        staged: dict[str, int] = {}
        for tx in self._transactions.values():
            for write in tx.writes:
                try:
                    tokens = resolve_tokens(root, parse_ypath(write.path))
                except YtError:
                    continue
                account = quotas.account_of(root, tokens)
                staged[account] = staged.get(account, 0) + write.size
        tokens = resolve_tokens(root, parse_ypath(path))
        quotas.check_disk_space(root, tokens, size, staged)
        # the disk under the store keeps room for removals; a file's bytes take about three times their size
        # there until the journal is checkpointed (base64 in the store, the journal's copy)
        self.store.check_room_for(3 * size)

    def _contents_of(self, node: Node) -> Iterator[bytes]:
        for blob_id in file_metadata(node)["chunks"]:
            yield self._blob(blob_id)

    def read_file(self, ctx: CommandContext) -> bytes:
        path, _ = _path_param(ctx.param("path"), "path")
        offset = ctx.int_param("offset", 0)
        length = ctx.int_param("length", None)
        if offset < 0 or (length is not None and length < 0):
            raise parameter_error("offset" if offset < 0 else "length", "must be non-negative")
        tx_id = ctx.param("transaction_id", None)
        with self.cypress.lock:
            tx = self._get(tx_id) if tx_id is not None and tx_id != NULL_TRANSACTION else None
            snapshot = tx.snapshots.get(parse_ypath(path).text) if tx is not None else None
            node = copy.deepcopy(self._file_node(path)) if snapshot is None else None
        chunks = snapshot["chunks"] if snapshot is not None else file_metadata(node)["chunks"] if node else []
        data = b"".join(self._blob(blob_id) for blob_id in chunks)
        end = len(data) if length is None else offset + length
        return data[offset:end]

    def md5_of(self, node: Node) -> str:
        digest = hashlib.md5(usedforsecurity=False)
        for piece in self._contents_of(node):
            digest.update(piece)
        return digest.hexdigest()

    # ------------------------------------------------------------------ file cache (put_file_to_cache / get_file_from_cache)

    @staticmethod
    def _cache_entry(cache_path: str, md5: str) -> str:
        return f"{cache_path.rstrip('/')}/{md5[-2:]}/{md5}"

    def get_file_from_cache(self, ctx: CommandContext) -> str:
        md5 = ctx.str_param("md5")
        cache_path = ctx.str_param("cache_path")
        entry = self._cache_entry(cache_path, md5)
        try:
            self._file_node(entry)
        except YtError:
            return ""
        return entry

    def put_file_to_cache(self, ctx: CommandContext) -> str:
        path, _ = _path_param(ctx.param("path"), "path")
        md5 = ctx.str_param("md5")
        cache_path = ctx.str_param("cache_path")
        with self.cypress.lock:
            node = copy.deepcopy(self._file_node(path))
        actual = self.md5_of(node)
        if actual != md5:
            raise YtError(
                f"MD5 mismatch: {path} has MD5 {actual}, not {md5}",
                attributes={"path": path, "expected_md5": md5, "actual_md5": actual},
            )
        entry = self._cache_entry(cache_path, md5)
        meta = file_metadata(node)

        def change(root: Node, now: float) -> None:
            ypath = parse_ypath(entry)
            tokens = ypath.tokens
            parent = root
            for token in tokens[:-1]:
                child = parent.children.get(token)
                if child is None:
                    child = Node(new_id(), "map_node", creation_time=now, modification_time=now)
                    parent.children[token] = child
                    parent.children = dict(sorted(parent.children.items()))
                if child.type != "map_node":
                    raise YtError(f"Cannot put a file into {join_tokens(tokens)}", attributes={"path": entry})
                parent = child
            existing = parent.children.get(tokens[-1])
            if existing is not None and existing.type == "file":
                existing.attributes["touched"] = True
                return
            cached = Node(new_id(), "file", value=meta, creation_time=now, modification_time=now)
            cached.attributes = {"md5": md5, "touched": True}
            parent.children[tokens[-1]] = cached
            parent.children = dict(sorted(parent.children.items()))

        self.cypress.mutate(change)
        return entry

    # ------------------------------------------------------------------ files for jobs

    def snapshot(self, spec: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
        """``file_paths`` of each task resolved to ``{file_name, executable, chunks, size}``; errors name the path."""
        tasks = spec.get("tasks")
        if not isinstance(tasks, dict):
            return {}
        result: dict[str, list[dict[str, Any]]] = {}
        for task, task_spec in tasks.items():
            paths = task_spec.get("file_paths") if isinstance(task_spec, dict) else None
            if not paths:
                continue
            field_path = f"spec.tasks.{task}.file_paths"
            if not isinstance(paths, list):
                raise YtError(f"{field_path} must be a list of file paths", attributes={"field": field_path})
            entries: list[dict[str, Any]] = []
            names: set[str] = set()
            total = 0
            for index, item in enumerate(paths):
                path, attrs = _path_param(item, f"{field_path}[{index}]")
                try:
                    with self.cypress.lock:
                        node = self._file_node(path)
                        meta = file_metadata(node)
                        node_attrs = dict(node.attributes)
                except YtError as error:
                    raise YtError(
                        f"Cannot use {path} in {field_path}: {error.message}",
                        code=error.code if error.code == RESOLVE_ERROR else 1,
                        attributes={"field": f"{field_path}[{index}]", "path": path},
                        inner_errors=[error],
                    ) from error
                name = attrs.get("file_name", node_attrs.get("file_name", parse_ypath(path).tokens[-1]))
                executable = attrs.get("executable", node_attrs.get("executable", False))
                if not isinstance(name, str) or not name or name.startswith("/") or ".." in name.split("/"):
                    raise YtError(
                        f"file_name {name!r} of {path} must be a relative path inside the sandbox",
                        attributes={"field": f"{field_path}[{index}]", "path": path},
                    )
                if name in names:
                    raise YtError(
                        f'Two files of task "{task}" are both named "{name}" in the sandbox',
                        attributes={"field": field_path, "file_name": name},
                    )
                names.add(name)
                total += meta["size"]
                entries.append({"file_name": name, "executable": bool(executable), "path": path, **meta})
            if total > MAX_JOB_FILES_BYTES:
                raise YtError(
                    f'Files of task "{task}" are {total} bytes; pooltree sends them with each job and takes at '
                    f"most {MAX_JOB_FILES_BYTES} bytes per task",
                    attributes={"field": field_path, "size": total, "limit": MAX_JOB_FILES_BYTES},
                )
            result[str(task)] = entries
        return result

    def register_operation(self, operation_id: str, files: dict[str, list[dict[str, Any]]]) -> None:
        """Keep an operation's file snapshot (in memory and in the store, for revival); its blobs stay alive."""
        if not files:
            return
        self.store.set_value(OPERATION_FILES_PREFIX + operation_id, files)
        with self._lock:
            self._operation_files[operation_id] = files

    def forget_operation(self, operation_id: str) -> None:
        """Drop the file snapshot of an operation that did not start."""
        self.store.delete_value(OPERATION_FILES_PREFIX + operation_id)
        with self._lock:
            self._operation_files.pop(operation_id, None)

    def job_files(self, operation_id: str, task: str) -> list[dict[str, Any]]:
        """The ``files`` of a job spec: name, executable flag, blob ids (the node fetches and caches them)."""
        with self._lock:
            files = self._operation_files.get(operation_id)
        if files is None:
            stored = self.store.get_value(OPERATION_FILES_PREFIX + operation_id)
            files = stored if isinstance(stored, dict) else {}
            with self._lock:
                self._operation_files[operation_id] = files
        return [
            {
                "name": entry["file_name"],
                "executable": entry["executable"],
                "blobs": list(entry["chunks"]),
                "size": entry["size"],
            }
            for entry in files.get(task, [])
        ]

    def job_blob(self, blob_id: str) -> bytes:
        """A blob a running operation's files refer to (what nodes fetch); others are not served."""
        if blob_id not in self.referenced_blobs():
            raise YtError(
                f"No file blob {blob_id} belongs to an operation's files",
                code=RESOLVE_ERROR,
                attributes={"blob_id": blob_id},
            )
        return self._blob(blob_id)

    def referenced_blobs(self) -> set[str]:
        """Blobs that operations' file snapshots hold (kept even when the file node is gone)."""
        with self._lock:
            return {
                blob
                for files in self._operation_files.values()
                for entries in files.values()
                for entry in entries
                for blob in entry["chunks"]
            }

    # ------------------------------------------------------------------ registration

    def register_commands(self, registry: CommandRegistry) -> None:
        found = registry.lookup("create")
        if found is not None:
            create = found[1]

            def create_in_transaction(ctx: CommandContext) -> Any:
                tx_id = ctx.param("transaction_id", None)
                with self.cypress.lock:
                    tx = self._get(tx_id) if tx_id is not None and tx_id != NULL_TRANSACTION else None
                    result = create(ctx)
                    path = ctx.param("path", None)
                    if tx is not None and isinstance(path, str) and not ctx.bool_param("ignore_existing"):
                        tx.created.append(path)
                return result

            registry.register("create", create_in_transaction, is_volatile=True, replace=True)
        registry.register("start_transaction", self.start_transaction, is_volatile=True)
        for name, handler in (
            ("ping_transaction", self.ping_transaction),
            ("commit_transaction", self.commit_transaction),
            ("abort_transaction", self.abort_transaction),
        ):
            registry.register(name, handler, output_type="null", is_volatile=True)
        registry.register(
            "write_file",
            self.write_file,
            input_type="binary",
            output_type="null",
            is_volatile=True,
            is_heavy=True,
        )
        registry.register("read_file", self.read_file, output_type="binary", is_heavy=True)
        registry.register("get_file_from_cache", self.get_file_from_cache)
        registry.register("lock", self.lock, is_volatile=True)
        registry.register("put_file_to_cache", self.put_file_to_cache, is_volatile=True)
