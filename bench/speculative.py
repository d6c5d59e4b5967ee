"""Speculative decoding: single-stream decode speed with and without drafting.

The pair is made from one model so the vocabularies match: the target is Gemma 3 270M
re-quantized to F32 with llama.cpp's quantizer (a ~4x heavier pass over the same function;
cached in the data directory), the draft is its Q4_K_M file. In-process engine, one
request at a time, ``--tokens`` tokens each; decode rate = (tokens - 1) / (time of the
last output - time of the first), so the prompt is left out. Configurations: greedy and
temperature 0.8, each without a draft, with the draft at adaptive K, and with a fixed K;
then prompt lookup (``--draft ngram``) on an editing task (repeat a passage with one change).

Targets: greedy >= 1.3x with acceptance >= 0.8; never below 0.95x with adaptive K;
prompt lookup >= 1.5x on the editing task.

    python bench/speculative.py [--tokens 128] [--threads 0]
"""

from __future__ import annotations

import argparse
import time

from common import emit, model_path

STORY = "The history of the Roman Empire begins with"
PASSAGE = (
    "The lighthouse keeper climbed the spiral stairs every evening at dusk. He trimmed the wick, "
    "polished the great lens, and wrote the weather in a leather logbook. Ships passing the rocky "
    "point saw his light sweep across the water, and the fishermen in the harbour said they could "
    "set their clocks by it. In winter the storms shook the tower, but the lamp never failed."
)
EDIT = (f"Passage:\n{PASSAGE}\n\nThe same passage, word for word, with \"lighthouse keeper\" "
        "replaced by \"old sailor\":\n")


def decode(engine, backend, prompt: str, params) -> dict:
    engine.add_request("bench", backend.tokenize(prompt), params)
    t_first = t_last = None
    n = 0
    text = []
    while engine.has_work():
        for o in engine.step():
            now = time.perf_counter()
            if o.n_tokens:
                if t_first is None:
                    t_first, n = now, o.n_tokens - 1
                else:
                    n += o.n_tokens
                t_last = now
            text.append(o.text)
    return {"tok_s": n / (t_last - t_first), "tokens": n + 1, "text": "".join(text)}


def run_config(target, draft, prompt: str, params, mode: str | None, fixed_k: int | None) -> dict:
    from runtime.engine.engine import Engine
    from runtime.engine.speculator import Speculator

    target.clear()
    if draft is not None:
        draft.clear()
    spec = None
    if mode == "model":
        spec = Speculator(target, draft, fixed_k=fixed_k)
    elif mode == "ngram":
        spec = Speculator(target, None, default="ngram", fixed_k=fixed_k)
    engine = Engine(target, 1, speculator=spec)
    out = decode(engine, target, prompt, params)
    if spec is not None:
        s = spec.stats
        out.update(acceptance=round(s.acceptance_rate, 3), drafted=s.drafted, accepted=s.accepted,
                   k_used={str(k): v for k, v in sorted(s.per_k.items())},
                   draft_s=round(s.draft_seconds, 3), verify_s=round(s.verify_seconds, 3),
                   requests_off=s.requests_off)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--fixed-k", type=int, default=4)
    args = ap.parse_args()

    from runtime.backends.llama import ContextConfig, LlamaBackend
    from runtime.backends.quantize import requantized
    from runtime.config import data_dir
    from runtime.sampling_params import SamplingParams

    draft_path = model_path("gemma-3-270m")
    t0 = time.perf_counter()
    target_path = requantized(draft_path, "f32", data_dir() / "requantized")
    quantize_s = time.perf_counter() - t0
    cfg = ContextConfig(n_ctx=2048, n_seq_max=2, n_batch=256, n_threads=args.threads)
    target, draft = LlamaBackend(target_path, cfg), LlamaBackend(draft_path, cfg)
    result: dict = {"target": target_path.name, "draft": draft_path.name, "tokens": args.tokens,
                    "quantize_s": round(quantize_s, 1), "configs": {}}
    # warm both models once
    run_config(target, draft, STORY, SamplingParams(temperature=0, max_tokens=8, ignore_eos=True), "model", 2)
    for name, temp in (("greedy", 0.0), ("temp0.8", 0.8)):
        params = SamplingParams(temperature=temp, max_tokens=args.tokens, ignore_eos=True, seed=1)
        base = run_config(target, draft, STORY, params, None, None)
        cfgs = {"no_draft": base,
                "draft_adaptive": run_config(target, draft, STORY, params, "model", None),
                f"draft_k{args.fixed_k}": run_config(target, draft, STORY, params, "model", args.fixed_k)}
        for c in cfgs.values():
            c["speedup"] = round(c["tok_s"] / base["tok_s"], 3)
            c["tok_s"] = round(c["tok_s"], 2)
            c.pop("text")
        result["configs"][name] = cfgs
    params = SamplingParams(temperature=0, max_tokens=args.tokens, ignore_eos=True)
    base = run_config(target, None, EDIT, params, None, None)
    cfgs = {"no_draft": base, "ngram_adaptive": run_config(target, None, EDIT, params, "ngram", None),
            "ngram_k8": run_config(target, None, EDIT, params, "ngram", 8)}
    for c in cfgs.values():
        c["speedup"] = round(c["tok_s"] / base["tok_s"], 3)
        c["tok_s"] = round(c["tok_s"], 2)
    cfgs["sample_output"] = cfgs["no_draft"].pop("text")[:160]
    for c in list(cfgs.values())[1:3]:
        c.pop("text")
    result["configs"]["edit_greedy"] = cfgs
    g = result["configs"]["greedy"]["draft_adaptive"]
    speedups = [c["speedup"] for group in result["configs"].values() for k, c in group.items()
                if isinstance(c, dict) and "adaptive" in k]
    result["targets"] = {
        "greedy_speedup_ge_1.3": g["speedup"] >= 1.3, "greedy_acceptance_ge_0.8": g["acceptance"] >= 0.8,
        "adaptive_never_below_0.95": min(speedups) >= 0.95,
        "ngram_edit_ge_1.5": result["configs"]["edit_greedy"]["ngram_adaptive"]["speedup"] >= 1.5,
    }
    target.close()
    draft.close()
    emit(result)


if __name__ == "__main__":
    main()
