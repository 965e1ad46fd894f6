"""The argument rules every door of ATLAS shares, as one table: each row is an operation, its
arguments as the JSON doors (HTTP, MCP, Python) take them, and the field its error must name.
clients/doors_check.py drives every row through the CLI, HTTP and MCP; the Python suite
(crates/atlas-py/tests/test_doors.py) drives the same rows through `atlas.Memory`. A rule that
holds at one door and not at another fails one of them.

`cli(op, args)` spells a row as `atlas` arguments (flags for options, `--scope key:value`)."""

LONG = "n" * 257

RULES = [
    # (what the rule says, operation, arguments, the field named)
    ("a memory has text", "remember", {"text": ""}, "text"),
    ("text is not only blanks", "remember", {"text": "   "}, "text"),
    ("a session that is given is not blank", "remember", {"text": "hi", "session": " "}, "scope.session"),
    ("a user id that is given is not blank", "remember", {"text": "hi", "scope": {"user": " "}}, "scope.user"),
    ("a speaker is a name (at most 256 characters)", "remember", {"text": "hi", "speaker": LONG}, "speaker"),
    ("a session is a name (at most 256 characters)", "remember", {"text": "hi", "session": LONG}, "scope.session"),
    ("a meta key is a name (at most 256 characters)", "remember", {"text": "hi", "meta": {LONG: 1}}, "meta"),
    ("a time is RFC 3339", "remember", {"text": "hi", "time": "yesterday"}, "time"),
    ("a query has words", "recall", {"query": "  "}, "query"),
    ("k is at least 1", "recall", {"query": "x", "k": 0}, "k"),
    ("since is RFC 3339", "recall", {"query": "x", "since": "soon"}, "since"),
    ("as_of is RFC 3339", "recall", {"query": "x", "as_of": "then"}, "as_of"),
    ("a kind is one ATLAS stores", "recall", {"query": "x", "kind": ["episode", "planet"]}, "kind[1]"),
    ("a recall's session that is given is not blank", "recall", {"query": "x", "scope": {"session": " "}}, "scope.session"),
    ("a recall's user id is a name (at most 256 characters)", "recall", {"query": "x", "scope": {"user": LONG}},
     "scope.user"),
    ("an id is a positive number", "get", {"id": 0}, "id"),
]


def cli(op, args):
    """`atlas` arguments for one operation (after `--db DB`)."""
    argv = [op]
    args = dict(args)
    positional = {"remember": "text", "recall": "query", "get": "id"}[op]
    argv.append(str(args.pop(positional)))
    for key, value in args.items():
        if key == "scope":
            for part, id_ in value.items():
                argv += ["--scope", f"{part}:{id_}"]
        elif key == "meta":
            import json

            argv += ["--meta", json.dumps(value)]
        elif isinstance(value, list):
            for item in value:
                argv += [f"--{key.replace('_', '-')}", str(item)]
        else:
            argv += [f"--{key.replace('_', '-')}", str(value)]
    return argv


def names_field(message, field):
    """Whether an error message names `field`: `field "k"` as ATLAS writes it, or the CLI's own
    name for it (the flag `--k`, `--as-of`, or the argument `<ID>`) where the command line parser
    refused the value before ATLAS saw it."""
    name = field.split(".")[-1].split("[")[0]
    flag = "--" + name.replace("_", "-")
    return f'field "{field}"' in message or flag in message or f"<{name.upper()}>" in message
