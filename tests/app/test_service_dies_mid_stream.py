"""The service killed while an answer streams (a real ``hearth serve``, SIGKILL): the answer
ends as interrupted, the window says the service stopped, and nothing the app runs in the
background fails unseen: no "Task exception was never retrieved", no exception escapes a slot."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import sys

from app.conversations import Sampling
from runtime.server.launcher import ServiceProcess


def test_the_service_dying_mid_stream_leaves_no_unhandled_error(smollm2_path, driver, make_app, caplog):
    service = ServiceProcess("--ctx", "2048").wait_ready()
    workers = []
    unhandled: list[str] = []
    loop = driver.loop
    old_handler, old_hook = loop.get_exception_handler(), sys.excepthook
    loop.set_exception_handler(lambda _loop, context: unhandled.append(str(context.get("message"))
                                                                       + " " + repr(context.get("exception"))))
    tasks: list[asyncio.Task] = []  # every task started meanwhile: one that failed unseen is found here

    def task(loop, coro, **kw):
        tasks.append(asyncio.Task(coro, loop=loop, **kw))
        return tasks[-1]
    loop.set_task_factory(task)
    sys.excepthook = lambda kind, value, tb: unhandled.append(f"{kind.__name__}: {value}")
    caplog.set_level(logging.ERROR)
    try:
        h = make_app(service.port)
        assert driver.run(h.start())
        h.models.follow_downloads()  # every background follower the app runs, running
        h.chat.new_conversation()
        h.chat.configure(sampling=Sampling(temperature=0.0, top_p=1.0, max_tokens=1500, seed=3))
        h.chat_page.input.setPlainText("Count from 1 to 500, one number per line.")
        h.chat_page.send_button.click()
        driver.until(lambda: len(h.chat.messages.item(1).content) > 20, 120, "the first streamed text")
        workers = [m["pid"] for m in service.stats()["models"] if m.get("pid")]
        os.kill(service.proc.pid, signal.SIGKILL)
        driver.until(lambda: not h.chat.busy, 60, "the cut answer to end")
        answer = h.chat.messages.item(1)
        assert answer.meta["finish"] == "interrupted" and answer.content.strip(), answer.meta
        assert h.window.banner.problem is not None and h.window.banner.problem.code == "service_unreachable"
        driver.until(lambda: h.service.state in ("died", "unreachable", "stopped"), 30, "the app to see it")
        driver.pump(2.0)  # the followers notice too
        del h
        gc.collect()  # a failed task that nobody awaited says so when it is collected
        driver.pump(0.2)
    finally:
        loop.set_exception_handler(old_handler)
        loop.set_task_factory(None)
        sys.excepthook = old_hook
        for pid in workers:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        service.stop()
    # what "Task exception was never retrieved" would say once the task is collected
    unseen = [f"{t.get_coro().__qualname__}: {t.exception()!r}" for t in tasks
              if t.done() and not t.cancelled() and t._log_traceback]
    assert not unseen, unseen
    logged = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert not unhandled, unhandled
    assert not [m for m in logged if "never retrieved" in m or "Unhandled" in m or "failed" in m], logged
