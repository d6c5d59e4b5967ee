"""One table from what went wrong (an engine error, a model that cannot be used) to the HTTP
error every route answers with: status, type, code, the parameter it names.

Every wire format writes the resulting ``ApiError`` in its own shape (``errors.py``); a stream
that has begun writes it as its format's error frame. Anything not in the table is a bug and
propagates (the service's middleware answers 500 without internals).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from runtime.engine.client import ModelLoadFailed, RequestFailed, RequestRefused, ServiceStopping, WorkerDied
from runtime.engine.protocol import ErrorCode, UpstreamFailed
from runtime.server.models.embed_engines import WrongModelKind
from runtime.server.errors import ApiError
from runtime.server.models.model_manager import DraftRefused, ModelDoesNotFit, ModelLoadTimeout, NoRoom
from runtime.server.models.model_refs import ModelPathRefused
from runtime.store.embedded import EmbeddedModelMissing
from runtime.store.gguf_file import InvalidModelFile
from runtime.store.resolve import UnknownModel

#: engine codes that mean the caller's input was at fault (a token id, a grammar)
CALLER_CODES = frozenset({ErrorCode.INVALID_TOKEN, ErrorCode.CONSTRAINT_FAILED})


@dataclass(frozen=True, slots=True)
class Row:
    status: int
    type: str = "invalid_request_error"
    code: str | None = None
    param: str | None = None
    #: the message from the exception (default: ``str(e)``)
    message: Callable[[Exception], str] = str


def _upstream(e: Exception) -> ApiError:
    assert isinstance(e, UpstreamFailed)
    kind = "server_error" if e.status >= 500 else ("rate_limit_error" if e.status == 429 else "invalid_request_error")
    return ApiError(e.status, str(e), type=kind, code=e.code.value if e.code else None,
                    headers={"Retry-After": str(e.retry_after)} if e.retry_after is not None else None)


def _refused(e: Exception) -> ApiError:
    assert isinstance(e, RequestRefused)
    words = None
    if e.code is ErrorCode.CONTEXT_LENGTH_EXCEEDED and e.sizes is not None:
        words = f"prompt is too long: {e.sizes[0]} tokens > {e.sizes[1]} maximum ({e})"
    return ApiError(400, str(e), code=e.code.value if e.code else None, anthropic_message=words)


def _failed(e: Exception) -> ApiError:
    assert isinstance(e, RequestFailed)
    code = e.code.value if e.code else None
    if e.code in CALLER_CODES:
        return ApiError(400, str(e), code=code)
    return ApiError(500, str(e), type="server_error", code=code)


def _no_room(e: Exception) -> ApiError:
    assert isinstance(e, NoRoom)
    return ApiError(503, str(e), type="server_error", code="model_busy", headers={"Retry-After": str(e.retry_after)})


#: the order matters where classes derive from each other (a draft refusal is a load failure)
TABLE: list[tuple[type[Exception], Row | Callable[[Exception], ApiError]]] = [
    (UpstreamFailed, _upstream),
    (ServiceStopping, Row(503, "server_error", "shutting_down")),
    (RequestRefused, _refused),
    (RequestFailed, _failed),
    (WorkerDied, Row(503, "server_error", "engine_stopped", message=lambda e: f"{e}; the next request restarts it")),
    (ModelPathRefused, Row(403, code="model_path_refused", param="model")),
    (UnknownModel, Row(404, code="model_not_found", param="model")),
    (WrongModelKind, Row(400, code="model_not_supported", param="model")),
    (InvalidModelFile, Row(400, code="invalid_model", param="model")),
    (EmbeddedModelMissing, Row(400, code="invalid_model", param="model")),
    (DraftRefused, Row(400, code="draft_refused", param="draft")),
    (ModelLoadTimeout, Row(504, "server_error", "model_load_timeout", param="model")),
    (NoRoom, _no_room),
    (ModelDoesNotFit, Row(400, code="model_does_not_fit", param="model")),
    (ModelLoadFailed, Row(500, "server_error", "model_load_failed",
                          message=lambda e: f"the model could not be loaded: {e}")),
]


def api_error(e: Exception) -> ApiError:
    """The HTTP error for ``e``; re-raises what the table does not know (a bug, not a client's fault)."""
    for kind, row in TABLE:
        if isinstance(e, kind):
            if isinstance(row, Row):
                return ApiError(row.status, row.message(e), type=row.type, param=row.param, code=row.code)
            return row(e)
    raise e
