"""Tiny llama-architecture GGUF models with random weights and one small vocabulary.

Speculative decoding needs a target and a draft that share a tokenizer but differ in
their predictions: ``write_tiny`` makes models from a seed; ``noise`` perturbs a seed's
weights (a draft that mostly agrees), ``negate_output`` flips the output layer (a draft
whose greedy choice is the target's least likely token: it always disagrees).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from gguf import GGUFWriter

N_VOCAB = 64


def vocab(prefix: str = "t") -> list[str]:
    return ["<unk>", "<s>", "</s>"] + [f"{prefix}{i:02d}" for i in range(N_VOCAB - 3)]


def write_tiny(path: Path, seed: int, noise: float = 0.0, noise_seed: int = 1, negate_output: bool = False,
               tokens: list[str] | None = None, n_layer: int = 2, n_embd: int = 64, n_head: int = 4,
               n_head_kv: int = 2, n_ff: int = 128, scale: float = 0.3,
               chat_template: str | None = None) -> Path:
    tokens = tokens or vocab()
    n_vocab = len(tokens)
    rng = np.random.default_rng(seed)
    nrng = np.random.default_rng(noise_seed)

    def mat(*shape):
        m = rng.normal(0.0, scale, size=shape).astype(np.float32)
        if noise:
            m += nrng.normal(0.0, noise, size=shape).astype(np.float32)
        return m

    w = GGUFWriter(str(path), "llama")
    w.add_block_count(n_layer)
    w.add_context_length(2048)
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(n_embd // n_head)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * n_vocab)
    w.add_token_types([2, 3, 3] + [1] * (n_vocab - 3))
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(False)
    if chat_template is not None:
        w.add_chat_template(chat_template)
    head_dim = n_embd // n_head
    ones = np.ones(n_embd, dtype=np.float32)
    w.add_tensor("token_embd.weight", mat(n_vocab, n_embd) * 3)
    for il in range(n_layer):
        p = f"blk.{il}."
        w.add_tensor(p + "attn_norm.weight", ones)
        w.add_tensor(p + "attn_q.weight", mat(n_head * head_dim, n_embd))
        w.add_tensor(p + "attn_k.weight", mat(n_head_kv * head_dim, n_embd))
        w.add_tensor(p + "attn_v.weight", mat(n_head_kv * head_dim, n_embd))
        w.add_tensor(p + "attn_output.weight", mat(n_embd, n_head * head_dim))
        w.add_tensor(p + "ffn_norm.weight", ones)
        w.add_tensor(p + "ffn_gate.weight", mat(n_ff, n_embd))
        w.add_tensor(p + "ffn_up.weight", mat(n_ff, n_embd))
        w.add_tensor(p + "ffn_down.weight", mat(n_embd, n_ff))
    w.add_tensor("output_norm.weight", ones)
    out = mat(n_vocab, n_embd)
    w.add_tensor("output.weight", -out if negate_output else out)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
