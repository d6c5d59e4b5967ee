"""Settings → MCP servers: the servers with their state, add (stdio or streamable HTTP), import
an ``mcpServers`` file, remove, restart; the tools each offers."""

from __future__ import annotations

import shlex

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QComboBox, QDialog, QDialogButtonBox, QFileDialog, QFormLayout, QFrame, QHBoxLayout, QLabel, QLineEdit,
    QPlainTextEdit, QPushButton, QScrollArea, QVBoxLayout, QWidget,
)

from app.background import Run
from app.mcp_servers import FAILED, HTTP, RUNNING, STARTING, STDIO, ServerConfig
from app.mcp_service import McpService
from app.ui.blocks import clear_layout

STATE_WORDS = {RUNNING: "Running", STARTING: "Starting…", FAILED: "Failed", "stopped": "Stopped"}


def _pairs(text: str, sep: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        if sep in line:
            k, v = line.split(sep, 1)
            out[k.strip()] = v.strip()
    return out


class ServerDialog(QDialog):
    """Add one server by hand."""

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Hearth — add an MCP server")
        form = QFormLayout(self)
        self.name = QLineEdit()
        self.kind = QComboBox()
        self.kind.addItem("Program on this computer (stdio)", STDIO)
        self.kind.addItem("Streamable HTTP", HTTP)
        self.command = QLineEdit()
        self.command.setPlaceholderText("npx -y @modelcontextprotocol/server-filesystem ~/Documents")
        self.env = QPlainTextEdit()
        self.env.setPlaceholderText("NAME=value, one a line")
        self.env.setMaximumHeight(70)
        self.url = QLineEdit()
        self.url.setPlaceholderText("http://127.0.0.1:8000/mcp")
        self.headers = QPlainTextEdit()
        self.headers.setPlaceholderText("Authorization: Bearer …, one a line")
        self.headers.setMaximumHeight(70)
        form.addRow("Name", self.name)
        form.addRow("Kind", self.kind)
        form.addRow("Command and arguments", self.command)
        form.addRow("Environment", self.env)
        form.addRow("URL", self.url)
        form.addRow("Headers", self.headers)
        self.message = QLabel()
        self.message.setObjectName("errorLabel")
        form.addRow(self.message)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self._accept)
        buttons.rejected.connect(self.reject)
        form.addRow(buttons)

    def config(self) -> ServerConfig:
        words = shlex.split(self.command.text()) if self.command.text().strip() else []
        return ServerConfig(name=self.name.text().strip(), transport=self.kind.currentData(),
                            command=words[0] if words else "", args=words[1:], env=_pairs(self.env.toPlainText(), "="),
                            url=self.url.text().strip(), headers=_pairs(self.headers.toPlainText(), ":"))

    def _accept(self) -> None:
        problem = self.config().problem()
        if problem:
            self.message.setText(problem)
            return
        self.accept()


class ServerRow(QFrame):
    def __init__(self, panel: "McpPanel", config: ServerConfig) -> None:
        super().__init__()
        self.setObjectName("card")
        lay = QHBoxLayout(self)
        lay.setContentsMargins(14, 10, 10, 10)
        text = QVBoxLayout()
        conn = panel.mcp.connection(config.name)
        state = conn.state if conn else "stopped"
        self.name = QLabel(config.name)
        self.name.setObjectName("modelName")
        where = config.url if config.transport == HTTP else " ".join([config.command, *config.args])
        tools = ", ".join(t.name for t in conn.tools) if conn and conn.tools else ""
        self.detail = QLabel(" · ".join(b for b in (where, f"tools: {tools}" if tools else "") if b))
        self.detail.setObjectName("modelDetail")
        self.detail.setWordWrap(True)
        self.error = QLabel(conn.error if conn and conn.error else "")
        self.error.setObjectName("errorLabel")
        self.error.setWordWrap(True)
        self.error.setVisible(bool(self.error.text()))
        text.addWidget(self.name)
        text.addWidget(self.detail)
        text.addWidget(self.error)
        self.state = QLabel(STATE_WORDS.get(state, state))
        self.state.setObjectName("stateBadge")
        self.state.setProperty("state", state)
        restart = QPushButton("Restart")
        restart.clicked.connect(lambda: panel.run(panel.mcp.restart(config.name)))
        remove = QPushButton("Remove")
        remove.clicked.connect(lambda: panel.run(panel.mcp.remove(config.name)))
        lay.addLayout(text, 1)
        lay.addWidget(self.state, 0, Qt.AlignmentFlag.AlignVCenter)  # its own height, not the row's
        lay.addWidget(restart)
        lay.addWidget(remove)


class McpPanel(QWidget):
    def __init__(self, mcp: McpService, run: Run) -> None:
        super().__init__()
        self.mcp, self.run = mcp, run
        lay = QVBoxLayout(self)
        lay.setContentsMargins(24, 20, 24, 20)
        lay.setSpacing(12)
        head = QLabel("MCP servers")
        head.setObjectName("pageTitle")
        intro = QLabel("Tools from MCP servers, offered to the model in every chat. Hearth asks before each "
                       "call unless you allowed that tool. The same mcpServers file Claude Desktop, LM Studio "
                       "and Cursor use can be imported.")
        intro.setWordWrap(True)
        intro.setObjectName("settingsMessage")
        row = QHBoxLayout()
        self.add_button = QPushButton("Add server…")
        self.add_button.setObjectName("primaryButton")
        self.add_button.clicked.connect(self.add)
        self.import_button = QPushButton("Import mcpServers JSON…")
        self.import_button.clicked.connect(self.choose_import)
        self.forget_button = QPushButton("Forget “always allow”")
        self.forget_button.clicked.connect(self._forget_allowed)
        row.addWidget(self.add_button)
        row.addWidget(self.import_button)
        row.addStretch(1)
        row.addWidget(self.forget_button)
        self.message = QLabel()
        self.message.setObjectName("errorLabel")
        self.message.setWordWrap(True)
        self.message.hide()
        self.rows = QVBoxLayout()
        self.rows.setSpacing(8)
        inner = QWidget()
        inner.setLayout(self.rows)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)  # rows wrap to its width
        scroll.setWidget(inner)
        lay.addWidget(head)
        lay.addWidget(intro)
        lay.addLayout(row)
        lay.addWidget(self.message)
        lay.addWidget(scroll, 1)
        mcp.servers_changed.connect(self.refresh)
        self.refresh()

    def _forget_allowed(self) -> None:
        self.mcp.forget_allowed()
        self.refresh()

    def refresh(self) -> None:
        clear_layout(self.rows)
        for s in self.mcp.servers:
            self.rows.addWidget(ServerRow(self, s))
        if not self.mcp.servers:
            empty = QLabel("No MCP servers yet.\nAdd one (a program such as npx or uvx, or a URL), or import "
                           "the mcpServers file of another app.")
            empty.setObjectName("emptyState")
            empty.setWordWrap(True)  # a narrow window wraps it rather than scrolling sideways
            empty.setAlignment(Qt.AlignmentFlag.AlignCenter)
            self.rows.addWidget(empty)
        self.rows.addStretch(1)
        n = len(self.mcp.always_allowed)
        self.forget_button.setText(f"Forget “always allow” ({n})")
        self.forget_button.setEnabled(bool(n))

    def add(self) -> None:
        d = ServerDialog(self)
        if d.exec() == QDialog.DialogCode.Accepted:
            self.run(self.mcp.add(d.config()))

    def choose_import(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Import MCP servers", "", "JSON (*.json)")
        if path:
            self.import_text(open(path, encoding="utf-8").read())

    def import_text(self, text: str) -> None:
        async def go():
            try:
                n = await self.mcp.import_json(text)
            except ValueError as e:
                self.message.setText(f"That file could not be imported: {e}.")
                self.message.show()
                return
            self.message.hide()
            return n
        self.run(go())
