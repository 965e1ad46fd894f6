"""`atlas.langgraph.AtlasStore` against LangGraph itself: the store protocol (get, put, search
with a query and filters, list_namespaces, delete, TTL) and a compiled graph whose node reads
and writes the store."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path
from typing import TypedDict

import pytest

pytest.importorskip("langgraph", reason="LangGraph is not installed")

from langgraph.graph import END, START, StateGraph  # noqa: E402
from langgraph.store.base import BaseStore, GetOp, InvalidNamespaceError, Item, PutOp, SearchItem  # noqa: E402

import atlas  # noqa: E402
from atlas.langgraph import AtlasStore  # noqa: E402


@pytest.fixture()
def store(tmp_path: Path):
    s = AtlasStore(tmp_path / "store.db")
    yield s
    s.memory.close()


def test_put_get_overwrite_delete(store):
    assert isinstance(store, BaseStore)
    assert store.get(("users", "ann"), "prefs") is None
    store.put(("users", "ann"), "prefs", {"food": "pho", "colour": "green"})
    item = store.get(("users", "ann"), "prefs")
    assert isinstance(item, Item)
    assert (item.namespace, item.key, item.value) == (("users", "ann"), "prefs", {"food": "pho", "colour": "green"})
    created = item.created_at
    time.sleep(0.01)
    store.put(("users", "ann"), "prefs", {"food": "ramen", "colour": "green"})
    again = store.get(("users", "ann"), "prefs")
    assert again.value["food"] == "ramen"
    assert again.created_at == created and again.updated_at > again.created_at
    # The old version is history in ATLAS, never an item.
    assert len(store.search(("users", "ann"))) == 1
    store.put(("users", "bob"), "prefs", {"food": "pizza"})
    store.delete(("users", "ann"), "prefs")
    assert store.get(("users", "ann"), "prefs") is None
    assert store.get(("users", "bob"), "prefs").value == {"food": "pizza"}
    with pytest.raises(ValueError):
        store.put(("users", "a.b"), "k", {"x": 1})


def test_search_by_query_filter_prefix_and_pages(store):
    store.put(("memories", "ann"), "1", {"text": "Ann moved to Lisbon last spring", "kind": "place", "n": 1})
    store.put(("memories", "ann"), "2", {"text": "Ann plays the cello on Sundays", "kind": "hobby", "n": 2})
    store.put(("memories", "ann", "work"), "3", {"text": "Ann works at a bakery in Lisbon", "kind": "job", "n": 3})
    store.put(("memories", "bob"), "4", {"text": "Bob lives in Lisbon too", "kind": "place", "n": 4})
    hits = store.search(("memories", "ann"), query="which city does Ann live in?", limit=3)
    assert all(isinstance(h, SearchItem) and h.namespace[:2] == ("memories", "ann") for h in hits)
    assert hits[0].key in {"1", "3"} and hits[0].score is not None
    assert {h.key for h in hits} == {"1", "2", "3"}
    places = store.search(("memories",), query="Lisbon", filter={"kind": "place"})
    assert sorted(h.key for h in places) == ["1", "4"]
    big = store.search(("memories",), filter={"n": {"$gte": 3}})
    assert sorted(h.key for h in big) == ["3", "4"]
    everything = store.search(("memories",), limit=10)
    assert len(everything) == 4
    page = store.search(("memories",), limit=2, offset=2)
    assert [h.key for h in page] == [h.key for h in everything[2:4]]
    assert store.list_namespaces() == [("memories", "ann"), ("memories", "ann", "work"), ("memories", "bob")]
    assert store.list_namespaces(prefix=("memories", "ann")) == [("memories", "ann"), ("memories", "ann", "work")]
    assert store.list_namespaces(suffix=("work",)) == [("memories", "ann", "work")]
    assert store.list_namespaces(max_depth=1) == [("memories",)]


def test_a_replaced_value_no_longer_matches_its_old_words(store):
    # Defect A of issue 48: the new version of a key carried its old version as the turn it
    # followed, so searching the old words still found the key, above the others.
    store.put(("test",), "doc1", {"text": "zany zebra Xerxes"})
    store.put(("test",), "doc2", {"text": "something about dogs"})
    store.put(("test",), "doc3", {"text": "text about birds"})
    before = store.search(("test",), query="Zany Xerxes")
    assert before[0].key == "doc1"
    store.put(("test",), "doc1", {"text": "new text about dogs"})
    after = store.search(("test",), query="Zany Xerxes")
    assert next((r.score for r in after if r.key == "doc1"), 0.0) < before[0].score
    dogs = store.search(("test",), query="new text about dogs")
    assert dogs[0].key == "doc1"


def test_distinct_keys_with_the_same_text_are_distinct_items(store):
    # Defect B of issue 48: recall folded near-duplicates across keys, so three keys holding the
    # same text came back as one, and a filter could then match none.
    for n in range(3):
        store.put(("dupes",), f"k{n}", {"text": "the same note about the harbour", "n": n})
    found = store.search(("dupes",), query="note about the harbour")
    assert sorted(item.key for item in found) == ["k0", "k1", "k2"]
    assert [item.key for item in store.search(("dupes",), query="harbour note", filter={"n": 0})] == ["k0"]


def test_a_batch_checks_every_op_first_and_a_label_never_addresses_another_namespace(store):
    # Defect D of issue 48: GetOp(("foo.bar",), …) read the item under ("foo", "bar"), and a bad
    # PutOp raised a plain ValueError after the ops before it were written.
    store.put(("foo", "bar"), "key", {"v": 1})
    with pytest.raises(InvalidNamespaceError):
        store.batch([GetOp(("foo.bar",), "key")])
    with pytest.raises(InvalidNamespaceError):
        store.batch([PutOp(("ok",), "first", {"v": 1}), PutOp(("bad.label",), "second", {"v": 2})])
    assert store.get(("ok",), "first") is None, "nothing of a refused batch is written"
    with pytest.raises(InvalidNamespaceError):
        store.batch([PutOp((), "k", {"v": 1})])
    store.batch([PutOp(("langgraph", "internal"), "k", {"v": 3})])
    assert store.get(("langgraph", "internal"), "k").value == {"v": 3}


def test_a_filter_key_may_be_a_dotted_path_or_hold_hyphens_and_digits(store):
    # As LangGraph's SQLite store reads filters (its suite's test_filter_keys_with_hyphens_and_digits).
    store.put(("docs",), "hyphen", {"access-level": "public", "user": {"access-level": "nested"}})
    store.put(("docs",), "digit", {"123abc": "ok", "user": {"123abc": "ok2"}, "a.b": "literal"})
    assert [r.key for r in store.search(("docs",), filter={"access-level": "public"})] == ["hyphen"]
    assert [r.key for r in store.search(("docs",), filter={"user.access-level": "nested"})] == ["hyphen"]
    assert [r.key for r in store.search(("docs",), filter={"user.123abc": "ok2"})] == ["digit"]
    assert [r.key for r in store.search(("docs",), filter={"a.b": "literal"})] == ["digit"]


def test_concurrent_writes_to_one_key_leave_one_current_version(store):
    # Defect E of issue 48 (within one store): eight threads putting one new key left eight live
    # versions; a put racing a delete failed with a storage error.
    import threading

    def put(n: int) -> None:
        store.put(("race",), "key", {"text": f"value {n}", "n": n})

    threads = [threading.Thread(target=put, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [item.key for item in store.search(("race",))] == ["key"]
    assert store.get(("race",), "key").value["n"] in range(8)
    errors: list[BaseException] = []

    def churn(n: int) -> None:
        try:
            for i in range(5):
                if (n + i) % 2:
                    store.delete(("race",), "key")
                else:
                    store.put(("race",), "key", {"text": "again", "n": n})
        except BaseException as e:  # noqa: BLE001 - every failure is the finding
            errors.append(e)

    threads = [threading.Thread(target=churn, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(store.search(("race",))) <= 1


def test_ttl_none_under_a_default_ttl_never_expires(tmp_path):
    # Defect C of issue 48: put(..., ttl=None) under a default TTL still expired.
    store = AtlasStore(tmp_path / "ttl.db", ttl={"default_ttl": 0.001})
    try:
        store.put(("tmp",), "kept", {"x": 1}, ttl=None)
        store.put(("tmp",), "default", {"x": 2})
        time.sleep(0.1)
        assert store.get(("tmp",), "kept").value == {"x": 1}
        assert store.get(("tmp",), "default") is None
    finally:
        store.memory.close()


def test_index_fields_and_unindexed_items(tmp_path):
    store = AtlasStore(tmp_path / "indexed.db", index={"fields": ["title"]})
    store.put(("docs",), "a", {"title": "Quarterly billing report", "body": "numbers"})
    store.put(("docs",), "b", {"title": "Team offsite", "body": "billing is not discussed"}, index=False)
    found = [h.key for h in store.search(("docs",), query="billing report")]
    assert found == ["a"]
    assert {h.key for h in store.search(("docs",))} == {"a", "b"}
    store.memory.close()


def test_ttl_expires_items(store):
    store.put(("tmp",), "short", {"x": 1}, ttl=0.001)
    store.put(("tmp",), "long", {"x": 2}, ttl=60)
    time.sleep(0.1)
    assert store.sweep_ttl() == 1  # as LangGraph's SQL stores sweep
    assert store.sweep_ttl() == 0
    assert store.get(("tmp",), "short") is None
    assert store.get(("tmp",), "long").value == {"x": 2}
    assert [h.key for h in store.search(("tmp",))] == ["long"]


def test_a_read_refreshes_the_ttl_unless_told_not_to(tmp_path):
    # Defect C of issue 48: refresh_on_read and refresh_ttl were ignored.
    store = AtlasStore(tmp_path / "refresh.db", ttl={"default_ttl": 0.05, "refresh_on_read": True})
    try:
        store.put(("tmp",), "read", {"text": "read often"})
        store.put(("tmp",), "found", {"text": "found by search"})
        store.put(("tmp",), "peeked", {"text": "peeked at"})
        for second in range(4):  # 4 x 1 s: past the 3 s TTL, but never 3 s without a read
            time.sleep(1.0)
            assert store.get(("tmp",), "read") is not None
            if second < 2:
                assert store.get(("tmp",), "peeked", refresh_ttl=False) is not None
            assert [h.key for h in store.search(("tmp",), query="found by search", limit=1)] == ["found"]
        assert store.get(("tmp",), "peeked", refresh_ttl=False) is None
        assert store.get(("tmp",), "read").value == {"text": "read often"}
        assert store.get(("tmp",), "found") is not None
        time.sleep(3.2)
        assert store.get(("tmp",), "read") is None
        assert store.search(("tmp",), query="found by search") == []
    finally:
        store.memory.close()


def test_async_batch(store):
    async def main():
        await store.aput(("a",), "k", {"v": 1})
        got = await store.aget(("a",), "k")
        assert got.value == {"v": 1}
        hits = await store.asearch(("a",), query="v")
        assert [h.key for h in hits] == ["k"]

    asyncio.run(main())


def test_a_compiled_graph_remembers_across_threads_in_the_store(tmp_path):
    class State(TypedDict):
        user: str
        message: str
        reply: str

    def remember_and_recall(state: State, *, store: BaseStore) -> dict:
        namespace = ("memories", state["user"])
        store.put(namespace, str(len(store.search(namespace, limit=100))), {"text": state["message"]})
        hits = store.search(namespace, query=state["message"], limit=3)
        return {"reply": " | ".join(h.value["text"] for h in hits)}

    builder = StateGraph(State)
    builder.add_node("memory", remember_and_recall)
    builder.add_edge(START, "memory")
    builder.add_edge("memory", END)
    with atlas.Memory(tmp_path / "graph.db") as memory:
        graph = builder.compile(store=AtlasStore(memory=memory))
        graph.invoke({"user": "ann", "message": "I adopted a cat named Miso", "reply": ""})
        graph.invoke({"user": "bob", "message": "I am allergic to cats", "reply": ""})
        out = graph.invoke({"user": "ann", "message": "what is my pet called?", "reply": ""})
        assert "Miso" in out["reply"] and "allergic" not in out["reply"]
        # The same items are ATLAS memories: recall and explain see them.
        assert memory.recall("Miso", scope={"agent": "langgraph"})[0].text.endswith("Miso\"}")


def test_processes_putting_the_same_keys_leave_one_current_version_each(tmp_path: Path):
    # Defect E of issue 48, across processes: two stores on one file that put one key at once
    # both wrote, leaving two live versions (a store's lock covers its own process only).
    path = tmp_path / "shared.db"
    AtlasStore(path, sleep_cycle=False).memory.close()  # created once, before the writers race
    writer = (
        "import sys\n"
        "from atlas.langgraph import AtlasStore\n"
        "store = AtlasStore(sys.argv[1], sleep_cycle=False)\n"
        "for i in range(25):\n"
        "    for key in ('a', 'b', 'c'):\n"
        "        store.put(('shared',), key, {'writer': sys.argv[2], 'i': i})\n"
        "store.memory.close()\n"
    )
    writers = [subprocess.Popen([sys.executable, "-c", writer, str(path), str(n)]) for n in range(4)]
    assert [w.wait(timeout=300) for w in writers] == [0, 0, 0, 0]
    store = AtlasStore(path, sleep_cycle=False)
    try:
        for key in ("a", "b", "c"):
            holding = store.memory._space.latest(limit=50, kind=["episode"], current=True, agent="langgraph", user="shared", session=key)
            assert len(holding) == 1, (key, [h["meta"]["langgraph"]["value"] for h in holding])
            assert store.get(("shared",), key).value["i"] == 24
        assert sorted(i.key for i in store.search(("shared",))) == ["a", "b", "c"]
    finally:
        store.memory.close()
