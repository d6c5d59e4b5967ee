"""Tool calling and reasoning on the request side: prepare the conversation for the model's
template, and choose the output parser and grammar.

The request's ``tools`` (``ToolSpec``) and ``tool_choice`` (``runtime.tool_choice.ToolChoice``) were
read and checked by its wire format's parser (``tool_checks``); the templates, the output parser
and the grammar compiler read tools as OpenAI function tools, made here (``ToolSpec.openai``).

Once the engine (and so the model's output contract, ``runtime.chat.contract``) is known,
:func:`plan_output` has the constraint compiled in the model's own call syntax (``required`` /
named: the call grammar from the first token; ``auto``: the same grammar lazily from the syntax's
trigger, or, beside a JSON response format, one grammar from the first token: calls or an answer
that matches the format; none where the trigger also starts the answer's header, as in
Functionary's and Muse's recipient frames; ``none``: no tools are shown to the model), and rewrites the messages
for templates that do not render tools themselves (tool descriptions in the system message,
earlier calls in the fallback JSON shape, tool results as user turns).

Tool schemas are compiled in the constraint compiler's helper process; one the grammar cannot
enforce is relaxed (``tool_relax``) rather than refused, and the reply's
``x-hearth-relaxed-tools`` header names it.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, replace

from aiohttp import web

from runtime.chat.call_text import call_text
from runtime.chat.contract import FALLBACK_CALLS, CallSyntax, OutputContract
from runtime.server.generate.call_grammar import trigger_is_ambiguous
from runtime.server.generate.constraint_jobs import CompileJob, ToolsJob
from runtime.server.errors import bad_request
from runtime.server.generate.request import GenerationRequest, Message, ToolSpec
from runtime.server.generate.reply_headers import RELAXED_TOOLS
from runtime.server.generate.structured_output import compile_job
from runtime.server.security import client_id

log = logging.getLogger("hearth.server")


@dataclass(slots=True)
class OutputPlan:
    """How the service reads a reply: the model's contract, the tools offered (none: calls are
    not read) and whether the prompt opened the thinking block."""

    contract: OutputContract
    tools: list[dict]  # OpenAI function tools, as the template and the output parser read them
    in_reasoning: bool = False
    #: the chat template renders the tools itself (they go to it as a template variable)
    native_tools: bool = False

    @property
    def think(self) -> tuple[str, str] | None:
        """The thinking markers (None: the model has none)."""
        r = self.contract.reasoning
        return (r.start, r.end) if r is not None else None


def plan_prompt(req: GenerationRequest, contract: OutputContract | None) -> OutputPlan | None:
    """The conversation shaped for a model with ``contract``, and how its reply is read: rewrites
    ``req.messages`` for a template that does not describe the tools or render calls. None: plain
    text (the fast path, and raw completions, whose client owns the format). Pure: no grammar is
    compiled (``plan_output`` does that too); ``hearth template`` shows what this gives."""
    contract = contract or OutputContract()
    if req.messages is None:
        return None
    r = contract.reasoning
    in_reasoning = r is not None and (r.opened if req.think is not False else r.opened_off)
    tools = offered_tools(req)
    # the model's own call syntax where its template renders calls (the tools described in the
    # system message where the template does not describe them); the fallback JSON shape otherwise
    syntax = contract.calls if contract.calls is not None else FALLBACK_CALLS
    native = contract.native_tools  # the template describes the tools itself
    rendered = contract.calls is not None and contract.renders_calls  # the template renders earlier calls
    if not tools:
        if not rendered and any(m.tool_calls or m.role == "tool" for m in req.messages):
            # earlier calls and results still reach a template that cannot render them
            req.messages = render_for(req.messages, syntax, [], native=False)
        return OutputPlan(contract, [], in_reasoning=in_reasoning) if r is not None else None
    shown = [t.openai() for t in tools]
    req.messages = render_for(req.messages, syntax, shown, native, calls_rendered=rendered)
    plan_contract = contract if contract.calls is not None else OutputContract(calls=FALLBACK_CALLS, reasoning=r)
    return OutputPlan(plan_contract, shown, in_reasoning=in_reasoning, native_tools=native)


def offered_tools(req: GenerationRequest) -> list[ToolSpec]:
    """The tools the model is shown (none when ``tool_choice`` is "none")."""
    return req.tools if req.tool_choice.kind != "none" else []


async def plan_output(req: GenerationRequest, contract: OutputContract | None,
                      request: web.Request | None = None, client: str | None = None) -> OutputPlan | None:
    """``plan_prompt``, and ``req.constraint`` compiled (a response format's, or the tool calls'
    in the model's call syntax). ``request``: where to note the relaxed tools for the reply's header.
    ``client``: who the compilation counts against (by default ``security.client_id(request)``)."""
    who = client if client is not None else client_id(request) if request is not None else ""
    contract = contract or OutputContract()
    answer = req.constraint if isinstance(req.constraint, CompileJob) else None
    choice = req.tool_choice
    tools = offered_tools(req)
    if req.messages is None or not tools:
        if answer is not None:
            req.constraint = (await compile_job(answer, who)).spec
        return plan_prompt(req, contract)
    if answer is not None and answer.answer_schema is None:
        raise bad_request(f"'{answer.param}' cannot be combined with 'tools' (a JSON response format can; or set "
                          "tool_choice to \"none\")", answer.param)
    if choice.kind == "auto" and answer is None and trigger_is_ambiguous(contract):
        return plan_prompt(req, contract)
    offered = [t for t in tools if t.name == choice.name] if choice.kind == "function" else tools
    # what the grammar needs of each tool (descriptions change nothing, and would split the cache)
    shapes = [ToolSpec(t.name, parameters=t.parameters).openai() for t in offered]
    syntax = contract.calls if contract.calls is not None else FALLBACK_CALLS
    job = ToolsJob(syntax, shapes, [t.param for t in offered],
                   parallel=req.parallel_tool_calls and choice.kind != "function",
                   # a required call ignores the response format: it is for the answer after the results
                   lazy=choice.kind == "auto" and answer is None, answer=answer if choice.kind == "auto" else None)
    result = await compile_job(job, who)
    if result.relaxed:
        log.info("tool schemas relaxed to what the grammar can enforce: %s", ", ".join(result.relaxed))
        if request is not None:
            request[RELAXED_TOOLS] = result.relaxed
    req.constraint = result.spec
    return plan_prompt(req, contract)


def render_for(messages: list[Message], syntax: CallSyntax, tools: list[dict], native: bool,
               calls_rendered: bool = False) -> list[Message]:
    """Messages for the template: the tools described in the system message with an example in
    ``syntax`` where it does not describe them itself (``native`` False); earlier calls and
    results as text where it does not render them (``calls_rendered`` False). Unchanged where it
    does both."""
    if native and calls_rendered:
        return messages
    out: list[Message] = []
    for m in messages:
        if calls_rendered:
            out.append(m)
        elif m.role == "assistant" and m.tool_calls:
            out.append(Message("assistant", m.content + call_text(syntax, [(c.name, c.arguments) for c in m.tool_calls])))
        elif m.role == "tool":
            name = f" {m.name}" if m.name else ""
            out.append(Message("user", f"<tool_response{name}>\n{m.content}\n</tool_response>"))
        else:
            out.append(Message(m.role, m.content))
    if not tools or native:
        return out
    prompt = system_prompt(syntax, tools)
    if out and out[0].role in ("system", "developer"):
        out[0] = replace(out[0], content=f"{out[0].content}\n\n{prompt}")
    else:
        out.insert(0, Message("system", prompt))
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
