"""``hearth app``: the desktop window on one asyncio loop (qasync) shared with Qt."""

from __future__ import annotations

import asyncio
import sys


def run(port: int | None = None) -> int:
    """Open the desktop app; returns when the user quits."""
    try:
        import qasync
        from PySide6.QtWidgets import QApplication
    except ImportError as e:
        print(f"hearth app: the desktop app needs PySide6 and qasync ({e.name} is missing). "
              "Install them with: pip install 'hearth-llm[app]'", file=sys.stderr)
        return 1
    from runtime.config import data_dir

    from app.composition import HearthApp, autostart_setter, autostart_state

    qapp = QApplication.instance() or QApplication(sys.argv[:1])
    qapp.setApplicationName("Hearth")
    qapp.setOrganizationName("Hearth")
    loop = qasync.QEventLoop(qapp)
    asyncio.set_event_loop(loop)
    with loop:
        hearth = HearthApp(qapp, data_dir(), port=port, start_on_login=autostart_setter(),
                           start_on_login_state=autostart_state())
        hearth.spawn(hearth.start())
        loop.run_until_complete(hearth.closed)
    return 0
