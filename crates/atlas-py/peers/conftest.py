"""The swap that runs a peer's own store tests against ATLAS, as a user switching would: the
suite's `InMemoryStore` is `atlas.langgraph.AtlasStore` in a fresh space of its own (a new file
per store, as an in-memory store starts empty); nothing of the tests' assertions changes. The
tests listed in skips.txt are skipped with their reason; every other test must pass."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import langgraph.store.memory
import pytest

from atlas.langgraph import AtlasStore


class AtlasInMemoryStore(AtlasStore):
    """`InMemoryStore(index=..., ttl=...)` as an ATLAS space in a new temporary file."""

    def __init__(self, *, index=None, ttl=None, **_ignored):
        folder = tempfile.mkdtemp(prefix="atlas-peer-")
        super().__init__(os.path.join(folder, "store.db"), index=index, ttl=ttl, sleep_cycle=False)


langgraph.store.memory.InMemoryStore = AtlasInMemoryStore


def _skips() -> dict[str, str]:
    listed = {}
    for line in (Path(__file__).parent / "skips.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            test, _, why = line.partition("  ")
            listed[test.strip()] = why.strip()
    return listed


def pytest_collection_modifyitems(config, items):
    skips = _skips()
    for item in items:
        why = skips.get(item.nodeid)
        if why:
            item.add_marker(pytest.mark.skip(reason=f"peers/skips.txt: {why}"))
