"""An embedding worker killed between two requests: the next request is served by a new worker.

The next request could reach the service before the dead worker's end did: the router handed it
the dead worker, and it failed with 503 ("the next request restarts it"). A job now runs once
more on a worker started anew."""

from __future__ import annotations

import os
import signal

import httpx
import pytest

from runtime.server.launcher import ServiceProcess

BODIES = {"/v1/embeddings": {"model": "minilm-l6", "input": ["the quick brown fox"]},
          "/api/embed": {"model": "minilm-l6", "input": "the quick brown fox"}}


@pytest.fixture(scope="module")
def server(smollm2_path, minilm_path, tmp_path_factory):
    env = {**os.environ, "HEARTH_EMBED_THREADS": "1"}
    s = ServiceProcess("--parallel", "1", "--ctx", "1024", env=env).wait_ready()
    yield s
    s.stop()


def _worker(server) -> int:
    models = {m["id"]: m for m in server.health()["engine"]["models"]}
    assert models["minilm-l6"]["state"] == "running"
    return models["minilm-l6"]["pid"]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("path", list(BODIES))
def test_the_request_right_after_the_embedding_worker_is_killed_is_served(server, path):
    # one kept-alive connection: the request reaches the service as fast as a client can send it
    with httpx.Client(base_url=server.url, timeout=120) as client:
        first = client.post(path, json=BODIES[path])
        assert first.status_code == 200, first.text
        for _ in range(5):
            pid = _worker(server)
            os.kill(pid, signal.SIGKILL)
            r = client.post(path, json=BODIES[path])
            assert r.status_code == 200, r.text
            assert r.json() == first.json() or path == "/api/embed"  # the same vectors from the new worker
            assert _worker(server) != pid
    assert server.stats()["loads"]["minilm-l6"] >= 6
