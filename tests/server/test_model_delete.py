"""One delete policy and one listing of local models, whichever API asks.

A loaded, idle model is unloaded and then deleted (``DELETE /hearth/models/{id}`` and Ollama's
``DELETE /api/delete`` alike); a pinned one is refused until it is unloaded; an embedded one is
never deleted. ``/v1/models``, ``/api/tags`` and ``/hearth/models`` list the same models.
"""

from __future__ import annotations

import shutil
import time

import httpx
import pytest

from runtime.import_confirm import CONFIRM_HEADER, load_token
from runtime.server.launcher import ServiceProcess


@pytest.fixture(scope="module")
def service(smollm2_path):
    s = ServiceProcess("--parallel", "1", "--ctx", "512").wait_ready()
    yield s
    s.stop()


def _import(service, data_dir, source, folder, name: str) -> str:
    path = folder / name
    shutil.copy(source, path)
    r = httpx.post(f"{service.url}/hearth/models/import", json={"path": str(path)},
                   headers={CONFIRM_HEADER: load_token(data_dir)})
    assert r.status_code == 201, r.text
    return r.json()["id"]


def _resident(service) -> set[str]:
    return {m["id"] for m in httpx.get(f"{service.url}/hearth/stats").json()["models"]}


def _local(service) -> set[str]:
    return {m["id"] for m in httpx.get(f"{service.url}/hearth/models").json()["models"]}


def test_a_loaded_model_is_unloaded_then_deleted_by_either_api(service, data_dir, smollm2_path, tmp_path):
    url = service.url
    plain = _import(service, data_dir, smollm2_path, tmp_path, "delete-me.gguf")
    r = httpx.post(f"{url}/hearth/models/{plain}/load", json={}, timeout=120)
    assert r.status_code == 200, r.text
    assert plain in _resident(service)
    r = httpx.delete(f"{url}/hearth/models/{plain}", timeout=60)
    assert r.status_code == 200, r.text
    assert r.json()["unloaded"] is True
    assert plain not in _resident(service) and plain not in _local(service)

    pinned = _import(service, data_dir, smollm2_path, tmp_path, "pinned.gguf")
    assert httpx.post(f"{url}/hearth/models/{pinned}/load", json={"pin": True}, timeout=120).status_code == 200
    for delete in (lambda: httpx.request("DELETE", f"{url}/api/delete", json={"model": pinned}, timeout=60),
                   lambda: httpx.delete(f"{url}/hearth/models/{pinned}", timeout=60)):
        r = delete()
        assert r.status_code == 409 and "pinned" in r.text, r.text
    assert pinned in _resident(service) and pinned in _local(service)
    assert httpx.post(f"{url}/hearth/models/{pinned}/unload").status_code == 200
    r = httpx.request("DELETE", f"{url}/api/delete", json={"model": pinned}, timeout=60)
    assert r.status_code == 200, r.text
    assert pinned not in _local(service)


def test_embedded_models_are_never_deleted(service):
    for r in (httpx.delete(f"{service.url}/hearth/models/smollm2-135m"),
              httpx.request("DELETE", f"{service.url}/api/delete", json={"model": "smollm2-135m"})):
        assert r.status_code == 400 and "ships with Hearth" in r.text, r.text
    r = httpx.delete(f"{service.url}/hearth/models/no-such-model")
    assert r.status_code == 404


def test_the_three_listings_name_the_same_models(service, data_dir, smollm2_path, tmp_path):
    url = service.url
    extra = _import(service, data_dir, smollm2_path, tmp_path, "listed.gguf")
    try:
        hearth = _local(service)
        openai = {m["id"] for m in httpx.get(f"{url}/v1/models").json()["data"]}
        tags = {m["name"].removesuffix(":latest") for m in httpx.get(f"{url}/api/tags").json()["models"]}
        assert hearth == openai == tags
        assert {"smollm2-135m", "gemma-3-270m", extra} <= hearth  # embedded ones, placed or not
    finally:
        httpx.delete(f"{url}/hearth/models/{extra}")


def test_a_model_answering_a_request_is_not_deleted(service, data_dir, smollm2_path, tmp_path):
    url = service.url
    busy = _import(service, data_dir, smollm2_path, tmp_path, "busy.gguf")
    body = {"model": busy, "messages": [{"role": "user", "content": "Count to a thousand."}],
            "max_tokens": 400, "stream": True, "temperature": 0}
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=120) as stream:
        lines = stream.iter_lines()
        assert next(line for line in lines if line.startswith("data:"))  # it is generating
        r = httpx.delete(f"{url}/hearth/models/{busy}", timeout=60)
        assert r.status_code == 409 and r.json()["error"]["code"] == "model_in_use", r.text
    assert busy in _local(service)
    deadline = time.monotonic() + 10  # the stream closed: the request is cancelled, the model idle again
    while (r := httpx.delete(f"{url}/hearth/models/{busy}", timeout=60)).status_code == 409 \
            and time.monotonic() < deadline:
        time.sleep(0.1)
    assert r.status_code == 200, r.text
