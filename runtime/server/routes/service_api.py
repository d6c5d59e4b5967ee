"""Hearth's own endpoints: /health, /hearth/identity and /hearth/stats."""

from __future__ import annotations

import asyncio
from dataclasses import asdict

from aiohttp import web

from runtime import __version__, identity
from runtime.api_key import is_loopback, key_matches
from runtime.server.app_keys import CONFIG, MANAGER
from runtime.server.errors import bad_request
from runtime.server.security import LIMITER, host_is_loopback


def _detailed(request: web.Request) -> bool:
    """Whether /health may say more than ok / not ok: to the API key's holder, or on a loopback
    bind asked through a loopback Host (another machine, or a page through DNS rebinding, sees
    no model paths, pids or error text)."""
    config = request.app[CONFIG].security
    if config.api_key and key_matches(request.headers.get("Authorization"), config.api_key):
        return True
    return is_loopback(config.host) and host_is_loopback(request)


async def root(request: web.Request) -> web.Response:
    """``GET /`` (and ``HEAD /``): clients probe the base URL before they send anything
    (Claude Code sends ``HEAD /``; Ollama's clients expect ``GET /`` to answer 200)."""
    return web.Response(text="Hearth is running")


async def health(request: web.Request) -> web.Response:
    """200 while the service runs; ``engine.state`` says whether the most recently used
    model's worker is up or crashed (idle: none loaded), ``engine.models`` every resident one."""
    status = request.app[MANAGER].status()
    if not _detailed(request):
        return web.json_response({"status": "error" if status["state"] == "crashed" else "ok", "service": "hearth"})
    from runtime.server.routes.remotes_api import health_summary

    body = {"status": "ok", "service": "hearth", "version": __version__, "engine": status,
            "remotes": health_summary(request.app), "clients": request.app[LIMITER].stats()}
    rpc = request.app[CONFIG].engine.rpc
    if rpc:  # the RPC workers lending memory (hearth serve --rpc) and the models using them
        from runtime.hardware.rpc_workers import worker_states

        users: dict[str, list[str]] = {}
        for r in request.app[MANAGER].router.residents:
            if r.engine.alive:
                for endpoint in getattr(r.plan, "rpc", ()):
                    users.setdefault(endpoint, []).append(r.model_id)
        body["rpc"] = await asyncio.to_thread(worker_states, rpc, users)
    return web.json_response(body)


async def identity_proof(request: web.Request) -> web.Response:
    """``identity.proof`` of the service's key for the client's nonce (null without a key)."""
    nonce = request.query.get("nonce", "")
    if not identity.NONCE.fullmatch(nonce):
        raise bad_request("'nonce' must be 16 to 128 characters of A-Z, a-z, 0-9, '_' and '-'", "nonce")
    key = request.app[CONFIG].security.api_key
    sockname = request.transport.get_extra_info("sockname") if request.transport else None
    port = sockname[1] if sockname else request.app[CONFIG].port
    return web.json_response({"service": "hearth", "proof": identity.proof(key, port, nonce) if key else None})


async def stats(request: web.Request) -> web.Response:
    """Per resident model: its description (``models_api.describe``), engine counters and
    ``decode_limit_tps``, the memory wall of its placement (the fit plan made when it loaded:
    bytes a token reads over this machine's bandwidth; null without a plan or a measured
    bandwidth); the loads and unloads of every model since the service started; the budget and
    its use."""
    from runtime.hardware.fit import FitPlan
    from runtime.server.routes.models_api import describe

    manager = request.app[MANAGER]
    router = manager.router
    models = []
    for r in router.residents:
        engine = r.engine
        if not engine.alive:
            continue
        entry = describe(r, router.loads[r.model_id])
        if hasattr(engine, "counters"):  # an embedding worker
            entry["embeddings"] = engine.counters()
        else:  # a generating model: what its placement can decode at most
            limit = r.plan.decode_limit_tps if isinstance(r.plan, FitPlan) else None
            entry["decode_limit_tps"] = round(limit, 1) if limit is not None else None
        s = engine.stats
        if s is not None:
            d = asdict(s)
            kv = {"cells_used": d["kv_cells_used"], "capacity": d["kv_capacity"],
                  "preemptions": d["preemptions"]}
            if d["kv"] is not None:
                kv.update({k: v for k, v in d["kv"].items()})
            entry.update(running=d["running"], waiting=d["waiting"], tokens_generated=d["tokens_generated"],
                         requests_finished=d["requests_finished"], preemptions=d["preemptions"], kv=kv)
            if d.get("spec") is not None:
                entry["spec"] = d["spec"]
        models.append(entry)
    budget = await manager.budget() if router.residents or router.loads else None
    return web.json_response({"requests_served": manager.requests_served, "models": models,
                              "loads": dict(router.loads), "unloads": dict(router.unloads),
                              "loading": router.loading[0] if router.loading else None,
                              "budget": budget.to_dict() if budget else None,
                              "planned": router.used().to_dict()})


async def unload(request: web.Request) -> web.Response:
    """Unload every model (pinned ones too; requests in flight end with an error); 200 with
    the first unloaded id (or null) and all of them."""
    ids = await request.app[MANAGER].unload()
    return web.json_response({"unloaded": ids[0] if ids else None, "models": ids})
