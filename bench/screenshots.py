"""Screenshots of the desktop app: a real window under Xvfb, a chat with a tool call (an MCP
server of its own), a chat with a document citation, an answer with two versions and files
attached to the next message, a document being indexed, the first-run suggestion, the Hugging
Face tab (a loopback hub of its own, never the real one), an answer with math, a search with its
hits, a model's settings, a chat's settings and every other page, each in the light and the dark
theme. Saves docs/screenshots/PAGE-THEME.png; prints JSON. ``--sizes all`` takes every shot again
at 800x600, 1440x900 and 1920x1080 too (PAGE-THEME-WxH.png), for a look at each size.

    python bench/screenshots.py [--out docs/screenshots] [--sizes 1280x800|all|WxH,...]

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


def start_display(size: str = "1920x1200x24") -> subprocess.Popen | None:
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


PAGES = ("chat-tools", "chat-document", "chat-code", "chat-math", "chat-search", "chat-versions", "chat-indexing",
         "first-run", "models", "model-settings", "chat-settings", "hugging-face", "server", "settings", "mcp-servers",
         "narrow")
#: the window's size for the shots in docs/; ``--sizes all`` adds the others
DEFAULT_SIZE = (1280, 800)
ALL_SIZES = ((800, 600), (1280, 800), (1440, 900), (1920, 1080))
MATH_ANSWER = r"""The mean of $n$ values is $\bar{x} = \frac{1}{n}\sum_{i=1}^{n} x_i$, and the variance:

$$\sigma^2 = \frac{1}{n}\sum_{i=1}^{n} (x_i - \bar{x})^2$$

For $n = 4$ and $x = (2, 4, 4, 6)$: $\bar{x} = 4$ and $\sigma^2 = 2$, so $\sigma \approx 1.41$."""

HUB_CARD = """---
license: apache-2.0
base_model: HuggingFaceTB/SmolLM2-1.7B-Instruct
---
# SmolLM2 1.7B Instruct, GGUF

Quantized builds of **SmolLM2-1.7B-Instruct**, a compact model for chat, rewriting and
summarising that runs well on a laptop's processor.

## Which file?

| Quantization | Size | Use it when |
| --- | --- | --- |
| Q4_K_M | 1.06 GB | the balance most people want |
| Q5_K_M | 1.23 GB | you have memory to spare |
| Q8_0 | 1.82 GB | quality matters more than speed |

## Prompt format

The model uses ChatML; Hearth reads the template from the file.

See the [original model](https://huggingface.co/HuggingFaceTB/SmolLM2-1.7B-Instruct) for its
training data and evaluation.
"""


def start_hub():
    """A Hugging Face-compatible hub on loopback (the tests' own), with a few GGUF repositories;
    the service started later reaches it through HF_ENDPOINT."""
    from tests.hub_server import LoopbackHub

    hub = LoopbackHub().start()
    os.environ["HF_ENDPOINT"] = hub.url
    os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
    gb = 1 << 30
    repos = (("hearth-demo/SmolLM2-1.7B-Instruct-GGUF", 184_000, {"Q4_K_M": 1.06, "Q5_K_M": 1.23, "Q8_0": 1.82,
                                                                  "Q3_K_M": 0.86, "F16": 3.42}),
             ("hearth-demo/Qwen2.5-1.5B-Instruct-GGUF", 96_300, {"Q4_K_M": 0.99, "Q8_0": 1.65}),
             ("hearth-demo/Llama-3.2-1B-Instruct-GGUF", 71_800, {"Q4_K_M": 0.81, "Q6_K": 1.02}),
             ("hearth-demo/gemma-2-2b-it-GGUF", 43_500, {"Q4_K_M": 1.71}))
    for repo, downloads, quants in repos:
        name = repo.split("/")[1].removesuffix("-GGUF")
        hub.add_repo(repo, tags=["gguf", "en", "license:apache-2.0", "text-generation", "conversational",
                                 f"base_model:quantized:{repo.removesuffix('-GGUF')}"], downloads=downloads)
        for quant, size in quants.items():
            hub.add_file(repo, f"{name}-{quant}.gguf", b"GGUF", advertised_size=int(size * gb))
        hub.add_file(repo, "README.md", HUB_CARD.replace("SmolLM2-1.7B-Instruct", name).encode(), lfs=False)
    return hub
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


CODE_ANSWER_2 = """A decorator wraps a function to change what happens when it is called, without changing \
the function itself. Here one counts the calls:

```python
def counted(fn):
    def wrapper(*args, **kwargs):
        wrapper.calls += 1
        return fn(*args, **kwargs)
    wrapper.calls = 0
    return wrapper

@counted
def greet(name):
    return f"Hello, {name}!"
```

After `greet("Ada")`, `greet.calls` is 1."""


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


def screen(path: Path, window, dialog) -> None:
    """The window and the dialog over it: the part of the display they cover."""
    from PySide6.QtGui import QGuiApplication

    area = window.frameGeometry().united(dialog.frameGeometry())
    QGuiApplication.primaryScreen().grabWindow(0, area.x(), area.y(), area.width(), area.height()).save(str(path))


async def drive(hearth, out: Path, sizes: tuple[tuple[int, int], ...] = (DEFAULT_SIZE,)) -> dict:
    from app.conversations import Sampling
    from app.tool_loop import ToolCall

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
    math_chat = store.create("Mean and variance")
    store.add_message(math_chat.id, "user", "How do I compute the mean and the variance of four numbers?")
    store.add_message(math_chat.id, "assistant", MATH_ANSWER, {"model": "smollm2-135m", "finish": "stop",
                                                               "tokens_per_s": 69.8, "completion_tokens": 88,
                                                               "ttft_s": 0.19})
    versions_chat = store.create("Decorators, regenerated")
    q = store.add_message(versions_chat.id, "user", "What is a decorator? Show a short example.")
    for answer in (CODE_ANSWER, CODE_ANSWER_2):
        store.add_message(versions_chat.id, "assistant", answer, {"model": "smollm2-135m", "finish": "stop",
                                                                  "tokens_per_s": 70.4, "completion_tokens": 92,
                                                                  "ttft_s": 0.2}, parent_id=q.id)
    hearth.chat.reload()
    # the first-run suggestion shows on a fresh data directory: only in its own shot
    hearth.settings.suggestion_done = True
    hearth.chat_page.suggestion_card.hide()

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
    screen(out / "tool-approval-light.png", hearth.window, hearth.chat_page.approval)
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
    empty_chat = hearth.chat.new_conversation()
    attach_dir = Path(tempfile.mkdtemp(prefix="hearth-attach-"))
    notes_file, data_file = attach_dir / "meeting-notes.md", attach_dir / "timings.csv"
    notes_file.write_text("# Notes\n\nThe profiler shows three slow functions; time them.\n")
    data_file.write_text("function,seconds\nload,1.92\nparse,0.44\nrender,0.13\n")
    files = []
    for size in sizes:
        files += await _shots(hearth, out, size, tools_chat, doc_chat, seeded, math_chat, versions_chat, empty_chat,
                              notes_file, data_file, approval_call)
    report["files"] = files
    report["catalog_rows"] = hearth.models.catalog.rowCount()
    return report


async def _shots(hearth, out: Path, size: tuple[int, int], tools_chat, doc_chat, seeded, math_chat, versions_chat,
                 empty_chat, notes_file, data_file, approval_call) -> list[str]:
    """Every page in both themes with the window at ``size``."""
    from app.ui.tool_approval import ToolApprovalDialog

    w = hearth.window
    suffix = "" if size == DEFAULT_SIZE else f"-{size[0]}x{size[1]}"
    w.resize(*size)
    await asyncio.sleep(0.5)
    files = []
    for theme in THEMES:
        hearth.apply_theme(dark=theme == "dark")
        for page in PAGES:
            dialog = None
            if page in ("chat-tools", "chat-document", "chat-code", "chat-math"):
                w.show_page("Chat")
                shown = {"chat-tools": tools_chat, "chat-document": doc_chat, "chat-math": math_chat,
                         "chat-code": seeded["Explain Python decorators"]}[page]
                hearth.chat.select(shown.id)
                await asyncio.sleep(0.4)
                view = hearth.chat_page.view
                for mw in (view.widget_at(i) for i in range(hearth.chat.messages.rowCount())):
                    for block in mw.tool_calls.blocks:
                        block.toggle.setChecked(True)
                await asyncio.sleep(0.3)
                view.verticalScrollBar().setValue(view.verticalScrollBar().maximum())
            elif page == "chat-versions":  # ‹ 2 / 2 › under the answer, two files attached, the meter
                w.show_page("Chat")
                hearth.chat.select(versions_chat.id)
                page_ = hearth.chat_page
                page_.pending = []
                page_.attach_files([str(notes_file), str(data_file)])
                await wait_for(lambda: len(hearth.chat_page.pending) == 2, 20, "the attached files")
                page_.input.setPlainText("Now show it as a class decorator.")
                await asyncio.sleep(0.5)
                view = page_.view
                view.verticalScrollBar().setValue(view.verticalScrollBar().maximum())
            elif page == "chat-search":  # a search: each hit with the line that matched
                w.show_page("Chat")
                hearth.chat_page.sidebar.search.setText("decorator")
                await asyncio.sleep(0.4)
            elif page == "model-settings":  # a model's settings: how it is loaded
                w.show_page("Models")
                hearth.models_page.tabs.setCurrentIndex(0)
                hearth.models_page.show_settings("smollm2-135m")
                dialog = hearth.models_page.settings_dialog
                await wait_for(lambda: dialog.load.save_button.isEnabled(), 30, "the model's settings")
            elif page == "chat-settings":  # a chat's settings: its prompt, sampling and overflow policy
                w.show_page("Chat")
                hearth.chat.select(seeded["Explain Python decorators"].id)
                hearth.chat_page.toggle_settings()  # the panel beside the conversation, as Ctrl+, opens it
            elif page == "chat-indexing":  # a document being indexed: its progress line
                w.show_page("Chat")
                hearth.chat.select(doc_chat.id)
                hearth.chat_page.document_strip._indexing_changed("field-guide.pdf", 146, 412)
            elif page == "first-run":  # a fresh chat with the suggestion of the best model for this computer
                w.show_page("Chat")
                hearth.chat.select(empty_chat.id)
                hearth.first_run.offer(hearth.models.catalog.all_entries())
            elif page == "hugging-face":  # a search, a model picked: its facts, quantizations and card
                w.show_page("Models")
                mp = hearth.models_page
                mp.tabs.setCurrentWidget(mp.hub)
                if mp.hub.results.count() == 0:
                    mp.hub.query.setText("instruct")
                    mp.hub.search_button.click()
                    await wait_for(lambda: mp.hub.results.count() > 0, 60, "the hub search")
                    mp.hub.results.setCurrentRow(0)
                    await wait_for(lambda: mp.hub.quant.count() > 0 and "SmolLM2" in mp.hub.card_text.toPlainText(),
                                   60, "the model's files and card")
            elif page == "narrow":  # an 800x600 window: the rail folds to icons, the header keeps its title
                if size != DEFAULT_SIZE:
                    continue  # the sizes' own shots show it
                w.show_page("Chat")
                hearth.chat.select(seeded["Explain Python decorators"].id)
                w.resize(800, 600)
                await asyncio.sleep(0.8)
            elif page in ("settings", "mcp-servers"):
                w.show_page("Settings")
                hearth.settings_tabs.setCurrentIndex(0 if page == "settings" else 1)
            else:
                w.show_page(page.capitalize())
                if page == "models":
                    hearth.models_page.tabs.setCurrentIndex(0)
            await asyncio.sleep(0.6)
            path = out / f"{page}-{theme}{suffix}.png"
            if dialog is not None:  # a dialog is a window of its own: the screen shows it over the window
                screen(path, w, dialog)
                dialog.close()
            else:
                w.grab().save(str(path))
            files.append(str(path))
            if page == "narrow":
                w.resize(*size)
            elif page == "chat-settings":
                hearth.chat_page.toggle_settings()
            elif page == "chat-search":
                hearth.chat_page.sidebar.search.clear()
            elif page == "chat-versions":
                hearth.chat_page.input.clear()
                hearth.chat_page.pending = []
                hearth.chat_page._show_attachments()
            elif page == "chat-indexing":
                hearth.chat_page.document_strip._indexing_changed("field-guide.pdf", 412, 412)
            elif page == "first-run":
                hearth.chat_page.suggestion_card.hide()
            elif page == "hugging-face":
                hearth.models_page.tabs.setCurrentIndex(0)
        if theme == "dark" or suffix:  # the same question again (the light one at this size is taken above)
            w.show_page("Chat")
            hearth.chat.select(tools_chat.id)
            dialog = ToolApprovalDialog(approval_call, approval_call.server, hearth.chat_page)
            dialog.open()
            await asyncio.sleep(0.8)
            screen(out / f"tool-approval-{theme}{suffix}.png", w, dialog)
            dialog.reject()
        files.append(str(out / f"tool-approval-{theme}{suffix}.png"))
    return files


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    p.add_argument("--sizes", default="1280x800", help="window sizes: WxH,... or all (800x600, 1280x800, 1440x900, "
                                                       "1920x1080)")
    args = p.parse_args()
    sizes = ALL_SIZES if args.sizes == "all" else tuple(
        (int(s.split("x")[0]), int(s.split("x")[1])) for s in args.sizes.split(","))
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
            hub = start_hub()
            os.environ["HF_HOME"] = str(data / "hf-home")
            hearth = HearthApp(qapp, data, port=free_port(), tray_available=False)
            try:
                report = loop.run_until_complete(drive(hearth, args.out, sizes))
            finally:
                loop.run_until_complete(hearth.shutdown())
                hub.stop()
    finally:
        if display is not None:
            display.terminate()
        shutil.rmtree(data, ignore_errors=True)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
