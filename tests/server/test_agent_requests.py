"""The first requests of real coding agents, replayed against a live server.

``agent_requests/*.json`` are the request bodies that Claude Code, Codex and opencode sent on
their first turn, recorded through a proxy, with every free text (prompts, tool descriptions)
replaced by filler of the same length: the shapes are the clients' own (roles, block and tool
types, tool schemas, extra fields), the words are not. Each must be served (2xx) as the real
service would get it, and what Hearth does with the parts it cannot act on is checked.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import httpx
import pytest

from runtime.server.wire.anthropic.anthropic_schemas import fold_system, parse_messages
from runtime.server.generate.client_metadata import strip_metadata
from runtime.server.generate.request import Message
from runtime.server.launcher import ServiceProcess
from runtime.server.wire.responses.responses_schemas import parse_responses

RECORDED = Path(__file__).parent / "agent_requests"
#: free texts are cut to this many characters for the replays that generate (the structure stays)
SHORT = 40
CTX = 8192


def recorded(name: str) -> dict:
    return json.loads((RECORDED / f"{name}.json").read_text())


def shortened(value, key: str = ""):
    """``value`` with every long free text cut to ``SHORT`` characters."""
    if isinstance(value, dict):
        return {k: shortened(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [shortened(v, key) for v in value]
    if isinstance(value, str) and key in ("text", "description", "content", "instructions") and len(value) > SHORT:
        return value[:SHORT]
    return value


def sse_events(text: str) -> list[dict]:
    return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]


# -- the parsers alone: what each recorded body becomes ------------------------------------
def test_claude_code_body_parses_with_its_system_message_folded():
    body = recorded("claude_code")["body"]
    assert any(m["role"] == "system" for m in body["messages"])  # what used to be a 400
    gen = parse_messages(body).gen
    roles = [m.role for m in gen.messages]
    assert roles[0] == "system" and "system" not in roles[1:]
    assert "x-anthropic-billing-header" not in gen.messages[0].content
    assert gen.params.max_tokens == body["max_tokens"]  # clamped later, by the service, not refused
    assert {t.name for t in gen.tools} == {t["name"] for t in body["tools"]}
    assert gen.think is True  # thinking: adaptive


def test_mid_conversation_system_messages_keep_earlier_turns_unchanged():
    turn1 = [Message("user", "a"), Message("system", "note")]
    turn2 = turn1 + [Message("assistant", "b"), Message("user", "c")]
    one, two = fold_system(turn1), fold_system(turn2)
    assert two[: len(one)] == one  # the next request's prompt starts with this one's
    assert [m.role for m in two] == ["user", "assistant", "user"]
    late = fold_system([Message("user", "a"), Message("assistant", "b"), Message("system", "s"), Message("user", "c")])
    assert late[-1] == Message("user", "s\n\nc")
    lead = fold_system([Message("system", "x"), Message("system", "y"), Message("user", "u")])
    assert lead[0] == Message("system", "x\n\ny")


def test_billing_header_is_stripped_wherever_it_starts_a_line():
    head = "x-anthropic-billing-header: cc_version=2.1.197.123; cc_entrypoint=sdk-cli;"
    assert strip_metadata(head + "\nYou are a helper.") == "You are a helper."
    assert strip_metadata("You are a helper.") == "You are a helper."
    other = head.replace("123", "456")
    assert strip_metadata(head + "\nSame") == strip_metadata(other + "\nSame")


def test_codex_body_parses_with_namespaces_flattened_and_hosted_tools_left_out():
    body = recorded("codex")["body"]
    kinds = {t["type"] for t in body["tools"]}
    assert {"namespace", "web_search"} <= kinds
    req = parse_responses(body)
    names = [t.name for t in req.gen.tools]
    nested = [t["name"] for t in body["tools"] if t["type"] == "namespace" for t in t["tools"]]
    assert set(nested) <= set(names) and len(names) == len(set(names))
    assert all(req.tool_kinds[n] == ("namespace", "multi_agent_v1") for n in nested)
    assert "web_search" not in names


def test_custom_tools_and_their_calls_round_trip_through_a_function():
    body = {"input": [
        {"type": "message", "role": "user", "content": "patch it"},
        {"type": "custom_tool_call", "call_id": "c1", "name": "apply_patch", "input": "*** Begin Patch"},
        {"type": "custom_tool_call_output", "call_id": "c1", "output": [{"type": "input_text", "text": "done"},
                                                                         {"type": "input_image", "image_url": "x"}]},
        {"type": "web_search_call", "id": "ws1", "status": "completed"},
        {"type": "reasoning", "summary": []}],
        "tools": [{"type": "custom", "name": "apply_patch", "description": "edit files",
                   "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"}}],
        "top_logprobs": 2}
    req = parse_responses(body)
    assert req.tool_kinds == {"apply_patch": ("custom", "")}
    assert req.input_messages[1].tool_calls[0].arguments == {"input": "*** Begin Patch"}
    assert req.input_messages[2].role == "tool" and "not shown" in req.input_messages[2].content
    assert len(req.input_messages) == 3
    assert req.gen.params.logprobs and req.gen.params.top_logprobs == 2


# -- against a live server ----------------------------------------------------------------
@pytest.fixture(scope="module")
def agent_server(smollm2_path):
    """SmolLM2's whole trained context: Claude Code's 24 tool schemas alone take ~5k tokens."""
    s = ServiceProcess("--parallel", "2", "--ctx", str(CTX)).wait_ready()
    yield s
    s.stop()


@pytest.fixture()
def http(agent_server):
    with httpx.Client(base_url=agent_server.url, timeout=600) as c:
        yield c


@pytest.mark.timeout(900)  # an 8k-token prompt read on 2 cores, with the tools' grammar compiled first
@pytest.mark.parametrize("name", ["claude_code", "codex", "opencode"])
def test_recorded_first_request_is_served(http, name):
    rec = recorded(name)
    body = shortened(rec["body"])
    body["max_output_tokens" if name == "codex" else "max_tokens"] = 8  # Codex sends no limit; the others 32000
    body.update(model="smollm2-135m", temperature=0)
    r = http.post(rec["path"], json=body)
    assert r.status_code == 200, r.text[:500]
    assert r.headers["content-type"].startswith("text/event-stream")
    events = sse_events(r.text)
    kinds = [e.get("type") or e.get("object") for e in events]
    assert not any(k in ("error", "response.failed") for k in kinds), r.text[-800:]
    if name == "claude_code":
        assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    elif name == "codex":
        assert kinds[0] == "response.created" and kinds[-1] in ("response.completed", "response.incomplete")
    else:
        assert r.text.rstrip().endswith("data: [DONE]")


def test_claude_code_full_size_prompt_is_counted(http):
    """The whole recorded body (tools, 20k tokens of instructions) renders and tokenizes."""
    body = copy.deepcopy(recorded("claude_code")["body"])
    for k in ("max_tokens", "stream", "metadata"):
        body.pop(k)
    r = http.post("/v1/messages/count_tokens", json=body)
    assert r.status_code == 200, r.text[:500]
    assert r.json()["input_tokens"] > 10_000


def test_context_overflow_is_worded_as_each_client_reads_it(http):
    long = "lorem ipsum dolor " * 6000  # far past the test server's context
    a = http.post("/v1/messages", json={"model": "smollm2-135m", "max_tokens": 8,
                                        "messages": [{"role": "user", "content": long}]})
    assert a.status_code == 400
    message = a.json()["error"]["message"]
    m = re.match(r"prompt is too long[^0-9]*(\d+)\s*tokens?\s*>\s*(\d+)", message)  # Claude Code's own pattern
    assert m and int(m.group(1)) >= int(m.group(2)) == CTX, message
    o = http.post("/v1/chat/completions", json={"model": "smollm2-135m", "max_tokens": 8,
                                                "messages": [{"role": "user", "content": long}]})
    assert o.status_code == 400 and o.json()["error"]["code"] == "context_length_exceeded"


def test_a_reply_longer_than_the_context_has_room_for_is_cut_not_refused(http):
    """prompt + max_tokens past the context: the reply is served and ends where the context does
    (Codex sends no limit, and the server's limit filled in for it used to make such requests
    fail). The engine's own test checks where the cut falls; here the first streamed words are
    enough, so the test does not wait for thousands of tokens."""
    prompt = "word " * 3000  # ~3000 tokens of the context
    body = {"model": "smollm2-135m", "input": prompt, "temperature": 0, "stream": True,
            "max_output_tokens": CTX - 2000}
    with http.stream("POST", "/v1/responses", json=body) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: {") and json.loads(line[6:])["type"] == "response.output_text.delta":
                break
        else:
            pytest.fail("the stream ended before any text")
    big = http.post("/v1/chat/completions", json={"model": "smollm2-135m", "max_tokens": 10**6, "temperature": 0,
                                                  "messages": [{"role": "user", "content": "Say hi."}]})
    assert big.status_code == 200, big.text[:300]


def test_ollama_show_takes_the_older_name_field_and_lists_tools(http):
    r = http.post("/api/show", json={"name": "smollm2-135m"})
    assert r.status_code == 200, r.text
    assert "tools" in r.json()["capabilities"]


def test_responses_top_logprobs(http):
    r = http.post("/v1/responses", json={"model": "smollm2-135m", "input": "Say hi.", "temperature": 0,
                                         "max_output_tokens": 4, "top_logprobs": 2,
                                         "include": ["message.output_text.logprobs"]})
    assert r.status_code == 200, r.text[:300]
    part = r.json()["output"][0]["content"][0]
    assert len(part["logprobs"]) == 4 and all(len(e["top_logprobs"]) == 2 for e in part["logprobs"])
    assert "".join(e["token"] for e in part["logprobs"]) == part["text"]


def test_the_base_url_answers_a_probe(http):
    """Claude Code sends HEAD / before its first request; Ollama's clients GET /."""
    assert http.head("/").status_code == 200
    r = http.get("/")
    assert r.status_code == 200 and "Hearth" in r.text
