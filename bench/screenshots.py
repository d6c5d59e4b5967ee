"""Screenshots of the desktop app: a real window under Xvfb, a chat with a tool call (an MCP
server of its own), a chat with a document citation, and every other page, each in the light and
the dark theme. Saves docs/screenshots/PAGE-THEME.png; prints JSON.

    python bench/screenshots.py [--out docs/screenshots]

Needs Xvfb and Qt's xcb libraries where there is no display (Debian: apt-get install -y xvfb
libxcb-cursor0 libxkbcommon-x11-0 libxcb-icccm4 libxcb-keysyms1 ...); run as root it installs them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
XCB_PACKAGES = ["xvfb", "libxcb-cursor0", "libxkbcommon-x11-0", "libxcb-icccm4", "libxcb-image0", "libxcb-keysyms1",
                "libxcb-randr0", "libxcb-render-util0", "libxcb-shape0", "libxcb-xinerama0", "libxcb-xkb1", "libegl1",
                "fonts-dejavu-core"]


def ensure_xvfb() -> None:
    if shutil.which("Xvfb"):
        return
    if os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run(["apt-get", "install", "-y", "-qq", *XCB_PACKAGES], check=True)
        return
    raise SystemExit("screenshots: Xvfb is missing; install it with: sudo apt-get install -y " + " ".join(XCB_PACKAGES))


def start_display(size: str = "1280x800x24") -> subprocess.Popen | None:
    """An Xvfb display of our own (even when one exists: the shots must not depend on the desktop)."""
    ensure_xvfb()
    for n in range(91, 140):
        if not Path(f"/tmp/.X11-unix/X{n}").exists() and not Path(f"/tmp/.X{n}-lock").exists():
            proc = subprocess.Popen(["Xvfb", f":{n}", "-screen", "0", size, "-nolisten", "tcp"],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            deadline = time.monotonic() + 10
            while not Path(f"/tmp/.X11-unix/X{n}").exists():
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"screenshots: Xvfb :{n} did not start")
                time.sleep(0.05)
            os.environ["DISPLAY"] = f":{n}"
            os.environ["QT_QPA_PLATFORM"] = "xcb"
            return proc
    raise SystemExit("screenshots: no free X display number")


async def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"screenshots: timed out waiting for {what}")
        await asyncio.sleep(0.05)


PAGES = ("chat-tools", "chat-document", "chat-code", "models", "server", "settings", "mcp-servers")
THEMES = ("light", "dark")


CODE_ANSWER = """A decorator is a function that takes a function and returns a new one, usually to add
behaviour around it. The `@` line applies it:

```python
import functools, time

def timed(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        result = fn(*args, **kwargs)
        print(f"{fn.__name__} took {time.perf_counter() - start:.3f} s")
        return result
    return wrapper

@timed
def slow_sum(n: int) -> int:
    return sum(range(n))
```

Calling `slow_sum(10_000_000)` now prints how long it took."""


def harbour_notes() -> str:
    """A document of a few thousand words with one fact in the middle (too long to go in whole)."""
    import random

    rnd = random.Random(3)
    topics = ["The harbour froze early that winter and the ferries stopped running.",
              "Farmers along the river planted barley instead of wheat this year.",
              "The town council debated the new bridge for three long evenings.",
              "A storm in March tore the roof off the old grain warehouse.",
              "Children learned to sail in the shallow bay during the summer months.",
              "The railway station was repainted green and cream in the spring."]
    paras = [f"## {1950 + i}\n\n" + " ".join(rnd.sample(topics, 4)) for i in range(30)]
    paras.insert(15, "## The lighthouse\n\nThe lighthouse keeper's cat is named Marmalade and she weighs nine "
                     "kilograms. She sleeps on the lamp-room stairs.")
    return "# Harbour notes\n\n" + "\n\n".join(paras)


def screen(path: Path) -> None:
    """The whole display: the window and the dialogs over it."""
    from PySide6.QtGui import QGuiApplication

    QGuiApplication.primaryScreen().grabWindow(0).save(str(path))


async def drive(hearth, out: Path) -> dict:
    from app.conversations import Sampling
    from app.tool_loop import ToolCall
    from app.ui.tool_approval import ToolApprovalDialog

    report: dict = {}
    assert await hearth.start(), "the service did not start"
    await wait_for(lambda: hearth.service.loaded_model is not None, 300, "the default model")
    await wait_for(lambda: all(c.state in ("running", "failed") for c in hearth.mcp.hub.connections.values()),
                   60, "the MCP server")
    w = hearth.window
    w.resize(1280, 800)
    w.show()
    store = hearth.chat.store
    seeded = {}
    for title, q, a in (("Trip ideas for a rainy weekend", "Ideas for a rainy weekend?", "Museums, a long lunch, a film."),
                        ("Explain Python decorators", "What is a decorator? Show a short example.", CODE_ANSWER)):
        c = store.create(title)
        store.add_message(c.id, "user", q)
        store.add_message(c.id, "assistant", a, {"model": "smollm2-135m", "finish": "stop", "tokens_per_s": 71.2,
                                                 "completion_tokens": 96, "ttft_s": 0.21})
        seeded[title] = c

    # a chat with a tool call: forced once, allowed for the chat, shown opened
    hearth.chat.new_conversation()
    hearth.chat.configure(sampling=Sampling(temperature=0.2, top_p=0.95, max_tokens=60, seed=11))
    hearth.chat.configure(sampling=Sampling(temperature=0.2, top_p=0.95, max_tokens=200, seed=11))
    tools_chat = hearth.chat.current
    tools_chat.options.update(tool_choice={"type": "function", "function": {"name": "get_weather"}})
    hearth.chat.configure(system_prompt="You are a helpful assistant. When a tool has answered, tell the user "
                                        "what it said in one short sentence.")
    hearth.chat.max_steps = 2
    hearth.chat_page.input.setPlainText("What is the weather in Lisbon today? Use the tool.")
    hearth.chat_page.send()
    await wait_for(lambda: getattr(hearth.chat_page, "approval", None) is not None or not hearth.chat.busy, 600,
                   "the approval dialog")
    assert hearth.chat_page.approval is not None, f"no tool call: {hearth.chat.messages.items()[-1]}"
    await asyncio.sleep(0.8)
    approval_call = ToolCall(**{k: v for k, v in hearth.chat.messages.items()[-1].meta["tool_calls"][0].items()
                                if k in ToolCall.__slots__})
    screen(out / "tool-approval-light.png")
    hearth.chat_page.approval.chat_button.click()
    await wait_for(lambda: not hearth.chat.busy, 600, "the tool answer")
    report["tool_answer"] = hearth.chat.messages.items()[-1].meta

    # a chat with a document: the passage cited
    doc = Path(tempfile.mkdtemp(prefix="hearth-doc-")) / "harbour-notes.md"
    doc.write_text(harbour_notes())
    hearth.chat.new_conversation()
    hearth.chat.configure(sampling=Sampling(temperature=0.0, top_p=1.0, max_tokens=60, seed=11))
    doc_chat = hearth.chat.current
    doc_chat.options["ctx"] = 1024
    store.update(doc_chat)
    await hearth.documents.add(doc, doc_chat)
    hearth.chat_page.input.setPlainText("What is the name of the lighthouse keeper's cat? Answer from the notes.")
    hearth.chat_page.send()
    await wait_for(lambda: not hearth.chat.busy, 600, "the document answer")
    report["document_answer"] = hearth.chat.messages.items()[-1].meta.get("citations", [])[:1]

    await hearth.models.refresh()
    await hearth.models.load("minilm-l6", pin=True)  # the embedder stays: shown pinned
    files = []
    for theme in THEMES:
        hearth.apply_theme(dark=theme == "dark")
        for page in PAGES:
            if page.startswith("chat"):
                w.show_page("Chat")
                shown = {"chat-tools": tools_chat, "chat-document": doc_chat,
                         "chat-code": seeded["Explain Python decorators"]}[page]
                hearth.chat.select(shown.id)
                await asyncio.sleep(0.4)
                view = hearth.chat_page.view
                for mw in view.widgets:
                    for block in mw.tool_calls.blocks:
                        block.toggle.setChecked(True)
                await asyncio.sleep(0.3)
                view.verticalScrollBar().setValue(view.verticalScrollBar().maximum())
            elif page in ("settings", "mcp-servers"):
                w.show_page("Settings")
                hearth.settings_tabs.setCurrentIndex(0 if page == "settings" else 1)
            else:
                w.show_page(page.capitalize())
                if page == "models":
                    hearth.models_page.tabs.setCurrentIndex(0)
            await asyncio.sleep(0.6)
            path = out / f"{page}-{theme}.png"
            w.grab().save(str(path))
            files.append(str(path))
        if theme == "dark":  # the same question in the dark theme, over the tool chat
            w.show_page("Chat")
            hearth.chat.select(tools_chat.id)
            dialog = ToolApprovalDialog(approval_call, approval_call.server, hearth.chat_page)
            dialog.open()
            await asyncio.sleep(0.8)
            screen(out / "tool-approval-dark.png")
            dialog.reject()
        files.append(str(out / f"tool-approval-{theme}.png"))
    report["files"] = files
    report["catalog_rows"] = hearth.models.catalog.rowCount()
    return report


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    display = start_display()
    data = Path(tempfile.mkdtemp(prefix="hearth-shots-"))
    os.environ["HEARTH_DATA_DIR"] = str(data)
    try:
        import qasync
        from PySide6.QtWidgets import QApplication

        from app.composition import HearthApp
        from runtime.server.launcher import free_port

        qapp = QApplication([])
        loop = qasync.QEventLoop(qapp)
        asyncio.set_event_loop(loop)
        with loop:
            (data / "mcp-servers.json").write_text(json.dumps({"servers": [
                {"name": "weather", "command": sys.executable, "args": [str(ROOT / "bench" / "mcp_demo_server.py")]}]}))
            hearth = HearthApp(qapp, data, port=free_port(), tray_available=False)
            try:
                report = loop.run_until_complete(drive(hearth, args.out))
            finally:
                loop.run_until_complete(hearth.shutdown())
    finally:
        if display is not None:
            display.terminate()
        shutil.rmtree(data, ignore_errors=True)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
