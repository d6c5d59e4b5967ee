"""MCP servers: their settings (the ``mcpServers`` JSON that Claude Desktop, LM Studio and Cursor
use), a connection per server with the ``mcp`` package's client, its tools, and calling them.

No Qt here. Each connection lives in one asyncio task that holds the transport and the
``ClientSession`` (anyio wants a context entered and left in the same task); calls from other
tasks go through the session with a timeout, so a server that hangs or exits never hangs a chat.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
from collections.abc import Callable
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from app.tool_loop import ToolFailed

if TYPE_CHECKING:
    from mcp import ClientSession  # at run time it is imported where a server starts

log = logging.getLogger("hearth.app")
STDIO, HTTP = "stdio", "http"
STOPPED, STARTING, RUNNING, FAILED = "stopped", "starting", "running", "failed"
START_TIMEOUT_S = 20.0
_NAME = re.compile(r"[^A-Za-z0-9_-]")


@dataclass(slots=True)
class ServerConfig:
    """One MCP server as the user set it up."""

    name: str
    transport: str = STDIO  # "stdio" or "http" (streamable HTTP)
    command: str = ""
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    url: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    enabled: bool = True
    #: tools the user switched off (their names), so the model is never offered them
    disabled_tools: list[str] = field(default_factory=list)

    def problem(self) -> str | None:
        """A sentence when this server cannot be started as set up, else None."""
        if not self.name.strip():
            return "A server needs a name."
        if self.transport == STDIO and not self.command.strip():
            return f"Server {self.name!r} needs a command to start it (for example npx or uvx)."
        if self.transport == HTTP and not self.url.startswith(("http://", "https://")):
            return f"Server {self.name!r} needs an http:// or https:// URL."
        if self.transport not in (STDIO, HTTP):
            return f"Server {self.name!r}: the transport must be stdio or http."
        return None


def parse_mcp_json(text: str) -> list[ServerConfig]:
    """Servers from an ``mcpServers`` file (Claude Desktop's ``claude_desktop_config.json``, LM
    Studio's and Cursor's ``mcp.json``); raises ValueError naming what is wrong."""
    try:
        raw = json.loads(text)
    except ValueError as e:
        raise ValueError(f"the file is not JSON ({e})") from None
    servers = raw.get("mcpServers") if isinstance(raw, dict) else None
    if not isinstance(servers, dict):
        raise ValueError("the file has no \"mcpServers\" object")
    out = []
    for name, spec in servers.items():
        if not isinstance(spec, dict):
            raise ValueError(f"mcpServers.{name} must be an object")
        url = spec.get("url") or spec.get("serverUrl") or ""
        kind = HTTP if url else STDIO
        cfg = ServerConfig(name=str(name), transport=kind, command=str(spec.get("command") or ""),
                           args=[str(a) for a in spec.get("args") or []],
                           env={str(k): str(v) for k, v in (spec.get("env") or {}).items()},
                           url=str(url), headers={str(k): str(v) for k, v in (spec.get("headers") or {}).items()},
                           enabled=not spec.get("disabled", False))
        problem = cfg.problem()
        if problem:
            raise ValueError(problem)
        out.append(cfg)
    return out


def to_mcp_json(servers: list[ServerConfig]) -> str:
    """The same shape back, for other apps to import."""
    d = {}
    for s in servers:
        spec: dict = ({"command": s.command, "args": s.args} if s.transport == STDIO else {"url": s.url})
        if s.env:
            spec["env"] = s.env
        if s.headers:
            spec["headers"] = s.headers
        if not s.enabled:
            spec["disabled"] = True
        d[s.name] = spec
    return json.dumps({"mcpServers": d}, indent=2)


class ServerList:
    """The servers in a JSON file in the data directory (owner-only: headers may hold tokens)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> list[ServerConfig]:
        try:
            raw = json.loads(self.path.read_text())
        except FileNotFoundError:
            return []
        except (OSError, ValueError) as e:
            log.warning("MCP server list %s unreadable: %s", self.path, e)
            return []
        known = set(ServerConfig.__dataclass_fields__)
        return [ServerConfig(**{k: v for k, v in r.items() if k in known})
                for r in raw.get("servers", []) if isinstance(r, dict) and r.get("name")]

    def save(self, servers: list[ServerConfig]) -> None:
        from runtime.private_files import write_private

        write_private(self.path, json.dumps({"servers": [asdict(s) for s in servers]}, indent=2))


@dataclass(slots=True)
class Tool:
    server: str
    name: str  # the server's name for it
    api_name: str  # the name the model sees (unique across servers)
    description: str
    schema: dict

    def to_api(self) -> dict:
        return {"type": "function", "function": {"name": self.api_name, "description": self.description,
                                                 "parameters": self.schema or {"type": "object", "properties": {}}}}


class Connection:
    """One running MCP server: started, listed, called, stopped."""

    def __init__(self, config: ServerConfig, changed: Callable[["Connection"], None] = lambda c: None) -> None:
        self.config = config
        self.state = STOPPED
        self.error = ""
        self.tools: list[Tool] = []
        self._changed = changed
        self._session: ClientSession | None = None
        self._task: asyncio.Task | None = None
        self._stop: asyncio.Event | None = None
        #: how often a running server is pinged (an exited one is noticed within this)
        self.ping_every_s = 5.0

    def _set(self, state: str, error: str = "") -> None:
        self.state, self.error = state, error
        self._changed(self)

    async def start(self, timeout_s: float = START_TIMEOUT_S) -> bool:
        """Connect and list the tools; False (with ``error`` in words) when that fails in time."""
        if self.state in (RUNNING, STARTING):
            return self.state == RUNNING
        problem = self.config.problem()
        if problem:
            self._set(FAILED, problem)
            return False
        self._stop = stop = asyncio.Event()
        ready: asyncio.Future = asyncio.get_running_loop().create_future()
        self._set(STARTING)
        self._task = asyncio.ensure_future(self._hold(ready, stop))
        try:
            await asyncio.wait_for(asyncio.shield(ready), timeout_s)
        except TimeoutError:
            await self.stop()
            self._set(FAILED, f"{self.config.name} did not answer within {timeout_s:g} s of starting.")
            return False
        except Exception as e:  # noqa: BLE001 - any start failure becomes words for the user
            self._set(FAILED, _words(self.config, e))
            return False
        self._set(RUNNING)
        return True

    def _transport(self):
        c = self.config
        if c.transport == HTTP:
            return _streamable_http(c.url, c.headers)
        from mcp.client.stdio import StdioServerParameters, stdio_client

        env = {**os.environ, **c.env} if c.env else None
        return stdio_client(StdioServerParameters(command=c.command, args=c.args, env=env),
                            errlog=open(os.devnull, "w"))

    async def _hold(self, ready: asyncio.Future, stop: asyncio.Event) -> None:
        """Hold the connection until ``stop`` is set (the server's own ``_stop``)."""
        from mcp import ClientSession

        try:
            async with self._transport() as streams:
                async with ClientSession(streams[0], streams[1]) as session:
                    await session.initialize()
                    listed = await session.list_tools()
                    self._session = session
                    self.tools = [Tool(self.config.name, t.name, _NAME.sub("_", t.name)[:64],
                                       t.description or "", dict(t.inputSchema or {})) for t in listed.tools]
                    if not ready.done():
                        ready.set_result(True)
                    await self._watch(session, stop)
        except asyncio.CancelledError:
            pass
        except BaseException as e:  # noqa: BLE001 - the server exited or the transport broke
            if not ready.done():
                ready.set_exception(e if isinstance(e, Exception) else RuntimeError(str(e)))
            elif self.state == RUNNING:
                self._set(FAILED, _lost_words(self.config, e))
        finally:
            self._session = None
            if self.state == RUNNING and not stop.is_set():
                self._set(FAILED, f"{self.config.name} exited.")

    async def _watch(self, session: ClientSession, stop: asyncio.Event) -> None:
        """Wait for stop; meanwhile ping the server, so one that exits or hangs shows as failed."""
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), self.ping_every_s)
                return
            except TimeoutError:
                pass
            try:
                await asyncio.wait_for(session.send_ping(), self.ping_every_s)
            except TimeoutError:
                raise ConnectionError("it stopped answering") from None

    async def call(self, name: str, arguments: dict, timeout_s: float) -> str:
        """Run one tool; its text result. ToolFailed with words when the tool or server fails,
        TimeoutError when it does not answer in time."""
        session = self._session
        if session is None or self.state != RUNNING:
            raise ToolFailed(f"The server {self.config.name} is not running"
                             + (f": {self.error}" if self.error else "."))
        from datetime import timedelta

        call = asyncio.ensure_future(session.call_tool(name, arguments,
                                                       read_timeout_seconds=timedelta(seconds=timeout_s)))
        held = self._task  # the connection's task: it ends when the server exits
        watched: set[asyncio.Future] = {call} if held is None else {call, held}
        done, _ = await asyncio.wait(watched, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
        if call not in done:
            call.cancel()
            if self._task in done:
                raise ToolFailed(f"The server {self.config.name} exited during the call.")
            raise TimeoutError
        try:
            result = call.result()
        except Exception as e:  # noqa: BLE001 - a protocol error or timeout from the session
            if "timed out" in str(e).lower():
                raise TimeoutError from None
            if "connection closed" in str(e).lower():
                self._set(FAILED, f"{self.config.name} exited.")
                raise ToolFailed(f"The server {self.config.name} exited during the call.") from None
            raise ToolFailed(f"{self.config.name}: {e}") from None
        text = "\n".join(getattr(c, "text", None) or json.dumps(c.model_dump(mode="json")) for c in result.content)
        if result.isError:
            raise ToolFailed(text or f"{name} failed")
        if not text and getattr(result, "structuredContent", None):
            text = json.dumps(result.structuredContent)
        return text

    async def stop(self) -> None:
        if self._stop is not None:
            self._stop.set()
        task, self._task = self._task, None
        if task is not None and not task.done():
            try:
                await asyncio.wait_for(task, 5)
            except (TimeoutError, asyncio.CancelledError):
                task.cancel()
        self.tools = []
        if self.state != FAILED:
            self._set(STOPPED)


@asynccontextmanager
async def _streamable_http(url: str, headers: dict[str, str]):
    """The streamable HTTP transport with the server's headers (the SDK's newer entry point
    where it has one, which takes an httpx client for them; else ``streamablehttp_client``)."""
    from mcp.client import streamable_http

    if not hasattr(streamable_http, "streamable_http_client"):
        async with streamable_http.streamablehttp_client(url, headers=headers or None, timeout=10) as streams:
            yield streams
        return
    import httpx

    async with httpx.AsyncClient(headers=headers or None, timeout=httpx.Timeout(10, read=300)) as http:
        async with streamable_http.streamable_http_client(url, http_client=http) as streams:
            yield streams


def _words(config: ServerConfig, e: BaseException) -> str:
    """A start failure in plain words."""
    if isinstance(e, BaseExceptionGroup) and e.exceptions:
        return _words(config, e.exceptions[0])
    if isinstance(e, FileNotFoundError):
        return f"The command {config.command!r} was not found. Install it, or give its full path."
    if isinstance(e, PermissionError):
        return f"The command {config.command!r} cannot be run (permission denied)."
    text = str(e) or type(e).__name__
    if config.transport == HTTP:
        return f"No MCP server answered at {config.url} ({text})."
    if ("connection closed" in text.lower() or isinstance(e, (EOFError, BrokenPipeError))
            or type(e).__name__ in ("ClosedResourceError", "BrokenResourceError", "EndOfStream")):
        return f"{config.name} exited; run its command in a terminal to see why."
    if isinstance(e, ConnectionError):
        return f"{config.name} {text}."
    return text


def _lost_words(config: ServerConfig, e: BaseException) -> str:
    """A running server lost, in plain words: a local server whose connection broke exited (the
    error the transport raises then, which may be its event-loop plumbing's, is beside the point)."""
    if isinstance(e, BaseExceptionGroup) and e.exceptions:
        return _lost_words(config, e.exceptions[0])
    if isinstance(e, ConnectionError) or config.transport == HTTP:
        return _words(config, e)
    return f"{config.name} exited; run its command in a terminal to see why."


class McpHub:
    """Every configured server's connection; the tools to offer the model; calls by tool name."""

    def __init__(self, servers: list[ServerConfig], changed: Callable[[Connection], None] = lambda c: None) -> None:
        self._changed = changed
        self.connections: dict[str, Connection] = {}
        self.set_servers(servers)

    def set_servers(self, servers: list[ServerConfig]) -> list[Connection]:
        """Take a new list; returns the connections that are gone (the caller stops them)."""
        gone = [c for name, c in self.connections.items() if name not in {s.name for s in servers}]
        for s in servers:
            conn = self.connections.get(s.name)
            if conn is None or conn.config != s:
                if conn is not None:
                    gone.append(conn)
                self.connections[s.name] = Connection(s, self._changed)
        for c in gone:
            if self.connections.get(c.config.name) is c:
                del self.connections[c.config.name]
        return gone

    async def start_all(self) -> None:
        await asyncio.gather(*(c.start() for c in self.connections.values()
                               if c.config.enabled and c.state in (STOPPED, FAILED)))

    async def stop_all(self) -> None:
        await asyncio.gather(*(c.stop() for c in self.connections.values()))

    def tools(self) -> list[Tool]:
        """The enabled tools of running servers, each with a name unique across servers."""
        out, seen = [], set()
        for c in self.connections.values():
            if c.state != RUNNING or not c.config.enabled:
                continue
            for t in c.tools:
                if t.name in c.config.disabled_tools:
                    continue
                if t.api_name in seen:
                    t.api_name = _NAME.sub("_", f"{c.config.name}_{t.name}")[:64]
                seen.add(t.api_name)
                out.append(t)
        return out

    def api_tools(self) -> list[dict]:
        return [t.to_api() for t in self.tools()]

    def find(self, api_name: str) -> Tool | None:
        return next((t for t in self.tools() if t.api_name == api_name), None)

    async def call(self, api_name: str, arguments: dict, timeout_s: float) -> str:
        tool = self.find(api_name)
        if tool is None:
            raise ToolFailed(f"There is no tool named {api_name!r} (its server may have stopped).")
        return await self.connections[tool.server].call(tool.name, arguments, timeout_s)
