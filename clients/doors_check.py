"""One set of argument rules and one answer shape at every door of ATLAS.

Usage: doors_check.py ATLAS_BINARY WORK_DIR

1. Every rule of clients/doors.py through the CLI (`atlas --db DB <op> ...`: refused, non-zero,
   the message naming the field), HTTP (`atlas serve`: 400 with `error.field`) and MCP (the
   official SDK over streamable HTTP: a tool error with `error.field`). Nothing refused is stored.
2. The CLI's `--json` against HTTP's answer for every operation both offer, on one space: the
   reads (recall, recall explained, get, explain, context, stats) compared value for value
   (times taken left out), the writes (remember, forget soft and hard, recover, feedback)
   compared in shape, each door acting on its own memory; an import and its replay, in shape.
Exits non-zero with a message on the first thing that is wrong; `cargo xtask clients` runs it in
the MCP SDK's environment.
"""

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import httpx2

sys.path.insert(0, str(Path(__file__).resolve().parent))
from doors import RULES, cli, names_field  # noqa: E402
from serving import check, free_port, wait_healthy  # noqa: E402
from mcp import Client  # noqa: E402

# Fields whose value is the time a call (or each of its stages) took, not the answer.
VOLATILE = {"took_ms", "stages"}

CONVERSATION = [
    {"session": "s1", "speaker": "Ann", "text": "I moved to Lisbon in May", "time": "2024-05-02T10:00:00Z"},
    {"session": "s1", "speaker": "Bo", "text": "How is the new flat?", "time": "2024-05-02T10:01:00Z"},
    {"session": "s1", "speaker": "Ann", "text": "Sunny, and my cat Miso loves the balcony", "time": "2024-05-02T10:02:00Z"},
    {"session": "s2", "speaker": "Ann", "text": "I am training for the Lisbon half marathon", "time": "2024-06-10T08:00:00Z"},
    {"session": "s2", "speaker": "Ann", "text": "Rust at work now, no more Python", "time": "2024-06-10T08:05:00Z",
     "scope": {"user": "ann"}},
]


def atlas_cli(atlas, db, argv, ok=True):
    done = subprocess.run([atlas, "--db", str(db), *argv], capture_output=True, text=True, timeout=120)
    if ok:
        check(done.returncode == 0, f"atlas {' '.join(argv)} failed: {done.stderr}")
    return done


def cli_json(atlas, db, argv):
    out = atlas_cli(atlas, db, ["--json", *argv]).stdout.strip().splitlines()
    check(len(out) == 1, f"atlas --json {' '.join(argv)} printed {len(out)} lines: {out}")
    return json.loads(out[0])


def without_volatile(value):
    """The answer without timings, its numbers to 6 significant digits: recency is scored from
    the clock, so two calls a second apart differ in the tenth digit."""
    if isinstance(value, dict):
        return {k: without_volatile(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [without_volatile(v) for v in value]
    if isinstance(value, float):
        return float(f"{value:.6g}")
    return value


def shape(value):
    """The answer with every scalar replaced by its type: what two answers about two different
    memories still share. A null stands for any value: a field a process has nothing for (the
    CLI's `stats` does not load the model, so its embedder is null) is still the same field."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [shape(v) for v in value[:1]]
    return None if value is None else type(value).__name__


def matching(a, b):
    if a is None or b is None:
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(matching(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(matching(x, y) for x, y in zip(a, b))
    return a == b


def same(what, cli_answer, http_answer, compare):
    a, b = compare(cli_answer), compare(http_answer)
    check(matching(a, b) if compare is shape else a == b, f"{what}: the CLI's --json and HTTP differ:\n  cli:  {json.dumps(a, sort_keys=True)}\n"
                  f"  http: {json.dumps(b, sort_keys=True)}")
    print(f"ok  {what}: the CLI's --json is HTTP's answer")


def http_call(http, op, args):
    if op == "remember":
        return http.post("/v1/remember", json=args)
    if op == "recall":
        return http.post("/v1/recall", json=args)
    if op == "get":
        return http.get(f"/v1/memories/{args['id']}")
    raise AssertionError(f"no HTTP call for {op}")


def rules_at_cli(atlas, db):
    for rule, op, args, field in RULES:
        done = atlas_cli(atlas, db, cli(op, args), ok=False)
        check(done.returncode != 0, f"CLI: {rule}: {op} {args} was accepted: {done.stdout}")
        check(names_field(done.stderr, field), f"CLI: {rule}: the error must name {field}: {done.stderr}")
    print(f"ok  CLI: {len(RULES)} argument rules refused, each naming its field")


def rules_at_http(http):
    for rule, op, args, field in RULES:
        answer = http_call(http, op, args)
        check(answer.status_code == 400, f"HTTP: {rule}: {op} {args} answered {answer.status_code} {answer.text}")
        error = answer.json()["error"]
        check(error.get("field") == field, f"HTTP: {rule}: the error must name {field}: {error}")
    print(f"ok  HTTP: {len(RULES)} argument rules refused with 400, each naming its field")


async def rules_at_mcp(url):
    async with Client(url) as client:
        for rule, op, args, field in RULES:
            result = await client.call_tool(op, args)
            check(result.is_error, f"MCP: {rule}: {op} {args} was accepted: {result.content}")
            error = result.structured_content or json.loads(result.content[0].text)
            check(error["error"].get("field") == field, f"MCP: {rule}: the error must name {field}: {error}")
    print(f"ok  MCP: {len(RULES)} argument rules refused as tool errors, each naming its field")


# Recalls are compared as of one fixed moment: the recency signal is a function of "now", which
# the two calls read a few milliseconds apart (its contribution then differs in the 6th digit).
AS_OF = "2100-01-01T00:00:00Z"


def shapes(atlas, db, http):
    exact = without_volatile
    for query, options in [("where does Ann live", {}), ("marathon", {"k": 3, "explain": True}),
                           ("cat", {"scope": {"session": "s1"}, "kind": ["episode"]})]:
        options = {**options, "as_of": AS_OF}
        argv = ["recall", query, "--k", str(options.get("k", 10)), "--as-of", AS_OF]
        argv += ["--explain"] if options.get("explain") else []
        for part, id_ in options.get("scope", {}).items():
            argv += ["--scope", f"{part}:{id_}"]
        for kind in options.get("kind", []):
            argv += ["--kind", kind]
        http_answer = http.post("/v1/recall", json={"query": query, "k": options.get("k", 10), **options}).json()
        same(f"recall {query!r} {options}", cli_json(atlas, db, argv), http_answer, exact)
    same("get 3", cli_json(atlas, db, ["get", "3"]), http.get("/v1/memories/3").json(), exact)
    same("explain 4", cli_json(atlas, db, ["explain", "4"]), http.get("/v1/memories/4/explain").json(), exact)
    same("context", cli_json(atlas, db, ["context", "moving house", "--session", "s1"]),
         http.post("/v1/context", json={"task": "moving house", "session": "s1"}).json(), exact)
    same("stats", cli_json(atlas, db, ["stats"]), http.get("/v1/stats").json(), shape)
    for again in [False, True]:
        turns = [{"session": "s4", "speaker": "Bo", "text": f"an imported turn {n}"} for n in range(3)]
        body = "".join(json.dumps(t) + "\n" for t in turns)
        (Path(db).parent / "more.jsonl").write_text(body)
        # The same content twice: the second time a replay, at both doors.
        cli_answer = cli_json(atlas, db, ["import", str(Path(db).parent / "more.jsonl")])
        http_body = body.replace("an imported turn", "a turn imported over HTTP")
        http_answer = http.post("/v1/import", content=http_body,
                                headers={"content-type": "application/x-ndjson"}).json()
        check(cli_answer.get("replayed") == again == http_answer.get("replayed"),
              f"import {'again' if again else 'once'}: replayed {cli_answer} / {http_answer}")
        same(f"import{' (a replay)' if again else ''}", cli_answer, http_answer, shape)
    remembered = cli_json(atlas, db, ["remember", "a note from the CLI", "--session", "s3", "--speaker", "Ann"])
    answer = http.post("/v1/remember", json={"text": "a note over HTTP", "session": "s3", "speaker": "Ann"}).json()
    same("remember", remembered, answer, shape)
    cli_id, http_id = remembered["id"], answer["id"]
    same("feedback", cli_json(atlas, db, ["feedback", str(cli_id), "--useful"]),
         http.post(f"/v1/memories/{http_id}/feedback", json={"useful": True}).json(), shape)
    same("forget", cli_json(atlas, db, ["forget", str(cli_id)]), http.delete(f"/v1/memories/{http_id}").json(), shape)
    same("recover", cli_json(atlas, db, ["recover", str(cli_id)]),
         http.post(f"/v1/memories/{http_id}/recover").json(), shape)
    same("forget --hard", cli_json(atlas, db, ["forget", str(cli_id), "--hard"]),
         http.delete(f"/v1/memories/{http_id}?hard=true").json(), shape)


async def main(atlas, work):
    work.mkdir(parents=True, exist_ok=True)
    db = work / "doors.db"
    lines = work / "conversation.jsonl"
    lines.write_text("".join(json.dumps(turn) + "\n" for turn in CONVERSATION))
    atlas_cli(atlas, db, ["import", str(lines)])
    atlas_cli(atlas, db, ["embed-pending"])
    stored = cli_json(atlas, db, ["stats"])
    rules_at_cli(atlas, db)
    port = free_port()
    server = subprocess.Popen([atlas, "--db", str(db), "serve", "--listen", f"127.0.0.1:{port}"])
    try:
        wait_healthy(server, port)
        with httpx2.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as http:
            rules_at_http(http)
            await rules_at_mcp(f"http://127.0.0.1:{port}/mcp")
            after = http.get("/v1/stats").json()
            check(after.get("memories") == stored.get("memories"),
                  f"a refused call stored something: {stored.get('memories')} -> {after.get('memories')}")
            print("ok  nothing refused was stored")
            shapes(atlas, db, http)
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    asyncio.run(main(sys.argv[1], Path(sys.argv[2])))
