"""The peers' tests that cannot hold for ATLAS, read from skips.txt (beside this file in the
suite's folder) and skipped with their reason, as a pytest hook each peer's conftest imports.
A line whose test id starts with a peer's sdist and a colon (`langgraph_checkpoint_sqlite-3.1.2:
tests/...`) is that peer's alone (two peers have a tests/test_store.py); `cargo xtask
python-tests` names the peer it runs in ATLAS_PEER. Also the scratch files the swaps open a
space in for a peer's ":memory:" store: one folder per test process, removed when it exits."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest


_SCRATCH = tempfile.mkdtemp(prefix="atlas-peers-")
atexit.register(shutil.rmtree, _SCRATCH, ignore_errors=True)


def scratch_file(name: str) -> str:
    """A path `name` in a new folder of its own, under the process's scratch folder."""
    return os.path.join(tempfile.mkdtemp(dir=_SCRATCH), name)


def _skips() -> dict[str, str]:
    peer = os.environ.get("ATLAS_PEER", "")
    listed = {}
    for line in (Path(__file__).parent / "skips.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            test, _, why = line.partition("  ")
            owner, colon, rest = test.strip().partition(":")
            if colon and not owner.startswith("tests/"):
                if owner != peer:
                    continue
                test = rest
            listed[test.strip()] = why.strip()
    return listed


def pytest_collection_modifyitems(config, items):
    skips = _skips()
    for item in items:
        # A parametrised test is listed once, by its name without the parameters.
        why = skips.get(item.nodeid) or skips.get(item.nodeid.split("[")[0])
        if why:
            item.add_marker(pytest.mark.skip(reason=f"peers/skips.txt: {why}"))
