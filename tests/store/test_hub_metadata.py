"""What the hub says is untrusted input: identifiers and names that would escape the cache,
or name nothing, are refused before anything is written; a file served without an LFS sha256
is still verified (by the hub's X-Linked-Etag, or by its git blob id)."""

from __future__ import annotations

import asyncio

import pytest

from runtime.store.downloads import DownloadManager
from runtime.store.fetch import RetryPolicy
from runtime.store.hf_cache import cache_dir
from runtime.store.hub import HubError
from tests.store.hubfiles import FILE, REPO, publish

FAST = RetryPolicy(attempts=2, backoff_s=0.05)


@pytest.fixture()
async def manager(loopback_hub, tmp_path):
    m = DownloadManager(tmp_path / "downloads.json", retry=FAST)
    await m.start()
    yield m
    await m.close()


def _cache_files() -> list[str]:
    root = cache_dir()
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()) if root.exists() else []


@pytest.mark.parametrize("fields, says", [
    ({"lfs": {"sha256": "../../../../escaped", "size": 10, "pointerSize": 135}}, "sha256"),
    ({"lfs": {"sha256": "", "size": 10, "pointerSize": 135}, "blobId": ""}, "sha256"),
    ({"lfs": None, "blobId": ""}, "identifier"),
    ({"lfs": None, "blobId": "../../blobs/x"}, "identifier"),
    ({"lfs": {"sha256": "ab" * 32 + "/x", "size": 10, "pointerSize": 135}}, "sha256"),
    ({"lfs": {"sha256": "ab" * 32}}, "malformed"),
    ({"size": "huge"}, "size"),
])
async def test_hostile_identifiers_are_refused_before_any_file_is_written(loopback_hub, tmp_path, manager,
                                                                         fields, says):
    publish(loopback_hub, tmp_path)
    loopback_hub.lie(REPO, FILE, **fields)
    with pytest.raises(HubError, match=says):
        await manager.pull(f"{REPO}:Q4_K_M")
    assert not any(".incomplete" in f or "escaped" in f for f in _cache_files())
    assert loopback_hub.gets(REPO, FILE) == 0


@pytest.mark.parametrize("commit", ["../../../../tmp/x", "", "main", "g" * 40])
async def test_a_hostile_commit_is_refused(loopback_hub, tmp_path, manager, commit):
    publish(loopback_hub, tmp_path)
    loopback_hub.lie(REPO, commit=commit)
    with pytest.raises(HubError, match="commit"):
        await manager.pull(f"{REPO}:Q4_K_M")
    assert _cache_files() == []


async def test_a_hostile_file_name_in_the_listing_cannot_be_pulled(loopback_hub, tmp_path, manager):
    publish(loopback_hub, tmp_path)
    loopback_hub.lie(REPO, FILE, rfilename="../../../escaped-Q4_K_M.gguf")
    with pytest.raises(HubError):
        await manager.pull(f"{REPO}:Q4_K_M")
    assert not (cache_dir().parent / "escaped-Q4_K_M.gguf").exists()
    assert _cache_files() == []


@pytest.mark.parametrize("lfs", [True, False])
async def test_a_file_without_a_listed_sha256_is_still_verified(loopback_hub, tmp_path, manager, lfs):
    data = publish(loopback_hub, tmp_path)
    loopback_hub.add_file(REPO, FILE, data, lfs=lfs)
    loopback_hub.lie(REPO, FILE, lfs=None)  # the listing gives no sha256: X-Linked-Etag (LFS) or blobId
    loopback_hub.corrupt(REPO, FILE, len(data) // 2)
    d = await asyncio.wait_for(manager.wait((await manager.pull(f"{REPO}:Q4_K_M")).id), 60)
    assert d.state == "failed" and "check" in d.error, d.error
    assert not [f for f in _cache_files() if "/blobs/" in f and not f.endswith(".lock")]

    loopback_hub.file(REPO, FILE).corrupt_at = None  # served intact: accepted
    d = await asyncio.wait_for(manager.wait(manager.resume(d.id).id), 60)
    assert d.state == "completed", d.error
    assert open(d.path, "rb").read() == data


async def test_a_damaged_download_list_cannot_name_files_outside(loopback_hub, tmp_path):
    state = tmp_path / "downloads.json"
    state.write_text('{"downloads": [{"id": "x", "ref": "r", "model": "m", "repo": "a/b", "commit": "'
                     + "0" * 40 + '", "state": "queued", "files": [{"name": "m.gguf", "size": 1, "sha256": null,'
                     ' "etag": "../../../../escaped"}]}]}')
    m = DownloadManager(state, retry=FAST)
    await m.start()
    try:
        assert m.list() == [] and m.load_problem and "moved to" in m.load_problem
    finally:
        await m.close()
    assert not (tmp_path / "escaped.incomplete").exists()
    assert list(tmp_path.glob("downloads.json.corrupt-*"))
