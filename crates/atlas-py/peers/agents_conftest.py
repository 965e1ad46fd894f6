"""The swap that runs the OpenAI Agents SDK's own session tests against ATLAS, as a user
switching would: `SQLiteSession(session_id, db_path, session_settings=...)` is
`atlas.agents.AtlasSession` (in a new file for ":memory:", beside `db_path` otherwise);
nothing of the tests' assertions changes. The tests listed in skips.txt are skipped with their
reason; every other test must pass. Copied as the suite's root conftest.py by
`cargo xtask python-tests`."""

from __future__ import annotations


import agents
import agents.memory

from atlas.agents import AtlasSession
from skipped import pytest_collection_modifyitems, scratch_file  # noqa: F401 (a pytest hook)


class AtlasAsSQLiteSession(AtlasSession):
    """`SQLiteSession` as an ATLAS space: one file per session store, as SQLite's."""

    def __init__(self, session_id, db_path=":memory:", session_settings=None, **_ignored):
        if str(db_path) == ":memory:":
            path = scratch_file("session.db")
        else:
            path = f"{db_path}.atlas"
        super().__init__(session_id, path, session_settings=session_settings, sleep_cycle=False)


agents.SQLiteSession = AtlasAsSQLiteSession
agents.memory.SQLiteSession = AtlasAsSQLiteSession
