"""GGUF models with random weights at the exact shapes of real models, for bench/real_shapes.py.

A model is written once into a cache folder: every tensor the real file has, at its real
shape, F16 matrices and F32 norms, with the real family's tokenizer (every
``tokenizer.ggml.*`` key of llama.cpp's vocabulary GGUF, read with the tests' fast reader,
``tests/family_models.read_metadata``) and its chat template (``tests/chat/templates``), then
quantized to Q4_K_M by llama.cpp's quantizer (``runtime.backends.quantize``: the same stock mix
as the published files, so Q6_K for the output or tied embedding and half the ``attn_v`` /
``ffn_down``) and the F16 file deleted. Tensors are streamed to the file in 8 MiB pieces, so
memory stays small whatever the model's size (an 8B F16 file is 16 GB on disk, for a while).

The weights are normal with standard deviation 0.02, drawn once (4M values) and read from at
a random offset for each piece: a matrix costs a copy, not a draw of every value. Nothing here
depends on what the values are: a matrix multiply, a quantizer and a KV cache take the same time
and bytes for any numbers (the text the model writes is meaningless).

Where each number comes from (no config.json is reachable from here: the repository's catalog,
llama.cpp's sources and vocabulary files are what there is):

- layers, n_embd, heads, KV heads, head_dim, n_ff, vocab, tied embeddings and the trained
  context: ``models/catalog.json`` (its ``shape`` and ``context_length`` of ``llama-3.2-1b``,
  ``qwen3-4b``, ``llama-3.1-8b``). llama.cpp agrees on the layer counts: ``src/models/llama.cpp``
  names 16 layers "Llama 3.2 1B" and 32 layers with a 128256 vocabulary 8B;
  ``src/models/qwen3.cpp`` names 36 layers at n_embd 2560 4B.
- Llama 3 rope theta 500000 and RMS epsilon 1e-5: the ``llama.*`` keys of
  ``ggml-vocab-llama-bpe.gguf`` (written from Llama 3 8B: 32 layers, 4096, 14336, 32/8 heads,
  vocabulary 128256, all as in the catalog's llama-3.1-8b). The 1B is taken to share them.
- Llama 3 rope scaling (``rope_freqs.weight``, as llama.cpp's ``conversion/llama.py`` computes it
  for ``rope_type: llama3``): low/high frequency factors 1 and 4 and an original context of 8192
  are that converter's defaults; the factor is 8 for 3.1 (the converter's default) and 32 for
  3.2 (Llama 3.2's config, from memory: not confirmed here; it changes no size or time).
- Qwen3 rope theta 1e6 and RMS epsilon 1e-6: the ``qwen2.*`` keys of ``ggml-vocab-qwen2.gguf``
  (Qwen 2); Qwen3 4B is taken to keep them (not confirmed here). Qwen3 writes head_dim 128 as
  ``key_length`` / ``value_length`` (q is 32 * 128 = 4096 wide, n_embd 2560) and has per-head
  ``attn_q_norm`` / ``attn_k_norm`` (``src/models/qwen3.cpp``).
- Tokenizers: Llama 3's is ``ggml-vocab-llama-bpe.gguf``; Qwen3 keeps Qwen 2's tokenizer
  (151936 entries, ``ggml-vocab-qwen2.gguf``). The end-of-sequence id is set to the end of turn
  (``<|eot_id|>``, ``<|im_end|>``) and ``add_bos_token`` as the instruct models' files have them
  (true for Llama 3, false for Qwen3).
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGUFEndian, GGUFValueType, GGUFWriter

ROOT = Path(__file__).resolve().parents[1]
TEMPLATES = ROOT / "tests" / "chat" / "templates"
POOL_VALUES = 1 << 22  #: random values drawn once; each piece of a matrix is a slice of them
PIECE_VALUES = 1 << 22  #: values written at a time (8 MiB of F16)
SCALE = 0.02
LLAMA_FTYPE_MOSTLY_F16 = 1


@dataclass(frozen=True, slots=True)
class Shape:
    name: str
    arch: str  #: llama or qwen3
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_ff: int
    n_vocab: int
    tied: bool
    rope_theta: float
    ctx_train: int
    rms_eps: float
    vocab: str  #: llama.cpp's ggml-vocab-VOCAB.gguf
    template: str  #: tests/chat/templates/TEMPLATE.jinja
    end_of_turn: str  #: the token the instruct model ends a turn with (its eos)
    add_bos: bool
    rope_factor: float | None = None  #: Llama 3 rope scaling factor (rope_freqs.weight)
    n_expert: int = 0  #: a mixture of experts (qwen3moe): routed experts per layer
    n_expert_used: int = 0  #: experts a token goes through
    n_ff_exp: int = 0  #: each expert's feed-forward width

    @property
    def family(self) -> str:
        return "qwen" if self.arch in ("qwen3", "qwen3moe") else "llama3"


SHAPES: dict[str, Shape] = {
    "llama-3.2-1b": Shape("llama-3.2-1b", "llama", 16, 2048, 32, 8, 64, 8192, 128256, True, 500000.0, 131072,
                          1e-5, "llama-bpe", "meta-llama-Llama-3.2-3B-Instruct", "<|eot_id|>", True, 32.0),
    "qwen3-4b": Shape("qwen3-4b", "qwen3", 36, 2560, 32, 8, 128, 9728, 151936, True, 1e6, 40960,
                      1e-6, "qwen2", "Qwen-Qwen3-0.6B", "<|im_end|>", False),
    "llama-3.1-8b": Shape("llama-3.1-8b", "llama", 32, 4096, 32, 8, 128, 14336, 128256, False, 500000.0, 131072,
                          1e-5, "llama-bpe", "meta-llama-Llama-3.1-8B-Instruct", "<|eot_id|>", True, 8.0),
    # Qwen3-30B-A3B's layer (n_embd 2048, 32/4 heads of 128, experts of width 768 in the real one,
    # 128 of them, 8 used) at about a seventh of its size: 20 layers of 64 experts of width 512,
    # 8 used; 4.7B parameters, 0.9B of them read per token
    "qwen3moe-5b-a1b": Shape("qwen3moe-5b-a1b", "qwen3moe", 20, 2048, 32, 4, 128, 0, 151936, False, 1e6, 40960,
                             1e-6, "qwen2", "Qwen-Qwen3-0.6B", "<|im_end|>", False,
                             n_expert=64, n_expert_used=8, n_ff_exp=512),
}

#: scaled down, each of the two layouts (for --smoke): the real vocabularies, two layers
SMOKE_SHAPES: dict[str, Shape] = {
    "smoke-llama": Shape("smoke-llama", "llama", 2, 256, 4, 2, 64, 512, 128256, True, 500000.0, 131072,
                         1e-5, "llama-bpe", "meta-llama-Llama-3.2-3B-Instruct", "<|eot_id|>", True, 32.0),
    "smoke-qwen3": Shape("smoke-qwen3", "qwen3", 2, 256, 4, 2, 128, 512, 151936, True, 1e6, 40960,
                         1e-6, "qwen2", "Qwen-Qwen3-0.6B", "<|im_end|>", False),
    "smoke-qwen3moe": Shape("smoke-qwen3moe", "qwen3moe", 2, 256, 4, 2, 128, 0, 151936, False, 1e6, 40960,
                            1e-6, "qwen2", "Qwen-Qwen3-0.6B", "<|im_end|>", False,
                            n_expert=8, n_expert_used=2, n_ff_exp=256),
}


def log(text: str) -> None:
    print(f"# {text}", file=sys.stderr, flush=True)


class _Random:
    """A tensor's data that writes itself in pieces (what ``GGUFWriter.write_tensor_data`` reads
    of an array: ``nbytes`` and ``tofile``), so no whole matrix is ever in memory."""

    def __init__(self, pool: np.ndarray, rng: np.random.Generator, n: int) -> None:
        self.pool, self.rng, self.n = pool, rng, n
        self.nbytes = n * pool.itemsize

    def tofile(self, f) -> None:
        left = self.n
        while left:
            k = min(left, PIECE_VALUES)
            start = int(self.rng.integers(0, POOL_VALUES))
            self.pool[start:start + k].tofile(f)
            left -= k


def _tokenizer(shape: Shape) -> dict:
    from tests.family_models import read_metadata
    from tests.llama_sources import llama_vocab

    meta = read_metadata(llama_vocab(shape.vocab))
    keys = {k: v for k, v in meta.items() if k.startswith("tokenizer.ggml.")}
    tokens = keys["tokenizer.ggml.tokens"][1]
    if len(tokens) != shape.n_vocab:
        raise ValueError(f"ggml-vocab-{shape.vocab}.gguf has {len(tokens)} tokens, {shape.name} {shape.n_vocab}")
    eot = tokens.index(shape.end_of_turn.encode())
    keys["tokenizer.ggml.eos_token_id"] = (GGUFValueType.UINT32, eot, None)
    keys["tokenizer.ggml.add_bos_token"] = (GGUFValueType.BOOL, shape.add_bos, None)
    return keys


def _rope_factors(shape: Shape) -> np.ndarray:
    """llama.cpp's conversion/llama.py for rope_type llama3 (factor, 1, 4, 8192)."""
    assert shape.rope_factor is not None
    factor, low, high, old = shape.rope_factor, 1.0, 4.0, 8192
    dim = shape.head_dim
    out = []
    for i in range(0, dim, 2):
        wavelen = 2 * math.pi * shape.rope_theta ** (i / dim)
        if wavelen < old / high:
            out.append(1.0)
        elif wavelen > old / low:
            out.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def tensors(shape: Shape) -> list[tuple[str, tuple[int, ...], type]]:
    """Every tensor of the real file, in its order: name, shape (rows, columns), numpy type."""
    e, q, kv = shape.n_embd, shape.n_head * shape.head_dim, shape.n_head_kv * shape.head_dim
    out: list[tuple[str, tuple[int, ...], type]] = [("token_embd.weight", (shape.n_vocab, e), np.float16)]
    if shape.rope_factor is not None:
        out.append(("rope_freqs.weight", (shape.head_dim // 2,), np.float32))
    for il in range(shape.n_layer):
        p = f"blk.{il}."
        out += [(p + "attn_norm.weight", (e,), np.float32), (p + "attn_q.weight", (q, e), np.float16),
                (p + "attn_k.weight", (kv, e), np.float16), (p + "attn_v.weight", (kv, e), np.float16),
                (p + "attn_output.weight", (e, q), np.float16)]
        if shape.arch in ("qwen3", "qwen3moe"):
            out += [(p + "attn_q_norm.weight", (shape.head_dim,), np.float32),
                    (p + "attn_k_norm.weight", (shape.head_dim,), np.float32)]
        out.append((p + "ffn_norm.weight", (e,), np.float32))
        if shape.n_expert:  # the router (kept F32, as llama.cpp's converter writes it) and the experts
            x, f = shape.n_expert, shape.n_ff_exp
            out += [(p + "ffn_gate_inp.weight", (x, e), np.float32),
                    (p + "ffn_gate_exps.weight", (x, f, e), np.float16),
                    (p + "ffn_up_exps.weight", (x, f, e), np.float16),
                    (p + "ffn_down_exps.weight", (x, e, f), np.float16)]
        else:
            out += [(p + "ffn_gate.weight", (shape.n_ff, e), np.float16), (p + "ffn_up.weight", (shape.n_ff, e), np.float16),
                    (p + "ffn_down.weight", (e, shape.n_ff), np.float16)]
    out.append(("output_norm.weight", (e,), np.float32))
    if not shape.tied:
        out.append(("output.weight", (shape.n_vocab, e), np.float16))
    return out


def write_f16(shape: Shape, path: Path, seed: int = 0) -> Path:
    """The model in F16 (norms F32), streamed to ``path``."""
    w = GGUFWriter(str(path), shape.arch)
    w.add_name(f"{shape.name} (random weights)")
    w.add_file_type(LLAMA_FTYPE_MOSTLY_F16)
    w.add_block_count(shape.n_layer)
    w.add_context_length(shape.ctx_train)
    w.add_embedding_length(shape.n_embd)
    w.add_feed_forward_length(shape.n_ff or shape.n_ff_exp * shape.n_expert_used)
    if shape.n_expert:
        w.add_expert_count(shape.n_expert)
        w.add_expert_used_count(shape.n_expert_used)
        w.add_expert_feed_forward_length(shape.n_ff_exp)
    w.add_head_count(shape.n_head)
    w.add_head_count_kv(shape.n_head_kv)
    w.add_rope_freq_base(shape.rope_theta)
    w.add_layer_norm_rms_eps(shape.rms_eps)
    w.add_key_length(shape.head_dim)
    w.add_value_length(shape.head_dim)
    w.add_rope_dimension_count(shape.head_dim)
    w.add_vocab_size(shape.n_vocab)
    for key, (vtype, value, sub) in _tokenizer(shape).items():
        w.add_key_value(key, value, vtype, sub)
    w.add_chat_template((TEMPLATES / f"{shape.template}.jinja").read_text())
    layout = tensors(shape)
    for name, dims, dtype in layout:
        w.add_tensor_info(name, dims, np.dtype(dtype), int(np.prod(dims)) * np.dtype(dtype).itemsize)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    rng = np.random.default_rng(seed)
    draw = (rng.standard_normal(POOL_VALUES, dtype=np.float32) * np.float32(SCALE)).astype(np.float16)
    pool = np.concatenate([draw, draw])  # a slice may start anywhere in the first half
    for name, dims, dtype in layout:
        if name == "rope_freqs.weight":
            data = _rope_factors(shape)
        elif name.endswith("ffn_gate_inp.weight"):  # a router: small, any sign
            data = rng.standard_normal(dims, dtype=np.float32) * np.float32(SCALE)
        elif dtype is np.float32:  # norms: around one, as trained ones are
            data = (1 + rng.standard_normal(dims, dtype=np.float32) * np.float32(SCALE)).astype(np.float32)
        else:
            data = _Random(pool, rng, int(np.prod(dims)))
        w.write_tensor_data(data, tensor_endianess=GGUFEndian.LITTLE)  # type: ignore[arg-type]
    w.close()
    return path


def build(shape: Shape, folder: Path) -> tuple[Path, dict]:
    """``folder/NAME-Q4_K_M.gguf``, written (F16, then quantized; the F16 file deleted) unless it
    is there already; the seconds each step took (empty when the file was reused)."""
    from runtime.backends.quantize import QuantizeSpec, quantize_model

    folder.mkdir(parents=True, exist_ok=True)
    dst = folder / f"{shape.name}-Q4_K_M.gguf"
    if dst.is_file():
        log(f"{shape.name}: reusing {dst}")
        return dst, {}
    f16 = folder / f"{shape.name}-F16.gguf"
    steps: dict = {}
    try:
        t = time.perf_counter()
        write_f16(shape, f16)
        steps["write_f16_s"] = round(time.perf_counter() - t, 1)
        steps["f16_mib"] = round(f16.stat().st_size / (1 << 20), 1)
        log(f"{shape.name}: F16 written in {steps['write_f16_s']} s ({steps['f16_mib']} MiB)")
        t = time.perf_counter()
        quantize_model(f16, dst, QuantizeSpec("Q4_K_M"))
        steps["quantize_s"] = round(time.perf_counter() - t, 1)
        steps["q4_k_m_mib"] = round(dst.stat().st_size / (1 << 20), 1)
        log(f"{shape.name}: quantized to Q4_K_M in {steps['quantize_s']} s ({steps['q4_k_m_mib']} MiB)")
    finally:
        f16.unlink(missing_ok=True)
    return dst, steps
