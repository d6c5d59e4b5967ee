"""No request's data can end the engine: the worker checks every Submit, and a step that
fails for one request fails that request only (SmolLM2 through llama.cpp, a real worker)."""

from __future__ import annotations

import asyncio

import pytest

from runtime.backends.llama import ContextConfig, LlamaBackend
from runtime.config import EngineConfig
from runtime.engine.client import EngineClient, RequestRefused
from runtime.engine.engine import Engine
from runtime.engine.messages import WorkerSpec
from runtime.sampling_params import SamplingParams
from tests.greedy_reference import assert_same_or_near_tie, greedy_reference


def greedy(n: int, **kw) -> SamplingParams:
    return SamplingParams(temperature=0, max_tokens=n, ignore_eos=True, **kw)


def test_a_batch_llama_cpp_refuses_fails_only_the_request_that_caused_it(smollm2_path):
    """A token id outside the vocabulary in one request's batch makes llama_decode return -1
    for the whole batch: that request ends with ``invalid_token``, the other one finishes
    with exactly the text it has alone."""
    backend = LlamaBackend(smollm2_path, ContextConfig(n_ctx=1024, n_seq_max=2, n_batch=128))
    try:
        engine = Engine(backend, 2)
        good_prompt = backend.tokenize("The capital of France is")
        reference = greedy_reference(backend, good_prompt, 12, ignore_eos=True)
        bad = engine.add_request("bad", backend.tokenize("Once upon a time"), greedy(12))
        engine.add_request("good", good_prompt, greedy(12))
        texts, finish, errors = {}, {}, {}
        for o in engine.step():  # both prompts computed, one token sampled each
            texts[o.request_id] = o.text
        bad.tokens[-1] = backend.n_vocab + 5  # as if its sampler had returned an id llama.cpp cannot take
        while engine.has_work():
            for o in engine.step():
                texts[o.request_id] = texts.get(o.request_id, "") + o.text
                if o.finish_reason:
                    finish[o.request_id], errors[o.request_id] = o.finish_reason, o.error_code
        assert finish == {"bad": "error", "good": "length"}
        assert errors["bad"] == "invalid_token"
        assert assert_same_or_near_tie(texts["good"], reference)
        assert engine.stats().kv_cells_used == 0
    finally:
        backend.close()


HOSTILE_SUBMITS = [
    dict(prompt="hi \ud800"),
    dict(messages=[{"role": "user", "content": "hi \udfff"}]),
    dict(messages=[{"role": "user", "content": [{"type": "text", "text": None}]}]),
    dict(messages=[{"role": "user", "content": [{"type": "text", "text": 5}]}]),
    dict(messages=[{"role": "user", "content": 7}]),
    dict(messages=["not an object"]),
    dict(tokens=[1, 2, 10**9]),
    dict(tokens=[-1]),
    dict(prompt="x", params=SamplingParams(penalty_last_n=2**31 - 1, repeat_penalty=1.1)),
    dict(prompt="x", params=SamplingParams(temperature=float("nan"))),
    dict(prompt="x", params=SamplingParams(top_k=-5)),
    dict(prompt="x", params=SamplingParams(stop=[5])),
    dict(prompt="x", params=SamplingParams(stop=["\ud800"])),
    dict(prompt="x", n=10**6),
]


@pytest.mark.timeout(300)
def test_hostile_submits_are_refused_with_a_code_while_another_request_streams(smollm2_path):
    async def main() -> None:
        client = EngineClient(WorkerSpec("smollm2-135m", str(smollm2_path), EngineConfig(ctx=1024, parallel=2)))
        await client.start()
        pid = client.pid
        try:
            [long] = await client.submit(greedy(24), prompt="Count slowly: one, two,")
            codes = []
            for kw in HOSTILE_SUBMITS:
                params = kw.pop("params", greedy(4))
                with pytest.raises(RequestRefused) as e:
                    await client.submit(params, **kw)
                codes.append(e.value.code)
            n = 0
            async for out in long:
                n += out.n_tokens
                last = out
            assert n == 24 and last.finish_reason == "length"
            assert client.alive and client.pid == pid
            assert all(codes) and "invalid_token" in codes and "invalid_request" in codes
            [after] = await client.submit(greedy(3), prompt="Hello")
            assert sum([o.n_tokens async for o in after]) == 3
        finally:
            await client.stop()

    asyncio.run(main())


@pytest.mark.timeout(300)
def test_a_long_prompt_is_tokenized_off_the_step_loop_with_the_same_tokens(smollm2_path):
    """Over ``INLINE_TOKENIZE_CHARS`` the worker tokenizes on a helper thread: the result is
    the tokenizer's own, and a request already streaming keeps getting tokens meanwhile."""
    text = "The quick brown fox jumps over the lazy dog. " * 40  # 1,800 characters, 400 tokens
    backend = LlamaBackend(smollm2_path, ContextConfig(n_ctx=256, n_seq_max=1, n_batch=64))
    try:
        expected = len(backend.tokenize(text, add_special=True, parse_special=False))
    finally:
        backend.close()

    async def main() -> None:
        client = EngineClient(WorkerSpec("smollm2-135m", str(smollm2_path), EngineConfig(ctx=1024, parallel=2),
                                         inline_tokenize_chars=1024))
        await client.start()
        try:
            [stream] = await client.submit(greedy(24), prompt="Count slowly: one, two,")
            big = asyncio.ensure_future(client.submit(greedy(1), prompt=text))
            n = 0
            async for out in stream:
                n += out.n_tokens
            [handle] = await big
            assert handle.prompt_tokens == expected
            assert n == 24
            assert sum([o.n_tokens async for o in handle]) == 1
        finally:
            await client.stop()

    asyncio.run(main())


@pytest.mark.parametrize("model", ["smollm2", "gemma"])
def test_a_raw_prompt_reads_its_special_tokens_and_gets_one_bos(model, smollm2_path, gemma_path):
    """A raw prompt written with the model's own markers (a hand-made template, fill-in-the-middle)
    gets those tokens, as llama-server and vLLM give them, and a leading BOS written in the text
    is not doubled by the one the tokenizer adds."""
    path = smollm2_path if model == "smollm2" else gemma_path
    marked = ("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n" if model == "smollm2"
              else "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n")
    backend = LlamaBackend(path, ContextConfig(n_ctx=256, n_seq_max=1, n_batch=64))
    try:
        special = backend.tokenize(marked, add_special=True, parse_special=True)
        literal = backend.tokenize(marked, add_special=True, parse_special=False)
        bos = backend.bos
    finally:
        backend.close()
    expected = special[1:] if special[:2] == [bos, bos] else special
    assert len(expected) < len(literal) - 4  # each marker one token, not its letters

    async def main() -> int:
        client = EngineClient(WorkerSpec(model, str(path), EngineConfig(ctx=512, parallel=1)))
        await client.start()
        try:
            [handle] = await client.submit(greedy(1), prompt=marked)
            assert [t async for t in handle]
            return handle.prompt_tokens
        finally:
            await client.stop()

    assert asyncio.run(main()) == len(expected)
    assert model == "smollm2" or special[:2] == [bos, bos]  # Gemma's text starts with its BOS: one dropped
