"""The native module inside a Python process's life: `os.fork()` (a child opens its own space;
one inherited from the parent says so instead of hanging), `multiprocessing` with the fork
start method, and Ctrl-C during a long native call."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import atlas

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork() on this platform")


def _child_result(pid: int, timeout: float = 60.0) -> int:
    """The child's exit status; a child still running after `timeout` is a hang (killed)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    raise AssertionError(f"the forked child hung for {timeout} s")


def test_a_forked_child_opens_its_own_space_and_is_told_about_the_inherited_one(tmp_path: Path):
    # Defect G of issue 48: a child calling any method (or opening a new Memory) hung in a futex.
    parent = atlas.Memory(tmp_path / "parent.db")
    parent.add("written by the parent", user_id="ann")
    assert parent.search("parent", user_id="ann")["results"]
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report through the pipe, never return into pytest
        code = 1
        try:
            report = []
            try:
                parent.stats()
                report.append("inherited: no error")
            except atlas.ClosedError as e:
                report.append("inherited: ClosedError " + ("fork" in str(e)) * "names fork")
            child = atlas.Memory(tmp_path / "child.db")
            child.add("written by the child", user_id="bob")
            hits = child.search("child", user_id="bob")["results"]
            report.append(f"own: {hits[0]['memory']}")
            shared = atlas.Memory(tmp_path / "parent.db")
            report.append(f"parent's file: {len(shared.get_all(user_id='ann')['results'])}")
            shared.close()
            child.close()
            os.write(write, "\n".join(report).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    assert _child_result(pid) == 0
    with os.fdopen(read) as pipe:
        assert pipe.read().splitlines() == [
            "inherited: ClosedError names fork",
            "own: written by the child",
            "parent's file: 1",
        ]
    # The parent's space is untouched by the child's life and death.
    assert [m["memory"] for m in parent.get_all(user_id="ann")["results"]] == ["written by the parent"]
    parent.close()


def _count_in_child(path: str, queue) -> None:
    with atlas.Memory(path) as m:
        m.add("from a worker", user_id="w", infer=False)
        queue.put(m.stats()["memories"])


def test_multiprocessing_with_the_fork_start_method(tmp_path: Path):
    with atlas.Memory(tmp_path / "pool.db") as m:
        m.add("before the workers", user_id="w", infer=False)
        context = multiprocessing.get_context("fork")
        queue = context.Queue()
        workers = [context.Process(target=_count_in_child, args=(str(tmp_path / "pool.db"), queue)) for _ in range(2)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(60)
            assert w.exitcode == 0, "a worker hung or failed"
        counts = sorted(queue.get(timeout=5) for _ in workers)
        assert counts[-1] == 3
        assert m.stats()["memories"] == 3


def test_ctrl_c_interrupts_a_long_native_call(tmp_path: Path):
    # Defect H of issue 48: flush_vectors() of 5,000 pending vectors ignored SIGINT for 60 s.
    script = textwrap.dedent(
        f"""
        import sys, time, atlas
        m = atlas.Memory({str(tmp_path / "long.db")!r}, sleep_cycle=False)
        for start in range(0, 5000, 1000):
            m.remember_many([{{"text": f"a note about topic {{i}} and its details"}} for i in range(start, start + 1000)])
        print("flushing", flush=True)
        started = time.monotonic()
        try:
            m.flush_vectors()
            print("finished", flush=True)
        except KeyboardInterrupt:
            print(f"interrupted after {{time.monotonic() - started:.1f}} s", flush=True)
        print(m.stats()["memories"], flush=True)
        """
    )
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "flushing"
    time.sleep(1.0)
    child.send_signal(signal.SIGINT)
    out, _ = child.communicate(timeout=30)
    lines = out.splitlines()
    assert lines[0].startswith("interrupted after "), lines
    assert float(lines[0].split()[2]) < 5.0, lines
    # Nothing written before was lost, and the space still answers.
    assert lines[1] == "5000"
