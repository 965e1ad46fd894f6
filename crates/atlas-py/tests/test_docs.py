"""Every Python example of docs/PYTHON.md runs as written, each in a new directory. An example
that needs LangGraph or the Agents SDK runs in that suite's environment. `cargo xtask
python-tests` runs this file in each suite with ATLAS_DOCS_SUITE naming it (core, langgraph,
agents), so that each example runs once, in the suite of the framework it imports; without it,
every example runs, skipped where its framework is absent."""

from __future__ import annotations

import importlib.util
import os
import re
import runpy
from pathlib import Path

import pytest

DOCS = Path(os.environ.get("ATLAS_DOCS", Path(__file__).resolve().parents[3] / "docs"))
EXAMPLES = re.findall(r"```python\n(.*?)```", (DOCS / "PYTHON.md").read_text(), flags=re.S)
# What an example imports that the package does not bring: the integration's framework.
FRAMEWORKS = {"atlas.langgraph": "langgraph", "atlas.agents": "agents"}
SUITE = os.environ.get("ATLAS_DOCS_SUITE")


def suite_of(example: str) -> str:
    """The suite an example belongs to: its framework's, else core."""
    return next((framework for module, framework in FRAMEWORKS.items() if module in example), "core")


SELECTED = [i for i, example in enumerate(EXAMPLES) if SUITE is None or suite_of(example) == SUITE]


def test_the_guide_has_examples():
    assert len(EXAMPLES) >= 5
    assert SUITE in (None, "core", *FRAMEWORKS.values()), f"ATLAS_DOCS_SUITE={SUITE!r} names no suite"


@pytest.mark.parametrize("index", SELECTED)
def test_example_runs(index, tmp_path, monkeypatch, capsys):
    example = EXAMPLES[index]
    for module, framework in FRAMEWORKS.items():
        if module in example and importlib.util.find_spec(framework) is None:
            pytest.skip(f"{framework} is not installed here; its suite runs this example")
    monkeypatch.chdir(tmp_path)
    script = tmp_path / f"example_{index}.py"
    script.write_text(example)
    runpy.run_path(str(script), run_name="__main__")
    assert capsys.readouterr().out.strip(), "an example shows what it did"
