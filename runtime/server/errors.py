"""API errors: OpenAI's format ``{"error": {"message", "type", "param", "code"}}`` everywhere,
except under ``/api/`` (the Ollama-compatible routes), where it is Ollama's ``{"error": "message"}``."""

from __future__ import annotations

from aiohttp import web

OLLAMA_PREFIX = "/api/"


class ApiError(Exception):
    def __init__(self, status: int, message: str, *, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code
        self.headers = headers or {}

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def ollama_body(self) -> dict:
        return {"error": self.message}

    def response(self, path: str = "") -> web.Response:
        body = self.ollama_body() if path.startswith(OLLAMA_PREFIX) else self.body()
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
