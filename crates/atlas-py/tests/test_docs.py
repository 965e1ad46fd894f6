"""Every Python example of docs/PYTHON.md runs as written, each in a new directory."""

from __future__ import annotations

import os
import re
import runpy
from pathlib import Path

import pytest

DOCS = Path(os.environ.get("ATLAS_DOCS", Path(__file__).resolve().parents[3] / "docs"))
EXAMPLES = re.findall(r"```python\n(.*?)```", (DOCS / "PYTHON.md").read_text(), flags=re.S)


def test_the_guide_has_examples():
    assert len(EXAMPLES) >= 3


@pytest.mark.parametrize("index", range(len(EXAMPLES)))
def test_example_runs(index, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    script = tmp_path / f"example_{index}.py"
    script.write_text(EXAMPLES[index])
    runpy.run_path(str(script), run_name="__main__")
    assert capsys.readouterr().out.strip(), "an example shows what it did"
