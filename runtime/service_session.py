"""A terminal command's way to the service: the one running on the port, or one started here.

``hearth run`` and ``hearth embed`` speak the same HTTP API as every client. They use the
service already running on the port if there is one (sending the stored API key only once
that service proves it holds it: ``runtime/identity.py``); otherwise they start an in-process
service on a free loopback port for as long as the command runs.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator

import aiohttp

from runtime import identity
from runtime.api_key import ENV_VAR, load_key
from runtime.config import ServeConfig, data_dir


async def _hearth_at(session: aiohttp.ClientSession, base: str) -> bool:
    try:
        async with session.get(f"{base}/health", timeout=aiohttp.ClientTimeout(total=1)) as r:
            return r.status == 200 and (await r.json()).get("service") == "hearth"
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return False


async def _auth_headers(session: aiohttp.ClientSession, base: str, port: int) -> dict[str, str]:
    """The stored key (or ``$HEARTH_API_KEY``) as a header, once the service proves it holds
    that key (``runtime/identity.py``): it is never sent to another program on the port."""
    key = os.environ.get(ENV_VAR) or load_key(data_dir())
    if not key:
        return {}
    nonce = identity.new_nonce()
    try:
        async with session.get(f"{base}{identity.PATH}", params={"nonce": nonce},
                               timeout=aiohttp.ClientTimeout(total=3)) as r:
            answer = await r.json() if r.status == 200 else None
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return {}
    return {"Authorization": f"Bearer {key}"} if identity.proves(answer, key, port, nonce) else {}


@contextlib.asynccontextmanager
async def service_session(port: int, model: str, start_site) -> AsyncIterator[tuple[aiohttp.ClientSession, str, dict]]:
    """``(session, base URL, headers)`` for the service on ``port``, or for one started now
    with ``start_site(config)`` (stopped when the block ends)."""
    runner = None
    async with aiohttp.ClientSession() as session:
        base = f"http://127.0.0.1:{port}"
        headers: dict[str, str] = {}
        if await _hearth_at(session, base):
            headers = await _auth_headers(session, base, port)
        else:
            _, runner, local_port = await start_site(ServeConfig(port=0, model=model, preload=False))
            base = f"http://127.0.0.1:{local_port}"
        try:
            yield session, base, headers
        finally:
            if runner is not None:
                await runner.cleanup()
