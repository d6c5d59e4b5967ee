"""The service the app talks to: attach to one on the configured port, or run one as a child.

The child is ``hearth serve`` in its own process (the tray service); its output is kept as a log
tail. A monitor polls ``/health`` and reports the state, so the window notices a service that
died or a port taken by another program.
"""

from __future__ import annotations

import asyncio
import collections
import subprocess
import threading
import time

from PySide6.QtCore import QObject, Signal

from app import background
from app.api_client import ApiClient
from app.errors import ApiProblem, NotHearth, ServiceUnreachable, UserError, explain
from app.settings import AppSettings
from runtime.self_command import hearth_argv

# Service states, as the window shows them.
CHECKING, STARTING, RUNNING, STOPPING, STOPPED, DIED, UNREACHABLE, FOREIGN = (
    "checking", "starting", "running", "stopping", "stopped", "died", "unreachable", "foreign")


class ServiceController(QObject):
    """Owns the answer to "is there a Hearth service, and is it ours?"."""

    state_changed = Signal(str)
    health_changed = Signal(dict)  # the last /health body
    stats_changed = Signal(dict)  # the last /hearth/stats body
    log_line = Signal(str)
    problem = Signal(object)  # UserError, or None when the problem is gone

    def __init__(self, client: ApiClient, settings: AppSettings, *, poll_s: float = 1.0,
                 log_lines: int = 500) -> None:
        super().__init__()
        self.client, self.settings, self.poll_s = client, settings, poll_s
        self.state = CHECKING
        self.health: dict = {}
        self.stats: dict = {}
        self.log: collections.deque[str] = collections.deque(maxlen=log_lines)
        self.proc: subprocess.Popen | None = None
        self._stopping = False
        self._monitor: asyncio.Task | None = None
        self.pending_url = ""  #: the address the settings name, once the running service restarts

    @property
    def url(self) -> str:
        return self.client.base_url

    @property
    def owned(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def loaded_model(self) -> str | None:
        """The loaded models, by name ("a, b" when several are resident), or None."""
        engine = self.health.get("engine") or {}
        names = [m["id"] for m in engine.get("models") or () if isinstance(m, dict) and m.get("id")]
        return ", ".join(names) if names else engine.get("model")

    def _set(self, state: str, problem: UserError | None = None) -> None:
        if state != RUNNING:  # what a service said stops being true when it stops answering
            self._forget()
        if state != self.state:
            self.state = state
            self.state_changed.emit(state)
        self.problem.emit(problem)

    def _forget(self) -> None:
        """Drop the last health and counters: pages show no models or numbers the service
        is not reporting now."""
        if self.health:
            self.health = {}
            self.health_changed.emit({})
        if self.stats:
            self.stats = {}
            self.stats_changed.emit({})

    async def ensure(self, timeout: float = 180.0) -> bool:
        """Attach to the service on the port, or start one; True when one answers."""
        self._set(CHECKING)
        try:
            await self._check()
        except ServiceUnreachable:
            return await self.start(timeout)
        except NotHearth as e:
            self._set(FOREIGN, explain(e, port=self.settings.port))
            return False
        self._watch()
        return True

    async def _check(self) -> dict:
        self.health = await self.client.health()
        self.health_changed.emit(self.health)
        self._set(RUNNING)
        return self.health

    async def start(self, timeout: float = 180.0) -> bool:
        """Start ``hearth serve`` as a child and wait for its /health."""
        if self.owned:
            return True
        self._stopping = False
        if self.pending_url:  # the new address applies now that the service starts again
            self.client.base_url, self.pending_url = self.pending_url, ""
        self._set(STARTING)
        s = self.settings
        serve = ["serve", "--host", s.host, "--port", str(s.port), *s.serve_args()]
        cmd = [*hearth_argv(), *serve]  # the bundled executable when frozen
        self._append_log(f"$ hearth {' '.join(serve)}")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     bufsize=1, errors="replace")
        loop = asyncio.get_running_loop()
        threading.Thread(target=self._pump, args=(self.proc, loop), daemon=True).start()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self._died()
                return False
            try:
                await self._check()
                self._watch()
                return True
            except NotHearth as e:
                self._set(FOREIGN, explain(e, port=s.port))
                return False
            except ApiProblem:
                await asyncio.sleep(0.2)
        self._set(DIED, UserError("The Hearth service did not start in time.",
                                  f"It gave no answer on {self.url} after {timeout:.0f} seconds.",
                                  "Look at the log on the Server page, then press Restart.", "service_stopped"))
        return False

    def _pump(self, proc: subprocess.Popen, loop: asyncio.AbstractEventLoop) -> None:
        assert proc.stdout is not None  # started with stdout=PIPE
        for line in proc.stdout:
            try:
                loop.call_soon_threadsafe(self._append_log, line.rstrip("\n"))
            except RuntimeError:  # the loop closed: the app is quitting
                return

    def _append_log(self, line: str) -> None:
        self.log.append(line)
        self.log_line.emit(line)

    def _died(self) -> None:
        code = self.proc.returncode if self.proc else None
        self._set(DIED, UserError("The Hearth service stopped.",
                                  f"Its process ended (exit code {code}).",
                                  "Press Restart to start it again; the log on the Server page says why it stopped.",
                                  "service_stopped"))

    async def stop(self) -> None:
        """Stop the child service; a service the app did not start is left alone."""
        self._stopping = True
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            self._set(STOPPING)  # ending its models can take seconds: the window says so meanwhile
            proc.terminate()
            loop = asyncio.get_running_loop()
            try:
                await asyncio.wait_for(loop.run_in_executor(None, proc.wait), 15)
            except TimeoutError:
                proc.kill()
                await loop.run_in_executor(None, proc.wait)
            self._append_log(f"(service stopped, exit code {proc.returncode})")
        self._set(STOPPED, None)

    def set_address(self, url: str) -> bool:
        """The settings name a new address. A service this app runs keeps its old one until it
        restarts (``pending_url`` says so meanwhile); otherwise the app talks to the new address
        from now on. True when the app should look at what answers there (``recheck``)."""
        if url == self.client.base_url:
            self.pending_url = ""
            return False
        if self.owned:
            self.pending_url = url
            self.state_changed.emit(self.state)  # the Server page shows the address to come
            return False
        self.pending_url = ""
        self.client.base_url = url
        self._set(CHECKING)  # nothing is known of the new address yet
        return True

    async def recheck(self) -> bool:
        """Ask the address what runs there now; True when a Hearth service answers."""
        self._stopping = False
        try:
            await self._check()
        except NotHearth as e:
            self._set(FOREIGN, explain(e, port=self.settings.port))
            return False
        except ApiProblem:
            self._set(STOPPED, None)  # nothing answers there: the user can start a service
            return False
        self._watch()
        return True

    async def restart(self) -> bool:
        if self.owned:
            await self.stop()
        return await self.start()

    def _watch(self) -> None:
        if self._monitor is None or self._monitor.done():
            self._monitor = background.start(self._watch_loop(), "watching the service")

    async def _watch_loop(self) -> None:
        while not self._stopping:
            await asyncio.sleep(self.poll_s)
            if self._stopping or self.state in (STARTING,):
                continue
            try:
                await self._check()
                self.stats = await self.client.get("/hearth/stats", timeout=5.0)
                self.stats_changed.emit(self.stats)
            except NotHearth as e:
                self._set(FOREIGN, explain(e, port=self.settings.port))
                return
            except ServiceUnreachable as e:
                if self._stopping:
                    return
                if self.proc is not None and self.proc.poll() is not None:
                    self._died()
                elif self.proc is None:
                    self._set(UNREACHABLE, UserError(
                        "The Hearth service stopped answering.", str(e),
                        "Press Restart to start a service from the app.", "service_unreachable"))
                else:
                    continue  # our child is alive but busy; ask again
                return
            except ApiProblem:
                continue

    async def close(self, stop_child: bool = True) -> None:
        self._stopping = True
        if self._monitor is not None:
            self._monitor.cancel()
        if stop_child and self.proc is not None:
            await self.stop()
