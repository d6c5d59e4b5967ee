"""Adding upstreams: keys in the OS keyring only (refused, with the way out, where there is
none), plain HTTP refused off private networks, the list in the data directory without keys,
remote models marked in /v1/models, /api/tags and /health, and the `hearth remote` commands."""

from __future__ import annotations

import json

import aiohttp
import pytest

from runtime.config import SecurityConfig
from runtime.remote.keys import SERVICE
from runtime.remote.upstream import UpstreamRefused, check_transport, make_upstream, normalise_url
from tests.remote.test_faults import CHAT, FAST, confirmed, oai


async def _post(url: str, body: dict, headers: dict | None = None) -> tuple[int, dict]:
    async with aiohttp.ClientSession() as s:
        async with s.post(url, json=body, headers=headers) as r:
            return r.status, await r.json()


async def _get(url: str) -> dict:
    async with aiohttp.ClientSession() as s:
        async with s.get(url) as r:
            assert r.status == 200, await r.text()
            return await r.json()


async def test_the_key_goes_to_the_keyring_and_to_the_upstream_never_to_a_file(hearth, scripted, memory_keyring,
                                                                                tmp_path):
    up = await scripted("ok")
    h = await hearth()
    status, body = await _post(f"{h.url}/hearth/remotes", {"name": "box", "url": up.url, "api_key": "sk-secret-1",
                                                           "timeouts": FAST, "plain_names": True}, confirmed(h))
    assert status == 201 and body["key"] == "keyring" and "sk-secret-1" not in json.dumps(body)
    assert memory_keyring.passwords[(SERVICE, "box")] == "sk-secret-1"
    stored = (tmp_path / "data" / "remotes.json").read_text()
    assert "sk-secret-1" not in stored and json.loads(stored)["upstreams"][0]["key"] == "keyring"
    await oai(h).chat.completions.create(**CHAT)
    assert up.requests[-1]["headers"]["Authorization"] == "Bearer sk-secret-1"
    async with aiohttp.ClientSession() as s:
        async with s.delete(f"{h.url}/hearth/remotes/box") as r:
            assert r.status == 403  # removing is the user's act too
        async with s.delete(f"{h.url}/hearth/remotes/box", headers=confirmed(h)) as r:
            assert r.status == 200
    assert (SERVICE, "box") not in memory_keyring.passwords


async def test_without_a_keyring_the_key_is_refused_with_the_way_to_pass_it(hearth, scripted, no_keyring, tmp_path,
                                                                             monkeypatch):
    up = await scripted("ok")
    h = await hearth()
    status, body = await _post(f"{h.url}/hearth/remotes", {"name": "box", "url": up.url, "api_key": "sk-2"},
                               confirmed(h))
    assert status == 400 and body["error"]["code"] == "no_keyring" and body["error"]["param"] == "api_key"
    assert "--key-from-env" in body["error"]["message"]
    assert not (tmp_path / "data" / "remotes.json").exists()  # nothing added, nothing written
    monkeypatch.setenv("BOX_KEY", "sk-from-env")
    status, body = await _post(f"{h.url}/hearth/remotes", {"name": "box", "url": up.url, "key_env": "BOX_KEY",
                                                           "plain_names": True}, confirmed(h))
    assert status == 201 and body["key"] == "env:BOX_KEY"
    await oai(h).chat.completions.create(**CHAT)
    assert up.requests[-1]["headers"]["Authorization"] == "Bearer sk-from-env"
    assert "sk-from-env" not in (tmp_path / "data" / "remotes.json").read_text()


def test_plain_http_is_refused_outside_private_networks_unless_insisted():
    for ok in ("http://127.0.0.1:8000", "http://192.168.1.20:8000", "http://10.0.0.5", "http://[::1]:8080",
               "http://localhost:11434", "https://api.example.com"):
        check_transport(normalise_url(ok), False, resolve=lambda *a: [])
    with pytest.raises(UpstreamRefused, match="--allow-insecure-upstream"):
        check_transport(normalise_url("http://8.8.8.8:8000"), False)
    public = lambda *a: [(2, 1, 6, "", ("93.184.215.14", 0))]  # noqa: E731 - a name that resolves outside
    with pytest.raises(UpstreamRefused):
        check_transport("http://box.example.com/v1", False, resolve=public)
    check_transport("http://box.example.com/v1", True, resolve=public)
    lan = lambda *a: [(2, 1, 6, "", ("192.168.7.3", 0))]  # noqa: E731
    check_transport("http://gpu-box.lan/v1", False, resolve=lan)
    assert normalise_url("http://h:1/v1/") == normalise_url("http://h:1") == "http://h:1/v1"
    with pytest.raises(UpstreamRefused):
        make_upstream("bad name", "http://127.0.0.1:1")
    with pytest.raises(UpstreamRefused):
        normalise_url("http://user:pw@127.0.0.1:1")


async def test_remote_models_are_marked_everywhere_and_a_local_id_wins_its_name(hearth, scripted):
    up = await scripted("ok", models=["m1", "smollm2-135m"])
    h = await hearth()
    assert (await _get(f"{h.url}/hearth/remotes"))["upstreams"] == []  # off until one is added
    status, _ = await _post(f"{h.url}/hearth/remotes", {"name": "box", "url": up.url, "timeouts": FAST,
                                                        "plain_names": True}, confirmed(h))
    assert status == 201
    models = {m["id"]: m for m in (await _get(f"{h.url}/v1/models"))["data"]}
    host = up.url.split("//")[1]
    assert models["m1"]["owned_by"] == "box" and models["m1"]["remote"]["upstream"] == "box"
    assert models["m1"]["remote"]["host"] == host and models["m1"]["engine"] == "remote"
    assert models["m1"]["context_length"] == 2048
    assert models["smollm2-135m"]["owned_by"] != "box"  # the local one
    assert models["smollm2-135m@box"]["remote"]["model"] == "smollm2-135m"
    tags = {t["name"]: t for t in (await _get(f"{h.url}/api/tags"))["models"]}
    assert tags["m1"]["remote_host"] == up.url + "/v1" and tags["m1"]["remote_model"] == "m1"
    reply = await oai(h).chat.completions.create(**{**CHAT, "model": "smollm2-135m@box"})
    assert reply.choices[0].message.content == "Hello world!" and up.requests[-1]["body"]["model"] == "smollm2-135m"
    health = await _get(f"{h.url}/health")
    assert health["remotes"] == [{"name": "box", "host": host, "state": "up", "last_error": None, "models": 2}]


async def test_hearths_own_key_guards_remote_models_too(hearth, scripted):
    up = await scripted("ok")
    h = await hearth(security=SecurityConfig(api_key="hearth-key-123"))
    async with aiohttp.ClientSession(headers={"Authorization": "Bearer hearth-key-123"}) as s:
        async with s.post(f"{h.url}/hearth/remotes", json={"name": "box", "url": up.url, "plain_names": True}) as r:
            assert r.status == 201  # the API key is enough to add an upstream
    status, body = await _post(f"{h.url}/v1/chat/completions", CHAT)
    assert status == 401 and up.requests == []
    status, _ = await _post(f"{h.url}/hearth/remotes", {"name": "x", "url": up.url})
    assert status == 401


def test_remote_commands_add_list_test_and_remove(monkeypatch, tmp_path, capsys, memory_keyring):

    from runtime.cli import main

    monkeypatch.setenv("HEARTH_DATA_DIR", str(tmp_path))
    assert main(["remote", "list"]) == 0 and "remote engines are off" in capsys.readouterr().out
    assert main(["remote", "add", "pub", "http://8.8.8.8:9"]) == 1
    assert "--allow-insecure-upstream" in capsys.readouterr().err
    monkeypatch.setattr("sys.stdin", __import__("io").StringIO("sk-cli\n"))
    assert main(["remote", "add", "box", "http://127.0.0.1:9", "--key-stdin", "--connect-timeout", "1"]) == 0
    out = capsys.readouterr()
    assert "leave this computer, to 127.0.0.1:9" in out.out and "could not be read" in out.err
    assert memory_keyring.passwords[(SERVICE, "box")] == "sk-cli"
    assert main(["remote", "list"]) == 0 and "key in the OS keyring" in capsys.readouterr().out
    assert main(["remote", "test", "box"]) == 1 and "cannot be reached" in capsys.readouterr().err
    assert main(["remote", "rm", "box"]) == 0 and (SERVICE, "box") not in memory_keyring.passwords
    assert main(["remote", "rm", "box"]) == 1


async def test_an_upstream_model_id_that_looks_like_a_path_is_served_remotely(hearth, scripted):
    # llama-cpp-python's server names a model by its file path unless given an alias
    up = await scripted("ok", models=["/srv/models/big-model.gguf"])
    h = await hearth()
    status, _ = await _post(f"{h.url}/hearth/remotes", {"name": "box", "url": up.url, "timeouts": FAST,
                                                        "plain_names": True}, confirmed(h))
    assert status == 201
    reply = await oai(h).chat.completions.create(**{**CHAT, "model": "/srv/models/big-model.gguf"})
    assert reply.choices[0].message.content == "Hello world!"
    status, body = await _post(f"{h.url}/v1/chat/completions", {**CHAT, "model": "/srv/models/other.gguf"})
    assert status == 403 and body["error"]["code"] == "model_path_refused"  # not offered: the local refusal stands
