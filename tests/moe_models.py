"""Tiny mixture-of-experts GGUFs with random weights: ``qwen3moe`` and ``gpt-oss``.

Tensor names, shapes and keys are llama.cpp's (``src/llama-arch.cpp`` for the names,
``src/models/qwen3moe.cpp`` and ``src/models/openai-moe.cpp`` for what each architecture
loads; ggml lists dimensions innermost first, numpy outermost first, so a ggml ``{n_embd,
n_ff_exp, n_expert}`` expert tensor is a numpy ``(n_expert, n_ff_exp, n_embd)`` array). The
vocabulary is the small one of ``tests/spec/tiny_models.py`` (a llama tokenizer works with
any architecture), or as many such tokens as ``n_vocab`` asks. Matrices are F32 (``f16``: F16),
so a file's sizes can be worked out by hand: ``expert_bytes`` is what one layer's routed
experts take.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGUFWriter

from tests.spec.tiny_models import vocab


@dataclass(frozen=True)
class TinyMoe:
    n_layer: int = 4
    n_embd: int = 64
    n_head: int = 4
    n_head_kv: int = 2
    head_dim: int = 16
    n_expert: int = 8
    n_expert_used: int = 2
    n_ff_exp: int = 64
    ctx: int = 2048
    n_vocab: int = 64
    f16: bool = False  #: matrices in F16 (norms and biases stay F32)

    @property
    def expert_bytes(self) -> int:
        """Bytes of one layer's routed experts (gate, up, down)."""
        return 3 * self.n_expert * self.n_ff_exp * self.n_embd * (2 if self.f16 else 4)

    def tokens(self) -> list[str]:
        return vocab() if self.n_vocab == len(vocab()) else vocab()[:3] + [f"t{i:05d}" for i in range(self.n_vocab - 3)]


def _rng_mat(seed: int, scale: float, f16: bool):
    rng = np.random.default_rng(seed)

    def mat(*shape: int) -> np.ndarray:
        m = rng.standard_normal(size=shape, dtype=np.float32) * np.float32(scale / np.sqrt(shape[-1]) * 8)
        return m.astype(np.float16) if f16 and len(shape) > 1 else m
    return mat


def _header(w: GGUFWriter, m: TinyMoe) -> None:
    tokens = m.tokens()
    w.add_block_count(m.n_layer)
    w.add_context_length(m.ctx)
    w.add_embedding_length(m.n_embd)
    w.add_feed_forward_length(m.n_ff_exp * m.n_expert_used)
    w.add_head_count(m.n_head)
    w.add_head_count_kv(m.n_head_kv)
    w.add_key_length(m.head_dim)
    w.add_value_length(m.head_dim)
    w.add_rope_dimension_count(m.head_dim)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_expert_count(m.n_expert)
    w.add_expert_used_count(m.n_expert_used)
    w.add_expert_feed_forward_length(m.n_ff_exp)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * len(tokens))
    w.add_token_types([2, 3, 3] + [1] * (len(tokens) - 3))
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(False)


def _experts(w: GGUFWriter, p: str, m: TinyMoe, mat, bias: bool) -> None:
    w.add_tensor(p + "ffn_gate_inp.weight", mat(m.n_expert, m.n_embd))
    w.add_tensor(p + "ffn_gate_exps.weight", mat(m.n_expert, m.n_ff_exp, m.n_embd))
    w.add_tensor(p + "ffn_up_exps.weight", mat(m.n_expert, m.n_ff_exp, m.n_embd))
    w.add_tensor(p + "ffn_down_exps.weight", mat(m.n_expert, m.n_embd, m.n_ff_exp))
    if bias:  # gpt-oss: the router and every expert have biases
        w.add_tensor(p + "ffn_gate_inp.bias", mat(m.n_expert) * 0.1)
        for name, width in (("gate", m.n_ff_exp), ("up", m.n_ff_exp), ("down", m.n_embd)):
            w.add_tensor(p + f"ffn_{name}_exps.bias", (mat(m.n_expert, width) * 0.1).astype(np.float32))


def _attention(w: GGUFWriter, p: str, m: TinyMoe, mat) -> None:
    w.add_tensor(p + "attn_norm.weight", np.ones(m.n_embd, dtype=np.float32))
    w.add_tensor(p + "attn_q.weight", mat(m.n_head * m.head_dim, m.n_embd))
    w.add_tensor(p + "attn_k.weight", mat(m.n_head_kv * m.head_dim, m.n_embd))
    w.add_tensor(p + "attn_v.weight", mat(m.n_head_kv * m.head_dim, m.n_embd))
    w.add_tensor(p + "attn_output.weight", mat(m.n_embd, m.n_head * m.head_dim))


def _finish(w: GGUFWriter, m: TinyMoe, mat) -> None:
    w.add_tensor("output_norm.weight", np.ones(m.n_embd, dtype=np.float32))
    w.add_tensor("output.weight", mat(m.n_vocab, m.n_embd))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_tiny_qwen3moe(path: Path, m: TinyMoe = TinyMoe(), seed: int = 0, scale: float = 0.3) -> Path:
    """Qwen3-MoE: attention with Q and K norms, a softmax router, routed experts only."""
    mat = _rng_mat(seed, scale, m.f16)
    w = GGUFWriter(str(path), "qwen3moe")
    _header(w, m)
    w.add_tensor("token_embd.weight", mat(m.n_vocab, m.n_embd) * 3)
    for il in range(m.n_layer):
        p = f"blk.{il}."
        _attention(w, p, m, mat)
        w.add_tensor(p + "attn_q_norm.weight", np.ones(m.head_dim, dtype=np.float32))
        w.add_tensor(p + "attn_k_norm.weight", np.ones(m.head_dim, dtype=np.float32))
        w.add_tensor(p + "ffn_norm.weight", np.ones(m.n_embd, dtype=np.float32))
        _experts(w, p, m, mat, bias=False)
    _finish(w, m, mat)
    return path


def write_tiny_gpt_oss(path: Path, m: TinyMoe = TinyMoe(), seed: int = 0, scale: float = 0.3,
                       window: int = 128) -> Path:
    """gpt-oss (llama.cpp's ``openai-moe``): attention sinks, sliding-window layers every other
    layer, biases on attention output, router and experts, a post-attention norm."""
    mat = _rng_mat(seed, scale, m.f16)
    w = GGUFWriter(str(path), "gpt-oss")
    _header(w, m)
    w.add_sliding_window(window)
    w.add_tensor("token_embd.weight", mat(m.n_vocab, m.n_embd) * 3)
    for il in range(m.n_layer):
        p = f"blk.{il}."
        _attention(w, p, m, mat)
        w.add_tensor(p + "attn_output.bias", mat(m.n_embd) * 0.1)  # 1-D: F32
        w.add_tensor(p + "attn_sinks.weight", np.zeros(m.n_head, dtype=np.float32))
        w.add_tensor(p + "post_attention_norm.weight", np.ones(m.n_embd, dtype=np.float32))
        _experts(w, p, m, mat, bias=True)
    _finish(w, m, mat)
    return path
