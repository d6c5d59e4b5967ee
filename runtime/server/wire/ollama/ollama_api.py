"""Ollama-compatible endpoints under /api/: chat, generate, tags, show, ps, version, pull, delete.

Generation goes through the same path as the OpenAI endpoints (``generation.start_generation``:
model choice, limits, keep-alive, engine errors); only the wire format differs: one JSON object
per line (``application/x-ndjson``), ``done: true`` on the last line with Ollama's counters
(durations in nanoseconds), and errors as ``{"error": "..."}`` (a line of its own mid-stream).
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field, replace

from aiohttp import web

from runtime import __version__
from runtime.config import DEFAULT_CTX
from runtime.engine.client import EngineError
from runtime.server.app_keys import CONFIG, MANAGER
from runtime.server.generate.error_table import api_error
from runtime.server.errors import ApiError
from runtime.server.generate.generation import model_error, start_generation
from runtime.server.generate.logprobs_api import chat_content
from runtime.server.models.local_models import delete_local, local_models
from runtime.server.timestamps import iso, now_iso
from runtime.server.wire.ollama.ollama_models import show as show_model, tag_entry
from runtime.server.wire.ollama.ollama_schemas import (
    OllamaRequest, engine_model, model_name, parse_ollama_chat, parse_ollama_generate,
)
from runtime.server.validation import read_json, read_parsed
from runtime.chat.events import ReasoningDelta, TextDelta, ToolCallArgsDelta, ToolCallEnd, ToolCallStart
from runtime.server.generate.reply import Reply
from runtime.server.models.residency import Resident
from runtime.store.registry import LocalModel

NDJSON = "application/x-ndjson"
#: the Ollama API release whose shapes these endpoints follow (clients check it for features)
OLLAMA_COMPAT_VERSION = "0.9.0"


def line(obj: dict) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


@dataclass(slots=True)
class _Timing:
    start: int = field(default_factory=time.perf_counter_ns)
    loaded: int = 0
    first: int = 0

    def stats(self, prompt_tokens: int, eval_count: int) -> dict:
        end = time.perf_counter_ns()
        first = self.first or end
        return {"total_duration": end - self.start, "load_duration": self.loaded - self.start,
                "prompt_eval_count": prompt_tokens, "prompt_eval_duration": first - self.loaded,
                "eval_count": eval_count, "eval_duration": end - first}


class _ChatShape:
    @staticmethod
    def piece(text: str) -> dict:
        return {"message": {"role": "assistant", "content": text}}


class _GenerateShape:
    @staticmethod
    def piece(text: str) -> dict:
        return {"response": text}


async def chat(request: web.Request) -> web.StreamResponse:
    return await _respond(request, await read_parsed(request, parse_ollama_chat), _ChatShape)


async def generate(request: web.Request) -> web.StreamResponse:
    return await _respond(request, await read_parsed(request, parse_ollama_generate), _GenerateShape)


async def _respond(request: web.Request, oreq: OllamaRequest, shape) -> web.StreamResponse:
    if oreq.gen is None:
        return await _load_or_unload(request, oreq, shape)
    timing = _Timing()
    gen = await start_generation(request, oreq.gen)
    timing.loaded = time.perf_counter_ns()
    # tool calls and thinking are parsed on /api/chat; /api/generate returns the raw text
    reply = gen.reply(parsed=shape is _ChatShape)
    head = {"model": oreq.name}
    try:
        if oreq.gen.stream:
            return await _stream(request, reply, head, shape, timing, oreq.gen.params.logprobs)
        return await _collect(reply, head, shape, timing, oreq.gen.params.logprobs)
    finally:
        reply.cancel()  # no-op once finished; frees the request's cells if the client left


def _final(head: dict, shape, text: str, finish: str | None, stats: dict) -> dict:
    return {**head, "created_at": now_iso(), **shape.piece(text), "done": True,
            "done_reason": finish or "stop", **stats}


def _calls(calls: list[dict]) -> list[dict]:
    """Ollama's ``tool_calls`` (arguments as objects)."""
    return [{"function": {"name": c["name"], "arguments": json.loads(c["arguments"])}} for c in calls]


async def _collect(reply: Reply, head: dict, shape, timing: _Timing, with_lp: bool) -> web.Response:
    try:
        async for _ in reply.chunks():
            if not timing.first:
                timing.first = time.perf_counter_ns()
    except EngineError as e:
        raise api_error(e) from None
    c = reply.choices[0]
    body = _final(head, shape, c.text, c.engine_finish, timing.stats(reply.prompt_tokens, c.n_tokens))
    if shape is _ChatShape:
        if c.reasoning:
            body["message"]["thinking"] = c.reasoning
        if c.calls:
            body["message"]["tool_calls"] = _calls(c.calls)
    if with_lp:
        body["logprobs"] = chat_content(c.logprobs)
    return web.json_response(body)


def _pieces(shape, events: list, args: dict[int, list]) -> list[dict]:
    """The fields of the lines for these events: text, thinking, and each call once it is complete."""
    out: list[dict] = []
    for e in events:
        if isinstance(e, TextDelta) and e.text:
            out.append(shape.piece(e.text))
        elif isinstance(e, ReasoningDelta) and e.text:
            out.append({"message": {"role": "assistant", "content": "", "thinking": e.text}})
        elif isinstance(e, ToolCallStart):
            args[e.index] = [e.name]
        elif isinstance(e, ToolCallArgsDelta):
            args[e.index].append(e.fragment)
        elif isinstance(e, ToolCallEnd):
            name, *fragments = args.pop(e.index)
            if not e.complete:  # cut inside its arguments: Ollama has no partial call to show
                continue
            call = {"name": name, "arguments": "".join(fragments)}
            out.append({"message": {"role": "assistant", "content": "", "tool_calls": _calls([call])}})
    return out


async def _stream(request: web.Request, reply: Reply, head: dict, shape,
                  timing: _Timing, with_lp: bool) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": NDJSON, "Cache-Control": "no-cache",
                                           "X-Accel-Buffering": "no"})
    await response.prepare(request)
    args: dict[int, list] = {}
    try:
        async for ch in reply.chunks():
            if not timing.first:
                timing.first = time.perf_counter_ns()
            pieces = _pieces(shape, ch.events, args)
            if with_lp and ch.logprobs and not pieces:
                pieces = [shape.piece("")]
            for k, piece in enumerate(pieces):
                fields = {**head, "created_at": now_iso(), **piece, "done": False}
                if with_lp and k == 0:
                    fields["logprobs"] = chat_content(ch.logprobs)
                await response.write(line(fields))
        c = reply.choices[0]
        await response.write(line(_final(head, shape, "", c.engine_finish,
                                         timing.stats(reply.prompt_tokens, c.n_tokens))))
    except EngineError as e:
        await response.write(line(api_error(e).ollama_body()))
    except (ConnectionResetError, asyncio.CancelledError):
        reply.cancel()
        raise
    await response.write_eof()
    return response


async def _load_or_unload(request: web.Request, oreq: OllamaRequest, shape) -> web.Response:
    """An empty prompt or message list loads the model; with ``keep_alive: 0`` it unloads it
    (at once when idle, else when its requests end)."""
    manager = request.app[MANAGER]
    ref = engine_model(oreq.name)
    if manager.remotes is not None and (manager.remotes.explicit(ref) or (
            manager.remotes.engine_for(ref) and not await _is_local(manager, ref))):
        # a remote model is always "loaded" here: its upstream decides what it keeps in memory
        return web.json_response({"model": oreq.name, "created_at": now_iso(), **shape.piece(""),
                                  "done": True, "done_reason": "unload" if oreq.keep_alive == 0 else "load"})
    try:
        model = await manager.resolve_async(ref)
        if oreq.keep_alive == 0:
            for r in manager.router.residents:
                if r.model_id == model.id:
                    r.touch(0.0, pin=False)
            await manager.unload(model.id, only_idle=True)
            reason = "unload"
        else:
            await manager.engine_for(ref, oreq.num_ctx, oreq.keep_alive)
            reason = "load"
    except Exception as e:
        raise model_error(e) from None
    return web.json_response({"model": oreq.name, "created_at": now_iso(), **shape.piece(""),
                              "done": True, "done_reason": reason})


async def _is_local(manager, ref: str) -> bool:
    try:
        await manager.resolve_async(ref)
    except Exception:  # unknown here (or refused): not a local model
        return False
    return True


async def _residents(request: web.Request) -> list[tuple[Resident, LocalModel]]:
    """Each resident engine that runs, with its model as the one listing has it."""
    listed = {m.id: m for m in await local_models(request.app)}
    return [(r, listed.get(r.model_id) or LocalModel(r.model_id, r.model_id, "file", r.path, 0))
            for r in request.app[MANAGER].router.residents if r.engine.alive]


async def _find(request: web.Request, name: str) -> LocalModel:
    """The local model ``name`` names, through the service's one resolver (in a thread: it
    reads headers)."""
    manager, ref = request.app[MANAGER], engine_model(name)
    m = next((m for m in await local_models(request.app) if m.id == ref), None)

    def blocking() -> LocalModel:
        resolved = manager.resolve(ref)
        if m is None:
            return LocalModel(resolved.id, resolved.path.name, "file", str(resolved.path), 0)
        return replace(m, path=str(resolved.path))

    try:
        return await asyncio.to_thread(blocking)
    except Exception as e:
        raise model_error(e) from None


async def tags(request: web.Request) -> web.Response:
    models = await local_models(request.app)
    entries = await asyncio.to_thread(lambda: [tag_entry(m) for m in models])
    from runtime.server.routes.remotes_api import remote_tag_entries

    entries += remote_tag_entries(request.app, {e["name"] for e in entries})
    return web.json_response({"models": entries})


async def show(request: web.Request) -> web.Response:
    body = await read_json(request)
    m = await _find(request, model_name(body))
    c = request.app[CONFIG]
    r = request.app[MANAGER].router.find(m.id)
    loaded = r.engine.loaded if r is not None and r.engine.alive else None
    num_ctx = loaded.max_request_tokens if loaded else c.engine.ctx
    if num_ctx is None:  # the default context, as a load would plan it
        plan = await request.app[MANAGER].plan(m)
        num_ctx = plan.ctx if plan is not None else DEFAULT_CTX
    params = {"num_ctx": num_ctx, "temperature": 0.8, "top_k": 40}
    shown = await asyncio.to_thread(show_model, m, params)
    caps = shown.get("capabilities")
    if isinstance(caps, list) and "completion" in caps and "tools" not in caps and shown.get("template"):
        # every chat model is served tool calls: a template without tools gets them described
        # in the prompt and parsed back (the fallback call shape of ``runtime.chat.contract``), so clients may offer it tools
        caps.append("tools")
    return web.json_response(shown)


async def ps(request: web.Request) -> web.Response:
    """Every resident model: its memory (the worker's resident set, else the planned bytes),
    the part on GPUs (planned), its context and when its keep-alive runs out."""
    from runtime.server.routes.models_api import rss

    out = []
    for r, m in await _residents(request):
        size = rss(r.engine.pid) or r.need.ram or m.size  # the same figure as /hearth/stats' rss_bytes
        vram = sum(r.need.gpus.values())
        expires = r.expires_at()
        entry = await asyncio.to_thread(tag_entry, m)  # reads the header: off the event loop
        entry.pop("modified_at")
        entry.update(size=size + vram, size_vram=vram,
                     expires_at=iso(expires) if expires else "9999-12-31T23:59:59Z",
                     context_length=r.engine.loaded.max_request_tokens if r.engine.loaded else r.ctx)
        out.append(entry)
    return web.json_response({"models": out})


async def version(request: web.Request) -> web.Response:
    return web.json_response({"version": OLLAMA_COMPAT_VERSION, "hearth": __version__})


def _progress(d: dict) -> list[dict]:
    """One Ollama progress line per file of a download (the store's event dictionary)."""
    out = []
    for f in d["files"]:
        digest = f"sha256:{f['sha256']}" if f.get("sha256") else f"etag:{f['etag']}"
        line_ = {"status": f"pulling {digest.split(':', 1)[1][:12]}", "digest": digest, "completed": f["done"]}
        if f.get("size") is not None:
            line_["total"] = f["size"]
        out.append(line_)
    return out


def _pull_error(d: dict) -> str:
    return d.get("error") or f"the download was {d['state']}"


async def pull(request: web.Request) -> web.StreamResponse:
    """Download a model through the store; progress in Ollama's shape (status, digest, total, completed).

    A model that ships with Hearth, or is already a local file, needs no download: ``success``.
    Leaving the stream does not stop the download (the store keeps it, as /hearth/downloads shows).
    """
    from runtime.server.routes.store_api import DOWNLOADS, store_error
    from runtime.store.pull_target import NothingToPull

    body = await read_json(request)
    name = model_name(body)
    stream = body.get("stream", True)
    if stream is not None and not isinstance(stream, bool):
        raise ApiError(400, "'stream' must be true or false", param="stream")
    stream = stream is not False
    ref = engine_model(name)
    downloads = request.app[DOWNLOADS]
    events = downloads.events()
    try:
        try:
            d = await downloads.pull(ref)
        except NothingToPull:
            await _find(request, name)  # a local file or embedded model: present (or a clear error)
            return await _pull_done(request, stream, [{"status": "pulling manifest"}])
        except Exception as e:
            raise store_error(e) from None
        if not stream:
            final = (await downloads.wait(d.id)).to_dict()
            if final["state"] != "completed":
                raise ApiError(502, _pull_error(final), type="server_error")
            return web.json_response({"status": "success"})
        response = web.StreamResponse(headers={"Content-Type": NDJSON, "Cache-Control": "no-cache"})
        await response.prepare(request)
        await response.write(line({"status": "pulling manifest"}))
        ended = False
        async for ev in events:
            if ev["id"] != d.id:
                continue
            for p in _progress(ev):
                await response.write(line(p))
            if ev["state"] == "completed":
                for status in ("verifying sha256 digest", "writing manifest", "success"):
                    await response.write(line({"status": status}))
                ended = True
                break
            if ev["state"] in ("failed", "cancelled"):
                await response.write(line({"error": _pull_error(ev)}))
                ended = True
                break
        if not ended:  # the download manager closed: the service is stopping
            await response.write(line({"error": "the service is shutting down; the download resumes when it "
                                                "starts again"}))
        await response.write_eof()
        return response
    finally:
        await events.aclose()


async def _pull_done(request: web.Request, stream: bool, before: list[dict]) -> web.StreamResponse:
    if not stream:
        return web.json_response({"status": "success"})
    response = web.StreamResponse(headers={"Content-Type": NDJSON})
    await response.prepare(request)
    for s in [*before, {"status": "success"}]:
        await response.write(line(s))
    await response.write_eof()
    return response


async def delete(request: web.Request) -> web.Response:
    """Delete a model under the service's one policy (``local_models.delete_local``)."""
    body = await read_json(request)
    await delete_local(request.app, engine_model(model_name(body)))
    return web.json_response({})


ROUTES = [
    ("POST", "/api/chat", chat),
    ("POST", "/api/generate", generate),
    ("GET", "/api/tags", tags),
    ("POST", "/api/show", show),
    ("GET", "/api/ps", ps),
    ("GET", "/api/version", version),
    ("POST", "/api/pull", pull),
    ("DELETE", "/api/delete", delete),
]
