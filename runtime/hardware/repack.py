"""Weights that llama.cpp's CPU backend repacks into a buffer of its own when it loads a model.

On a CPU with the kernels for it, ggml's CPU backend keeps a copy of each quantized matrix of some
types in an interleaved layout (its "CPU_REPACK" extra buffer type, ``ggml-cpu/repack.cpp``:
``ggml_repack_get_optimal_repack_type``), in anonymous memory, while the file stays mapped: the
mapped pages were read to make the copy and stay resident until the system needs them back, so
such a matrix is in memory twice. On this 2-core x86 machine with AVX2, Q4_K_M files repack 71-83%
of their layers' bytes (Llama 3.2 1B's shape: 445 of 754 MiB; Qwen3 4B's: 1,683 of 2,363 MiB, as
llama.cpp's load log says), which the plan missed.

Which matrices: those used by a matrix multiplication (every ``.weight`` of two or three
dimensions but the token embeddings, which are looked up, not multiplied), of a type the CPU has a
repacking kernel for, whose row count ``ne[1]`` divides by the kernel's interleave. Where Hearth
turns the extra buffer types off (a CPU that advertises AMX: ``runtime.backends.amx``) nothing is
repacked. Layers offloaded to a GPU are not repacked, and neither are experts kept on the CPU by a
buffer override (the override names the plain CPU buffer).
"""

from __future__ import annotations

#: ggml type ids (``runtime.store.ggml_types``)
Q4_0, Q8_0, Q2_K, Q4_K, Q5_K, Q6_K, IQ4_NL, MXFP4, Q1_0 = 2, 8, 10, 12, 13, 14, 20, 39, 41


def repack_rules(features: list[str] | tuple[str, ...]) -> dict[int, int]:
    """ggml type -> the interleave a matrix's row count must divide by, for this CPU's features
    (``runtime.hardware.cpu`` names); empty where nothing is repacked."""
    f = set(features)
    if "AMX (advertised)" in f:  # Hearth loads every model with the extra buffer types off there
        return {}
    rules: dict[int, int] = {}
    if "AVX2" in f:
        rules.update({Q4_0: 8, Q4_K: 8, IQ4_NL: 8, MXFP4: 8})
    if "AVX-512" in f:
        rules[Q2_K] = 8
    if "NEON" in f and ("I8MM" in f or "DOTPROD" in f):
        arm = {Q4_0: 4, Q4_K: 8, Q5_K: 8, Q6_K: 8, Q8_0: 4, Q1_0: 4}
        if "DOTPROD" in f:  # these two have dot-product kernels only
            arm.update({IQ4_NL: 4, MXFP4: 4})
        for ggml_type, rows in arm.items():
            rules.setdefault(ggml_type, rows)
    return rules


def repacked(ggml_type: int, shape: tuple[int, ...], name: str, rules: dict[int, int]) -> bool:
    """Whether llama.cpp repacks this tensor on a CPU with ``rules``."""
    rows = rules.get(ggml_type)
    return (rows is not None and len(shape) in (2, 3) and shape[1] % rows == 0
            and name.endswith(".weight") and "token_embd" not in name)


#: before a download only the quantization's name is known: the share of a layer's bytes that is
#: repacked, and as which type, measured on generated models at real shapes (``bench/real_shapes.py``:
#: Q4_K_M 0.75-0.85 of the layers' bytes, its Q6_K and Q5_0 matrices stay) or whole for the
#: uniform 4-bit types
CATALOG_SHARES: dict[str, tuple[int, float]] = {
    "Q4_K_M": (Q4_K, 0.8), "Q4_K_S": (Q4_K, 0.95), "Q4_0": (Q4_0, 1.0), "IQ4_NL": (IQ4_NL, 1.0),
}


def estimated_matmuls(quant: str | None, layer_bytes: tuple[int, ...]) -> tuple[tuple[int, int, int, int], ...]:
    """``ModelShape.matmuls`` for a model not downloaded yet, from its quantization's name."""
    known = CATALOG_SHARES.get((quant or "").upper())
    if known is None:
        return ()
    ggml_type, share = known
    return tuple((il, ggml_type, 8, int(n * share)) for il, n in enumerate(layer_bytes))
