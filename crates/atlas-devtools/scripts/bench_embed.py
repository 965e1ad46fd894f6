#!/usr/bin/env python3
"""The Python side of `cargo xtask bench embed`: the same model files, tokenizer settings,
threads and batches through Python's onnxruntime + tokenizers. Prints one JSON object.

    bench_embed.py SENTENCES.json MODEL_DIR THREADS SPINNING(0|1) [--rss-only]
"""
import json
import statistics
import sys
import time

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

sentences = json.load(open(sys.argv[1]))
model_dir, threads, spinning = sys.argv[2], int(sys.argv[3]), sys.argv[4]
rss_only = "--rss-only" in sys.argv

tok = Tokenizer.from_file(model_dir + "/tokenizer.json")
tok.enable_truncation(max_length=256)
tok.enable_padding()  # to the longest text of each batch
opts = ort.SessionOptions()
opts.intra_op_num_threads = threads
opts.inter_op_num_threads = 1
opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
opts.add_session_config_entry("session.intra_op.allow_spinning", spinning)
sess = ort.InferenceSession(model_dir + "/model.onnx", opts, providers=["CPUExecutionProvider"])


def embed(texts):
    encs = tok.encode_batch(texts)
    ids = np.array([e.ids for e in encs], dtype=np.int64)
    mask = np.array([e.attention_mask for e in encs], dtype=np.int64)
    types = np.array([e.type_ids for e in encs], dtype=np.int64)
    hidden = sess.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": types})[0]
    m = mask[:, :, None].astype(np.float32)
    v = (hidden * m).sum(1) / np.maximum(m.sum(1), 1.0)
    return v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)


if rss_only:
    for i in range(0, len(sentences), 32):
        embed(sentences[i:i + 32])
    print(json.dumps({"embedded": len(sentences)}))
    sys.exit(0)

for s in sentences[:20]:
    embed([s])
single = []
for s in sentences[:200]:
    t = time.perf_counter()
    embed([s])
    single.append((time.perf_counter() - t) * 1e3)
batches = [sentences[i:i + 32] for i in range(0, 640, 32)]
t = time.perf_counter()
for b in batches:
    embed(b)
throughput = 640 / (time.perf_counter() - t)
single.sort()
print(json.dumps({"p50_ms": statistics.median(single), "p95_ms": single[int(0.95 * (len(single) - 1))],
                  "batch32_per_s": throughput}))
