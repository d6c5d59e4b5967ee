"""A chat longer than the model's context, through the API: refused by default, or sent with whole
turns left out by its ``context_overflow`` policy; ``/hearth/count_tokens`` counts exactly what is
sent, and the reply's header says how many messages were left out."""

from __future__ import annotations

import httpx
import pytest

from runtime.server.launcher import ServiceProcess

MODEL = "smollm2-135m"


@pytest.fixture(scope="module")
def small(smollm2_path):
    s = ServiceProcess("--model", MODEL, "--ctx", "2048", "--parallel", "1").wait_ready()
    yield s
    s.stop()


def _chat(n_turns: int) -> list[dict]:
    out = [{"role": "system", "content": "You are a ship's log keeper."}]
    for i in range(n_turns):
        out.append({"role": "user", "content": f"Day {i}: " + "the wind rose and the sails held. " * 8})
        out.append({"role": "assistant", "content": f"Logged day {i}: " + "fair weather, steady course. " * 6})
    out.append({"role": "user", "content": "What happened on the first day?"})
    return out


def _post(s: ServiceProcess, path: str, body: dict) -> httpx.Response:
    return httpx.post(f"{s.url}{path}", json={"model": MODEL, **body}, timeout=300)


def _count(s: ServiceProcess, messages: list[dict], **extra) -> dict:
    r = _post(s, "/hearth/count_tokens", {"messages": messages, **extra})
    assert r.status_code == 200, r.text
    return r.json()


def test_a_long_chat_is_refused_without_a_policy(small):
    r = _post(small, "/v1/chat/completions", {"messages": _chat(40), "max_tokens": 8})
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded", r.text
    assert _count(small, _chat(40))["dropped_messages"] == 0


@pytest.mark.parametrize("policy", ["truncate_middle", "rolling_window"])
def test_a_policy_leaves_out_the_fewest_whole_turns_and_says_so(small, policy):
    chat = _chat(40)
    counted = _count(small, chat, context_overflow=policy, max_tokens=8)
    dropped = counted["dropped_messages"]
    assert dropped > 0 and dropped % 2 == 0
    assert counted["prompt_tokens"] <= 2048 - 8
    # exactly the conversation the policy keeps: the system prompt (and the first turn), the last turns
    first = 3 if policy == "truncate_middle" else 1
    kept = chat[:first] + chat[first + dropped:]
    assert _count(small, kept)["prompt_tokens"] == counted["prompt_tokens"]
    # one turn fewer left out would not fit
    more = chat[:first] + chat[first + dropped - 2:]
    assert _count(small, more)["prompt_tokens"] > 2048 - 8
    r = _post(small, "/v1/chat/completions", {"messages": chat, "max_tokens": 8, "context_overflow": policy})
    assert r.status_code == 200, r.text
    assert r.headers["x-hearth-dropped-messages"] == str(dropped)
    assert r.json()["usage"]["prompt_tokens"] == counted["prompt_tokens"]


def test_an_unknown_policy_is_a_clear_400(small):
    r = _post(small, "/v1/chat/completions", {"messages": _chat(1), "context_overflow": "shrink"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "context_overflow", r.text
