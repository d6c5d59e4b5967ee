"""Quantize jobs: one at a time even when the requests arrive together (the check and the start
were apart by an ``await``, and three requests started three quantizers), and stopping one is
the user's act like starting it (a program without the confirmation token could stop it)."""

from __future__ import annotations

import os
import threading
import time

import httpx
import psutil
import pytest

from runtime.import_confirm import CONFIRM_HEADER, load_token
from runtime.server.launcher import ServiceProcess
from tests.server.test_quantize_api import _job, _post, _quantizers

BODY = {"model": "smollm2-135m", "to": "Q8_0", "compare": False}


@pytest.fixture(scope="module")
def server(smollm2_path, tmp_path_factory):
    data = tmp_path_factory.mktemp("quantize-jobs-data")
    s = ServiceProcess("--parallel", "1", "--ctx", "1024", env={**os.environ, "HEARTH_DATA_DIR": str(data)}).wait_ready()
    s.data_dir = data
    yield s
    s.stop()


def _stop(server, job_id: str, confirmed: bool = True) -> httpx.Response:
    headers = {CONFIRM_HEADER: load_token(server.data_dir)} if confirmed else {}
    return httpx.delete(f"{server.url}/hearth/quantize/{job_id}", headers=headers, timeout=30)


def _stop_all(server) -> None:
    """Stop every running job and wait until no quantizer process is left."""
    for job in httpx.get(f"{server.url}/hearth/quantize", timeout=10).json()["jobs"]:
        if job["state"] == "running":
            _stop(server, job["id"])
    deadline = time.monotonic() + 20
    while any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in _quantizers(server)):
        assert time.monotonic() < deadline, "a quantizer outlived its stop"
        time.sleep(0.2)


def test_requests_that_arrive_together_start_one_job(server):
    barrier = threading.Barrier(3)
    answers: list[httpx.Response] = []

    def start() -> None:
        barrier.wait()
        answers.append(_post(server, BODY))

    threads = [threading.Thread(target=start) for _ in range(3)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert sorted(r.status_code for r in answers) == [202, 409, 409], [r.text for r in answers]
        jobs = httpx.get(f"{server.url}/hearth/quantize", timeout=10).json()["jobs"]
        assert [j["state"] for j in jobs] == ["running"]
        assert {r.json()["error"]["code"] for r in answers if r.status_code == 409} == {"quantize_busy"}
    finally:
        _stop_all(server)


def test_stopping_a_job_needs_the_confirmation_that_starting_it_needs(server):
    r = _post(server, BODY)
    assert r.status_code == 202, r.text
    job_id = r.json()["id"]
    try:
        refused = _stop(server, job_id, confirmed=False)
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "quantize_not_confirmed"
        assert CONFIRM_HEADER in refused.json()["error"]["message"]
        time.sleep(0.5)
        assert _job(server, job_id)["state"] == "running" and _quantizers(server)
        stopped = _stop(server, job_id)
        assert stopped.status_code == 200 and stopped.json()["state"] == "stopped"
    finally:
        _stop_all(server)
    assert _stop(server, "no-such-job").status_code == 404
