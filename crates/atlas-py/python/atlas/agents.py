"""`AtlasSession`: the OpenAI Agents SDK's `Session` protocol on an ATLAS memory space, so
`Runner.run(agent, input, session=AtlasSession("chat-1", "memory.db"))` keeps the conversation
in ATLAS. Each item is an episode of the session (scope: the agent `openai-agents` or the one
given, the user if given, the session id), its text what a person would read of it (a
message's words, a tool call's name and arguments, a tool's output) and the item itself in its
metadata, returned exactly as added. Being ATLAS memories, the turns are consolidated, decay,
and `search` recalls them across every session of the user. Needs no import of the SDK: the
protocol is structural."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from ._memory import Memory
from ._types import Recall

# Where the item lives in its memory's metadata.
FIELD = "agents_item"
# Most items `get_items()` without a limit returns (a session longer than this is cut to its end).
MAX_ITEMS = 100_000
# Most items one write stores (every door's batch limit); `add_items` writes more in several.
MAX_BATCH = 1000

_T = TypeVar("_T")


async def _settled(work: Callable[[], _T]) -> _T:
    """Runs a write in a thread and waits for its outcome even when the caller is cancelled
    (then re-raises the cancellation): a cancelled run knows whether its write landed, as the
    SDK's own sessions guarantee."""
    task = asyncio.ensure_future(asyncio.to_thread(work))
    cancelled: asyncio.CancelledError | None = None
    while not task.done():
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError as error:
            cancelled = cancelled or error
    try:
        result = task.result()
    except BaseException:
        if cancelled is not None:
            raise cancelled from None
        raise
    if cancelled is not None:
        raise cancelled from None
    return result


def item_text(item: Mapping[str, Any]) -> str:
    """The words of an item: a message's text parts, a tool call's name and arguments, a
    tool's output; the item as JSON when it has none."""
    parts: list[str] = []
    content = item.get("content")
    if isinstance(content, str):
        parts.append(content)
    elif isinstance(content, Sequence):
        for part in content:
            if isinstance(part, Mapping):
                text = part.get("text") or part.get("refusal")
                if isinstance(text, str):
                    parts.append(text)
    if item.get("type") == "function_call":
        parts.append(f"{item.get('name', '')}({item.get('arguments', '')})")
    output = item.get("output")
    if isinstance(output, str):
        parts.append(output)
    text = "\n".join(p for p in parts if p.strip())
    return text or json.dumps(item, ensure_ascii=False, sort_keys=True, default=str)


def _settings(value: Any) -> Any:
    """`session_settings` as the SDK's own sessions keep it when the SDK is installed: its
    `SessionSettings` (a dict coerced, none given a default one); else the value as given."""
    try:
        from agents.memory.session_settings import SessionSettings, coerce_session_settings
    except ImportError:
        return value
    return SessionSettings() if value is None else coerce_session_settings(value)


def _limit_of(settings: Any) -> int | None:
    if settings is None:
        return None
    limit = settings.get("limit") if isinstance(settings, Mapping) else getattr(settings, "limit", None)
    return limit


class AtlasSession:
    """A conversation's history in ATLAS, for the OpenAI Agents SDK (`session=`).
    `session_settings` (the SDK's `SessionSettings` or a dict) gives `get_items` its default
    `limit`, as the SDK's sessions do."""

    def __init__(
        self,
        session_id: str,
        path: Any = None,
        *,
        memory: Memory | None = None,
        user_id: str | None = None,
        agent: str = "openai-agents",
        session_settings: Any = None,
        **options: Any,
    ) -> None:
        if not isinstance(session_id, str) or not session_id:
            raise ValueError("session_id must be a non-empty string")
        self.session_id = session_id
        self.session_settings = _settings(session_settings)
        self._owns_memory = memory is None
        self.memory = memory if memory is not None else Memory(path, **options)
        self.user_id = user_id
        self.agent = agent
        self._closed = False
        # Writes of this session go one at a time: a compaction's suffix replacement checks
        # the suffix it read is still the newest before it writes.
        self._writes = threading.RLock()

    def close(self) -> None:
        """Ends the session's use of its space (closing the `Memory` it opened itself); later
        calls raise `RuntimeError`, as the SDK's sessions do."""
        if not self._closed:
            self._closed = True
            if self._owns_memory:
                self.memory.close()

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("AtlasSession is closed")

    def _scope(self, *, session: bool = True) -> dict[str, str]:
        scope = {"agent": self.agent}
        if self.user_id is not None:
            scope["user"] = self.user_id
        if session:
            scope["session"] = self.session_id
        return scope

    def _records(self, limit: int) -> list[dict[str, Any]]:
        """The session's item records, newest first."""
        records = self.memory._space.latest(limit=limit, kind=["episode"], **self._scope())
        return [r for r in records if FIELD in (r.get("meta") or {})]

    # --- the Session protocol -----------------------------------------------------------

    async def get_items(self, limit: int | None = None) -> list[Any]:
        """The history, oldest first: every item, or the latest `limit` (by default
        `session_settings.limit`)."""
        self._check_open()
        if limit is None:
            limit = _limit_of(self.session_settings)
        records = await asyncio.to_thread(self._records, limit if limit is not None else MAX_ITEMS)
        return [r["meta"][FIELD] for r in reversed(records)]

    async def add_items(self, items: list[Any]) -> None:
        """Appends items in order, in one write (1,000 at a time beyond that)."""
        self._check_open()
        if not items:
            return
        await _settled(lambda: self._append(items))

    def _append(self, items: Sequence[Any]) -> None:
        memories = []
        for item in items:
            item = dict(item)
            speaker = item.get("role") or item.get("type") or "item"
            memories.append({"text": item_text(item), "speaker": str(speaker), "scope": self._scope(), "meta": {FIELD: item}})
        with self._writes:
            for start in range(0, len(memories), MAX_BATCH):
                self.memory._space.call("remember_many", {"memories": memories[start : start + MAX_BATCH]})

    async def pop_item(self) -> Any | None:
        """Removes the newest item for good and returns it (None when the session is empty)."""
        self._check_open()

        def pop() -> Any | None:
            with self._writes:
                records = self._records(1)
                if not records:
                    return None
                self.memory._forget_for_good([records[0]["id"]])
                return records[0]["meta"][FIELD]

        return await _settled(pop)

    async def clear_session(self) -> None:
        """Removes every item of the session for good."""
        self._check_open()

        def clear() -> None:
            with self._writes:
                self.memory._space.forget_scope(**self._scope())

        await _settled(clear)

    async def _get_compaction_snapshot(
        self, limit: int, *, prune_prefix: Callable[[Any], bool] | None = None
    ) -> Any | None:
        """The Agents SDK's hook for automatic compaction (`OpenAIResponsesCompactionSession`),
        as its SQLite sessions offer it: the newest `limit` items, whether they are the whole
        history, and `replace_suffix(start, output)`, which replaces the items from `start` on
        with the compacted `output` only if they are still the newest (False otherwise, nothing
        written). The output is written before the replaced items are forgotten: a crash in
        between leaves both, never neither. `prune_prefix` drops expired items just before the
        suffix (the SDK's EncryptedSession)."""
        self._check_open()
        try:
            from agents.memory.session import _CompactionSnapshot
        except ImportError:
            return None
        newest = await asyncio.to_thread(self._records, limit + 1)
        complete = len(newest) <= limit
        records = list(reversed(newest[:limit]))

        async def replace_suffix(start: int, output: list[Any]) -> bool:
            expected = [r["id"] for r in records[start:]]
            if not expected:
                return False

            def replace() -> bool:
                with self._writes:
                    current = [r["id"] for r in reversed(self._records(len(expected)))]
                    if current != expected:
                        return False
                    expired: list[int] = []
                    if prune_prefix is not None:
                        older = [r for r in reversed(self._records(MAX_ITEMS)) if r["id"] < expected[0]]
                        for record in older:
                            if not prune_prefix(record["meta"][FIELD]):
                                break
                            expired.append(record["id"])
                    self._append(output)
                    self.memory._forget_for_good(expected + expired)
                    return True

            return await _settled(replace)

        return _CompactionSnapshot([r["meta"][FIELD] for r in records], complete, replace_suffix)

    # --- beyond the protocol ------------------------------------------------------------

    async def search(self, query: str, k: int = 5, *, all_sessions: bool = True) -> Recall:
        """ATLAS's recall over this user's (and agent's) sessions, or only this one."""
        self._check_open()
        return await asyncio.to_thread(
            self.memory.recall, query, k, scope=self._scope(session=not all_sessions)
        )


__all__ = ["AtlasSession", "item_text"]
