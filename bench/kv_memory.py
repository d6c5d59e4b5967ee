"""KV memory: cells allocated vs tokens held, and what sharing saves.

In-process engine with SmolLM2 (no HTTP), block size 16.
- Mixed workload: 10 requests with prompts of 40-700 tokens and 20-200 output tokens, 4
  running at once; every step compares the cells the block tables allocate (blocks x 16)
  with the tokens they actually hold. Target: waste <= 4% of cells in use.
- n=4 sampling of one 400-token prompt vs 4 independent requests (prefix cache off): peak
  blocks. Target: the prompt is stored once.
- 4 requests sharing a 300-token system prompt, cache on vs off: peak blocks.

    python bench/kv_memory.py
"""

from __future__ import annotations

from common import emit, model_path


def engine(prefix_cache: bool, parallel: int = 4):
    from runtime.backends.llama import ContextConfig, LlamaBackend
    from runtime.engine.engine import CacheConfig, Engine

    b = LlamaBackend(model_path("smollm2-135m"), ContextConfig(n_ctx=8192, n_seq_max=parallel + 8))
    return Engine(b, parallel, CacheConfig(16, prefix_cache, 1.0))


def held_tokens(e) -> tuple[int, int]:
    """(cells allocated to running requests' blocks, tokens those blocks hold)."""
    allocated = held = 0
    for r in e.scheduler.running:
        table = e.kv.tables.get(r.request_id, [])
        allocated += len(table) * e.kv.block_size
        held += r.num_computed
    return allocated, held


def run(e, sample=None) -> int:
    peak = 0
    while e.has_work():
        e.step()
        peak = max(peak, e.kv.pool.num_used)
        if sample:
            sample(e)
    return peak


def mixed() -> dict:
    from runtime.sampling_params import SamplingParams

    e = engine(prefix_cache=False)
    b = e.backend
    rows = []
    for i, (p, n) in enumerate([(40, 200), (700, 20), (120, 120), (300, 60), (60, 180), (500, 40),
                                (250, 100), (90, 150), (650, 30), (200, 200)]):
        prompt = b.tokenize(f"Request {i}. " + "lorem ipsum dolor sit amet " * (p // 6))[:p]
        e.add_request(f"m{i}", prompt, SamplingParams(temperature=0, max_tokens=n, ignore_eos=True))
    run(e, lambda e: rows.append(held_tokens(e)))
    e.backend.close()
    waste = [(a - h) / a for a, h in rows if a]
    alloc, held = sum(a for a, _ in rows), sum(h for _, h in rows)
    return {"steps": len(rows), "mean_waste": round((alloc - held) / alloc, 4),
            "max_waste": round(max(waste), 4), "target_waste": 0.04}


def sharing() -> dict:
    from runtime.sampling_params import SamplingParams

    out = {}
    prompt_text = "Tell me a story about a lighthouse keeper. " * 40
    for label, cache in (("n4_shared", True), ("n4_separate_no_cache", False)):
        e = engine(prefix_cache=cache)
        prompt = e.backend.tokenize(prompt_text)[:400]
        params = SamplingParams(temperature=0.8, seed=1, max_tokens=32)
        if cache:
            e.add_group("g", prompt, params, 4)
        else:
            for i in range(4):
                e.add_request(f"s{i}", prompt, params)
        out[label] = {"peak_blocks": run(e), "prompt_blocks": -(-len(prompt) // 16)}
        e.backend.close()
    system = "You are a helpful assistant for a hardware store. " * 30
    for label, cache in (("system_prompt_cache_on", True), ("system_prompt_cache_off", False)):
        e = engine(prefix_cache=cache)
        b = e.backend
        first = b.chat_prompt([{"role": "system", "content": system}, {"role": "user", "content": "Hello"}])
        e.add_request("first", first, SamplingParams(temperature=0, max_tokens=1))
        run(e)
        for i in range(4):
            p = b.chat_prompt([{"role": "system", "content": system}, {"role": "user", "content": f"Question {i}?"}])
            e.add_request(f"q{i}", p, SamplingParams(temperature=0, max_tokens=32, ignore_eos=True))
        out[label] = {"peak_blocks": run(e), "system_prompt_tokens": len(first)}
        e.backend.close()
    n4 = out["n4_shared"]
    n4["prompt_stored_once"] = n4["peak_blocks"] < n4["prompt_blocks"] + 4 * 4
    return out


def main() -> None:
    emit({"benchmark": "kv_memory", "model": "smollm2-135m", "block_size": 16,
          "mixed_workload": mixed(), "sharing": sharing()})


if __name__ == "__main__":
    main()
