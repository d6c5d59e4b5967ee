"""Secure by default: loopback bind, API key, CORS allowlist, limits, model path confinement."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
import time

import httpx
import ollama
import psutil
import pytest

from runtime.server.launcher import ServiceProcess
from tests.server.conftest import live_server

KEY = "hearth-test-key-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {KEY}"}
CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


@pytest.fixture(scope="module")
def server(smollm2_path):
    s = ServiceProcess("--parallel", "4", "--ctx", "4096", "--api-key", KEY, "--max-client-requests", "2",
                       "--max-body-mb", "0.01", "--cors-origin", "https://app.example")
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:  # /health needs no key, so the launcher's wait works
        try:
            if s.health()["engine"]["state"] == "running":
                break
        except Exception:
            time.sleep(0.2)
        time.sleep(0.1)
    yield s
    s.stop()


def hearth(*args: str, env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "runtime.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


@pytest.fixture()
def own_data_dir(tmp_path):
    return {**os.environ, "HEARTH_DATA_DIR": str(tmp_path)}


def test_non_loopback_bind_without_key_is_refused(own_data_dir):
    r = hearth("serve", "--host", "0.0.0.0", "--port", "0", env=own_data_dir, timeout=60)
    assert r.returncode == 2
    assert "needs an API key" in r.stderr and "--api-key generate" in r.stderr


def test_hearth_key_is_stored_owner_only(own_data_dir, tmp_path):
    r = hearth("key", env=own_data_dir)
    assert r.returncode == 0
    key = r.stdout.strip()
    path = tmp_path / "api_key"
    assert len(key) >= 32 and path.read_text().strip() == key
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert hearth("key", env=own_data_dir).stdout.strip() == key  # shown again, not replaced
    assert hearth("key", "--rotate", env=own_data_dir).stdout.strip() != key


def test_serve_generates_and_prints_a_key(own_data_dir, tmp_path):
    p = subprocess.Popen([sys.executable, "-m", "runtime.cli", "serve", "--port", "0", "--api-key", "generate"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=own_data_dir)
    try:
        first = p.stdout.readline()
    finally:
        p.terminate()
        p.wait(30)
    key = (tmp_path / "api_key").read_text().strip()
    assert first.startswith("API key") and key in first
    assert stat.S_IMODE((tmp_path / "api_key").stat().st_mode) == 0o600


@pytest.mark.parametrize("headers, code", [
    ({}, "missing_api_key"),
    ({"Authorization": "Bearer wrong-key-wrong-key-wrong"}, "invalid_api_key"),
    ({"Authorization": f"Basic {KEY}"}, "invalid_api_key"),
    ({"Authorization": f"Bearer {KEY}x"}, "invalid_api_key"),
])
def test_missing_or_wrong_key_gets_401(server, headers, code):
    for method, path in (("POST", "/v1/chat/completions"), ("GET", "/v1/models"), ("GET", "/hearth/stats"),
                         ("POST", "/api/pull"), ("DELETE", "/api/delete"), ("GET", "/openapi.json")):
        r = httpx.request(method, f"{server.url}{path}", json=CHAT, headers=headers)
        assert r.status_code == 401, path
        assert r.headers["WWW-Authenticate"] == "Bearer"
        body = r.json()
        err = body["error"] if path.startswith("/v1") or path.startswith("/hearth") else None
        if err is not None:
            assert err["code"] == code
        elif path.startswith("/api/"):
            assert isinstance(body["error"], str)


def test_right_key_is_served_and_health_needs_none(server):
    assert httpx.get(f"{server.url}/health").status_code == 200
    r = httpx.post(f"{server.url}/v1/chat/completions", json=CHAT, headers=AUTH, timeout=60)
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"]
    c = ollama.Client(host=server.url, headers=AUTH, timeout=60)
    assert c.chat(model="smollm2-135m", messages=CHAT["messages"], options={"num_predict": 2}).eval_count == 2
    with pytest.raises(ollama.ResponseError) as e:
        ollama.Client(host=server.url, timeout=60).list()
    assert e.value.status_code == 401


def test_disallowed_origin_gets_no_cors_grant(server):
    for origin in ("http://evil.example", "http://localhost.evil.example", "null", "http://127.0.0.1@evil.example"):
        pre = httpx.options(f"{server.url}/v1/chat/completions", headers={
            "Origin": origin, "Access-Control-Request-Method": "POST"})
        assert pre.status_code == 403 and "access-control-allow-origin" not in pre.headers, origin
        r = httpx.post(f"{server.url}/v1/chat/completions", json=CHAT, headers={**AUTH, "Origin": origin})
        assert r.status_code == 403 and "access-control-allow-origin" not in r.headers, origin
        assert r.json()["error"]["code"] == "origin_not_allowed"


def test_allowed_origins_get_a_grant_never_a_wildcard(server):
    for origin in ("http://localhost:5173", "http://127.0.0.1:8080", "https://app.example"):
        pre = httpx.options(f"{server.url}/api/chat", headers={
            "Origin": origin, "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type"})
        assert pre.status_code == 204
        assert pre.headers["access-control-allow-origin"] == origin
        assert "authorization" in pre.headers["access-control-allow-headers"].lower()
        r = httpx.post(f"{server.url}/v1/chat/completions", json={**CHAT, "stream": True},
                       headers={**AUTH, "Origin": origin}, timeout=60)
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == origin


def test_foreign_host_header_is_refused_on_loopback(server):
    r = httpx.get(f"{server.url}/v1/models", headers={**AUTH, "Host": "attacker.example"})
    assert r.status_code == 403 and r.json()["error"]["code"] == "host_not_allowed"


@pytest.mark.parametrize("ref", ["/etc/passwd", "../../../../etc/passwd.gguf", "~/.ssh/id_rsa.gguf",
                                 "/tmp/../etc/shadow.gguf", "models/../../../etc/x.gguf"])
def test_path_traversal_in_model_is_refused(server, ref):
    r = httpx.post(f"{server.url}/v1/chat/completions", json={**CHAT, "model": ref}, headers=AUTH)
    assert r.status_code == 403 and r.json()["error"]["code"] == "model_path_refused"
    r = httpx.post(f"{server.url}/api/show", json={"model": ref}, headers=AUTH)
    assert r.status_code == 403 and "outside the folders" in r.json()["error"]
    r = httpx.get(f"{server.url}/hearth/fit", params={"model": ref}, headers=AUTH)
    assert r.status_code == 403


def test_oversized_body_gets_413(server):
    big = {"messages": [{"role": "user", "content": "x" * 20_000}]}
    r = httpx.post(f"{server.url}/v1/chat/completions", json=big, headers=AUTH)
    assert r.status_code == 413 and r.json()["error"]["code"] == "body_too_large"
    r = httpx.post(f"{server.url}/api/chat", json={"model": "smollm2-135m", **big}, headers=AUTH)
    assert r.status_code == 413 and "limit" in r.json()["error"]

    def chunks():  # no Content-Length: aiohttp's own limit answers, in the same format
        for _ in range(40):
            yield b" " * 1024
    r = httpx.post(f"{server.url}/v1/completions", content=chunks(),
                   headers={**AUTH, "Content-Type": "application/json"})
    assert r.status_code == 413 and r.json()["error"]["message"]


def test_max_tokens_over_the_limit_is_clamped_not_refused(server):
    """Agents ask for more than a server gives (32000): the reply is cut at the limit instead."""
    r = httpx.post(f"{server.url}/v1/completions", headers=AUTH, timeout=120, json={
        "prompt": "1, 2, 3,", "max_tokens": 100_000, "stop": [","], "temperature": 0})
    assert r.status_code == 200, r.text[:300]
    assert r.json()["choices"][0]["finish_reason"] in ("stop", "length")


def test_flooding_client_gets_429_while_another_is_served(server, accounts):
    # the flooding client may hold 2 requests; the engine decodes 4 at once, so the other is not queued.
    # On loopback a client is a machine account: another source address is the same client, another
    # account another one
    long = {"prompt": "Write a long story.", "max_tokens": 1000, "ignore_eos": True, "stream": True}
    flood = httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.1"), headers=AUTH, timeout=120)
    same = httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.2"), headers=AUTH, timeout=120)
    started, release = threading.Barrier(3), threading.Event()

    def hold():
        with flood.stream("POST", f"{server.url}/v1/completions", json=long) as r:
            lines = r.iter_lines()
            next(lines)
            started.wait(60)
            release.wait(120)  # then leave: closing the stream cancels the request

    threads = [threading.Thread(target=hold) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        started.wait(60)
        r = flood.post(f"{server.url}/v1/completions", json={"prompt": "hi", "max_tokens": 2})
        assert r.status_code == 429 and int(r.headers["Retry-After"]) >= 1
        assert r.json()["error"]["code"] == "too_many_requests"
        r = flood.post(f"{server.url}/api/generate", json={"model": "smollm2-135m", "prompt": "hi"})
        assert r.status_code == 429 and isinstance(r.json()["error"], str)
        r = same.post(f"{server.url}/v1/completions", json={"prompt": "hi", "max_tokens": 2})
        assert r.status_code == 429, "another 127/8 source address split one client's share"
        status, body, _ = accounts(0).request(server.port, "POST", "/v1/completions",
                                              json.dumps({"prompt": "hi", "max_tokens": 2}).encode(), AUTH)
        assert status == 200, body
    finally:
        release.set()
        for t in threads:
            t.join(60)
    deadline = time.monotonic() + 60  # the held requests end once their streams closed
    while (r := flood.post(f"{server.url}/v1/completions", json={"prompt": "hi", "max_tokens": 2})).status_code == 429:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert r.status_code == 200


def test_hearth_run_uses_the_stored_key(server, tmp_path):
    """``hearth run`` against a keyed service: the stored key is sent once the service proves
    it holds it, so the chat works (without it the service answers 401)."""
    (tmp_path / "api_key").write_text(KEY + "\n")
    os.chmod(tmp_path / "api_key", 0o600)
    env = {**os.environ, "HEARTH_DATA_DIR": str(tmp_path)}
    env.pop("HEARTH_API_KEY", None)
    r = hearth("run", "smollm2-135m", "Say hi.", "--max-tokens", "3", "--temperature", "0",
               "--port", str(server.port), env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip()


def test_identity_proof_is_an_hmac_of_the_port_and_nonce(server):
    from runtime import identity

    nonce = identity.new_nonce()
    answer = httpx.get(f"{server.url}/hearth/identity", params={"nonce": nonce}).json()
    assert identity.proves(answer, KEY, server.port, nonce)
    assert not identity.proves(answer, KEY, server.port + 1, nonce)  # relayed from another port
    assert not identity.proves(answer, "hearth-some-other-key-0123456789", server.port, nonce)
    assert httpx.get(f"{server.url}/hearth/identity", params={"nonce": "short"}).status_code == 400


def test_health_tells_another_machine_only_ok(smollm2_path):
    """Bound to all interfaces (with a key): /health says ok / not ok, no model path, pid,
    version or error text, unless the caller has the key."""
    from runtime.server.launcher import free_port

    port = free_port("0.0.0.0")
    s = ServiceProcess("--api-key", KEY, "--model", "no-such-model", port=port, host="0.0.0.0")
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                body = httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).json()
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline and s.proc.poll() is None
                time.sleep(0.2)
        assert body == {"status": "ok", "service": "hearth"}
        full = httpx.get(f"http://127.0.0.1:{port}/health", headers=AUTH, timeout=5).json()
        assert "engine" in full and "version" in full
    finally:
        s.stop()


class HealthWatch:
    """GET /health every 50 ms from another process (``health_probe.py``) for ``seconds`` while
    an attack runs; the slowest answer in ms and the failures."""

    def __init__(self, port: int, seconds: float) -> None:
        self.port, self.seconds = port, seconds
        self.worst_ms, self.failures = 0.0, 0

    def __enter__(self) -> "HealthWatch":
        from pathlib import Path

        self._probe = subprocess.Popen([sys.executable, str(Path(__file__).with_name("health_probe.py")),
                                        str(self.port), str(self.seconds), "0.05"], stdout=subprocess.PIPE, text=True)
        return self

    def __exit__(self, *exc) -> None:
        out = json.loads(self._probe.communicate(timeout=self.seconds + 60)[0])
        self.worst_ms, self.failures = max(out["latencies_ms"], default=0.0), out["errors"]


def _every_route() -> list[tuple[str, str]]:
    """(method, path) of every route the service has, path parameters filled in."""
    import re

    from runtime.config import ServeConfig
    from runtime.server.app import create_app

    app = create_app(ServeConfig(preload=False))
    out = set()
    for route in app.router.routes():
        info = route.resource.get_info() if route.resource is not None else {}
        path = info.get("path") or info.get("formatter")
        if path and route.method not in ("HEAD", "OPTIONS", "*"):
            out.add((route.method, re.sub(r"\{[^}]+\}", "x", path)))
    return sorted(out)


@pytest.mark.parametrize("site", ["cross-site", "same-site", "Cross-Site", "something-new"])
def test_a_request_a_web_page_made_without_an_allowed_origin_is_refused_on_every_route(server, site):
    """An <img>, a link or a no-cors fetch carries no Origin, but the browser says where it
    comes from: every route but /health and the identity proof refuses it before any work."""
    from runtime.server.security import OPEN_PATHS

    routes = _every_route()
    assert len(routes) > 40 and ("GET", "/hearth/fit") in routes and ("POST", "/hearth/remotes") in routes
    rss = psutil.Process(server.proc.pid).memory_info().rss
    with HealthWatch(server.port, 6) as health:
        for method, path in routes:
            r = httpx.request(method, f"{server.url}{path}", headers={**AUTH, "Sec-Fetch-Site": site}, json={},
                              timeout=60)
            if path in OPEN_PATHS:
                assert r.status_code != 403, path
                continue
            assert r.status_code == 403, (method, path, r.status_code)
            assert "Sec-Fetch-Site" in r.text, (method, path)  # Ollama's routes answer a plain message
    growth = psutil.Process(server.proc.pid).memory_info().rss - rss
    print(json.dumps({"attack": f"{site} request on {len(routes)} routes", "health_max_ms": health.worst_ms,
                      "rss_growth_mib": round(growth / 2**20, 1)}))
    assert health.failures == 0 and health.worst_ms < 250 and growth < 32 * 2**20
    for fine in ("same-origin", "none"):
        r = httpx.get(f"{server.url}/v1/models", headers={**AUTH, "Sec-Fetch-Site": fine})
        assert r.status_code == 200, fine
    # a page of an allowed origin sends its Origin and is let through (CORS grants it the answer)
    r = httpx.get(f"{server.url}/v1/models", headers={**AUTH, "Sec-Fetch-Site": "cross-site",
                                                       "Origin": "https://app.example"})
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "https://app.example"


def test_no_get_writes_to_the_data_directory(smollm2_path, tmp_path):
    """A fresh data directory, the default model given by path: every GET route, with the
    embedded models named that are not placed yet, leaves every file as it was (nothing is
    copied or created) and answers from what it has."""
    from runtime.server.launcher import ServiceProcess

    env = {**os.environ, "HEARTH_DATA_DIR": str(tmp_path)}
    s = ServiceProcess("--model", str(smollm2_path), "--ctx", "2048", "--parallel", "1", env=env).wait_ready()

    def files() -> dict[str, int]:
        return {p.relative_to(tmp_path).as_posix(): p.stat().st_size for p in tmp_path.rglob("*") if p.is_file()}

    try:
        time.sleep(1.0)
        before = files()
        gets = [path for method, path in _every_route() if method == "GET"]
        for path in gets + ["/hearth/fit?model=gemma-3-270m", "/hearth/fit?model=smollm2-135m",
                            "/hearth/fit?model=minilm-l6", "/api/tags", "/v1/models/smollm2-135m"]:
            if path.endswith("/events"):
                continue  # a stream that never ends; it only reads the download list
            r = httpx.get(f"{s.url}{path}", timeout=120)
            assert r.status_code < 500 or path.startswith("/hearth/search"), (path, r.text)  # no hub here
        fit = httpx.get(f"{s.url}/hearth/fit", params={"model": "gemma-3-270m"}, timeout=60)
        assert fit.status_code == 200 and fit.json()["verdict"], fit.text  # from the catalog's numbers
        fit = httpx.get(f"{s.url}/hearth/fit", params={"model": "minilm-l6"}, timeout=60)
        assert fit.status_code == 404 and "not yet available" in fit.json()["error"]["message"]
        catalog = {m["id"]: m for m in httpx.get(f"{s.url}/hearth/catalog", timeout=120).json()["models"]}
        assert catalog["gemma-3-270m"]["local"] is False
        assert files() == before, set(files()) ^ set(before)
        r = httpx.post(f"{s.url}/v1/completions", json={"model": "gemma-3-270m", "max_tokens": 1, "prompt": "hi"},
                       timeout=300)
        assert (tmp_path / "models" / "gemma-3-270m.gguf").is_file(), r.text  # a POST may place it
    finally:
        s.stop()
