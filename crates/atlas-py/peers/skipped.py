"""The peers' tests that cannot hold for ATLAS, read from skips.txt (beside this file in the
suite's folder) and skipped with their reason, as a pytest hook each peer's conftest imports."""

from __future__ import annotations

from pathlib import Path

import pytest


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
        # A parametrised test is listed once, by its name without the parameters.
        why = skips.get(item.nodeid) or skips.get(item.nodeid.split("[")[0])
        if why:
            item.add_marker(pytest.mark.skip(reason=f"peers/skips.txt: {why}"))
