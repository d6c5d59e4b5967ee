"""GPTQ and AWQ 4-bit weights back to float, with their own documented packings.

GPTQ (AutoGPTQ / GPTQModel, ``quant_method: gptq``, ``checkpoint_format: gptq``):
``qweight`` int32 [in/8, out], eight 4-bit values per word along the input axis, value ``j``
of word ``i`` at bits ``4j`` (input channel ``8i + j``); ``qzeros`` int32 [groups, out/8]
packed the same way along the output axis, stored minus one (``gptq_v2`` stores them as they
are); ``scales`` float16 [groups, out]; ``g_idx`` int32 [in], the group of each input channel
(``desc_act`` reorders them; without it ``g_idx[i] = i // group_size``).
``W[o, i] = scales[g, o] * (q[i, o] - zero[g, o])`` with ``g = g_idx[i]``.

AWQ (AutoAWQ GEMM, ``quant_method: awq``, ``version: gemm``): ``qweight`` int32 [in, out/8]
and ``qzeros`` int32 [groups, out/8], packed along the output axis in the interleaved order
``[0, 2, 4, 6, 1, 3, 5, 7]`` (nibble ``k`` of a word holds column ``8c + order[k]``), zeros as
they are; ``scales`` float16 [groups, out]. ``W[o, i] = scales[i // G, o] * (q[i, o] -
zero[i // G, o])``. AWQ's per-channel activation scales were folded into the layer before
(a norm or ``up_proj``) when the checkpoint was written, so the float weights are the
model's own; a checkpoint that keeps them apart (``ScaledActivation``, ``*.act.scales``) has
them divided into ``down_proj``'s input channels here.
"""

from __future__ import annotations

import numpy as np

AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)
_SHIFTS = np.arange(0, 32, 4, dtype=np.uint32)


class UnsupportedQuantization(ValueError):
    pass


def _nibbles(words: np.ndarray) -> np.ndarray:
    """int32 words [..., n] -> their eight 4-bit values [..., n, 8], lowest bits first."""
    return ((words.astype(np.uint32)[..., None] >> _SHIFTS) & 0xF).astype(np.int32)


def unpack_gptq_rows(qweight: np.ndarray) -> np.ndarray:
    """[in/8, out] -> [in, out]: the eight values of a word are consecutive input channels."""
    n, out = qweight.shape
    return _nibbles(qweight).transpose(0, 2, 1).reshape(n * 8, out)


def unpack_columns(words: np.ndarray, order: tuple[int, ...] = tuple(range(8))) -> np.ndarray:
    """[rows, out/8] -> [rows, out]: nibble ``k`` of word ``c`` is column ``8c + order[k]``."""
    vals = _nibbles(words)
    out = np.empty_like(vals)
    out[..., list(order)] = vals
    return out.reshape(words.shape[0], -1)


def dequantize_gptq(qweight: np.ndarray, qzeros: np.ndarray, scales: np.ndarray,
                    g_idx: np.ndarray | None, group_size: int, bits: int = 4, v2: bool = False) -> np.ndarray:
    """Float32 weight [out, in] of a GPTQ linear layer."""
    if bits != 4:
        raise UnsupportedQuantization(f"GPTQ with {bits} bits: only 4-bit checkpoints are imported")
    q = unpack_gptq_rows(qweight)  # [in, out]
    zeros = unpack_columns(qzeros) + (0 if v2 else 1)  # [groups, out]
    n_in = q.shape[0]
    groups = np.asarray(g_idx, dtype=np.int64) if g_idx is not None else np.arange(n_in) // group_size
    w = (q - zeros[groups]).astype(np.float32) * scales[groups].astype(np.float32)
    return np.ascontiguousarray(w.T)


def dequantize_awq(qweight: np.ndarray, qzeros: np.ndarray, scales: np.ndarray, group_size: int,
                   bits: int = 4) -> np.ndarray:
    """Float32 weight [out, in] of an AWQ GEMM linear layer."""
    if bits != 4:
        raise UnsupportedQuantization(f"AWQ with {bits} bits: only 4-bit checkpoints are imported")
    q = unpack_columns(qweight, AWQ_ORDER)  # [in, out]
    zeros = unpack_columns(qzeros, AWQ_ORDER)  # [groups, out]
    groups = np.arange(q.shape[0]) // group_size
    w = (q - zeros[groups]).astype(np.float32) * scales[groups].astype(np.float32)
    return np.ascontiguousarray(w.T)


def check_layer(tensors: dict[str, np.ndarray], base: str, method: str, group: int) -> None:
    """Refuse a packed layer whose tensors do not fit together (``UnsupportedQuantization``),
    before anything is unpacked: their shapes come from an untrusted file."""
    q, zeros, scales = (tensors.get(f"{base}.{k}") for k in ("qweight", "qzeros", "scales"))
    if q is None or zeros is None or scales is None or q.ndim != 2 or zeros.ndim != 2 or scales.ndim != 2:
        raise UnsupportedQuantization(f"{base}: a packed layer needs 2-D qweight, qzeros and scales")
    n_in, n_out = (q.shape[0] * 8, q.shape[1]) if method == "gptq" else (q.shape[0], q.shape[1] * 8)
    n_groups = -(-n_in // group)
    g_idx = tensors.get(base + ".g_idx") if method == "gptq" else None
    if g_idx is not None:
        if g_idx.shape != (n_in,):
            raise UnsupportedQuantization(f"{base}.g_idx has shape {list(g_idx.shape)}, not [{n_in}]")
        n_groups = scales.shape[0]
        if n_in and not 0 <= int(g_idx.min()) <= int(g_idx.max()) < n_groups:
            raise UnsupportedQuantization(f"{base}.g_idx names groups outside 0..{n_groups - 1}")
    if scales.shape != (n_groups, n_out) or zeros.shape != (n_groups, n_out // 8):
        raise UnsupportedQuantization(
            f"{base}: qweight {list(q.shape)} with groups of {group} needs scales [{n_groups}, {n_out}] and "
            f"qzeros [{n_groups}, {n_out // 8}], not {list(scales.shape)} and {list(zeros.shape)}")


def dequantize_state(tensors: dict[str, np.ndarray], config: dict) -> dict[str, np.ndarray]:
    """Every ``<layer>.qweight`` of a checkpoint replaced by ``<layer>.weight`` in float32."""
    method = str(config.get("quant_method", "")).lower()
    bits, group = int(config.get("bits", 4)), int(config.get("group_size", 128))
    if method == "awq" and str(config.get("version", "gemm")).lower() != "gemm":
        raise UnsupportedQuantization(f"AWQ version {config.get('version')}: only GEMM checkpoints are imported")
    if method not in ("gptq", "awq"):
        raise UnsupportedQuantization(f"quantization method {method!r}: GPTQ and AWQ are imported")
    out: dict[str, np.ndarray] = {}
    for name, value in tensors.items():
        if not name.endswith(".qweight"):
            if not name.endswith((".qzeros", ".scales", ".g_idx")):
                out[name] = value
            continue
        base = name[: -len(".qweight")]
        if group <= 0:  # -1: one group over the whole input
            group = value.shape[0] * (8 if method == "gptq" else 1)
        check_layer(tensors, base, method, group)
        if method == "gptq":
            g_idx = tensors.get(base + ".g_idx")
            out[base + ".weight"] = dequantize_gptq(value, tensors[base + ".qzeros"], tensors[base + ".scales"],
                                                    g_idx, group, bits,
                                                    str(config.get("checkpoint_format", "gptq")) == "gptq_v2")
        else:
            out[base + ".weight"] = dequantize_awq(value, tensors[base + ".qzeros"], tensors[base + ".scales"],
                                                   group, bits)
    for name in [n for n in out if n.endswith(".act.scales")]:  # AWQ ScaledActivation kept apart
        mlp = name[: -len(".act.scales")]
        down = out.get(mlp + ".down_proj.weight")
        if down is not None:
            out[mlp + ".down_proj.weight"] = down / out[name].astype(np.float32)[None, :]
        del out[name]
    return out
