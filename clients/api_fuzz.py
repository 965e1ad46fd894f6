"""ATLAS's HTTP API fuzzed by schemathesis against its own OpenAPI document (GET /openapi.json).

Usage: api_fuzz.py ATLAS_BINARY WORK_DIR

Makes a memory space WORK_DIR/fuzz.db (one memory in it), starts
`atlas --db WORK_DIR/fuzz.db serve --listen 127.0.0.1:PORT --token-file WORK_DIR/token` on a free
loopback port and, once /healthz answers, runs
`python -m schemathesis.cli run http://127.0.0.1:PORT/openapi.json -H 'Authorization: Bearer TOKEN'`
(with the right token, so generated requests reach the operations rather than stop at a 401 for
the malformed Authorization values schemathesis would make up from the document's bearer scheme)
with these checks on every response:
  not_a_server_error          no 5xx, except 503 (busy or timed out: the server's own back-pressure);
  status_code_conformance     the status is one the document lists for the operation;
  content_type_conformance    the Content-Type is one the document lists for that status;
  response_schema_conformance the body matches the document's schema for that status.
Every operation is tested, /v1/import too: this file registers a serializer for its
application/x-ndjson body (the generated string is sent as it is), so schemathesis can send one.
This file is also the run's hooks file (SCHEMATHESIS_HOOKS): the serializer is registered when
schemathesis imports it. Environment: ATLAS_FUZZ_EXAMPLES (test cases per operation and phase,
default 25), ATLAS_FUZZ_SEED (default 1: a run is repeatable), ATLAS_FUZZ_TIMEOUT (seconds for
the whole run, default 1200), ATLAS_FUZZ_WORKERS (schemathesis's workers, default 2). The server is always stopped at the end. Exits non-zero, after a
summary of what failed, on any failure; schemathesis's reports are left in WORK_DIR/report.
`cargo xtask ci` installs schemathesis (pinned, hashes verified, clients/schemathesis-requirements.txt)
into a virtual environment and runs this with its Python.
"""

import json
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

import schemathesis

# The sibling module of the checks (this folder is on sys.path when a script runs from it).
sys.path.insert(0, str(Path(__file__).resolve().parent))
from serving import check, free_port, wait_healthy  # noqa: E402

CHECKS = "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance"


@schemathesis.serializer("application/x-ndjson")
def ndjson(ctx, value):
    """/v1/import's body: the document gives it as one string of JSON Lines, sent as it is."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass")
    # Negative mode may generate a non-string: send it as a JSON line.
    return json.dumps(value).encode()


def config(work, examples):
    """schemathesis.toml for the run: 503 is not a server error here, and nothing is kept between runs."""
    path = work / "schemathesis.toml"
    path.write_text(
        "request-timeout = 30\n"
        "[generation]\n"
        f"max-examples = {examples}\n"
        'database = "none"\n'
        "[checks.not_a_server_error]\n"
        'expected-statuses = ["2xx", "3xx", "4xx", "503"]\n'
    )
    return path


def summary(report_path, code):
    """A few lines from schemathesis's JSON report: what failed, where, how often."""
    try:
        report = json.loads(report_path.read_text())
    except (OSError, ValueError) as e:
        print(f"api_fuzz: no JSON report ({e}); schemathesis exited with {code}")
        return
    ops, cases = report["operations"], report["test_cases"]
    print(f"api_fuzz: schemathesis {report['schemathesis_version']}, seed {report['seed']}, "
          f"{report['running_time']:.1f} s: {ops['tested']}/{ops['selected']} operations tested, "
          f"{cases['generated']} test cases, {cases['unique_failures']} unique failures, "
          f"{len(report['errors'])} kinds of error")
    for failure in report["failures"]:
        print(f"  FAIL {failure['title']} ({failure['count']}x): {', '.join(failure['operations'])}")
    for error in report["errors"]:
        print(f"  ERROR {error['title']} ({error['count']}x)")


def main(atlas, work):
    work.mkdir(parents=True, exist_ok=True)
    examples = int(os.environ.get("ATLAS_FUZZ_EXAMPLES", "25"))
    seed = os.environ.get("ATLAS_FUZZ_SEED", "1")
    timeout = float(os.environ.get("ATLAS_FUZZ_TIMEOUT", "1200"))
    # Two workers: the server answers one while schemathesis makes up the next case.
    workers = os.environ.get("ATLAS_FUZZ_WORKERS", "2")
    db = work / "fuzz.db"
    env = dict(os.environ, ATLAS_EMBEDDER="none", ATLAS_LOG=os.environ.get("ATLAS_LOG", "warn"))
    made = subprocess.run([atlas, "--db", str(db), "remember", "--session", "s1", "--speaker", "user", "--", "hello"],
                          env=env, capture_output=True, text=True)
    check(made.returncode == 0, f"atlas remember exited with {made.returncode}: {made.stderr.strip()}")

    token = secrets.token_hex(16)
    (work / "token").write_text(token + "\n")
    port = free_port()
    server = subprocess.Popen([atlas, "--db", str(db), "serve", "--listen", f"127.0.0.1:{port}",
                               "--token-file", str(work / "token")], env=env)
    try:
        wait_healthy(server, port)
        report_dir = work / "report"
        command = [
            sys.executable, "-m", "schemathesis.cli", "--config-file", str(config(work, examples)), "--no-color",
            "run", f"http://127.0.0.1:{port}/openapi.json",
            "-H", f"Authorization: Bearer {token}", "--checks", CHECKS,
            "--max-examples", str(examples), "--seed", seed, "--workers", workers,
            "--report", "json,junit,har", "--report-dir", str(report_dir),
            "--report-json-path", str(report_dir / "report.json"),
        ]
        print("$ " + " ".join(command).replace(token, "TOKEN"), flush=True)
        started = time.monotonic()
        try:
            code = subprocess.run(command, cwd=work, timeout=timeout,
                                  env=dict(os.environ, SCHEMATHESIS_HOOKS=str(Path(__file__).resolve()))).returncode
        except subprocess.TimeoutExpired:
            raise AssertionError(f"schemathesis did not finish within {timeout:.0f} s (ATLAS_FUZZ_TIMEOUT)")
        print(f"api_fuzz: schemathesis took {time.monotonic() - started:.1f} s", flush=True)
        summary(report_dir / "report.json", code)
        check(server.poll() is None, f"atlas serve died during the run (exit {server.returncode})")
        check(code == 0, f"schemathesis found failures (exit {code}); details above, reports in {report_dir}")
        print("ok  schemathesis: every operation of /openapi.json, no failure")
    finally:
        if server.poll() is None:
            server.terminate()
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    try:
        main(sys.argv[1], Path(sys.argv[2]))
    except AssertionError as e:
        sys.exit(f"FAILED: {e}")
