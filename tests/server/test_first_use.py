"""First use under concurrency, from a fresh data directory: what is made on first use (the
embedded models, the API key, the import token) is made once, by one thread or process, while
the others wait for it; every request gets its answer, one copy lies on disk, and no temporary
file is left. The partial file used to be named by the process id alone, so two threads of the
service wrote and renamed the same file and one of them answered 500."""

from __future__ import annotations

import asyncio
import filecmp
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from runtime.store.catalog import load_catalog
from runtime.store.embedded import ensure_embedded

STRAY = re.compile(r"\.(partial|tmp)")
ROOT = Path(__file__).resolve().parents[2]


def strays(root: Path) -> list[str]:
    return [str(p.relative_to(root)) for p in root.rglob("*") if STRAY.search(p.name)]


def same_tree(a: Path, b: Path) -> bool:
    names = sorted(str(p.relative_to(a)) for p in a.rglob("*") if p.is_file())
    return names == sorted(str(p.relative_to(b)) for p in b.rglob("*") if p.is_file()) and all(
        filecmp.cmp(a / n, b / n, shallow=False) for n in names)


def in_processes(code: str, n: int, data: Path) -> list[str]:
    """Run ``code`` in ``n`` Python processes started together; their outputs."""
    env = {**os.environ, "HEARTH_DATA_DIR": str(data), "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(n)]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        outs.append(out.strip())
    return outs


def test_threads_placing_the_embedded_models_at_once_place_one_copy(tmp_path, smollm2_path, minilm_path):
    catalog, data = load_catalog(), tmp_path / "data"
    with ThreadPoolExecutor(8) as pool:
        gguf = set(pool.map(lambda _: ensure_embedded(catalog["smollm2-135m"], data), range(8)))
        onnx = set(pool.map(lambda _: ensure_embedded(catalog["minilm-l6"], data), range(8)))
    assert gguf == {data / "models" / "smollm2-135m.gguf"}
    assert filecmp.cmp(data / "models" / "smollm2-135m.gguf", smollm2_path, shallow=False)
    assert onnx == {data / "models" / "minilm-l6" / "model.onnx"}
    assert same_tree(data / "models" / "minilm-l6", minilm_path.parent)
    assert strays(data) == []


def test_processes_placing_a_model_at_once_place_one_copy(tmp_path, smollm2_path):
    data = tmp_path / "data"
    code = ("from runtime.config import data_dir; from runtime.store.catalog import load_catalog; "
            "from runtime.store.embedded import ensure_embedded; "
            "print(ensure_embedded(load_catalog()['smollm2-135m'], data_dir()))")
    assert set(in_processes(code, 3, data)) == {str(data / "models" / "smollm2-135m.gguf")}
    assert filecmp.cmp(data / "models" / "smollm2-135m.gguf", smollm2_path, shallow=False)
    assert strays(data) == []


def test_the_api_key_and_the_import_token_made_at_once_are_one_each(tmp_path):
    from runtime.api_key import create_key, load_key
    from runtime.import_confirm import ensure_token, load_token

    data = tmp_path / "threads"
    with ThreadPoolExecutor(8) as pool:
        keys = set(pool.map(lambda _: create_key(data), range(8)))
        tokens = set(pool.map(lambda _: ensure_token(data), range(8)))
    assert keys == {load_key(data)} and tokens == {load_token(data)}
    assert (data / "api_key").stat().st_mode & 0o777 == 0o600
    code = ("from runtime.api_key import create_key; from runtime.config import data_dir; "
            "print(create_key(data_dir()))")
    other = tmp_path / "processes"
    assert set(in_processes(code, 4, other)) == {load_key(other)}
    assert strays(data) == [] and strays(other) == []


# -- a live service from a fresh data directory ---------------------------------------------
ROUTES = {
    "/v1/embeddings": ("POST", {"model": "minilm-l6", "input": ["first use", "of the embedding model"]}),
    "/api/embed": ("POST", {"model": "minilm-l6", "input": "first use"}),
    "/v1/chat/completions": ("POST", {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}),
    "/hearth/fit": ("GET", None),
}


@pytest.fixture()
def fresh(tmp_path, smollm2_path, minilm_path):
    """A service on an empty data directory, not waited for: its preload is copying the default
    model while the first requests arrive."""
    from runtime.server.launcher import ServiceProcess

    data = tmp_path / "data"
    s = ServiceProcess("--parallel", "2", "--ctx", "1024", "--max-client-requests", "64",
                       env={**os.environ, "HEARTH_DATA_DIR": str(data)})
    s.data = data
    yield s
    s.stop()


def _wait_listening(s, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert s.proc.poll() is None, s.output()
        try:
            httpx.get(f"{s.url}/health", timeout=2)
            return
        except httpx.TransportError:
            time.sleep(0.02)
    raise TimeoutError("the service did not listen")


async def _first_requests(url: str, per_route: int) -> list[tuple[str, int, str]]:
    async with httpx.AsyncClient(timeout=300) as c:
        async def one(path: str) -> tuple[str, int, str]:
            method, body = ROUTES[path]
            r = await (c.post(f"{url}{path}", json=body) if method == "POST" else c.get(f"{url}{path}"))
            return path, r.status_code, r.text[:300]

        return await asyncio.gather(*[one(p) for p in ROUTES for _ in range(per_route)])


def test_concurrent_first_requests_on_every_route_that_places_something(fresh):
    _wait_listening(fresh)
    results = asyncio.run(_first_requests(fresh.url, 8))
    assert [r for r in results if r[1] != 200] == []
    assert len(results) == 8 * len(ROUTES)
    models = fresh.data / "models"
    assert sorted(p.name for p in models.iterdir() if not p.name.startswith(".")) == ["minilm-l6", "smollm2-135m.gguf"]
    assert strays(fresh.data) == []
    stats = fresh.stats()
    assert stats["loads"] == {"smollm2-135m": 1, "minilm-l6": 1}  # one worker each, started once
    assert fresh.health()["engine"]["state"] == "running"
