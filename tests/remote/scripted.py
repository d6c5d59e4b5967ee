"""An OpenAI-compatible upstream whose every answer is scripted: a success, an error status, a
stream cut or hung mid-way, garbage. It records each request (headers, body) and whether the
client left before the answer was done."""

from __future__ import annotations

import asyncio
import json

from aiohttp import web


def chunk(text: str | None = None, finish: str | None = None, chat: bool = True, logprobs: bool = False) -> bytes:
    choice = ({"index": 0, "delta": {"content": text} if text else {}, "finish_reason": finish} if chat
              else {"index": 0, "text": text or "", "finish_reason": finish})
    if logprobs and text and not chat:  # the legacy completions lists, as OpenAI servers send them
        choice["logprobs"] = {"tokens": [text], "token_logprobs": [-0.25], "top_logprobs": [{text: -0.25}],
                              "text_offset": [0]}
    obj = {"id": "x", "object": "chat.completion.chunk", "model": "m1", "choices": [choice]}
    return f"data: {json.dumps(obj)}\n\n".encode()


class ScriptedUpstream:
    def __init__(self, mode: str, models: list[str]) -> None:
        self.mode, self.models = mode, models
        self.requests: list[dict] = []
        self.disconnected = asyncio.Event()
        self.server = None

    @property
    def url(self) -> str:
        return str(self.server.make_url("")).rstrip("/")

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/v1/models", self.list_models)
        app.router.add_post("/v1/chat/completions", self.generate)
        app.router.add_post("/v1/completions", self.generate)
        return app

    async def list_models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": m, "object": "model", "max_model_len": 2048}
                                                              for m in self.models]})

    async def tool_call(self, request: web.Request) -> web.StreamResponse:
        """A call of the first tool, streamed as OpenAI servers do: name first, then the arguments
        in fragments, then finish_reason tool_calls."""
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        pieces = [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": ""}},
                  {"index": 0, "function": {"arguments": '{"city": '}}, {"index": 0, "function": {"arguments": '"Paris"}'}}]
        for p in pieces:
            obj = {"id": "x", "choices": [{"index": 0, "delta": {"tool_calls": [p]}, "finish_reason": None}]}
            await response.write(f"data: {json.dumps(obj)}\n\n".encode())
        end = {"id": "x", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}
        await response.write(f"data: {json.dumps(end)}\n\ndata: [DONE]\n\n".encode())
        return response

    async def reasoning(self, request: web.Request) -> web.StreamResponse:
        """Reasoning apart from the answer, as vLLM and llama.cpp's server stream it."""
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for delta in ({"reasoning_content": "Let me"}, {"reasoning_content": " think."}, {"content": "Paris"},
                      {"content": "."}):
            obj = {"id": "x", "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
            await response.write(f"data: {json.dumps(obj)}\n\n".encode())
        end = {"id": "x", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
        await response.write(f"data: {json.dumps(end)}\n\ndata: [DONE]\n\n".encode())
        return response

    async def generate(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append({"headers": dict(request.headers), "body": body, "path": request.path})
        chat = request.path.endswith("/chat/completions")
        mode = self.mode
        lp = bool(body.get("logprobs"))
        if mode == "401":
            return web.json_response({"error": {"message": "invalid api key", "type": "auth"}}, status=401)
        if mode == "429":
            return web.json_response({"error": {"message": "slow down"}}, status=429, headers={"Retry-After": "7"})
        if mode == "503":
            return web.json_response({"error": {"message": "overloaded"}}, status=503)
        if mode == "tools" and body.get("tools"):
            return await self.tool_call(request)
        if mode == "reasoning":
            return await self.reasoning(request)
        if mode == "hang_first":
            await asyncio.sleep(30)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        try:
            if mode == "malformed":
                await response.write(b"data: {not json\n\n")
                await asyncio.sleep(30)
            await response.write(chunk("Hello", chat=chat, logprobs=lp))
            await response.write(chunk(" world", chat=chat, logprobs=lp))
            if mode == "cut":
                request.transport.close()  # the connection drops mid-stream
                return response
            if mode in ("hang_mid", "slow"):
                for i in range(300 if mode == "slow" else 1):
                    await asyncio.sleep(0.1 if mode == "slow" else 30)
                    await response.write(chunk(f" {i}", chat=chat))
            await response.write(chunk("!", "stop", chat=chat, logprobs=lp))
            usage = {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}
            await response.write(f"data: {json.dumps({'id': 'x', 'choices': [], 'usage': usage})}\n\n".encode())
            await response.write(b"data: [DONE]\n\n")
        except (ConnectionResetError, asyncio.CancelledError):
            self.disconnected.set()
            raise
        return response
