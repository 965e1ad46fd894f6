"""ATLAS's exceptions, one class per error code of every door (docs/SERVER.md), raised by the
native module and the package alike. Each is an `AtlasError` (`.code`, `.field`, `.location`,
`.index`) and also the built-in exception a Python caller of mem0 or of a framework's store
catches for the same fault: input and missing ids are `ValueError`s, as mem0 raises them, and a
call on a closed space is a `RuntimeError`, as the Agents SDK's sessions raise it."""

from __future__ import annotations


class AtlasError(Exception):
    """An error of ATLAS: `.code`, `.field` and `.location` say what and where."""

    code: str = "internal"
    field: str | None = None
    location: str | None = None
    index: int | None = None


class InvalidInput(AtlasError, ValueError):
    """Input ATLAS refuses; `.field` names the field, `.location` where it was."""

    code = "invalid_input"


class NotFound(AtlasError, ValueError):
    """No memory has this id (or it was forgotten for good)."""

    code = "not_found"


class Forbidden(AtlasError):
    """The caller may not do this."""

    code = "forbidden"


class Conflict(AtlasError):
    """An idempotency key used before for another payload."""

    code = "conflict"


class Busy(AtlasError):
    """The store is busy (another writer); try again."""

    code = "busy"


class StorageError(AtlasError):
    """The store failed, or the file is not an ATLAS space, or is too new."""

    code = "storage"


class EmbeddingError(AtlasError):
    """The embedding model could not be loaded or run."""

    code = "embedding"


class ConfigError(AtlasError, ValueError):
    """The configuration is wrong."""

    code = "config"


class ClosedError(AtlasError, RuntimeError):
    """A call on a space after `close()`, or on a space opened before `os.fork()` in the child."""

    code = "closed"


__all__ = [
    "AtlasError",
    "Busy",
    "ClosedError",
    "ConfigError",
    "Conflict",
    "EmbeddingError",
    "Forbidden",
    "InvalidInput",
    "NotFound",
    "StorageError",
]
