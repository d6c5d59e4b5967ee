"""OpenAI-format errors: ``{"error": {"message", "type", "param", "code"}}``."""

from __future__ import annotations

from aiohttp import web


class ApiError(Exception):
    def __init__(self, status: int, message: str, *, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def response(self) -> web.Response:
        return web.json_response(self.body(), status=self.status)


def bad_request(message: str, param: str | None = None) -> ApiError:
    return ApiError(400, message, param=param)
