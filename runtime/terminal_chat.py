"""``hearth run``: stream a chat from the terminal, through the same HTTP API as every client.

It uses the service already running on the port if there is one; otherwise it starts an
in-process service on a free loopback port for the duration of the chat.
"""

from __future__ import annotations

import json
import os
import sys

import aiohttp

from runtime import identity
from runtime.config import ServeConfig, data_dir
from runtime.api_key import ENV_VAR, load_key


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


async def _stream_reply(session: aiohttp.ClientSession, base: str, body: dict,
                        headers: dict[str, str] | None = None) -> str:
    parts: list[str] = []
    async with session.post(f"{base}/v1/chat/completions", json=body, headers=headers) as r:
        if r.status != 200:
            err = await r.json(content_type=None)
            raise RuntimeError(err.get("error", {}).get("message", f"HTTP {r.status}"))
        async for line in r.content:
            line = line.strip()
            if not line.startswith(b"data: ") or line == b"data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if "error" in chunk:
                raise RuntimeError(chunk["error"]["message"])
            text = chunk["choices"][0]["delta"].get("content") if chunk["choices"] else None
            if text:
                parts.append(text)
                sys.stdout.write(text)
                sys.stdout.flush()
    sys.stdout.write("\n")
    return "".join(parts)


async def run_chat(args, start_site) -> int:
    runner = None
    async with aiohttp.ClientSession() as session:
        base = f"http://127.0.0.1:{args.port}"
        headers: dict[str, str] = {}
        if await _hearth_at(session, base):
            headers = await _auth_headers(session, base, args.port)
        else:
            _, runner, port = await start_site(ServeConfig(port=0, model=args.model, preload=False))
            base = f"http://127.0.0.1:{port}"
        try:
            messages: list[dict] = []
            prompts = [args.prompt] if args.prompt else None
            while True:
                if prompts is not None:
                    if not prompts:
                        return 0
                    prompt = prompts.pop()
                else:
                    try:
                        prompt = input(">>> ")
                    except EOFError:
                        return 0
                    if prompt.strip() in ("/bye", "/exit"):
                        return 0
                    if not prompt.strip():
                        continue
                messages.append({"role": "user", "content": prompt})
                body = {"model": args.model, "messages": messages, "stream": True,
                        "max_tokens": args.max_tokens, "temperature": args.temperature}
                try:
                    reply = await _stream_reply(session, base, body, headers)
                except RuntimeError as e:
                    print(f"hearth: {e}", file=sys.stderr)
                    messages.pop()
                    if prompts is not None:
                        return 1
                    continue
                messages.append({"role": "assistant", "content": reply})
        finally:
            if runner is not None:
                await runner.cleanup()
