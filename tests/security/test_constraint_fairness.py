"""One client's huge tool lists must not starve others in the constraint compiler.

The finding: six 1.7 MB tool lists from one client queued in the single constraint helper; another
client's one-tool request waited 34.5 s and ``/health`` rose to 630 ms; the size caps were checked
only in the helper, after the job was pickled on the event loop.

What holds now (``constraint_compiler``, ``constraint_cost``, ``fair_queue``): a job's size is
measured before anything is pickled (an oversize list is a 400 naming ``tools`` at once); jobs
wait per client and a client runs one at a time, so another client's job takes the other helper;
a client holds at most its share of queued jobs and bytes (429 with Retry-After beyond).

Real parts only: the compiler with its real helper processes (spawned, llguidance), and a live
``hearth serve`` (SmolLM2) on 127.0.0.1, whose second client is another machine account
(``tests.accounts``: on loopback the service tells clients apart by the account that owns the
socket).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import cast

import httpx
import pytest

from runtime.chat.contract import FALLBACK_CALLS
from runtime.server.generate.constraint_compiler import CLIENT_BYTES, ClientBusy, ConstraintCompiler
from runtime.server.generate.constraint_cost import JobCost, job_cost
from runtime.server.generate.constraint_jobs import ToolsJob
from runtime.server.generate.fair_queue import FairQueue
from runtime.server.generate.schema_limits import MAX_SCHEMA_BYTES, MAX_TOOLS_BYTES, TOO_LARGE
from tests.accounts import accounts  # noqa: F401 - a fixture, found by name
from tests.server.conftest import live_server

HEALTH_MS = 250
#: the longest a second client's one-tool request may take while the attack runs
OTHER_CLIENT_S = 2.0
URL = "/v1/chat/completions"


def tool_list(tag: str, tools: int = 256, props: int = 12, description: int = 0) -> list[dict]:
    """OpenAI function tools, distinct by ``tag``: ``props`` string properties with an enum each."""
    out = []
    for i in range(tools):
        params = {"type": "object", "required": ["p0"], "properties": {
            f"p{j}": {"type": "string", "description": "a field " * 3, "enum": [f"{tag}-{i}-{j}-{k}" for k in range(4)]}
            for j in range(props)}}
        fn = {"name": f"t{i}", "parameters": params}
        if description:
            fn["description"] = f"{tag} " + "d" * description
        out.append({"type": "function", "function": fn})
    return out


def tools_job(tools: list[dict]) -> ToolsJob:
    """The job ``tool_calls.plan_output`` makes of them (tool_choice auto, the fallback syntax)."""
    shapes = [{"type": "function", "function": {"name": t["function"]["name"],
                                                "parameters": t["function"]["parameters"]}} for t in tools]
    return ToolsJob(FALLBACK_CALLS, shapes, [f"tools[{i}].function.parameters" for i in range(len(tools))],
                    parallel=True, lazy=True)


def one_tool(tag: str = "weather") -> list[dict]:
    return [{"type": "function", "function": {"name": "get_weather", "description": f"{tag} at a place", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


def with_compiler(test, **kw) -> None:
    async def run() -> None:
        c = ConstraintCompiler(**kw)
        try:
            await test(c)
        finally:
            c.close()
    asyncio.run(run())


async def held(c: ConstraintCompiler, client: str, jobs: int) -> None:
    """Wait until ``client`` has ``jobs`` queued or compiling (big jobs are measured and pickled
    in a thread, one at a time, before they are queued)."""
    deadline = time.monotonic() + 10
    while c.held(client)[0] < jobs:
        assert time.monotonic() < deadline, c.held(client)
        await asyncio.sleep(0.01)


class Tripwire:
    """A value in a job that counts the times it is pickled."""

    pickled = 0

    def __reduce__(self):
        Tripwire.pickled += 1
        return (Tripwire, ())


# -- the compiler, driven directly with two clients' identities ---------------------------------
def test_one_clients_queued_tool_lists_do_not_hold_up_another_clients_one_tool():
    """Six big lists of client A queued (about 2 s each to compile here); client B's one tool is
    compiled while they wait, in well under the time of one of A's lists."""
    async def test(c: ConstraintCompiler) -> None:
        await c.compile(tools_job(tool_list("warm", tools=1)), "client-a")  # the service is warm: a helper is up
        lists = [tools_job(tool_list(f"a{i}")) for i in range(6)]
        a = [asyncio.create_task(c.compile(job, "client-a")) for job in lists]
        await held(c, "client-a", 6)  # A's first list is compiling, the other five wait
        t0 = time.monotonic()
        b = await c.compile(tools_job(one_tool()), "client-b")
        took = time.monotonic() - t0
        assert b.error is None and b.spec is not None, b.error
        assert took < OTHER_CLIENT_S, f"client B waited {took:.2f} s behind client A's lists"
        assert sum(t.done() for t in a) <= 1  # B did not wait for A's queue
        print(f"\nclient B's one tool compiled in {took * 1000:.0f} ms with six of A's lists queued")
        first = await a[0]  # A's lists are compiled one at a time, each in full
        assert first.error is None and first.spec is not None

    with_compiler(test, client_jobs=16, client_bytes=16 * MAX_TOOLS_BYTES)


def test_a_client_gets_one_helper_at_a_time_and_its_turn_after_others():
    """With both helpers free, a client with a queue still runs one job at a time; a job of a
    client that comes later goes before the first client's second job."""
    async def test(c: ConstraintCompiler) -> None:
        done: list[str] = []

        async def run(job: ToolsJob, who: str, label: str) -> None:
            r = await c.compile(job, who)
            assert r.error is None, r.error
            done.append(label)

        a = [asyncio.create_task(run(tools_job(tool_list(f"q{i}", tools=64)), "client-a", f"a{i}")) for i in range(3)]
        await asyncio.sleep(0.05)
        b = asyncio.create_task(run(tools_job(tool_list("qb", tools=64)), "client-b", "b"))
        await asyncio.gather(*a, b)
        assert c.started == 2  # one helper each, never two for A
        assert done.index("b") < done.index("a1"), done

    with_compiler(test, client_jobs=16, client_bytes=16 * MAX_TOOLS_BYTES)


def test_an_oversize_tool_list_is_refused_before_it_is_pickled():
    """Tools over the caps are refused by their measured size, naming the field: nothing is
    pickled, no helper is started, and it takes no time however big the list is."""
    async def test(c: ConstraintCompiler) -> None:
        Tripwire.pickled = 0
        tools = tool_list("big", props=36, description=2000)  # 1.7 MB of tools, 1.1 MB of parameter schemas
        assert len(json.dumps(tools)) > 1_700_000
        tools[0]["function"]["parameters"]["default"] = Tripwire()
        t0 = time.monotonic()
        r = await c.compile(tools_job(tools), "client-a")
        assert time.monotonic() - t0 < 0.5
        assert r.error is not None and r.error.code == TOO_LARGE and r.error.param == "tools", r.error
        assert f"over {MAX_TOOLS_BYTES} bytes" in str(r.error)
        one = tool_list("one", tools=1)
        one[0]["function"]["parameters"]["properties"]["blob"] = {"type": "string", "description": "x" * MAX_SCHEMA_BYTES,
                                                                   "default": Tripwire()}
        r = await c.compile(tools_job(one), "client-a")
        assert r.error is not None and r.error.code == TOO_LARGE, r.error
        assert r.error.param == "tools[0].function.parameters"
        assert Tripwire.pickled == 0 and c.started == 0

    with_compiler(test)


def test_a_client_over_its_share_is_refused_and_others_are_not():
    """A client holds at most ``client_bytes`` of schemas queued or compiling (``CLIENT_BYTES``:
    two lists at the caps): its third list is refused at once (``ClientBusy``, a 429), another
    client's is taken; a job identical to one queued costs nothing more."""
    lists = [tools_job(tool_list(f"s{i}", tools=64)) for i in range(3)]
    costs = [cast(JobCost, job_cost(job)).bytes for job in lists]
    assert CLIENT_BYTES == 2 * MAX_TOOLS_BYTES

    async def test(c: ConstraintCompiler) -> None:
        a = [asyncio.create_task(c.compile(job, "client-a")) for job in lists[:2]]
        await held(c, "client-a", 2)
        assert c.held("client-a") == (2, costs[0] + costs[1])
        same = asyncio.create_task(c.compile(tools_job(tool_list("s0", tools=64)), "client-a"))  # as a[0]
        await asyncio.sleep(0.1)
        assert c.held("client-a") == (2, costs[0] + costs[1]) and not same.done()  # it joined a[0]: no charge
        t0 = time.monotonic()
        with pytest.raises(ClientBusy, match="retry when one is done"):
            await c.compile(lists[2], "client-a")
        assert time.monotonic() - t0 < 0.5
        b = await c.compile(lists[2], "client-b")  # the same list, another client: its own share
        assert b.error is None
        results = await asyncio.gather(*a, same)
        assert all(r.error is None for r in results) and results[2] is results[0]
        assert c.held("client-a") == (0, 0)
        assert (await c.compile(lists[2], "client-a")) is b  # compiled once: the cache answers

    with_compiler(test, client_bytes=costs[0] + costs[1] + 1000)


def test_the_fair_queue_orders_by_least_recent_service():
    q: FairQueue[str] = FairQueue(max_items=3, max_cost=100, max_running=1)
    for i in range(3):
        q.push("a", f"a{i}", 10)
    assert q.refusal("a", 10) is not None and q.refusal("b", 1000) is None  # nothing held: always let in
    assert q.pop() == ("a", "a0")
    assert q.pop() is None  # a runs one at a time
    q.push("b", "b0", 10)
    q.done("a", 10)
    assert q.pop() == ("b", "b0")  # b came after a was served: b goes first
    assert q.pop() == ("a", "a1")
    q.done("b", 10)
    q.push("b", "b1", 10)  # b comes back at once: its last turn was before a's
    q.push("c", "c0", 10)  # c comes after b: behind it
    q.done("a", 10)
    assert [q.pop(), q.pop(), q.pop()] == [("b", "b1"), ("c", "c0"), ("a", "a2")]
    assert q.held("a") == (1, 10) and len(q) == 0


# -- the finding, against a live service -------------------------------------------------------
@pytest.fixture(scope="module")
def server(smollm2_path):
    s = live_server("--ctx", "2048")
    yield s
    s.stop()


def body(tools: list[dict]) -> bytes:
    return json.dumps({"model": "smollm2-135m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1,
                       "tools": tools}).encode()


def test_six_huge_tool_lists_of_one_client_hold_up_neither_health_nor_another_client(server, accounts):  # noqa: F811
    """Client A sends six 1.7 MB tool lists at once, and one over the caps; meanwhile ``/health``
    answers within ``HEALTH_MS``, and client B's one-tool request completes its compile within
    ``OTHER_CLIENT_S`` (``/hearth/count_tokens``: the compile, then a count of the prompt), and
    then its chat completion. A's oversize list is a 400 at once, A's lists past its share are
    429s with Retry-After, and the rest are compiled (none is a 5xx)."""
    huge = [body(tool_list(f"h{i}", props=20, description=4000)) for i in range(6)]
    assert all(1_600_000 < len(b) < 1_900_000 for b in huge), [len(b) for b in huge]
    oversize = body(tool_list("over", props=36, description=2000))
    b_tools = one_tool()
    b_tools[0]["function"]["parameters"]["properties"]["when"] = {"type": "string"}  # not the warm-up's job
    b_account = accounts(0)
    # the service is warm: the model has run a request with tools (its grammar tokenizer is built),
    # and A has sent a big list before (so both helpers are up)
    for path, tools in ((URL, one_tool("warm")), ("/hearth/count_tokens", tool_list("warm", tools=64))):
        warm = httpx.post(server.url + path, content=body(tools), headers={"Content-Type": "application/json"},
                          timeout=120)
        assert warm.status_code == 200, warm.text
    watch = subprocess.Popen([sys.executable, str(Path(__file__).parents[1] / "server" / "health_watch.py"),
                              str(server.port), "0.02"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert watch.stdout is not None and watch.stdout.readline().strip() == "ready"
    answers: dict[str, tuple[int, dict, dict, float]] = {}

    def send(label: str, raw: bytes) -> None:
        t0 = time.monotonic()
        r = httpx.post(server.url + URL, content=raw, headers={"Content-Type": "application/json"}, timeout=300)
        answers[label] = (r.status_code, r.json(), dict(r.headers), time.monotonic() - t0)

    threads = [threading.Thread(target=send, args=(f"huge{i}", raw)) for i, raw in enumerate(huge)]
    threads.append(threading.Thread(target=send, args=("oversize", oversize)))
    try:
        for t in threads:  # one after another: what is measured is the compiler, not seven bodies parsed at once
            t.start()
            time.sleep(0.1)
        time.sleep(1.0)  # A's bodies are in, its first list is compiling
        counted = b_account.request(server.port, "POST", "/hearth/count_tokens", body(b_tools), timeout=120)
        chat = b_account.request(server.port, "POST", URL, body(b_tools), timeout=120)
        for t in threads:
            t.join(300)
    finally:
        out = json.loads(watch.communicate("", timeout=60)[0])
    lat = out["latencies_ms"]
    print(f"\nclient B: count_tokens {counted[0]} in {counted[2] * 1000:.0f} ms, chat {chat[0]} in "
          f"{chat[2] * 1000:.0f} ms; slowest /health {max(lat):.0f} ms of {len(lat)}; "
          f"A: {sorted((k, v[0], round(v[3], 1)) for k, v in answers.items())}")
    assert counted[0] == 200 and chat[0] == 200, (counted[1][:300], chat[1][:300])
    assert counted[2] < OTHER_CLIENT_S, f"client B's one tool took {counted[2]:.2f} s to compile and count"
    assert out["errors"] == 0 and max(lat) < HEALTH_MS, sorted(lat)[-5:]
    code, err, _, took = answers["oversize"]
    assert code == 400 and err["error"]["param"] == "tools" and err["error"]["code"] == TOO_LARGE, err
    assert took < 2.0, f"the oversize list was refused after {took:.1f} s"
    codes = [answers[f"huge{i}"][0] for i in range(6)]
    assert 429 in codes and any(c != 429 for c in codes) and all(c < 500 for c in codes), codes
    for i in range(6):
        code, err, headers, took = answers[f"huge{i}"]
        if code == 429:
            assert err["error"]["code"] == "too_many_constraints" and int(headers["retry-after"]) >= 1, err
            assert took < 2.0
