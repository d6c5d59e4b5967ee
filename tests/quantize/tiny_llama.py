"""A tiny llama GGUF whose attention is uniform (zero K weights), and its numpy forward pass.

With ``attn_k`` all zero every score is 0, so each position attends equally to itself and
all earlier ones: the attention output is the running mean of V. That makes every input of
every matrix multiplication computable in a few lines of numpy, the reference the importance
matrix measured through llama.cpp is checked against. Rows of 256 admit the K-quants.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from gguf import GGUFWriter

N_VOCAB, N_EMBD, N_FF, N_HEAD, N_HEAD_KV, N_LAYER = 3 + 256, 256, 512, 4, 2, 2
EPS = 1e-5


def tokens() -> list[str]:
    """Control tokens and the 256 byte tokens: any text tokenizes, byte by byte."""
    return ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]


def weights(seed: int = 0) -> dict[str, np.ndarray]:
    """Float32 weights in numpy's (out, in) order; role scales differ so sensitivities do."""
    rng = np.random.default_rng(seed)
    hd = N_EMBD // N_HEAD

    def mat(rows: int, cols: int, scale: float) -> np.ndarray:
        m = rng.normal(0.0, scale / np.sqrt(cols), size=(rows, cols)).astype(np.float32)
        # a few outlier input channels: what an importance matrix is for
        m[:, rng.choice(cols, 4, replace=False)] *= 6
        return m

    w = {"token_embd.weight": rng.normal(0, 1.0, size=(N_VOCAB, N_EMBD)).astype(np.float32)}
    for il in range(N_LAYER):
        p = f"blk.{il}."
        w[p + "attn_norm.weight"] = (1 + 0.5 * rng.random(N_EMBD)).astype(np.float32)
        w[p + "attn_q.weight"] = mat(N_HEAD * hd, N_EMBD, 1.0)
        w[p + "attn_k.weight"] = np.zeros((N_HEAD_KV * hd, N_EMBD), dtype=np.float32)
        w[p + "attn_v.weight"] = mat(N_HEAD_KV * hd, N_EMBD, 1.0)
        w[p + "attn_output.weight"] = mat(N_EMBD, N_HEAD * hd, 1.0)
        w[p + "ffn_norm.weight"] = (1 + 0.5 * rng.random(N_EMBD)).astype(np.float32)
        w[p + "ffn_gate.weight"] = mat(N_FF, N_EMBD, 1.0)
        w[p + "ffn_up.weight"] = mat(N_FF, N_EMBD, 1.0)
        w[p + "ffn_down.weight"] = mat(N_EMBD, N_FF, 1.0)
    w["output_norm.weight"] = np.ones(N_EMBD, dtype=np.float32)
    w["output.weight"] = mat(N_VOCAB, N_EMBD, 3.0)
    return w


def write(path: Path, seed: int = 0) -> Path:
    w = weights(seed)
    g = GGUFWriter(str(path), "llama")
    g.add_block_count(N_LAYER)
    g.add_context_length(1024)
    g.add_embedding_length(N_EMBD)
    g.add_feed_forward_length(N_FF)
    g.add_head_count(N_HEAD)
    g.add_head_count_kv(N_HEAD_KV)
    g.add_layer_norm_rms_eps(EPS)
    g.add_rope_dimension_count(N_EMBD // N_HEAD)
    g.add_tokenizer_model("llama")
    toks = tokens()
    g.add_token_list(toks)
    g.add_token_scores([0.0] * len(toks))
    g.add_token_types([2, 3, 3] + [6] * (len(toks) - 3))  # 6: byte
    g.add_unk_token_id(0)
    g.add_bos_token_id(1)
    g.add_eos_token_id(2)
    g.add_add_bos_token(False)
    for name, value in w.items():
        g.add_tensor(name, value)
    g.write_header_to_file()
    g.write_kv_data_to_file()
    g.write_tensors_to_file()
    g.close()
    return path


def _rms(x: np.ndarray, g: np.ndarray) -> np.ndarray:
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + EPS) * g


def matmul_inputs(w: dict[str, np.ndarray], ids: list[int]) -> dict[str, np.ndarray]:
    """The activations [tokens, in] that meet each weight in one forward pass from position 0."""
    seen: dict[str, np.ndarray] = {}
    h = w["token_embd.weight"][ids].astype(np.float64)
    hd, group = N_EMBD // N_HEAD, N_HEAD // N_HEAD_KV
    causal_mean = np.tril(np.ones((len(ids), len(ids)))) / np.arange(1, len(ids) + 1)[:, None]
    for il in range(N_LAYER):
        p = f"blk.{il}."
        x = _rms(h, w[p + "attn_norm.weight"])
        for n in ("attn_q", "attn_k", "attn_v"):
            seen[p + n + ".weight"] = x
        v = x @ w[p + "attn_v.weight"].T  # [n, n_kv * hd]
        heads = [causal_mean @ v[:, (hh // group) * hd:(hh // group + 1) * hd] for hh in range(N_HEAD)]
        o = np.concatenate(heads, axis=1)
        seen[p + "attn_output.weight"] = o
        h = h + o @ w[p + "attn_output.weight"].T
        x = _rms(h, w[p + "ffn_norm.weight"])
        seen[p + "ffn_gate.weight"] = seen[p + "ffn_up.weight"] = x
        gate = x @ w[p + "ffn_gate.weight"].T
        a = gate / (1 + np.exp(-gate)) * (x @ w[p + "ffn_up.weight"].T)
        seen[p + "ffn_down.weight"] = a
        h = h + a @ w[p + "ffn_down.weight"].T
    seen["output.weight"] = _rms(h, w["output_norm.weight"])
    return seen
