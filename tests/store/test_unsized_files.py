"""A file the hub lists without a size (and without an LFS size) is still bounded: it gets the size
the hub announces for it (``X-Linked-Size`` / ``Content-Length`` of a HEAD, else of the GET)
before a byte is written, the free-space check counts that size, a body longer than it is cut
and the file rejected, and a file whose size nobody announces is refused."""

from __future__ import annotations

import asyncio
import hashlib

import pytest
from aiohttp import web

from runtime.store import downloads as downloads_mod
from runtime.store.downloads import DownloadManager, NotEnoughSpace
from runtime.store.fetch import FetchError, RetryPolicy, fetch_file
from runtime.store.hf_cache import CachedFile, cache_dir
from tests.store.hubfiles import FILE, REPO, publish

FAST = RetryPolicy(attempts=2, backoff_s=0.05)


@pytest.fixture()
async def manager(loopback_hub, tmp_path):
    m = DownloadManager(tmp_path / "downloads.json", retry=FAST)
    await m.start()
    yield m
    await m.close()


def _blob_files() -> list[str]:
    blobs = cache_dir() / f"models--{REPO.replace('/', '--')}" / "blobs"
    return sorted(p.name for p in blobs.iterdir() if p.is_file()) if blobs.exists() else []


def _unlisted(hub) -> None:
    """The listing gives the file neither a size nor LFS metadata (and so no LFS size)."""
    hub.lie(REPO, FILE, size=None, lfs=None)


async def test_the_space_check_counts_the_size_the_hub_announces_for_an_unsized_file(loopback_hub, tmp_path,
                                                                                     manager):
    publish(loopback_hub, tmp_path)
    loopback_hub.file(REPO, FILE).advertised_size = 10**16  # X-Linked-Size of the HEAD: 10 PB
    _unlisted(loopback_hub)
    with pytest.raises(NotEnoughSpace, match="needs .* more disk space"):
        await manager.pull(f"{REPO}:Q4_K_M")
    assert loopback_hub.gets(REPO, FILE) == 0  # refused before the GET
    assert manager.list() == []


async def test_a_small_disk_refuses_an_unsized_git_file_by_its_content_length(loopback_hub, tmp_path, manager,
                                                                              monkeypatch):
    """A file kept in git (no LFS, no X-Linked-Size): the HEAD's Content-Length is its size."""
    data = publish(loopback_hub, tmp_path)
    loopback_hub.add_file(REPO, FILE, data, lfs=False)
    _unlisted(loopback_hub)
    manager.reserve_bytes = 0
    monkeypatch.setattr(downloads_mod, "free_bytes", lambda path: len(data) - 1)
    with pytest.raises(NotEnoughSpace, match="needs .* more disk space"):
        await manager.pull(f"{REPO}:Q4_K_M")
    assert loopback_hub.gets(REPO, FILE) == 0
    monkeypatch.setattr(downloads_mod, "free_bytes", lambda path: len(data))
    d = await asyncio.wait_for(manager.wait((await manager.pull(f"{REPO}:Q4_K_M")).id), 60)
    assert d.state == "completed", d.error
    assert d.total_bytes == len(data) and open(d.path, "rb").read() == data


async def test_a_body_longer_than_the_announced_size_is_cut_and_rejected(loopback_hub, tmp_path, manager):
    data = publish(loopback_hub, tmp_path)
    loopback_hub.file(REPO, FILE).advertised_size = 1000  # announced: 1,000 bytes; sent: about 4.5 MB
    _unlisted(loopback_hub)
    d = await asyncio.wait_for(manager.wait((await manager.pull(f"{REPO}:Q4_K_M")).id), 60)
    assert d.state == "failed" and "more than the 1,000 bytes" in d.error, d.error
    assert [f.size for f in d.files] == [1000]
    assert not [n for n in _blob_files() if not n.endswith(".lock")]  # neither the blob nor a partial file
    assert loopback_hub.gets(REPO, FILE) == 1
    assert loopback_hub.bytes_sent(REPO, FILE) < len(data)


async def test_an_lfs_size_stands_for_a_missing_size(loopback_hub, tmp_path, manager):
    data = publish(loopback_hub, tmp_path)
    sha = hashlib.sha256(data).hexdigest()
    loopback_hub.lie(REPO, FILE, size=None, lfs={"sha256": sha, "size": 10**16, "pointerSize": 135})
    with pytest.raises(NotEnoughSpace):
        await manager.pull(f"{REPO}:Q4_K_M")
    assert loopback_hub.gets(REPO, FILE) == 0


# --- fetch_file alone, against a server that announces no size ------------------------------

ETAG = "ab" * 20


def _cached(tmp_path) -> CachedFile:
    return CachedFile(tmp_path / "cache", "someone/repo", "0" * 40, "x.gguf", ETAG)


async def _chunked(request: web.Request) -> web.StreamResponse:
    """A body of 3 MiB sent chunked: no Content-Length, no size of any kind."""
    resp = web.StreamResponse()
    resp.enable_chunked_encoding()
    await resp.prepare(request)
    for _ in range(48):
        await resp.write(b"\0" * (64 << 10))
    await resp.write_eof()
    return resp


async def test_a_file_whose_size_nobody_announces_is_refused_before_a_byte_is_written(aiohttp_server, tmp_path):
    app = web.Application()
    app.router.add_get("/x", _chunked)
    server = await aiohttp_server(app)
    target = _cached(tmp_path)
    import aiohttp

    async with aiohttp.ClientSession(auto_decompress=False) as s:
        with pytest.raises(FetchError, match="announc"):
            await fetch_file(s, str(server.make_url("/x")), target, None, None, lambda n: None, retry=FAST)
    assert not target.incomplete.exists() and not target.blob.exists()


async def test_fetch_file_takes_the_size_from_the_response_and_reports_it_first(aiohttp_server, tmp_path):
    body = bytes(range(256)) * 4096  # 1 MiB
    etag = hashlib.sha1(b"blob %d\0" % len(body) + body).hexdigest()  # a git file: checked by its blob id

    async def whole(request: web.Request) -> web.Response:
        return web.Response(body=body)

    app = web.Application()
    app.router.add_get("/x", whole)
    server = await aiohttp_server(app)
    target = CachedFile(tmp_path / "cache", "someone/repo", "0" * 40, "x.gguf", etag)
    seen: list[tuple[str, int]] = []
    import aiohttp

    async with aiohttp.ClientSession(auto_decompress=False) as s:
        got = await fetch_file(s, str(server.make_url("/x")), target, None, None,
                               lambda n: seen.append(("progress", n)), retry=FAST,
                               on_size=lambda n: seen.append(("size", n)))
    assert got.read_bytes() == body
    assert ("size", len(body)) in seen
    first_write = next(i for i, (k, n) in enumerate(seen) if k == "progress" and n > 0)
    assert seen.index(("size", len(body))) < first_write  # known before anything was written

    # a space check that refuses that size stops the fetch before a byte is written
    other = CachedFile(tmp_path / "cache2", "someone/repo", "0" * 40, "x.gguf", etag)

    def refuse(n: int) -> None:
        raise NotEnoughSpace(f"{n} bytes do not fit")

    async with aiohttp.ClientSession(auto_decompress=False) as s:
        with pytest.raises(NotEnoughSpace):
            await fetch_file(s, str(server.make_url("/x")), other, None, None, lambda n: None, retry=FAST,
                             on_size=refuse)
    assert not other.incomplete.exists() and not other.blob.exists()
