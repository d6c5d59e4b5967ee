"""Reasoning split from the answer, on a tiny generated GGUF that carries a Qwen3-style chat
template (its generation prompt closes an empty thinking block when thinking is off).

The tiny model's text is random, so a regular expression makes it write a thinking block
and an answer; what is tested is the service's side: the template's switch, the split into
``reasoning_content`` / ``thinking``, streaming, and usage.
"""

from __future__ import annotations

import httpx
import ollama
import pytest

from runtime.server.launcher import ServiceProcess
from tests.spec.tiny_models import vocab, write_tiny

#: Qwen3's generation prompt, without spaces or newlines (the tiny vocabulary has neither)
QWEN3_STYLE = (
    "{%- for message in messages %}{{'<|im_start|>' + message.role + ':' + message.content + '<|im_end|>'}}"
    "{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant:' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think></think>' }}{%- endif %}"
    "{%- endif %}")
REPLY = r"<think>t0[0-9]t0[0-9]</think>t1[0-9]"
TOKENS = vocab() + [chr(i) for i in range(33, 127)] + ["\u2581", "\n"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    d = tmp_path_factory.mktemp("think")
    path = write_tiny(d / "thinker.gguf", seed=0, tokens=TOKENS, chat_template=QWEN3_STYLE)
    s = ServiceProcess("--model", str(path), "--ctx", "512", "--batch", "64", "--threads", "1",
                       "--models-dir", str(d)).wait_ready()
    s.model = str(path)
    yield s
    s.stop()


def chat(server, **body):
    r = httpx.post(f"{server.url}/v1/chat/completions", timeout=120, json={
        "model": server.model, "messages": [{"role": "user", "content": "hi"}], "temperature": 0,
        "max_tokens": 40, "regex": REPLY, **body})
    assert r.status_code == 200, r.text
    return r.json()


def test_reasoning_content_is_split_from_the_answer(server):
    r = chat(server)
    msg = r["choices"][0]["message"]
    assert msg["reasoning_content"] and "<think>" not in msg["reasoning_content"]
    assert msg["content"] and "think>" not in msg["content"]
    assert len(msg["reasoning_content"]) == 6 and len(msg["content"]) == 3
    usage = r["usage"]
    assert usage["completion_tokens"] >= 1 + 2 + 1  # thinking tokens count as output
    assert 0 < usage["completion_tokens_details"]["reasoning_tokens"] < usage["completion_tokens"]
    # streamed: reasoning_content deltas, then content deltas, the same text
    with httpx.stream("POST", f"{server.url}/v1/chat/completions", timeout=120, json={
            "model": server.model, "messages": [{"role": "user", "content": "hi"}], "temperature": 0,
            "max_tokens": 40, "regex": REPLY, "stream": True}) as s:
        import json

        deltas = [json.loads(line[6:])["choices"][0]["delta"] for line in s.iter_lines()
                  if line.startswith("data: {")]
    assert "".join(d.get("reasoning_content", "") for d in deltas) == msg["reasoning_content"]
    assert "".join(d.get("content", "") or "" for d in deltas) == msg["content"]


def test_reasoning_effort_and_think_switch_the_template(server):
    on = chat(server)["usage"]["prompt_tokens"]
    off = chat(server, reasoning_effort="none")["usage"]["prompt_tokens"]
    assert off > on  # the template closed an empty thinking block in the prompt
    assert chat(server, enable_thinking=False)["usage"]["prompt_tokens"] == off
    r = httpx.post(f"{server.url}/v1/chat/completions", timeout=60, json={
        "model": server.model, "messages": [{"role": "user", "content": "hi"}], "reasoning_effort": "extreme"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "reasoning_effort"


def test_ollama_thinking_field(server):
    client = ollama.Client(host=server.url, timeout=120)
    r = client.chat(model=server.model, messages=[{"role": "user", "content": "hi"}], think=True,
                    options={"temperature": 0, "num_predict": 40, "regex": REPLY})
    assert len(r.message.thinking) == 6 and len(r.message.content) == 3
    parts = list(client.chat(model=server.model, messages=[{"role": "user", "content": "hi"}], think=True,
                             stream=True, options={"temperature": 0, "num_predict": 40, "regex": REPLY}))
    assert "".join(p.message.thinking or "" for p in parts) == r.message.thinking
    assert "".join(p.message.content or "" for p in parts) == r.message.content


def test_models_list_reports_reasoning(server):
    data = httpx.get(f"{server.url}/v1/models", timeout=30).json()["data"]
    caps = {m["id"]: m.get("capabilities") for m in data}
    assert "reasoning" not in caps["smollm2-135m"] and "tools" not in caps["smollm2-135m"]
    engine_id = httpx.get(f"{server.url}/hearth/stats", timeout=30).json()["models"][0]["id"]
    assert "reasoning" in caps[engine_id] and "tools" not in caps[engine_id]


def test_anthropic_thinking_blocks(server):
    import anthropic

    client = anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=120)
    kw = dict(model=server.model, max_tokens=40, messages=[{"role": "user", "content": "hi"}],
              thinking={"type": "enabled", "budget_tokens": 1024}, extra_body={"temperature": 0, "regex": REPLY})
    whole = client.messages.create(**kw)
    assert [b.type for b in whole.content] == ["thinking", "text"]
    assert len(whole.content[0].thinking) == 6 and len(whole.content[1].text) == 3
    with client.messages.stream(**kw) as s:
        kinds = [ev.type for ev in s]
        final = s.get_final_message()
    assert "thinking" in kinds and "text" in kinds
    assert [(b.type, getattr(b, "thinking", None) or getattr(b, "text", None)) for b in final.content] == \
        [(b.type, getattr(b, "thinking", None) or getattr(b, "text", None)) for b in whole.content]
    # disabled: the template closes an empty thinking block in the prompt
    off = client.messages.create(**{**kw, "thinking": {"type": "disabled"}}).usage
    assert off.input_tokens + off.cache_read_input_tokens > whole.usage.input_tokens + whole.usage.cache_read_input_tokens


def test_responses_reasoning_items(server):
    from openai import OpenAI

    client = OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=120)
    kw = dict(model=server.model, input="hi", max_output_tokens=40, temperature=0, extra_body={"regex": REPLY})
    whole = client.responses.create(**kw)
    assert [i.type for i in whole.output] == ["reasoning", "message"]
    assert len(whole.output[0].content[0].text) == 6 and len(whole.output_text) == 3
    assert 0 < whole.usage.output_tokens_details.reasoning_tokens < whole.usage.output_tokens
    events = list(client.responses.create(stream=True, **kw))
    thought = "".join(e.delta for e in events if e.type == "response.reasoning_text.delta")
    assert thought == whole.output[0].content[0].text
    assert events[-1].response.output_text == whole.output_text
    off = client.responses.create(reasoning={"effort": "none"}, **kw)
    assert off.usage.input_tokens > whole.usage.input_tokens


#: thinking that only the budget can close (the model may write nothing but ``t0N`` inside the block)
LONG_THOUGHT = r"<think>(t0[0-9])+\n</think>\n\nt1[0-9]"


def test_a_reasoning_budget_closes_the_thinking_block(server):
    """Anthropic's ``budget_tokens`` (and an effort's budget): after that many tokens of thinking
    the engine writes the block's end, and the answer follows."""
    def ask(**extra):
        r = httpx.post(f"{server.url}/v1/messages", timeout=120, json={
            "model": server.model, "max_tokens": 60, "messages": [{"role": "user", "content": "hi"}],
            "temperature": 0, "regex": LONG_THOUGHT, **extra})
        assert r.status_code == 200, r.text
        return r.json()

    unbounded = ask(thinking={"type": "adaptive"})  # no budget: the model closes the block itself
    assert [b["type"] for b in unbounded["content"]] == ["thinking", "text"]
    long_thought = unbounded["content"][0]["thinking"].strip()
    bounded = ask(thinking={"type": "enabled", "budget_tokens": 4})
    assert [b["type"] for b in bounded["content"]] == ["thinking", "text"], bounded
    thought = bounded["content"][0]["thinking"].strip()
    # the same greedy thinking, cut after 4 tokens (each of this vocabulary's tokens is 1-3 characters)
    assert thought and long_thought.startswith(thought) and len(thought) <= 12 < len(long_thought)
    assert bounded["content"][1]["text"].strip().startswith("t1") and bounded["stop_reason"] == "end_turn"
    assert bounded["usage"]["output_tokens"] < unbounded["usage"]["output_tokens"]
