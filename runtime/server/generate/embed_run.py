"""Running one embedding or rerank request: the engine for the model, errors mapped to HTTP."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from runtime.engine.protocol import EncoderEngine, ErrorCode, RequestRefused, WorkerDied
from runtime.server.app_keys import MANAGER
from runtime.server.errors import ApiError

if TYPE_CHECKING:  # numpy loads with the first embedding request, not with the service
    import numpy as np

#: the embedding model a request that names none gets
DEFAULT_EMBEDDING_MODEL = "minilm-l6"
#: inputs one request may carry at most
MAX_INPUTS = 2048


async def encoder_for(request: web.Request, ref: str, task: str, keep_alive: float | None = None) -> EncoderEngine:
    """The resident (or now loaded) encoder engine for ``ref``, refusing models of another task."""
    from runtime.server.generate.generation import model_error

    try:
        engine = await request.app[MANAGER].engine_for(ref, None, keep_alive, task=task)
    except Exception as e:
        raise model_error(e) from None
    if not isinstance(engine, EncoderEngine):  # a model of that task behind an engine that cannot encode
        raise ApiError(400, f"model {ref!r} is served by an engine that cannot {task}", param="model",
                       code="model_not_supported")
    return engine


async def run_embed(engine, texts=None, rows=None, truncate: bool = True, param: str = "input") -> tuple[np.ndarray, int]:
    return await _call(engine.embed(texts=texts, token_rows=rows, truncate=truncate), param)


async def run_score(engine, query: str, documents: list[str], truncate: bool = True) -> tuple[np.ndarray, int]:
    return await _call(engine.score(query, documents, truncate=truncate), "documents")


async def _call(coro, param: str):
    from runtime.server.generate.generation import engine_error

    try:
        return await coro
    except RequestRefused as e:
        code = e.code.value if e.code else None
        if e.code is ErrorCode.REQUEST_FAILED:
            raise ApiError(500, str(e), type="server_error", code=code) from None
        raise ApiError(400, str(e), param=param, code=code) from None
    except WorkerDied as e:
        raise engine_error(e) from None


def shorten(vectors: np.ndarray, dimensions: int | None, info: dict, model_id: str, param: str = "dimensions") -> np.ndarray:
    """Matryoshka truncation to ``dimensions`` (renormalised), where the model allows it."""
    full = vectors.shape[1] if vectors.ndim == 2 else info.get("dimensions")
    if dimensions is None or dimensions == full:
        return vectors
    if not info.get("matryoshka"):
        raise ApiError(400, f"'{param}': model {model_id} makes {full}-dimensional vectors and was not trained "
                            "for shorter ones (no Matryoshka representation); leave it out", param=param)
    if full is None or not 1 <= dimensions <= full:
        raise ApiError(400, f"'{param}' must be between 1 and {full} for model {model_id}", param=param)
    cut = vectors[:, :dimensions]
    import numpy as np

    return cut / np.maximum(np.linalg.norm(cut, axis=1, keepdims=True), 1e-12)
