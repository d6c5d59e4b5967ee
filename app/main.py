"""``hearth app``: the desktop window on one asyncio loop (qasync) shared with Qt."""

from __future__ import annotations

import asyncio
import sys


def run(port: int | None = None, *, tray: bool = False, smoke_test: bool = False) -> int:
    """Open the desktop app; returns when the user quits.

    ``tray``: start with the window hidden (the login item), where there is a tray to show it
    from. ``smoke_test``: open the window, wait for the service, then quit: exit 0 when both
    came up (the installer test runs the bundled app this way, offscreen)."""
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
    assert isinstance(qapp, QApplication)  # the window needs a widget application, not a core one
    qapp.setApplicationName("Hearth")
    qapp.setOrganizationName("Hearth")
    qapp.setDesktopFileName("hearth")  # matches hearth.desktop: Wayland shells find the icon there
    qapp.setWindowIcon(_app_icon())
    instance = None
    if not smoke_test:
        from app.single_instance import claim

        instance = claim(data_dir())
        if instance is None:
            print("hearth app: Hearth is already running; its window was brought to the front.", flush=True)
            return 0
    loop = qasync.QEventLoop(qapp)
    asyncio.set_event_loop(loop)
    with loop:
        hearth = HearthApp(qapp, data_dir(), port=port, start_on_login=autostart_setter(),
                           start_on_login_state=autostart_state())
        if smoke_test or instance is None:  # the smoke test claims no instance
            return loop.run_until_complete(_smoke_test(hearth))
        instance.activated.connect(hearth.open_window)  # a second launch shows this window
        hearth.spawn(hearth.start(show_window=not tray))
        loop.run_until_complete(hearth.closed)
        instance.close()
    return 0


async def _smoke_test(hearth) -> int:
    service_ok = await hearth.start()
    shown = hearth.window.isVisible()
    print(f"hearth app: main window {'shown' if shown else 'not shown'} ({hearth.window.windowTitle()!r}), "
          f"service {hearth.service.state}", flush=True)
    await hearth.shutdown()
    return 0 if service_ok and shown else 1


def _app_icon():
    from PySide6.QtGui import QIcon

    from app.icons import icon_files

    icon = QIcon()
    for path in icon_files():
        icon.addFile(str(path))
    return icon
