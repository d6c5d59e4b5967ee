"""Constrained decoding: the per-token mask cost, and constrained against free generation.

1. Mask cost on both embedded vocabularies (SmolLM2 49k, Gemma 3 262k): the tokens of a JSON
   document that fits a schema are fed one by one; per token, llguidance computes the
   allowed-token bitmask and Hearth sets the forbidden logits to -inf (what sampling pays);
   greedy first checks only whether the plain argmax is allowed (one token, what greedy pays
   when it is); against them, llama.cpp's
   own grammar sampler (GBNF from llama-cpp-python's ``json_schema_to_gbnf``) applied to the
   full candidate array of the same logits, plus its accept. Mean and p95 microseconds.
2. Decode speed of a JSON-schema-constrained greedy generation against the same generation
   unconstrained (same prompt, same number of tokens; in-process engine, one request), without
   a draft and with one: a draft model (SmolLM2's F16 copy is the target, the embedded Q8_0
   file the draft) and prompt lookup. Target: constrained >= 0.9x of free.

    python bench/constrained.py [--tokens 128] [--threads 0]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import time

import numpy as np

from common import emit, model_path

SCHEMA = {
    "type": "object",
    "properties": {
        "people": {"type": "array", "minItems": 4, "maxItems": 4, "items": {
            "type": "object",
            "properties": {"name": {"type": "string", "maxLength": 24},
                           "age": {"type": "integer", "minimum": 0, "maximum": 120},
                           "city": {"type": "string", "maxLength": 24}},
            "required": ["name", "age", "city"], "additionalProperties": False}},
    },
    "required": ["people"], "additionalProperties": False,
}
DOC = json.dumps({"people": [{"name": f"Person {i}", "age": 20 + i, "city": "Lisbon"} for i in range(4)]})
PROMPT = "Write a JSON list of four people with their name, age and city.\n"


def _stats(us: list[float]) -> dict:
    a = np.asarray(us)
    return {"mean_us": round(float(a.mean()), 1), "p95_us": round(float(np.percentile(a, 95)), 1)}


def mask_cost(model_id: str, threads: int) -> dict:
    import llama_cpp as lc
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    from runtime.backends.llama import ContextConfig, LlamaBackend
    from runtime.engine.constraint import Constraint, ConstraintVocab, compile_constraint

    b = LlamaBackend(model_path(model_id), ContextConfig(n_ctx=512, n_seq_max=1, n_threads=threads))
    t0 = time.perf_counter()
    vocab = ConstraintVocab(b.vocab_pieces(), b.eog_tokens(), b.bos)
    vocab_s = time.perf_counter() - t0
    spec = compile_constraint("json_schema", SCHEMA)
    tokens = b.tokenize(DOC, add_special=False)
    rng = np.random.default_rng(0)
    base = rng.normal(size=b.n_vocab).astype(np.float32)
    c = Constraint(vocab, spec)
    ll, logits = [], base.copy()
    for t in tokens:
        np.copyto(logits, base)
        t1 = time.perf_counter()
        c.mask_logits(logits)
        c.advance(t)
        ll.append((time.perf_counter() - t1) * 1e6)
    assert c.accepting, "the document should complete the schema"
    # greedy's fast path: is the plain argmax allowed? (one token checked, no mask)
    c, one = Constraint(vocab, spec), []
    for t in tokens:
        t1 = time.perf_counter()
        c.matcher.validate_tokens([t])
        one.append((time.perf_counter() - t1) * 1e6)
        c.advance(t)
    # llama.cpp's grammar sampler over the full candidate array (what llama_sampler_sample does)
    grammar = lc.llama_sampler_init_grammar(b.vocab, json_schema_to_gbnf(json.dumps(SCHEMA)).encode(), b"root")
    data = (lc.llama_token_data * b.n_vocab)()
    view = np.ctypeslib.as_array(data).view(np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)]))
    arr = lc.llama_token_data_array(data, b.n_vocab, -1, False)
    gg = []
    for t in tokens:
        view["id"] = np.arange(b.n_vocab, dtype=np.int32)
        view["logit"] = base
        arr.size, arr.selected, arr.sorted = b.n_vocab, -1, False
        t1 = time.perf_counter()
        lc.llama_sampler_apply(grammar, ctypes.byref(arr))
        lc.llama_sampler_accept(grammar, t)
        gg.append((time.perf_counter() - t1) * 1e6)
    lc.llama_sampler_free(grammar)
    b.close()
    return {"n_vocab": b.n_vocab, "tokens": len(tokens), "vocab_build_s": round(vocab_s, 2),
            "llguidance_mask_and_apply": _stats(ll), "llguidance_one_token_check": _stats(one),
            "llama_cpp_grammar_sampler": _stats(gg)}


def decode(engine, prompt: list[int], params, constraint) -> dict:
    engine.add_request("bench", prompt, params, constraint=constraint)
    t_first = t_last = None
    n, text = 0, []
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


def speed(target, draft, mode: str | None, tokens: int) -> dict:
    from runtime.engine.constraint import compile_constraint
    from runtime.engine.engine import Engine
    from runtime.sampling_params import SamplingParams
    from runtime.engine.speculator import Speculator

    spec = None
    if mode == "model":
        spec = Speculator(target, draft)
    elif mode == "ngram":
        spec = Speculator(target, None, default="ngram")
    engine = Engine(target, 1, speculator=spec)
    engine.constraint_vocab()  # built once per model, outside the timing
    prompt = target.tokenize(PROMPT)
    constraint = compile_constraint("json_schema", SCHEMA)
    con = decode(engine, prompt, SamplingParams(temperature=0, max_tokens=tokens), constraint)
    target.clear()
    if draft is not None:
        draft.clear()
    # the same number of tokens, free (EOS ignored so both runs are the same length)
    free = decode(engine, prompt, SamplingParams(temperature=0, max_tokens=con["tokens"], ignore_eos=True), None)
    target.clear()
    if draft is not None:
        draft.clear()
    out = {"valid_json": _parses(con["text"]), "constrained_tok_s": round(con["tok_s"], 2), "free_tok_s": round(free["tok_s"], 2),
           "ratio": round(con["tok_s"] / free["tok_s"], 3), "tokens": con["tokens"]}
    if spec is not None:
        out["acceptance"] = round(spec.stats.acceptance_rate, 3)
    return out


def _parses(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args()

    from runtime.backends.llama import ContextConfig, LlamaBackend
    from runtime.backends.quantize import requantized
    from runtime.config import data_dir

    result: dict = {"schema": "a 4-item array of objects (name, age, city)", "mask_cost": {}}
    for model_id in ("smollm2-135m", "gemma-3-270m"):
        result["mask_cost"][model_id] = mask_cost(model_id, args.threads)
    draft_path = model_path("smollm2-135m")
    target_path = requantized(draft_path, "f16", data_dir() / "requantized")
    cfg = ContextConfig(n_ctx=1024, n_seq_max=2, n_batch=256, n_threads=args.threads)
    target, draft = LlamaBackend(target_path, cfg), LlamaBackend(draft_path, cfg)
    speed(target, None, None, 16)  # warm
    result["speed"] = {"target": target_path.name, "draft": draft_path.name,
                       "no_draft": speed(target, None, None, args.tokens),
                       "draft_model": speed(target, draft, "model", args.tokens),
                       "prompt_lookup": speed(target, None, "ngram", args.tokens)}
    result["targets"] = {"constrained_ge_0.9x_free": all(
        v["ratio"] >= 0.9 for k, v in result["speed"].items() if isinstance(v, dict))}
    target.close()
    draft.close()
    emit(result)


if __name__ == "__main__":
    main()
