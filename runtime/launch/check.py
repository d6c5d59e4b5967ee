"""``hearth launch --check CLIENT``: run a coding agent once against the running service and report.

The client runs non-interactively in a fresh temporary directory with a tiny task (create
``hello.txt`` containing ``hi``), its output short where it has a switch for that, under a time
limit. Its requests go through a recording proxy on loopback (``runtime/launch/proxy.py``) in
this process, so the report counts what the service answered this client alone: the requests,
the ones that were not 2xx, and the share of the prompt the later requests read from the prefix
cache (from the usage the service returned). Whether the file appeared is reported as well,
but only the client's exit status and the service's answers decide the verdict: a small model
may well fail the task with settings that work.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from runtime.launch.clients import CHECK_FILE, CHECK_TASK, CLIENTS, Launch
from runtime.launch.proxy import Exchange, RecordingProxy

#: the later requests must read at least this share of their prompt from the cache to count as warm
HIGH_SHARE = 0.8


@dataclass(slots=True)
class Report:
    client: str
    version: str
    exit_status: int | None  # None: it ran past the time limit
    seconds: float
    requests: int = 0
    generations: int = 0
    failed: list[tuple[str, int]] = field(default_factory=list)  # (path, status) of non-2xx answers
    exchanges: list[Exchange] = field(default_factory=list)
    later_prompt: int = 0  # prompt tokens of the later full-prompt requests
    later_cached: int = 0  # of which read from the cache
    task_done: bool = False
    output: str = ""
    last_cut: bool = False  #: the last generation's reply ended at its output-token limit

    @property
    def cached_share(self) -> float | None:
        return self.later_cached / self.later_prompt if self.later_prompt else None

    @property
    def cut_short(self) -> bool:
        """The client exited with an error right after the model's last reply was cut at its
        output-token limit: clients differ in how they take that (Codex ends with an error,
        Claude Code goes on), and it is the model's length, not the client's exchange with the
        service."""
        return self.exit_status not in (None, 0) and self.last_cut

    @property
    def worked(self) -> bool:
        return (self.exit_status == 0 or self.cut_short) and self.generations > 0 and not self.failed

    def timeline(self, most: int = 12) -> list[str]:
        """One line per request: route, status, prompt tokens (cached) and seconds."""
        lines = []
        for e in self.exchanges[:most]:
            usage = e.usage()
            tokens = f"  prompt {usage[0]} ({usage[1]} cached)" if usage else ""
            took = f"{e.ended:.1f} s" if e.ended is not None else "no answer by the end"
            lines.append(f"{e.method} {e.path} {e.status or '-'}{tokens}  {took}")
        if len(self.exchanges) > most:
            lines.append(f"… and {len(self.exchanges) - most} more")
        return lines

    def lines(self) -> list[str]:
        status = ("timed out" if self.exit_status is None else f"exit {self.exit_status}")
        verdict = "worked" if self.worked else "FAILED"
        out = [f"client    {self.client} {self.version}",
               f"result    {verdict} ({status} in {self.seconds:.1f} s)"]
        bad = (", all 2xx" if not self.failed else
               f", {len(self.failed)} not 2xx: " + ", ".join(f"{p} {s or 'no answer'}" for p, s in self.failed[:5]))
        out.append(f"requests  {self.requests} served ({self.generations} generating){bad if self.requests else ''}")
        out += [f"          {line}" for line in self.timeline()]
        share = self.cached_share
        if share is None:
            out.append("cache     no later request re-sent the prompt: nothing to read from the cache")
        else:
            level = "high" if share >= HIGH_SHARE else "LOW: something at the top of the prompt changes per request"
            out.append(f"cache     later requests read {share:.0%} of their prompt from the cache "
                       f"({self.later_cached} of {self.later_prompt} tokens): {level}")
        if self.cut_short:
            out.append(f"note      the client stopped with exit {self.exit_status} because the model's last reply was cut at "
                       "its output-token limit (the service's --max-tokens-limit or the client's own): the client and the "
                       "service worked; the model needs more room to finish")
        out.append(f"task      {CHECK_FILE} " + ("created" if self.task_done else "not created (the model's doing)"))
        return out


def cache_use(gens: list[Exchange]) -> tuple[int, int]:
    """(prompt tokens, of which cached) over the later requests that carried the whole prompt.

    Agents send small side requests (titles, summaries) with prompts of their own; the requests
    that matter re-send the full prompt, at least half as long as the longest one. The first of
    them computes it; the ones after it should read it back from the cache."""
    used = [u for u in (e.usage() for e in gens) if u and u[0] > 0]
    if not used:
        return 0, 0
    longest = max(p for p, _ in used)
    full = [u for u in used if u[0] * 2 >= longest][1:]
    return sum(p for p, _ in full), sum(c for _, c in full)


def version_of(program: str, args: tuple[str, ...]) -> str:
    try:
        done = subprocess.run([program, *args], capture_output=True, text=True, timeout=60,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return "(version unknown)"
    lines = [line.strip() for line in (done.stdout or done.stderr).splitlines() if line.strip()]
    if not lines:
        return "(version unknown)"
    name = os.path.basename(program)  # "aider 0.86.2": the report puts the name first itself
    return lines[0].removeprefix(name + " ") if lines[0].startswith(name + " ") else lines[0]


def _run_client(argv: list[str], env: dict[str, str], cwd: Path, timeout: float) -> tuple[int | None, str]:
    proc = subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, errors="replace", start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
        return proc.returncode, out
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the client and whatever it started
        out, _ = proc.communicate()
        return None, out


def check(client: str, program: str, base_url: str, model: str, key: str | None, timeout: float,
          extra_args: list[str] | None = None, context: int | None = None) -> Report:
    spec = CLIENTS[client]
    version = version_of(program, spec.version_args)
    proxy = RecordingProxy(base_url).start()
    try:
        launch: Launch = spec.build(proxy.url, model, key, context)
        with tempfile.TemporaryDirectory(prefix="hearth-check-") as tmp:
            work = Path(tmp) / "work"
            work.mkdir()
            config = Path(tmp) / ("config" + Path(launch.config_path or "x.txt").suffix)
            if launch.config is not None:
                config.write_text(launch.config)
            args, env_set = launch.with_config(str(config))
            env = {k: v for k, v in os.environ.items() if k not in launch.unset}
            env.update(env_set, NO_COLOR="1", **spec.check_env)
            argv = [program, *args, *spec.once(CHECK_TASK), *(extra_args or [])]
            start = time.monotonic()
            status, output = _run_client(argv, env, work, timeout)
            seconds = time.monotonic() - start
            done = (work / CHECK_FILE).is_file() and "hi" in (work / CHECK_FILE).read_text(errors="replace").lower()
    finally:
        proxy.stop()
    gens = proxy.generations()
    prompt, cached = cache_use(gens)
    return Report(client, version, status, seconds, requests=len(proxy.exchanges), generations=len(gens),
                  failed=[(e.path, e.status) for e in proxy.exchanges if not 200 <= e.status < 300],
                  exchanges=list(proxy.exchanges),
                  later_prompt=prompt, later_cached=cached, task_done=done, output=output,
                  last_cut=bool(gens) and gens[-1].cut_short())


def run_check(client: str, base_url: str, model: str, context: int | None, key: str | None, timeout: float,
              extra_args: list[str], notes: list[str]) -> int:
    spec = CLIENTS[client]
    program = shutil.which(spec.build(base_url, model, key, context).program)
    if program is None:
        print(f"hearth: `{spec.build(base_url, model, key, context).program}` is not on PATH; install it "
              f"({spec.install})", file=sys.stderr)
        return 127
    print(f"# running {client} once against {base_url} with model {model} (at most {timeout:.0f} s)…", flush=True)
    for note in notes:
        print("\n".join(f"# {line}" for line in note.splitlines()), flush=True)
    report = check(client, program, base_url, model, key, timeout, extra_args, context)
    if not report.worked:
        tail = report.output.strip().splitlines()[-20:]
        if tail:
            print(f"# the last lines {client} printed:", *(f"#   {line}" for line in tail), sep="\n")
    print("\n".join(report.lines()))
    return 0 if report.worked else 1
