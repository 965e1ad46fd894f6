"""Writes nomic-embed-text-v1.5 as an ONNX graph (float32), from its GGUF file alone.

    python export_nomic.py SOURCE.gguf DEST.onnx WORK_DIR

SOURCE is nomic-embed-text-v1.5.f16.gguf (GGUF v3, architecture `nomic-bert`), as GPT4All ships
it (models/manifest.toml says where the registry has it). No torch, no llama.cpp: the GGUF is
read with numpy (a header, typed key-value metadata, tensor descriptors, aligned raw arrays), and
the graph is written node by node with `onnx.helper`, as export_mpnet.py writes MPNet's. Its
vectors were checked against llama.cpp's own run of the same file (`llama-server --embeddings
--pooling mean`, the F16 weights): fixtures/embeddings/make_nomic_reference.py made the reference,
and crates/atlas-embed-onnx/tests/nomic_model.rs holds the built-in model to it.

The network is nomic-bert (the contrastors NomicBertModel, as llama.cpp's `nomic-bert` runs it):
- embeddings: word + token type 0 (no position table), LayerNorm (`token_embd_norm`);
- 12 layers, post-norm: qkv = x Wqkvᵀ (no bias), split into q, k, v of 12 heads of 64; rotary
  positions on q and k, NeoX style (the halves of each head rotated), base 1,000, position =
  the token's index; scores = q kᵀ / 8 + (1 - mask) * float32 min, softmax, · v, Woᵀ (no bias),
  residual, LayerNorm (`attn_output_norm`); SwiGLU: (x Wupᵀ) * silu(x Wgateᵀ), Wdownᵀ, residual,
  LayerNorm (`layer_output_norm`); every LayerNorm with the file's epsilon (1e-12).
The output `last_hidden_state` is [batch, sequence, 768]; pooling (mean) and the prefixes
(`search_query: `, `search_document: `) are the embedder's. F16 weights become float32 exactly.

Deterministic: the same file gives the same bytes.
"""
import pathlib
import struct
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

source, dest, work = (pathlib.Path(a) for a in sys.argv[1:4])

SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
TENSOR_TYPES = {0: np.float32, 1: np.float16}


def read_gguf(path: pathlib.Path):
    """The metadata and the tensors (numpy arrays, row-major: GGUF lists dimensions innermost first)."""
    buf = memoryview(np.memmap(path, dtype=np.uint8, mode="r"))
    pos = 0

    def take(fmt: str):
        nonlocal pos
        (value,) = struct.unpack_from("<" + fmt, buf, pos)
        pos += struct.calcsize("<" + fmt)
        return value

    def string() -> str:
        nonlocal pos
        n = take("Q")
        text = bytes(buf[pos : pos + n]).decode("utf-8")
        pos += n
        return text

    def value(kind: int):
        if kind in SCALARS:
            return take(SCALARS[kind])
        if kind == 8:
            return string()
        if kind == 9:
            item, count = take("I"), take("Q")
            return [value(item) for _ in range(count)]
        raise ValueError(f"GGUF value type {kind}")

    if bytes(buf[:4]) != b"GGUF":
        sys.exit(f"{path}: not a GGUF file")
    pos = 4
    version, tensor_count, kv_count = take("I"), take("Q"), take("Q")
    if version != 3:
        sys.exit(f"{path}: GGUF version {version}, expected 3")
    meta = {}
    for _ in range(kv_count):
        key = string()
        meta[key] = value(take("I"))
    descriptors = []
    for _ in range(tensor_count):
        name = string()
        dims = [take("Q") for _ in range(take("I"))]
        descriptors.append((name, dims, take("I"), take("Q")))
    alignment = meta.get("general.alignment", 32)
    start = (pos + alignment - 1) // alignment * alignment
    tensors = {}
    for name, dims, kind, offset in descriptors:
        count = int(np.prod(dims))
        array = np.frombuffer(buf, dtype=TENSOR_TYPES[kind], count=count, offset=start + offset)
        tensors[name] = array.reshape(list(reversed(dims))).astype(np.float32)
    return meta, tensors


meta, weights = read_gguf(source)
if meta.get("general.architecture") != "nomic-bert":
    sys.exit(f"{source}: architecture {meta.get('general.architecture')!r}, expected nomic-bert")
LAYERS = meta["nomic-bert.block_count"]
HIDDEN = meta["nomic-bert.embedding_length"]
HEADS = meta["nomic-bert.attention.head_count"]
EPS = float(np.float32(meta["nomic-bert.attention.layer_norm_epsilon"]))
BASE = meta["nomic-bert.rope.freq_base"]
MAX_TOKENS = meta["nomic-bert.context_length"]
HEAD = HIDDEN // HEADS
assert not meta.get("nomic-bert.attention.causal", False)

nodes, initializers = [], []


def constant(name: str, array) -> str:
    initializers.append(numpy_helper.from_array(np.asarray(array), name))
    return name


def node(op: str, inputs: list, output: str, **attributes) -> str:
    nodes.append(helper.make_node(op, inputs, [output], name=f"/{output}/{op}", **attributes))
    return output


def linear(x: str, name: str, out: str) -> str:
    """A bias-free Linear: MatMul with the transposed weight (GGUF keeps [out, in])."""
    w = constant(f"{name}_t", np.ascontiguousarray(weights[name].T))
    return node("MatMul", [x, w], out)


def layer_norm(x: str, prefix: str, out: str) -> str:
    scale = constant(f"{prefix}.weight", weights[f"{prefix}.weight"])
    bias = constant(f"{prefix}.bias", weights[f"{prefix}.bias"])
    return node("LayerNormalization", [x, scale, bias], out, axis=-1, epsilon=EPS)


def rotary_tables():
    """cos and sin of every position's angles, [MAX_TOKENS, HEAD]: the NeoX layout, each of the
    HEAD/2 frequencies twice (once per half of the head), computed in float64 and then rounded."""
    inverse = 1.0 / (BASE ** (np.arange(0, HEAD, 2, dtype=np.float64) / HEAD))
    angles = np.outer(np.arange(MAX_TOKENS, dtype=np.float64), inverse)
    angles = np.concatenate([angles, angles], axis=1)
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


constant("one_f", np.array(1.0, np.float32))
constant("float_min", np.array(np.finfo(np.float32).min, np.float32))
constant("sqrt_head", np.array(np.sqrt(HEAD), np.float32))
constant("heads_shape", np.array([0, 0, HEADS, HEAD], np.int64))
constant("hidden_shape", np.array([0, 0, HIDDEN], np.int64))
constant("zero_1d", np.array([0], np.int64))
constant("axis_0", np.array([0], np.int64))
constant("halves", np.array([HEAD // 2, HEAD // 2], np.int64))

# Embeddings: word + token type 0, LayerNorm.
words = constant("token_embd.weight", weights["token_embd.weight"])
node("Gather", [words, "input_ids"], "word_vectors", axis=0)
type_zero = constant("token_type_0", weights["token_types.weight"][0])
node("Add", ["word_vectors", type_zero], "embedding_sum")
hidden = layer_norm("embedding_sum", "token_embd_norm", "embeddings")

# The additive attention mask, [batch, 1, 1, keys].
node("Cast", ["attention_mask"], "mask_f", to=TensorProto.FLOAT)
node("Sub", ["one_f", "mask_f"], "mask_off")
node("Mul", ["mask_off", "float_min"], "mask_add_2d")
constant("mask_axes", np.array([1, 2], np.int64))
node("Unsqueeze", ["mask_add_2d", "mask_axes"], "mask_add")

# Rotary tables for this length, [1, 1, sequence, HEAD].
cos, sin = rotary_tables()
constant("rotary_cos", cos)
constant("rotary_sin", sin)
node("Shape", ["input_ids"], "length_1d", start=1, end=2)
constant("table_axes", np.array([0, 1], np.int64))
for table in ("cos", "sin"):
    node("Slice", [f"rotary_{table}", "zero_1d", "length_1d", "axis_0"], f"{table}_rows")
    node("Unsqueeze", [f"{table}_rows", "table_axes"], f"{table}_here")


def rotate(x: str, out: str) -> str:
    """x cos + rotate_half(x) sin, rotate_half(x) = (-x₂, x₁) of the two halves of each head."""
    nodes.append(helper.make_node("Split", [x, "halves"], [f"{out}_a", f"{out}_b"], name=f"/{out}/Split", axis=-1))
    node("Neg", [f"{out}_b"], f"{out}_b_neg")
    node("Concat", [f"{out}_b_neg", f"{out}_a"], f"{out}_half_turn", axis=-1)
    node("Mul", [x, "cos_here"], f"{out}_cos")
    node("Mul", [f"{out}_half_turn", "sin_here"], f"{out}_sin")
    return node("Add", [f"{out}_cos", f"{out}_sin"], out)


constant("qkv_split", np.array([HIDDEN, HIDDEN, HIDDEN], np.int64))
for i in range(LAYERS):
    p = f"blk.{i}"
    qkv = linear(hidden, f"{p}.attn_qkv.weight", f"l{i}_qkv")
    parts = [f"l{i}_{part}" for part in ("q", "k", "v")]
    nodes.append(helper.make_node("Split", [qkv, "qkv_split"], parts, name=f"/l{i}_qkv/Split", axis=-1))
    heads = {}
    for part, projected in zip(("q", "k", "v"), parts):
        node("Reshape", [projected, "heads_shape"], f"{projected}_heads")
        heads[part] = node("Transpose", [f"{projected}_heads"], f"{projected}_t", perm=[0, 2, 1, 3])
    q = rotate(heads["q"], f"l{i}_q_rotated")
    k = rotate(heads["k"], f"l{i}_k_rotated")
    node("Transpose", [k], f"l{i}_k_tt", perm=[0, 1, 3, 2])
    node("MatMul", [q, f"l{i}_k_tt"], f"l{i}_qk")
    node("Div", [f"l{i}_qk", "sqrt_head"], f"l{i}_scores_scaled")
    node("Add", [f"l{i}_scores_scaled", "mask_add"], f"l{i}_scores")
    node("Softmax", [f"l{i}_scores"], f"l{i}_probs", axis=-1)
    node("MatMul", [f"l{i}_probs", heads["v"]], f"l{i}_context_heads")
    node("Transpose", [f"l{i}_context_heads"], f"l{i}_context_t", perm=[0, 2, 1, 3])
    node("Reshape", [f"l{i}_context_t", "hidden_shape"], f"l{i}_context")
    attended = linear(f"l{i}_context", f"{p}.attn_output.weight", f"l{i}_attention_out")
    node("Add", [attended, hidden], f"l{i}_attention_residual")
    attention = layer_norm(f"l{i}_attention_residual", f"{p}.attn_output_norm", f"l{i}_attention")
    up = linear(attention, f"{p}.ffn_up.weight", f"l{i}_up")
    gate = linear(attention, f"{p}.ffn_gate.weight", f"l{i}_gate")
    node("Sigmoid", [gate], f"l{i}_gate_sigmoid")
    node("Mul", [gate, f"l{i}_gate_sigmoid"], f"l{i}_gate_silu")
    node("Mul", [up, f"l{i}_gate_silu"], f"l{i}_swiglu")
    out = linear(f"l{i}_swiglu", f"{p}.ffn_down.weight", f"l{i}_output")
    node("Add", [out, attention], f"l{i}_output_residual")
    hidden = layer_norm(f"l{i}_output_residual", f"{p}.layer_output_norm", f"l{i}_hidden")

nodes.append(helper.make_node("Identity", [hidden], ["last_hidden_state"], name="/last_hidden_state/Identity"))
graph = helper.make_graph(
    nodes,
    "nomic-embed-text-v1.5",
    [
        helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "sequence"]),
        helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "sequence"]),
    ],
    [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["batch", "sequence", HIDDEN])],
    initializers,
)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="atlas export_nomic.py")
model.ir_version = 8
onnx.checker.check_model(model, full_check=True)
dest.write_bytes(model.SerializeToString())
