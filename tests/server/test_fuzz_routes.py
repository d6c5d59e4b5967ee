"""Property-based fuzzing of every route of the service, as its own ``/openapi.json`` lists them.

The four wire formats (OpenAI chat, completions, embeddings and Responses; Anthropic messages and
count_tokens; Ollama chat, generate, embed, show, tags, pull, delete, ...), reranking, and
Hearth's own routes (``/hearth/*``, the model store, remotes). Each request is built from the
route's schema, its fields a value the schema allows or a hostile leaf, or is random JSON, or a
body that is not JSON at all; nesting, sizes and unicode are drawn wide (lone surrogates, deep
nesting written as raw text, megabyte strings, thousands of entries, numbers beyond any range).
Whatever the request, the answer is never a 5xx (streams read to their end, an error inside a
stream included), the service process stays the same one, and ``/health`` keeps answering fast.
Bounded in examples and in time per route, so every route is covered.
"""

from __future__ import annotations

import json
import time
import urllib.parse
import zlib

import httpx
import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

#: examples per route, and the seconds a route's examples may take (the fuzz stops drawing after)
PER_ROUTE = 14
ROUTE_BUDGET_S = 6.0
#: slowest /health accepted while the fuzz runs (a loaded 2-core machine; typical is a few ms)
HEALTH_LIMIT_S = 1.0
#: endless by design (a live event feed): its framing is tested by the store's own tests
ENDLESS = {("GET", "/hearth/downloads/events")}
#: routes that unload models: fuzzed last, so the others do not wait for reloads
UNLOADING = {("POST", "/hearth/unload"), ("POST", "/hearth/models/{id}/unload"), ("DELETE", "/hearth/models/{id}"),
             ("DELETE", "/api/delete"), ("POST", "/hearth/models/{id}/load")}
#: 500s the fuzz found in modules other work owns, by route: the reason, until they are fixed
KNOWN: dict[str, str] = {}
MODELS = ["smollm2-135m", "minilm-l6", "smollm2-135m:latest", "no-such-model", "../../etc/passwd",
          "owner/repo:Q4_K_M", "remote/none"]


@pytest.fixture(scope="module")
def server(smollm2_path, minilm_path, tmp_path_factory):
    """Its own data directory (a fuzzed DELETE must not touch the session's models) and a
    loopback hub (pulls and searches never leave the machine)."""
    import os

    from runtime.server.launcher import ServiceProcess
    from tests.hub_server import LoopbackHub

    hub = LoopbackHub().start()
    root = tmp_path_factory.mktemp("fuzz-routes")
    env = {**os.environ, "HEARTH_DATA_DIR": str(root / "data"), "HF_ENDPOINT": hub.url,
           "HF_HOME": str(root / "hf-home"), "HF_HUB_DISABLE_TELEMETRY": "1"}
    s = ServiceProcess("--parallel", "2", "--ctx", "1024", "--max-tokens-limit", "4",
                       "--max-client-requests", "64", env=env).wait_ready()
    yield s
    s.stop()
    hub.stop()


# -- values -----------------------------------------------------------------------------------
SURROGATE = st.integers(0xD800, 0xDFFF).map(chr)
CHARS = st.one_of(st.characters(), SURROGATE, st.sampled_from(["\x00", "\u202e", "\ufeff", "\U0001F600", "\n"]))
TEXT = st.text(CHARS, max_size=24)
SAFE_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=["Cs", "Cc"]), max_size=24)
BIG_TEXT = st.sampled_from([10_000, 300_000, 2_000_000]).flatmap(
    lambda n: st.sampled_from(["x" * n, "é" * n, "\U0001F600" * (n // 4), ("{" * 50 + "}" * 50) * (n // 100)]))
NUMBER = st.one_of(st.integers(-(2**70), 2**70), st.sampled_from([2**63, -(2**63) - 1, 2**31 - 1, -1, 0]),
                   st.floats(allow_nan=True, allow_infinity=True), st.just(10**400))
LEAF = st.one_of(st.none(), st.booleans(), NUMBER, TEXT)
JSON = st.recursive(LEAF, lambda kids: st.lists(kids, max_size=5) | st.dictionaries(TEXT, kids, max_size=5),
                    max_leaves=25)
SAFE_JSON = st.recursive(st.none() | st.booleans() | st.integers(-1000, 1000) | SAFE_TEXT,
                         lambda kids: st.lists(kids, max_size=3) | st.dictionaries(SAFE_TEXT, kids, max_size=3),
                         max_leaves=8)
MANY = st.integers(0, 5000).flatmap(lambda n: st.sampled_from([["a"] * n, [1] * n, [{}] * n, [[1, 2]] * n]))


class Raw(str):
    """JSON text written as is (nesting deeper than any encoder would write)."""


DEEP = st.integers(2, 5000).flatmap(lambda n: st.sampled_from([
    Raw("[" * n + "]" * n), Raw('{"a":' * n + "1" + "}" * n), Raw("[" * n), Raw('"' + "\\" * n + '"')]))
HOSTILE = st.one_of(LEAF, JSON, MANY, DEEP, BIG_TEXT)


def resolve(schema: dict, doc: dict) -> dict:
    while "$ref" in schema:
        schema = doc["components"]["schemas"][schema["$ref"].rsplit("/", 1)[-1]]
    return schema


def from_schema(schema: dict, doc: dict, depth: int = 0, hostile: bool = True) -> st.SearchStrategy:
    """A value the schema allows (loosely: types, enums, bounds), or (``hostile``) sometimes a
    hostile one instead, at any depth."""
    schema = resolve(schema, doc)
    text = TEXT if hostile else SAFE_TEXT
    if "oneOf" in schema or "anyOf" in schema:
        valid = st.one_of([from_schema(s, doc, depth + 1, hostile) for s in schema.get("oneOf") or schema["anyOf"]])
    elif "const" in schema:
        valid = st.just(schema["const"])
    elif "enum" in schema:
        valid = st.sampled_from(schema["enum"])
    else:
        kind = schema.get("type")
        kind = kind[0] if isinstance(kind, list) else kind
        if kind == "integer":
            lo, hi = schema.get("minimum", -(2**40)), min(schema.get("maximum", 2**40), 2**40)
            valid = st.integers(int(lo), int(hi))
        elif kind == "number":
            valid = st.floats(schema.get("minimum", -1e6), schema.get("maximum", 1e6), allow_nan=False)
        elif kind == "boolean":
            valid = st.booleans()
        elif kind == "array" and depth < 5:
            valid = st.lists(from_schema(schema.get("items", {}), doc, depth + 1, hostile), max_size=3)
        elif kind == "object" and depth < 5 and schema.get("properties"):
            valid = object_of(schema, doc, depth + 1, hostile)
        elif kind == "object":
            valid = st.dictionaries(text, JSON if hostile else SAFE_JSON, max_size=4)
        else:
            valid = text
    return st.one_of(valid, valid, valid, HOSTILE) if hostile else valid


def object_of(schema: dict, doc: dict, depth: int = 0, hostile: bool = True) -> st.SearchStrategy:
    """An object of the schema's fields (required ones always); hostile: extra fields too."""
    props = schema.get("properties", {})
    required = [k for k in schema.get("required", []) if k in props]
    fields = {k: from_schema(props[k], doc, depth, hostile) for k in props}
    if "model" in fields:
        fields["model"] = st.sampled_from(MODELS[:3]) if not hostile else st.sampled_from(MODELS) | fields["model"]
    body = st.fixed_dictionaries({k: fields[k] for k in required},
                                 optional={k: fields[k] for k in props if k not in required})
    if not hostile:
        return body
    return st.tuples(body, st.just({}) | st.dictionaries(TEXT, JSON, max_size=2)).map(lambda t: {**t[1], **t[0]})


# -- requests ---------------------------------------------------------------------------------
def encode(value) -> bytes:
    if isinstance(value, Raw):
        return value.encode()
    if isinstance(value, bytes):
        return value
    try:
        return json.dumps(value, allow_nan=True).encode("utf-8", "surrogatepass")
    except (ValueError, RecursionError):  # 10**400 as a float, and the like: its text as is
        return repr(value).encode("utf-8", "surrogatepass")


NOT_JSON = st.sampled_from([b"", b"{", b"\xff\xfe\x00garbage", b"null", b"[]", b'{"a": NaN}', b"\x00" * 100,
                            b'{"model": "smollm2-135m", "model": 1}', "{\"a\": \"\udc80\"}".encode("utf-8", "surrogatepass")])


HI = [{"role": "user", "content": "Hi"}]
#: a body each route answers 200: the fuzz changes one of its fields, so success paths meet hostile values
VALID = {
    "/v1/chat/completions": {"model": "smollm2-135m", "messages": HI, "max_tokens": 2},
    "/v1/completions": {"model": "smollm2-135m", "prompt": "Hi", "max_tokens": 2},
    "/v1/responses": {"model": "smollm2-135m", "input": "Hi", "max_output_tokens": 2},
    "/v1/messages": {"model": "smollm2-135m", "max_tokens": 2, "messages": HI},
    "/v1/messages/count_tokens": {"model": "smollm2-135m", "messages": HI},
    "/api/chat": {"model": "smollm2-135m", "messages": HI, "stream": False, "options": {"num_predict": 2}},
    "/api/generate": {"model": "smollm2-135m", "prompt": "Hi", "stream": False, "options": {"num_predict": 2}},
    "/v1/embeddings": {"model": "minilm-l6", "input": ["a", "b"]},
    "/api/embed": {"model": "minilm-l6", "input": "a"},
    "/api/embeddings": {"model": "minilm-l6", "prompt": "a"},
    "/api/show": {"model": "smollm2-135m"},
}


def mutated(valid: dict, schema: dict, doc: dict) -> st.SearchStrategy:
    """``valid`` as is, or with one field (or a message's content) replaced by a drawn value."""
    props = schema.get("properties", {})
    keys = sorted(set(valid) | set(props))

    def field(key: str) -> st.SearchStrategy:
        drawn = from_schema(props[key], doc) if key in props else HOSTILE
        return drawn.map(lambda v: {**valid, key: v})

    options = [st.just(valid)] + [field(k) for k in keys]
    if "messages" in valid:
        options.append((TEXT | HOSTILE).map(lambda v: {**valid, "messages": [{"role": "user", "content": v}]}))
    return st.one_of(options)


def path_value() -> st.SearchStrategy:
    ids = st.sampled_from(MODELS + ["resp_" + "0" * 24, "pause", "cancel", "resume", "x"]) | TEXT.filter(bool)
    return ids.map(lambda s: urllib.parse.quote(s.encode("utf-8", "surrogatepass"), safe=""))


def as_text(value) -> str:
    """A query value: text, cut to 2,000 characters (a URL over 64 KiB is refused by the client)."""
    return (value if isinstance(value, str) else encode(value).decode("utf-8", "replace"))[:2000]


def request_of(method: str, path: str, op: dict, doc: dict) -> st.SearchStrategy:
    """(method, path with its parameters, query, body bytes or None)."""
    names = [p["name"] for p in op.get("parameters", []) if p["in"] == "path"]
    query = {p["name"]: from_schema(p.get("schema", {}), doc).map(as_text)
             for p in op.get("parameters", []) if p["in"] == "query"}
    q = st.fixed_dictionaries({}, optional=query) | st.dictionaries(TEXT, TEXT, max_size=3) | st.just({"x": "y" * 9000})
    if "requestBody" in op:
        schema = resolve(op["requestBody"]["content"]["application/json"]["schema"], doc)
        if path == "/hearth/remotes":  # never a real address: an added upstream would be a real destination
            schema = {**schema, "properties": {**schema["properties"], "url": {"enum": ["", "not a url", "ftp://x"]},
                                               "key_env": {"enum": ["", "HOME"]}}}
        bodies = [object_of(schema, doc, hostile=False), object_of(schema, doc), object_of(schema, doc), HOSTILE]
        if path in VALID:
            bodies += [mutated(VALID[path], schema, doc)] * 3
        body = st.one_of([b.map(encode) for b in bodies] + [NOT_JSON])
    else:
        body = st.one_of(st.none(), st.none(), HOSTILE.map(encode), NOT_JSON)
    params = st.tuples(*[path_value() for _ in names]) if names else st.just(())

    def build(t):
        values, query_, body_ = t
        url = path
        for name, value in zip(names, values):
            url = url.replace("{" + name + "}", value or "x")
        return method, url, query_, body_

    return st.tuples(params, q, body).map(build)


def send(client: httpx.Client, method: str, url: str, query: dict, body: bytes | None) -> tuple[int, str]:
    headers = {"Content-Type": "application/json"} if body is not None else {}
    if query:  # written here: a lone surrogate cannot be encoded by the client, only percent-escaped
        url += "?" + urllib.parse.urlencode([(k.encode("utf-8", "surrogatepass"), v.encode("utf-8", "surrogatepass"))
                                             for k, v in query.items()])
    with client.stream(method, url, content=body, headers=headers) as r:
        text = b"".join(r.iter_bytes()).decode("utf-8", "replace")
        return r.status_code, text


def health_s(client: httpx.Client) -> float:
    t0 = time.perf_counter()
    r = client.get("/health")
    assert r.status_code == 200
    return time.perf_counter() - t0


@pytest.mark.timeout(900)
def test_no_route_answers_5xx_whatever_the_request(server):
    doc = httpx.get(f"{server.url}/openapi.json", timeout=60).json()
    operations = [(m.upper(), p, op) for p, ops in doc["paths"].items() for m, op in ops.items()
                  if (m.upper(), p) not in ENDLESS]
    assert len(operations) >= 40, [(m, p) for m, p, _ in operations]
    operations.sort(key=lambda o: (o[0], o[1]) in UNLOADING)  # the model stays loaded for the others
    pid = server.proc.pid
    seen: dict[str, dict[int, int]] = {}
    failures: list[tuple] = []
    known: dict[str, list] = {}
    slowest_health, sent, slowest, log = [0.0], [0], {}, []
    started = time.monotonic()
    client = httpx.Client(base_url=server.url, timeout=60)
    probe = httpx.Client(base_url=server.url, timeout=10)  # its own connection, as a monitor's

    def check(case) -> None:
        method, url, query, body = case
        t0 = time.monotonic()
        try:
            status, text = send(client, method, url, query, body)
        except httpx.HTTPError as e:  # a timeout or a dropped connection: as bad as a 5xx
            status, text = 599, f"{type(e).__name__}: {e}"
        took = time.monotonic() - t0
        key = f"{method} {_template(url, doc)}"
        slowest[key] = max(slowest.get(key, 0.0), took)
        counts = seen.setdefault(key, {})
        counts[status] = counts.get(status, 0) + 1
        log.append((round(t0 - started, 2), key, status, round(took, 2)))
        if status >= 500 or "server_error" in text or "internal server error" in text.lower():
            case = (method, url[:200], {k[:40]: v[:40] for k, v in query.items()}, (body or b"")[:300],
                    status, text[:300], "after", log[-6:-1])
            reason = next((why for route, why in KNOWN.items() if route == key and status == 500), None)
            (known.setdefault(reason, []) if reason else failures).append(case)
        sent[0] += 1
        if sent[0] % 5 == 0:
            try:
                slowest_health[0] = max(slowest_health[0], health_s(probe))
            except httpx.HTTPError as e:
                failures.append(("GET", "/health", {}, b"", 599, repr(e), "after", log[-5:]))

    for method, path, op in operations:  # each route its own examples and time: every one is covered
        route_started = time.monotonic()

        @seed(zlib.crc32(f"{method} {path}".encode()))  # reproducible, and different per route
        @settings(max_examples=PER_ROUTE, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @given(request_of(method, path, op, doc))
        def run(case):
            if time.monotonic() - route_started < ROUTE_BUDGET_S:
                check(case)

        run()
    elapsed = time.monotonic() - started
    total = sum(sum(v.values()) for v in seen.values())
    print(f"fuzz: {total} requests over {len(seen)} routes in {elapsed:.1f} s; slowest /health "
          f"{slowest_health[0] * 1000:.0f} ms")
    for route, statuses in sorted(seen.items()):
        print(" ", route, dict(sorted(statuses.items())), f"slowest {slowest[route]:.2f} s")
    assert not failures, "\n".join(repr(f) for f in failures[:10])
    assert server.proc.poll() is None and server.proc.pid == pid
    assert server.health()["engine"]["state"] in ("running", "idle")
    assert slowest_health[0] < HEALTH_LIMIT_S, slowest_health
    assert {f"{m} {p}" for m, p, _ in operations} <= set(seen) and total >= 300, (sorted(seen), total)
    r = httpx.post(f"{server.url}/v1/chat/completions", timeout=120,
                   json={"model": "smollm2-135m", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2})
    assert r.status_code == 200, r.text
    if known:  # 500s in modules under repair elsewhere: listed, and the test marked until they are fixed
        for reason, cases in known.items():
            print("known:", reason, "\n ", "\n  ".join(repr(c)[:600] for c in cases[:3]))
        pytest.xfail("; ".join(known))


def _template(url: str, doc: dict) -> str:
    """The documented path a concrete URL belongs to (for the per-route counts)."""
    parts = url.split("?")[0].split("/")
    for path in doc["paths"]:
        t = path.split("/")
        if len(t) == len(parts) and all(a == b or a.startswith("{") for a, b in zip(t, parts)):
            return path
    for path in doc["paths"]:  # {id:.+} takes slashes
        if "{" in path and url.startswith(path.split("{")[0]):
            return path
    return url



@pytest.mark.parametrize("path", ["/hearth/models/pull", "/api/pull"])
def test_a_pull_of_a_name_longer_than_a_file_name_is_a_4xx(server, path):
    """The input the fuzz found: a model reference of 300+ characters (no slash) to a pull route."""
    r = httpx.post(f"{server.url}{path}", json={"model": "x" * 300, "stream": False}, timeout=60)
    assert 400 <= r.status_code < 500, (r.status_code, r.text[:200])
