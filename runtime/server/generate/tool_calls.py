"""Tool calling and reasoning on the request side: parse ``tools`` / ``tool_choice``, prepare the
conversation for the model's template, and choose the output parser and grammar.

Internal form (``GenerationRequest``): ``tools`` is a list of OpenAI function tools
``{"type": "function", "function": {"name", "description", "parameters"}}`` (Ollama sends the
same shape); ``tool_choice`` is ``"auto"``, ``"none"``, ``"required"`` or
``{"type": "function", "function": {"name": ...}}``.

Once the engine (and so the model's output contract, ``runtime.chat.contract``) is known,
:func:`plan_output` has the constraint compiled in the model's own call syntax (``required`` /
named: the call grammar from the first token; ``auto``: the same grammar lazily from the syntax's
trigger, or, beside a JSON response format, one grammar from the first token: calls or an answer
that matches the format; ``none``: no tools are shown to the model), and rewrites the messages
for templates that do not render tools themselves (tool descriptions in the system message,
earlier calls in the fallback JSON shape, tool results as user turns).

Tool schemas are compiled in the constraint compiler's helper process; one the grammar cannot
enforce is relaxed (``tool_relax``) rather than refused, and the reply's
``x-hearth-relaxed-tools`` header names it.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from runtime.chat.call_text import call_text
from runtime.chat.contract import FALLBACK_CALLS, CallSyntax, OutputContract
from runtime.server.generate.constraint_jobs import CompileJob, ToolsJob
from runtime.server.errors import ApiError, bad_request
from runtime.server.generate.schema_limits import MAX_TOOLS, TOO_LARGE
from runtime.server.generate.structured_output import check_schema, compile_job
from runtime.server.validation import json_field

log = logging.getLogger("hearth.server")
#: the response header that names the tools whose schemas were relaxed to compile
RELAXED_HEADER = "x-hearth-relaxed-tools"
#: where ``plan_output`` leaves their names on the request
RELAXED_TOOLS = "hearth.relaxed_tools"

_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")
EFFORTS = ("low", "medium", "high")


@dataclass(slots=True)
class OutputPlan:
    """How the service reads a reply: the model's contract, the tools offered (none: calls are
    not read) and whether the prompt opened the thinking block."""

    contract: OutputContract
    tools: list[dict]
    in_reasoning: bool = False
    #: the chat template renders the tools itself (they go to it as a template variable)
    native_tools: bool = False

    @property
    def think(self) -> tuple[str, str] | None:
        """The thinking markers (None: the model has none)."""
        r = self.contract.reasoning
        return (r.start, r.end) if r is not None else None


def apply_tools(req, body: dict, raw_messages: list | None) -> None:
    """Read tools, tool_choice, parallel_tool_calls and the reasoning switches into ``req``."""
    req.tools = parse_tools(body)
    req.tool_choice = parse_tool_choice(body, req.tools)
    ptc = body.get("parallel_tool_calls")
    if ptc is not None and not isinstance(ptc, bool):
        raise bad_request("'parallel_tool_calls' must be true or false", "parallel_tool_calls")
    req.parallel_tool_calls = ptc is not False
    req.think, req.reasoning_effort = parse_reasoning(body)
    if req.messages is not None and raw_messages is not None:
        req.messages = tool_messages(req.messages, raw_messages)


def parse_tools(body: dict) -> list[dict] | None:
    raw = body.get("tools")
    if raw is None or raw == []:
        return None
    if not isinstance(raw, list):
        raise bad_request("'tools' must be a list of function tools", "tools")
    if len(raw) > MAX_TOOLS:
        raise ApiError(400, f"'tools' has {len(raw)} tools; the limit is {MAX_TOOLS}", param="tools", code=TOO_LARGE)
    tools, names = [], set()
    for i, t in enumerate(raw):
        where = f"tools[{i}]"
        if not isinstance(t, dict) or t.get("type", "function") != "function" or not isinstance(t.get("function"), dict):
            raise bad_request(f"'{where}' must be {{\"type\": \"function\", \"function\": {{...}}}}", where)
        fn = t["function"]
        name = fn.get("name")
        if not isinstance(name, str) or not _NAME.match(name):
            raise bad_request(f"'{where}.function.name' must be 1-64 letters, digits, '_', '.' or '-'", f"{where}.function.name")
        if name in names:
            raise bad_request(f"'{where}.function.name': {name!r} is defined twice", f"{where}.function.name")
        names.add(name)
        desc = fn.get("description")
        if desc is not None and not isinstance(desc, str):
            raise bad_request(f"'{where}.function.description' must be a string", f"{where}.function.description")
        params = fn.get("parameters")
        out: dict[str, Any] = {"name": name, **({"description": desc} if desc else {})}
        if params is not None:
            out["parameters"] = check_schema(params, f"{where}.function.parameters")
        tools.append({"type": "function", "function": out})
    return tools


def parse_tool_choice(body: dict, tools: list[dict] | None) -> Any:
    v = body.get("tool_choice")
    if v is None:
        return "auto" if tools else "none"
    if v in ("auto", "none", "required"):
        if v == "required" and not tools:
            raise bad_request("'tool_choice' is \"required\" but no 'tools' were given", "tool_choice")
        return v
    if isinstance(v, dict) and v.get("type") == "function" and isinstance(v.get("function"), dict):
        name = v["function"].get("name")
        if not any(t["function"]["name"] == name for t in tools or []):
            raise bad_request(f"'tool_choice' names the function {name!r}, which is not in 'tools'", "tool_choice")
        return {"type": "function", "function": {"name": name}}
    raise bad_request("'tool_choice' must be \"none\", \"auto\", \"required\" or "
                      "{\"type\": \"function\", \"function\": {\"name\": ...}}", "tool_choice")


def parse_reasoning(body: dict) -> tuple[bool | None, str | None]:
    """OpenAI ``reasoning_effort`` and the ``enable_thinking`` / Ollama ``think`` switches."""
    effort = body.get("reasoning_effort")
    if effort is not None and effort not in EFFORTS + ("none", "minimal"):
        raise bad_request("'reasoning_effort' must be one of none, minimal, low, medium, high", "reasoning_effort")
    think = body.get("think", body.get("enable_thinking"))
    if think in EFFORTS:
        effort, think = think, True
    elif think is not None and not isinstance(think, bool):
        raise bad_request("'think' must be true, false, \"low\", \"medium\" or \"high\"", "think")
    if effort in ("none", "minimal") and think is None:
        think = False
    elif effort in EFFORTS and think is None:
        think = True
    return think, effort if effort in EFFORTS else None


def tool_messages(messages: list[dict], raw: list) -> list[dict]:
    """Keep ``tool_calls`` on assistant messages (arguments as objects, as templates expect
    them) and ``tool_call_id`` / ``name`` on tool messages."""
    out = []
    for i, (m, r) in enumerate(zip(messages, raw)):
        m = dict(m)
        calls = r.get("tool_calls") if isinstance(r, dict) else None
        if calls:
            if not isinstance(calls, list):
                raise bad_request(f"messages[{i}].tool_calls must be a list", f"messages[{i}].tool_calls")
            m["tool_calls"] = [_history_call(c, f"messages[{i}].tool_calls[{j}]") for j, c in enumerate(calls)]
        for key, to in (("tool_call_id", "tool_call_id"), ("name", "name"), ("tool_name", "name")):
            if isinstance(r, dict) and isinstance(r.get(key), str):
                m[to] = r[key]
        if isinstance(r, dict) and isinstance(r.get("reasoning_content") or r.get("thinking"), str):
            m["reasoning_content"] = r.get("reasoning_content") or r.get("thinking")
        out.append(m)
    return out


def _history_call(c: Any, where: str) -> dict:
    fn = c.get("function") if isinstance(c, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise bad_request(f"{where} must be {{\"type\": \"function\", \"function\": {{\"name\", \"arguments\"}}}}", where)
    args = fn.get("arguments", {})
    if isinstance(args, str):
        args = json_field(args, f"{where}.function.arguments") if args.strip() else {}
    if not isinstance(args, dict):
        raise bad_request(f"{where}.function.arguments must be a JSON object", f"{where}.function.arguments")
    return {"id": c.get("id") or "", "type": "function", "function": {"name": fn["name"], "arguments": args}}


async def plan_output(req, contract: OutputContract | None, request: web.Request | None = None) -> OutputPlan | None:
    """Tools and reasoning for ``req`` on a model with ``contract``; rewrites ``req.messages``
    and compiles ``req.constraint`` (a response format's, or the tool calls'). None: plain text
    (the fast path). ``request``: where to note the relaxed tools for the reply's header."""
    contract = contract or OutputContract()
    answer = req.constraint if isinstance(req.constraint, CompileJob) else None
    if req.messages is None:  # raw completions: the client owns the format
        if answer is not None:
            req.constraint = (await compile_job(answer)).spec
        return None
    r = contract.reasoning
    in_reasoning = r is not None and (r.opened if req.think is not False else r.opened_off)
    choice = req.tool_choice
    tools = req.tools if req.tools and choice != "none" else None
    # the model's own call syntax where its template renders calls (the tools described in the
    # system message where the template does not describe them); the fallback JSON shape otherwise
    syntax = contract.calls if contract.calls is not None else FALLBACK_CALLS
    native = contract.native_tools  # the template describes the tools itself
    if not tools:
        if answer is not None:
            req.constraint = (await compile_job(answer)).spec
        if contract.calls is None and any(m.get("tool_calls") or m.get("role") == "tool" for m in req.messages):
            # earlier calls and results still reach a template that cannot render them
            req.messages = render_for(req.messages, syntax, [], native=False)
        if r is None:
            return None
        return OutputPlan(contract, [], in_reasoning=in_reasoning)
    if answer is not None and answer.answer_schema is None:
        raise bad_request(f"'{answer.param}' cannot be combined with 'tools' (a JSON response format can; or set "
                          "tool_choice to \"none\")", answer.param)
    if isinstance(choice, dict):
        offered = [t for t in tools if t["function"]["name"] == choice["function"]["name"]]
    else:
        offered = tools
    index = {id(t): i for i, t in enumerate(req.tools)}
    # what the grammar needs of each tool (descriptions change nothing, and would split the cache)
    shapes = [{"type": "function", "function": {k: v for k, v in t["function"].items() if k in ("name", "parameters")}}
              for t in offered]
    job = ToolsJob(syntax, shapes, [f"tools[{index[id(t)]}].function.parameters" for t in offered],
                   parallel=req.parallel_tool_calls and not isinstance(choice, dict),
                   # a required call ignores the response format: it is for the answer after the results
                   lazy=choice == "auto" and answer is None, answer=answer if choice == "auto" else None)
    result = await compile_job(job)
    if result.relaxed:
        log.info("tool schemas relaxed to what the grammar can enforce: %s", ", ".join(result.relaxed))
        if request is not None:
            request[RELAXED_TOOLS] = result.relaxed
    req.constraint = result.spec
    req.messages = render_for(req.messages, syntax, tools, native, calls_rendered=contract.calls is not None)
    plan_contract = contract if contract.calls is not None else OutputContract(calls=FALLBACK_CALLS, reasoning=r)
    return OutputPlan(plan_contract, tools, in_reasoning=in_reasoning, native_tools=native)


async def relaxed_tools_header(request: web.Request, response: web.StreamResponse) -> None:
    """``on_response_prepare``: name the tools whose schemas were relaxed (tool by tool)."""
    names = request.get(RELAXED_TOOLS)
    if names:
        response.headers[RELAXED_HEADER] = ", ".join(names)


def render_for(messages: list[dict], syntax: CallSyntax, tools: list[dict], native: bool,
               calls_rendered: bool = False) -> list[dict]:
    """Messages for the template: the tools described in the system message with an example in
    ``syntax`` where it does not describe them itself (``native`` False); earlier calls and
    results as text where it does not render them (``calls_rendered`` False). Unchanged where it
    does both."""
    if native and calls_rendered:
        return messages
    out: list[dict] = []
    for m in messages:
        if calls_rendered:
            out.append(m)
        elif m.get("role") == "assistant" and m.get("tool_calls"):
            calls = [(c["function"]["name"], c["function"]["arguments"]) for c in m["tool_calls"]]
            text = (m.get("content") or "") + call_text(syntax, calls)
            out.append({"role": "assistant", "content": text})
        elif m.get("role") == "tool":
            name = f" {m['name']}" if m.get("name") else ""
            out.append({"role": "user", "content": f"<tool_response{name}>\n{m.get('content') or ''}\n</tool_response>"})
        else:
            out.append({"role": m["role"], "content": m.get("content") or ""})
    if not tools or native:
        return out
    prompt = system_prompt(syntax, tools)
    if out and out[0]["role"] in ("system", "developer"):
        out[0] = {**out[0], "content": f"{out[0].get('content') or ''}\n\n{prompt}"}
    else:
        out.insert(0, {"role": "system", "content": prompt})
    return out


def system_prompt(syntax: CallSyntax, tools: list[dict]) -> str:
    listing = json.dumps([t["function"] for t in tools], ensure_ascii=False)
    example = call_text(syntax, [("function_name", {"argument": "value"})])
    return ("You are an expert in composing functions. You are given a question and a set of possible "
            "functions. Based on the question, you will need to make one or more function/tool calls "
            "to achieve the purpose.\n"
            f"Here is a list of functions in JSON format that you can invoke.\n<tools>{listing}</tools>\n\n"
            f"To call functions, reply with exactly this format:\n{example}\n"
            "When a tool result is given, use it to answer the question.")


def call_checker(tools: list[dict]):
    """``accept(name, arguments)`` for the output parser: the function is one of ``tools``.

    The arguments are not validated against the tool's schema here: the grammar already
    enforced it from the call's first token, and running a schema (its ``pattern`` keywords in
    Python's backtracking ``re``, nested ``anyOf`` keywords) on the event loop costs what the caller
    chooses. A call the grammar did not see (a family's second marker) is passed on as the model
    wrote it, for the client to check, as every other server does."""
    names = {t["function"]["name"] for t in tools}

    def accept(name: str, arguments: dict) -> bool:
        return name in names and isinstance(arguments, dict)

    return accept
