"""Hostile constraints and JSON against a live ``hearth serve`` (SmolLM2).

Per class, generated instances (depth, length, rule count, pattern shape): every answer is a
4xx naming the field, or a success; the service's pid and the engine worker's pid never change;
``/health``, probed from another process all through the attack, answers every time within
``HEALTH_MS``; a normal request works after. Each class prints the slowest ``/health`` it saw.

1. native grammar and schema compilation (``$ref`` chains and loops, Lark and GBNF rule chains,
   nested groups): caps before any native call, the rest in the compiler's helper process;
2. super-linear work (a backtracking ``pattern`` in a relaxed tool schema, thousands of GBNF
   rules, megabyte bodies of tiny arrays, a million token ids) never stalls the event loop;
7. JSON inside strings (tool-call arguments, schemas sent as text) too deep or with 5,000-digit
   numbers, patterns of thousands of nested groups, ``$ref`` loops: 400s, never 500s, and no
   grammar-library internals in a message.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.server.conftest import live_server

HEALTH_MS = 250
MIN_WATCH_S = 0.3
URL = "/v1/chat/completions"
ASK = [{"role": "user", "content": "hi"}]
WORST: dict[str, float] = {}


@pytest.fixture(scope="module")
def server(smollm2_path):
    s = live_server("--parallel", "2", "--ctx", "2048", "--max-client-requests", "64")
    yield s
    s.stop()
    print("\nslowest /health per class (ms):", json.dumps(WORST))


class Watch:
    """``/health`` probed from another process while the block runs."""

    def __init__(self, server, label: str) -> None:
        self.server, self.label = server, label

    def __enter__(self) -> "Watch":
        self.pids = (self.server.proc.pid, worker_pid(self.server))
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).with_name("health_watch.py")),
                                      str(self.server.port), "0.02"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "ready"
        self.started = time.monotonic()
        return self

    def __exit__(self, *exc) -> None:
        time.sleep(max(0.0, MIN_WATCH_S - (time.monotonic() - self.started)))  # a few probes even for a fast 400
        out = json.loads(self.proc.communicate("", timeout=60)[0])
        lat = out["latencies_ms"]
        WORST[self.label] = max(WORST.get(self.label, 0.0), max(lat))
        if exc[0] is not None:
            return
        assert out["errors"] == 0 and len(lat) >= 3, out
        assert max(lat) < HEALTH_MS, (self.label, sorted(lat)[-5:])
        assert (self.server.proc.pid, worker_pid(self.server)) == self.pids
        ok = post(self.server, {"messages": ASK, "max_tokens": 2})
        assert ok.status_code == 200, ok.text


def worker_pid(server) -> int:
    return server.stats()["models"][0]["pid"]


def post(server, body: dict | str | bytes, path: str = URL) -> httpx.Response:
    if isinstance(body, dict):
        body = {"model": "smollm2-135m", **body}
        raw: str | bytes = json.dumps(body)
    else:
        raw = body
    return httpx.post(f"{server.url}{path}", content=raw, headers={"Content-Type": "application/json"}, timeout=120)


def refused(r: httpx.Response, param: str | None, *words: str) -> dict:
    """A 400 naming ``param``, whose message holds ``words`` and none of the library's internals."""
    assert r.status_code == 400, (r.status_code, r.text[:500])
    err = r.json()["error"]
    if param is not None:
        assert err["param"] == param, err
    for w in words:
        assert w in err["message"], err
    for internal in ("<state>", "<grammar>", "Parser:", "lexer_cost", "Traceback"):
        assert internal not in err["message"], err
    assert len(err["message"]) < 600, err
    return err


def rf(schema) -> dict:
    return {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}


def ref_chain(n: int, wrap: bool = False) -> dict:
    """``$defs`` d0 -> d1 -> ... -> dn; ``wrap``: each hop inside an object's property."""
    defs = {f"d{i}": ({"type": "object", "properties": {"a": {"$ref": f"#/$defs/d{i + 1}"}}, "required": ["a"]}
                      if wrap else {"$ref": f"#/$defs/d{i + 1}"}) for i in range(n)}
    defs[f"d{n}"] = {"type": "string", "maxLength": 3}
    return {"$defs": defs, "$ref": "#/$defs/d0"}


def lark_chain(n: int) -> str:
    return "start: r0\n" + "".join(f"r{i}: r{i + 1}\n" for i in range(n)) + f'r{n}: "yes"\n'


def gbnf_chain(n: int) -> str:
    return "root ::= r0\n" + "".join(f"r{i} ::= r{i + 1}\n" for i in range(n)) + f'r{n} ::= "yes"\n'


def nested(depth: int, leaf: str = "1") -> str:
    return "[" * depth + leaf + "]" * depth


# -- class 1: native compilation --------------------------------------------------------------
@pytest.mark.parametrize("n,wrap,ok", [(8, False, True), (20, True, True), (600, False, False), (5000, False, False),
                                       (20000, False, False), (1000, True, False)])
def test_ref_chains_are_capped_before_the_grammar_library(server, n, wrap, ok):
    with Watch(server, "1 native compilation"):
        r = post(server, {"messages": ASK, "max_tokens": 8, "response_format": rf(ref_chain(n, wrap))})
        if ok:
            assert r.status_code == 200, r.text[:500]
        else:
            refused(r, "response_format.json_schema.schema", "limit")


@pytest.mark.parametrize("n,ok", [(50, True), (600, False), (5000, False), (30000, False)])
def test_lark_rule_chains_are_capped(server, n, ok):
    with Watch(server, "1 native compilation"):
        r = post(server, {"prompt": "Is the sky blue?", "max_tokens": 3, "grammar": lark_chain(n)}, "/v1/completions")
        if ok:
            assert r.status_code == 200 and r.json()["choices"][0]["text"] == "yes", r.text[:500]
        else:  # over the rule cap, or (the longest) over the size cap
            assert "rules" in refused(r, "grammar", "limit")["message"] or n > 10_000


@pytest.mark.parametrize("schema,words", [
    ({"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}, "$ref loop"),
    ({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"allOf": [{"$ref": "#/$defs/a"}]}}, "$ref": "#/$defs/a"}, "$ref loop"),
    ({"type": "object", "properties": {"x": {"$ref": "#"}}, "required": ["x"], "allOf": [{"$ref": "#"}]}, "$ref loop"),
    ({"type": "object", "properties": {"a": {"$ref": "#/$defs/l"}}, "required": ["a"],
      "$defs": {"l": {"anyOf": [{"$ref": "#/$defs/l"}, {"$ref": "#/$defs/m"}]}, "m": {"$ref": "#/$defs/l"}}},
     "cannot be matched"),
])
def test_ref_loops_are_400_at_compile_time(server, schema, words):
    with Watch(server, "1 native compilation"):
        refused(post(server, {"messages": ASK, "max_tokens": 4, "response_format": rf(schema)}),
                "response_format.json_schema.schema", words)


def test_a_grammar_that_loops_is_400_without_library_internals(server):
    with Watch(server, "1 native compilation"):
        refused(post(server, {"prompt": "x", "max_tokens": 2, "grammar": "start: a\na: b\nb: a"}, "/v1/completions"),
                "grammar", "cannot be matched")
        refused(post(server, {"messages": ASK, "max_tokens": 2, "grammar": "root ::= x\nx ::= x"}), "grammar")


def test_concurrent_hostile_compilations_leave_the_service_up(server):
    """Twenty hostile and valid constraints at once, from a fresh compiler cache entry each."""
    bodies = []
    for i in range(10):
        bodies.append(({"messages": ASK, "max_tokens": 4, "response_format": rf(ref_chain(700 + i))}, 400))
        bodies.append(({"messages": ASK, "max_tokens": 4, "regex": f"(yes|no){{1,{i + 2}}}"}, 200))
    with Watch(server, "1 native compilation"), ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda b: post(server, b[0]).status_code, bodies))
    assert got == [want for _, want in bodies]


# -- class 2: super-linear work ---------------------------------------------------------------
REDOS = {"type": "function", "function": {"name": "lookup", "parameters": {
    "type": "object", "properties": {"key": {"type": "string", "pattern": "^(?!z)(a+)+$", "maxLength": 40}},
    "required": ["key"]}}}


def test_a_backtracking_pattern_in_a_tool_schema_never_runs_on_the_loop(server):
    """The look-ahead makes the grammar library relax the pattern away; the call's arguments are
    not then checked with Python's backtracking ``re`` (``(a+)+$`` on 30 a's and a '!')."""
    with Watch(server, "2 super-linear work"):
        r = post(server, {"messages": [{"role": "user", "content": "Look up aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!"}],
                          "tools": [REDOS], "tool_choice": "required", "max_tokens": 40, "temperature": 0})
        assert r.status_code == 200, r.text[:500]
        assert r.headers["x-hearth-relaxed-tools"] == "lookup"
        call = r.json()["choices"][0]["message"]["tool_calls"][0]
        assert call["function"]["name"] == "lookup" and isinstance(json.loads(call["function"]["arguments"]), dict)


def test_the_call_checker_takes_no_time_on_hostile_patterns():
    from runtime.server.generate.tool_calls import call_checker

    accept = call_checker([REDOS])
    t0 = time.perf_counter()
    assert accept("lookup", {"key": "a" * 40 + "!"}) and not accept("other", {})
    assert time.perf_counter() - t0 < 0.01


@pytest.mark.parametrize("n,ok", [(400, True), (3000, False), (20000, False)])
def test_thousands_of_gbnf_rules_are_capped_and_compiled_off_the_loop(server, n, ok):
    with Watch(server, "2 super-linear work"):
        r = post(server, {"prompt": "Is the sky blue?", "max_tokens": 3, "grammar": gbnf_chain(n)}, "/v1/completions")
        if ok:
            assert r.status_code == 200 and r.json()["choices"][0]["text"] == "yes", r.text[:500]
        else:
            assert "rules" in refused(r, "grammar", "limit")["message"] or n > 10_000


@pytest.mark.parametrize("item,mib", [("[]", 0.1), ("[]", 1), ("[]", 7.5), ('"a"', 0.5), ('"a"', 7.5), ("1.5", 7.5),
                                      ("7", 1), ("null", 7.5), ('"["', 0.5), ('"a,b"', 7.5), ("[[[[[[[[1]]]]]]]]", 7.5)])
def test_megabyte_bodies_of_tiny_values(server, item, mib):
    from runtime.server.validation import MAX_CONTAINERS, MAX_STRINGS, MAX_VALUES

    items = int(mib * 2**20) // (len(item) + 1)
    raw = '{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "x": [' + ",".join([item] * items) + "]}"
    with Watch(server, "2 super-linear work"):
        r = post(server, raw)
        strings = item.count('"') // 2
        if items * item.count("[") > MAX_CONTAINERS and not strings:  # a '[' in a string is text
            refused(r, None, "arrays and objects (at most")
        elif items * strings > MAX_STRINGS:
            refused(r, None, "strings (at most")
        elif items > MAX_VALUES:
            refused(r, None, "values (at most")
        else:
            assert r.status_code == 200, r.text[:300]


@pytest.mark.parametrize("n", [200_000, 300_000, 1_000_000, 2_500_000])
def test_millions_of_token_ids(server, n):
    from runtime.server.validation import MAX_TOKEN_IDS, MAX_VALUES

    raw = json.dumps({"model": "smollm2-135m", "prompt": [i % 9 + 1 for i in range(n)], "max_tokens": 2})
    with Watch(server, "2 super-linear work"):
        r = post(server, raw, "/v1/completions")
        if n > MAX_VALUES:
            refused(r, None, "values (at most")
        elif n > MAX_TOKEN_IDS:
            refused(r, "prompt", "limit")
        else:
            assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded", r.text[:300]


def test_many_tools_are_capped(server):
    tools = [{"type": "function", "function": {"name": f"t{i}", "parameters": {"type": "object"}}} for i in range(5000)]
    with Watch(server, "2 super-linear work"):
        refused(post(server, {"messages": ASK, "tools": tools, "max_tokens": 2}), "tools", "limit")


# -- class 7: JSON inside strings, patterns, loops --------------------------------------------
def _with_call(arguments: str) -> dict:
    return {"messages": [{"role": "user", "content": "time?"},
                         {"role": "assistant", "content": None, "tool_calls": [
                             {"id": "c1", "type": "function", "function": {"name": "t", "arguments": arguments}}]},
                         {"role": "tool", "tool_call_id": "c1", "content": "12:00"}], "max_tokens": 2}


@pytest.mark.parametrize("arguments", [
    '{"a": ' + nested(100) + "}", '{"a": ' + nested(5000) + "}", '{"a": ' + nested(200_000) + "}",
    '{"a": ' + "9" * 5000 + "}", '{"a": -' + "1" * 4999 + "}", "[" * 100_000,
    '{"a": ' + ",".join(["[]"] * 250_000) + "}",
])
def test_tool_call_arguments_in_history(server, arguments):
    with Watch(server, "7 client errors"):
        refused(post(server, _with_call(arguments)), "messages[1].tool_calls[0].function.arguments", "not valid JSON")


@pytest.mark.parametrize("text", [
    '{"type": "object", "properties": {"a": ' * 80 + '{"type": "string"}' + "}}" * 80,
    '{"type": "array", "items": ' * 3000 + "{}" + "}" * 3000,
    '{"type": "integer", "maximum": ' + "9" * 5000 + "}",
    '{"enum": [' + "[" * 150_000 + "]" * 150_000 + "]}",
])
def test_schemas_sent_as_text(server, text):
    with Watch(server, "7 client errors"):
        refused(post(server, {"messages": ASK, "max_tokens": 2, "response_format": rf(text)}),
                "response_format.json_schema.schema")
        tools = [{"type": "function", "function": {"name": "f", "parameters": text}}]
        refused(post(server, {"messages": ASK, "max_tokens": 2, "tools": tools}), "tools[0].function.parameters")


@pytest.mark.parametrize("depth", [40, 600, 3000])
def test_patterns_of_nested_groups(server, depth):
    pattern = "(" * depth + "a" + ")" * depth
    with Watch(server, "7 client errors"):
        refused(post(server, {"messages": ASK, "max_tokens": 2, "regex": pattern}), "regex", "limit")
        refused(post(server, {"messages": ASK, "max_tokens": 2,
                              "response_format": rf({"type": "string", "pattern": pattern})}),
                "response_format.json_schema.schema.pattern", "limit")
        refused(post(server, {"messages": ASK, "max_tokens": 2, "response_format": rf(
            {"type": "object", "patternProperties": {"^x": {}, pattern: {"type": "string"}}})}),
            "response_format.json_schema.schema.patternProperties.[1]", "limit")


def test_long_patterns_and_unclosed_groups(server):
    with Watch(server, "7 client errors"):
        refused(post(server, {"messages": ASK, "max_tokens": 2, "regex": "a" * 5000}), "regex", "limit")
        refused(post(server, {"messages": ASK, "max_tokens": 2, "regex": "(" * 20}), "regex")
        refused(post(server, {"messages": ASK, "max_tokens": 2, "response_format": rf(
            {"type": "string", "pattern": "(?<=a)b"})}), "response_format.json_schema.schema", "look-around")


def test_ollama_and_anthropic_routes_answer_the_same(server):
    """A format over the caps is refused on Ollama's route; a tool schema over them is relaxed
    (the call is still made, as any JSON object) on Anthropic's."""
    import ollama

    client = ollama.Client(host=server.url, timeout=60)
    with Watch(server, "7 client errors"):
        with pytest.raises(ollama.ResponseError) as e:
            client.chat(model="smollm2-135m", messages=ASK, format=ref_chain(3000))
        assert e.value.status_code == 400 and "limit" in e.value.error
        loop = {"type": "object", "properties": {"a": {"$ref": "#/$defs/l"}}, "$defs": {"l": {"$ref": "#/$defs/l"}}}
        for schema in (loop, ref_chain(20000)):  # a loop, past the size cap
            r = post(server, {"max_tokens": 8, "messages": ASK, "tools": [{"name": "f", "input_schema": schema}],
                              "tool_choice": {"type": "any"}}, "/v1/messages")
            if len(json.dumps(schema)) > 256 * 1024:  # over the size cap: refused before anything else
                assert r.status_code == 400 and "limit" in r.text, r.text[:300]
            else:
                assert r.status_code == 200 and r.headers["x-hearth-relaxed-tools"] == "f", r.text[:300]
