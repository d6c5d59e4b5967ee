"""The real coding agents against a live Hearth: Claude Code, Codex and opencode from npm.

Each client runs as a user would run it, with the settings ``hearth launch`` gives it, through a
recording proxy (``tests/agent_proxy.py``): a one-shot task, then a continued turn of the same
session. Every request must be answered 2xx, and the continued turn's requests must read at
least 90% of their prompt from the prefix cache (the agents re-send 5-20k tokens of tools and
instructions on every request; recomputing them each turn is what makes local agents slow).

The clients are installed once into a cache directory (``HEARTH_AGENT_CACHE``, default
``~/.cache/hearth-test-agents``); a client whose package cannot be installed is skipped with the
reason. The model is Gemma 3 270M, whose 32k context holds Claude Code's prompt; replies are
kept short by the server's ``--max-tokens-limit``.

The group runs when ``HEARTH_TEST_AGENT_CLIENTS=1`` is set (CI sets it): each client's first turn
reads 10-20k tokens, minutes on a 2-core machine (the three together about 6), and it needs the
npm registry. The recorded request shapes of the same clients are replayed in every run
(``test_agent_requests.py``). Each prints a line: requests, the first turn's prompt and TTFT,
the continued turn's cached share and TTFT, and the longest silence a stream left the client.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from filelock import FileLock

from runtime import launch
from runtime.server.launcher import ServiceProcess
from tests.agent_proxy import RecordingProxy

CACHE = Path(os.environ.get("HEARTH_AGENT_CACHE", Path.home() / ".cache" / "hearth-test-agents"))
PACKAGES = {"claude": "@anthropic-ai/claude-code", "codex": "@openai/codex", "opencode": "opencode-ai"}
MODEL = "gemma-3-270m"
#: the continued turn must read this share of its prompt from the cache
CACHED_SHARE = 0.9
#: seconds a stream may stay silent (keep-alives every 5 s; the clients' idle timeouts are minutes)
MAX_SILENCE = 10.0

pytestmark = [pytest.mark.skipif(not os.environ.get("HEARTH_TEST_AGENT_CLIENTS"),
                                 reason="the real agent clients run with HEARTH_TEST_AGENT_CLIENTS=1 (minutes, npm)"),
              # a client's first read of its 19k-token prompt takes 2-3 minutes on 2 cores, and two turns run
              pytest.mark.timeout(1800)]


def _install() -> Path | str:
    """The folder of the clients' programs, or why they cannot be had."""
    npm = shutil.which("npm")
    if npm is None:
        return "npm is not installed (the agent clients are npm packages)"
    bins = CACHE / "node_modules" / ".bin"
    CACHE.mkdir(parents=True, exist_ok=True)
    with FileLock(str(CACHE / ".install.lock")):
        if all((bins / name).exists() for name in PACKAGES):
            return bins
        done = subprocess.run([npm, "install", "--no-audit", "--no-fund", "--prefix", str(CACHE), *PACKAGES.values()],
                              capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            return f"npm could not install the agent clients: {done.stderr.strip()[-300:]}"
    return bins


@pytest.fixture(scope="module")
def clients() -> Path:
    where = _install()
    if isinstance(where, str):
        pytest.skip(where)
    return where


@pytest.fixture(scope="module")
def agent_server(gemma_path):
    s = ServiceProcess("--model", MODEL, "--ctx", "32768", "--parallel", "2", "--max-tokens-limit", "24",
                       "--cache-ram", "4096").wait_ready(300)
    yield s
    s.stop()


@pytest.fixture()
def proxy(agent_server):
    p = RecordingProxy(agent_server.url).start()
    yield p
    p.stop()


def _env(l: launch.Launch, home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in l.unset and not k.startswith(("OPENAI_", "ANTHROPIC_"))}
    env.update(l.env, HOME=str(home), CODEX_HOME=str(home / ".codex"), NO_COLOR="1", CI="1")
    (home / ".codex").mkdir(parents=True, exist_ok=True)
    return env


def _run(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=900,
                          stdin=subprocess.DEVNULL)


def _check(name: str, proxy: RecordingProxy, first_turn: int, out: str) -> None:
    gens = proxy.generations()
    assert gens, f"the client sent no generation request:\n{out[-2000:]}"
    bad = [(e.path, e.status, e.answer[:300]) for e in proxy.exchanges if not 200 <= e.status < 300]
    assert not bad, f"{bad}\n{out[-2000:]}"
    later = [e for e in gens[first_turn:] if e.usage()]
    assert later, f"the continued turn sent nothing:\n{out[-2000:]}"
    main = max(later, key=lambda e: e.usage()[0])  # the turn's request with the whole conversation
    prompt, cached = main.usage()
    # what the client saw while a long prompt was read: keep-alives, never a silence its idle
    # timeout could take for a dead server (the service sends one after 5 s without a write)
    gaps = [g for e in gens for g in e.gaps]
    first = gens[0]
    print(f"\n{name}: {len(gens)} generation requests, all 2xx; first: prompt {first.usage()}, TTFT "
          f"{first.ttft or 0:.1f} s; continued turn: prompt {prompt}, cached {cached} ({cached / prompt:.1%}), "
          f"TTFT {main.ttft or 0:.1f} s; longest silence on a stream {max(gaps, default=0):.1f} s")
    assert max(gaps, default=0) <= MAX_SILENCE, (name, sorted(gaps)[-5:])
    assert cached >= CACHED_SHARE * prompt, (prompt, cached, [(e.path, e.usage()) for e in gens])


def test_claude_code(clients, proxy, tmp_path):
    l = launch.claude(proxy.url, MODEL, None)
    env, work = _env(l, tmp_path / "home"), tmp_path / "work"
    work.mkdir()
    first = _run([str(clients / "claude"), "-p", "Reply with one word: hello."], env, work)
    turn = len(proxy.generations())
    second = _run([str(clients / "claude"), "-p", "--continue", "Now reply with one word: bye."], env, work)
    out = first.stdout + first.stderr + second.stdout + second.stderr
    _check("claude", proxy, turn, out)


def test_codex(clients, proxy, tmp_path):
    l = launch.codex(proxy.url, MODEL, None)
    env, work = _env(l, tmp_path / "home"), tmp_path / "work"
    work.mkdir()
    codex = [str(clients / "codex"), *l.args]
    first = _run([*codex, "exec", "--skip-git-repo-check", "Reply with one word: hello."], env, work)
    turn = len(proxy.generations())
    second = _run([*codex, "exec", "--skip-git-repo-check", "resume", "--last", "Now reply with one word: bye."],
                  env, work)
    out = first.stdout + first.stderr + second.stdout + second.stderr
    _check("codex", proxy, turn, out)


def test_opencode(clients, proxy, tmp_path):
    l = launch.opencode(proxy.url, MODEL, None)
    # opencode fetches its provider package from npm on first use: keep it in the cache directory
    env, work = _env(l, CACHE / "opencode-home"), tmp_path / "work"
    work.mkdir()
    first = _run([str(clients / "opencode"), "run", "Reply with one word: hello."], env, work)
    turn = len(proxy.generations())
    second = _run([str(clients / "opencode"), "run", "--continue", "Now reply with one word: bye."], env, work)
    out = first.stdout + first.stderr + second.stdout + second.stderr
    _check("opencode", proxy, turn, out)
