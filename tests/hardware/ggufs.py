"""Tiny GGUF files written with the gguf package, with sizes a test can work out by hand."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from gguf import GGUFWriter

_quiet = None


def write_model(path: Path, arch: str = "llama", n_layer: int = 4, n_embd: int = 64, n_head: int = 8,
                n_head_kv: int = 2, n_ff: int = 128, n_vocab: int = 256, ctx: int = 1024,
                window: int = 0, pattern: int | list[bool] | None = None, tied: bool = False,
                skip: tuple[str, ...] = ()) -> Path:
    """A llama-style model: f16 matrices, f32 norms; ``skip`` leaves out metadata keys."""
    w = GGUFWriter(str(path), arch)
    keys = {
        "block_count": lambda: w.add_block_count(n_layer),
        "context_length": lambda: w.add_context_length(ctx),
        "embedding_length": lambda: w.add_embedding_length(n_embd),
        "feed_forward_length": lambda: w.add_feed_forward_length(n_ff),
        "head_count": lambda: w.add_head_count(n_head),
        "head_count_kv": lambda: w.add_head_count_kv(n_head_kv),
    }
    for name, add in keys.items():
        if name not in skip:
            add()
    if window:
        w.add_sliding_window(window)
    if pattern is not None:
        w.add_sliding_window_pattern(pattern)
    head_dim = n_embd // n_head
    f16 = np.float16
    w.add_tensor("token_embd.weight", np.zeros((n_vocab, n_embd), dtype=f16))
    for il in range(n_layer):
        p = f"blk.{il}."
        w.add_tensor(p + "attn_norm.weight", np.zeros(n_embd, dtype=np.float32))
        w.add_tensor(p + "attn_q.weight", np.zeros((n_head * head_dim, n_embd), dtype=f16))
        w.add_tensor(p + "attn_k.weight", np.zeros((n_head_kv * head_dim, n_embd), dtype=f16))
        w.add_tensor(p + "attn_v.weight", np.zeros((n_head_kv * head_dim, n_embd), dtype=f16))
        w.add_tensor(p + "attn_output.weight", np.zeros((n_embd, n_head * head_dim), dtype=f16))
        w.add_tensor(p + "ffn_norm.weight", np.zeros(n_embd, dtype=np.float32))
        for name in ("ffn_gate", "ffn_up"):
            w.add_tensor(p + name + ".weight", np.zeros((n_ff, n_embd), dtype=f16))
        w.add_tensor(p + "ffn_down.weight", np.zeros((n_embd, n_ff), dtype=f16))
    w.add_tensor("output_norm.weight", np.zeros(n_embd, dtype=np.float32))
    if not tied:
        w.add_tensor("output.weight", np.zeros((n_vocab, n_embd), dtype=f16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def requantize_f16(src: Path, dst: Path) -> Path:
    """``src`` rewritten with every matrix in F16 (llama.cpp's quantizer, allow_requantize)."""
    import ctypes

    import llama_cpp as lc

    global _quiet  # C keeps only the pointer: the callback must outlive the call
    _quiet = lc.llama_log_callback(lambda level, text, user: None)
    lc.llama_log_set(_quiet, ctypes.c_void_p(0))
    params = lc.llama_model_quantize_default_params()
    params.ftype = lc.LLAMA_FTYPE_MOSTLY_F16
    params.allow_requantize = True
    params.output_tensor_type = params.token_embedding_type = 1  # GGML_TYPE_F16
    rc = lc.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(params))
    if rc != 0:
        raise RuntimeError(f"llama_model_quantize failed with {rc} for {src}")
    return dst
