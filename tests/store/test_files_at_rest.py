"""Files at rest: the data directory is owner-only, state files are written 0600, and a damaged
state file is moved aside with what can be read kept, never stopping the service."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
import subprocess
import sys
import time

import psutil
import pytest

from runtime.store.downloads import DownloadManager
from runtime.store.registry import Registry
from tests.hardware.ggufs import write_model


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_the_data_directory_is_created_owner_only(tmp_path):
    target = tmp_path / "fresh" / "hearth"
    code = "from runtime.config import data_dir; print(data_dir())"
    r = subprocess.run([sys.executable, "-c", code], env={**os.environ, "HEARTH_DATA_DIR": str(target)},
                       capture_output=True, text=True, check=True)
    assert r.stdout.strip() == str(target)
    assert _mode(target) == 0o700


async def test_state_files_are_written_owner_only(tmp_path):
    old = os.umask(0o022)
    try:
        reg = Registry(tmp_path)
        reg.import_file(write_model(tmp_path / "m.gguf", n_layer=1))
        assert _mode(tmp_path / "imports.json") == 0o600
        m = DownloadManager(tmp_path / "downloads.json")
        await m.start()
        m._save()
        await m.close()
        assert _mode(tmp_path / "downloads.json") == 0o600
    finally:
        os.umask(old)


@pytest.mark.parametrize("content", ['[1, 2]', '{"models": 7}', '{"models": [{"id": "no-path"}]}', "\xff\xfe not json"])
def test_a_damaged_imports_file_is_moved_aside_and_the_readable_rows_kept(tmp_path, content):
    good = write_model(tmp_path / "good.gguf", n_layer=1)
    rows = [{"id": "good", "name": "good", "source": "imported", "path": str(good), "size": 1}]
    (tmp_path / "imports.json").write_bytes(content.encode("latin-1"))
    reg = Registry(tmp_path)
    assert [m.id for m in reg.imported()] == []
    assert [m.id for m in reg.models() if m.source == "imported"] == []  # listing works again
    assert list(tmp_path.glob("imports.json.corrupt-*"))
    # a file with one bad row among good ones keeps the good ones
    (tmp_path / "imports.json").write_text(json.dumps({"models": rows + [{"id": 3}]}))
    assert [m.id for m in Registry(tmp_path).imported()] == ["good"]
    assert json.loads((tmp_path / "imports.json").read_text())["models"] == rows


async def test_a_damaged_download_list_keeps_its_readable_rows(tmp_path):
    good = {"id": "a1", "ref": "o/r", "model": "o/r/m.gguf", "repo": "o/r", "commit": "0" * 40,
            "state": "completed", "files": [{"name": "m.gguf", "size": 3, "sha256": "a" * 64, "etag": "a" * 64}]}
    state = tmp_path / "downloads.json"
    state.write_text(json.dumps({"downloads": [good, {"id": "broken"}, "nonsense"]}))
    m = DownloadManager(state)
    await m.start()
    try:
        assert [d.id for d in m.list()] == ["a1"]
        assert "moved to" in m.load_problem
    finally:
        await m.close()
    state.write_bytes(b"\x00\x01garbage")
    m = DownloadManager(state)
    await m.start()
    assert m.list() == [] and m.load_problem
    await m.close()


def test_after_a_full_session_every_file_in_the_data_directory_is_owner_only(loopback_hub, tmp_path, smollm2_path):
    """A live service in a fresh data directory: a key, a chat (kept by the app's store), a stored
    Responses conversation, a download from the loopback hub, an upstream added; then every
    folder is 0700 and every file 0600 (the umask would give 0755 and 0644)."""
    import httpx

    from runtime.import_confirm import CONFIRM_HEADER, load_token
    from runtime.server.launcher import ServiceProcess, free_port
    from tests.store.hubfiles import REPO, publish

    publish(loopback_hub, tmp_path)
    data = tmp_path / "data"
    env = {**os.environ, "HEARTH_DATA_DIR": str(data)}
    old = os.umask(0o022)
    try:
        key = subprocess.run([sys.executable, "-m", "runtime.cli", "key"], env=env, capture_output=True,
                             text=True, check=True).stdout.strip()
        s = ServiceProcess("--model", str(smollm2_path), "--ctx", "2048", "--parallel", "1", env=env)
        try:
            deadline = time.monotonic() + 180
            while True:
                try:
                    if httpx.get(f"{s.url}/health", timeout=5).json()["status"] == "ok":
                        break
                except httpx.HTTPError:
                    pass
                assert time.monotonic() < deadline and s.proc.poll() is None
                time.sleep(0.2)
            c = httpx.Client(base_url=s.url, headers={"Authorization": f"Bearer {key}"}, timeout=120)
            chat = c.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "My secret is 42"}],
                                                        "max_tokens": 4})
            assert chat.status_code == 200, chat.text
            from app.conversations import ConversationStore  # the app keeps the chat, in the same folder

            store = ConversationStore(data / "conversations.sqlite3")
            talk = store.create("secrets")
            store.add_message(talk.id, "user", "My secret is 42")
            store.add_message(talk.id, "assistant", chat.json()["choices"][0]["message"]["content"])
            store.close()
            stored = c.post("/v1/responses", json={"input": "My secret is 42", "store": True, "max_output_tokens": 4})
            assert stored.status_code == 200 and (data / "responses").is_dir(), stored.text
            pull = c.post("/hearth/models/pull", json={"model": f"{REPO}:Q4_K_M"})
            assert pull.status_code == 202, pull.text
            deadline = time.monotonic() + 120
            while c.get("/hearth/downloads").json()["downloads"][0]["state"] not in ("completed", "failed"):
                assert time.monotonic() < deadline
                time.sleep(0.1)
            assert c.get("/hearth/downloads").json()["downloads"][0]["state"] == "completed"
            # a hub that sends more than it lists: stopped, deleted, reported, the service unmoved
            loopback_hub.add_repo("liar/Long-GGUF", {"Long-Q4_K_M.gguf": os.urandom(3 << 20)})
            loopback_hub.file("liar/Long-GGUF", "Long-Q4_K_M.gguf").advertised_size = 1 << 20
            rss = psutil.Process(s.proc.pid).memory_info().rss
            probe = subprocess.Popen([sys.executable, str(Path(__file__).parents[1] / "server" / "health_probe.py"),
                                      str(s.port), "4", "0.05"], stdout=subprocess.PIPE, text=True)
            long = c.post("/hearth/models/pull", json={"model": "liar/Long-GGUF:Q4_K_M"}).json()["id"]
            while (d := next(x for x in c.get("/hearth/downloads").json()["downloads"] if x["id"] == long))[
                    "state"] not in ("completed", "failed"):
                assert time.monotonic() < deadline + 60
                time.sleep(0.1)
            health = json.loads(probe.communicate(timeout=60)[0])
            growth = psutil.Process(s.proc.pid).memory_info().rss - rss
            print(json.dumps({"attack": "a download longer than listed", "health_max_ms": max(health["latencies_ms"]),
                              "rss_growth_mib": round(growth / 2**20, 1)}))
            assert d["state"] == "failed" and "more than" in d["error"], d
            assert not list((Path(os.environ["HF_HOME"]) / "hub" / "models--liar--Long-GGUF").rglob("*.incomplete"))
            assert health["errors"] == 0 and max(health["latencies_ms"]) < 250 and growth < 32 * 2**20
            added = c.post("/hearth/remotes", json={"name": "box", "url": f"http://127.0.0.1:{free_port()}",
                                                    "timeouts": {"connect": 0.5, "first_byte": 1, "idle": 1}},
                           headers={CONFIRM_HEADER: load_token(data)})
            assert added.status_code == 201, added.text
        finally:
            s.stop()
    finally:
        os.umask(old)
    seen = {p.relative_to(data).as_posix() for p in data.rglob("*")}
    assert {"api_key", "import-token", "downloads.json", "remotes.json", "responses", "conversations.sqlite3"} <= seen, seen
    loose = {p.relative_to(data).as_posix(): oct(_mode(p)) for p in [data, *data.rglob("*")]
             if _mode(p) != (0o700 if p.is_dir() else 0o600)}
    assert not loose, loose
