"""The Python side of `cargo xtask bench python`: recall and search latency on a prepared space
beside the same recalls timed inside Rust in the same process (interleaved, query by query, so
that both see the same caches and the same machine), the throughput of 8 threads against one,
and `add` throughput on a new space. Prints one JSON object.
Usage: bench.py DB QUERIES_FILE WORK_DIR"""

from __future__ import annotations

import json
import statistics
import sys
import threading
import time
from pathlib import Path

import atlas


def p50(samples: list[float]) -> float:
    return statistics.median(samples)


def timed(call, *args, **kwargs) -> float:
    started = time.perf_counter()
    call(*args, **kwargs)
    return (time.perf_counter() - started) * 1e3


def throughput(memory: atlas.Memory, queries: list[str], threads: int, total: int) -> float:
    """Recalls per second when `threads` threads share `total` recalls of the queries."""
    next_index = iter(range(total))
    lock = threading.Lock()

    def work() -> None:
        while True:
            with lock:
                i = next(next_index, None)
            if i is None:
                return
            memory.recall(queries[i % len(queries)], k=10)

    workers = [threading.Thread(target=work) for _ in range(threads)]
    started = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return total / (time.perf_counter() - started)


def main() -> None:
    db, queries_file, work = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    queries = [q for q in queries_file.read_text().splitlines() if q.strip()]
    out: dict[str, float] = {}
    with atlas.Memory(db, sleep_cycle=False) as memory:
        memory.recall(queries[0], k=10)  # the first query loads the search caches
        rust, recall, search = [], [], []
        for q in queries:
            rust.extend(memory._space._recall_timings([q], 10))
            recall.append(timed(memory.recall, q, k=10))
            search.append(timed(memory.search, q, top_k=10))
        out["rust_p50_ms"] = p50(rust)
        out["recall_p50_ms"] = p50(recall)
        out["search_p50_ms"] = p50(search)
        total = len(queries) * 2
        out["one_thread_qps"] = throughput(memory, queries, 1, total)
        out["eight_threads_qps"] = throughput(memory, queries, 8, total)
    adds = 300
    with atlas.Memory(work / "adds.db", sleep_cycle=False) as memory:
        memory.add("warm up", user_id="bench")
        started = time.perf_counter()
        for i in range(adds):
            memory.add(f"{queries[i % len(queries)]} ({i})", user_id="bench")
        out["adds_per_s"] = adds / (time.perf_counter() - started)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
