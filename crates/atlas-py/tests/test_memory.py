"""The installed `atlas` package: mem0's API and shapes, ATLAS's own API, scopes, bad input,
threads and asyncio, the console script. Runs against the wheel in a fresh virtual
environment (`cargo xtask python-tests`), with the real embedding model."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

import atlas


@pytest.fixture()
def memory(tmp_path: Path):
    with atlas.Memory(tmp_path / "memory.db") as m:
        yield m


def test_the_package_is_typed_and_the_native_module_abi3():
    package = Path(atlas.__file__).parent
    assert (package / "py.typed").is_file()
    assert (package / "_native.pyi").is_file()
    native = [p.name for p in package.iterdir() if p.name.startswith("_native.")]
    assert any(n.endswith(".abi3.so") for n in native), native
    assert atlas.__version__


def test_add_then_search_in_mem0_shapes(memory):
    added = memory.add(
        [
            {"role": "user", "content": "I moved to Lisbon last spring and I love the trams."},
            {"role": "assistant", "content": "Lisbon is lovely. Do you still play the cello?"},
        ],
        user_id="ann",
        metadata={"source": "chat"},
    )
    assert [r["event"] for r in added["results"]] == ["ADD", "ADD"]
    assert all(isinstance(r["id"], str) for r in added["results"])
    found = memory.search("which city does she live in now?", user_id="ann", top_k=2)
    results = found["results"]
    assert 1 <= len(results) <= 2
    top = results[0]
    # The vector signal finds the move without a shared word: the write's vectors are searched.
    assert "Lisbon" in top["memory"]
    for key in ("id", "memory", "score", "metadata", "created_at", "updated_at", "user_id"):
        assert key in top, key
    assert top["user_id"] == "ann"
    assert top["metadata"] == {"source": "chat"}
    assert isinstance(top["score"], float)
    datetime.fromisoformat(top["created_at"].replace("Z", "+00:00"))


def test_entity_ids_as_keywords_or_in_filters_and_metadata_filters(memory):
    memory.add("Ann's favourite colour is green", user_id="ann", metadata={"topic": "taste", "n": 1})
    memory.add("Ann's favourite food is pho", user_id="ann", metadata={"topic": "food", "n": 2})
    memory.add("Bob's favourite colour is red", user_id="bob", metadata={"topic": "taste", "n": 3})
    by_keyword = memory.search("favourite colour", user_id="ann")["results"]
    in_filters = memory.search("favourite colour", filters={"user_id": "ann"})["results"]
    assert [r["id"] for r in by_keyword] == [r["id"] for r in in_filters]
    assert {r["user_id"] for r in by_keyword} == {"ann"}
    taste = memory.search("favourite", filters={"user_id": "ann", "topic": "taste"})["results"]
    assert [r["memory"] for r in taste] == ["Ann's favourite colour is green"]
    ops = memory.get_all(filters={"AND": [{"n": {"gte": 2}}, {"topic": {"in": ["taste", "food"]}}]})["results"]
    assert sorted(r["metadata"]["n"] for r in ops) == [2, 3]
    assert [r["memory"] for r in memory.get_all(filters={"NOT": {"topic": "taste"}})["results"]] == [
        "Ann's favourite food is pho"
    ]
    with pytest.raises(atlas.InvalidInput) as bad:
        memory.search("x", user_id="ann", filters={"user_id": "bob"})
    assert bad.value.field == "filters.user_id"
    with pytest.raises(atlas.InvalidInput) as bad:
        memory.get_all(filters={"n": {"between": [1, 2]}})
    assert bad.value.field == "filters.n.between"


def test_the_wildcard_matches_any_value_the_memory_has(memory):
    # mem0 parity (issue 48): `"*"` matched nothing.
    memory.add("Ann swims on Mondays", user_id="ann", metadata={"topic": "sport"}, infer=False)
    memory.add("Bo swims on Fridays", user_id="bo", infer=False)
    memory.add("The pool swims with ducks", agent_id="helper", infer=False)
    anyone = memory.search("swims", filters={"user_id": "*"})["results"]
    assert sorted(r["user_id"] for r in anyone) == ["ann", "bo"]
    tagged = memory.search("swims", filters={"user_id": "*", "topic": "*"})["results"]
    assert [r["memory"] for r in tagged] == ["Ann swims on Mondays"]
    # mem0 parity: explain=True says, per result, which signals found it (it was ignored).
    explained = memory.search("swims on Mondays", user_id="ann", explain=True)["results"][0]
    assert explained["explain"]["text"]["rank"] == 1 and "contribution" in explained["explain"]["text"]
    assert "explain" not in memory.search("swims", user_id="ann")["results"][0]


def test_scopes_are_isolated(memory):
    memory.add("my locker code is 4411", user_id="ann")
    memory.add("my locker code is 9090", user_id="bob")
    memory.add("run notes: deploy on friday", agent_id="planner", run_id="r1")
    ann = memory.search("locker code", user_id="ann")["results"]
    assert [r["memory"] for r in ann] == ["my locker code is 4411"]
    assert [r["memory"] for r in memory.get_all(agent_id="planner")["results"]] == ["run notes: deploy on friday"]
    assert memory.get_all(run_id="r1")["results"][0]["run_id"] == "r1"
    assert memory.get_all(user_id="carol")["results"] == []
    memory.delete_all(user_id="ann")
    assert memory.get_all(user_id="ann")["results"] == []
    assert len(memory.get_all(user_id="bob")["results"]) == 1


def test_get_update_history_delete_reset(memory):
    first = memory.add("I live in Berlin", user_id="ann")["results"][0]["id"]
    item = memory.get(first)
    assert item["memory"] == "I live in Berlin" and item["user_id"] == "ann"
    assert memory.get(int(first)) == item
    updated = memory.update(first, "I live in Vienna")
    assert updated["message"] == "Memory updated successfully!"
    second = updated["id"]
    assert memory.get(second)["memory"] == "I live in Vienna"
    # The old version no longer holds: search finds the new one only.
    found = [r["memory"] for r in memory.search("where do I live", user_id="ann")["results"]]
    assert found == ["I live in Vienna"]
    # The replaced version is history, not one of the user's memories.
    assert [r["memory"] for r in memory.get_all(user_id="ann")["results"]] == ["I live in Vienna"]
    for asked in (first, second):
        history = memory.history(asked)
        assert [(h["event"], h["old_memory"], h["new_memory"]) for h in history] == [
            ("ADD", None, "I live in Berlin"),
            ("UPDATE", "I live in Berlin", "I live in Vienna"),
        ]
    # ATLAS's own view: the new version replaced the old one, whose validity ended.
    explained = memory.explain(int(second))
    assert [r["text"] for r in explained["replaced"]] == ["I live in Berlin"]
    assert memory.delete(second) == {"message": "Memory deleted successfully!"}
    assert memory.get(second) is None
    memory.add("something else", user_id="bob")
    memory.reset()
    assert memory.stats()["memories"] == 0


def test_bad_input_names_the_field_and_stores_nothing(memory):
    with pytest.raises(atlas.InvalidInput) as bad:
        memory.add("no owner")
    assert bad.value.field == "user_id"
    with pytest.raises(atlas.InvalidInput) as bad:
        memory.add([{"role": "user", "content": "fine"}, {"role": "user", "content": 7}], user_id="ann")
    assert bad.value.field == "messages[1].content"
    with pytest.raises(atlas.InvalidInput) as bad:
        memory.remember_many([{"text": "ok"}, {"text": "bad time", "time": "yesterday"}])
    assert bad.value.field == "memories[1].time" and bad.value.index == 1
    with pytest.raises(atlas.InvalidInput) as bad:
        memory.recall("", k=3)
    assert bad.value.field == "query"
    with pytest.raises(atlas.InvalidInput) as bad:
        memory.recall("x", k=5, kind="feelings")
    assert bad.value.field == "kind[0]"
    with pytest.raises(atlas.InvalidInput):
        memory.get("not-an-id")
    with pytest.raises(atlas.NotFound) as missing:
        memory.explain(424242)
    assert missing.value.code == "not_found"
    assert isinstance(missing.value, atlas.AtlasError)
    assert memory.get("424242") is None
    # mem0 parity (issue 48): bad types name their field instead of a bare Exception.
    for call, field in [
        (lambda: memory.add("x", user_id=""), "user_id"),
        (lambda: memory.search("x", user_id="ann", filters="str"), "filters"),
        (lambda: memory.search("x", user_id="ann", top_k=2**70), "top_k"),
        (lambda: memory.search("x", user_id="ann", top_k=True), "top_k"),
        (lambda: memory.search("x", filters={"agent_id": " "}), "filters.agent_id"),
    ]:
        with pytest.raises(atlas.InvalidInput) as bad:
            call()
        assert bad.value.field == field
    assert memory.stats()["memories"] == 0


def test_metadata_nested_too_deep_is_refused_and_the_space_stays_readable(memory):
    # Defect F of issue 48: a value nested ~130 levels was stored, and every later read of the
    # space failed in the JSON reader. One rule at every door now refuses it (past 32 levels),
    # naming the field.
    memory.add("kept", user_id="ann", infer=False)
    deep: dict = {}
    inner = deep
    for _ in range(130):
        inner["x"] = {}
        inner = inner["x"]
    with pytest.raises(atlas.InvalidInput) as bad:
        memory.add("too deep", user_id="ann", metadata={"deep": deep}, infer=False)
    assert bad.value.field == "meta" and "nested" in str(bad.value)
    kept = memory.get_all(user_id="ann")["results"]
    assert [m["memory"] for m in kept] == ["kept"]
    assert memory.search("kept", user_id="ann")["results"]
    shallow = deep
    for _ in range(20):
        shallow = shallow["x"]
    shallow.clear()
    memory.add("deep enough", user_id="ann", metadata={"deep": deep}, infer=False)
    assert len(memory.get_all(user_id="ann")["results"]) == 2


def test_metadata_deep_enough_to_crash_or_holding_itself_is_invalid_input(memory):
    # Issue 69: 10,000 levels on the main thread, 900 in a thread of 512 KB and a dict that
    # contains itself all ended the interpreter with SIGSEGV (the conversion recursed first).
    memory.add("kept", user_id="ann", infer=False)
    deep: dict = {}
    inner = deep
    for _ in range(10_000):
        inner["x"] = {}
        inner = inner["x"]
    with pytest.raises(atlas.InvalidInput) as bad:
        memory.add("too deep", user_id="ann", metadata={"deep": deep}, infer=False)
    assert "nested more than" in str(bad.value) and bad.value.field.startswith("memories[0].meta.deep")
    circular: dict = {"a": 1}
    circular["self"] = circular
    with pytest.raises(atlas.InvalidInput) as bad:
        memory.remember("circular", meta={"c": circular})
    assert "contains itself" in str(bad.value) and bad.value.field == "meta.c.self"
    shared = [1, 2]
    memory.remember("shared twice is fine", meta={"a": shared, "b": shared})
    for value, why in [(float("nan"), "not a finite number"), ({1, 2}, "has no JSON form")]:
        with pytest.raises(atlas.InvalidInput) as bad:
            memory.remember("odd", meta={"v": value})
        assert why in str(bad.value) and bad.value.field == "meta.v"

    outcome: list = []

    def in_a_small_thread():
        nine_hundred: list = []
        inner = nine_hundred
        for _ in range(900):
            inner.append([])
            inner = inner[0]
        try:
            memory.remember("deep in a thread", meta={"deep": nine_hundred})
            outcome.append("stored")
        except atlas.InvalidInput as e:
            outcome.append(str(e))

    previous = threading.stack_size(512 * 1024)
    try:
        worker = threading.Thread(target=in_a_small_thread)
        worker.start()
        worker.join()
    finally:
        threading.stack_size(previous)
    assert len(outcome) == 1 and "nested more than" in outcome[0], outcome
    assert [m["memory"] for m in memory.get_all(user_id="ann")["results"]] == ["kept"]


def test_a_memory_id_is_an_integer_or_its_string_and_nothing_else(memory):
    # Issue 69: delete(7.7) deleted memory 7.
    kept = memory.remember("kept")
    for wrong in (kept + 0.7, float(kept), "7.7", True, None, [kept]):
        with pytest.raises(atlas.InvalidInput) as bad:
            memory.delete(wrong)
        assert bad.value.field == "memory_id", wrong
    assert memory.get(str(kept)) is not None
    memory.delete(str(kept))
    assert memory.get(kept) is None


def test_native_api_recall_explain_forget_recover(memory):
    ids = memory.remember_many(
        [
            {"text": "We chose Postgres for the billing service", "speaker": "user", "session": "s1"},
            {"text": "The billing service deploys every Tuesday", "speaker": "assistant", "session": "s1"},
        ]
    )
    noted = memory.remember(
        "Ann prefers tea", speaker="ann", scope=atlas.Scope(user="ann"), meta={"k": "v"},
        time=datetime(2024, 1, 2, tzinfo=timezone.utc),
    )
    answer = memory.recall("which database did we pick for billing?", k=2, explain=True)
    assert isinstance(answer, atlas.Recall) and isinstance(answer[0], atlas.Hit)
    assert answer[0].id == ids[0]
    assert answer[0].scope.session == "s1" and answer[0].speaker == "user"
    assert answer[0].explain and set(answer[0].explain) <= set(answer.signals)
    assert answer.took_ms >= 0
    tea = memory.recall("tea", scope={"user": "ann"})[0]
    assert tea.id == noted and tea.meta == {"k": "v"} and tea.time.year == 2024
    assert memory.recall("tea", scope={"user": "bob"}).hits == []
    assert noted not in [h.id for h in memory.recall("tea", until=datetime(2023, 1, 1))]
    assert memory.forget(noted)["forgotten"] == noted
    assert noted not in [h.id for h in memory.recall("tea")]
    assert memory.recover(noted)["how"] == "undeleted"
    assert memory.recall("tea")[0].id == noted
    assert memory.feedback(noted, useful=True)["useful"] is True
    assert memory.get_memory(noted)["text"] == "Ann prefers tea"
    assert memory.latest(scope={"session": "s1"}, limit=1)[0]["id"] == ids[1]
    context = memory.context("what do we know about billing?", budget=500)
    assert "billing" in context["text"]
    with pytest.raises(atlas.InvalidInput) as bad:
        memory.recall("x", scope={"team": "a"})
    assert bad.value.field == "scope.team"


def test_a_long_memory_says_which_part_matched(memory):
    filler = "the studio was quiet and the shelves were full of bowls " * 40
    long = f"Über die Glasur, café notes. {filler}Then the Zanzibar glaze crazed in the second firing. {filler}"
    long_id = memory.remember(long, speaker="assistant", session="s1")
    short_id = memory.remember("Zanzibar is an island", speaker="user", session="s2")
    hits = {h.id: h for h in memory.recall("why did the Zanzibar glaze craze?", k=5)}
    passage = hits[long_id].passage
    assert passage is not None and "Zanzibar glaze crazed" in passage["text"]
    assert hits[long_id].text[passage["start"]:passage["end"]] == passage["text"]  # characters, past "Ü"
    assert len(passage["text"].split()) == 100
    assert hits[short_id].passage is None


def test_infer_false_keeps_episodes_out_of_consolidation(memory):
    memory.add("I moved to Porto in 2021", user_id="ann", infer=False)
    report = memory.consolidate()
    assert report["not_inferred"] == 1
    assert report["facts_added"] == 0


def test_export_and_import_round_trip(memory, tmp_path):
    memory.add(["one thing", "another thing"], user_id="ann")
    out = tmp_path / "backup.jsonl"
    assert memory.export(out) == 2
    with atlas.Memory(tmp_path / "restored.db") as restored:
        answer = restored.import_(out)
        assert answer["restored"] is True and answer["imported"] == 2
        assert restored.import_(out)["replayed"] is True
        assert [r["memory"] for r in restored.get_all(user_id="ann")["results"]] == ["another thing", "one thing"]


def test_agent_memories(memory):
    trajectory = {
        "id": "t1",
        "task": "fill the enclosed region of a grid",
        "steps": ["find the border", "flood fill inside"],
        "output": "done",
        "success": True,
    }
    learned = memory.learn(trajectory)
    assert learned["experience"]
    assert memory.experiences("fill a region", k=1)[0]["task"] == "fill the enclosed region of a grid"
    assert isinstance(memory.strategies("fill a region"), list)
    assert isinstance(memory.concepts("fill a region"), list)


def test_one_memory_shared_by_eight_threads(memory):
    errors: list[BaseException] = []

    def work(t: int) -> None:
        try:
            for i in range(25):
                memory.add(f"thread {t} fact {i}", user_id=f"user{t}")
                memory.search(f"fact {i}", user_id=f"user{t}", top_k=3)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert memory.stats()["memories"] == 200
    for t in range(8):
        assert len(memory.get_all(user_id=f"user{t}", top_k=100)["results"]) == 25


def test_a_hundred_asyncio_tasks_and_the_loop_stays_free(tmp_path):
    async def main() -> None:
        async with atlas.AsyncMemory(tmp_path / "async.db") as m:
            ticks = 0
            stop = asyncio.Event()

            async def ticker() -> None:
                nonlocal ticks
                while not stop.is_set():
                    ticks += 1
                    await asyncio.sleep(0.001)

            beat = asyncio.create_task(ticker())

            async def one(i: int) -> None:
                await m.add(f"async note {i}", user_id=f"u{i % 5}")
                found = await m.search(f"async note {i}", user_id=f"u{i % 5}", top_k=1)
                assert found["results"]

            await asyncio.gather(*(one(i) for i in range(100)))
            stop.set()
            await beat
            assert (await m.stats())["memories"] == 100
            hits = await m.recall("async note 7", k=3)
            assert hits[0].text.startswith("async note")
            # The loop kept turning while ATLAS worked in other threads.
            assert ticks > 10

    asyncio.run(main())


def test_a_closed_memory_raises(tmp_path):
    m = atlas.Memory(tmp_path / "closed.db")
    m.close()
    with pytest.raises(atlas.ClosedError, match="closed") as closed:
        m.stats()
    # As the Agents SDK's sessions and sqlite3's closed connections raise it.
    assert isinstance(closed.value, RuntimeError) and isinstance(closed.value, atlas.AtlasError)
    assert closed.value.code == "closed"


def test_errors_are_the_builtin_exceptions_mem0_callers_catch(memory):
    # Issue 48: mem0 raises ValueError for a missing or bad id and for bad arguments.
    for call, kind in [
        (lambda: memory.update("999999", "x"), atlas.NotFound),
        (lambda: memory.delete("999999"), atlas.NotFound),
        (lambda: memory.history("999999"), atlas.NotFound),
        (lambda: memory.get("abc"), atlas.InvalidInput),
        (lambda: memory.search("x", user_id="a", top_k=0), atlas.InvalidInput),
        (lambda: memory.remember_many([{"text": "x", "time": "yesterday"}]), atlas.InvalidInput),
    ]:
        with pytest.raises(ValueError) as raised:
            call()
        assert type(raised.value) is kind and isinstance(raised.value, atlas.AtlasError)
    assert issubclass(atlas.ConfigError, ValueError)
    assert not issubclass(atlas.StorageError, ValueError)


def test_a_value_with_no_json_form_is_invalid_input_naming_where(memory):
    # Issue 48: bytes in metadata raised a bare Exception from the converter.
    memory.add("kept", user_id="ann", infer=False)
    for call, field in [
        (lambda: memory.add("x", user_id="ann", metadata={"b": b"raw"}), "memories[0].meta.b"),
        (lambda: memory.remember("x", meta={"when": {"at": [1, 2j]}}), "meta.when.at[1]"),
        (lambda: memory.remember("x", meta={3: "int key"}), "meta"),
        (lambda: memory.update(memory.get_all(user_id="ann")["results"][0]["id"], "y", metadata={"o": object()}), "meta.o"),
    ]:
        with pytest.raises(atlas.InvalidInput) as bad:
            call()
        assert bad.value.field == field, (bad.value.field, str(bad.value))
    assert [m["memory"] for m in memory.get_all(user_id="ann")["results"]] == ["kept"]


def test_expiration_date_hides_a_memory_after_that_day_as_mem0_does(memory):
    yesterday = (datetime.now(timezone.utc) - timedelta(days=1)).date()
    gone = memory.add("The parking pass for lot B", user_id="ann", expiration_date=yesterday)["results"][0]["id"]
    kept = memory.add("The parking pass for lot C", user_id="ann", expiration_date="2999-01-01")["results"][0]["id"]
    listed = [m["id"] for m in memory.get_all(user_id="ann")["results"]]
    assert listed == [kept]
    assert {m["id"] for m in memory.get_all(user_id="ann", show_expired=True)["results"]} == {gone, kept}
    assert [m["id"] for m in memory.search("parking pass", user_id="ann")["results"]] == [kept]
    assert memory.get(kept)["metadata"] == {"expiration_date": "2999-01-01"}
    # update(expiration_date=...) sets or clears it, keeping the text when none is given.
    cleared = memory.update(gone, expiration_date=None)["id"]
    assert memory.get(cleared)["memory"] == "The parking pass for lot B"
    assert memory.get(cleared)["metadata"] is None
    assert cleared in [m["id"] for m in memory.search("parking pass", user_id="ann")["results"]]
    with pytest.raises(atlas.InvalidInput) as bad:
        memory.add("x", user_id="ann", expiration_date="next week")
    assert bad.value.field == "expiration_date"
    with pytest.raises(atlas.InvalidInput) as bad:
        memory.update(kept)
    assert bad.value.field == "text"


def test_add_takes_more_messages_than_one_write_holds(memory):
    # mem0 takes any number; ATLAS writes 1,000 at a time, and a bad one is named in the call.
    messages = [{"role": "user", "content": f"note number {i}"} for i in range(2500)]
    added = memory.add(messages, user_id="ann", infer=False)["results"]
    assert len(added) == 2500 and len({a["id"] for a in added}) == 2500
    assert memory.stats()["memories"] == 2500
    with pytest.raises(atlas.InvalidInput) as bad:
        memory.add([{"role": "user", "content": "ok"}] * 1500 + [{"role": "user", "content": ""}], user_id="bob")
    assert (bad.value.index, bad.value.field) == (1500, "memories[500].text")


def test_a_file_that_is_not_atlas_is_refused_untouched(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("not a database\n" * 100)
    with pytest.raises(atlas.StorageError):
        atlas.Memory(path)
    assert path.read_text() == "not a database\n" * 100


def test_the_console_script_is_the_cli(tmp_path):
    script = Path(sys.executable).with_name("atlas")
    db = str(tmp_path / "cli.db")
    stored = subprocess.run([script, "--db", db, "remember", "the cli works", "--json"], capture_output=True, text=True)
    assert stored.returncode == 0, stored.stderr
    assert json.loads(stored.stdout)["id"] == 1
    with atlas.Memory(db) as m:
        assert m.get("1")["memory"] == "the cli works"
    refused = subprocess.run([script, "--no-such-flag"], capture_output=True, text=True)
    assert refused.returncode == 2 and "--no-such-flag" in refused.stderr
    missing = subprocess.run([script, "--db", str(tmp_path / "none.db"), "stats"], capture_output=True, text=True)
    assert missing.returncode == 1 and "error" in missing.stderr


def test_an_archived_memory_is_forgotten_from_python_and_the_cli(tmp_path):
    """Erasure does not depend on where a memory lives: one only the archive holds is
    forgotten softly and for good from Python and from the CLI (both answered "not found")."""
    script = Path(sys.executable).with_name("atlas")
    db = str(tmp_path / "archived.db")
    with atlas.Memory(db) as m:
        kept = m.remember("an old note about the garden")
        other = m.remember("an old note about the boat")
    done = subprocess.run([script, "--db", db, "archive", "--episodes-older-than", "0", "--json"],
                          capture_output=True, text=True)
    assert done.returncode == 0 and json.loads(done.stdout)["archived"] == 2, done.stderr
    archive = list((tmp_path / "archive").glob("*.jsonl.gz"))
    assert len(archive) == 1
    with atlas.Memory(db) as m:
        assert m.get(str(kept)) is None, "out of the store"
        assert m.forget(kept) == {"forgotten": kept, "hard": False}
        assert m.forget(kept, hard=True) == {"forgotten": kept, "hard": True, "archive_files": 1}
        with pytest.raises(atlas.NotFound):
            m.recover(kept)
    soft = subprocess.run([script, "--db", db, "forget", str(other), "--json"], capture_output=True, text=True)
    assert soft.returncode == 0 and json.loads(soft.stdout)["forgotten"] == other, soft.stderr
    hard = subprocess.run([script, "--db", db, "forget", str(other), "--hard", "--json"], capture_output=True, text=True)
    assert hard.returncode == 0 and json.loads(hard.stdout)["archive_files"] == 1, hard.stderr
    assert not archive[0].exists(), "the emptied archive file is removed"


def test_times_without_a_zone_are_utc(memory):
    naive = datetime(2025, 5, 1, 12, 0)
    memory.remember("a naive time", time=naive)
    hit = memory.recall("naive time")[0]
    assert hit.time == naive.replace(tzinfo=timezone.utc)
    assert memory.recall("naive time", since=naive + timedelta(seconds=1)).hits == []


def test_works_offline_once_the_model_is_cached(tmp_path):
    # ATLAS_FETCH=0 forbids any download: the cached, verified model and library must serve.
    script = (
        "import atlas, sys\n"
        "m = atlas.Memory(sys.argv[1])\n"
        "m.add('I keep bees on the roof', user_id='ann')\n"
        "hit = m.recall('what insects does she look after?', k=1)[0]\n"
        "assert hit.ranks.get('vector') == 1, hit\n"
        "print(m.stats()['embedder'])\n"
    )
    env = dict(os.environ, ATLAS_FETCH="0")
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "offline.db")], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip(), "the embedder is named"


def test_a_first_use_makes_no_model_and_builds_no_python_environment(tmp_path):
    # Issue 48: a new user's first Memory() downloaded the model's source and built a hidden
    # 203 MB Python environment to make the per-token model (31 s). The wheel carries the
    # default model's files now: with an empty cache and every fetch forbidden (the ONNX Runtime
    # library given by ORT_DYLIB_PATH), the first space embeds and finds by vector.
    prebuilt = Path(atlas.__file__).parent / "models"
    assert os.environ.get("ATLAS_PREBUILT_MODELS") == str(prebuilt), "atlas sets it on import"
    assert [p.name for p in prebuilt.iterdir()], "cargo xtask wheel puts the default model in the wheel"
    cache = Path(os.environ.get("ATLAS_CACHE_DIR") or Path.home() / ".cache" / "atlas")
    library = next(cache.glob("onnxruntime-*/libonnxruntime.so.*"))
    script = (
        "import time, sys\n"
        "started = time.monotonic()\n"
        "import atlas\n"
        "m = atlas.Memory(sys.argv[1])\n"
        "m.add('I keep bees on the roof', user_id='ann')\n"
        "hit = m.recall('what insects does she look after?', k=1)[0]\n"
        "assert hit.ranks.get('vector') == 1, hit\n"
        "print(f'{time.monotonic() - started:.2f}')\n"
    )
    fresh = tmp_path / "fresh-cache"
    env = dict(os.environ, ATLAS_CACHE_DIR=str(fresh), ATLAS_FETCH="0", ORT_DYLIB_PATH=str(library))
    env.pop("ATLAS_PREBUILT_MODELS", None)
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "first.db")], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    made = [p.name for p in fresh.iterdir()] if fresh.exists() else []
    assert not [name for name in made if "pyenv" in name or name == "models"], made


def test_importing_atlas_imports_no_framework():
    done = subprocess.run(
        [sys.executable, "-c", "import atlas, sys; print(sorted(m for m in ('langgraph', 'agents') if m in sys.modules))"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


class _Embeddings:
    """A small OpenAI-compatible embeddings endpoint (what Ollama serves under /v1): a bag of
    hashed words per input, and every request's path and body kept."""

    def __init__(self, dimension: int = 16):
        import http.server
        import zlib

        self.requests: list[tuple[str, dict]] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (the standard library's name)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append((self.path, body))
                data = []
                for i, text in enumerate(body["input"]):
                    vector = [0.0] * dimension
                    for word in text.lower().split():
                        vector[zlib.crc32(word.encode()) % dimension] += 1.0
                    vector[0] += 0.01
                    data.append({"object": "embedding", "index": i, "embedding": vector})
                answer = json.dumps({"object": "list", "data": data, "model": body["model"]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *_):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def test_mem0s_embedder_config_embeds_through_the_endpoint_it_names(tmp_path):
    endpoint = _Embeddings()
    config = {
        "embedder": {
            "provider": "ollama",
            "config": {"model": "nomic-embed-text", "ollama_base_url": f"http://127.0.0.1:{endpoint.port}", "embedding_dims": 16},
        },
        "vector_store": {"provider": "qdrant", "config": {}},
    }
    with atlas.Memory.from_config(config, tmp_path / "mem0.db") as m:
        m.add("I moved to Lisbon last spring", user_id="ann", infer=False)
        found = m.search("Where did Ann move?", user_id="ann")
        assert found["results"] and "Lisbon" in found["results"][0]["memory"]
        stats = m.stats()
        assert stats["embedder"].startswith("http:nomic-embed-text@127.0.0.1:"), stats["embedder"]
    paths = {path for path, _ in endpoint.requests}
    assert paths == {"/v1/embeddings"}, paths
    assert all(body["model"] == "nomic-embed-text" for _, body in endpoint.requests)


def test_a_mem0_config_atlas_cannot_map_is_refused_by_name(tmp_path):
    with pytest.raises(atlas.ConfigError) as raised:
        atlas.Memory(tmp_path / "x.db", config={"embedder": {"provider": "gemini", "config": {}}})
    assert "config.embedder.provider" in str(raised.value)
