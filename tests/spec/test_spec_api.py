"""Speculative decoding through the service: --draft, the per-request option, stats, refusals."""

from __future__ import annotations

import httpx
import pytest

from runtime.server.launcher import ServiceProcess


@pytest.fixture(scope="module")
def server(tiny):
    s = ServiceProcess("--model", str(tiny["target"]), "--draft", str(tiny["close"]), "--parallel", "2",
                       "--ctx", "1024", "--batch", "128", "--threads", "1",
                       "--models-dir", str(tiny["target"].parent)).wait_ready()
    yield s
    s.stop()


def complete(server, **body):
    return httpx.post(f"{server.url}/v1/completions", timeout=120,
                      json={"prompt": [5, 9, 12, 30], "max_tokens": 24, "temperature": 0, "ignore_eos": True, **body})


def test_draft_model_serves_and_reports(server, tiny):
    plain = complete(server, draft=False)
    spec = complete(server)
    named = complete(server, draft=tiny["close"].name)
    assert plain.status_code == spec.status_code == named.status_code == 200
    assert spec.json()["choices"][0]["text"] == plain.json()["choices"][0]["text"] == named.json()["choices"][0]["text"]
    usage = spec.json()["usage"]
    assert usage["completion_tokens"] == 24
    assert usage["speculative"]["drafted"] > 0 and 0 <= usage["speculative"]["acceptance_rate"] <= 1
    assert "speculative" not in plain.json()["usage"]
    s = server.stats()["models"][0]["spec"]
    assert s["mode"] == "model" and s["drafted"] >= usage["speculative"]["drafted"]
    assert s["accepted"] <= s["drafted"] and 0 <= s["acceptance_rate"] <= 1
    assert s["k"] >= 1 and s["time"]["draft_s"] > 0 and s["time"]["verify_s"] > 0
    lookup = complete(server, draft="ngram")
    assert lookup.status_code == 200 and lookup.json()["choices"][0]["text"] == plain.json()["choices"][0]["text"]


@pytest.mark.parametrize("value, fragment", [(5, "'draft' must be"), ("no-such-draft", "not loaded")])
def test_bad_draft_option_is_a_400(server, value, fragment):
    r = complete(server, draft=value)
    assert r.status_code == 400 and fragment in r.json()["error"]["message"]
    assert complete(server).status_code == 200


def test_model_with_another_vocabulary_is_refused_with_the_reason(server, tiny):
    r = complete(server, model=str(tiny["foreign"]))
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["code"] == "draft_refused" and "different tokenizers" in err["message"]
    assert complete(server).status_code == 200  # the target (with its draft) loads again
