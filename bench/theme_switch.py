"""Switching theme in the whole window: the longest the event loop is blocked when the app goes
from light to dark and back (every page built, a chat of 200 messages open, the window shown at
1180x760). Real widgets (offscreen by default), the app's own composition root; prints JSON.

    python bench/theme_switch.py [--switches 6] [--messages 200]

Each switch is ``HearthApp.apply_theme`` as the Settings page calls it, followed by half a
second of the loop (the rows rebuilt a few per turn); the Ticker of ``bench/message_view.py``
measures the blocks. Nothing is started: no service, no model.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--switches", type=int, default=6)
    p.add_argument("--messages", type=int, default=200)
    args = p.parse_args()

    import qasync
    from PySide6.QtWidgets import QApplication

    from bench.message_view import Ticker, conversation, run_for
    from runtime.server.launcher import free_port

    app = QApplication.instance() or QApplication([])
    loop = qasync.QEventLoop(app)
    asyncio.set_event_loop(loop)
    from app.composition import HearthApp

    with tempfile.TemporaryDirectory() as tmp:
        h = HearthApp(app, Path(tmp), port=free_port(), poll_s=60)
        h.settings.theme = "light"
        h.apply_theme()
        c = h.store.create("Long chat")
        h.store.add_messages(c.id, [(m.role, m.content, m.meta) for m in conversation(args.messages)])
        h.chat.reload()
        h.window.resize(1180, 760)
        h.window.show()
        h.chat.select(c.id)
        run_for(app, 1.5)
        for page in ("Models", "Server", "Settings", "Chat"):  # every page polished once, as a user would
            h.window.show_page(page)
            run_for(app, 0.3)
        results = []
        for i in range(args.switches):
            h.settings.theme = "dark" if i % 2 == 0 else "light"
            ticker = Ticker()
            ticker.start()
            run_for(app, 0.05)
            t = time.perf_counter()
            h.apply_theme()
            call_ms = (time.perf_counter() - t) * 1000
            run_for(app, 0.5)
            r = ticker.stop()
            r["apply_theme_call_ms"] = round(call_ms, 1)
            r["to"] = h.settings.theme
            results.append(r)
        worst = max(r["worst_block_ms"] for r in results)
        print(json.dumps({"switches": results, "worst_block_ms": worst,
                          "median_worst_block_ms": sorted(r["worst_block_ms"] for r in results)[len(results) // 2],
                          "messages": args.messages, "target_ms": 50,
                          "load": os.getloadavg()[0], "cpus": os.cpu_count()}, indent=2))
        h.window.close_handler = None
        h.window.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
