"""The download manager against the loopback hub: resume, verification, sharing, refusals."""

from __future__ import annotations

import asyncio
import hashlib
import os

import pytest

from runtime.store import hub as hubmod
from runtime.store.downloads import DownloadManager, NotEnoughSpace
from runtime.store.fetch import RetryPolicy
from runtime.store.hf_cache import cache_dir, find_snapshot
from runtime.store.resolve import UnknownModel, resolve_model
from tests.store.hubfiles import FILE, REPO, publish

FAST = RetryPolicy(attempts=3, backoff_s=0.05)


async def _until(cond, timeout: float = 60.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not cond():
        assert loop.time() < end, "condition not reached"
        await asyncio.sleep(0.02)


@pytest.fixture()
async def manager(loopback_hub, tmp_path):
    m = DownloadManager(tmp_path / "downloads.json", retry=FAST)
    await m.start()
    yield m
    await m.close()


def _blob(sha: str):
    return cache_dir() / f"models--{REPO.replace('/', '--')}" / "blobs" / sha


async def test_pull_lands_in_the_hf_cache_verified_and_other_tools_find_it(loopback_hub, tmp_path, manager, data_dir):
    data = publish(loopback_hub, tmp_path)
    d = await manager.wait((await manager.pull(f"{REPO}:Q4_K_M")).id)
    assert d.state == "completed", d.error
    sha = hashlib.sha256(data).hexdigest()
    assert os.path.realpath(d.path) == str(_blob(sha))
    assert open(d.path, "rb").read() == data
    assert d.done_bytes == d.total_bytes == len(data)
    assert (cache_dir() / f"models--{REPO.replace('/', '--')}" / "refs" / "main").read_text() == d.commit
    assert resolve_model(f"{REPO}:Q4_K_M", data_dir).path == find_snapshot(REPO, FILE)

    from huggingface_hub import hf_hub_download

    other = hf_hub_download(REPO, FILE, endpoint=loopback_hub.url, cache_dir=str(cache_dir()))
    assert os.path.realpath(other) == str(_blob(sha))
    assert loopback_hub.gets(REPO, FILE) == 1  # the other tool found the file: not fetched twice


async def test_cut_at_40_percent_resumes_with_range_and_verifies(loopback_hub, tmp_path, manager):
    data = publish(loopback_hub, tmp_path)
    cut = int(len(data) * 0.4)
    loopback_hub.cut_after(REPO, FILE, cut)
    d = await manager.wait((await manager.pull(f"{REPO}/{FILE}")).id)
    assert d.state == "completed", d.error
    first, second = loopback_hub.ranges(REPO, FILE)
    assert first is None and second.startswith("bytes=") and second.endswith("-")
    start = int(second[6:-1])
    # Resumed from what had arrived (bytes still in flight when the connection dropped are lost).
    assert 0 < start <= cut
    assert loopback_hub.bytes_sent(REPO, FILE) == cut + len(data) - start
    assert open(d.path, "rb").read() == data


async def test_corrupt_byte_is_refused_and_nothing_is_kept(loopback_hub, tmp_path, manager, data_dir):
    data = publish(loopback_hub, tmp_path)
    loopback_hub.corrupt(REPO, FILE, len(data) // 2)
    d = await manager.wait((await manager.pull(REPO)).id)
    assert d.state == "failed"
    assert "SHA-256" in d.error and "deleted" in d.error
    blobs = cache_dir() / f"models--{REPO.replace('/', '--')}" / "blobs"
    assert list(blobs.iterdir()) == []  # neither the blob nor the partial file
    assert find_snapshot(REPO, FILE) is None
    with pytest.raises(UnknownModel, match="not downloaded"):
        resolve_model(f"{REPO}:Q4_K_M", data_dir)


async def test_restart_mid_download_resumes_from_the_partial_file(loopback_hub, tmp_path):
    data = publish(loopback_hub, tmp_path)
    loopback_hub.hold_after(REPO, FILE, int(len(data) * 0.6))
    state = tmp_path / "downloads.json"
    first = DownloadManager(state, retry=FAST)
    await first.start()
    d = await first.pull(REPO)
    await _until(lambda: d.done_bytes >= 1 << 20)
    await first.close()  # the service stops mid-download
    partial = cache_dir() / f"models--{REPO.replace('/', '--')}" / "blobs" / f"{hashlib.sha256(data).hexdigest()}.incomplete"
    have = partial.stat().st_size
    assert 0 < have < len(data)

    second = DownloadManager(state, retry=FAST)
    await second.start()  # resumes what was unfinished, without being asked
    try:
        done = await asyncio.wait_for(second.wait(d.id), 60)
        assert done.state == "completed", done.error
        assert loopback_hub.ranges(REPO, FILE) == [None, f"bytes={have}-"]
        assert open(done.path, "rb").read() == data
    finally:
        await second.close()


async def test_pause_resume_and_cancel(loopback_hub, tmp_path, manager):
    data = publish(loopback_hub, tmp_path)
    loopback_hub.hold_after(REPO, FILE, len(data) // 2)
    d = await manager.pull(REPO)
    await _until(lambda: d.done_bytes >= 1 << 20)
    manager.pause(d.id)
    assert d.state == "paused"
    await asyncio.sleep(0)
    have = d.done_bytes
    manager.resume(d.id)
    done = await asyncio.wait_for(manager.wait(d.id), 60)
    assert done.state == "completed"
    ranges = loopback_hub.ranges(REPO, FILE)
    assert ranges[0] is None and ranges[1].startswith("bytes=") and int(ranges[1][6:-1]) >= have

    loopback_hub.add_file(REPO, "Other-Q8_0.gguf", data[::-1])
    loopback_hub.hold_after(REPO, "Other-Q8_0.gguf", len(data) // 2)
    d2 = await manager.pull(f"{REPO}:Q8_0")
    await _until(lambda: d2.done_bytes >= 1 << 20)
    manager.cancel(d2.id)
    assert d2.state == "cancelled"
    # a write of what had arrived may still be under way in a thread: the file goes once it ends
    await _until(lambda: not list((cache_dir() / f"models--{REPO.replace('/', '--')}" / "blobs").glob("*.incomplete")),
                 10)


async def test_not_enough_disk_space_is_refused_before_any_byte(loopback_hub, tmp_path, manager):
    loopback_hub.add_repo("big/Huge-GGUF")
    loopback_hub.add_file("big/Huge-GGUF", "Huge-Q4_K_M.gguf", b"GGUF" + bytes(1000), advertised_size=10**16)
    with pytest.raises(NotEnoughSpace, match="needs .* more disk space"):
        await manager.pull("big/Huge-GGUF")
    assert loopback_hub.gets("big/Huge-GGUF", "Huge-Q4_K_M.gguf") == 0
    assert manager.list() == []


async def test_unknown_repo_and_repo_without_gguf(loopback_hub, manager):
    with pytest.raises(hubmod.RepoNotFound, match="no model repository"):
        await manager.pull("nobody/missing-GGUF")
    loopback_hub.add_repo("someone/safetensors-only", {"model.safetensors": b"x" * 100, "config.json": b"{}"})
    with pytest.raises(hubmod.NoGGUF, match="no GGUF files"):
        await manager.pull("someone/safetensors-only")


async def test_split_model_pulls_every_part(loopback_hub, manager):
    parts = {f"Big-Q4_K_M-{i:05d}-of-00003.gguf": os.urandom(300_000 + i) for i in (1, 2, 3)}
    loopback_hub.add_repo("split/Big-GGUF", {**parts, "Big-Q8_0.gguf": os.urandom(1000)})
    d = await manager.wait((await manager.pull("split/Big-GGUF:Q4_K_M")).id)
    assert d.state == "completed", d.error
    assert [f.name for f in d.files] == sorted(parts)
    for name, data in parts.items():
        assert find_snapshot("split/Big-GGUF", name).read_bytes() == data
    assert d.path.endswith("-00001-of-00003.gguf")


async def test_concurrent_pulls_of_one_file_share_one_download(loopback_hub, tmp_path, manager):
    data = publish(loopback_hub, tmp_path)
    loopback_hub.hold_after(REPO, FILE, len(data) // 3)
    a = await manager.pull(f"{REPO}:Q4_K_M")
    same = await manager.pull(f"{REPO}:Q4_K_M")
    assert same.id == a.id  # the same reference joins the running download
    await _until(lambda: loopback_hub.bytes_sent(REPO, FILE) > 0)
    b = await manager.pull(f"{REPO}/{FILE}")  # another reference to the same file joins it too
    assert b.id == a.id
    waiters = asyncio.gather(manager.wait(a.id), manager.wait(b.id))
    loopback_hub.release()
    da, db = await asyncio.wait_for(waiters, 60)
    assert da.state == db.state == "completed"
    assert loopback_hub.gets(REPO, FILE) == 1
    assert loopback_hub.bytes_sent(REPO, FILE) == len(data)


async def test_a_catalog_id_pulls_the_catalogs_file(loopback_hub, tmp_path, manager, data_dir):
    from runtime.store.registry import Registry

    data = publish(loopback_hub, tmp_path, repo="bartowski/Llama-3.2-1B-Instruct-GGUF",
                   name="Llama-3.2-1B-Instruct-Q8_0.gguf")
    loopback_hub.add_file("bartowski/Llama-3.2-1B-Instruct-GGUF", "Llama-3.2-1B-Instruct-Q4_K_M.gguf", data[:100])
    d = await manager.wait((await manager.pull("llama-3.2-1b:Q8_0")).id)
    assert (d.state, d.model_id) == ("completed", "llama-3.2-1b:Q8_0")
    assert loopback_hub.gets("bartowski/Llama-3.2-1B-Instruct-GGUF", "Llama-3.2-1B-Instruct-Q4_K_M.gguf") == 0
    assert resolve_model("llama-3.2-1b:Q8_0", data_dir).path.read_bytes() == data
    assert "llama-3.2-1b:Q8_0" in {m.id for m in Registry(tmp_path / "data").models()}
    with pytest.raises(UnknownModel, match="hearth pull llama-3.2-1b"):
        resolve_model("llama-3.2-1b", data_dir)  # the default quantization was not pulled


async def test_retries_back_off_then_fail_with_the_partial_kept(loopback_hub, tmp_path, manager):
    data = publish(loopback_hub, tmp_path)
    loopback_hub.cut_after(REPO, FILE, 1 << 20)  # progress: the failure count starts again
    for _ in range(FAST.attempts):
        loopback_hub.cut_after(REPO, FILE, 0)  # no progress at all
    d = await manager.wait((await manager.pull(REPO)).id)
    assert d.state == "failed" and f"failed {FAST.attempts} times in a row" in d.error
    assert loopback_hub.gets(REPO, FILE) == FAST.attempts + 1
    again = await manager.wait((await manager.pull(REPO)).id)
    assert again.state == "completed" and open(again.path, "rb").read() == data
    assert loopback_hub.ranges(REPO, FILE)[-1] not in (None, "bytes=0-")


async def test_a_second_process_waits_for_the_blob_lock_then_finds_the_file(loopback_hub, tmp_path, manager):
    """Two managers stand for two processes (a service and ``hearth pull``): one fetch, no double write."""
    data = publish(loopback_hub, tmp_path)
    loopback_hub.hold_after(REPO, FILE, len(data) // 2)
    a = await manager.pull(REPO)
    await _until(lambda: loopback_hub.bytes_sent(REPO, FILE) > 0)
    other = DownloadManager(None, retry=FAST)
    await other.start()
    try:
        b = await other.pull(REPO)
        await _until(lambda: b.state == "waiting")
        loopback_hub.release()
        da, db = await asyncio.wait_for(asyncio.gather(manager.wait(a.id), other.wait(b.id)), 60)
        assert da.state == db.state == "completed"
        assert open(db.path, "rb").read() == data
        assert loopback_hub.gets(REPO, FILE) == 1
    finally:
        await other.close()


@pytest.mark.parametrize("listed", [1, 1000, "half", "one less"])
async def test_a_file_longer_than_listed_is_stopped_deleted_and_reported(loopback_hub, tmp_path, manager, listed):
    """The hub lists N bytes and sends more: nothing past N is written, the partial file is
    deleted, the download fails saying so, and it is not fetched again."""
    data = publish(loopback_hub, tmp_path)
    size = {"half": len(data) // 2, "one less": len(data) - 1}.get(listed, listed)
    loopback_hub.file(REPO, FILE).advertised_size = size
    d = await manager.wait((await manager.pull(f"{REPO}:Q4_K_M")).id)
    assert d.state == "failed" and "more than the" in d.error and f"{size:,} bytes" in d.error
    blobs = cache_dir() / f"models--{REPO.replace('/', '--')}" / "blobs"
    assert not [p for p in blobs.iterdir() if p.is_file()] if blobs.exists() else True
    assert loopback_hub.gets(REPO, FILE) == 1
    assert find_snapshot(REPO, FILE) is None
