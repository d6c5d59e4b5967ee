"""Running one generation request against the engine: errors mapped to HTTP, text collected."""

from __future__ import annotations

from aiohttp import web

from runtime.engine.client import (
    EngineClient, ModelLoadFailed, RequestFailed, RequestHandle, RequestRefused, ServiceStopping,
    WorkerDied,
)
from runtime.server.app_keys import CONFIG, MANAGER
from runtime.server.errors import ApiError, bad_request
from runtime.server.keep_alive import KEEP_ALIVE
from runtime.server.model_manager import DraftRefused, ModelDoesNotFit
from runtime.server.model_refs import ModelPathRefused
from runtime.server.schemas import GenerationRequest
from runtime.server.tool_calls import plan_output
from runtime.store.embedded import EmbeddedModelMissing
from runtime.store.gguf_file import InvalidModelFile
from runtime.store.resolve import UnknownModel


def engine_error(e: Exception) -> ApiError:
    """The HTTP error for an engine-side failure."""
    if isinstance(e, RequestFailed):
        return ApiError(500, str(e), type="server_error", code=e.code or "request_failed")
    if isinstance(e, ServiceStopping):
        return ApiError(503, str(e), type="server_error", code="shutting_down")
    if isinstance(e, RequestRefused):
        code = "context_length_exceeded" if "context" in str(e) else None
        return ApiError(400, str(e), code=code)
    if isinstance(e, WorkerDied):
        return ApiError(503, f"{e}; the next request restarts it", type="server_error", code="engine_stopped")
    if isinstance(e, DraftRefused):
        return ApiError(400, str(e), param="draft", code="draft_refused")
    if isinstance(e, ModelDoesNotFit):
        return ApiError(400, str(e), param="model", code="model_does_not_fit")
    if isinstance(e, ModelLoadFailed):
        return ApiError(500, f"the model could not be loaded: {e}", type="server_error", code="model_load_failed")
    raise e


async def start_generation(request: web.Request, req: GenerationRequest) -> tuple[EngineClient, list[RequestHandle]]:
    """Pick (load, swap or restart) the engine and submit; raise ``ApiError`` on failure."""
    manager = request.app[MANAGER]
    limit = request.app[CONFIG].max_tokens_limit
    if req.params.max_tokens is not None and req.params.max_tokens > limit:
        raise bad_request(f"'max_tokens' must be at most {limit} on this server, got {req.params.max_tokens}",
                          req.extra.get("max_tokens_param", "max_tokens"))
    keep_alive = request.app[KEEP_ALIVE]
    keep_alive.touch(req.keep_alive)
    try:
        engine = await manager.engine_for(req.model)
    except Exception as e:
        raise model_error(e) from None
    keep_alive.touch(req.keep_alive)
    loaded = engine.loaded
    req.extra["output"] = plan_output(req, (loaded.info or {}).get("chat_template") if loaded else None)
    if req.params.max_tokens is None and loaded is not None and limit < loaded.max_request_tokens:
        req.params.max_tokens = limit  # the limit bounds replies that did not ask for a length too
    try:
        handles = await engine.submit(req.params, prompt=req.prompt, messages=req.messages, tokens=req.tokens,
                                      n=req.n, constraint=req.constraint, template_vars=template_vars(req))
    except (RequestRefused, WorkerDied) as e:
        raise engine_error(e) from None
    manager.requests_served += 1
    return engine, handles


def template_vars(req: GenerationRequest) -> dict | None:
    """Extra chat-template variables: the tools, and thinking on or off."""
    out: dict = {}
    if req.tools and req.tool_choice != "none" and req.extra.get("template_tools"):
        out["tools"] = req.tools
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
