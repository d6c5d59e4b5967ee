"""Tiny models of real families: a real tokenizer, the family's chat template, random weights.

``write_family_model`` copies every ``tokenizer.ggml.*`` key of one of llama.cpp's vocabulary
GGUFs (``tests/llama_sources.py``: the tokens, merges, token types, special ids and pre-tokenizer
of Llama 3, Qwen 2, DeepSeek, Gemma 4 ...) into a two-layer model of the given architecture and
sets ``tokenizer.chat_template`` to the family's template, so llama.cpp tokenizes, renders and
detokenizes exactly as for the real model while the weights stay a few MB. The vocabularies are
large (100k-262k tokens): the embedding is 64 wide, stored F16, and shared with the output layer
(llama.cpp ties them when ``output.weight`` is absent), so a file is 5-50 MB and loads in a second.

The metadata is read with a small reader of GGUF's key/value section of its own: ``gguf``'s
``GGUFReader`` maps every string of an array one by one (48 s for Gemma 4's 262k tokens and
515k merges on a busy 2-core machine; this reader takes about one).
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
from gguf import GGUFValueType, GGUFWriter

from tests.llama_sources import llama_vocab

#: struct formats of GGUF's scalar value types
_SCALARS = {GGUFValueType.UINT8: "<B", GGUFValueType.INT8: "<b", GGUFValueType.UINT16: "<H",
            GGUFValueType.INT16: "<h", GGUFValueType.UINT32: "<I", GGUFValueType.INT32: "<i",
            GGUFValueType.FLOAT32: "<f", GGUFValueType.BOOL: "<?", GGUFValueType.UINT64: "<Q",
            GGUFValueType.INT64: "<q", GGUFValueType.FLOAT64: "<d"}
_NUMPY = {GGUFValueType.UINT8: "<u1", GGUFValueType.INT8: "<i1", GGUFValueType.UINT16: "<u2",
          GGUFValueType.INT16: "<i2", GGUFValueType.UINT32: "<u4", GGUFValueType.INT32: "<i4",
          GGUFValueType.FLOAT32: "<f4", GGUFValueType.BOOL: "?", GGUFValueType.UINT64: "<u8",
          GGUFValueType.INT64: "<i8", GGUFValueType.FLOAT64: "<f8"}


def _string(f: BinaryIO) -> bytes:
    (n,) = struct.unpack("<Q", f.read(8))
    return f.read(n)


def _value(f: BinaryIO, vtype: GGUFValueType) -> tuple[Any, GGUFValueType | None]:
    """One value: (the value, the items' type for an array). Strings stay bytes."""
    if vtype == GGUFValueType.STRING:
        return _string(f), None
    if vtype != GGUFValueType.ARRAY:
        fmt = _SCALARS[vtype]
        return struct.unpack(fmt, f.read(struct.calcsize(fmt)))[0], None
    sub, n = struct.unpack("<IQ", f.read(12))
    sub = GGUFValueType(sub)
    if sub == GGUFValueType.STRING:
        return [_string(f) for _ in range(n)], sub
    dtype = np.dtype(_NUMPY[sub])
    return np.frombuffer(f.read(n * dtype.itemsize), dtype=dtype).tolist(), sub


def read_metadata(path: Path) -> dict[str, tuple[GGUFValueType, Any, GGUFValueType | None]]:
    """Every key of a GGUF file (version 2 or 3): key -> (type, value, items' type)."""
    out = {}
    with open(path, "rb") as f:
        magic, version, _n_tensors, n_kv = struct.unpack("<4sIQQ", f.read(24))
        if magic != b"GGUF" or version < 2:
            raise ValueError(f"{path} is not a GGUF file of version 2 or later")
        for _ in range(n_kv):
            key = _string(f).decode()
            (vtype,) = struct.unpack("<I", f.read(4))
            value, sub = _value(f, GGUFValueType(vtype))
            out[key] = (GGUFValueType(vtype), value, sub)
    return out


def _kept(m: np.ndarray, rows: int) -> np.ndarray:
    """A layer's output matrix that leaves the residual stream's first ``rows`` components alone."""
    m[:rows] = 0
    return m


def _tokenizer(vocab: str) -> tuple[dict, int]:
    """The ``tokenizer.ggml.*`` keys of llama.cpp's ``ggml-vocab-VOCAB.gguf`` and its size."""
    meta = read_metadata(llama_vocab(vocab))
    keys = {k: v for k, v in meta.items() if k.startswith("tokenizer.ggml.")}
    return keys, len(keys["tokenizer.ggml.tokens"][1])


def write_family_model(path: Path, vocab: str, template: str, arch: str = "llama", seed: int = 0,
                       n_layer: int = 2, n_embd: int = 64, n_head: int = 4, n_head_kv: int = 2, n_ff: int = 128,
                       ctx: int = 4096, scale: float = 0.3, answers_at_once: bool = False) -> Path:
    """A tiny ``arch`` model (``llama``, or ``qwen2``: biases on Q, K and V) with the tokenizer of
    llama.cpp's ``ggml-vocab-VOCAB.gguf`` and the chat template ``template`` (its text).

    ``answers_at_once``: whatever the prompt, the model's first token ends its turn (an empty
    answer, greedy or sampled), for a client that must finish a turn rather than read random text
    until its token limit. The residual stream's first component is a constant no layer writes
    to, the final norm keeps only it, and a separate output layer gives it to the end tokens alone."""
    if arch not in ("llama", "qwen2"):
        raise ValueError(f"architecture {arch!r}: llama or qwen2")
    tokenizer, n_vocab = _tokenizer(vocab)
    rng = np.random.default_rng(seed)
    head_dim = n_embd // n_head

    def mat(*shape: int) -> np.ndarray:
        return (rng.standard_normal(size=shape, dtype=np.float32) * np.float32(scale)).astype(np.float32)

    w = GGUFWriter(str(path), arch)
    w.add_name(f"tiny {vocab}")
    w.add_block_count(n_layer)
    w.add_context_length(ctx)
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_dimension_count(head_dim)
    w.add_vocab_size(n_vocab)
    for key, (vtype, value, sub) in tokenizer.items():
        w.add_key_value(key, value, vtype, sub)
    w.add_chat_template(template)
    ones = np.ones(n_embd, dtype=np.float32)
    embd = mat(n_vocab, n_embd) * 3
    out_rows = 1 if answers_at_once else 0  # the residual stream's rows no layer writes to
    if answers_at_once:
        embd[:, 0] = 5.0
    # without answers_at_once the output layer is this matrix too (tied): its scale sets how
    # peaked the random logits are
    w.add_tensor("token_embd.weight", embd.astype(np.float16))
    for il in range(n_layer):
        p = f"blk.{il}."
        w.add_tensor(p + "attn_norm.weight", ones)
        w.add_tensor(p + "attn_q.weight", mat(n_head * head_dim, n_embd))
        w.add_tensor(p + "attn_k.weight", mat(n_head_kv * head_dim, n_embd))
        w.add_tensor(p + "attn_v.weight", mat(n_head_kv * head_dim, n_embd))
        if arch == "qwen2":
            w.add_tensor(p + "attn_q.bias", mat(n_head * head_dim) * 0.1)
            w.add_tensor(p + "attn_k.bias", mat(n_head_kv * head_dim) * 0.1)
            w.add_tensor(p + "attn_v.bias", mat(n_head_kv * head_dim) * 0.1)
        w.add_tensor(p + "attn_output.weight", _kept(mat(n_embd, n_head * head_dim), out_rows))
        w.add_tensor(p + "ffn_norm.weight", ones)
        w.add_tensor(p + "ffn_gate.weight", mat(n_ff, n_embd))
        w.add_tensor(p + "ffn_up.weight", mat(n_ff, n_embd))
        w.add_tensor(p + "ffn_down.weight", _kept(mat(n_embd, n_ff), out_rows))
    if answers_at_once:
        w.add_tensor("output_norm.weight", np.eye(1, n_embd, dtype=np.float32)[0])
        output = np.zeros((n_vocab, n_embd), dtype=np.float32)
        for key in ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id"):
            if key in tokenizer:
                output[int(tokenizer[key][1]), 0] = 1000.0
        w.add_tensor("output.weight", output.astype(np.float16))
    else:
        w.add_tensor("output_norm.weight", ones)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
