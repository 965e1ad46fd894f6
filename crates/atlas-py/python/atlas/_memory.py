"""`Memory`: one open memory space, in-process. mem0's API (`add`, `search`, `get`, `get_all`,
`update`, `delete`, `delete_all`, `history`, `reset`) in mem0 2.x's shapes, and ATLAS's own,
typed (`remember`, `recall`, `forget`, `explain`, `context`, the agent memories...). Every call
releases the GIL while ATLAS works, so one `Memory` serves many threads."""

from __future__ import annotations

import operator
import os
from collections.abc import Iterable, Mapping, Sequence
from datetime import date, datetime, timezone
from typing import Any, Union

from . import _filters
from ._errors import AtlasError, InvalidInput, NotFound
from ._native import Space
from ._types import Recall, ScopeLike, rfc3339, scope_dict

Messages = Union[str, Mapping[str, Any], Sequence[Mapping[str, Any]]]
PathLike = Union[str, "os.PathLike[str]"]

# What mem0's `get_all` lists: what was said and what was learned from it (not entities, nor
# the agent memories, which have their own calls).
LISTED_KINDS = ["episode", "fact", "core", "summary"]
# Most hits one recall returns (the server's MAX_K).
MAX_K = 1000
# Most memories one write stores (every door's batch limit); `add` writes more in several.
MAX_BATCH = 1000
# `update`'s "not given" for `expiration_date` (None clears it).
_UNSET: Any = object()


def _expiration(value: Any, field: str = "expiration_date") -> str | None:
    """mem0's `expiration_date`: a date (or datetime, or "YYYY-MM-DD") as "YYYY-MM-DD"."""
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.date().isoformat()
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, str):
        try:
            return date.fromisoformat(value).isoformat()
        except ValueError:
            pass
    raise _filters.invalid(field, f"a date in YYYY-MM-DD format, got {value!r}")


def _expired(item: Mapping[str, Any]) -> bool:
    """Whether a mem0 item's `expiration_date` (in its metadata) is before today (UTC), as mem0
    hides it from `search` and `get_all` unless `show_expired`."""
    expiration = (item.get("metadata") or {}).get("expiration_date")
    if not expiration:
        return False
    try:
        return date.fromisoformat(str(expiration)) < datetime.now(timezone.utc).date()
    except ValueError:
        return False


def _memory_id(memory_id: int | str, field: str = "memory_id") -> int:
    """mem0 ids are strings; ATLAS's are integers. Both are taken; nothing else is (`int(7.7)` is
    7: a float would delete another memory than the one meant)."""
    value = 0
    if isinstance(memory_id, str):
        value = int(memory_id.strip()) if memory_id.strip().isdigit() else 0
    elif not isinstance(memory_id, bool):
        try:
            # Integers, numpy's among them; never a float.
            value = operator.index(memory_id)
        except TypeError:
            value = 0
    if value < 1:
        raise _filters.invalid(field, f"{memory_id!r} is not a memory id (a positive integer, or its string)")
    return value


def _messages(messages: Messages) -> list[Mapping[str, Any]]:
    if isinstance(messages, str):
        return [{"role": "user", "content": messages}]
    if isinstance(messages, Mapping):
        return [messages]
    if isinstance(messages, Sequence):
        # A list of strings is a list of the user's messages.
        return [{"role": "user", "content": m} if isinstance(m, str) else m for m in messages]
    raise _filters.invalid("messages", "expected a string, a message {'role', 'content'} or a list of them")


def mem0_item(record: Mapping[str, Any], score: float | None = None) -> dict[str, Any]:
    """An ATLAS record in mem0's shape, with ATLAS's kind and event time beside it."""
    scope = record.get("scope") or {}
    item: dict[str, Any] = {
        "id": str(record["id"]),
        "memory": record["text"],
        "hash": None,
        "metadata": dict(record.get("meta") or {}) or None,
        "created_at": record["recorded_at"],
        "updated_at": None,
    }
    if score is not None:
        item["score"] = score
    for key, value in (
        ("user_id", scope.get("user")),
        ("agent_id", scope.get("agent")),
        ("run_id", record.get("session")),
        ("role", record.get("speaker")),
    ):
        if value is not None:
            item[key] = value
    item["kind"] = record["kind"]
    item["time"] = record["time"]
    return item


class Memory:
    """A memory space: the SQLite file `path` (created if missing), or with `url=` the space
    `space` on a Qdrant server. `config` is a TOML file (docs/CONFIG.md), or mem0's config as a
    dict (`{"embedder": {"provider": "ollama", "config": {"model": ...}}}`: openai, ollama,
    huggingface with `huggingface_base_url`, onnx); `ATLAS_*` variables apply as for the CLI;
    `embedder="none"` recalls by full text only. `sleep_cycle` runs the consolidation of what is
    remembered in the background."""

    def __init__(
        self,
        path: PathLike | None = None,
        *,
        url: str | None = None,
        space: str | None = None,
        config: PathLike | Mapping[str, Any] | None = None,
        embedder: str | None = None,
        sleep_cycle: bool = True,
    ) -> None:
        if config is not None and not isinstance(config, Mapping):
            config = os.fspath(config)
        self._space = Space(
            os.fspath(path) if path is not None else None,
            url=url,
            space=space,
            config=dict(config) if isinstance(config, Mapping) else config,
            embedder=embedder,
            sleep_cycle=sleep_cycle,
        )

    @classmethod
    def from_config(cls, config_dict: Mapping[str, Any], path: PathLike | None = None, **kwargs: Any) -> Memory:
        """mem0's constructor: a memory space configured by mem0's config dict (its `embedder`
        section; the sections of mem0's own machinery, such as `vector_store`, are left out)."""
        return cls(path, config=config_dict, **kwargs)

    def __repr__(self) -> str:
        return f"atlas.Memory({self._space!r})"

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        """Closes the space; later calls raise `AtlasError`."""
        self._space.close()

    # --- mem0's API ---------------------------------------------------------------------

    def add(
        self,
        messages: Messages,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        infer: bool = True,
        filters: Mapping[str, Any] | None = None,
        expiration_date: Any = None,
        **_: Any,
    ) -> dict[str, Any]:
        """Stores the messages as episodes of the entity's scope, in one write (1,000 at a
        time beyond that, each write all or none). With `infer`, the sleep cycle consolidates
        them into facts, entities and summaries in the background (no model is called here);
        without it they are kept as said. `expiration_date` ("YYYY-MM-DD") hides them from
        `search` and `get_all` after that day, as mem0 does."""
        scope, _rest = _filters.split(filters, user_id=user_id, agent_id=agent_id, run_id=run_id)
        if not scope:
            raise _filters.invalid("user_id", "one of user_id, agent_id or run_id is required")
        expiration = _expiration(expiration_date)
        items = []
        for i, message in enumerate(_messages(messages)):
            if not isinstance(message, Mapping) or not isinstance(message.get("content"), str):
                raise _filters.invalid(f"messages[{i}].content", "every message needs a string content")
            meta = dict(metadata or {})
            if not infer:
                meta.setdefault("infer", False)
            if expiration is not None:
                meta["expiration_date"] = expiration
            item: dict[str, Any] = {"text": message["content"], "scope": scope, "meta": meta}
            speaker = message.get("name") or message.get("role")
            if speaker is not None:
                item["speaker"] = str(speaker)
            items.append(item)
        if not items:
            return {"results": []}
        ids = []
        for start in range(0, len(items), MAX_BATCH):
            try:
                ids += self._space.call("remember_many", {"memories": items[start : start + MAX_BATCH]})["ids"]
            except AtlasError as error:
                # The message's place in the whole call, not in its write.
                if error.index is not None:
                    error.index += start
                raise
        return {
            "results": [
                {"id": str(i), "memory": item["text"], "event": "ADD"} | ({"role": item["speaker"]} if "speaker" in item else {})
                for i, item in zip(ids, items)
            ]
        }

    def search(
        self,
        query: str,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        filters: Mapping[str, Any] | None = None,
        top_k: int | None = None,
        limit: int | None = None,
        threshold: float | None = None,
        explain: bool = False,
        show_expired: bool = False,
        **_: Any,
    ) -> dict[str, Any]:
        """The memories that answer `query`, best first: `{"results": [{"id", "memory",
        "score", "metadata", "created_at", "user_id", ...}]}`. Entity ids narrow the scope;
        other `filters` are conditions on metadata; `threshold` drops hits scoring below it
        (ATLAS's fused score, not a cosine); `explain=True` gives each result an `explain`:
        per signal that found it, its rank, raw score and share of the score. Memories past
        their `expiration_date` are left out unless `show_expired`."""
        # mem0 2.x's default (`top_k=20`).
        k = top_k if top_k is not None else limit if limit is not None else 20
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
            raise _filters.invalid("top_k", f"a whole number from 1 to {MAX_K}, got {k!r}")
        if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, (int, float))):
            raise _filters.invalid("threshold", f"a number, got {threshold!r}")
        scope, conditions = _filters.split(filters, user_id=user_id, agent_id=agent_id, run_id=run_id)
        # Conditions on metadata and expiry are checked here, after the recall: when they drop
        # hits, ask again for more (up to MAX_K) to keep k.
        fetch = min(MAX_K, max(k * 5, 50)) if conditions else k
        while True:
            answer = self._space.call(
                "recall", {"query": query, "k": fetch, "scope": scope or None, "explain": bool(explain)}
            )
            results = []
            for hit in answer["hits"]:
                item = mem0_item(hit, hit["score"])
                if explain:
                    item["explain"] = hit.get("explain") or {}
                if threshold is not None and hit["score"] < threshold:
                    continue
                if conditions and not _filters.matches(item, conditions):
                    continue
                if not show_expired and _expired(item):
                    continue
                results.append(item)
                if len(results) == k:
                    break
            if len(results) == k or len(answer["hits"]) < fetch or fetch == MAX_K:
                return {"results": results}
            fetch = min(MAX_K, fetch * 4)

    def get(self, memory_id: int | str) -> dict[str, Any] | None:
        """The memory in mem0's shape, or None if there is none (or it was deleted)."""
        try:
            record = self._space.call("get", {"id": _memory_id(memory_id)})
        except NotFound:
            return None
        if (record.get("lifecycle") or {}).get("deleted_at") is not None:
            return None
        return mem0_item(record)

    def get_all(
        self,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        filters: Mapping[str, Any] | None = None,
        top_k: int | None = None,
        limit: int | None = None,
        show_expired: bool = False,
        **_: Any,
    ) -> dict[str, Any]:
        """The scope's memories, newest first: `{"results": [...]}` (past their
        `expiration_date` only with `show_expired`)."""
        # mem0 2.x's default (`top_k=20`).
        k = top_k if top_k is not None else limit if limit is not None else 20
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
            raise _filters.invalid("top_k", f"a whole number from 1 to {MAX_K}, got {k!r}")
        scope, conditions = _filters.split(filters, user_id=user_id, agent_id=agent_id, run_id=run_id)
        fetch = k if not conditions else max(k * 5, 500)
        while True:
            # A version `update` (or the sleep cycle) replaced is history, not one of the memories.
            records = self._space.latest(kind=LISTED_KINDS, limit=fetch, current=True, **scope)
            results = [mem0_item(r) for r in records]
            if conditions:
                results = [r for r in results if _filters.matches(r, conditions)]
            if not show_expired:
                results = [r for r in results if not _expired(r)]
            if len(results) >= k or len(records) < fetch:
                return {"results": results[:k]}
            fetch *= 4

    def update(
        self,
        memory_id: int | str,
        data: str | None = None,
        *,
        text: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        expiration_date: Any = _UNSET,
    ) -> dict[str, Any]:
        """Records the new text (and `metadata`, else the old version's) as the memory's next
        version: it supersedes the old one, which `history` keeps. The new version has its own
        id, returned as `id`. Without a text the old one is kept; `expiration_date` sets the
        day after which it is hidden (None clears it)."""
        new_text = text if text is not None else data
        if new_text is None and metadata is None and expiration_date is _UNSET:
            raise _filters.invalid("text", "at least one of text, metadata or expiration_date is required")
        if new_text is not None and not isinstance(new_text, str):
            raise _filters.invalid("text", f"the new text of the memory is a string, got {type(new_text).__name__}")
        if metadata is not None and not isinstance(metadata, Mapping):
            raise _filters.invalid("metadata", f"a mapping, got {type(metadata).__name__}")
        old = _memory_id(memory_id)
        meta = dict(metadata) if metadata is not None else None
        if new_text is None or (meta is None and expiration_date is not _UNSET):
            record = self._space.call("get", {"id": old})
            new_text = new_text if new_text is not None else record["text"]
            meta = meta if meta is not None else dict(record.get("meta") or {})
        if expiration_date is not _UNSET:
            expiration = _expiration(expiration_date)
            assert meta is not None
            if expiration is None:
                meta.pop("expiration_date", None)
            else:
                meta["expiration_date"] = expiration
        revised = self._space.revise(old, new_text, meta=meta)
        return {"message": "Memory updated successfully!", "id": str(revised["id"]), "previous_id": str(old)}

    def delete(self, memory_id: int | str) -> dict[str, str]:
        """Deletes the memory for good (ATLAS's `forget` is the recoverable way)."""
        self._space.call("forget", {"id": _memory_id(memory_id), "hard": True})
        return {"message": "Memory deleted successfully!"}

    def delete_all(
        self, *, user_id: str | None = None, agent_id: str | None = None, run_id: str | None = None, **_: Any
    ) -> dict[str, Any]:
        """Deletes every memory of the entity's scope for good."""
        scope, _rest = _filters.split(None, user_id=user_id, agent_id=agent_id, run_id=run_id)
        if not scope:
            raise _filters.invalid(
                "user_id", "at least one of user_id, agent_id or run_id is required; reset() deletes every memory"
            )
        deleted = self._space.forget_scope(**scope)
        return {"message": "Memories deleted successfully!", "deleted": deleted}

    def history(self, memory_id: int | str) -> list[dict[str, Any]]:
        """The memory's versions, oldest first: the first `ADD`, then one `UPDATE` per revision
        (by `update`, or by the sleep cycle for a fact), each with `old_memory` and `new_memory`."""
        first = _memory_id(memory_id)
        explained = self._space.call("explain", {"id": first})
        chain = list(reversed(explained["replaced"])) + [explained["memory"]]
        newer = explained["replaced_by"]
        seen = {r["id"] for r in chain}
        while newer and newer[0]["id"] not in seen:
            chain.append(newer[0])
            seen.add(newer[0]["id"])
            newer = self._space.call("explain", {"id": newer[0]["id"]})["replaced_by"]
        events = []
        previous: Mapping[str, Any] | None = None
        for record in chain:
            scope = record.get("scope") or {}
            events.append(
                {
                    "id": str(record["id"]),
                    "memory_id": str(record["id"]),
                    "old_memory": previous["text"] if previous else None,
                    "new_memory": record["text"],
                    "event": "UPDATE" if previous else "ADD",
                    "created_at": record["recorded_at"],
                    "updated_at": None,
                    "is_deleted": False,
                    "actor_id": scope.get("agent"),
                    "role": record.get("speaker"),
                }
            )
            previous = record
        return events

    def _forget_for_good(self, ids: Iterable[int]) -> None:
        """Deletes these memories for good (the integrations' deletes and replacements); one
        another process deleted first is gone already, which is what was asked."""
        for id in ids:
            try:
                self._space.call("forget", {"id": id, "hard": True})
            except NotFound:
                pass

    def reset(self) -> None:
        """Deletes every memory of the space for good."""
        self._space.forget_scope()

    # --- ATLAS's own API ----------------------------------------------------------------

    def remember(
        self,
        text: str,
        *,
        speaker: str | None = None,
        scope: ScopeLike = None,
        session: str | None = None,
        time: datetime | str | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> int:
        """Stores one episode on the hot path (no model waits) and returns its id."""
        args: dict[str, Any] = {"text": text, "speaker": speaker, "scope": scope_dict(scope), "session": session}
        args["time"] = rfc3339(time)
        args["meta"] = dict(meta or {})
        return int(self._space.call("remember", args)["id"])

    def remember_many(self, items: Iterable[Mapping[str, Any]]) -> list[int]:
        """Stores many episodes in one write, all or none; each item takes `remember`'s
        arguments (`text`, `speaker`, `scope`, `session`, `time`, `meta`)."""
        memories = []
        for item in items:
            memory = dict(item)
            if "scope" in memory:
                memory["scope"] = scope_dict(memory["scope"])
            if "time" in memory:
                memory["time"] = rfc3339(memory["time"])
            memories.append(memory)
        return [int(i) for i in self._space.call("remember_many", {"memories": memories})["ids"]]

    def recall(
        self,
        query: str,
        k: int = 10,
        *,
        scope: ScopeLike = None,
        kind: str | Sequence[str] | None = None,
        since: datetime | str | None = None,
        until: datetime | str | None = None,
        as_of: datetime | str | None = None,
        explain: bool = False,
    ) -> Recall:
        """The memories that answer `query`, best first, by full text, vectors, graph and time
        fused; `as_of` recalls what held then; `explain` adds each signal's share."""
        kinds = [kind] if isinstance(kind, str) else list(kind or [])
        args = {
            "query": query,
            "k": k,
            "scope": scope_dict(scope),
            "kind": kinds,
            "since": rfc3339(since),
            "until": rfc3339(until),
            "as_of": rfc3339(as_of),
            "explain": explain,
        }
        return Recall.from_answer(self._space.call("recall", args))

    def latest(self, *, scope: ScopeLike = None, kind: str | Sequence[str] | None = None, limit: int = 100) -> list[dict[str, Any]]:
        """The scope's newest memories, newest first, as records."""
        kinds = [kind] if isinstance(kind, str) else list(kind or [])
        return self._space.latest(kind=kinds, limit=limit, **(scope_dict(scope) or {}))

    def get_memory(self, id: int) -> dict[str, Any]:
        """A memory's record with its edges and lifecycle; `NotFound` if there is none."""
        return self._space.call("get", {"id": _memory_id(id, "id")})

    def explain(self, id: int) -> dict[str, Any]:
        """Where a memory came from and what became of it: its sources, the versions it
        replaced and what replaced it, its entities, its decay."""
        return self._space.call("explain", {"id": _memory_id(id, "id")})

    def forget(self, id: int, *, hard: bool = False) -> dict[str, Any]:
        """Forgets a memory: softly by default (`recover` undoes it), for good with `hard`."""
        return self._space.call("forget", {"id": _memory_id(id, "id"), "hard": hard})

    def recover(self, id: int) -> dict[str, Any]:
        """Brings back a memory forgotten softly, decayed or archived."""
        return self._space.recover(_memory_id(id, "id"))

    def feedback(self, id: int, *, useful: bool) -> dict[str, Any]:
        """Says whether a recalled memory helped: resets its decay (a fact's SM-2 review)."""
        return self._space.feedback(_memory_id(id, "id"), useful)

    def consolidate(self, *, end_sessions: bool = False) -> dict[str, Any]:
        """Runs one sleep cycle now: episodes become facts with history, entities, summaries."""
        return self._space.call("consolidate", {"end_sessions": end_sessions})

    def context(
        self, task: str, budget: int | None = None, *, scope: ScopeLike = None, session: str | None = None
    ) -> dict[str, Any]:
        """The memories a task needs packed into a prompt budget (tokens; every door's default,
        7,500, when not given): `text` is the prompt."""
        args: dict[str, Any] = {"task": task, "scope": scope_dict(scope), "session": session}
        if budget is not None:
            args["budget"] = budget
        return self._space.call("context", args)

    def export(self, path: PathLike, *, vectors: bool = False) -> int:
        """Writes a full export (ids, edges, context) that `import_` restores exactly; how many memories."""
        return self._space.export_file(os.fspath(path), vectors=vectors)

    def import_(self, path: PathLike, *, again: bool = False) -> dict[str, Any]:
        """Imports a JSON Lines file of memories, or restores a full export: all or nothing."""
        return self._space.import_file(os.fspath(path), again=again)

    def stats(self) -> dict[str, Any]:
        """Counts and sizes of the space."""
        return self._space.call("stats", {})

    def flush_vectors(self) -> int:
        """Embeds now every memory still waiting for its vector; how many."""
        return self._space.flush_vectors()

    def end_session(self) -> None:
        """Tells the sleep cycle the conversation paused (sessions may be summarised)."""
        self._space.end_session()

    # --- the agent memories -------------------------------------------------------------

    def learn(self, trajectory: Mapping[str, Any], *, learn: bool = True, scope: ScopeLike = None) -> dict[str, Any]:
        """Stores a task's trajectory in the Experience memory (`{"id", "task", "steps",
        "output", "feedback", "success", "time", "tags"}`); with `learn`, updates the Strategy bank."""
        return self._space.call("learn", {"trajectory": dict(trajectory), "learn": learn, "scope": scope_dict(scope)})

    def experiences(self, task: str, k: int = 5, *, scope: ScopeLike = None) -> list[dict[str, Any]]:
        """Past tasks like this one, what worked first."""
        return self._space.call("search_experiences", {"task": task, "k": k, "scope": scope_dict(scope)})["hits"]

    def strategies(self, task: str, k: int = 5, *, scope: ScopeLike = None, explore: bool = False) -> list[dict[str, Any]]:
        """Strategies for situations like this one, with their success rates."""
        args = {"task": task, "k": k, "scope": scope_dict(scope), "explore": explore}
        return self._space.call("read_strategies", args)["hits"]

    def strategy_outcome(self, id: int, *, success: bool) -> dict[str, Any]:
        """Records whether a strategy worked (its Beta(1,1) success rate)."""
        return self._space.call("strategy_outcome", {"id": _memory_id(id, "id"), "success": success})

    def concepts(self, task: str, k: int = 5, *, scope: ScopeLike = None) -> list[dict[str, Any]]:
        """Reusable code patterns for the task."""
        return self._space.call("search_concepts", {"task": task, "k": k, "scope": scope_dict(scope)})["concepts"]

    def concept_outcome(self, id: int, *, success: bool) -> dict[str, Any]:
        """Records a use of a concept and whether it worked."""
        return self._space.call("concept_outcome", {"id": _memory_id(id, "id"), "success": success})


__all__ = ["Memory", "mem0_item"]
