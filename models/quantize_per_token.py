"""Makes an embedding model with integer kernels whose vectors do not depend on the batch.

    python quantize_per_token.py SOURCE.onnx DEST.onnx WORK_DIR [NODE ...]

NODEs (the names of MatMul nodes) stay float products.

quantize_dynamic.py quantises every matrix product's input with DynamicQuantizeLinear: one scale
and zero point for the whole [batch, sequence, hidden] tensor. A text's vector then depends on the
other texts of its batch and on their padding (cosine 0.9915 alone vs batched). This script makes
the same integer model, then gives every token its own activation scale, so each row of every
integer product is quantised from that row alone and a text gets the same vector, bit for bit,
whatever it is batched with.

1. Constant folding (ONNX Runtime, basic level: no fusions) and `quantize_dynamic` (int8 weights
   per output channel), exactly as quantize_dynamic.py.
2. Every DynamicQuantizeLinear becomes symmetric per-token quantisation:
       s = max(|x|) over the last axis / 127          (shape [batch, sequence, 1]; s > 0)
       q = QuantizeLinear(x, s, 128) as uint8         (round half to even, values 1..255)
   The zero point 128 is one scalar, as MatMulInteger requires; uint8 x int8 is the fast MLAS
   kernel (int8 x int8 ran 4x slower on ONNX Runtime 1.31.1's CPU provider). The product keeps
   its form, Cast(MatMulInteger(q, W)) * (s * w_scale), which ONNX Runtime fuses into
   MatMulIntegerToFloat and scales row by row.
3. Each bias Add after such a product becomes Sub(y, -bias) (bit-identical: negation is exact;
   a network without biases has none).
   ONNX Runtime 1.31.1 folds an Add of a constant bias into MatMulIntegerToFloat and then
   multiplies the bias by the per-row scale of A as well: wrong vectors (cosine 0.26).
4. The IsNaN -> Where guards after each attention Softmax (where the export wrote them) are removed: the attention mask adds
   -3.4e38, never -inf, so the Softmax never yields NaN and each guard passes its input through
   unchanged; removing them changes no output bit and saves ~15% of the run time.
5. Initializers no node reads any more (the biases, now entering negated) are dropped.

Deterministic for a given input and tool versions (onnxruntime, onnx, numpy).
"""
import pathlib
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper
from onnxruntime.quantization import QuantType, quantize_dynamic

source, dest, work = (pathlib.Path(a) for a in sys.argv[1:4])
folded = work / "folded.onnx"
dynamic = work / "dynamic.onnx"
options = ort.SessionOptions()
options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
options.optimized_model_filepath = str(folded)
ort.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])
quantize_dynamic(
    str(folded),
    str(dynamic),
    weight_type=QuantType.QInt8,
    per_channel=True,
    op_types_to_quantize=["MatMul", "Gather"],
    # The products a model's recipe keeps in float (the manifest's `arguments`): none for MiniLM
    # and MPNet; for nomic-bert, the attention inputs of its last layers (docs/EVAL.md's table).
    nodes_to_exclude=sys.argv[4:],
)

model = onnx.load(str(dynamic))
graph = model.graph
constants = {
    "per_token_floor": np.array(1e-30, np.float32),
    "per_token_127": np.array(127.0, np.float32),
    "per_token_zero_point": np.array(128, np.uint8),
    "per_token_rows": np.array([-1], np.int64),
}
graph.initializer.extend(numpy_helper.from_array(v, k) for k, v in constants.items())
zero_points = {}
nodes = []
for node in graph.node:
    if node.op_type != "DynamicQuantizeLinear":
        nodes.append(node)
        continue
    x = node.input[0]
    quantized, scale, zero_point = node.output
    zero_points[zero_point] = "per_token_zero_point"
    p = f"{x}_per_token"
    nodes += [
        helper.make_node("ReduceMax", [x], [f"{p}_max"], axes=[-1], keepdims=1),
        helper.make_node("ReduceMin", [x], [f"{p}_min"], axes=[-1], keepdims=1),
        helper.make_node("Neg", [f"{p}_min"], [f"{p}_neg_min"]),
        helper.make_node("Max", [f"{p}_max", f"{p}_neg_min", "per_token_floor"], [f"{p}_absmax"]),
        helper.make_node("Div", [f"{p}_absmax", "per_token_127"], [scale]),
        # QuantizeLinear takes a per-row scale on a 2-D tensor (axis 0): [tokens, hidden].
        helper.make_node("Shape", [x], [f"{p}_shape"]),
        helper.make_node("Shape", [x], [f"{p}_hidden"], start=-1),
        helper.make_node("Concat", ["per_token_rows", f"{p}_hidden"], [f"{p}_shape_2d"], axis=0),
        helper.make_node("Reshape", [x, f"{p}_shape_2d"], [f"{p}_2d"]),
        helper.make_node("Reshape", [scale, "per_token_rows"], [f"{p}_scale_1d"]),
        helper.make_node("Shape", [f"{p}_scale_1d"], [f"{p}_tokens"]),
        helper.make_node("Expand", ["per_token_zero_point", f"{p}_tokens"], [f"{p}_zero_point_1d"]),
        helper.make_node(
            "QuantizeLinear", [f"{p}_2d", f"{p}_scale_1d", f"{p}_zero_point_1d"], [f"{p}_quantized_2d"], axis=0
        ),
        helper.make_node("Reshape", [f"{p}_quantized_2d", f"{p}_shape"], [quantized]),
    ]
for node in nodes:
    for i, name in enumerate(node.input):
        if name in zero_points:
            node.input[i] = zero_points[name]

producer = {o: n for n in nodes for o in n.output}
initializers = {i.name: i for i in graph.initializer}
integer_products = {n.output[0] for n in nodes if n.op_type == "MatMulInteger"}


def scaled_product(name):
    """Whether `name` is Cast(MatMulInteger(...)) * (a_scale * b_scale)."""
    mul = producer.get(name)
    if mul is None or mul.op_type != "Mul":
        return False
    cast = [producer.get(i) for i in mul.input]
    return any(c is not None and c.op_type == "Cast" and c.input[0] in integer_products for c in cast)


negated_biases = 0
for node in nodes:
    if node.op_type == "Add" and len(node.input) == 2:
        product, bias = node.input
        if not scaled_product(product):
            product, bias = bias, product
        if scaled_product(product) and bias in initializers:
            negated = f"{bias}_negated"
            graph.initializer.append(numpy_helper.from_array(-numpy_helper.to_array(initializers[bias]), negated))
            node.op_type = "Sub"
            node.input[0], node.input[1] = product, negated
            negated_biases += 1

# The guards are dead only while every constant is finite (the mask's -3.4e38 included).
assert all(
    np.isfinite(numpy_helper.to_array(i)).all() for i in graph.initializer if i.data_type == onnx.TensorProto.FLOAT
)
guards = {}
for node in nodes:
    if node.op_type == "Where":
        test = producer.get(node.input[0])
        softmax = producer.get(node.input[2])
        if (
            test is not None
            and test.op_type == "IsNaN"
            and test.input[0] == node.input[2]
            and softmax is not None
            and softmax.op_type == "Softmax"
        ):
            guards[node.output[0]] = node.input[2]
nodes = [n for n in nodes if not (n.op_type == "Where" and n.output[0] in guards)]
nodes = [n for n in nodes if not (n.op_type == "IsNaN" and n.input[0] in guards.values())]
for node in nodes:
    for i, name in enumerate(node.input):
        if name in guards:
            node.input[i] = guards[name]

counts = {op: sum(n.op_type == op for n in nodes) for op in ("DynamicQuantizeLinear", "MatMulInteger", "Sub", "IsNaN")}
assert counts["DynamicQuantizeLinear"] == 0 and counts["IsNaN"] == 0, counts
# Every bias after an integer product now enters negated (a network without biases, such as
# nomic-bert, has none to negate).
left = [n.name for n in nodes if n.op_type == "Add" and any(scaled_product(i) for i in n.input)
        and any(i in initializers for i in n.input)]
assert counts["MatMulInteger"] > 0 and not left, (negated_biases, counts, left[:3])
del graph.node[:]
graph.node.extend(nodes)
# The biases now enter negated; the originals are left unused (ONNX Runtime warns at every load).
used = {name for n in nodes for name in n.input}
unused = [i for i in graph.initializer if i.name not in used]
for initializer in unused:
    graph.initializer.remove(initializer)
onnx.checker.check_model(model)
onnx.save(model, str(dest))
