"""Tools from a real MCP server (stdio, FastMCP, started by the app) in a real chat with the
embedded model: a forced call is shown, approved in the dialog, run, and its result goes back
for the final answer; a failing tool, a hanging one (timeout) and a server that exits are shown
in words and never hang the chat."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from app.conversations import Sampling
from app.mcp_servers import FAILED, RUNNING, ServerConfig, parse_mcp_json, to_mcp_json

SERVER = str(Path(__file__).with_name("mcp_test_server.py"))


def _server(*extra: str, name: str = "tester") -> ServerConfig:
    return ServerConfig(name=name, command=sys.executable, args=[SERVER, *extra])


def _forced(h, tool: str, max_steps: int = 2) -> None:
    h.chat.new_conversation()
    h.chat.configure(sampling=Sampling(temperature=0.0, top_p=1.0, max_tokens=48, seed=3))
    c = h.chat.current
    c.options["tool_choice"] = {"type": "function", "function": {"name": tool}}
    h.chat.store.update(c)
    h.chat.max_steps = max_steps


def _app_with_server(make_app, service, driver, tmp_path, *servers: ServerConfig):
    (tmp_path / "mcp-servers.json").write_text(json.dumps({"servers": [
        {"name": s.name, "command": s.command, "args": s.args} for s in servers]}))
    h = make_app(service.port)
    assert driver.run(h.start())
    driver.until(lambda: all(c.state in (RUNNING, FAILED) for c in h.mcp.hub.connections.values()), 60,
                 "the MCP servers to start")
    return h


def test_mcp_json_round_trips_in_the_shape_other_apps_use():
    text = json.dumps({"mcpServers": {
        "files": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"],
                  "env": {"DEBUG": "1"}},
        "remote": {"url": "http://127.0.0.1:9/mcp", "headers": {"Authorization": "Bearer x"}}}})
    servers = parse_mcp_json(text)
    assert [(s.name, s.transport) for s in servers] == [("files", "stdio"), ("remote", "http")]
    assert servers[0].args[-1] == "/tmp" and servers[0].env == {"DEBUG": "1"}
    assert servers[1].headers == {"Authorization": "Bearer x"}
    assert parse_mcp_json(to_mcp_json(servers)) == servers
    for bad, word in (("[]", "mcpServers"), ('{"mcpServers": {"x": {}}}', "command"), ("nope", "JSON")):
        try:
            parse_mcp_json(bad)
        except ValueError as e:
            assert word in str(e)
        else:
            raise AssertionError(f"{bad!r} was accepted")


def test_a_forced_tool_call_is_approved_run_and_answered(service, driver, make_app, tmp_path):
    h = _app_with_server(make_app, service, driver, tmp_path, _server())
    conn = h.mcp.connection("tester")
    assert conn.state == RUNNING, conn.error
    assert {"lookup_code", "add"} <= {t["function"]["name"] for t in h.mcp.api_tools()}
    h.window.show_page("Settings")
    assert "Running" in h.mcp_panel.rows.itemAt(0).widget().state.text()
    h.window.show_page("Chat")
    assert h.chat_page.tools_button.text() == f"Tools · {len(h.mcp.api_tools())}"

    _forced(h, "lookup_code")
    h.chat_page.input.setPlainText("What is the code for the blue door? Use the tool.")
    h.chat_page.send_button.click()
    driver.until(lambda: h.chat_page.approval is not None and h.chat_page.approval.isVisible(), 60,
                 lambda: f"the approval dialog (the answer: {h.chat.messages.items()[-1]})")
    dialog = h.chat_page.approval
    answer = h.chat.messages.items()[-1]
    assert answer.meta["tool_calls"][0]["status"] == "pending"
    dialog.chat_button.click()  # allowed for this chat
    driver.until(lambda: not h.chat.busy, 180, "the final answer")

    answer = h.chat.messages.items()[-1]
    call = answer.meta["tool_calls"][0]
    assert call["name"] == "lookup_code" and call["status"] == "done", call["result"]
    assert "AZURE-7731" in call["result"] and call["seconds"] is not None and call["server"] == "tester"
    assert isinstance(json.loads(call["arguments"] or "{}"), dict)
    assert answer.content.strip() and answer.meta["finish"] in ("stop", "length")
    widget = h.chat_page.view.widget_at(-1)
    assert widget.tool_calls.isVisible() and "lookup_code" in widget.tool_calls.text()
    assert "AZURE-7731" in widget.tool_calls.text()
    assert h.chat.current.options["allowed_tools"] == ["lookup_code"]

    # allowed for the chat: the next call runs without asking
    h.chat_page.approval = None
    h.chat_page.input.setPlainText("And the code for the red door?")
    h.chat_page.send_button.click()
    driver.until(lambda: not h.chat.busy, 180, "the second answer")
    assert h.chat_page.approval is None
    assert h.chat.messages.items()[-1].meta["tool_calls"][0]["status"] == "done"

    driver.run(h.shutdown())  # the servers stop with the app
    assert conn.state == "stopped" and not conn.tools
    import psutil

    left = [p for p in psutil.Process().children(recursive=True) if SERVER in " ".join(p.cmdline())]
    assert not left, f"the MCP server process outlived the app: {left}"


def test_failing_hanging_and_exiting_servers_are_shown_and_never_hang(service, driver, make_app, tmp_path):
    h = _app_with_server(make_app, service, driver, tmp_path, _server(), _server("--exit-after", "4", name="crashy"),
                         ServerConfig(name="missing", command="no-such-mcp-command"))
    assert h.mcp.connection("missing").state == FAILED
    assert "was not found" in h.mcp.connection("missing").error
    driver.until(lambda: "missing" in h.window.banner.label.text(), 10, "the failed server in the banner")
    assert "was not found" in h.window.banner.label.text()
    h.chat.always_allowed.update({"broken", "slow"})
    h.chat.tool_timeout_s = 2.0

    _forced(h, "broken")
    h.chat_page.input.setPlainText("Run the broken tool.")
    h.chat_page.send_button.click()
    driver.until(lambda: not h.chat.busy, 180, "the answer after a failed tool")
    call = h.chat.messages.items()[-1].meta["tool_calls"][0]
    assert call["status"] == "failed" and "disk is on fire" in call["result"]

    _forced(h, "slow")
    h.chat_page.input.setPlainText("Run the slow tool.")
    h.chat_page.send_button.click()
    driver.until(lambda: not h.chat.busy, 180, "the answer after a timed-out tool")
    call = h.chat.messages.items()[-1].meta["tool_calls"][0]
    assert call["status"] == "timeout" and "2 s" in call["result"] and call["seconds"] < 10

    crashy = h.mcp.connection("crashy")
    crashy.ping_every_s = 0.5
    driver.until(lambda: crashy.state == FAILED, 30, "the exited server to show as failed")
    assert "exited" in crashy.error
    h.window.show_page("Settings")
    rows = [h.mcp_panel.rows.itemAt(i).widget() for i in range(h.mcp_panel.rows.count() - 1)]
    shown = {r.name.text(): (r.state.text(), r.error.text()) for r in rows}
    assert shown["crashy"][0] == "Failed" and "exited" in shown["crashy"][1]
    assert shown["tester"][0] == "Running"


async def test_a_streamable_http_server_lists_and_runs_tools_and_a_dead_url_is_explained():
    import asyncio
    import subprocess

    from app.mcp_servers import HTTP, McpHub
    from runtime.server.launcher import free_port

    port = free_port()
    proc = subprocess.Popen([sys.executable, SERVER, "--http", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):
            try:
                _, w = await asyncio.open_connection("127.0.0.1", port)
                w.close()
                break
            except OSError:
                await asyncio.sleep(0.05)
        hub = McpHub([ServerConfig(name="web", transport=HTTP, url=f"http://127.0.0.1:{port}/mcp",
                                   headers={"X-Test": "1"}),
                      ServerConfig(name="nowhere", transport=HTTP, url=f"http://127.0.0.1:{free_port()}/mcp")])
        await asyncio.gather(hub.connections["web"].start(), hub.connections["nowhere"].start(timeout_s=8))
        assert hub.connections["web"].state == RUNNING, hub.connections["web"].error
        assert await hub.call("add", {"a": 2, "b": 40}, 10) == "42"
        assert await hub.call("request_header", {"name": "X-Test"}, 10) == "1"  # the configured headers are sent
        assert hub.connections["nowhere"].state == FAILED
        assert "No MCP server answered" in hub.connections["nowhere"].error or "did not answer" in \
            hub.connections["nowhere"].error
        await hub.stop_all()
    finally:
        proc.terminate()
        proc.wait(10)
