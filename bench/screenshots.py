"""Screenshots of the desktop app: a real window under Xvfb, a short chat with the default model,
and the model manager. Saves docs/screenshots/chat.png and models.png; prints JSON.

    python bench/screenshots.py [--out docs/screenshots] [--prompt "..."]

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


async def drive(hearth, out: Path, prompts: list[str]) -> dict:
    from app.conversations import Sampling

    report: dict = {}
    assert await hearth.start(), "the service did not start"
    await wait_for(lambda: hearth.service.loaded_model is not None, 300, "the default model")
    w = hearth.window
    w.resize(1280, 800)
    w.show()
    for title in ("Trip ideas for a rainy weekend", "Explain Python decorators"):
        c = hearth.chat.store.create(title)
        hearth.chat.store.add_message(c.id, "user", title)
    hearth.chat.new_conversation()
    hearth.chat.configure(sampling=Sampling(temperature=0.3, top_p=0.95, max_tokens=160, seed=11))
    for prompt in prompts:
        hearth.chat_page.input.setPlainText(prompt)
        hearth.chat_page.send()
        await wait_for(lambda: not hearth.chat.busy, 600, "the answer")
    answer = hearth.chat.messages.items()[-1]
    report["answer_meta"] = answer.meta
    await asyncio.sleep(0.5)
    w.grab().save(str(out / "chat.png"))

    w.show_page("Models")
    await hearth.models.refresh()
    await asyncio.sleep(1.0)
    page = hearth.models_page
    if hearth.models.catalog.rowCount():
        page.tabs.setCurrentIndex(1)
    await asyncio.sleep(0.5)
    w.grab().save(str(out / "models.png"))
    report["catalog_rows"] = hearth.models.catalog.rowCount()
    report["local_rows"] = hearth.models.local.rowCount()
    return report


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    p.add_argument("--prompt", action="append",
                   help="a message to send (repeatable); default: a two-turn chat")
    args = p.parse_args()
    prompts = args.prompt or ["Give three short tips for staying focused while studying, as a bulleted list.",
                              "Show a Python one-liner that reverses a string, in a code block."]
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
            hearth = HearthApp(qapp, data, port=free_port(), tray_available=False)
            try:
                report = loop.run_until_complete(drive(hearth, args.out, prompts))
            finally:
                loop.run_until_complete(hearth.shutdown())
    finally:
        if display is not None:
            display.terminate()
        shutil.rmtree(data, ignore_errors=True)
    report["files"] = [str(args.out / "chat.png"), str(args.out / "models.png")]
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
