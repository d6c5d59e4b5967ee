"""Workers import only what they use. A spawned worker re-imports the module its parent ran
as ``__main__`` (``hearth``'s entry, ``runtime.cli``) before its own: that import used to bring
the API's options and with them aiohttp into every engine and embedding worker. Checked in
real spawned children of a process started the way the ``hearth`` script starts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: a stand-in for the ``hearth`` console script: ``runtime.cli`` imported by ``__main__``
ENTRY = r"""
import json, multiprocessing as mp, sys
from runtime.cli import main  # noqa: F401  (what the hearth script imports)

def child(conn, module):
    __import__(module)
    conn.send(sorted(sys.modules))

if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    out = {}
    for module in sys.argv[1:]:
        parent, end = ctx.Pipe()
        p = ctx.Process(target=child, args=(end, module))
        p.start()
        out[module] = parent.recv()
        p.join()
    print(json.dumps(out))
"""

HEAVY = ("aiohttp", "yarl", "multidict", "PySide6", "httpx", "psutil._psplatform")


def _top(modules: list[str]) -> set[str]:
    return {m.split(".")[0] for m in modules}


def _spawned_modules(tmp_path, *modules: str) -> dict[str, list[str]]:
    entry = tmp_path / "hearth_entry.py"
    entry.write_text(ENTRY)
    out = subprocess.run([sys.executable, str(entry), *modules], capture_output=True, text=True, timeout=300,
                         cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_spawned_workers_import_neither_the_api_nor_each_others_libraries(tmp_path):
    got = _spawned_modules(tmp_path, "runtime.engine.worker", "runtime.engine.embed_worker",
                           "runtime.backends.onnx_embedder")
    engine, embed, onnx = (_top(got[m]) for m in ("runtime.engine.worker", "runtime.engine.embed_worker",
                                                   "runtime.backends.onnx_embedder"))
    for name in ("aiohttp", "yarl", "multidict", "PySide6", "httpx"):
        assert name not in engine | embed | onnx, name
    assert "llama_cpp" in engine and "onnxruntime" not in engine
    assert "llguidance" not in engine  # loaded with the first constrained request
    assert "llama_cpp" not in embed and "onnxruntime" not in embed  # its backend comes with its model
    assert "llama_cpp" not in onnx


def test_the_entry_module_itself_is_light():
    out = subprocess.run([sys.executable, "-c", "import sys, runtime.cli; print(sorted(sys.modules))"],
                         capture_output=True, text=True, timeout=120, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    top = {m.strip("'").split(".")[0] for m in out.stdout.strip()[1:-1].split(", ")}
    assert not top & {"aiohttp", "numpy", "llama_cpp", "onnxruntime", "llguidance", "PySide6"}, top


def test_the_api_imports_nothing_its_first_request_does_not_need():
    """What ``hearth serve`` imports before its port listens: the hub's client (huggingface_hub's
    downloader, its HTTP stack: about 0.25 s) comes with the first call that asks the hub."""
    out = subprocess.run([sys.executable, "-c", "import sys, runtime.server.app; print('\\n'.join(sys.modules))"],
                         capture_output=True, text=True, timeout=120, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    modules = set(out.stdout.split())
    for name in ("huggingface_hub.hf_api", "huggingface_hub.file_download", "httpx2", "httpx", "numpy",
                 "llama_cpp", "onnxruntime", "PySide6", "PIL"):
        assert name not in modules, name


def test_the_cache_folder_of_a_repository_is_huggingface_hubs():
    from huggingface_hub.file_download import repo_folder_name as theirs

    from runtime.store.hf_cache import repo_folder_name

    for repo in ("bartowski/Qwen2.5-7B-Instruct-GGUF", "unsloth/gpt-oss-20b-GGUF", "gpt2", "a/b.c_d-e"):
        for kind in ("model", "dataset"):
            assert repo_folder_name(repo_id=repo, repo_type=kind) == theirs(repo_id=repo, repo_type=kind)
