"""mem0's `filters`: entity ids become ATLAS's scope; every other key is a condition on a
memory's metadata (or on one of its fields), with mem0's operators."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._errors import InvalidInput

ENTITY_KEYS = {"user_id": "user", "agent_id": "agent", "run_id": "session"}
# mem0's wildcard: `{"key": "*"}` matches any value the memory has for the key.
WILDCARD = "*"
OPERATORS = {"eq", "ne", "in", "nin", "gt", "gte", "lt", "lte", "contains", "icontains"}


def invalid(field: str, message: str) -> InvalidInput:
    error = InvalidInput(f"{field}: {message}")
    error.field = field
    error.code = "invalid_input"
    return error


def split(
    filters: Mapping[str, Any] | None, **entities: str | None
) -> tuple[dict[str, str], dict[str, Any]]:
    """The scope that the entity ids (as keywords and inside `filters`) name, and the rest of
    the filters. The same id given twice with different values is an error."""
    if filters is not None and not isinstance(filters, Mapping):
        raise invalid("filters", f"expects a mapping of conditions, got {type(filters).__name__}")
    scope: dict[str, str] = {}
    for key, value in entities.items():
        if value is not None:
            if not isinstance(value, str) or not value.strip():
                raise invalid(key, "an entity id is a non-empty string")
            scope[ENTITY_KEYS[key]] = value
    rest: dict[str, Any] = {}
    for key, value in (filters or {}).items():
        if key in ENTITY_KEYS:
            if not isinstance(value, str) or not value.strip():
                raise invalid(f"filters.{key}", "an entity id is a non-empty string")
            if value == WILDCARD:
                # Any id, as long as there is one: a condition, not a scope.
                rest[key] = value
                continue
            part = ENTITY_KEYS[key]
            if scope.get(part, value) != value:
                raise invalid(f"filters.{key}", f"{value!r} differs from {key}={scope[part]!r}")
            scope[part] = value
        else:
            rest[key] = value
    return scope, rest


def matches(item: Mapping[str, Any], filters: Mapping[str, Any], path: str = "filters") -> bool:
    """Whether a mem0-shaped item passes `filters`: `AND`/`OR`/`NOT`, `key: value`, `key: "*"`
    (any value), and `key: {op: value}`; a key is looked up in the metadata first, then in the
    item."""
    for key, condition in filters.items():
        if key in ("AND", "OR"):
            if not isinstance(condition, list):
                raise invalid(f"{path}.{key}", "expects a list of filters")
            results = (matches(item, c, f"{path}.{key}[{i}]") for i, c in enumerate(condition))
            if not (all(results) if key == "AND" else any(results)):
                return False
        elif key == "NOT":
            conditions = condition if isinstance(condition, list) else [condition]
            if any(matches(item, c, f"{path}.NOT") for c in conditions):
                return False
        elif not _holds(_value(item, key), condition, f"{path}.{key}"):
            return False
    return True


_MISSING = object()


def _value(item: Mapping[str, Any], key: str) -> Any:
    metadata = item.get("metadata") or {}
    if key in metadata:
        return metadata[key]
    return item.get(key, _MISSING)


def _holds(value: Any, condition: Any, path: str) -> bool:
    if condition == WILDCARD:
        return value is not _MISSING and value is not None
    if not isinstance(condition, Mapping):
        return value is not _MISSING and value == condition
    for op, operand in condition.items():
        if op not in OPERATORS:
            raise invalid(f"{path}.{op}", f"unknown operator (expected one of {', '.join(sorted(OPERATORS))})")
        if value is _MISSING:
            if op in ("ne", "nin"):
                continue
            return False
        try:
            ok = {
                "eq": lambda: value == operand,
                "ne": lambda: value != operand,
                "in": lambda: value in operand,
                "nin": lambda: value not in operand,
                "gt": lambda: value > operand,
                "gte": lambda: value >= operand,
                "lt": lambda: value < operand,
                "lte": lambda: value <= operand,
                "contains": lambda: operand in value,
                "icontains": lambda: str(operand).lower() in str(value).lower(),
            }[op]()
        except TypeError as e:
            raise invalid(f"{path}.{op}", f"cannot compare {value!r} with {operand!r}: {e}") from None
        if not ok:
            return False
    return True
