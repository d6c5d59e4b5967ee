"""A model's load settings in a real service (``/hearth/models/{id}/settings``): the context and KV
cache type stored for a model are what its next load uses, a request's own context still wins,
values out of range are a 400 naming the field, storing is the user's act, and a damaged file is
ignored (logged), never fatal."""

from __future__ import annotations

import httpx
import pytest

from runtime.store.model_settings import LoadSettings, settings_path, stored_settings, store_settings
from tests.server.conftest import live_server

MODEL = "gemma-3-270m"


@pytest.fixture(scope="module")
def server(smollm2_path, gemma_path):
    s = live_server("--parallel", "1", "--ctx", "2048", "--max-models", "2")
    yield s
    s.stop()


@pytest.fixture()
def confirmed(data_dir) -> dict[str, str]:
    from runtime.import_confirm import CONFIRM_HEADER, load_token

    token = load_token(data_dir)
    assert token
    return {CONFIRM_HEADER: token}


def _chat(http: httpx.Client, **extra) -> None:
    r = http.post("/v1/chat/completions", json={"model": MODEL, "max_tokens": 1, **extra,
                                                "messages": [{"role": "user", "content": "Hi"}]})
    assert r.status_code == 200, r.text


def test_stored_settings_are_what_the_next_load_uses(server, confirmed):
    with httpx.Client(base_url=server.url, timeout=300) as http:
        try:
            _chat(http)
            before = http.get(f"/hearth/models/{MODEL}/settings").json()
            assert before["settings"] == {"ctx": None, "gpu_layers": None, "kv_type": None}
            assert before["loaded"]["ctx"] == 2048 and before["loaded"]["kv_type"] in (None, "f16")
            # the user's act: refused without the confirmation (a web page, another program)
            r = http.put(f"/hearth/models/{MODEL}/settings", json={"ctx": 1024})
            assert r.status_code == 403 and r.json()["error"]["code"] == "settings_not_confirmed"
            r = http.put(f"/hearth/models/{MODEL}/settings", json={"ctx": 1024, "kv_type": "q8_0"}, headers=confirmed)
            assert r.status_code == 200, r.text
            assert r.json()["settings"] == {"ctx": 1024, "gpu_layers": None, "kv_type": "q8_0"}
            assert MODEL in r.json()["unloaded"] and r.json()["loaded"] is None
            _chat(http)
            after = http.get(f"/hearth/models/{MODEL}/settings").json()
            assert after["loaded"] == {"ctx": 1024, "gpu_layers": 0, "kv_type": "q8_0"}, after
            # a request's own context wins over the stored one (Ollama's num_ctx)
            r = http.post("/api/chat", json={"model": MODEL, "stream": False, "options": {"num_ctx": 1536,
                                                                                          "num_predict": 1},
                                             "messages": [{"role": "user", "content": "Hi"}]})
            assert r.status_code == 200, r.text
            assert http.get(f"/hearth/models/{MODEL}/settings").json()["loaded"]["ctx"] == 1536
        finally:
            r = http.delete(f"/hearth/models/{MODEL}/settings", headers=confirmed)
        assert r.status_code == 200 and r.json()["removed"] is True
        assert r.json()["settings"] == {"ctx": None, "gpu_layers": None, "kv_type": None}
        _chat(http)
        assert http.get(f"/hearth/models/{MODEL}/settings").json()["loaded"]["ctx"] == 2048


@pytest.mark.parametrize("body, field", [({"ctx": 10}, "ctx"), ({"ctx": "big"}, "ctx"), ({"gpu_layers": -1}, "gpu_layers"),
                                         ({"kv_type": "q2"}, "kv_type"), ({"threads": 4}, "threads"),
                                         ([1], "body")])
def test_values_out_of_range_are_a_400_naming_the_field(server, confirmed, body, field):
    r = httpx.put(f"{server.url}/hearth/models/{MODEL}/settings", json=body, headers=confirmed)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == field and r.json()["error"]["code"] == "invalid_settings"


def test_a_damaged_settings_file_is_ignored_not_fatal(tmp_path, caplog):
    store_settings(tmp_path, "some/model:Q4_K_M", LoadSettings(ctx=4096))
    assert stored_settings(tmp_path, "some/model:Q4_K_M") == LoadSettings(ctx=4096)
    path = settings_path(tmp_path, "some/model:Q4_K_M")
    assert oct(path.stat().st_mode & 0o777) == "0o600" and path.parent.name == "model-settings"
    for damage in ('{"ctx": 99999999999}', "{not json", '{"ctx": 4096, "x": 1}', "x" * 10_000):
        path.write_text(damage)
        caplog.clear()
        assert stored_settings(tmp_path, "some/model:Q4_K_M") == LoadSettings()
        assert "ignoring the load settings" in caplog.text
    store_settings(tmp_path, "some/model:Q4_K_M", LoadSettings())  # nothing set: the file goes
    assert not path.exists()
