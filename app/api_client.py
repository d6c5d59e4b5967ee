"""The one HTTP client of the app: every call to the service's API goes through here."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import aiohttp

from app.errors import ApiProblem, NotHearth, ServiceSlow, ServiceUnreachable, StreamCut
from runtime import identity

log = logging.getLogger("hearth.app")


class ApiClient:
    """Wraps one ``aiohttp.ClientSession``; raises ``ApiProblem`` subclasses with the service's message."""

    def __init__(self, base_url: str, api_key: str | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        #: the stored key: sent only once the service has proved it holds it (``health``)
        self.api_key = api_key
        self.key_trusted = False
        self._session: aiohttp.ClientSession | None = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, sock_connect=5))
        return self._session

    def _headers(self) -> dict[str, str] | None:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key and self.key_trusted else None

    async def _verify_identity(self) -> None:
        """Trust the service with the key only when it proves it holds the same key
        (``runtime/identity.py``); a service without a key, or another program, gets none."""
        if not self.api_key or self.key_trusted:
            return
        nonce = identity.new_nonce()
        try:
            answer = await self._request("GET", f"{identity.PATH}?nonce={nonce}", timeout=3.0)
        except ApiProblem:
            return  # an older service or another program: no proof, no key
        port = urlsplit(self.base_url).port or 80
        self.key_trusted = identity.proves(answer, self.api_key, port, nonce)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _request(self, method: str, path: str, *, json_body: dict | None = None,
                       timeout: float | None = 10.0, headers: dict[str, str] | None = None) -> dict:
        try:
            async with self.session.request(method, self.base_url + path, json=json_body,
                                            headers={**(self._headers() or {}), **(headers or {})},
                                            timeout=aiohttp.ClientTimeout(total=timeout)) as r:
                raw = await r.read()
                body = _json(raw)
                if r.status >= 400:
                    raise _problem(r.status, body, raw)
                if body is None:
                    raise ApiProblem(f"{path} answered with something that is not JSON", status=r.status)
                return body
        except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError) as e:  # none, or cut mid-answer
            log.debug("%s %s: %r", method, path, e)
            raise ServiceUnreachable(f"Nothing answers at {self.base_url}.") from None
        except TimeoutError:
            within = f" within {timeout:g} s" if timeout else ""
            raise ServiceSlow(f"{self.base_url} did not answer{within}.") from None

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
        if self.api_key and not self.key_trusted:
            await self._verify_identity()
            if self.key_trusted and "engine" not in body:  # the minimal answer: ask again with the key
                body = await self._request("GET", "/health", timeout=3.0)
        return body

    async def get(self, path: str, timeout: float | None = 10.0) -> dict:
        return await self._request("GET", path, timeout=timeout)

    async def post(self, path: str, body: dict | None = None, timeout: float | None = 30.0,
                   headers: dict[str, str] | None = None) -> dict:
        return await self._request("POST", path, json_body=body or {}, timeout=timeout, headers=headers)

    async def put(self, path: str, body: dict, timeout: float | None = 30.0,
                  headers: dict[str, str] | None = None) -> dict:
        return await self._request("PUT", path, json_body=body, timeout=timeout, headers=headers)

    async def delete(self, path: str, headers: dict[str, str] | None = None) -> dict:
        return await self._request("DELETE", path, headers=headers)

    async def events(self, method: str, path: str, body: dict | None = None,
                     until_done: bool = False) -> AsyncIterator[dict]:
        """Server-sent events: each ``data:`` payload decoded; ends at ``[DONE]``. A stream that
        closes before ``[DONE]`` (the service or its model stopped) raises ``StreamCut``, so a cut
        answer is never taken for a complete one; ``until_done=False`` accepts streams that have
        no end marker (the download events)."""
        try:
            async with self.session.request(method, self.base_url + path, json=body, headers=self._headers()) as r:
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
                if until_done:
                    raise StreamCut(f"The stream from {self.base_url} ended before the answer was complete.")
        except aiohttp.ClientConnectorError as e:  # never connected
            log.debug("%s %s: %r", method, path, e)
            raise ServiceUnreachable(f"Nothing answers at {self.base_url}.") from None
        except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError) as e:  # the service went mid-stream
            log.debug("%s %s: %r", method, path, e)
            raise ServiceUnreachable(f"The connection to {self.base_url} broke.") from None

    def chat_stream(self, body: dict) -> AsyncIterator[dict]:
        return self.events("POST", "/v1/chat/completions", {**body, "stream": True,
                                                          "stream_options": {"include_usage": True}},
                           until_done=True)


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
