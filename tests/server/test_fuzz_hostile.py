"""Property-based fuzzing of the generation routes of both wire formats with hostile leaves.

Bodies are built from the service's own request schemas (``/openapi.json``): each field is
either a value its schema allows or a hostile leaf (lone surrogates, huge and negative
numbers, NaN and Infinity, deep nesting, wrong types, token ids outside the vocabulary).
Whatever the body, the answer is never a 5xx (streams included), the engine worker never
restarts, and a normal request still works after. Bounded in examples and in time.
"""

from __future__ import annotations

import json
import math
import time

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ROUTES = {"/v1/chat/completions": "ChatCompletionRequest", "/v1/completions": "CompletionRequest",
          "/api/chat": "OllamaChatRequest", "/api/generate": "OllamaGenerateRequest"}
EXAMPLES = 120
TIME_BUDGET_S = 50.0


@pytest.fixture(scope="module")
def server(smollm2_path):
    from tests.server.conftest import live_server

    s = live_server("--parallel", "2", "--ctx", "1024", "--max-tokens-limit", "4", "--max-client-requests", "64")
    yield s
    s.stop()


def deep(depth: int) -> object:
    v: object = "x"
    for _ in range(depth):
        v = [v]
    return v


HOSTILE = st.one_of(
    st.sampled_from(["\ud800", "hi \udfff there", "\udbff\udc00\ud800", "", " ", "\x00", "x" * 300]),
    st.sampled_from([10**30, -10**30, 2**63, -(2**63) - 1, 2**31, -1, 0, -2]),
    st.sampled_from([math.nan, math.inf, -math.inf, 1e308, -0.0, 5e-324]),
    st.sampled_from([None, True, False, [], {}, "str", [None], {"a": 1}, deep(80), deep(20)]),
    st.lists(st.integers(-10, 10**7), min_size=1, max_size=4),  # token ids, most outside the vocabulary
)

TEXT = st.text(st.characters(codec="utf-16", exclude_categories=["Cn"]), max_size=12)


def from_schema(schema: dict, depth: int = 0) -> st.SearchStrategy:
    """A value the schema allows (loosely: types and bounds), or a hostile leaf."""
    if "oneOf" in schema:
        valid = st.one_of([from_schema(s, depth + 1) for s in schema["oneOf"]])
    elif "enum" in schema:
        valid = st.sampled_from(schema["enum"])
    else:
        kind = schema.get("type")
        if kind == "integer":
            valid = st.integers(int(schema.get("minimum", -(2**40))), int(min(schema.get("maximum", 2**40), 2**40)))
        elif kind == "number":
            valid = st.floats(schema.get("minimum", -1e6), schema.get("maximum", 1e6), allow_nan=False)
        elif kind == "boolean":
            valid = st.booleans()
        elif kind == "string":
            valid = TEXT
        elif kind == "array" and depth < 4:
            valid = st.lists(from_schema(schema.get("items", {}), depth + 1), max_size=3)
        elif kind == "object" and depth < 4:
            valid = body_of(schema, depth + 1)
        else:
            valid = TEXT
    return st.one_of(valid, valid, HOSTILE)


def body_of(schema: dict, depth: int = 0) -> st.SearchStrategy:
    props = schema.get("properties", {})
    required = [k for k in schema.get("required", []) if k in props]
    optional = [k for k in props if k not in required]
    return st.fixed_dictionaries({k: from_schema(props[k], depth) for k in required},
                                 optional={k: from_schema(props[k], depth) for k in optional})


def content_parts() -> st.SearchStrategy:
    part = st.fixed_dictionaries({"type": st.sampled_from(["text", "image_url", None, 3]), "text": HOSTILE | TEXT})
    return st.lists(part | HOSTILE, min_size=1, max_size=3)


def routes_strategy(doc: dict) -> st.SearchStrategy:
    schemas = doc["components"]["schemas"]
    strategies = []
    for path, name in ROUTES.items():
        body = body_of(schemas[name])
        if "Ollama" in name:
            body = st.tuples(body, st.just("smollm2-135m")).map(lambda t: {**t[0], "model": t[1]})
        if path == "/v1/chat/completions":  # content parts, which the schema does not spell out
            msgs = st.lists(st.fixed_dictionaries({"role": st.sampled_from(["user", "system"]),
                                                   "content": content_parts()}), min_size=1, max_size=2)
            body = st.tuples(body, msgs, st.booleans()).map(
                lambda t: {**t[0], "messages": t[1]} if t[2] else t[0])
        strategies.append(st.tuples(st.just(path), body))
    return st.one_of(strategies)


def send(server, path: str, body: dict) -> tuple[int, str]:
    raw = json.dumps(body, allow_nan=True)  # NaN and Infinity go out as the (invalid) literals
    with httpx.stream("POST", f"{server.url}{path}", content=raw, timeout=60,
                      headers={"Content-Type": "application/json"}) as r:
        return r.status_code, r.read().decode("utf-8", "replace")


@pytest.mark.timeout(600)
def test_hostile_bodies_at_both_wire_formats_never_get_5xx_or_restart_the_engine(server):
    doc = httpx.get(f"{server.url}/openapi.json").json()
    pid = server.stats()["models"][0]["pid"]
    statuses: dict[int, int] = {}
    started = time.monotonic()

    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(routes_strategy(doc))
    def run(case):
        if time.monotonic() - started > TIME_BUDGET_S:
            return  # bounded in time as well as in count
        path, body = case
        status, text = send(server, path, body)
        statuses[status] = statuses.get(status, 0) + 1
        assert status < 500, (path, body, text[:300])
        assert "engine_stopped" not in text and "server_error" not in text, (path, body, text[:300])

    run()
    print("statuses", statuses)
    assert server.stats()["models"][0]["pid"] == pid, "the engine worker restarted"
    assert server.health()["engine"]["state"] == "running"
    assert any(400 <= s < 500 for s in statuses) and sum(statuses.values()) >= 20, statuses
    r = httpx.post(f"{server.url}/v1/chat/completions", timeout=60,
                   json={"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2})
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] is not None
    o = httpx.post(f"{server.url}/api/generate", timeout=60,
                   json={"model": "smollm2-135m", "prompt": "Hi", "stream": False, "options": {"num_predict": 2}})
    assert o.status_code == 200 and o.json()["done"] is True
