"""The ``hearth`` command line."""

from __future__ import annotations

import subprocess
import sys

from runtime import __version__


def hearth(*args: str, input: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "runtime.cli", *args], input=input, capture_output=True,
                          text=True, timeout=timeout)


def test_version():
    r = hearth("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"hearth {__version__}"


def test_run_with_a_prompt_streams_an_answer(smollm2_path):
    r = hearth("run", "smollm2-135m", "Say hello.", "--max-tokens", "16", "--temperature", "0", "--port", "1")
    assert r.returncode == 0, r.stderr
    assert len(r.stdout.strip()) > 0


def test_run_interactive_keeps_the_conversation(smollm2_path):
    r = hearth("run", "smollm2-135m", "--max-tokens", "8", "--port", "1", input="Hi\nAnd again\n/bye\n")
    assert r.returncode == 0, r.stderr
    assert r.stdout.count(">>> ") == 3


def test_run_unknown_model_says_what_exists(smollm2_path):
    r = hearth("run", "no-such-model", "hi", "--port", "1")
    assert r.returncode == 1
    assert "unknown model 'no-such-model'" in r.stderr and "smollm2-135m" in r.stderr


def test_serve_refuses_a_taken_port(server):
    r = hearth("serve", "--port", str(server.port), timeout=30)
    assert r.returncode != 0 and "cannot listen" in r.stderr
