"""A tiny Mamba GGUF with random weights, for tests of recurrent memory.

The tensor names and shapes are llama.cpp's (``src/llama-arch.cpp``, ``models/mamba.cpp``;
ggml lists dimensions innermost first, numpy outermost first). The vocabulary is the small
one of ``tests/spec/tiny_models.py``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from gguf import GGUFWriter

from tests.spec.tiny_models import vocab


def write_tiny_mamba(path: Path, seed: int = 0, n_layer: int = 2, n_embd: int = 64, d_state: int = 8,
                     d_conv: int = 4, dt_rank: int = 4, scale: float = 0.3) -> Path:
    tokens = vocab()
    n_vocab = len(tokens)
    d_inner = 2 * n_embd  # llama.cpp supports an expansion factor of 2 only
    rng = np.random.default_rng(seed)

    def mat(*shape):
        return rng.normal(0.0, scale, size=shape).astype(np.float32)

    w = GGUFWriter(str(path), "mamba")
    w.add_context_length(4096)
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(0)
    w.add_head_count(0)
    w.add_block_count(n_layer)
    w.add_ssm_conv_kernel(d_conv)
    w.add_ssm_inner_size(d_inner)
    w.add_ssm_state_size(d_state)
    w.add_ssm_time_step_rank(dt_rank)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * n_vocab)
    w.add_token_types([2, 3, 3] + [1] * (n_vocab - 3))
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(False)
    ones = np.ones(n_embd, dtype=np.float32)
    w.add_tensor("token_embd.weight", mat(n_vocab, n_embd) * 3)
    for il in range(n_layer):
        p = f"blk.{il}."
        w.add_tensor(p + "attn_norm.weight", ones)
        w.add_tensor(p + "ssm_in.weight", mat(2 * d_inner, n_embd))
        w.add_tensor(p + "ssm_conv1d.weight", mat(d_inner, d_conv))
        w.add_tensor(p + "ssm_conv1d.bias", mat(d_inner))
        w.add_tensor(p + "ssm_x.weight", mat(dt_rank + 2 * d_state, d_inner))
        w.add_tensor(p + "ssm_dt.weight", mat(d_inner, dt_rank))
        w.add_tensor(p + "ssm_dt.bias", mat(d_inner))
        # A = -exp(A_log) as converted checkpoints store it: a decaying, stable state
        a = -np.tile(np.arange(1, d_state + 1, dtype=np.float32), (d_inner, 1))
        w.add_tensor(p + "ssm_a", a)
        w.add_tensor(p + "ssm_d", np.ones(d_inner, dtype=np.float32))
        w.add_tensor(p + "ssm_out.weight", mat(n_embd, d_inner))
    w.add_tensor("output_norm.weight", ones)
    w.add_tensor("output.weight", mat(n_vocab, n_embd))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
