"""The KV and compute-buffer formulas against the sizes llama.cpp itself reports.

Contexts are created (not used) with llama_cpp's low-level API and the settings Hearth uses
(unified KV pool, n_ubatch = n_batch, swa_full, flash attention off for an f16 cache on the
CPU and on for a quantized one); llama.cpp logs "CPU KV buffer size = ... MiB" and "CPU
compute buffer size = ... MiB" for each. The compute buffer llama.cpp reserves holds logits
for every token of a batch, so the estimate is taken with n_outputs = n_batch.
"""

from __future__ import annotations

import ctypes
import re

import llama_cpp as lc
import pytest

from runtime.backends.llama import KV_TYPES
from runtime.hardware.memory import Settings, compute_bytes, kv_bytes
from runtime.hardware.shape import shape_from_gguf

MIB = 1 << 20
CONFIGS = [  # ctx, kv type, n_batch, swa_full
    (512, "f16", 512, True), (8192, "f16", 512, True), (16384, "f16", 256, True),
    (4096, "q8_0", 512, True), (2048, "q4_0", 256, True), (8192, "f16", 512, False),
]


class _Log:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.callback = lc.llama_log_callback(lambda level, text, user: self.lines.append(text.decode()))

    def text(self) -> str:
        return "".join(self.lines)


@pytest.fixture(scope="module")
def reported(smollm2_path, gemma_path):
    log = _Log()
    lc.llama_log_set(log.callback, ctypes.c_void_p(0))
    lc.llama_backend_init()
    out = {}
    try:
        for name, path in (("smollm2", smollm2_path), ("gemma", gemma_path)):
            params = lc.llama_model_default_params()
            params.use_extra_bufts = False  # as Hearth where AMX is advertised; no effect on sizes
            model = lc.llama_model_load_from_file(str(path).encode(), params)
            for ctx, kv, batch, swa_full in CONFIGS:
                log.lines.clear()
                c = lc.llama_context_default_params()
                c.n_ctx, c.n_batch, c.n_ubatch, c.n_seq_max = ctx, batch, batch, 4
                c.kv_unified, c.swa_full, c.no_perf = True, swa_full, True
                c.type_k = c.type_v = KV_TYPES[kv]
                c.flash_attn_type = lc.LLAMA_FLASH_ATTN_TYPE_DISABLED if kv == "f16" else 1
                handle = lc.llama_init_from_model(model, c)
                text = log.text()
                out[(name, ctx, kv, batch, swa_full)] = (
                    sum(float(x) for x in re.findall(r"CPU KV buffer size =\s*([\d.]+) MiB", text)),
                    float(re.search(r"CPU compute buffer size =\s*([\d.]+) MiB", text).group(1)),
                )
                lc.llama_free(handle)
            lc.llama_model_free(model)
    finally:
        lc.llama_log_set(lc.llama_log_callback(0), ctypes.c_void_p(0))
    return out


@pytest.mark.parametrize("name", ["smollm2", "gemma"])
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"{c[0]}-{c[1]}-b{c[2]}-{'full' if c[3] else 'swa'}")
def test_kv_and_compute_match_llama_cpp(reported, smollm2_path, gemma_path, name, config):
    ctx, kv, batch, swa_full = config
    shape = shape_from_gguf(smollm2_path if name == "smollm2" else gemma_path)
    kv_mib, compute_mib = reported[(name, *config)]
    s = Settings(ctx=ctx, kv_type=kv, n_seq=4, n_batch=batch, swa_full=swa_full, holders=0)  # 4 ids in all
    assert kv_bytes(s=s, shape=shape) / MIB == pytest.approx(kv_mib, abs=0.01)
    estimate = compute_bytes(shape, s, n_outputs=batch, flash_attn=kv != "f16") / MIB
    assert estimate == pytest.approx(compute_mib, rel=0.05)
