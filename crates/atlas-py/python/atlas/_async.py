"""`AsyncMemory`: `Memory` for asyncio. Each call runs in a worker thread while ATLAS works
with the GIL released, so the event loop never waits on it."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import Any, ParamSpec, TypeVar

from ._memory import Memory
from ._types import Recall

P = ParamSpec("P")
R = TypeVar("R")


def _off_loop(method: Callable[P, R]) -> Callable[P, Awaitable[R]]:
    """The async twin of a `Memory` method, same arguments and answer."""
    name = method.__name__

    @functools.wraps(method)
    async def call(self: AsyncMemory, *args: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(getattr(self.sync, name), *args, **kwargs)

    return call  # type: ignore[return-value]


class AsyncMemory:
    """A memory space for asyncio code: the arguments of `Memory`, every method awaitable.
    `AsyncMemory(memory=m)` shares an open `Memory`."""

    def __init__(self, path: Any = None, *, memory: Memory | None = None, **options: Any) -> None:
        self.sync = memory if memory is not None else Memory(path, **options)

    def __repr__(self) -> str:
        return f"atlas.AsyncMemory({self.sync._space!r})"

    async def __aenter__(self) -> AsyncMemory:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    close = _off_loop(Memory.close)
    add = _off_loop(Memory.add)
    search = _off_loop(Memory.search)
    get = _off_loop(Memory.get)
    get_all = _off_loop(Memory.get_all)
    update = _off_loop(Memory.update)
    delete = _off_loop(Memory.delete)
    delete_all = _off_loop(Memory.delete_all)
    history = _off_loop(Memory.history)
    reset = _off_loop(Memory.reset)
    remember = _off_loop(Memory.remember)
    remember_many = _off_loop(Memory.remember_many)
    latest = _off_loop(Memory.latest)
    get_memory = _off_loop(Memory.get_memory)
    explain = _off_loop(Memory.explain)
    forget = _off_loop(Memory.forget)
    recover = _off_loop(Memory.recover)
    feedback = _off_loop(Memory.feedback)
    consolidate = _off_loop(Memory.consolidate)
    context = _off_loop(Memory.context)
    export = _off_loop(Memory.export)
    import_ = _off_loop(Memory.import_)
    stats = _off_loop(Memory.stats)
    flush_vectors = _off_loop(Memory.flush_vectors)
    end_session = _off_loop(Memory.end_session)
    learn = _off_loop(Memory.learn)
    experiences = _off_loop(Memory.experiences)
    strategies = _off_loop(Memory.strategies)
    strategy_outcome = _off_loop(Memory.strategy_outcome)
    concepts = _off_loop(Memory.concepts)
    concept_outcome = _off_loop(Memory.concept_outcome)

    async def recall(self, query: str, k: int = 10, **options: Any) -> Recall:
        """`Memory.recall`, awaited."""
        return await asyncio.to_thread(self.sync.recall, query, k, **options)
