"""The constraint compiler's helper process: where caller-chosen schemas, patterns and grammars
meet native code.

The service runs a few of these (``constraint_compiler.HELPERS``) and hands each one job at a
time, in its fair order between clients, after measuring the job against the size caps
(``constraint_cost``). A helper reads jobs from its pipe one at a time and answers each with a
``CompileResult``; it ends quietly when the service closes the pipe. For every job the caps of
``schema_limits`` come first (again: the service measured only sizes), then the JSON Schema
meta-schema check (without a format checker, so no caller-chosen regular expression ever runs in
Python's backtracking ``re``), then the grammar library (``compile_constraint``) and a short walk
of the compiled grammar (``check_matches``). A crash or a stack overflow in the library ends only
this process; the service (``constraint_compiler``) answers that request with a 400 and starts
another.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
from typing import Any
from collections import OrderedDict
from multiprocessing.connection import Connection

from runtime.engine.constraint_spec import GBNF, JSON_SCHEMA, LARK, REGEX, ConstraintError, ConstraintSpec
from runtime.server.generate.constraint_jobs import CompileJob, CompileResult, HelperReady, ToolsJob
from runtime.server.generate.schema_limits import (
    MAX_TOOLS_BYTES, TOO_LARGE, check_grammar, check_pattern, check_schema_limits, schema_bytes,
)

#: how much of a meta-schema error a client sees
MESSAGE_CHARS = 240


def helper_main(conn: Connection) -> None:
    """The process's body: load the grammar library, say so, then compile until the pipe closes."""
    from runtime.server.generate import call_grammar  # noqa: F401 - imported before the first job, not during it

    # load the library, jsonschema and their tables before the first real job
    run_job(CompileJob(JSON_SCHEMA, {"type": "object", "properties": {"a": {"type": "string", "pattern": "a+"}}}))
    notes = _Notes()
    logging.getLogger("hearth.constraint").addHandler(notes)
    logging.getLogger("hearth.constraint").setLevel(logging.INFO)
    try:
        conn.send(HelperReady(os.getpid()))
        while True:
            job_id, payload = conn.recv()
            notes.lines.clear()
            result = run_job(pickle.loads(payload))
            result.notes = list(notes.lines)
            conn.send((job_id, result))
    except (EOFError, OSError):  # the service closed the pipe: it is ending this helper
        return


class _Notes(logging.Handler):
    """The grammar library's full messages for the current job, sent back for the service's log."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if len(self.lines) < 8:
            self.lines.append(record.getMessage()[:4000])


def run_job(job: CompileJob | ToolsJob) -> CompileResult:
    """One job's result; every failure is a ``ConstraintError`` for the client."""
    param = job.param if isinstance(job, CompileJob) else "tools"
    try:
        if isinstance(job, ToolsJob):
            return compile_tools(job)
        return CompileResult(compile_one(job.kind, job.source, job.param))
    except ConstraintError as e:
        return CompileResult(error=e)
    except RecursionError:
        return CompileResult(error=ConstraintError(f"'{param}' is nested too deeply to compile", param, TOO_LARGE))
    except Exception as e:  # noqa: BLE001 - the library's other failures: this job's, not the helper's
        logging.getLogger("hearth.constraint").info("compiling %s failed: %r", param, e)
        return CompileResult(error=ConstraintError(f"'{param}' could not be compiled ({type(e).__name__})", param))


def compile_one(kind: str, source: Any, param: str | None) -> ConstraintSpec:
    """Caps, meta-schema, compile, walk: one constraint as the client sent it."""
    from runtime.engine.constraint import check_matches, compile_constraint

    where = param or kind
    if kind == JSON_SCHEMA:
        schema_bytes(source, where)
        check_schema_limits(source, where)
        check_meta(source, where)
    elif kind == REGEX:
        check_pattern(source, where)
    elif kind in (LARK, GBNF):
        check_grammar(source, kind, where)
    spec = compile_constraint(kind, source, param)
    check_matches(spec, param)
    return spec


def check_meta(schema: object, param: str) -> None:
    """``schema`` against its JSON Schema meta-schema. No format checker: ``format: regex``
    would compile each ``pattern`` with Python's ``re`` (recursive, backtracking, and another
    dialect than the grammar library's); the library checks the patterns itself."""
    if not isinstance(schema, dict):
        raise ConstraintError(f"'{param}' must be a JSON schema (an object)", param, "invalid_schema")
    key = json.dumps(schema, sort_keys=True)
    if key not in _META:
        _META[key] = _meta_problem(schema)
        if len(_META) > META_CACHE:
            _META.popitem(last=False)
    _META.move_to_end(key)
    if _META[key] is not None:
        raise ConstraintError(f"'{param}' is not a valid JSON schema: {_META[key]}", param, "invalid_schema")


#: meta-schema verdicts kept (checking one of an agent's tools against the 2020-12 meta-schema
#: takes about 30 ms, and the same tools come back in every session)
META_CACHE = 2048
_META: OrderedDict[str, str | None] = OrderedDict()


def _meta_problem(schema: dict) -> str | None:
    import jsonschema

    try:
        jsonschema.validators.validator_for(schema).check_schema(schema, format_checker=None)
    except jsonschema.SchemaError as e:
        where = "/".join(str(p) for p in e.absolute_path)
        words = e.message if len(e.message) <= MESSAGE_CHARS else e.message[:MESSAGE_CHARS - 3] + "..."
        return words + (f" (at {where})" if where else "")
    return None


def compile_tools(job: ToolsJob) -> CompileResult:
    """The grammar of calls to ``job.tools`` (and of the answer, when a response format is
    given). A tool whose schema does not compile is relaxed rung by rung (``tool_relax``); only
    a schema that is not a JSON schema at all (or over the size caps), or an answer format that
    does not compile, is an error."""
    from runtime.engine.constraint import check_matches, compile_constraint
    from runtime.server.generate.call_grammar import call_grammar, grammar_trigger

    answer = None
    if job.answer is not None:
        compile_one(job.answer.kind, job.answer.source, job.answer.param)
        answer = job.answer.answer_schema
    trigger = grammar_trigger(job.syntax) if job.lazy else None
    tools, relaxed = _checked_tools(job)

    def grammar_of(chosen: list[dict], answer_schema: dict | None, walk: bool = True) -> ConstraintSpec:
        offered = [{"type": "function", "function": t["function"]} for t in chosen]
        spec = compile_constraint(LARK, call_grammar(job.syntax, offered, job.parallel, answer_schema), "tools", trigger)
        if walk:  # the walk builds a matcher, several times a compilation's cost: the whole grammar only
            check_matches(spec, "tools")
        return spec

    try:
        for t in tools:
            if t["function"].get("parameters") is not None:
                check_schema_limits(t["function"]["parameters"], t["param"])
        return CompileResult(grammar_of(tools, answer), relaxed=relaxed)
    except ConstraintError:
        pass
    for t in tools:
        if _relax(t, lambda rung, t=t: grammar_of([{**t, "function": {**t["function"], "parameters": rung}}], None, False)):
            relaxed += [] if t["function"]["name"] in relaxed else [t["function"]["name"]]
    try:
        return CompileResult(grammar_of(tools, answer), relaxed=relaxed)
    except ConstraintError:
        from runtime.server.generate.tool_relax import ANY_OBJECT

        for t in tools:
            t["function"]["parameters"] = dict(ANY_OBJECT)
        return CompileResult(grammar_of(tools, answer), relaxed=[t["function"]["name"] for t in tools])


def _checked_tools(job: ToolsJob) -> tuple[list[dict], list[str]]:
    """The tools with their schemas' sizes and meta-schemas checked (``ConstraintError``
    otherwise), regular expressions over the caps dropped; and the tools that lost one."""
    from runtime.server.generate.tool_relax import without_oversized_patterns

    tools, relaxed, size = [], [], 0
    for tool, where in zip(job.tools, job.where):
        fn = dict(tool["function"])
        if fn.get("parameters") is not None:
            size += schema_bytes(fn["parameters"], where)
            if size > MAX_TOOLS_BYTES:
                raise ConstraintError(f"the tools' parameter schemas are over {MAX_TOOLS_BYTES} bytes of JSON in all",
                                      "tools", TOO_LARGE)
            fn["parameters"], dropped = without_oversized_patterns(fn["parameters"])
            check_meta(fn["parameters"], where)
            if dropped:
                relaxed.append(fn["name"])
        tools.append({"type": "function", "function": fn, "param": where})
    return tools, relaxed


def _relax(tool: dict, compiles) -> bool:
    """Give ``tool`` the first rung of its schema that passes the caps and ``compiles(rung)``;
    whether that is not the schema it came with."""
    from runtime.server.generate.tool_relax import rungs

    params = tool["function"].get("parameters")
    if params is None:
        return False
    for i, rung in enumerate(rungs(params)):
        try:
            check_schema_limits(rung, tool["param"])
            compiles(rung)
        except ConstraintError:
            continue
        tool["function"]["parameters"] = rung
        return i > 0
    return False
