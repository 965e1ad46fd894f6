"""The swap that runs langgraph-checkpoint-sqlite's own store tests against ATLAS, as a user
switching would: `SqliteStore` and `AsyncSqliteStore` (and their `from_conn_string`) are
`atlas.langgraph.AtlasStore` in an ATLAS space (":memory:" in a new file of its own, a file path
as that file); `setup()` has nothing to do (a space creates its schema when it opens); the
async store's sweeper calls are the sync store's, awaited. Nothing of the tests' assertions
changes. The tests listed in skips.txt are skipped with their reason; every other test must
pass. Copied as the suite's root conftest.py by `cargo xtask python-tests`."""

from __future__ import annotations

import asyncio
import contextlib

import langgraph.store.sqlite
import langgraph.store.sqlite.aio
import langgraph.store.sqlite.base

from atlas.langgraph import AtlasStore
from skipped import pytest_collection_modifyitems, scratch_file  # noqa: F401 (a pytest hook)


def _path(conn_string: str) -> str:
    if str(conn_string) == ":memory:":
        return scratch_file("store.db")
    return str(conn_string)


class AtlasAsSqliteStore(AtlasStore):
    """`SqliteStore.from_conn_string(conn_string, index=, ttl=)` as an ATLAS space."""

    def __init__(self, conn_string: str = ":memory:", *, index=None, ttl=None, **_ignored):
        super().__init__(_path(conn_string), index=index, ttl=ttl, sleep_cycle=False)

    @classmethod
    @contextlib.contextmanager
    def from_conn_string(cls, conn_string, *, index=None, ttl=None, **_ignored):
        store = cls(conn_string, index=index, ttl=ttl)
        try:
            yield store
        finally:
            store.stop_ttl_sweeper()
            store.memory.close()

    def setup(self) -> None:
        """Nothing to create: the space made its schema when it opened."""


class AtlasAsAsyncSqliteStore(AtlasAsSqliteStore):
    """`AsyncSqliteStore`: the same store, its setup and sweeper as coroutines."""

    @classmethod
    @contextlib.asynccontextmanager
    async def from_conn_string(cls, conn_string, *, index=None, ttl=None, **_ignored):
        store = cls(conn_string, index=index, ttl=ttl)
        try:
            yield store
        finally:
            await asyncio.to_thread(AtlasStore.stop_ttl_sweeper, store)
            store.memory.close()

    async def setup(self) -> None:  # type: ignore[override]
        """Nothing to create: the space made its schema when it opened."""

    async def sweep_ttl(self) -> int:  # type: ignore[override]
        return await self.asweep_ttl()

    async def start_ttl_sweeper(self, sweep_interval_minutes=None):  # type: ignore[override]
        return asyncio.wrap_future(AtlasStore.start_ttl_sweeper(self, sweep_interval_minutes))

    async def stop_ttl_sweeper(self, timeout=None) -> bool:  # type: ignore[override]
        return await asyncio.to_thread(AtlasStore.stop_ttl_sweeper, self, timeout)


for module in (langgraph.store.sqlite, langgraph.store.sqlite.base):
    module.SqliteStore = AtlasAsSqliteStore
for module in (langgraph.store.sqlite, langgraph.store.sqlite.aio):
    module.AsyncSqliteStore = AtlasAsAsyncSqliteStore
