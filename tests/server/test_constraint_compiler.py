"""The constraint compiler's helper process: one warm helper reused and its results cached, safe
first use under concurrency, a job past its budget or a crash of the helper costs only that job,
and the next job gets a fresh helper. Real helper processes (spawned), real llguidance."""

from __future__ import annotations

import asyncio
import os
import signal
import time

from runtime.chat.contract import FALLBACK_CALLS, JSON, CallSyntax
from runtime.engine.constraint_spec import GBNF, JSON_SCHEMA, REGEX
from runtime.server.generate.constraint_compiler import CRASHED, PER_TOOL_S, TIMEOUT, ConstraintCompiler
from runtime.server.generate.constraint_jobs import CompileJob, ToolsJob

SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}

#: the Hermes / Qwen 2.5 call syntax, as derived from their templates
HERMES = CallSyntax(JSON, call_start="<tool_call>\n", call_end="\n</tool_call>", call_sep="\n")


def slow_tools(n: int = 200) -> ToolsJob:
    """Tools that each need relaxing (a look-around pattern, ``not``): three compilations a tool."""
    tools = [{"type": "function", "function": {"name": f"t{i}", "parameters": {
        "type": "object", "properties": {"k": {"type": "string", "pattern": f"(?=a){i}"}, "n": {"not": {"type": "null"}}},
        "required": ["k"]}}} for i in range(n)]
    return ToolsJob(HERMES, tools, [f"tools[{i}].function.parameters" for i in range(n)], True, False)


def with_compiler(test, **kw):
    async def run():
        c = ConstraintCompiler(**kw)
        try:
            await test(c)
        finally:
            c.close()
    asyncio.run(run())


def test_one_warm_helper_and_a_cache():
    async def test(c: ConstraintCompiler) -> None:
        first = await c.compile(CompileJob(JSON_SCHEMA, SCHEMA, "response_format"))
        assert first.error is None and first.spec.kind == JSON_SCHEMA
        pid = c.pid
        assert pid is not None and pid != os.getpid()
        again = await c.compile(CompileJob(JSON_SCHEMA, dict(SCHEMA), "response_format"))
        assert again is first  # the same content: no second compilation
        other = await c.compile(CompileJob(REGEX, "[0-9]+", "regex"))
        assert other.spec is not None and c.pid == pid and c.started == 1

    with_compiler(test)


def test_concurrent_first_use_starts_one_helper():
    async def test(c: ConstraintCompiler) -> None:
        results = await asyncio.gather(*(c.compile(CompileJob(REGEX, f"[a-z]{{{i}}}", "regex")) for i in range(1, 17)))
        assert all(r.spec is not None for r in results)
        assert c.started == 1

    with_compiler(test)


def test_a_job_past_its_budget_restarts_the_helper_and_the_next_job_works():
    gbnf = "root ::= r0\n" + "".join(f"r{i} ::= r{i + 1} | \"x{i}\"\n" for i in range(400)) + 'r400 ::= "yes"\n'

    async def test(c: ConstraintCompiler) -> None:
        await c.compile(CompileJob(REGEX, "x", "regex"))  # the helper is up: the budget is the job's own
        pid = c.pid
        c.budget_s = 0.01  # 400 rules take tens of milliseconds
        t0 = time.monotonic()
        r = await c.compile(CompileJob(GBNF, gbnf, "grammar"))
        assert time.monotonic() - t0 < 5
        assert r.error is not None and r.error.code == TIMEOUT and r.error.param == "grammar"
        assert str(r.error) == "'grammar' could not be compiled within 0.01 s: simplify it"
        c.budget_s = 30
        after = await c.compile(CompileJob(GBNF, 'root ::= "yes" | "no"', "grammar"))
        assert after.spec is not None and c.pid not in (None, pid) and c.started == 2
        again = await c.compile(CompileJob(GBNF, gbnf, "grammar"))  # a timeout is not kept: with time, it compiles
        assert again.spec is not None
        assert c.budget_for(slow_tools(10)) == 30 + 10 * PER_TOOL_S

    with_compiler(test)


def test_a_crash_of_the_helper_costs_only_its_job():
    async def test(c: ConstraintCompiler) -> None:
        await c.compile(CompileJob(REGEX, "x", "regex"))
        pid = c.pid
        job = asyncio.create_task(c.compile(slow_tools(600)))
        await asyncio.sleep(1.0)  # well inside the job (about 1,800 compilations: 3 s or more)
        os.kill(pid, signal.SIGSEGV)
        r = await job
        assert r.error is not None and r.error.code == CRASHED
        assert str(r.error) == "'tools' crashed the grammar compiler: simplify it"
        after = await c.compile(CompileJob(JSON_SCHEMA, SCHEMA, "response_format"))
        assert after.spec is not None and c.pid not in (None, pid) and c.started == 2
        assert (await c.compile(slow_tools(600))) is r  # a job that crashed the helper is not run again

    with_compiler(test, budget_s=60)


def test_a_job_whose_caller_left_still_finishes_and_is_kept():
    async def test(c: ConstraintCompiler) -> None:
        await c.compile(CompileJob(REGEX, "x", "regex"))
        job = asyncio.create_task(c.compile(slow_tools(20)))
        await asyncio.sleep(0.05)
        job.cancel()
        t0 = time.monotonic()
        r = await c.compile(slow_tools(20))  # waits for the abandoned run, then finds its result
        assert r.spec is not None and sorted(r.relaxed) == sorted(f"t{i}" for i in range(20))
        assert c.started == 1 and time.monotonic() - t0 < 30

    with_compiler(test, budget_s=60)


def test_tool_schemas_past_the_caps_or_unenforceable_are_relaxed_and_invalid_ones_refused():
    async def test(c: ConstraintCompiler) -> None:
        chain = {"$defs": {f"d{i}": {"$ref": f"#/$defs/d{i + 1}"} for i in range(80)}, "$ref": "#/$defs/d0"}
        chain["$defs"]["d80"] = {"type": "object"}
        loop = {"type": "object", "properties": {"a": {"$ref": "#/$defs/l"}}, "$defs": {"l": {"$ref": "#/$defs/l"}}}
        fine = {"type": "object", "properties": {"q": {"type": "string", "pattern": "^[a-z]+$"}}}
        tools = [{"type": "function", "function": {"name": n, "parameters": p}}
                 for n, p in (("deep", chain), ("loop", loop), ("fine", fine), ("none", None))]
        where = [f"tools[{i}].function.parameters" for i in range(4)]
        r = await c.compile(ToolsJob(FALLBACK_CALLS, tools, where, True, True))
        assert r.error is None and r.relaxed == ["deep", "loop"] and r.spec.trigger == '{"tool_calls": ['
        assert "^[a-z]+$" in r.spec.grammar  # what compiles is enforced as it was sent
        bad = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "required": "x"}}}]
        r = await c.compile(ToolsJob(FALLBACK_CALLS, bad, ["tools[0].function.parameters"], True, False))
        assert r.error is not None and r.error.param == "tools[0].function.parameters"
        assert "not a valid JSON schema" in str(r.error)

    with_compiler(test)
