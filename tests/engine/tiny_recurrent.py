"""Tiny Mamba and Jamba (Mamba + attention hybrid) GGUFs with random weights, for tests of
recurrent memory.

The tensor names and shapes are llama.cpp's (``src/llama-arch.cpp``, ``models/mamba.cpp``;
ggml lists dimensions innermost first, numpy outermost first). The vocabulary is the small
one of ``tests/spec/tiny_models.py``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from gguf import GGUFWriter

from tests.spec.tiny_models import vocab


def _header(w: GGUFWriter, n_layer: int, n_embd: int, d_state: int, d_conv: int, dt_rank: int) -> None:
    tokens = vocab()
    w.add_context_length(4096)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_ssm_conv_kernel(d_conv)
    w.add_ssm_inner_size(2 * n_embd)  # llama.cpp supports an expansion factor of 2 only
    w.add_ssm_state_size(d_state)
    w.add_ssm_time_step_rank(dt_rank)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * len(tokens))
    w.add_token_types([2, 3, 3] + [1] * (len(tokens) - 3))
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(False)


def _mamba_layer(w: GGUFWriter, p: str, mat, n_embd: int, d_state: int, d_conv: int, dt_rank: int,
                 norms: bool) -> None:
    d_inner = 2 * n_embd
    w.add_tensor(p + "ssm_in.weight", mat(2 * d_inner, n_embd))
    w.add_tensor(p + "ssm_conv1d.weight", mat(d_inner, d_conv))
    w.add_tensor(p + "ssm_conv1d.bias", mat(d_inner))
    w.add_tensor(p + "ssm_x.weight", mat(dt_rank + 2 * d_state, d_inner))
    w.add_tensor(p + "ssm_dt.weight", mat(d_inner, dt_rank))
    w.add_tensor(p + "ssm_dt.bias", mat(d_inner))
    if norms:  # Jamba normalises dt, B and C
        w.add_tensor(p + "ssm_dt_norm.weight", np.ones(dt_rank, dtype=np.float32))
        w.add_tensor(p + "ssm_b_norm.weight", np.ones(d_state, dtype=np.float32))
        w.add_tensor(p + "ssm_c_norm.weight", np.ones(d_state, dtype=np.float32))
    # A = -exp(A_log) as converted checkpoints store it: a decaying, stable state
    w.add_tensor(p + "ssm_a", -np.tile(np.arange(1, d_state + 1, dtype=np.float32), (d_inner, 1)))
    w.add_tensor(p + "ssm_d", np.ones(d_inner, dtype=np.float32))
    w.add_tensor(p + "ssm_out.weight", mat(n_embd, d_inner))


def _finish(w: GGUFWriter, mat, n_embd: int) -> None:
    w.add_tensor("output_norm.weight", np.ones(n_embd, dtype=np.float32))
    w.add_tensor("output.weight", mat(len(vocab()), n_embd))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _rng_mat(seed: int, scale: float):
    rng = np.random.default_rng(seed)
    return lambda *shape: rng.normal(0.0, scale, size=shape).astype(np.float32)


def write_tiny_mamba(path: Path, seed: int = 0, n_layer: int = 2, n_embd: int = 64, d_state: int = 8,
                     d_conv: int = 4, dt_rank: int = 4, scale: float = 0.3) -> Path:
    mat = _rng_mat(seed, scale)
    w = GGUFWriter(str(path), "mamba")
    _header(w, n_layer, n_embd, d_state, d_conv, dt_rank)
    w.add_feed_forward_length(0)
    w.add_head_count(0)
    w.add_tensor("token_embd.weight", mat(len(vocab()), n_embd) * 3)
    for il in range(n_layer):
        w.add_tensor(f"blk.{il}.attn_norm.weight", np.ones(n_embd, dtype=np.float32))
        _mamba_layer(w, f"blk.{il}.", mat, n_embd, d_state, d_conv, dt_rank, norms=False)
    _finish(w, mat, n_embd)
    return path


def write_tiny_jamba(path: Path, seed: int = 0, n_embd: int = 64, n_head: int = 4, n_head_kv: int = 2,
                     n_ff: int = 128, d_state: int = 8, d_conv: int = 4, dt_rank: int = 4,
                     scale: float = 0.3) -> Path:
    """Three layers: Mamba, attention (no positional encoding, as Jamba), Mamba; each with an FFN."""
    kinds = ["mamba", "attn", "mamba"]
    mat = _rng_mat(seed, scale)
    w = GGUFWriter(str(path), "jamba")
    _header(w, len(kinds), n_embd, d_state, d_conv, dt_rank)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv([n_head_kv if k == "attn" else 0 for k in kinds])
    w.add_tensor("token_embd.weight", mat(len(vocab()), n_embd) * 3)
    head_dim = n_embd // n_head
    for il, kind in enumerate(kinds):
        p = f"blk.{il}."
        w.add_tensor(p + "attn_norm.weight", np.ones(n_embd, dtype=np.float32))
        if kind == "mamba":
            _mamba_layer(w, p, mat, n_embd, d_state, d_conv, dt_rank, norms=True)
        else:
            w.add_tensor(p + "attn_q.weight", mat(n_embd, n_embd))
            w.add_tensor(p + "attn_k.weight", mat(n_head_kv * head_dim, n_embd))
            w.add_tensor(p + "attn_v.weight", mat(n_head_kv * head_dim, n_embd))
            w.add_tensor(p + "attn_output.weight", mat(n_embd, n_embd))
        w.add_tensor(p + "ffn_norm.weight", np.ones(n_embd, dtype=np.float32))
        w.add_tensor(p + "ffn_gate.weight", mat(n_ff, n_embd))
        w.add_tensor(p + "ffn_up.weight", mat(n_ff, n_embd))
        w.add_tensor(p + "ffn_down.weight", mat(n_embd, n_ff))
    _finish(w, mat, n_embd)
    return path
