"""Real Qt widgets offscreen on one qasync loop, and a real ``hearth serve`` on a free loopback port."""

from __future__ import annotations

import asyncio
import os
import time

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
qasync = pytest.importorskip("qasync")
pytest.importorskip("PySide6")

from runtime.server.launcher import ServiceProcess  # noqa: E402


class Driver:
    """Runs coroutines on the Qt-integrated loop, so widgets repaint while the test waits."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop

    def run(self, coro, timeout: float = 120.0):
        return self.loop.run_until_complete(asyncio.wait_for(coro, timeout))

    def until(self, predicate, timeout: float = 120.0, what: str = "condition") -> None:
        async def wait():
            deadline = time.monotonic() + timeout
            while not predicate():
                if time.monotonic() > deadline:
                    said = what() if callable(what) else what
                    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {said}")
                await asyncio.sleep(0.02)
        self.run(wait(), timeout + 10)

    def pump(self, seconds: float) -> None:
        self.run(asyncio.sleep(seconds))


@pytest.fixture(scope="module")
def driver(qapp):
    loop = qasync.QEventLoop(qapp)
    asyncio.set_event_loop(loop)
    yield Driver(loop)
    loop.run_until_complete(asyncio.sleep(0))
    asyncio.set_event_loop(None)
    loop.close()


@pytest.fixture(scope="module")
def service(smollm2_path):
    """A service the app attaches to, with the default model."""
    s = ServiceProcess("--parallel", "2", "--ctx", "2048").wait_ready()
    yield s
    s.stop()


@pytest.fixture(autouse=True)
def _clean_application(qapp):
    """Each test starts from a bare application: a style sheet set on the whole application
    (by a test of one widget) would override every window's theme in the tests after it."""
    yield
    if qapp.styleSheet():
        qapp.setStyleSheet("")


@pytest.fixture()
def make_app(qapp, driver, tmp_path):
    """Build ``HearthApp`` instances on a data directory; each is shut down after the test."""
    from app.composition import HearthApp

    made = []

    def make(port: int, data_dir=None, **kw) -> HearthApp:
        h = HearthApp(qapp, data_dir or tmp_path, port=port, poll_s=0.3, **kw)
        made.append(h)
        return h

    yield make
    for h in made:
        if not h.closed.done():
            driver.run(h.shutdown(), 60)
