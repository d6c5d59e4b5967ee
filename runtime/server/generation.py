"""Running one generation request against the engine: errors mapped to HTTP, text collected."""

from __future__ import annotations

from aiohttp import web

from runtime.engine.client import (
    EngineClient, ModelLoadFailed, RequestHandle, RequestRefused, WorkerDied,
)
from runtime.server.app_keys import MANAGER
from runtime.server.errors import ApiError
from runtime.server.model_manager import DraftRefused, ModelDoesNotFit
from runtime.server.schemas import GenerationRequest
from runtime.store.embedded import EmbeddedModelMissing
from runtime.store.gguf_file import InvalidModelFile
from runtime.store.resolve import UnknownModel


def engine_error(e: Exception) -> ApiError:
    """The HTTP error for an engine-side failure."""
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
    try:
        engine = await manager.engine_for(req.model)
    except UnknownModel as e:
        raise ApiError(404, str(e), param="model", code="model_not_found") from None
    except (InvalidModelFile, EmbeddedModelMissing) as e:
        raise ApiError(400, str(e), param="model", code="invalid_model") from None
    except ModelLoadFailed as e:
        raise engine_error(e) from None
    try:
        handles = await engine.submit(req.params, prompt=req.prompt, messages=req.messages, tokens=req.tokens,
                                      n=req.n)
    except (RequestRefused, WorkerDied) as e:
        raise engine_error(e) from None
    manager.requests_served += 1
    return engine, handles


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
