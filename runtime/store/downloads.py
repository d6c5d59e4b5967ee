"""The download manager: pulls, progress, pause / resume / cancel, a concurrency limit, restart-safe.

A pull resolves a model reference to a repo's file(s) with the hub's metadata (size, LFS
sha256; a file listed without a size gets the one a HEAD announces, ``sized``), checks free
disk space, then fetches each file into the Hugging Face cache
(``fetch.fetch_file``: Range resume, retries, SHA-256). Downloads are persisted to a JSON
file in the data directory; a manager that starts again (service restart) resumes the ones
that had not finished, from their partial files.

Sharing: pulling what an active download already fetches returns that download (one
download, any number of waiters); two downloads that need the same file share one fetch of
it; another process fetching the same blob (a second ``hearth pull``, ``hf_hub_download``)
holds the blob's lock, and this one waits for it and then finds the file in place.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import logging
import shutil
import time
import uuid
from collections.abc import AsyncGenerator
from dataclasses import dataclass, replace
from pathlib import Path

import aiohttp

from runtime.store import checkpoint_pull, hub
from runtime.store.download_list import load_list, save_list
from runtime.store.download_state import ACTIVE, FINAL, Download, FileJob
from runtime.store.fetch import FetchError, RetryPolicy, announced_size, fetch_file, resolve_url
from runtime.store.hf_cache import CachedFile, cache_dir, hub_endpoint
from runtime.store.pull_target import PullTarget, pull_target

log = logging.getLogger("hearth.store")
#: free space kept after a download: a full disk breaks more than the download
DEFAULT_RESERVE_BYTES = 512 << 20
HISTORY = 50


class NotEnoughSpace(OSError):
    pass


class DownloadNotFound(LookupError):
    pass


@dataclass(slots=True)
class _Fetch:
    task: asyncio.Task
    waiters: set[str]


class DownloadManager:
    """Owns the downloads of one process. ``await start()`` before use, ``await close()`` after."""

    def __init__(self, state_path: Path | None = None, *, endpoint: str | None = None,
                 cache_root: Path | None = None, max_active: int = 2,
                 reserve_bytes: int = DEFAULT_RESERVE_BYTES, retry: RetryPolicy | None = None) -> None:
        self.state_path = state_path
        self.endpoint = endpoint
        self.cache_root = cache_root
        self.reserve_bytes = reserve_bytes
        self.retry = retry or RetryPolicy()
        self.downloads: dict[str, Download] = {}
        self._slots = asyncio.Semaphore(max_active)
        self._tasks: dict[str, asyncio.Task] = {}
        self._fetches: dict[Path, _Fetch] = {}
        self._subscribers: set[asyncio.Queue] = set()
        self._session: aiohttp.ClientSession | None = None
        self._done: dict[str, asyncio.Event] = {}
        self._cleanups: set[asyncio.Task] = set()  #: partial files deleted once a cancelled fetch ends
        self.load_problem: str | None = None  #: the download list was damaged (what happened)

    # --- lifecycle --------------------------------------------------------------------------
    @property
    def root(self) -> Path:
        return self.cache_root or cache_dir()

    @property
    def hub_url(self) -> str:
        return self.endpoint or hub_endpoint()

    async def start(self) -> None:
        """Load persisted downloads and resume the unfinished ones."""
        for d in self._load():
            self.downloads[d.id] = d
            self._done[d.id] = asyncio.Event()
            if d.state in FINAL:
                self._done[d.id].set()
            elif d.state != "paused":
                d.state = "queued"
                self._schedule(d)

    async def close(self) -> None:
        """Stop every task; unfinished downloads stay recorded and resume on the next start."""
        tasks = list(self._tasks.values()) + [f.task for f in self._fetches.values()]
        for t in tasks:
            t.cancel()
        for t in tasks + list(self._cleanups):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self._save()
        if self._session is not None:
            await self._session.close()
            self._session = None
        for q in self._subscribers:
            q.put_nowait(None)

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            timeout = aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=60)
            self._session = aiohttp.ClientSession(timeout=timeout, auto_decompress=False)
        return self._session

    # --- the public operations ---------------------------------------------------------------
    async def pull(self, ref: str) -> Download:
        """Start (or join) the download of ``ref``; raises for an unknown model or too little disk."""
        target = await asyncio.to_thread(pull_target, ref, self.endpoint)
        return self.start_target(ref, await self.sized(target))

    async def sized(self, target: PullTarget) -> PullTarget:
        """``target`` with a size for each file the hub listed without one (nor an LFS size): the
        size a HEAD of the file announces (``fetch.announced_size``), so that the free-space
        check counts it and the fetch is bounded by it. A file the HEAD gives no size for keeps
        None: its fetch takes the size its GET announces, or refuses it (``fetch.UnsizedFile``)."""
        if all(f.size is not None for f in target.files):
            return target
        files = []
        for f in target.files:
            if f.size is None:
                f = replace(f, size=await self._head_size(resolve_url(self.hub_url, target.repo_id, target.commit,
                                                                      f.name)))
            files.append(f)
        return replace(target, files=files)

    async def _head_size(self, url: str) -> int | None:
        try:
            async with self._client().head(url, headers={**_auth_headers(self.hub_url), "Accept-Encoding": "identity"},
                                           allow_redirects=True, max_redirects=5) as r:
                for hop in (*r.history, r):  # the hub's X-Linked-Size is on its redirect to the CDN
                    n = announced_size(hop.headers, 200 if hop is r and r.status == 200 else 0)
                    if n is not None:
                        return n
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as e:
            log.info("HEAD %s: %s; the file's size is taken from its download", url, e or type(e).__name__)
        return None

    def start_target(self, ref: str, target: PullTarget) -> Download:
        names = [f.name for f in target.files]
        for d in self.downloads.values():
            if d.state in ACTIVE + ("paused",) and d.repo_id == target.repo_id and [f.name for f in d.files] == names:
                if d.state == "paused":
                    self.resume(d.id)
                return d
        jobs = [FileJob(f.name, f.size, f.sha256, f.etag) for f in target.files]
        d = Download(uuid.uuid4().hex[:12], ref, target.model_id, target.repo_id, target.commit, jobs,
                     convert=target.convert)
        for j in jobs:
            cached = self._cached(d, j)
            j.progress.done = cached.blob.stat().st_size if cached.present(j.size) else cached.partial_bytes()
        self.check_space(d)
        self.downloads[d.id] = d
        self._done[d.id] = asyncio.Event()
        self._schedule(d)
        self._trim_history()
        self._save()
        self._emit(d, force=True)
        return d

    def _still_needs(self, d: Download) -> dict[Path, int]:
        """Bytes each blob of ``d`` still needs on disk (by blob path: a shared blob counts once)."""
        out = {}
        for j in d.files:
            cached = self._cached(d, j)
            if not cached.present(j.size):
                out[cached.blob] = max((j.size or 0) - j.progress.done, 0)
        return out

    def check_space(self, d: Download) -> None:
        """Refuse ``d`` unless the disk holds it beside what every download in progress still
        needs (free space is counted once for all of them, not once for each)."""
        mine = self._still_needs(d)
        need = sum(mine.values())
        reserved: dict[Path, int] = {}
        for other in self.downloads.values():
            if other.id != d.id and other.state in ACTIVE:
                reserved.update({k: v for k, v in self._still_needs(other).items() if k not in mine})
        held = sum(reserved.values())
        free = free_bytes(self.root)
        if need and need + held + self.reserve_bytes > free:
            busy = f", {_gb(held)} of it promised to the downloads in progress" if held else ""
            raise NotEnoughSpace(
                f"{d.model_id} needs {_gb(need)} more disk space and {_gb(free)} is free in {self.root}{busy} "
                f"(keeping {_gb(self.reserve_bytes)} spare): free some space, delete a model "
                "(hearth rm), choose a smaller quantization, or set HF_HOME to a larger disk")

    def get(self, download_id: str) -> Download:
        d = self.downloads.get(download_id)
        if d is None:
            raise DownloadNotFound(f"no download {download_id!r}")
        return d

    def list(self) -> list[Download]:
        return sorted(self.downloads.values(), key=lambda d: d.created)

    def pause(self, download_id: str) -> Download:
        d = self.get(download_id)
        if d.state in ACTIVE:
            d.state = "paused"
            self._stop(d)
            self._save()
            self._emit(d, force=True)
        return d

    def resume(self, download_id: str) -> Download:
        d = self.get(download_id)
        if d.state in ("paused", "failed"):
            d.state, d.error = "queued", None
            self._done[d.id] = asyncio.Event()
            self._schedule(d)
            self._save()
            self._emit(d, force=True)
        return d

    def cancel(self, download_id: str) -> Download:
        """Stop the download and delete its partial files (a finished download is left alone)."""
        d = self.get(download_id)
        if d.state in FINAL:
            return d
        d.state = "cancelled"
        stopped = self._stop(d)
        mine = [self._cached(d, j) for j in d.files if not self._shared(d, j)]
        for cached in mine:
            cached.incomplete.unlink(missing_ok=True)
        for j in d.files:
            j.progress.done = 0
        if stopped:  # a cancelled fetch still writes what it had received: delete that once it has ended
            task = asyncio.get_running_loop().create_task(self._discard_after(stopped, mine))
            self._cleanups.add(task)
            task.add_done_callback(self._cleanups.discard)
        self._finish(d)
        return d

    async def _discard_after(self, stopped: builtins.list[asyncio.Task], files: builtins.list[CachedFile]) -> None:
        await asyncio.gather(*stopped, return_exceptions=True)
        for cached in files:
            if cached.blob not in self._fetches:  # not fetched again meanwhile
                cached.incomplete.unlink(missing_ok=True)

    async def wait(self, download_id: str) -> Download:
        """Wait until the download completes, fails or is cancelled."""
        await self._done[download_id].wait()
        return self.get(download_id)

    async def events(self) -> AsyncGenerator[dict, None]:
        """Every download's state, then each change (progress at most ~4 times a second)."""
        q: asyncio.Queue = asyncio.Queue(maxsize=10_000)
        self._subscribers.add(q)
        try:
            for d in self.list():
                yield d.to_dict()
            while True:
                item = await q.get()
                if item is None:
                    return
                yield item
        finally:
            self._subscribers.discard(q)

    # --- running ----------------------------------------------------------------------------
    def _cached(self, d: Download, j: FileJob) -> CachedFile:
        return CachedFile(self.root, d.repo_id, d.commit, j.name, j.etag)

    def _shared(self, d: Download, j: FileJob) -> bool:
        f = self._fetches.get(self._cached(d, j).blob)
        return f is not None and bool(f.waiters - {d.id})

    def _schedule(self, d: Download) -> None:
        self._tasks[d.id] = asyncio.get_running_loop().create_task(self._run(d), name=f"download-{d.id}")

    def _stop(self, d: Download) -> builtins.list[asyncio.Task]:
        """Cancel ``d``'s task and the fetches only it waits for; returns the tasks cancelled."""
        stopped = []
        task = self._tasks.pop(d.id, None)
        if task is not None:
            task.cancel()
            stopped.append(task)
        for j in d.files:
            blob = self._cached(d, j).blob
            f = self._fetches.get(blob)
            if f is not None:
                f.waiters.discard(d.id)
                if not f.waiters:
                    f.task.cancel()
                    stopped.append(f.task)
                    self._fetches.pop(blob, None)
        return stopped

    async def _run(self, d: Download) -> None:
        try:
            for j in d.files:
                await self._fetch(d, j)
            d.path = str(self._link(d))
            if d.convert is not None:
                await self._convert(d)
            d.state = "completed"
        except asyncio.CancelledError:
            if d.state not in ("paused", "cancelled"):  # the manager closes: resume on the next start
                self._save()
            raise
        except (FetchError, OSError, hub.HubError, aiohttp.ClientError, ValueError) as e:
            d.state, d.error = "failed", str(e)
            log.warning("download %s (%s) failed: %s", d.id, d.model_id, e)
        self._tasks.pop(d.id, None)
        self._finish(d)

    async def _fetch(self, d: Download, j: FileJob) -> None:
        cached = self._cached(d, j)
        if cached.present(j.size):
            j.progress.done = cached.blob.stat().st_size
            return
        shared = self._fetches.get(cached.blob)
        if shared is None or shared.task.done():
            task = asyncio.get_running_loop().create_task(self._fetch_one(d, j, cached))
            shared = self._fetches[cached.blob] = _Fetch(task, set())
        else:  # another download fetches this blob: follow its progress
            j.progress = next((x.progress for o in self.downloads.values() for x in o.files
                               if x.etag == j.etag and o.id in shared.waiters), j.progress)
        shared.waiters.add(d.id)
        try:
            await asyncio.shield(shared.task)
        finally:
            if self._fetches.get(cached.blob) is shared and shared.task.done():
                self._fetches.pop(cached.blob, None)

    async def _fetch_one(self, d: Download, j: FileJob, cached: CachedFile) -> None:
        async with self._slots:
            d.state = "downloading"
            self._emit(d, force=True)

            def progress(n: int) -> None:
                j.progress.done = n
                if d.state == "waiting":
                    d.state = "downloading"
                if j.size is not None and n >= j.size:
                    d.state = "verifying"
                d.update_speed()
                self._emit(d)

            def waiting() -> None:
                d.state = "waiting"
                self._emit(d, force=True)

            def sized(n: int) -> None:  # listed without a size: the one the GET announces counts
                j.size = n
                self.check_space(d)
                self._save()

            url = resolve_url(self.hub_url, d.repo_id, d.commit, j.name)
            await fetch_file(self._client(), url, cached, j.size, j.sha256, progress, retry=self.retry,
                             headers=_auth_headers(self.hub_url), on_wait=waiting, on_size=sized)
            d.state = "downloading"

    async def _convert(self, d: Download) -> None:
        """A GPTQ or AWQ checkpoint becomes a registered GGUF (``checkpoint_pull``)."""
        d.state = "converting"
        self._emit(d, force=True)
        assert d.path is not None  # _run links the fetched files first
        out = await checkpoint_pull.convert(Path(d.path).parent, d.repo_id, d.commit)
        d.model_id = await asyncio.to_thread(checkpoint_pull.register, out)
        d.path = str(out)

    def _link(self, d: Download) -> Path:
        paths = [self._cached(d, j).link("main") for j in d.files]
        return paths[0]

    def _finish(self, d: Download) -> None:
        try:
            self._save()
            self._emit(d, force=True)
        finally:  # whoever waits (``/api/pull`` without a stream) learns the outcome regardless
            ev = self._done.get(d.id)
            if ev is not None:
                ev.set()

    def _emit(self, d: Download, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - d._emitted < 0.25:
            return
        d._emitted = now
        payload = d.to_dict()
        for q in list(self._subscribers):
            with contextlib.suppress(asyncio.QueueFull):
                q.put_nowait(payload)

    # --- persistence ------------------------------------------------------------------------
    def _trim_history(self) -> None:
        final = [d for d in self.list() if d.state in FINAL]
        for d in final[:max(len(final) - HISTORY, 0)]:
            self.downloads.pop(d.id, None)
            self._done.pop(d.id, None)

    def _save(self) -> None:
        if self.state_path is not None:
            save_list(self.state_path, self.list())

    def _load(self) -> builtins.list[Download]:
        if self.state_path is None:
            return []
        downloads, self.load_problem = load_list(self.state_path)
        for d in downloads:
            for j in d.files:
                c = self._cached(d, j)
                j.progress.done = c.blob.stat().st_size if c.present(j.size) else c.partial_bytes()
        return downloads


def free_bytes(path: Path) -> int:
    """Free bytes on the disk that holds ``path`` (or its nearest existing parent)."""
    p = path
    while not p.exists() and p != p.parent:
        p = p.parent
    return shutil.disk_usage(p).free


def _gb(n: int) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e8 else f"{n / 1e6:.1f} MB"


def _auth_headers(endpoint: str) -> dict[str, str]:
    """The user's Hugging Face token, if one is configured (gated repos need it)."""
    from huggingface_hub import get_token

    token = get_token()
    return {"Authorization": f"Bearer {token}"} if token else {}
