"""A GPTQ or AWQ checkpoint (Hugging Face safetensors, llama-family) written as a GGUF.

The packed 4-bit matrices are dequantized with their own formulas (``hf_int4``); where a
layer's groups are contiguous runs of input channels and a multiple of 32 long, each
32-weight block is written as Q4_1 with the checkpoint's own numbers (``d`` = its scale,
``m`` = -scale x zero, the same 4-bit codes): the GGUF keeps their choices, 4-bit where they
were 4-bit. Other matrices (``desc_act`` reordering, float layers: the embeddings, the output) are F16;
norms F32. The tokenizer comes from ``tokenizer.json`` when it is a byte-level BPE (Llama 3,
Qwen 2, SmolLM and most recent models); a SentencePiece ``tokenizer.model`` is refused.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType, GGUFWriter

from runtime.quantize.hf_int4 import (
    UnsupportedQuantization,
    dequantize_state,
    unpack_columns,
    unpack_gptq_rows,
)
from runtime.quantize.safetensors_file import read_safetensors

_LAYER = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
          "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output", "post_attention_layernorm": "ffn_norm",
          "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
_TOP = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
        "lm_head.weight": "output.weight"}
ARCHITECTURES = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM")
#: what the converter reads of the JSON files at most (the largest tokenizer.json of a popular
#: model, Gemma 3's, is 33 MB), and the largest width or count a config.json may give
MAX_CONFIG_BYTES, MAX_TOKENIZER_BYTES, MAX_COUNT = 1 << 20, 128 << 20, 1 << 24


def gguf_name(hf: str) -> str | None:
    if hf in _TOP:
        return _TOP[hf]
    parts = hf.split(".")
    if len(parts) >= 5 and parts[0] == "model" and parts[1] == "layers":
        rest = ".".join(parts[3:-1])
        if rest in _LAYER:
            return f"blk.{parts[2]}.{_LAYER[rest]}.{parts[-1]}"
    return None


def permute_rope(w: np.ndarray, n_head: int) -> np.ndarray:
    """Hugging Face's rotary halves to llama.cpp's interleaved pairs (as convert_hf_to_gguf does)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def q4_1_blocks(codes: np.ndarray, scale: np.ndarray, zero: np.ndarray) -> np.ndarray:
    """Q4_1 bytes [out, in/32*20] for ``W = scale * (codes - zero)``, all [out, in], constant per 32."""
    out, n_in = codes.shape
    c = codes.reshape(out, n_in // 32, 32).astype(np.uint8)
    d = scale.reshape(out, n_in // 32, 32)[..., 0].astype(np.float16)
    m = (-scale * zero).reshape(out, n_in // 32, 32)[..., 0].astype(np.float16)
    qs = c[..., :16] | (c[..., 16:] << 4)
    blocks = np.concatenate([d[..., None].view(np.uint8), m[..., None].view(np.uint8), qs], axis=-1)
    return blocks.reshape(out, -1)


def _q4_codes(tensors: dict, base: str, method: str, group: int, v2: bool):
    """(codes, scale, zero) [out, in] of a packed layer, or None when its groups are not 32-aligned runs."""
    q = tensors[base + ".qweight"]
    if method == "gptq":
        codes = unpack_gptq_rows(q)
        zeros = unpack_columns(tensors[base + ".qzeros"]) + (0 if v2 else 1)
        g_idx = tensors.get(base + ".g_idx")
        groups = np.arange(codes.shape[0]) // group
        if g_idx is not None and not np.array_equal(np.asarray(g_idx), groups):
            return None
    else:
        from runtime.quantize.hf_int4 import AWQ_ORDER

        codes = unpack_columns(q, AWQ_ORDER)
        zeros = unpack_columns(tensors[base + ".qzeros"], AWQ_ORDER)
        groups = np.arange(codes.shape[0]) // group
    if group % 32 or codes.shape[0] % 32:
        return None
    scales = tensors[base + ".scales"].astype(np.float32)
    return codes.T, scales[groups].T, zeros[groups].T.astype(np.float32)


def _vocab(folder: Path, config: dict, n_vocab: int) -> tuple[list[str], list[int], list[str], str]:
    """The token list (``n_vocab`` long: the embedding's rows, the only size trusted), types,
    merges and pre-tokenizer; a config or tokenizer that names more tokens is refused before
    any list is made."""
    path = folder / "tokenizer.json"
    if not path.is_file():
        raise UnsupportedQuantization(f"{folder} has no tokenizer.json (a SentencePiece-only model is not imported)")
    if path.stat().st_size > MAX_TOKENIZER_BYTES:
        raise UnsupportedQuantization(f"tokenizer.json is {path.stat().st_size:,} bytes; the converter reads at most "
                                      f"{MAX_TOKENIZER_BYTES:,}")
    tok = json.loads(path.read_text(encoding="utf-8"))
    model = tok.get("model") if isinstance(tok, dict) else None
    if not isinstance(model, dict) or model.get("type") != "BPE":
        kind = model.get("type") if isinstance(model, dict) else None
        raise UnsupportedQuantization(f"tokenizer type {kind!r}: byte-level BPE tokenizers are imported")
    added_tokens = tok.get("added_tokens") or []
    if not isinstance(model.get("vocab"), dict) or not isinstance(added_tokens, list) or not all(
            isinstance(t, dict) and isinstance(t.get("content"), str) for t in added_tokens):
        raise UnsupportedQuantization("tokenizer.json has no vocabulary of strings to ids")
    vocab: dict[str, int] = dict(model["vocab"])
    added = {t["content"]: t.get("id") for t in added_tokens}
    special = {t["content"] for t in added_tokens if t.get("special")}
    vocab.update(added)
    declared = config.get("vocab_size", n_vocab)
    if type(declared) is not int or not 0 < declared <= n_vocab:
        raise UnsupportedQuantization(f"config.json's vocab_size {declared!r} does not match the checkpoint: "
                                      f"model.embed_tokens.weight has {n_vocab} rows")
    bad = next((i for i in vocab.values() if type(i) is not int or not 0 <= i < n_vocab), None) if vocab else None
    if bad is not None or not vocab:
        raise UnsupportedQuantization(f"tokenizer.json names token id {bad!r}, but the model has {n_vocab} tokens "
                                      "(model.embed_tokens.weight's rows)")
    tokens = [f"[PAD{i}]" for i in range(n_vocab)]
    types = [5] * n_vocab  # unused
    for text, i in vocab.items():
        tokens[i] = text
        types[i] = 3 if text in special else 1
    raw_merges = model.get("merges") or []
    if not isinstance(raw_merges, list) or not all(
            isinstance(m, str) or (isinstance(m, list) and all(isinstance(x, str) for x in m)) for m in raw_merges):
        raise UnsupportedQuantization("tokenizer.json's merges are not a list of pairs of strings")
    merges = [m if isinstance(m, str) else " ".join(m) for m in raw_merges]
    pre = {"qwen2": "qwen2"}.get(config.get("model_type", ""), "llama-bpe" if n_vocab >= 128000 else "default")
    return tokens, types, merges, pre


def _count(config: dict, key: str, default: int | None = None) -> int:
    """A positive integer of config.json (a layer count, a width), or ``UnsupportedQuantization``."""
    value = config.get(key, default)
    if type(value) is not int or not 0 < value <= MAX_COUNT:
        raise UnsupportedQuantization(f"config.json's {key} is {value!r}: a positive integer is needed")
    return value


def _read_config(folder: Path) -> dict:
    path = folder / "config.json"
    if path.stat().st_size > MAX_CONFIG_BYTES:
        raise UnsupportedQuantization(f"config.json is {path.stat().st_size:,} bytes; the converter reads at most "
                                      f"{MAX_CONFIG_BYTES:,}")
    config = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(config, dict):
        raise UnsupportedQuantization("config.json is not a JSON object")
    return config


def import_checkpoint(folder: Path, dst: Path, name: str | None = None) -> Path:
    """Write the checkpoint in ``folder`` (config.json, *.safetensors, tokenizer.json) to ``dst``."""
    folder = Path(folder)
    config = _read_config(folder)
    qc = config.get("quantization_config") or {}
    if not isinstance(qc, dict):
        raise UnsupportedQuantization("config.json's quantization_config is not an object")
    if not set(config.get("architectures") or []) & set(ARCHITECTURES):
        raise UnsupportedQuantization(f"architecture {config.get('architectures')}: {', '.join(ARCHITECTURES)} are imported")
    hidden, n_head = _count(config, "hidden_size"), _count(config, "num_attention_heads")
    n_kv = _count(config, "num_key_value_heads", n_head)
    if hidden % n_head or n_head % n_kv:
        raise UnsupportedQuantization(f"config.json: {hidden} hidden units do not split into {n_head} heads "
                                      f"in {n_kv} key/value groups")
    group = qc.get("group_size", 128)
    if type(group) is not int or not (group == -1 or 0 < group <= MAX_COUNT):
        raise UnsupportedQuantization(f"quantization_config's group_size is {group!r}: a positive integer or -1")
    tensors: dict[str, np.ndarray] = {}
    for f in sorted(folder.glob("*.safetensors")):
        tensors.update(read_safetensors(f))
    embed = tensors.get("model.embed_tokens.weight")
    if embed is None or embed.ndim != 2:
        raise UnsupportedQuantization("the checkpoint has no 2-D model.embed_tokens.weight")
    tokens, types, merges, pre = _vocab(folder, config, int(embed.shape[0]))
    method = str(qc.get("quant_method", "")).lower()
    v2 = str(qc.get("checkpoint_format", "gptq")) == "gptq_v2"
    state = dequantize_state(tensors, qc) if qc else tensors  # a float checkpoint passes as it is
    w = GGUFWriter(str(dst), "llama")
    w.add_name(name or folder.name)
    w.add_block_count(_count(config, "num_hidden_layers"))
    w.add_context_length(_count(config, "max_position_embeddings", 4096))
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(_count(config, "intermediate_size"))
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    w.add_layer_norm_rms_eps(float(config.get("rms_norm_eps", 1e-5)))
    w.add_rope_freq_base(float(config.get("rope_theta", 10000.0)))
    w.add_rope_dimension_count(hidden // n_head)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    for key, add in (("bos_token_id", w.add_bos_token_id), ("eos_token_id", w.add_eos_token_id)):
        if isinstance(config.get(key), int):
            add(config[key])
    for hf, value in state.items():
        name = gguf_name(hf)
        if name is None:
            continue
        base = hf[: -len(".weight")]
        packed = base + ".qweight" in tensors and method in ("gptq", "awq")
        rope = {"attn_q": n_head, "attn_k": n_kv}.get(name.split(".")[2] if name.startswith("blk.") else "")
        if packed and (cs := _q4_codes(tensors, base, method, group, v2)) is not None:
            codes, scale, zero = cs
            if rope is not None:  # a permutation of output rows: the blocks along each row stay whole
                codes, scale, zero = (permute_rope(a, rope) for a in (codes, scale, zero))
            w.add_tensor(name, q4_1_blocks(codes, scale, zero), raw_dtype=GGMLQuantizationType.Q4_1)
            continue
        arr = np.asarray(value, dtype=np.float32)
        if rope is not None:
            arr = permute_rope(arr, rope)
        w.add_tensor(name, arr if arr.ndim == 1 else arr.astype(np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return dst
