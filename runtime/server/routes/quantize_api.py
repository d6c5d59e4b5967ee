"""Making a smaller version of a local model over HTTP: ``hearth quantize`` as a job.

``POST /hearth/quantize {"model", "to"}`` starts ``hearth quantize MODEL --to TO --json`` in a
child process (hours of native work must not run in the service, and ending the child is the
only way to stop llama.cpp's quantizer), answers 202 with the job, and reads the child's JSON
lines as progress. One job runs at a time (it takes every core); another is a 409. ``GET
/hearth/quantize`` lists the jobs of this run, ``DELETE /hearth/quantize/{id}`` stops one (the
command keeps the steps it finished, so the same request later resumes). The new file is
registered as a local model by the command itself; it is written into the data directory's
``quantized/`` folder.

Starting one is the user's act (``require_user_act``): it takes the machine's CPU for minutes
and writes files beside the model, so a page in a browser or another program on the API key
alone cannot set it off. Stopping one is too: it throws that work away.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web

from runtime.private_files import private_dir
from runtime.self_command import hearth_argv
from runtime.server.app_keys import CONFIG, MANAGER
from runtime.server.errors import ApiError, bad_request
from runtime.server.generate.generation import model_error
from runtime.server.models.model_refs import ModelPathRefused
from runtime.server.security import require_user_act
from runtime.store.gguf_file import InvalidModelFile
from runtime.store.resolve import UnknownModel

#: lines of the command's error output kept for the job's error
ERROR_TAIL = 4000
#: the longest line read from the command (its result names a type for every tensor)
RESULT_LINE_BYTES = 1 << 20


@dataclass(slots=True)
class QuantizeJob:
    id: str
    model: str
    to: str
    state: str = "running"  #: running | done | failed | stopped
    step: str = "starting"
    done: int = 0
    total: int = 0
    started: float = field(default_factory=time.time)
    ended: float | None = None
    result: dict | None = None
    error: str | None = None
    proc: asyncio.subprocess.Process | None = None

    def to_dict(self) -> dict:
        return {"id": self.id, "model": self.model, "to": self.to, "state": self.state, "step": self.step,
                "done": self.done, "total": self.total, "started": self.started, "ended": self.ended,
                "result": self.result, "error": self.error}


class QuantizeBusy(Exception):
    """Another job runs (or is starting): one at a time."""

    def __init__(self, job: QuantizeJob) -> None:
        super().__init__(job.id)
        self.job = job


class QuantizeJobs:
    """The jobs of this run. A job is claimed (``claim``: the check and the entry in one step,
    with no ``await`` between them) before the model is resolved and the child started, so
    requests that arrive together cannot all pass the one-job check."""

    def __init__(self) -> None:
        self.jobs: dict[str, QuantizeJob] = {}
        self._tasks: set[asyncio.Task] = set()

    def running(self) -> QuantizeJob | None:
        return next((j for j in self.jobs.values() if j.state == "running"), None)

    def claim(self, model: str, to: str) -> QuantizeJob:
        """A new running job (no process yet); ``QuantizeBusy`` when one runs."""
        busy = self.running()
        if busy is not None:
            raise QuantizeBusy(busy)
        job = QuantizeJob(uuid.uuid4().hex[:12], model, to)
        self.jobs[job.id] = job
        return job

    def release(self, job: QuantizeJob) -> None:
        """Forget a claimed job whose start failed (its model was not found, ...)."""
        if job.proc is None:
            self.jobs.pop(job.id, None)

    async def start(self, job: QuantizeJob, path: Path, output: Path, data_dir: Path,
                    compare: bool = True) -> QuantizeJob:
        """Start the claimed ``job``'s command (unless it was stopped while starting)."""
        env = {**os.environ, "HEARTH_DATA_DIR": str(data_dir)}
        private_dir(output.parent)
        proc = await asyncio.create_subprocess_exec(
            *hearth_argv(), "quantize", str(path), "--to", job.to, "--output", str(output), "--json",
            *([] if compare else ["--no-compare"]),
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
            limit=RESULT_LINE_BYTES, start_new_session=True)  # its own group: the quantizer it spawns ends with it
        job.proc = proc
        task = asyncio.create_task(self._follow(job))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        if job.state == "stopped":  # stopped while the process started
            _signal_group(proc.pid, signal.SIGTERM)
        return job

    async def _follow(self, job: QuantizeJob) -> None:
        proc = job.proc
        assert proc is not None and proc.stdout is not None and proc.stderr is not None
        err = asyncio.create_task(proc.stderr.read())
        async for raw in proc.stdout:
            try:
                line = json.loads(raw)
            except ValueError:
                continue
            if not isinstance(line, dict):
                continue
            if "result" in line:
                job.result = line["result"]
            elif "step" in line:
                job.step, job.done, job.total = str(line["step"]), int(line.get("done", 0)), int(line.get("total", 0))
        code = await proc.wait()
        tail = (await err).decode("utf-8", "replace").strip()[-ERROR_TAIL:]
        job.ended = time.time()
        if job.state == "stopped":
            return
        if code == 0 and job.result is not None:
            job.state, job.step = "done", "done"
        else:
            job.state = "failed"
            job.error = tail.splitlines()[-1].removeprefix("hearth: ") if tail else f"the quantizer ended with code {code}"

    async def stop(self, job: QuantizeJob) -> None:
        if job.state == "running" and job.proc is None:  # still starting: start() ends it
            job.state, job.ended = "stopped", time.time()
            return
        if job.state == "running" and job.proc is not None and job.proc.returncode is None:
            job.state = "stopped"
            _signal_group(job.proc.pid, signal.SIGTERM)  # the command and the quantizer process it spawned
            try:
                await asyncio.wait_for(job.proc.wait(), 10)
            except asyncio.TimeoutError:
                _signal_group(job.proc.pid, signal.SIGKILL)
                await job.proc.wait()
            job.ended = time.time()

    async def close(self) -> None:
        for job in list(self.jobs.values()):
            await self.stop(job)
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(task, 5)


def _signal_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


JOBS = web.AppKey("quantize_jobs", QuantizeJobs)


async def quantize_ctx(app: web.Application) -> AsyncIterator[None]:
    app[JOBS] = QuantizeJobs()
    yield
    await app[JOBS].close()


async def start(request: web.Request) -> web.Response:
    from runtime.quantize.target import BadTarget, parse_target  # gguf, numpy: only when asked
    from runtime.server.validation import read_json

    require_user_act(request, "making a smaller version of a model",
                     "use the Models page's \"Make a smaller version\" or run `hearth quantize MODEL --to SIZE`",
                     "quantize_not_confirmed")
    body = await read_json(request)
    model, to = (body.get("model"), body.get("to")) if isinstance(body, dict) else (None, None)
    if not isinstance(model, str) or not model.strip():
        raise bad_request("'model' is required: a local model's id", "model")
    if not isinstance(to, str) or not to.strip() or len(to) > 32:
        raise bad_request("'to' is required: a file size (90MB), bits per weight (4.5bpw) or a mix (Q4_K_M)", "to")
    compare = body.get("compare", True)
    if not isinstance(compare, bool):
        raise bad_request("'compare' is true or false: also make and measure llama.cpp's stock mix", "compare")
    try:
        target = parse_target(to)
    except BadTarget as e:
        raise bad_request(str(e), "to") from None
    jobs = request.app[JOBS]
    try:
        job = jobs.claim(model.strip(), to.strip())
    except QuantizeBusy as e:
        busy = e.job
        raise ApiError(409, f"{busy.model} is being made smaller ({busy.step}); one model at a time: "
                            f"stop it with DELETE /hearth/quantize/{busy.id} or wait", code="quantize_busy") from None
    try:
        try:
            resolved = await asyncio.to_thread(request.app[MANAGER].resolve, model.strip())
        except (UnknownModel, InvalidModelFile, ModelPathRefused) as e:
            raise model_error(e) from None
        job.model = resolved.id
        data_dir = request.app[CONFIG].data_dir
        # into the data directory: the source may sit where nothing may be written (a bundle, a
        # read-only models folder)
        output = data_dir / "quantized" / f"{Path(resolved.path).stem}.hearth-{target.label()}.gguf"
        await jobs.start(job, Path(resolved.path), output, data_dir, compare)
    finally:
        jobs.release(job)  # a job whose child did not start is forgotten
    return web.json_response(job.to_dict(), status=202)


async def list_jobs(request: web.Request) -> web.Response:
    return web.json_response({"jobs": [j.to_dict() for j in request.app[JOBS].jobs.values()]})


async def stop(request: web.Request) -> web.Response:
    # stopping throws away minutes of someone's work: the same act as starting
    require_user_act(request, "stopping a quantize job",
                     "use the Models page's \"Stop\" or end `hearth quantize` in its terminal",
                     "quantize_not_confirmed")
    job = request.app[JOBS].jobs.get(request.match_info["id"])
    if job is None:
        raise ApiError(404, f"no quantize job {request.match_info['id']!r}", code="job_not_found")
    await request.app[JOBS].stop(job)
    return web.json_response(job.to_dict())


ROUTES = [
    ("POST", "/hearth/quantize", start),
    ("GET", "/hearth/quantize", list_jobs),
    ("DELETE", "/hearth/quantize/{id}", stop),
]
