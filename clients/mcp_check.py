"""ATLAS driven by the official MCP Python SDK (the `mcp` package), as an agent would use it.

Usage: mcp_check.py ATLAS_BINARY WORK_DIR

Connects twice, each time to a fresh memory space in WORK_DIR (made first with an empty import:
neither `mcp` nor `serve` creates a missing space):
  1. `atlas --db WORK_DIR/stdio.db mcp` over stdio (the SDK starts the process);
  2. `atlas --db WORK_DIR/http.db serve --listen 127.0.0.1:PORT`, at /mcp over streamable HTTP.
Each time: lists the tools and checks their schemas, remembers, recalls, gets, forgets, reads
the stats, and checks that bad input comes back as a tool error naming the field. Then, on the
running server, two tenants' keys are added from another process (`atlas keys add`): each
client, with its own bearer token, sees only its own memories through the tools, another's id
is not found, another's scope is refused, and a call without a token is refused. Exits non-zero
with a message on the first thing that is wrong. `cargo xtask clients` installs the SDK (pinned,
hashes verified) into a virtual environment and runs this; `cargo xtask ci` runs it too.
"""

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import httpx2

# The sibling module of the checks (this folder is on sys.path when a script runs from it).
sys.path.insert(0, str(Path(__file__).resolve().parent))
from serving import check, free_port, wait_healthy  # noqa: E402
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

REQUIRED_TOOLS = {"remember", "recall", "get", "forget", "stats"}


def structured(result):
    check(not result.is_error, f"tool error: {result.content}")
    if result.structured_content is not None:
        return result.structured_content
    return json.loads(result.content[0].text)


async def exercise(client, transport):
    tools = {t.name: t for t in (await client.list_tools()).tools}
    check(REQUIRED_TOOLS <= tools.keys(), f"{transport}: tools {sorted(tools)} lack {REQUIRED_TOOLS - tools.keys()}")
    recall_schema = tools["recall"].input_schema
    check(recall_schema.get("type") == "object" and "query" in recall_schema.get("required", []),
          f"{transport}: recall's input schema: {recall_schema}")
    check(len(tools["remember"].description or "") > 200, f"{transport}: remember needs a description a model can use")

    turns = [
        ("I moved to Lisbon in May", "s1"),
        ("My cat is called Miso", "s1"),
        ("I now write Rust for work, no more Python", "s2"),
    ]
    ids = []
    for text, session in turns:
        stored = structured(await client.call_tool(
            "remember", {"text": text, "speaker": "Ann", "session": session, "scope": {"user": "ann"}}))
        check(isinstance(stored.get("id"), int), f"{transport}: remember answered {stored}")
        ids.append(stored["id"])

    found = structured(await client.call_tool(
        "recall", {"query": "Where did Ann move?", "k": 3, "scope": {"user": "ann"}, "explain": True}))
    hits = found["hits"]
    check(hits and hits[0]["id"] == ids[0], f"{transport}: recall's first hit should be memory {ids[0]}: {hits}")
    check("explain" in hits[0] and "score" in hits[0], f"{transport}: a hit lacks explain or score: {hits[0]}")
    other = structured(await client.call_tool("recall", {"query": "Lisbon", "scope": {"user": "bob"}}))
    check(other["hits"] == [], f"{transport}: another user's scope must see nothing: {other['hits']}")

    memory = structured(await client.call_tool("get", {"id": ids[1]}))
    check(memory["text"] == "My cat is called Miso", f"{transport}: get answered {memory}")

    forgotten = structured(await client.call_tool("forget", {"id": ids[1]}))
    check(forgotten == {"forgotten": ids[1], "hard": False}, f"{transport}: forget answered {forgotten}")
    after = structured(await client.call_tool("recall", {"query": "cat Miso", "scope": {"user": "ann"}}))
    check(all(h["id"] != ids[1] for h in after["hits"]), f"{transport}: a forgotten memory came back: {after}")

    stats = structured(await client.call_tool("stats", {}))
    check(stats["memories"] == 3 and stats["soft_deleted"] == 1, f"{transport}: stats {stats}")

    bad = await client.call_tool("recall", {"query": "x", "k": 100000})
    check(bad.is_error, f"{transport}: k over the cap must be a tool error")
    error = bad.structured_content or json.loads(bad.content[0].text)
    check(error["error"]["field"] == "k", f"{transport}: the error must name the field k: {error}")
    unknown = await client.call_tool("remember", {"text": "x", "colour": "red"})
    check(unknown.is_error and "colour" in unknown.content[0].text, f"{transport}: unknown field: {unknown}")
    print(f"ok  {transport}: {len(tools)} tools; remember, recall (scoped, explained), get, forget, stats, bad input")


def tool_error(result):
    check(result.is_error, f"expected a tool error, got {result.content}")
    return (result.structured_content or json.loads(result.content[0].text))["error"]


def with_token(url, token):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return Client(streamable_http_client(url, http_client=httpx2.AsyncClient(headers=headers, timeout=30)))


async def tenants(atlas, db, url):
    def add_key(user):
        out = subprocess.run([atlas, "--db", str(db), "--json", "keys", "add", "--user", user, "--role", "write"],
                             capture_output=True, text=True, check=True)
        return json.loads(out.stdout)["token"]

    ann, bob = add_key("ann"), add_key("bob")
    async with with_token(url, ann) as client:
        stored = structured(await client.call_tool("remember", {"text": "Ann's door code is 4242", "session": "t"}))
        own = structured(await client.call_tool("get", {"id": stored["id"]}))
        check(own["scope"].get("user") == "ann", f"a tenant's memory takes its user: {own}")
    async with with_token(url, bob) as client:
        found = structured(await client.call_tool("recall", {"query": "door code 4242", "k": 50}))
        check("4242" not in json.dumps(found) and "Lisbon" not in json.dumps(found),
              f"bob's unscoped recall must not see ann's memories: {found}")
        check(tool_error(await client.call_tool("get", {"id": stored["id"]}))["code"] == "not_found",
              "another tenant's id is not found")
        check(tool_error(await client.call_tool("forget", {"id": stored["id"]}))["code"] == "not_found",
              "another tenant's memory cannot be forgotten")
        refused = tool_error(await client.call_tool("recall", {"query": "x", "scope": {"user": "ann"}}))
        check(refused["code"] == "forbidden" and refused["field"] == "scope.user", f"another's scope: {refused}")
        check(tool_error(await client.call_tool("stats", {}))["code"] == "forbidden", "stats cover every tenant")
    try:
        async with with_token(url, None) as client:
            await client.list_tools()
        check(False, "a call without a token must be refused once keys exist")
    except AssertionError:
        raise
    except Exception:
        pass
    print("ok  tenants over /mcp: keys added while serving; each sees only its own; another's id not found")


async def main(atlas, work):
    empty = work / "empty.jsonl"
    empty.write_text("")
    for db in ("stdio.db", "http.db"):
        subprocess.run([atlas, "--db", str(work / db), "import", str(empty)], check=True, capture_output=True)
    stdio = StdioServerParameters(command=atlas, args=["--db", str(work / "stdio.db"), "mcp"])
    async with Client(stdio) as client:
        await exercise(client, "stdio (atlas mcp)")

    port = free_port()
    server = subprocess.Popen([atlas, "--db", str(work / "http.db"), "serve", "--listen", f"127.0.0.1:{port}"])
    try:
        wait_healthy(server, port)
        async with Client(f"http://127.0.0.1:{port}/mcp") as client:
            await exercise(client, "streamable HTTP (atlas serve, /mcp)")
        await tenants(atlas, work / "http.db", f"http://127.0.0.1:{port}/mcp")
    finally:
        server.terminate()
        code = server.wait(timeout=30)
        check(code == 0, f"atlas serve should stop cleanly on SIGTERM, exited with {code}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    try:
        asyncio.run(main(sys.argv[1], Path(sys.argv[2])))
    except AssertionError as e:
        sys.exit(f"FAILED: {e}")
