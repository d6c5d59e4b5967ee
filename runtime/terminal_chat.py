"""``hearth run``: stream a chat from the terminal, through the same HTTP API as every client.

It uses the service already running on the port if there is one; otherwise it starts an
in-process service on a free loopback port for the duration of the chat.
"""

from __future__ import annotations

import json
import sys

import aiohttp

from runtime.service_session import service_session


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
    async with service_session(args.port, args.model, start_site) as (session, base, headers):
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
