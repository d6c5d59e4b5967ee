"""The server page: where the API listens, its state, counters, a curl example, start/stop, the log."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (
    QFormLayout, QFrame, QGroupBox, QHBoxLayout, QScrollArea, QLabel, QPlainTextEdit, QPushButton, QVBoxLayout, QWidget,
)

from app.service import RUNNING, STARTING, STOPPING, ServiceController
from app.ui.markdown import monospace

STATE_WORDS = {
    "checking": "Looking for the service…",
    "starting": "Starting…",
    "running": "Running",
    "stopping": "Stopping…",
    "stopped": "Stopped",
    "died": "Stopped unexpectedly",
    "unreachable": "Not reachable",
    "foreign": "Port used by another program",
}


def curl_example(url: str) -> str:
    return (f"curl {url}/v1/chat/completions \\\n  -H 'Content-Type: application/json' \\\n"
            "  -d '{\"messages\": [{\"role\": \"user\", \"content\": \"Hello\"}], \"stream\": true}'")


def counters(stats: dict) -> list[tuple[str, str]]:
    """Rows of the counters box from a /hearth/stats body."""
    rows = [("Requests served", str(stats.get("requests_served", "–")))]
    models = stats.get("models") or ()
    for m in models:
        kv = m.get("kv") or {}
        if len(models) > 1:  # each model's numbers under its name
            rows.append((f"<b>{m.get('id', '?')}</b>", ""))
        rows.append(("Running / waiting", f"{m.get('running', 0)} / {m.get('waiting', 0)}"))
        rows.append(("Tokens generated", str(m.get("tokens_generated", "–"))))
        if kv.get("capacity"):
            rows.append(("KV cells in use", f"{kv.get('cells_used', 0)} of {kv['capacity']}"))
        if kv.get("blocks_total"):
            rows.append(("KV blocks in use", f"{kv.get('blocks_used', 0)} of {kv['blocks_total']}"
                                             f" ({kv.get('block_size', '?')} tokens each)"))
        if "blocks_cached" in kv:
            rows.append(("Prefix cache", f"{kv['blocks_cached']} blocks kept, {kv.get('evictions', 0)} evicted"))
        if kv.get("prompt_tokens"):
            share = kv.get("prefix_hit_tokens", 0) / kv["prompt_tokens"]
            rows.append(("Prompt tokens from cache",
                         f"{kv.get('prefix_hit_tokens', 0)} of {kv['prompt_tokens']} ({share:.0%})"))
        if kv.get("host_entries") or kv.get("host_hit_tokens"):
            rows.append(("Host-memory cache", f"{kv.get('host_entries', 0)} entries, "
                                              f"{kv.get('host_bytes', 0) / 2**20:.0f} MiB, "
                                              f"{kv.get('host_hit_tokens', 0)} tokens restored"))
        rows.append(("Preemptions", str(kv.get("preemptions", m.get("preemptions", 0)))))
        spec = m.get("spec") or {}
        for k, v in sorted(spec.items()) if isinstance(spec, dict) else ():
            if isinstance(v, (int, float)):
                label = "Speculation: " + k.replace("_", " ")
                rows.append((label, f"{v:.2f}" if isinstance(v, float) else str(v)))
    return rows


#: an RPC worker's state (``/health``'s ``rpc``) in words
RPC_WORDS = {"in_use": "in use", "ready": "ready", "busy": "serving another machine", "down": "not answering",
             "incompatible": "another llama.cpp version"}


def rpc_workers(health: dict) -> str:
    """The machines lending memory over llama.cpp's RPC (``hearth serve --rpc``), one line each:
    the address, its state, and the models whose layers it holds; "–" when there are none."""
    lines = []
    for w in health.get("rpc") or ():
        if not isinstance(w, dict) or not isinstance(w.get("endpoint"), str):
            continue
        state = str(w.get("state"))
        line = f"{w['endpoint']}: {RPC_WORDS.get(state, state)}"
        models = [m for m in w.get("models") or () if isinstance(m, str)]
        if models:
            line += f" ({', '.join(models)})"
        lines.append(line)
    return "\n".join(lines) or "–"


class ServerPage(QWidget):
    def __init__(self, service: ServiceController, start, stop, restart=None) -> None:
        """``start``, ``stop`` and ``restart``: callables that start, stop and restart the service
        (they schedule the work); a restart takes up new settings (a new port) in one step."""
        super().__init__()
        self.service = service
        lay = QVBoxLayout(self)
        lay.setContentsMargins(24, 20, 24, 16)
        lay.setSpacing(10)
        title = QLabel("Server")
        title.setObjectName("pageTitle")
        head = QHBoxLayout()  # start and stop beside the title: in sight however short the window
        head.addWidget(title)
        head.addStretch(1)
        self.start_button = QPushButton("Start server")
        self.start_button.clicked.connect(start)
        self.stop_button = QPushButton("Stop server")
        self.stop_button.clicked.connect(stop)
        self.restart_button = QPushButton("Restart server")
        self.restart_button.setToolTip("Stop the service and start it again with the saved settings (a new port, "
                                       "model or context)")
        self.restart_button.clicked.connect(restart or (lambda: None))
        self.restart_button.setVisible(restart is not None)
        head.addWidget(self.start_button)
        head.addWidget(self.stop_button)
        head.addWidget(self.restart_button)
        lay.addLayout(head)
        top = QGroupBox("Service")
        form = QFormLayout(top)
        self.address = QLabel()
        self.status = QLabel()
        self.status.setObjectName("serverStatus")
        self.model = QLabel("–")
        self.origin = QLabel()
        form.addRow("Address", self.address)
        form.addRow("Status", self.status)
        from app.ui.progress import ProgressLine

        self.progress = ProgressLine()  # starting or stopping: a busy bar and the seconds so far
        self._progress_state = ""
        form.addRow("", self.progress)
        form.addRow("Loaded models", self.model)
        self.rpc = QLabel("–")  # other machines lending memory over llama.cpp's RPC
        self.rpc.setWordWrap(True)
        form.addRow("RPC workers", self.rpc)
        form.addRow("Started by", self.origin)
        self.counters_box = QGroupBox("Counters")
        inner = QWidget()
        inner.setObjectName("counterRows")
        self.counters = QFormLayout(inner)
        self.counters.setContentsMargins(0, 0, 0, 0)
        scroll = QScrollArea()  # several models' counters scroll instead of growing the window
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        scroll.setWidget(inner)
        QVBoxLayout(self.counters_box).addWidget(scroll)
        curl_box = QGroupBox("Try the API")
        cl = QHBoxLayout(curl_box)  # Copy beside the example, not on a row of its own
        self.curl = QPlainTextEdit()
        self.curl.setReadOnly(True)
        self.curl.setFont(monospace())
        self.curl.setFixedHeight(72)
        copy = QPushButton("Copy")
        copy.clicked.connect(lambda: QGuiApplication.clipboard().setText(self.curl.toPlainText()))
        cl.addWidget(self.curl, 1)
        cl.addWidget(copy, 0, Qt.AlignmentFlag.AlignTop)
        log_box = QGroupBox("Log")
        ll = QVBoxLayout(log_box)
        self.log = QPlainTextEdit()
        self.log.setReadOnly(True)
        self.log.setFont(monospace())
        self.log.setMaximumBlockCount(500)
        self.log.setPlaceholderText("The log of a service started by this app appears here.")
        ll.addWidget(self.log)
        row = QHBoxLayout()
        row.addWidget(top, 1)
        row.addWidget(self.counters_box, 1)
        lay.addLayout(row, 3)  # the counters get the room; the log scrolls
        lay.addWidget(curl_box)
        lay.addWidget(log_box, 2)
        for line in service.log:
            self.log.appendPlainText(line)
        service.log_line.connect(self.log.appendPlainText)
        service.state_changed.connect(lambda _: self.refresh())
        service.health_changed.connect(lambda _: self.refresh())
        service.stats_changed.connect(self._stats)
        self.refresh()
        self._stats(service.stats)

    def refresh(self) -> None:
        s = self.service
        self.address.setText(s.url + (f"  (after a restart: {s.pending_url})" if s.pending_url else ""))
        self.curl.setPlainText(curl_example(s.url))
        engine = s.health.get("engine") or {}
        words = STATE_WORDS.get(s.state, s.state)
        if s.state == RUNNING and engine.get("state") == "idle":
            words = "Running (no model loaded yet)"
        elif s.state == RUNNING and engine.get("state") == "crashed":
            words = "Running; the model stopped and reloads on the next request"
        self.status.setText(words)
        resident = [m.get("id") for m in (s.stats or {}).get("models") or () if m.get("id")]
        self.model.setText(", ".join(resident) or engine.get("model") or "–")  # every resident model
        self.rpc.setText(rpc_workers(s.health or {}))
        self.origin.setText("this app" if s.owned else ("another program" if s.state == RUNNING else "–"))
        self.start_button.setEnabled(s.state not in (RUNNING, STARTING, STOPPING))
        self.stop_button.setEnabled(s.owned and s.state != STOPPING)
        self.restart_button.setEnabled(s.owned and s.state not in (STARTING, STOPPING))
        if s.state != self._progress_state:
            self._progress_state = s.state
            if s.state == STOPPING:
                self.progress.start("Stopping the service; its models are ending…")
            elif s.state == STARTING:
                self.progress.start("Starting the service…")
            else:
                self.progress.finish()
        self.stop_button.setToolTip("" if s.owned else "Only a service started by this app can be stopped here.")

    def _stats(self, stats: dict) -> None:
        while self.counters.rowCount():
            self.counters.removeRow(0)
        if not stats:
            self.counters.addRow(QLabel("No numbers yet: the service has not answered."))
            return
        for label, value in counters(stats):
            shown = QLabel(value)
            shown.setWordWrap(True)  # a narrow window wraps a long value instead of scrolling sideways
            self.counters.addRow(label, shown)
        resident = [m.get("id") for m in stats.get("models") or () if m.get("id")]
        if resident:
            self.model.setText(", ".join(resident))
