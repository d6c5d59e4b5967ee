"""A live ``hearth serve`` against hostile model files and references that try to reach outside.

Hostile GGUFs (generated in ``tests.store.hostile_ggufs``) inside the data directory are
named by every route that reads a model: each is refused with a 4xx quickly, the service's
memory does not grow, and ``/health`` keeps answering meanwhile. References that lead out of
the allowed folders (an empty segment, a symlink, whitespace) are refused the same way
whether or not the file exists; an import needs the user's confirmation and never takes a
catalog id.
"""

from __future__ import annotations

import os
import shutil
import threading
import time

import httpx
import psutil
import pytest

from runtime.import_confirm import CONFIRM_HEADER, load_token
from tests.hardware.ggufs import write_model
from tests.store.hostile_ggufs import HOSTILE, write_all

CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


def _routes(url: str, ref: str) -> list[httpx.Response]:
    """Every route that names a model, asked about ``ref``."""
    return [
        httpx.post(f"{url}/v1/chat/completions", json={**CHAT, "model": ref}, timeout=60),
        httpx.post(f"{url}/v1/completions", json={"model": ref, "prompt": "hi", "max_tokens": 2}, timeout=60),
        # a short answer: an unbounded one may run to the end of the context
        httpx.post(f"{url}/api/chat", json={"model": ref, "messages": CHAT["messages"], "stream": False,
                                            "options": {"num_predict": 2}}, timeout=60),
        httpx.post(f"{url}/api/generate", json={"model": ref, "prompt": "hi", "stream": False,
                                                "options": {"num_predict": 2}}, timeout=60),
        httpx.post(f"{url}/api/show", json={"model": ref}, timeout=60),
        httpx.get(f"{url}/hearth/fit", params={"model": ref}, timeout=60),
    ]


class _HealthWatch:
    """Polls /health in a thread; records the slowest answer."""

    def __init__(self, url: str) -> None:
        self.url, self.worst, self.failures, self._stop = url, 0.0, 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            t0 = time.perf_counter()
            try:
                ok = httpx.get(f"{self.url}/health", timeout=5).status_code == 200
            except httpx.HTTPError:
                ok = False
            self.failures += not ok
            self.worst = max(self.worst, time.perf_counter() - t0)
            time.sleep(0.02)

    def __enter__(self) -> "_HealthWatch":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def test_hostile_model_files_are_refused_quickly_without_memory_growth(server, data_dir, smollm2_path):
    files = write_all(data_dir / "hostile")
    proc = psutil.Process(server.proc.pid)
    for r in _routes(server.url, "smollm2-135m"):  # warm every route's code before measuring
        assert r.status_code == 200, r.text
    rss_before = proc.memory_info().rss
    with _HealthWatch(server.url) as health:
        for name in HOSTILE:
            t0 = time.perf_counter()
            answers = _routes(server.url, str(files[name]))
            elapsed = time.perf_counter() - t0
            for r in answers:
                assert r.status_code == 400, (name, r.request.url, r.status_code, r.text)
                assert files[name].name in r.text, (name, r.text)
            assert elapsed < 6.0, f"{name}: six refusals took {elapsed:.1f}s"
    grown = proc.memory_info().rss - rss_before
    assert grown < 16 << 20, f"the service grew by {grown / 2**20:.1f} MiB"
    assert health.failures == 0 and health.worst < 2.0, (health.failures, health.worst)
    assert server.health()["engine"]["state"] == "running"
    shutil.rmtree(data_dir / "hostile")


@pytest.fixture()
def outside(tmp_path_factory):
    """A valid model outside every allowed folder, and a missing one beside it."""
    folder = tmp_path_factory.mktemp("outside")
    return write_model(folder / "victim.gguf", n_layer=1), folder / "missing.gguf"


def _refused_alike(url: str, existing: str, missing: str, status: int = 403) -> None:
    for a, b in zip(_routes(url, existing), _routes(url, missing)):
        assert a.status_code == b.status_code == status, (a.request.url, a.text, b.text)
        same = [t.replace(ref, "REF").replace(ref.strip(), "REF") for t, ref in ((a.text, existing), (b.text, missing))]
        assert same[0] == same[1]  # nothing tells an existing file from a missing one


def test_references_that_lead_outside_are_refused(server, data_dir, outside):
    victim, missing = outside
    repo = data_dir / "hf-home" / "hub" / "models--evil--repo" / "snapshots" / ("0" * 40)
    repo.mkdir(parents=True, exist_ok=True)
    # an empty segment: the file name in the repo would become an absolute path
    _refused_alike(server.url, f"evil/repo/{victim}", f"evil/repo/{missing}", status=404)
    # a symlink inside an allowed folder that leads out of it
    links = data_dir / "links"
    links.mkdir(exist_ok=True)
    (links / "victim.gguf").symlink_to(victim)
    (links / "missing.gguf").symlink_to(missing)
    _refused_alike(server.url, str(links / "victim.gguf"), str(links / "missing.gguf"))
    # surrounding whitespace and '..' are normalised before the decision, not after
    _refused_alike(server.url, f"  {victim}  ", f"  {missing}  ")
    _refused_alike(server.url, f"{data_dir}/../{os.path.relpath(victim, data_dir.parent)}",
                   f"{data_dir}/../{os.path.relpath(missing, data_dir.parent)}")
    shutil.rmtree(links)
    shutil.rmtree(repo.parent.parent)


def test_import_needs_confirmation_and_never_shadows_a_catalog_id(server, data_dir, outside):
    victim, _ = outside
    shadow = victim.parent / "smollm2-135m.gguf"
    shutil.copy(victim, shadow)
    r = httpx.post(f"{server.url}/hearth/models/import", json={"path": str(shadow)})
    assert r.status_code == 403 and r.json()["error"]["code"] == "import_not_confirmed"
    r = httpx.post(f"{server.url}/hearth/models/import", json={"path": str(shadow)},
                   headers={CONFIRM_HEADER: "a guess"})
    assert r.status_code == 403
    token = load_token(data_dir)
    assert token and (data_dir / "import-token").stat().st_mode & 0o777 == 0o600
    r = httpx.post(f"{server.url}/hearth/models/import", json={"path": f" {shadow} "},
                   headers={CONFIRM_HEADER: token})
    assert r.status_code == 201, r.text
    imported = r.json()
    assert imported["id"] != "smollm2-135m" and imported["path"] == str(shadow.resolve())
    try:
        # the catalog id still means the catalog model, and the imported file is usable by its id
        fit = httpx.get(f"{server.url}/hearth/fit", params={"model": "smollm2-135m"}, timeout=60).json()
        assert fit["weights_bytes"] > 50_000_000
        r = httpx.get(f"{server.url}/hearth/fit", params={"model": imported["id"]}, timeout=60)
        assert r.status_code == 200 and r.json()["weights_bytes"] < 10_000_000
        r = httpx.get(f"{server.url}/hearth/fit", params={"model": str(shadow)}, timeout=60)
        assert r.status_code == 200  # a registered file may be named by its path too
    finally:
        assert httpx.delete(f"{server.url}/hearth/models/{imported['id']}").status_code == 200
    r = httpx.get(f"{server.url}/hearth/fit", params={"model": str(shadow)}, timeout=60)
    assert r.status_code == 403  # forgotten: outside again
