"""``top_logprobs`` outside 0..20 is a 400 naming the field in every wire format that takes it,
streamed or not: the Responses API as chat completions does."""

from __future__ import annotations

import httpx
import pytest

from tests.server.conftest import live_server


@pytest.fixture(scope="module")
def server(smollm2_path):
    s = live_server("--parallel", "1", "--ctx", "1024")
    yield s
    s.stop()


CHAT = {"model": "smollm2-135m", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, "logprobs": True}
BODIES = {
    "/v1/chat/completions": CHAT,
    "/v1/responses": {"model": "smollm2-135m", "input": "Hi", "max_output_tokens": 16,
                      "include": ["message.output_text.logprobs"]},
    "/api/chat": {**CHAT, "stream": False},
}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("top", [50, -1, 2**63, "5"])
@pytest.mark.parametrize("path", list(BODIES))
def test_top_logprobs_out_of_range_is_a_400_naming_it(server, path, top, stream):
    r = httpx.post(f"{server.url}{path}", json={**BODIES[path], "top_logprobs": top, "stream": stream}, timeout=60)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert "'top_logprobs'" in err if isinstance(err, str) else err["param"] == "top_logprobs", r.text  # Ollama's: text


@pytest.mark.parametrize("path", list(BODIES))
def test_top_logprobs_in_range_is_answered(server, path):
    r = httpx.post(f"{server.url}{path}", json={**BODIES[path], "top_logprobs": 20}, timeout=120)
    assert r.status_code == 200, r.text
