"""Running one generation request against the engine: errors mapped to HTTP, text collected."""

from __future__ import annotations

from aiohttp import web

from runtime.engine.client import (
    EngineError, ModelLoadFailed, RequestFailed, RequestHandle, RequestRefused, ServiceStopping,
    WorkerDied,
)
from runtime.engine.protocol import Engine, ErrorCode, UpstreamFailed
from runtime.server.app_keys import CONFIG, MANAGER
from runtime.server.errors import ApiError, bad_request
from runtime.server.embed_engines import WrongModelKind
from runtime.server.model_manager import DraftRefused, ModelDoesNotFit, ModelLoadTimeout, NoRoom
from runtime.server.model_refs import ModelPathRefused
from runtime.server.schemas import GenerationRequest
from runtime.server.validation import token_ids
from runtime.server.tool_calls import plan_output
from runtime.store.embedded import EmbeddedModelMissing
from runtime.store.gguf_file import InvalidModelFile
from runtime.store.resolve import UnknownModel


def engine_error(e: Exception) -> ApiError:
    """The HTTP error for an engine-side failure."""
    if isinstance(e, UpstreamFailed):
        kind = "server_error" if e.status >= 500 else ("rate_limit_error" if e.status == 429 else "invalid_request_error")
        return ApiError(e.status, str(e), type=kind,
                        code=e.code.value if e.code else None,
                        headers={"Retry-After": str(e.retry_after)} if e.retry_after is not None else None)
    if isinstance(e, RequestFailed):
        return ApiError(500, str(e), type="server_error", code=e.code or "request_failed")
    if isinstance(e, ServiceStopping):
        return ApiError(503, str(e), type="server_error", code="shutting_down")
    if isinstance(e, RequestRefused):
        return ApiError(400, str(e), code=e.code.value if e.code else None)
    if isinstance(e, RequestFailed):
        code = e.code.value if e.code else None
        if e.code is ErrorCode.INVALID_TOKEN:
            return ApiError(400, str(e), code=code)
        return ApiError(500, str(e), type="server_error", code=code)
    if isinstance(e, WorkerDied):
        return ApiError(503, f"{e}; the next request restarts it", type="server_error", code="engine_stopped")
    if isinstance(e, DraftRefused):
        return ApiError(400, str(e), param="draft", code="draft_refused")
    if isinstance(e, ModelLoadTimeout):
        return ApiError(504, str(e), type="server_error", param="model", code="model_load_timeout")
    if isinstance(e, NoRoom):
        return ApiError(503, str(e), type="server_error", code="model_busy",
                        headers={"Retry-After": str(e.retry_after)})
    if isinstance(e, ModelDoesNotFit):
        return ApiError(400, str(e), param="model", code="model_does_not_fit")
    if isinstance(e, ModelLoadFailed):
        return ApiError(500, f"the model could not be loaded: {e}", type="server_error", code="model_load_failed")
    raise e


async def start_generation(request: web.Request, req: GenerationRequest) -> tuple[Engine, list[RequestHandle]]:
    """Pick (a resident one, or load, or restart) the engine and submit; raise ``ApiError`` on failure.

    Nothing is awaited between getting the engine and submitting to it, so the router cannot
    unload it in between (an engine with a request in flight is never unloaded for room)."""
    manager = request.app[MANAGER]
    limit = request.app[CONFIG].security.max_tokens_limit
    if req.params.max_tokens is not None and req.params.max_tokens > limit:
        raise bad_request(f"'max_tokens' must be at most {limit} on this server, got {req.params.max_tokens}",
                          req.extra.get("max_tokens_param", "max_tokens"))
    try:
        engine = await manager.engine_for(req.model, req.extra.get("num_ctx"), req.keep_alive)
    except Exception as e:
        raise model_error(e) from None
    loaded = engine.loaded
    if req.tokens is not None and loaded is not None:
        token_ids(req.tokens, "prompt", loaded.info.get("n_vocab"))
    req.extra["output"] = plan_output(req, (loaded.info or {}).get("chat_template") if loaded else None)
    if req.params.max_tokens is None and loaded is not None and limit < loaded.max_request_tokens:
        req.params.max_tokens = limit  # the limit bounds replies that did not ask for a length too
    try:
        handles = await engine.submit(req.params, prompt=req.prompt, messages=req.messages, tokens=req.tokens,
                                      n=req.n, constraint=req.constraint, template_vars=template_vars(req))
    except (RequestRefused, WorkerDied, UpstreamFailed) as e:
        raise engine_error(e) from None
    manager.requests_served += 1
    return engine, handles


async def count_prompt_tokens(request: web.Request, req: GenerationRequest) -> int:
    """The request's prompt length in the model's tokens (loading the model if needed); nothing is generated."""
    try:
        engine = await request.app[MANAGER].engine_for(req.model, None, req.keep_alive)
    except Exception as e:
        raise model_error(e) from None
    loaded = engine.loaded
    if loaded is not None:  # tools described in the prompt, earlier calls in the model's markup
        plan_output(req, (loaded.info or {}).get("chat_template"))
    try:
        return await engine.count_tokens(prompt=req.prompt, messages=req.messages)
    except (RequestRefused, WorkerDied, UpstreamFailed) as e:
        raise engine_error(e) from None


def template_vars(req: GenerationRequest) -> dict | None:
    """Extra chat-template variables: the tools, and thinking on or off."""
    out: dict = {}
    if req.tools and req.tool_choice != "none" and req.extra.get("template_tools"):
        out["tools"] = req.tools
        if req.tool_choice not in (None, "auto"):  # required or a named function: a remote engine passes it on
            out["tool_choice"] = req.tool_choice
    if req.think is not None:
        out["enable_thinking"] = req.think
    if req.reasoning_effort is not None:
        out["reasoning_effort"] = req.reasoning_effort
    return out or None


def model_error(e: Exception) -> ApiError:
    """The HTTP error for a ``model`` that cannot be used (re-raises anything else)."""
    if isinstance(e, ModelPathRefused):
        return ApiError(403, str(e), param="model", code="model_path_refused")
    if isinstance(e, UnknownModel):
        return ApiError(404, str(e), param="model", code="model_not_found")
    if isinstance(e, WrongModelKind):
        return ApiError(400, str(e), param="model", code="model_not_supported")
    if isinstance(e, (InvalidModelFile, EmbeddedModelMissing)):
        return ApiError(400, str(e), param="model", code="invalid_model")
    if isinstance(e, ModelLoadFailed):
        return engine_error(e)
    raise e


def usage(prompt_tokens: int, completion_tokens: int, last=None) -> dict:
    """The usage object; ``last``: the request's final ``RequestOutput`` (cached prompt tokens,
    speculative decoding counts), a number of cached prompt tokens, or None."""
    cached = last if isinstance(last, int) else (last.cached_tokens if last is not None else 0)
    body = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached},
    }
    if last is not None and not isinstance(last, int) and last.drafted:
        body["speculative"] = {"drafted": last.drafted, "accepted": last.accepted,
                               "acceptance_rate": round(last.accepted / last.drafted, 4)}
    return body


class Run:
    """One submitted request read as text pieces, for the wire formats that serve one choice
    (Anthropic Messages, Responses): outputs that queued up arrive merged, and the final one's
    counters (finish reason, cached prompt tokens, the stop string that hit) are kept."""

    def __init__(self, handle: RequestHandle) -> None:
        self.handle = handle
        self.parts: list[str] = []
        self.completion_tokens = 0
        self.finish: str | None = None
        self.cached_tokens = 0
        self.stop_sequence: str | None = None
        self.calls: list[dict] = []  # the tool calls parsed from the text (``reply_events``)

    @property
    def prompt_tokens(self) -> int:
        return self.handle.prompt_tokens

    @property
    def text(self) -> str:
        return "".join(self.parts)

    async def pieces(self):
        """Text as it comes (never empty); engine errors propagate as ``EngineError``."""
        async for out in self.handle:
            outs = [out, *self.handle.ready()]
            text = "".join(o.text for o in outs)
            self.completion_tokens += sum(o.n_tokens for o in outs)
            last = outs[-1]
            if last.finish_reason is not None:
                self.finish, self.cached_tokens, self.stop_sequence = (
                    last.finish_reason, last.cached_tokens, last.stop_sequence)
            if text:
                self.parts.append(text)
                yield text

    async def collect(self) -> str:
        """The whole text; an engine error becomes the API error."""
        try:
            async for _ in self.pieces():
                pass
        except EngineError as e:
            raise engine_error(e) from None
        return self.text
