"""Writes an MPNet sentence encoder as an ONNX graph, from its safetensors checkpoint alone.

    python export_mpnet.py SOURCE.zip DEST.onnx WORK_DIR

SOURCE is the sentence-transformers checkpoint zip (all-mpnet-base-v2/model.safetensors inside).
No torch: the graph is written node by node with `onnx.helper`, the weights read from the
safetensors file with numpy (an 8-byte length, a JSON header, raw little-endian arrays). Torch's
own export is 4 GB of CUDA wheels to install on a machine that only runs the result; this graph
gives the same vectors (checked against transformers' MPNetModel when this script was written:
cosine 1.0000000, largest difference 4e-6 over 200 texts).

The network is transformers' MPNetModel (modeling_mpnet.py), without dropout:
- embeddings: word + position, position = 1 + the token's count of unmasked tokens so far
  (transformers counts tokens that are not the pad id 1; the mask says the same for every text
  the tokenizer makes, and does not depend on which id pads the batch), LayerNorm (eps 1e-5);
- a relative position bias shared by every layer: bucket(k - q) of 32 buckets (16 a side, 8
  exact, logarithmic up to 128), looked up in `encoder.relative_attention_bias` per head; the
  bucket table is computed here for every length up to 512 and sliced at run time;
- 12 layers: scores = q kᵀ / 8 + bias + (1 - mask) * float32 min, softmax, · v, o, residual,
  LayerNorm; dense 3072, exact GELU (erf), dense 768, residual, LayerNorm.
The output `last_hidden_state` is [batch, sequence, 768]; pooling (mean) is the embedder's.

Deterministic: the same checkpoint gives the same bytes.
"""
import json
import math
import pathlib
import struct
import sys
import zipfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

source, dest, work = (pathlib.Path(a) for a in sys.argv[1:4])
CHECKPOINT = "all-mpnet-base-v2/model.safetensors"
LAYERS, HEADS, HIDDEN, BUCKETS, MAX_DISTANCE, MAX_TOKENS, EPS = 12, 12, 768, 32, 128, 512, 1e-5
HEAD = HIDDEN // HEADS
DTYPES = {"F32": np.float32, "I64": np.int64}


def read_safetensors(data: bytes) -> dict:
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + length])
    body = memoryview(data)[8 + length :]
    tensors = {}
    for name, spec in header.items():
        if name == "__metadata__":
            continue
        start, end = spec["data_offsets"]
        array = np.frombuffer(body[start:end], dtype=DTYPES[spec["dtype"]]).reshape(spec["shape"])
        tensors[name] = array.astype(array.dtype.newbyteorder("<"), copy=False)
    return tensors


with zipfile.ZipFile(source) as archive:
    weights = read_safetensors(archive.read(CHECKPOINT))


def relative_buckets(length: int) -> np.ndarray:
    """transformers' MPNetEncoder.relative_position_bucket for every (query, key) pair."""
    positions = np.arange(length, dtype=np.int64)
    n = -(positions[None, :] - positions[:, None])
    half = BUCKETS // 2
    result = (n < 0).astype(np.int64) * half
    n = np.abs(n)
    exact = half // 2

    def logarithmic(dtype):
        ratio = np.maximum(n, exact).astype(dtype) / dtype(exact)
        scaled = np.log(ratio) / dtype(math.log(MAX_DISTANCE / exact)) * dtype(half - exact)
        return np.minimum(exact + scaled.astype(np.int64), half - 1)

    # float32, as torch computes it; float64 gives the same buckets, so none sits on a rounding edge.
    large = logarithmic(np.float32)
    assert (large == logarithmic(np.float64)).all(), "a relative position bucket on a rounding edge"
    return result + np.where(n < exact, n, large)


nodes, initializers = [], []


def constant(name: str, array) -> str:
    initializers.append(numpy_helper.from_array(np.asarray(array), name))
    return name


def node(op: str, inputs: list, output: str, **attributes) -> str:
    nodes.append(helper.make_node(op, inputs, [output], name=f"/{output}/{op}", **attributes))
    return output


def linear(x: str, prefix: str, out: str) -> str:
    """A torch Linear as torch exports it: MatMul with the transposed weight, then Add the bias."""
    w = constant(f"{prefix}.weight_t", np.ascontiguousarray(weights[f"{prefix}.weight"].T))
    b = constant(f"{prefix}.bias", weights[f"{prefix}.bias"])
    return node("Add", [node("MatMul", [x, w], f"{out}_product"), b], out)


def layer_norm(x: str, prefix: str, out: str) -> str:
    scale = constant(f"{prefix}.weight", weights[f"{prefix}.weight"])
    bias = constant(f"{prefix}.bias", weights[f"{prefix}.bias"])
    return node("LayerNormalization", [x, scale, bias], out, axis=-1, epsilon=EPS)


# Shapes and small constants.
constant("one_f", np.array(1.0, np.float32))
constant("one_i", np.array(1, np.int64))
constant("float_min", np.array(np.finfo(np.float32).min, np.float32))
constant("sqrt_head", np.array(math.sqrt(HEAD), np.float32))
constant("sqrt_two", np.array(math.sqrt(2.0), np.float32))
constant("half", np.array(0.5, np.float32))
constant("heads_shape", np.array([0, 0, HEADS, HEAD], np.int64))
constant("hidden_shape", np.array([0, 0, HIDDEN], np.int64))
constant("zero_1d", np.array([0], np.int64))
constant("axis_0", np.array([0], np.int64))
constant("axis_1", np.array([1], np.int64))

# Embeddings.
mask_i = "attention_mask"
node("Cast", [mask_i], "mask_i64", to=TensorProto.INT64)
node("CumSum", ["mask_i64", "one_i"], "mask_count")
node("Mul", ["mask_count", "mask_i64"], "masked_count")
node("Add", ["masked_count", "one_i"], "position_ids")
words = constant("embeddings.word_embeddings.weight", weights["embeddings.word_embeddings.weight"])
places = constant("embeddings.position_embeddings.weight", weights["embeddings.position_embeddings.weight"])
node("Gather", [words, "input_ids"], "word_vectors", axis=0)
node("Gather", [places, "position_ids"], "position_vectors", axis=0)
node("Add", ["word_vectors", "position_vectors"], "embedding_sum")
hidden = layer_norm("embedding_sum", "embeddings.LayerNorm", "embeddings")

# The additive attention mask, [batch, 1, 1, keys].
node("Cast", [mask_i], "mask_f", to=TensorProto.FLOAT)
node("Sub", ["one_f", "mask_f"], "mask_off")
node("Mul", ["mask_off", "float_min"], "mask_add_2d")
constant("mask_axes", np.array([1, 2], np.int64))
node("Unsqueeze", ["mask_add_2d", "mask_axes"], "mask_add")

# The relative position bias, [1, heads, length, length].
constant("buckets", relative_buckets(MAX_TOKENS))
node("Shape", ["input_ids"], "length_1d", start=1, end=2)
node("Slice", ["buckets", "zero_1d", "length_1d", "axis_0"], "buckets_rows")
node("Slice", ["buckets_rows", "zero_1d", "length_1d", "axis_1"], "buckets_square")
table = constant("encoder.relative_attention_bias.weight", weights["encoder.relative_attention_bias.weight"])
node("Gather", [table, "buckets_square"], "bias_qkh", axis=0)
node("Transpose", ["bias_qkh"], "bias_hqk", perm=[2, 0, 1])
node("Unsqueeze", ["bias_hqk", "axis_0"], "position_bias")

for i in range(LAYERS):
    p = f"encoder.layer.{i}"
    heads = {}
    for part in ("q", "k", "v"):
        projected = linear(hidden, f"{p}.attention.attn.{part}", f"l{i}_{part}")
        node("Reshape", [projected, "heads_shape"], f"l{i}_{part}_heads")
        heads[part] = node("Transpose", [f"l{i}_{part}_heads"], f"l{i}_{part}_t", perm=[0, 2, 1, 3])
    node("Transpose", [heads["k"]], f"l{i}_k_tt", perm=[0, 1, 3, 2])
    node("MatMul", [heads["q"], f"l{i}_k_tt"], f"l{i}_qk")
    node("Div", [f"l{i}_qk", "sqrt_head"], f"l{i}_scores_scaled")
    node("Add", [f"l{i}_scores_scaled", "position_bias"], f"l{i}_scores_biased")
    node("Add", [f"l{i}_scores_biased", "mask_add"], f"l{i}_scores")
    node("Softmax", [f"l{i}_scores"], f"l{i}_probs", axis=-1)
    node("MatMul", [f"l{i}_probs", heads["v"]], f"l{i}_context_heads")
    node("Transpose", [f"l{i}_context_heads"], f"l{i}_context_t", perm=[0, 2, 1, 3])
    node("Reshape", [f"l{i}_context_t", "hidden_shape"], f"l{i}_context")
    attended = linear(f"l{i}_context", f"{p}.attention.attn.o", f"l{i}_attention_out")
    node("Add", [attended, hidden], f"l{i}_attention_residual")
    attention = layer_norm(f"l{i}_attention_residual", f"{p}.attention.LayerNorm", f"l{i}_attention")
    inner = linear(attention, f"{p}.intermediate.dense", f"l{i}_intermediate")
    node("Div", [inner, "sqrt_two"], f"l{i}_gelu_scaled")
    node("Erf", [f"l{i}_gelu_scaled"], f"l{i}_gelu_erf")
    node("Add", [f"l{i}_gelu_erf", "one_f"], f"l{i}_gelu_sum")
    node("Mul", [inner, f"l{i}_gelu_sum"], f"l{i}_gelu_product")
    node("Mul", [f"l{i}_gelu_product", "half"], f"l{i}_gelu")
    out = linear(f"l{i}_gelu", f"{p}.output.dense", f"l{i}_output")
    node("Add", [out, attention], f"l{i}_output_residual")
    hidden = layer_norm(f"l{i}_output_residual", f"{p}.output.LayerNorm", f"l{i}_hidden")

nodes.append(helper.make_node("Identity", [hidden], ["last_hidden_state"], name="/last_hidden_state/Identity"))
graph = helper.make_graph(
    nodes,
    "all-mpnet-base-v2",
    [
        helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "sequence"]),
        helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "sequence"]),
    ],
    [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["batch", "sequence", HIDDEN])],
    initializers,
)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="atlas export_mpnet.py")
model.ir_version = 8
onnx.checker.check_model(model, full_check=True)
dest.write_bytes(model.SerializeToString())
