"""The store's HTTP API in a real ``hearth serve``, pulling from the loopback hub.

The end-to-end pull uses the default model's real GGUF file; after the download the engine
loads the pulled file by its Hugging Face reference and answers a chat request.
"""

from __future__ import annotations

import asyncio
import json
import os

import aiohttp
import pytest

from runtime.server.launcher import ServiceProcess
from tests.store.hubfiles import FILE, REPO, publish

SMOL_REPO = "hearth-test/SmolLM2-135M-Instruct-GGUF"
SMOL_FILE = "SmolLM2-135M-Instruct-Q4_1.gguf"


@pytest.fixture()
def service(loopback_hub, smollm2_path, tmp_path):
    loopback_hub.add_repo(SMOL_REPO, {SMOL_FILE: smollm2_path, "README.md": b"# SmolLM2\n"})
    s = ServiceProcess("--parallel", "2", "--ctx", "2048", env=dict(os.environ)).wait_ready()
    yield s
    s.stop()


async def _events_until(session, url: str, download_id: str, final=("completed", "failed")) -> list[dict]:
    seen = []
    async with session.get(f"{url}/hearth/downloads/events") as r:
        assert r.headers["Content-Type"].startswith("text/event-stream")
        async for line in r.content:
            if not line.startswith(b"data: "):
                continue
            ev = json.loads(line[6:])
            if ev["id"] == download_id:
                seen.append(ev)
                if ev["state"] in final:
                    return seen
    return seen


async def test_pull_the_default_models_file_then_chat_with_it(service, loopback_hub, smollm2_path):
    url = service.url
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300)) as s:
        r = await s.post(f"{url}/hearth/models/pull", json={"model": f"{SMOL_REPO}:Q4_1"})
        assert r.status == 202, await r.text()
        body = await r.json()
        events = await asyncio.wait_for(_events_until(s, url, body["id"]), 240)
        assert events[-1]["state"] == "completed", events[-1]
        assert events[-1]["done_bytes"] == events[-1]["total_bytes"] == smollm2_path.stat().st_size
        done = [e["done_bytes"] for e in events]
        assert done == sorted(done)

        downloads = (await (await s.get(f"{url}/hearth/downloads")).json())["downloads"]
        assert [d["state"] for d in downloads if d["id"] == body["id"]] == ["completed"]
        model_id = f"{SMOL_REPO}/{SMOL_FILE}"
        local = await (await s.get(f"{url}/hearth/models")).json()
        assert model_id in [m["id"] for m in local["models"]]
        assert local["disk"]["free_bytes"] > 0
        listed = await (await s.get(f"{url}/v1/models")).json()
        assert model_id in [m["id"] for m in listed["data"]]

        r = await s.post(f"{url}/v1/chat/completions", json={
            "model": f"{SMOL_REPO}:Q4_1", "messages": [{"role": "user", "content": "Say hi."}],
            "max_tokens": 8, "temperature": 0})
        assert r.status == 200, await r.text()
        answer = await r.json()
        assert answer["model"] == model_id and answer["choices"][0]["message"]["content"]

        r = await s.delete(f"{url}/hearth/models/{model_id}")
        assert r.status == 200, await r.text()  # loaded and idle: unloaded, then deleted
        assert (await r.json())["unloaded"] is True
        local = await (await s.get(f"{url}/hearth/models")).json()
        assert model_id not in [m["id"] for m in local["models"]]


async def test_store_errors_are_clear(service, loopback_hub, tmp_path):
    url = service.url
    loopback_hub.add_repo("someone/safetensors-only", {"model.safetensors": b"x" * 10})
    text = tmp_path / "notes.gguf"
    text.write_text("just text\n" * 50)
    cases = [
        ("post", "/hearth/models/pull", {"model": "nobody/missing-GGUF"}, 404, "model_not_found"),
        ("post", "/hearth/models/pull", {"model": "someone/safetensors-only"}, 422, "no_gguf_files"),
        ("post", "/hearth/models/pull", {}, 400, None),
        ("post", "/hearth/models/pull", {"model": "smollm2-135m"}, 400, "invalid_model_reference"),
        ("post", "/hearth/models/import", {"path": str(text)}, 400, "invalid_model"),
        ("delete", "/hearth/models/no-such-model", None, 404, "model_not_found"),
        ("post", "/hearth/downloads/nope/pause", None, 404, "download_not_found"),
    ]
    from runtime.config import data_dir
    from runtime.import_confirm import CONFIRM_HEADER, load_token

    confirm = {CONFIRM_HEADER: load_token(data_dir())}  # as the app sends it after its file dialog
    async with aiohttp.ClientSession() as s:
        for method, path, body, status, code in cases:
            r = await getattr(s, method)(f"{url}{path}", json=body, headers=confirm)
            err = (await r.json())["error"]
            assert (r.status, err["code"] if code else None) == (status, code), (path, err)
            assert err["message"]


async def test_catalog_has_fit_verdicts_and_search_finds_gguf_repos(service, loopback_hub, tmp_path):
    publish(loopback_hub, tmp_path)
    async with aiohttp.ClientSession() as s:
        cat = (await (await s.get(f"{service.url}/hearth/catalog")).json())["models"]
        by_id = {m["id"]: m for m in cat}
        assert by_id["smollm2-135m"]["local"] is True
        assert by_id["smollm2-135m"]["fit"]["fits"] is True and by_id["smollm2-135m"]["fit"]["estimated"] is False
        for m in cat:
            assert m["fit"] is not None and m["fit"]["verdict"] in ("gpu", "partial", "cpu", "too_big"), m["id"]
        assert by_id["llama-3.2-1b"]["fit"]["estimated"] is True
        assert by_id["llama-3.2-1b"]["sizes"]["Q4_K_M"] > 0

        hits = await (await s.get(f"{service.url}/hearth/search", params={"q": "tiny"})).json()
        assert [h["repo"] for h in hits["models"]] == [REPO]
        files = await (await s.get(f"{service.url}/hearth/search/files", params={"repo": REPO})).json()
        assert files["files"] == [{"file": FILE, "quant": "Q4_K_M", "parts": 1,
                                   "size": loopback_hub.file(REPO, FILE).size}]


async def test_a_service_restart_resumes_the_download(loopback_hub, smollm2_path, tmp_path):
    data = publish(loopback_hub, tmp_path)
    loopback_hub.hold_after(REPO, FILE, len(data) // 2)
    env = {**os.environ, "HEARTH_DATA_DIR": str(tmp_path / "data")}
    os.makedirs(tmp_path / "data" / "models", exist_ok=True)
    os.link(smollm2_path, tmp_path / "data" / "models" / smollm2_path.name)  # the default model, no copy
    first = ServiceProcess("--ctx", "1024", env=env).wait_ready()
    try:
        async with aiohttp.ClientSession() as s:
            r = await s.post(f"{first.url}/hearth/models/pull", json={"model": REPO})
            assert r.status == 202
            download_id = (await r.json())["id"]
            for _ in range(600):
                d = (await (await s.get(f"{first.url}/hearth/downloads")).json())["downloads"][0]
                if d["done_bytes"] >= 1 << 20:
                    break
                await asyncio.sleep(0.05)
            assert d["state"] == "downloading" and d["done_bytes"] >= 1 << 20
    finally:
        first.stop()
    second = ServiceProcess("--ctx", "1024", env=env).wait_ready()
    try:
        async with aiohttp.ClientSession() as s:
            for _ in range(1200):
                d = (await (await s.get(f"{second.url}/hearth/downloads")).json())["downloads"][0]
                if d["state"] in ("completed", "failed"):
                    break
                await asyncio.sleep(0.05)
        assert (d["id"], d["state"]) == (download_id, "completed"), d
        first_range, second_range = loopback_hub.ranges(REPO, FILE)
        assert first_range is None and int(second_range[6:-1]) >= 1 << 20
    finally:
        second.stop()


async def test_a_repositorys_model_card_is_read_from_the_hub(service, loopback_hub, tmp_path):
    from runtime.server.routes.store_api import CARD_MAX_BYTES

    publish(loopback_hub, tmp_path)
    card = "---\nlicense: apache-2.0\n---\n# Tiny\n\nA small model. Süß.\n"
    loopback_hub.add_file(REPO, "README.md", card.encode(), lfs=False)
    loopback_hub.add_repo("someone/no-card", {"x-Q4_0.gguf": b"GGUF"})
    loopback_hub.add_repo("someone/long-card", {"README.md": ("# Long\n" + "é" * CARD_MAX_BYTES).encode()})
    url = f"{service.url}/hearth/search/card"
    async with aiohttp.ClientSession() as s:
        r = await s.get(url, params={"repo": REPO})
        assert r.status == 200, await r.text()
        assert await r.json() == {"repo": REPO, "card": card, "truncated": False}

        r = await s.get(url, params={"repo": "someone/long-card"})
        body = await r.json()
        assert body["truncated"] is True and body["card"].startswith("# Long\né")
        assert len(body["card"].encode()) <= CARD_MAX_BYTES and "\ufffd" not in body["card"]

        for repo, status, code in (("someone/no-card", 404, "model_card_not_found"),
                                   ("nobody/missing", 404, "model_card_not_found"),
                                   ("no-slash", 400, None), ("a/b/c", 400, None), ("../etc", 400, None),
                                   ("owner/..", 400, None), ("", 400, None), ("a/" + "x" * 200, 400, None)):
            r = await s.get(url, params={"repo": repo})
            err = (await r.json())["error"]
            assert r.status == status, (repo, r.status, err)
            assert code is None or err["code"] == code, (repo, err)
