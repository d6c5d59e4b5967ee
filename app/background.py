"""Tasks the app starts and does not await (a stream, a follower, a poll): each one's failure is
retrieved when it ends and said, never left for asyncio to report as "Task exception was never
retrieved" whenever the task happens to be collected."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from functools import partial
from typing import Any

log = logging.getLogger("hearth.app")

#: schedules a coroutine as one of the app's tasks and returns the task (``HearthApp.spawn``)
Run = Callable[[Coroutine[Any, Any, Any]], "asyncio.Task[Any]"]


def start(coro: Coroutine[Any, Any, Any], what: str,
          failed: Callable[[BaseException], None] | None = None) -> asyncio.Task:
    """Run ``coro`` as a task; an exception it ends with is logged as ``what`` stopping and
    handed to ``failed`` (a cancellation is the normal end of a follower: nothing is said)."""
    task = asyncio.ensure_future(coro)
    task.add_done_callback(partial(_ended, what, failed))
    return task


def _ended(what: str, failed: Callable[[BaseException], None] | None, task: asyncio.Task) -> None:
    if task.cancelled():
        return
    e = task.exception()
    if e is None:
        return
    log.warning("%s stopped: %r", what, e)
    if failed is not None:
        failed(e)
