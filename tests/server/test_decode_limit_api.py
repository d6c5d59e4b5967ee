"""/hearth/stats says, per loaded model, the memory wall of its placement (``decode_limit_tps``),
which the app shows beside each answer's tokens/s; /hearth/fit says the same for a plan."""

from __future__ import annotations

import httpx

from runtime.hardware.shape import shape_from_gguf


def test_a_loaded_model_reports_its_decode_limit(server, smollm2_path):
    r = httpx.post(f"{server.url}/v1/chat/completions", timeout=120, json={
        "model": "smollm2-135m", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2})
    assert r.status_code == 200
    stats = httpx.get(f"{server.url}/hearth/stats", timeout=30).json()
    limit = next(m for m in stats["models"] if m["id"] == "smollm2-135m")["decode_limit_tps"]
    # on the CPU a token reads every layer, the output matrix (the tied embeddings: about 97 MB
    # of the 98 MB file) and 512 cells of K and V (30 layers x 3 heads x 64 x 2, f16), at the
    # bandwidth the service measured
    shape = shape_from_gguf(smollm2_path)
    per_token = sum(shape.layer_bytes) + shape.output_matrix_bytes + 512 * 30 * 3 * 64 * 2 * 2
    bandwidth = httpx.get(f"{server.url}/hearth/hardware", timeout=120).json()["memory_bandwidth_bytes_per_s"]
    assert isinstance(limit, float) and abs(limit / (bandwidth / per_token) - 1) < 0.01
    plan = httpx.get(f"{server.url}/hearth/fit", params={"model": "smollm2-135m", "ctx": "4096"}, timeout=120).json()
    assert abs(plan["decode_limit_tps"] / limit - 1) < 0.01  # the same placement, planned once at load
    assert plan["decode_limit_at_ctx_tps"] < plan["decode_limit_tps"]
