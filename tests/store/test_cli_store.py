"""``hearth pull / list / rm / import / search`` against the loopback hub, in child processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from runtime.store.hf_cache import cache_dir
from tests.store.hubfiles import FILE, REPO, publish, tiny_model


def hearth(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "runtime.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=dict(os.environ))


def test_pull_survives_a_kill_and_resumes_with_range(loopback_hub, tmp_path):
    data = publish(loopback_hub, tmp_path)
    loopback_hub.hold_after(REPO, FILE, int(len(data) * 0.5))
    blobs = cache_dir() / f"models--{REPO.replace('/', '--')}" / "blobs"
    proc = subprocess.Popen([sys.executable, "-m", "runtime.cli", "pull", f"{REPO}:Q4_K_M"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=dict(os.environ))
    try:
        deadline = time.monotonic() + 60
        partial = []
        while not partial or partial[0].stat().st_size < (1 << 20):
            assert time.monotonic() < deadline and proc.poll() is None, proc.stdout.read() if proc.poll() else "slow"
            time.sleep(0.05)
            partial = list(blobs.glob("*.incomplete")) if blobs.is_dir() else []
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    have = partial[0].stat().st_size
    assert 0 < have < len(data)

    r = hearth("pull", f"{REPO}:Q4_K_M")
    assert r.returncode == 0, r.stderr
    assert "is ready" in r.stdout and "100.0%" in r.stdout
    assert loopback_hub.ranges(REPO, FILE) == [None, f"bytes={have}-"]

    listed = hearth("list")
    assert f"{REPO}/{FILE}" in listed.stdout and "hub" in listed.stdout
    rm = hearth("rm", f"{REPO}/{FILE}")
    assert rm.returncode == 0, rm.stderr
    assert f"{len(data) / 1e6:.1f} MB freed" in rm.stdout
    assert f"{REPO}/{FILE}" not in hearth("list").stdout


def test_pull_errors_are_one_clear_line(loopback_hub):
    r = hearth("pull", "nobody/missing-GGUF")
    assert r.returncode == 1 and "no model repository 'nobody/missing-GGUF'" in r.stderr
    assert "Traceback" not in r.stderr


def test_import_and_search(loopback_hub, tmp_path, monkeypatch):
    monkeypatch.setenv("HEARTH_DATA_DIR", str(tmp_path / "data"))
    model = tiny_model(tmp_path / "My-Model-Q8_0.gguf")
    r = hearth("import", str(model))
    assert r.returncode == 0, r.stderr
    assert "Imported My-Model-Q8_0" in r.stdout
    assert "My-Model-Q8_0" in hearth("list").stdout
    bad = tmp_path / "notes.gguf"
    bad.write_text("not a model at all, just text\n" * 10)
    r = hearth("import", str(bad))
    assert r.returncode == 1 and "not a GGUF file" in r.stderr

    publish(loopback_hub, tmp_path)
    loopback_hub.add_repo("other/Unrelated", {"model.safetensors": b"x"})
    r = hearth("search", "tiny")
    assert r.returncode == 0 and REPO in r.stdout and "Unrelated" not in r.stdout
    r = hearth("search", "--files", REPO)
    assert r.returncode == 0 and "Q4_K_M" in r.stdout and FILE in r.stdout


def test_pull_on_a_terminal_draws_a_live_progress_bar(loopback_hub, tmp_path):
    import pty

    data = publish(loopback_hub, tmp_path)
    loopback_hub.cut_after(REPO, FILE, len(data) // 2)  # a retry in the middle: the bar goes on
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "runtime.cli", "pull", REPO], stdout=slave,
                            stderr=subprocess.PIPE, env=dict(os.environ))
    os.close(slave)
    out = b""
    try:
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            out += chunk
    finally:
        proc.wait(60)
        os.close(master)
    assert proc.returncode == 0, proc.stderr.read()
    frames = [f for f in out.decode().split("\r") if "%" in f]
    percents = [float(f.split("%")[0].split()[-1]) for f in frames]
    assert len(frames) >= 3 and percents[-1] == 100.0
    assert percents == sorted(percents) and any(0 < p < 100 for p in percents)
    assert "[" + "#" * 28 + "]" in frames[-1]


def test_fit_sizes_a_catalog_model_before_download(loopback_hub, smollm2_path):
    import json

    r = hearth("fit", "llama-3.1-8b:Q8_0", "--ctx", "4096", "--draft", "llama-3.2-1b", "--json")
    assert r.returncode in (0, 2), r.stderr
    plan = json.loads(r.stdout)
    assert plan["model"] == "Llama 3.1 8B Instruct" and plan["ctx"] <= 4096
    assert plan["weights_bytes"] > 7.5e9 and plan["draft_bytes"] > 0  # Q8_0: about 8.5 bits a weight
    assert loopback_hub.received == []  # nothing asked of the hub
