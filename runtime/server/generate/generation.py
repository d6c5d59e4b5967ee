"""Submitting one generation request to its engine (picked, loaded or restarted); its reply is
read through ``reply.Reply``, its errors mapped by ``error_table``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from aiohttp import web

from runtime.engine.client import RequestRefused, WorkerDied
from runtime.engine.messages import Owner
from runtime.engine.protocol import Engine, OutputStream, PromptCount, UpstreamFailed
from runtime.server.app_keys import CONFIG, MANAGER
from runtime.server.generate.error_table import api_error
from runtime.server.errors import ApiError
from runtime.server.media_budget import Held, media_held
from runtime.server.media_fetch import fetch_media, has_urls, refuse_unless_allowed
from runtime.server.generate.request import GenerationRequest, template_messages
from runtime.server.security import client_id
from runtime.server.validation import token_ids
from runtime.server.generate.reply import Reply
from runtime.server.generate.reply_headers import DROPPED_MESSAGES
from runtime.server.generate.tool_calls import OutputPlan, plan_output


#: the reasoning tokens each effort allows before the engine closes the thinking block
EFFORT_BUDGETS = {"minimal": 256, "low": 1024, "medium": 4096, "high": 16384}


def engine_error(e: Exception) -> ApiError:
    """The HTTP error for an engine-side failure (``error_table``)."""
    return api_error(e)


@dataclass(slots=True)
class Generation:
    """A submitted request: its engine, one handle per choice, and how its output is read."""

    engine: Engine
    handles: Sequence[OutputStream]
    plan: OutputPlan | None

    def reply(self, parsed: bool = True) -> Reply:
        """The reply pipeline over the handles (``parsed`` False: raw text, no tool calls or reasoning)."""
        return Reply(self.handles, self.plan if parsed else None)


async def start_generation(request: web.Request, req: GenerationRequest) -> Generation:
    """Pick (a resident one, or load, or restart) the engine and submit; raise ``ApiError`` on failure.

    Nothing is awaited between getting the engine and submitting to it, so the router cannot
    unload it in between (an engine with a request in flight is never unloaded for room).
    The media's estimated cost is held for the client until the engine has accepted the
    request, its media prepared (``media_budget``)."""
    with media_held(request, req.media) as held:
        return await _start_generation(request, req, held)


async def _start_generation(request: web.Request, req: GenerationRequest, held: Held) -> Generation:
    manager = request.app[MANAGER]
    limit = request.app[CONFIG].security.max_tokens_limit
    params = req.params
    allowed = request.app[CONFIG].security.fetch_media_urls
    refuse_unless_allowed(req.media, allowed)
    engine = await _engine(request, req, req.num_ctx)
    if has_urls(req.media):  # fetched once the model is known to read them (``media_fetch``); the
        # engine is then asked for again, so nothing is awaited between getting it and submitting
        req.media = await fetch_media(req.media or [], allowed, engine.loaded)
        held.update(req.media)  # the fetched images' cost, from their headers
        engine = await _engine(request, req, req.num_ctx)
    loaded = engine.loaded
    local = loaded is not None and bool(loaded.pid)
    if req.tokens is not None and loaded is not None:
        token_ids(req.tokens, "prompt", loaded.n_vocab)
    plan = await plan_output(req, loaded.contract if loaded else None, request)
    budget = req.reasoning_budget or EFFORT_BUDGETS.get(req.reasoning_effort or "")
    if plan is not None and plan.think is not None and budget and local:
        # a local engine closes the thinking block after the budget (a remote one gets the effort)
        params = replace(params, reasoning_budget=budget, think_markers=plan.think, in_reasoning=plan.in_reasoning)
    params = replace(params, max_tokens=reply_length(params.max_tokens, limit, loaded))
    try:
        handles = await engine.submit(params, prompt=req.prompt, messages=template_messages(req.messages),
                                      tokens=req.tokens, n=req.n, constraint=req.constraint,
                                      template_vars=template_vars(req, plan), media=req.media,
                                      tool_choice=req.tool_choice, overflow=req.overflow,
                                      owner=request_owner(request))
    except (RequestRefused, WorkerDied, UpstreamFailed) as e:
        raise engine_error(e) from None
    if handles and handles[0].dropped_messages:
        request[DROPPED_MESSAGES] = handles[0].dropped_messages  # (the reply's header says so)
    manager.requests_served += 1
    return Generation(engine, handles, plan)


def request_owner(request: web.Request) -> Owner:
    """Whose request it is, for the engine: its client (the queue's fair order), and the prefix
    cache it shares, which is that client's own where the service isolates clients
    (``SecurityConfig.cache_isolation``)."""
    who = client_id(request)
    return Owner(who, who if request.app[CONFIG].security.isolates_cache else "")


def reply_length(asked: int | None, limit: int, loaded) -> int | None:
    """The reply's length bound: what the request asked, at most the server's limit.

    Agents ask for more than they need (Claude Code and opencode send 32000): the reply is cut at
    the server's limit (and at the end of the context: the engine's bound, never a refusal), and
    its finish reason says ``length`` if it gets there. A local engine's reply without a length
    (Codex sends none) is bounded by the server's limit too; a remote engine's upstream applies
    its own bound, and a filled-in length could make it refuse a long prompt."""
    if asked is not None:
        return min(asked, limit)
    if loaded is not None and bool(loaded.pid) and limit < loaded.max_request_tokens:
        return limit
    return None


async def count_prompt_tokens(request: web.Request, req: GenerationRequest) -> PromptCount:
    """The request's prompt length in the model's tokens (loading the model if needed), after its
    context-overflow policy; nothing is generated (the media are prepared: their cost is held)."""
    with media_held(request, req.media) as held:
        return await _count_prompt_tokens(request, req, held)


async def _count_prompt_tokens(request: web.Request, req: GenerationRequest, held: Held) -> PromptCount:
    allowed = request.app[CONFIG].security.fetch_media_urls
    refuse_unless_allowed(req.media, allowed)
    engine = await _engine(request, req, None)
    if has_urls(req.media):
        req.media = await fetch_media(req.media or [], allowed, engine.loaded)
        held.update(req.media)
        engine = await _engine(request, req, None)
    loaded = engine.loaded
    if loaded is not None:  # tools described in the prompt, earlier calls in the model's markup
        await plan_output(req, loaded.contract, client=client_id(request))
    try:
        # the reply's room as a generation would leave it (the overflow policy keeps it free)
        max_tokens = reply_length(req.params.max_tokens, request.app[CONFIG].security.max_tokens_limit, loaded)
        return await engine.count_tokens(prompt=req.prompt, messages=template_messages(req.messages), media=req.media,
                                         overflow=req.overflow, max_tokens=max_tokens)
    except (RequestRefused, WorkerDied, UpstreamFailed) as e:
        raise engine_error(e) from None


async def _engine(request: web.Request, req: GenerationRequest, ctx: int | None) -> Engine:
    try:
        return await request.app[MANAGER].engine_for(req.model, ctx, req.keep_alive)
    except Exception as e:
        raise model_error(e) from None


def template_vars(req: GenerationRequest, plan: OutputPlan | None) -> dict | None:
    """Extra chat-template variables: the tools offered (for a template that renders them), and
    thinking on or off. The tool choice is no template's business: the grammar enforces it (a
    remote engine gets it with the submission)."""
    out: dict = {}
    if plan is not None and plan.tools and plan.native_tools:
        out["tools"] = plan.tools
    # thinking is on unless the request turns it off, as llama.cpp renders templates (and as the
    # model's contract was derived: a template that reads an unset switch as off would otherwise
    # close the block the parser expects open)
    out["enable_thinking"] = req.think is not False
    if req.reasoning_effort is not None:
        out["reasoning_effort"] = req.reasoning_effort
    return out or None


def model_error(e: Exception) -> ApiError:
    """The HTTP error for a ``model`` that cannot be used (``error_table``)."""
    return api_error(e)
