"""Makes an embedding model whose matrix products run as integer kernels (MatMulInteger).

Run by the embedder's asset code (atlas-embed-onnx, assets.rs) when a model file of
models/manifest.toml says `derive`, in a virtual environment holding exactly the pinned `tools`
of that entry; the result is checked against the entry's sha256 before it enters the cache.

    python quantize_dynamic.py SOURCE.onnx DEST.onnx WORK_DIR

1. ONNX Runtime's basic graph optimisation (constant folding only, no fusions) folds the source's
   weight-only int8 initialisers (int8 -> Cast -> Mul) into float weights: the same numbers the
   source computes with.
2. ONNX Runtime's `quantize_dynamic` turns every MatMul with a constant weight into
   DynamicQuantizeLinear + MatMulInteger (int8 weights, per output channel) and the embedding
   tables into int8 Gather + DequantizeLinear. Per-channel scales keep the vectors within cosine
   0.99 of the float model (one scale per tensor gave 0.96).

Both steps are deterministic for a given input and tool versions.
"""
import pathlib
import sys

import onnxruntime as ort
from onnxruntime.quantization import QuantType, quantize_dynamic

source, dest, work = (pathlib.Path(a) for a in sys.argv[1:4])
folded = work / "folded.onnx"
options = ort.SessionOptions()
options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
options.optimized_model_filepath = str(folded)
ort.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])
quantize_dynamic(
    str(folded),
    str(dest),
    weight_type=QuantType.QInt8,
    per_channel=True,
    op_types_to_quantize=["MatMul", "Gather"],
)
