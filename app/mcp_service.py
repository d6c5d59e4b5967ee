"""The app's MCP servers as a Qt service: the list the user keeps in Settings, started and
stopped with the app, their state for the window, and the tools the user always allows."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from PySide6.QtCore import QObject, Signal

from app.mcp_servers import Connection, McpHub, ServerConfig, ServerList, parse_mcp_json


class McpService(QObject):
    servers_changed = Signal()  # a server was added, removed, started, stopped or failed

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.list = ServerList(path)
        self.servers = self.list.load()
        self.always_allowed: set[str] = set(_always(path))
        self._saved_allowed = set(self.always_allowed)
        self.path = path
        self.hub = McpHub(self.servers, self._changed)

    def _changed(self, conn: Connection) -> None:
        self.servers_changed.emit()

    # what the chat uses
    def api_tools(self) -> list[dict]:
        return self.hub.api_tools()

    async def call(self, name: str, arguments: dict, timeout_s: float) -> str:
        return await self.hub.call(name, arguments, timeout_s)

    def server_of(self, api_name: str) -> str:
        tool = self.hub.find(api_name)
        return tool.server if tool else ""

    def connection(self, name: str) -> Connection | None:
        return self.hub.connections.get(name)

    # lifecycle
    async def start_all(self) -> None:
        await self.hub.start_all()

    async def stop_all(self) -> None:
        await self.hub.stop_all()

    async def restart(self, name: str) -> None:
        conn = self.hub.connections.get(name)
        if conn is not None:
            await conn.stop()
            conn.state = "stopped"
            await conn.start()

    # the list
    def save(self) -> None:
        self.list.save(self.servers)
        self._saved_allowed = set(self.always_allowed)
        data = json.loads(self.path.read_text())
        data["always_allowed"] = sorted(self.always_allowed)
        from runtime.private_files import write_private

        write_private(self.path, json.dumps(data, indent=2))

    async def set_servers(self, servers: list[ServerConfig]) -> None:
        """Keep the new list, stop the servers that went or changed, start the new ones."""
        self.servers = list(servers)
        self.save()
        gone = self.hub.set_servers(self.servers)
        await asyncio.gather(*(c.stop() for c in gone))
        self.servers_changed.emit()
        await self.hub.start_all()

    async def add(self, server: ServerConfig) -> None:
        await self.set_servers([s for s in self.servers if s.name != server.name] + [server])

    async def remove(self, name: str) -> None:
        await self.set_servers([s for s in self.servers if s.name != name])

    async def import_json(self, text: str) -> int:
        """Add the servers of an ``mcpServers`` file (ValueError when it is not one)."""
        new = parse_mcp_json(text)
        names = {s.name for s in new}
        await self.set_servers([s for s in self.servers if s.name not in names] + new)
        return len(new)

    def keep_allowed(self) -> None:
        """Save the always-allowed tools when a chat added one (the chat adds to the same set)."""
        if self.always_allowed != self._saved_allowed:
            self.save()

    def forget_allowed(self) -> None:
        self.always_allowed.clear()
        self.save()


def _always(path: Path) -> list[str]:
    try:
        return [str(n) for n in json.loads(path.read_text()).get("always_allowed", [])]
    except (OSError, ValueError, AttributeError):
        return []
