"""API errors: OpenAI's format ``{"error": {"message", "type", "param", "code"}}`` everywhere,
except under ``/api/`` (the Ollama-compatible routes), where it is Ollama's ``{"error": "message"}``,
and under ``/v1/messages`` (Anthropic Messages), where it is Anthropic's
``{"type": "error", "error": {"type", "message"}}``."""

from __future__ import annotations

from aiohttp import web

OLLAMA_PREFIX = "/api/"
ANTHROPIC_PATH = "/v1/messages"
#: Anthropic's error types by HTTP status (its clients branch on them)
ANTHROPIC_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                   404: "not_found_error", 405: "invalid_request_error", 409: "invalid_request_error",
                   413: "request_too_large", 429: "rate_limit_error", 500: "api_error", 502: "api_error",
                   503: "overloaded_error", 529: "overloaded_error"}


def is_anthropic_path(path: str) -> bool:
    return path == ANTHROPIC_PATH or path.startswith(ANTHROPIC_PATH + "/")


class ApiError(Exception):
    def __init__(self, status: int, message: str, *, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None,
                 headers: dict[str, str] | None = None, anthropic_message: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code
        self.headers = headers or {}
        #: the message in the words Anthropic's clients act on (Claude Code compacts its
        #: conversation on "prompt is too long: N tokens > M maximum"), when they differ
        self.anthropic_message = anthropic_message

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def ollama_body(self) -> dict:
        return {"error": self.message}

    def anthropic_body(self) -> dict:
        kind = ANTHROPIC_TYPES.get(self.status, "api_error" if self.status >= 500 else "invalid_request_error")
        return {"type": "error", "error": {"type": kind, "message": self.anthropic_message or self.message}}

    def response(self, path: str = "") -> web.Response:
        if path.startswith(OLLAMA_PREFIX):
            body = self.ollama_body()
        elif is_anthropic_path(path):
            body = self.anthropic_body()
        else:
            body = self.body()
        return web.json_response(body, status=self.status, headers=self.headers)


def bad_request(message: str, param: str | None = None) -> ApiError:
    return ApiError(400, message, param=param)


def http_error(e: web.HTTPException) -> ApiError:
    """aiohttp's own errors (unknown route, wrong method, body too large) in the API's format."""
    message = e.reason or "error"
    if e.status == 404:
        message = "no such endpoint: see /openapi.json for the routes"
    elif e.status == 405:
        message = f"method not allowed here; allowed: {e.headers.get('Allow', '')}"
    elif e.status == 413:
        message = "the request body is too large"
    return ApiError(e.status, message, code=str(e.status), headers={k: v for k, v in e.headers.items()
                                                                     if k in ("Allow", "Retry-After")})
