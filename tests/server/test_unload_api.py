"""POST /hearth/unload: the loaded model's worker ends and the next request loads it again."""

from __future__ import annotations

import json
import urllib.request


def _post(server, path: str, body: dict | None = None) -> dict:
    req = urllib.request.Request(f"{server.url}{path}", data=json.dumps(body or {}).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


def test_unload_frees_the_worker_and_the_next_request_reloads(server):
    pid = server.health()["engine"]["pid"]
    assert pid and server.health()["engine"]["state"] == "running"
    assert _post(server, "/hearth/unload") == {"unloaded": "smollm2-135m", "models": ["smollm2-135m"]}
    health = server.health()["engine"]
    assert health["state"] == "idle" and health["model"] is None
    assert server.stats()["models"] == []
    assert _post(server, "/hearth/unload") == {"unloaded": None, "models": []}  # nothing loaded: nothing to do

    out = _post(server, "/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4})
    assert out["choices"][0]["message"]["content"] is not None
    again = server.health()["engine"]
    assert again["state"] == "running" and again["pid"] != pid
