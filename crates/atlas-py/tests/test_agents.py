"""`atlas.agents.AtlasSession` under the OpenAI Agents SDK: the Session protocol, and a real
`Runner` with a scripted model (no network) that keeps its history in ATLAS."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

pytest.importorskip("agents", reason="the OpenAI Agents SDK is not installed")

from agents import Agent, Runner, set_tracing_disabled  # noqa: E402
from agents.items import ModelResponse  # noqa: E402
from agents.memory import Session  # noqa: E402
from agents.models.interface import Model  # noqa: E402
from agents.usage import Usage  # noqa: E402
from openai.types.responses import ResponseOutputMessage, ResponseOutputText  # noqa: E402

import atlas  # noqa: E402

# No network: traces are not exported.
set_tracing_disabled(True)

from atlas.agents import AtlasSession, item_text  # noqa: E402


class ScriptedModel(Model):
    """Answers from a script and records the input it was given."""

    def __init__(self, replies: list[str]) -> None:
        self.replies = list(replies)
        self.inputs: list[list] = []

    async def get_response(self, system_instructions, input, *args, **kwargs) -> ModelResponse:
        self.inputs.append(input if isinstance(input, list) else [{"role": "user", "content": input}])
        text = self.replies.pop(0)
        message = ResponseOutputMessage(
            id=f"msg_{len(self.inputs)}",
            content=[ResponseOutputText(text=text, type="output_text", annotations=[])],
            role="assistant",
            status="completed",
            type="message",
        )
        return ModelResponse(output=[message], usage=Usage(), response_id=None)

    def stream_response(self, *args, **kwargs):
        raise NotImplementedError("the tests do not stream")


def test_the_session_protocol(tmp_path: Path):
    async def main() -> None:
        with atlas.Memory(tmp_path / "s.db") as memory:
            session = AtlasSession("chat-1", memory=memory, user_id="ann")
            other = AtlasSession("chat-2", memory=memory, user_id="ann")
            assert isinstance(session, Session)
            assert await session.get_items() == []
            items = [
                {"role": "user", "content": "My cat is called Miso"},
                {"role": "assistant", "content": [{"type": "output_text", "text": "Lovely name!", "annotations": []}]},
                {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": "{\"q\": \"cats\"}"},
                {"type": "function_call_output", "call_id": "c1", "output": "cats purr"},
            ]
            await session.add_items(items)
            await other.add_items([{"role": "user", "content": "Unrelated chat"}])
            assert await session.get_items() == items
            assert await session.get_items(limit=2) == items[2:]
            assert await session.pop_item() == items[3]
            assert await session.get_items() == items[:3]
            found = await session.search("what is the cat called?", k=3)
            assert found[0].text == "My cat is called Miso"
            await session.clear_session()
            assert await session.get_items() == []
            assert await session.pop_item() is None
            assert await other.get_items() == [{"role": "user", "content": "Unrelated chat"}]

    asyncio.run(main())


def test_session_settings_give_the_default_limit_and_a_closed_session_refuses(tmp_path: Path):
    # Issue 48: `session_settings` raised TypeError and its limit was ignored; calls after
    # close() raised AtlasError where the SDK's sessions raise RuntimeError.
    from agents.memory import SessionSettings

    async def main() -> None:
        session = AtlasSession("chat-1", tmp_path / "s.db", session_settings=SessionSettings(limit=2))
        assert session.session_settings == SessionSettings(limit=2)
        items = [{"role": "user", "content": f"note {i}"} for i in range(4)]
        await session.add_items(items)
        assert await session.get_items() == items[2:]
        assert await session.get_items(limit=3) == items[1:]
        plain = AtlasSession("chat-1", memory=session.memory)
        assert plain.session_settings == SessionSettings() and len(await plain.get_items()) == 4
        shaped = AtlasSession("chat-1", memory=session.memory, session_settings={"limit": 1})
        assert shaped.session_settings == SessionSettings(limit=1)
        assert await shaped.get_items() == items[3:]
        session.close()
        for call in (session.get_items(), session.add_items(items), session.pop_item(), session.clear_session()):
            with pytest.raises(RuntimeError, match="closed"):
                await call

    asyncio.run(main())


def test_item_text():
    assert item_text({"role": "user", "content": "hi"}) == "hi"
    assert item_text({"type": "function_call", "name": "f", "arguments": "{}"}) == "f({})"
    assert item_text({"type": "reasoning", "id": "r1"}) == '{"id": "r1", "type": "reasoning"}'


def test_a_runner_keeps_its_history_in_atlas(tmp_path: Path):
    async def main() -> None:
        model = ScriptedModel(["Nice to meet you, Ann.", "You told me your name is Ann."])
        agent = Agent(name="assistant", instructions="Be brief.", model=model)
        session = AtlasSession("run-1", tmp_path / "runner.db", user_id="ann")
        first = await Runner.run(agent, "Hi, I am Ann.", session=session)
        assert first.final_output == "Nice to meet you, Ann."
        second = await Runner.run(agent, "What is my name?", session=session)
        assert second.final_output == "You told me your name is Ann."
        # The second call saw the first exchange, read back from ATLAS.
        texts = [item_text(i) for i in model.inputs[1]]
        assert texts[:3] == ["Hi, I am Ann.", "Nice to meet you, Ann.", "What is my name?"]
        history = await session.get_items()
        assert [item_text(i) for i in history] == [
            "Hi, I am Ann.", "Nice to meet you, Ann.", "What is my name?", "You told me your name is Ann."
        ]
        # A new session of the same user recalls the old one.
        later = AtlasSession("run-2", memory=session.memory, user_id="ann")
        assert await later.get_items() == []
        recalled = [h.text for h in await later.search("what is the user's name?", k=3)]
        assert "Hi, I am Ann." in recalled, recalled
        session.memory.close()

    asyncio.run(main())


def test_the_compaction_snapshot_replaces_only_an_unchanged_suffix(tmp_path: Path):
    # The SDK's automatic compaction (OpenAIResponsesCompactionSession) reads a snapshot of the
    # newest items and replaces their suffix with the compacted output; the Runner-level tests
    # that compact over a SQLiteSession (the peers' suite) need it.
    async def main() -> None:
        session = AtlasSession("compact", tmp_path / "compact.db", sleep_cycle=False)
        items = [{"role": "user", "content": f"turn {i}"} for i in range(5)]
        await session.add_items(items)
        snapshot = await session._get_compaction_snapshot(3)
        assert snapshot.items == items[2:] and snapshot.complete is False
        assert (await session._get_compaction_snapshot(5)).complete is True
        summary = [{"role": "assistant", "content": "compacted: turns 3 and 4"}]
        assert await snapshot.replace_suffix(1, summary) is True
        assert await session.get_items() == items[:3] + summary
        # A write after the snapshot was read: its suffix is no longer the newest, nothing changes.
        stale = await session._get_compaction_snapshot(2)
        await session.add_items([{"role": "user", "content": "late"}])
        assert await stale.replace_suffix(0, summary) is False
        assert len(await session.get_items()) == 5
        # An expired prefix is dropped with the suffix it precedes (the SDK's EncryptedSession).
        expired = lambda item: item["content"].startswith("turn")  # noqa: E731
        snapshot = await session._get_compaction_snapshot(1, prune_prefix=expired)
        assert await snapshot.replace_suffix(0, [{"role": "assistant", "content": "again"}]) is True
        assert [i["content"] for i in await session.get_items()] == ["compacted: turns 3 and 4", "again"]
        session.close()

    asyncio.run(main())


def test_add_items_takes_more_than_one_write_holds(tmp_path: Path):
    async def main() -> None:
        session = AtlasSession("long", tmp_path / "long.db", sleep_cycle=False)
        items = [{"role": "user", "content": f"message {i}"} for i in range(2300)]
        await session.add_items(items)
        assert await session.get_items() == items
        assert await session.get_items(limit=2) == items[-2:]
        session.close()

    asyncio.run(main())
