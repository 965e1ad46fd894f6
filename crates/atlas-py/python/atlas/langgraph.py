"""`AtlasStore`: LangGraph's `BaseStore` on an ATLAS memory space, for
`graph.compile(store=AtlasStore("memory.db"))`. Each item is a memory of the agent `langgraph`
(or the one given): its namespace is the scope's user (labels joined by "."), its key the
scope's session, its value and LangGraph's bookkeeping the metadata, its text the indexed
fields. A put of an existing key records a new version that supersedes the old one (ATLAS's
`explain` and `history` keep them); search with a query is ATLAS's hybrid recall (full text,
vectors, recency) within the namespace; a TTL sets an expiry after which the item is gone,
pushed back by each read that refreshes it (ATLAS's `feedback`: the item was used).
Imports LangGraph, which must be installed (`pip install atlas-memory[langgraph]`)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import threading
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
    validate_op_namespace,
)
from langgraph.store.base.embed import get_text_at_path, tokenize_path

from ._errors import Conflict, InvalidInput, NotFound
from ._memory import MAX_K, Memory
from ._types import parse_time

# Where the item's LangGraph record lives in a memory's metadata.
FIELD = "langgraph"
# Most versions of one key read when it is deleted (each is forgotten for good).
MAX_VERSIONS = 1000
# Most times a put writes again on a version another process replaced meanwhile.
MAX_ATTEMPTS = 8
# Most items one listing reads (list_namespaces, a prefix or filter-only search).
MAX_LISTED = 100_000


def _now() -> datetime:
    return datetime.now(timezone.utc)


class AtlasStore(BaseStore):
    """A LangGraph store in the ATLAS space `path` (or over an open `Memory` with `memory=`).
    `index={"fields": [...]}` names the value fields whose text is searched (the whole value
    by default); `ttl={"default_ttl": minutes}` expires items unless a put says otherwise."""

    supports_ttl = True

    def __init__(
        self,
        path: Any = None,
        *,
        memory: Memory | None = None,
        agent: str = "langgraph",
        index: Mapping[str, Any] | None = None,
        ttl: TTLConfig | None = None,
        **options: Any,
    ) -> None:
        self.memory = memory if memory is not None else Memory(path, **options)
        self.agent = agent
        # LangGraph's stores keep the index configuration they were given (its `embed` is not
        # called: ATLAS embeds with its own model).
        self.index_config = dict(index) if index is not None else None
        fields = list((index or {}).get("fields") or ["$"])
        self.index_fields = [(f, tokenize_path(f) if f != "$" else f) for f in fields]
        self.ttl_config = ttl
        # A put reads the key's current version, then records the next one: two at once would
        # both see none and leave two live versions. Writes of one store go one at a time.
        self._writes = threading.RLock()
        self._sweeper: threading.Thread | None = None
        self._stop_sweeping = threading.Event()

    # --- the BaseStore protocol ---------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        # Every op is checked before the first runs: a bad one writes nothing, and a label with
        # a period cannot address another namespace ("foo.bar" is not ("foo", "bar")).
        ops = list(ops)
        for op in ops:
            if not isinstance(op, (GetOp, PutOp, SearchOp, ListNamespacesOp)):
                raise TypeError(f"unknown store operation {type(op).__name__}")
            validate_op_namespace(op)
            if isinstance(op, PutOp):
                _check_namespace(op.namespace)
        results: list[Result] = []
        for op in ops:
            if isinstance(op, GetOp):
                results.append(self._get(op))
            elif isinstance(op, PutOp):
                self._put(op)
                results.append(None)
            elif isinstance(op, SearchOp):
                results.append(self._search(op))
            else:
                results.append(self._list_namespaces(op))
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return await asyncio.to_thread(self.batch, list(ops))

    # --- TTL sweeping, as LangGraph's SQL stores offer it ---------------------------------

    def sweep_ttl(self) -> int:
        """Deletes every item whose TTL has run out now (reads delete them lazily too); how many."""
        swept = 0
        for record in self.memory._space.latest(limit=MAX_LISTED, agent=self.agent, kind=["episode"]):
            lg = (record.get("meta") or {}).get(FIELD)
            if lg is None or not _holds(record) or not _expired(record):
                continue
            swept += self._delete_expired(tuple(lg["namespace"]), lg["key"], record["id"])
        return swept

    async def asweep_ttl(self) -> int:
        return await asyncio.to_thread(self.sweep_ttl)

    def start_ttl_sweeper(self, sweep_interval_minutes: float | None = None) -> concurrent.futures.Future[None]:
        """Sweeps every `sweep_interval_minutes` (else the TTL config's, else 5) in a daemon
        thread until `stop_ttl_sweeper`; the future ends with it (cancelling it stops it)."""
        future: concurrent.futures.Future[None] = concurrent.futures.Future()
        if not self.ttl_config or (self._sweeper is not None and self._sweeper.is_alive()):
            future.set_result(None)
            return future
        minutes = float(sweep_interval_minutes or self.ttl_config.get("sweep_interval_minutes") or 5)
        self._stop_sweeping.clear()

        def sweep_until_stopped() -> None:
            while not self._stop_sweeping.wait(minutes * 60):
                try:
                    self.sweep_ttl()
                except Exception:  # noqa: BLE001 (one failed sweep must not end the sweeper)
                    logging.getLogger(__name__).exception("TTL sweep failed; the next one retries")
            if not future.done():  # a cancelled future stopped it, and is done already
                future.set_result(None)

        future.add_done_callback(lambda f: self._stop_sweeping.set() if f.cancelled() else None)
        self._sweeper = threading.Thread(target=sweep_until_stopped, daemon=True, name="atlas-ttl-sweeper")
        self._sweeper.start()
        return future

    def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Stops the sweeper; whether it ended within `timeout` seconds (or was not running)."""
        if self._sweeper is None or not self._sweeper.is_alive():
            return True
        self._stop_sweeping.set()
        self._sweeper.join(timeout)
        stopped = not self._sweeper.is_alive()
        if stopped:
            self._sweeper = None
        return stopped

    # --- operations ---------------------------------------------------------------------

    def _scope(self, namespace: Sequence[str], key: str | None = None) -> dict[str, str]:
        scope = {"agent": self.agent, "user": ".".join(namespace)}
        if key is not None:
            scope["session"] = key
        return scope

    def _current(self, namespace: Sequence[str], key: str) -> dict[str, Any] | None:
        """The live, unexpired current version of the item, if any (an expired one is deleted)."""
        records = self.memory._space.latest(limit=1, kind=["episode"], **self._scope(namespace, key))
        record = next((r for r in records if _holds(r)), None)
        if record is not None and _expired(record):
            self._delete_expired(namespace, key, record["id"])
            return None
        return record

    def _delete_expired(self, namespace: Sequence[str], key: str, expired_id: int) -> bool:
        """Deletes the key if version `expired_id` is still its newest and still expired: a put
        between the read and the delete is a new value, and a refreshing read (another thread's
        or process's) gave it more time. Whether it was deleted."""
        with self._writes:
            again = self.memory._space.latest(limit=1, kind=["episode"], **self._scope(namespace, key))
            if again and again[0]["id"] == expired_id and _expired(again[0]):
                self._delete_now(namespace, key)
                return True
        return False

    def _get(self, op: GetOp) -> Item | None:
        record = self._current(op.namespace, op.key)
        if record is None:
            return None
        if op.refresh_ttl:
            self._refresh(record)
        return _item(record, Item)

    def _refresh(self, record: Mapping[str, Any]) -> None:
        """A read that refreshes the TTL of an item that has one: the item was used now, and
        expires `ttl` minutes later ([`_expired`] reads the use from its lifecycle). As in
        LangGraph's SQLite and Postgres stores, only a store whose TTL config turns
        `refresh_on_read` on refreshes (the read's `refresh_ttl` can then turn it off)."""
        if not (self.ttl_config or {}).get("refresh_on_read", False):
            return
        if record["meta"][FIELD].get("ttl") is not None:
            self.memory._space.feedback(record["id"], True)

    def _put(self, op: PutOp) -> None:
        with self._writes:
            self._put_now(op)

    def _put_now(self, op: PutOp, attempt: int = 1) -> None:
        if op.value is None:
            self._delete(op.namespace, op.key)
            return
        value = dict(op.value)
        current = self._current(op.namespace, op.key)
        now = _now()
        # `put` has already applied the default TTL when none was given; `ttl=None` means none.
        ttl = op.ttl
        record = {
            "namespace": list(op.namespace),
            "key": op.key,
            "value": value,
            "created_at": current["meta"][FIELD]["created_at"] if current else now.isoformat(),
            "indexed": op.index is not False,
            "expires_at": (now + timedelta(minutes=ttl)).isoformat() if ttl is not None else None,
            "ttl": ttl,
        }
        fields = self.index_fields if op.index in (None, False) else [(f, tokenize_path(f)) for f in op.index]
        text = _text(value, fields) or op.key
        meta = {FIELD: record}
        if current is None:
            self.memory._space.call(
                "remember", {"text": text, "speaker": "langgraph", "scope": self._scope(op.namespace), "session": op.key, "meta": meta}
            )
        else:
            try:
                self.memory._space.revise(current["id"], text, meta=meta)
            except (NotFound, InvalidInput) as raced:
                # Another process replaced or deleted that version since it was read: write
                # again on what holds now. If it still holds, the write itself was refused.
                again = self._current(op.namespace, op.key)
                if again is not None and again["id"] == current["id"]:
                    raise
                if attempt >= MAX_ATTEMPTS:
                    raise Conflict(f"the key {op.key!r} of {op.namespace} kept changing under this put") from raced
                self._put_now(op, attempt + 1)
                return
        self._settle(op.namespace, op.key)

    def _settle(self, namespace: Sequence[str], key: str) -> None:
        """One current version per key, across processes: two stores on one file that put the
        same key at once (a new key, or the same version revised) both write; the version
        written last (the highest id) holds, as the later put would have replaced the other, and
        the rest are deleted. Every writer settles the same way, so they agree."""
        holding = self.memory._space.latest(limit=16, kind=["episode"], current=True, **self._scope(namespace, key))
        holding = [r for r in holding if FIELD in (r.get("meta") or {})]
        if len(holding) > 1:
            newest = max(r["id"] for r in holding)
            self.memory._forget_for_good([r["id"] for r in holding if r["id"] != newest])

    def _delete(self, namespace: Sequence[str], key: str) -> None:
        with self._writes:
            self._delete_now(namespace, key)

    def _delete_now(self, namespace: Sequence[str], key: str) -> None:
        versions = self.memory._space.latest(limit=MAX_VERSIONS, **self._scope(namespace, key))
        self.memory._forget_for_good([r["id"] for r in versions])

    def _search(self, op: SearchOp) -> list[SearchItem]:
        prefix = tuple(op.namespace_prefix)
        wanted = op.offset + op.limit
        found: dict[tuple[tuple[str, ...], str], tuple[dict[str, Any], float | None]] = {}
        if op.query:
            # The namespace itself is searched inside its scope; deeper ones among the agent's.
            scopes = [self._scope(prefix), {"agent": self.agent}] if prefix else [{"agent": self.agent}]
            for scope in scopes:
                k = min(MAX_K, max(wanted * (5 if op.filter else 2), 20))
                answer = self.memory._space.call("recall", {"query": op.query, "k": k, "scope": scope, "kind": ["episode"]})
                for hit in answer["hits"]:
                    if _expired(hit) and hit["meta"][FIELD].get("ttl") is not None:
                        # A hit carries no lifecycle: a read since may have refreshed it.
                        try:
                            hit = self.memory._space.call("get", {"id": hit["id"]}) | {"score": hit["score"]}
                        except NotFound:
                            continue  # swept meanwhile
                    self._consider(hit, prefix, op.filter, hit["score"], found, need_indexed=True)
            ranked = sorted(found.values(), key=lambda pair: -(pair[1] or 0.0))
        else:
            for record in self.memory._space.latest(limit=MAX_LISTED, agent=self.agent, kind=["episode"]):
                self._consider(record, prefix, op.filter, None, found, need_indexed=False)
                if len(found) >= wanted:
                    break
            ranked = list(found.values())
        page = ranked[op.offset : wanted]
        if op.refresh_ttl:
            for record, _score in page:
                self._refresh(record)
        return [_item(record, SearchItem, score) for record, score in page]

    def _consider(self, record, prefix, filters, score, found, *, need_indexed: bool) -> None:
        lg = (record.get("meta") or {}).get(FIELD)
        if lg is None or not _holds(record) or _expired(record):
            return
        namespace = tuple(lg["namespace"])
        if namespace[: len(prefix)] != prefix or (need_indexed and not lg.get("indexed", True)):
            return
        if filters and not all(_compare(_field(lg["value"], k), v) for k, v in filters.items()):
            return
        slot = (namespace, lg["key"])
        if slot not in found or (score or 0.0) > (found[slot][1] or 0.0):
            found[slot] = (record, score)

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        namespaces: set[tuple[str, ...]] = set()
        for record in self.memory._space.latest(limit=MAX_LISTED, agent=self.agent, kind=["episode"]):
            lg = (record.get("meta") or {}).get(FIELD)
            if lg is None or not _holds(record) or _expired(record):
                continue
            namespace = tuple(lg["namespace"])
            if all(_does_match(c, namespace) for c in op.match_conditions or ()):
                namespaces.add(namespace[: op.max_depth] if op.max_depth is not None else namespace)
        return sorted(namespaces)[op.offset : op.offset + op.limit]


def _check_namespace(namespace: tuple[str, ...]) -> None:
    """A PutOp given to `batch` directly needs a namespace: an item lives in one. (The root
    "langgraph" that `put` refuses is LangGraph's own, which batch, its internal door, takes.)"""
    if not namespace:
        raise InvalidNamespaceError("Namespace cannot be empty.")


def _holds(record: Mapping[str, Any]) -> bool:
    """Whether this version is current (a later put did not supersede it)."""
    until = record.get("valid_until")
    return until is None or parse_time(until) > _now()  # type: ignore[operator]


def _expired(record: Mapping[str, Any]) -> bool:
    """Whether the item's TTL has run out: `ttl` minutes after its put, or after its last
    refreshing read when that was later."""
    lg = (record.get("meta") or {}).get(FIELD) or {}
    expires = lg.get("expires_at")
    if expires is None:
        return False
    until = datetime.fromisoformat(expires)
    last_used = (record.get("lifecycle") or {}).get("last_used")
    if last_used is not None and lg.get("ttl") is not None:
        until = max(until, parse_time(last_used) + timedelta(minutes=lg["ttl"]))  # type: ignore[operator]
    return until <= _now()


def _text(value: Mapping[str, Any], fields: list[tuple[str, Any]]) -> str:
    parts: list[str] = []
    for name, path in fields:
        if name == "$":
            parts.append(json.dumps(value, ensure_ascii=False, sort_keys=True))
        else:
            parts.extend(str(t) for t in get_text_at_path(value, path) if t)
    return "\n".join(p for p in parts if p.strip())


def _item(record: Mapping[str, Any], cls: type, score: float | None = None) -> Any:
    lg = record["meta"][FIELD]
    fields = {
        "namespace": tuple(lg["namespace"]),
        "key": lg["key"],
        "value": lg["value"],
        "created_at": datetime.fromisoformat(lg["created_at"]),
        "updated_at": parse_time(record["recorded_at"]),
    }
    if cls is SearchItem:
        return SearchItem(score=score, **fields)
    return Item(**fields)


def _does_match(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    pairs = zip(namespace, path) if condition.match_type == "prefix" else zip(reversed(namespace), reversed(path))
    if condition.match_type not in ("prefix", "suffix"):
        raise ValueError(f"Unsupported match type: {condition.match_type}")
    return all(p == "*" or n == p for n, p in pairs)


def _field(value: Mapping[str, Any], key: str) -> Any:
    """The value's field `key`, or, when it has none of that name, the nested field its dotted
    path names (`"user.access-level"`), as LangGraph's SQL stores read a filter's key."""
    if key in value or "." not in key:
        return value.get(key)
    found: Any = value
    for part in key.split("."):
        if not isinstance(found, Mapping) or part not in found:
            return None
        found = found[part]
    return found


def _compare(value: Any, condition: Any) -> bool:
    """LangGraph's filter on a value field: equality, nested objects, `$eq $ne $gt $gte $lt $lte`."""
    if isinstance(condition, Mapping):
        if any(str(k).startswith("$") for k in condition):
            return all(_operator(value, op, operand) for op, operand in condition.items())
        return isinstance(value, Mapping) and all(_compare(value.get(k), v) for k, v in condition.items())
    return value == condition


def _operator(value: Any, op: str, operand: Any) -> bool:
    if op == "$eq":
        return value == operand
    if op == "$ne":
        return value != operand
    if value is None:
        return False
    try:
        a, b = float(value), float(operand)
    except (TypeError, ValueError):
        return False
    comparisons = {"$gt": a > b, "$gte": a >= b, "$lt": a < b, "$lte": a <= b}
    if op not in comparisons:
        raise ValueError(f"Unsupported operator: {op}")
    return comparisons[op]


__all__ = ["AtlasStore"]
