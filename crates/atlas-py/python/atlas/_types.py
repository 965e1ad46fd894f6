"""The typed values of ATLAS's own API: a scope, a recall's hits, and how times are written."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Union, overload


@dataclass(frozen=True)
class Scope:
    """Who a memory belongs to. Recall looks only inside the scope it is given; a part left
    out matches any value."""

    user: str | None = None
    agent: str | None = None
    session: str | None = None

    def as_dict(self) -> dict[str, str]:
        return {k: v for k, v in (("user", self.user), ("agent", self.agent), ("session", self.session)) if v is not None}


ScopeLike = Union[Scope, Mapping[str, Any], None]


def scope_dict(scope: ScopeLike) -> dict[str, str] | None:
    """A scope as the native layer takes it (None when empty); a mapping may only name user,
    agent and session."""
    if scope is None:
        return None
    if isinstance(scope, Scope):
        parts = scope.as_dict()
    else:
        unknown = sorted(set(scope) - {"user", "agent", "session"})
        if unknown:
            from ._errors import InvalidInput

            error = InvalidInput(f"scope: unknown part {unknown[0]!r} (expected user, agent or session)")
            error.field = f"scope.{unknown[0]}"
            raise error
        parts = {k: v for k, v in scope.items() if v is not None}
    return parts or None


def rfc3339(value: datetime | str | None) -> str | None:
    """A time as ATLAS reads it: RFC 3339. A datetime without a time zone is taken as UTC."""
    if value is None or isinstance(value, str):
        return value
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return value.isoformat()


def parse_time(value: str | None) -> datetime | None:
    if value is None:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


@dataclass(frozen=True)
class Hit:
    """One recalled memory: what it says, why it came back (`score`, each signal's `ranks`,
    and with `explain=True` each signal's contribution), and the rest of its record."""

    id: int
    text: str
    kind: str
    score: float
    scope: Scope
    time: datetime
    recorded_at: datetime
    speaker: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    ranks: dict[str, int] = field(default_factory=dict)
    explain: dict[str, dict[str, float]] | None = None
    sources: list[dict[str, Any]] = field(default_factory=list)
    duplicates: list[int] = field(default_factory=list)
    valid_from: datetime | None = None
    valid_until: datetime | None = None
    confidence: float | None = None
    body: dict[str, Any] | None = None
    record: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    #: For a memory longer than a turn (100 words), the part the query matched:
    #: {"start", "end", "text"}, offsets in code points of `text`; None when all of it did.
    passage: dict[str, Any] | None = None

    @classmethod
    def from_record(cls, r: dict[str, Any]) -> Hit:
        scope = r.get("scope") or {}
        return cls(
            id=r["id"],
            text=r["text"],
            kind=r["kind"],
            score=r.get("score", 0.0),
            scope=Scope(scope.get("user"), scope.get("agent"), r.get("session")),
            time=parse_time(r["time"]),  # type: ignore[arg-type]
            recorded_at=parse_time(r["recorded_at"]),  # type: ignore[arg-type]
            speaker=r.get("speaker"),
            meta=r.get("meta") or {},
            ranks=r.get("ranks") or {},
            explain=r.get("explain"),
            sources=r.get("sources") or [],
            duplicates=r.get("duplicates") or [],
            passage=r.get("passage"),
            valid_from=parse_time(r.get("valid_from")),
            valid_until=parse_time(r.get("valid_until")),
            confidence=r.get("confidence"),
            body=r.get("body"),
            record=r,
        )


@dataclass(frozen=True)
class Recall(Sequence[Hit]):
    """A recall's hits, best first, with what it took and which signals ran."""

    hits: list[Hit]
    took_ms: float
    signals: dict[str, dict[str, Any]]
    stages: dict[str, float]
    pending_vectors: int | None

    @classmethod
    def from_answer(cls, answer: dict[str, Any]) -> Recall:
        return cls(
            hits=[Hit.from_record(h) for h in answer["hits"]],
            took_ms=answer["took_ms"],
            signals=answer["signals"],
            stages=answer["stages"],
            pending_vectors=answer.get("pending_vectors"),
        )

    @overload
    def __getitem__(self, index: int) -> Hit: ...
    @overload
    def __getitem__(self, index: slice) -> list[Hit]: ...
    def __getitem__(self, index: int | slice) -> Hit | list[Hit]:
        return self.hits[index]

    def __len__(self) -> int:
        return len(self.hits)

    def __iter__(self) -> Iterator[Hit]:
        return iter(self.hits)
