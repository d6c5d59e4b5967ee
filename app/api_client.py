"""The one HTTP client of the app: every call to the service's API goes through here."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import aiohttp

from app.errors import ApiProblem, NotHearth, ServiceUnreachable


class ApiClient:
    """Wraps one ``aiohttp.ClientSession``; raises ``ApiProblem`` subclasses with the service's message."""

    def __init__(self, base_url: str, api_key: str | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key  # the service's key when one is stored: sent with every call
        self._session: aiohttp.ClientSession | None = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else None
            self._session = aiohttp.ClientSession(headers=headers,
                                                  timeout=aiohttp.ClientTimeout(total=None, sock_connect=5))
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _request(self, method: str, path: str, *, json_body: dict | None = None,
                       timeout: float | None = 10.0, headers: dict[str, str] | None = None) -> dict:
        try:
            async with self.session.request(method, self.base_url + path, json=json_body, headers=headers,
                                            timeout=aiohttp.ClientTimeout(total=timeout)) as r:
                raw = await r.read()
                body = _json(raw)
                if r.status >= 400:
                    raise _problem(r.status, body, raw)
                if body is None:
                    raise ApiProblem(f"{path} answered with something that is not JSON", status=r.status)
                return body
        except aiohttp.ClientConnectionError as e:
            raise ServiceUnreachable(f"No answer at {self.base_url} ({e.__class__.__name__}).") from None
        except TimeoutError:
            raise ServiceUnreachable(f"{self.base_url} did not answer in time.") from None

    async def health(self) -> dict:
        """/health of a Hearth service; ``NotHearth`` when something else answers there."""
        try:
            body = await self._request("GET", "/health", timeout=3.0)
        except ServiceUnreachable:
            raise
        except ApiProblem as e:
            raise NotHearth(f"It answered /health with HTTP {e.status}.") from None
        if body.get("service") != "hearth":
            raise NotHearth("It answered /health, but not as Hearth does.")
        return body

    async def get(self, path: str, timeout: float | None = 10.0) -> dict:
        return await self._request("GET", path, timeout=timeout)

    async def post(self, path: str, body: dict | None = None, timeout: float | None = 30.0,
                   headers: dict[str, str] | None = None) -> dict:
        return await self._request("POST", path, json_body=body or {}, timeout=timeout, headers=headers)

    async def delete(self, path: str) -> dict:
        return await self._request("DELETE", path)

    async def events(self, method: str, path: str, body: dict | None = None) -> AsyncIterator[dict]:
        """Server-sent events: each ``data:`` payload decoded; ends at ``[DONE]`` or when the stream closes."""
        try:
            async with self.session.request(method, self.base_url + path, json=body) as r:
                if r.status >= 400:
                    raw = await r.read()
                    raise _problem(r.status, _json(raw), raw)
                async for line in r.content:
                    if not line.startswith(b"data:"):
                        continue
                    data = line[5:].strip()
                    if data == b"[DONE]":
                        return
                    payload = _json(data)
                    if isinstance(payload, dict) and isinstance(payload.get("error"), dict):
                        raise _problem(500, payload, data)
                    if payload is not None:
                        yield payload
        except aiohttp.ClientConnectionError as e:
            raise ServiceUnreachable(f"The connection to {self.base_url} broke ({e.__class__.__name__}).") from None

    def chat_stream(self, body: dict) -> AsyncIterator[dict]:
        return self.events("POST", "/v1/chat/completions", {**body, "stream": True,
                                                          "stream_options": {"include_usage": True}})


def _json(raw: bytes):
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None


def _problem(status: int, body, raw: bytes) -> ApiProblem:
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        err = body["error"]
        return ApiProblem(str(err.get("message") or "error"), status=status, code=err.get("code"))
    text = raw[:200].decode(errors="replace").strip()
    return ApiProblem(f"HTTP {status}: {text}" if text else f"HTTP {status}", status=status)
