"""A small MCP server for the tests (FastMCP; stdio, or streamable HTTP with ``--http PORT``):
two tools that work, one that fails, one that hangs, and one that reads a request header.
``--exit-after S`` makes the process exit S seconds after it starts, as a crashing server would."""

from __future__ import annotations

import asyncio
import os
import sys
import threading

from mcp.server.fastmcp import Context, FastMCP

server = FastMCP("hearth-test")


@server.tool()
def lookup_code(name: str = "the door") -> str:
    """The secret code of a named thing."""
    return f"The code for {name} is AZURE-7731."


@server.tool()
def add(a: int, b: int) -> int:
    """Add two whole numbers."""
    return a + b


@server.tool()
def broken(reason: str = "") -> str:
    """A tool that always fails."""
    raise RuntimeError("the disk is on fire")


@server.tool()
async def slow(seconds: float = 60) -> str:
    """A tool that takes a long time."""
    await asyncio.sleep(seconds)
    return "finally"


@server.tool()
def request_header(name: str, ctx: Context) -> str:
    """A header of the HTTP request that carried this call (streamable HTTP only)."""
    request = getattr(ctx.request_context, "request", None)
    return request.headers.get(name, "") if request is not None else ""


if __name__ == "__main__":
    if "--exit-after" in sys.argv:
        delay = float(sys.argv[sys.argv.index("--exit-after") + 1])
        threading.Timer(delay, lambda: os._exit(3)).start()
    if "--http" in sys.argv:  # streamable HTTP on 127.0.0.1:PORT/mcp
        server.settings.port = int(sys.argv[sys.argv.index("--http") + 1])
        server.settings.host = "127.0.0.1"
        server.run("streamable-http")
    else:
        server.run("stdio")
