"""The probe and the fit planner through the API and the CLI, and a load the planner refuses."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import httpx
import numpy as np
from gguf import GGUFWriter


def huge_sparse_gguf(path):
    """A 70B-shaped f16 llama whose weights are a hole in a sparse file: a real, complete
    GGUF as far as its header goes, far too big for this machine's RAM."""
    n_layer, n_embd, n_ff, n_head, n_kv, vocab = 80, 8192, 28672, 64, 8, 32000
    w = GGUFWriter(str(path), "llama")
    w.add_block_count(n_layer)
    w.add_context_length(8192)
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    total = 0

    def tensor(name, shape):
        nonlocal total
        nbytes = int(np.prod(shape)) * 2
        w.add_tensor_info(name, shape, np.dtype(np.float16), nbytes)
        total += nbytes

    tensor("token_embd.weight", (vocab, n_embd))
    for i in range(n_layer):
        for name, shape in (("attn_q", (n_embd, n_embd)), ("attn_k", (n_embd // 8, n_embd)),
                            ("attn_v", (n_embd // 8, n_embd)), ("attn_output", (n_embd, n_embd)),
                            ("ffn_gate", (n_ff, n_embd)), ("ffn_up", (n_ff, n_embd)), ("ffn_down", (n_embd, n_ff))):
            tensor(f"blk.{i}.{name}.weight", shape)
    tensor("output.weight", (vocab, n_embd))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    os.truncate(path, os.path.getsize(path) + total + (1 << 20))
    return path


def test_hardware_endpoint(server):
    hw = httpx.get(f"{server.url}/hearth/hardware", timeout=120).json()
    assert {"cpu", "ram", "gpus", "backend"} <= set(hw)
    assert hw["ram"]["total"] > 1 << 30 and hw["cpu"]["logical_cores"] >= 1


def test_fit_endpoint_for_the_loaded_model(server):
    r = httpx.get(f"{server.url}/hearth/fit", params={"model": "smollm2-135m", "ctx": "2048"}, timeout=120)
    plan = r.json()
    assert r.status_code == 200 and plan["verdict"] == "cpu" and plan["ctx"] == 2048
    assert plan["weights_bytes"] > 80_000_000 and plan["total_bytes"] > plan["weights_bytes"] + plan["kv_bytes"] - 1
    assert plan["predicted_tokens_per_s"] > 0
    bad = httpx.get(f"{server.url}/hearth/fit", params={"model": "smollm2-135m", "ctx": "-1"})
    assert bad.status_code == 400
    missing = httpx.get(f"{server.url}/hearth/fit", params={"model": "nope"})
    assert missing.status_code == 404


def test_a_model_that_cannot_fit_is_refused_with_numbers(server, data_dir):
    # requests may name files under the data directory (or a --models-dir folder) only
    (data_dir / "models").mkdir(exist_ok=True)
    path = huge_sparse_gguf(data_dir / "models" / "huge-70b-f16.gguf")
    r = httpx.get(f"{server.url}/hearth/fit", params={"model": str(path)}, timeout=120)
    assert r.status_code == 200 and r.json()["verdict"] == "too_big"
    r = httpx.post(f"{server.url}/v1/completions", json={"model": str(path), "prompt": "hi"}, timeout=120)
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["code"] == "model_does_not_fit" and "GB" in err["message"]
    # the running model was not unloaded for nothing
    assert server.health()["engine"]["state"] == "running"
    path.unlink()


def cli(*args):
    return subprocess.run([sys.executable, "-m", "runtime.cli", *args], capture_output=True, text=True, timeout=180)


def test_cli_probe_and_fit(smollm2_path, tmp_path):
    r = cli("probe", "--json")
    assert r.returncode == 0 and {"cpu", "ram", "gpus"} <= set(json.loads(r.stdout))
    r = cli("probe")
    assert r.returncode == 0 and "RAM" in r.stdout and "CPU" in r.stdout
    r = cli("fit", "smollm2-135m", "--ctx", "4096")
    assert r.returncode == 0 and "cpu" in r.stdout.lower() and "tokens/s" in r.stdout
    r = cli("fit", str(huge_sparse_gguf(tmp_path / "huge.gguf")), "--json")
    assert r.returncode == 2 and json.loads(r.stdout)["verdict"] == "too_big"
    r = cli("fit", "no-such-model")
    assert r.returncode == 1 and "unknown model" in r.stderr


def test_cli_probe_calibrate_makes_speed_predictions_calibrated(smollm2_path, gemma_path):
    r = cli("probe", "--calibrate", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["decode_efficiency"] > 0
    plan = json.loads(cli("fit", "smollm2-135m", "--json").stdout)
    assert plan["speed_calibrated"] is True and plan["predicted_tokens_per_s"] > 0
