"""The swap that runs langgraph-checkpoint's own store tests against ATLAS, as a user switching
would: the suite's `InMemoryStore` is `atlas.langgraph.AtlasStore` in a fresh space of its own
(a new file per store, as an in-memory store starts empty); nothing of the tests' assertions
changes. The tests listed in skips.txt are skipped with their reason; every other test must pass.
Copied as the suite's root conftest.py by `cargo xtask python-tests`."""

from __future__ import annotations


import langgraph.store.memory

from atlas.langgraph import AtlasStore
from skipped import pytest_collection_modifyitems, scratch_file  # noqa: F401 (a pytest hook)


class AtlasInMemoryStore(AtlasStore):
    """`InMemoryStore(index=..., ttl=...)` as an ATLAS space in a new temporary file."""

    def __init__(self, *, index=None, ttl=None, **_ignored):
        super().__init__(scratch_file("store.db"), index=index, ttl=ttl, sleep_cycle=False)


langgraph.store.memory.InMemoryStore = AtlasInMemoryStore
