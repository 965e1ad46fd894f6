"""The Python door keeps the argument rules every door shares: each row of clients/doors.py
(also driven through the CLI, HTTP and MCP by clients/doors_check.py) is refused by
`atlas.Memory` with `InvalidInput` naming the same field, and nothing refused is stored."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

import atlas

DOORS = Path(__file__).resolve().parents[3] / "clients" / "doors.py"
spec = importlib.util.spec_from_file_location("doors", DOORS)
doors = importlib.util.module_from_spec(spec)
spec.loader.exec_module(doors)


def call(memory: atlas.Memory, op: str, args: dict):
    args = dict(args)
    if op == "remember":
        return memory.remember(args.pop("text"), **args)
    if op == "recall":
        return memory.recall(args.pop("query"), **args)
    if op == "get":
        return memory.get_memory(args["id"])
    raise AssertionError(f"no Python call for {op}")


@pytest.mark.parametrize(("rule", "op", "args", "field"), doors.RULES, ids=[r[0] for r in doors.RULES])
def test_every_door_refuses_alike(tmp_path: Path, rule: str, op: str, args: dict, field: str):
    with atlas.Memory(tmp_path / "doors.db") as memory:
        memory.remember("a memory that was there before", session="s0")
        with pytest.raises(atlas.InvalidInput) as refused:
            call(memory, op, args)
        assert refused.value.field == field, f"{rule}: {refused.value} names {refused.value.field!r}"
        assert memory.stats()["memories"] == 1, f"{rule}: a refused call stored something"
