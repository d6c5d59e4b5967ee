"""A Hugging Face Hub-compatible server on 127.0.0.1, for tests that must never reach the real hub.

It serves what ``huggingface_hub`` and Hearth's store read:

- ``HEAD``/``GET /{owner}/{repo}/resolve/{revision}/{file}``: ``ETag`` (the LFS sha256 for LFS
  files, the git blob id otherwise), ``X-Repo-Commit``, ``X-Linked-Etag``, ``X-Linked-Size``,
  ``Content-Length``, ``Accept-Ranges``; ``Range: bytes=N-`` / ``N-M`` answered with 206.
- ``GET /api/models/{owner}/{repo}`` (and ``/revision/{rev}``): model info with ``siblings``;
  with ``?blobs=true`` (``files_metadata=True``) each sibling has ``size``, ``blobId`` and
  ``lfs: {sha256, size, pointerSize}``.
- ``GET /api/models/{owner}/{repo}/tree/{rev}[/{path}]``: the repo tree (``list_repo_tree``).
- ``GET /api/models?search=&filter=&author=&limit=``: model search (``list_models``).
- Errors as the hub sends them: 404 with ``X-Error-Code: RepoNotFound`` / ``EntryNotFound`` /
  ``RevisionNotFound``.

Test controls (the ``loopback_hub`` fixture in ``tests/conftest.py`` yields a ``LoopbackHub``)::

    hub.add_repo("owner/repo", {"model-Q4_K_M.gguf": b"..." or Path(...)}, tags=["gguf"])
    hub.add_file("owner/repo", "x.gguf", data, advertised_size=None, lfs=True)
    hub.cut_after("owner/repo", "x.gguf", n_bytes)     # next GET sends n bytes then drops the connection
    hub.hold_after("owner/repo", "x.gguf", n_bytes)    # next GET sends n bytes then waits for release()
    hub.release()                                       # lets held responses go on
    hub.corrupt("owner/repo", "x.gguf", offset)         # serve the file with one byte flipped
    hub.fail_repo("owner/repo", 404)                    # every request for the repo answers 404
    hub.lie("owner/repo", "x.gguf", lfs=None, blobId="") # hostile listing fields (None: left out)
    hub.lie("owner/repo", commit="../../x")             # a hostile commit in the listing
    hub.ranges("owner/repo", "x.gguf")                  # Range headers of the GETs received (None: no Range)
    hub.gets("owner/repo", "x.gguf")                    # how many GETs of the file were received
    hub.bytes_sent("owner/repo", "x.gguf")              # body bytes sent for the file, over all GETs
    hub.url                                             # http://127.0.0.1:PORT (HF_ENDPOINT)

The server runs its own event loop on a background thread, so sync tests, async tests and
child processes (with ``HF_ENDPOINT=hub.url``) can all use it.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web

CHUNK = 64 * 1024


@dataclass
class HubFile:
    name: str
    data: bytes | None
    path: Path | None
    size: int
    sha256: str
    lfs: bool = True
    advertised_size: int | None = None
    cut_after: list[int] = field(default_factory=list)  #: one entry per upcoming GET
    hold_after: list[int] = field(default_factory=list)
    corrupt_at: int | None = None
    listing: dict = field(default_factory=dict)  #: sibling fields served instead (None: left out)

    @property
    def blob_id(self) -> str:
        if self.lfs:
            pointer = f"version https://git-lfs.github.com/spec/v1\noid sha256:{self.sha256}\nsize {self.size}\n"
            return _git_blob_id(pointer.encode())
        return _git_blob_id(self.data if self.data is not None else self.path.read_bytes())  # the true bytes

    @property
    def etag(self) -> str:
        return self.sha256 if self.lfs else self.blob_id

    @property
    def listed_size(self) -> int:
        return self.advertised_size if self.advertised_size is not None else self.size

    def read(self, start: int, end: int) -> bytes:
        """Bytes [start, end) as served (with the corrupted byte, if any)."""
        if self.data is not None:
            chunk = self.data[start:end]
        else:
            with self.path.open("rb") as f:
                f.seek(start)
                chunk = f.read(end - start)
        if self.corrupt_at is not None and start <= self.corrupt_at < end:
            i = self.corrupt_at - start
            chunk = chunk[:i] + bytes([chunk[i] ^ 0xFF]) + chunk[i + 1:]
        return chunk


@dataclass
class HubRepo:
    repo_id: str
    files: dict[str, HubFile] = field(default_factory=dict)
    tags: list[str] = field(default_factory=list)
    downloads: int = 0
    fail_status: int | None = None
    listed_commit: str | None = None  #: the ``sha`` the listing claims, instead of the true one

    @property
    def commit(self) -> str:
        return hashlib.sha1(self.repo_id.encode()).hexdigest()


@dataclass
class Received:
    method: str
    repo_id: str
    filename: str
    range: str | None
    status: int


def _git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _sha256(data: bytes | None, path: Path | None) -> str:
    h = hashlib.sha256()
    if data is not None:
        h.update(data)
    else:
        with path.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


_RANGE = re.compile(r"bytes=(\d+)-(\d*)$")


class LoopbackHub:
    """A hub on an ephemeral loopback port; ``start()`` / ``stop()`` (or use as a context manager)."""

    def __init__(self) -> None:
        self.repos: dict[str, HubRepo] = {}
        self.received: list[Received] = []
        self.url = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._release: asyncio.Event | None = None
        self._lock = threading.Lock()
        self._sent: dict[tuple[str, str], int] = {}

    # --- set-up -----------------------------------------------------------------------------
    def add_repo(self, repo_id: str, files: dict[str, bytes | Path] | None = None, *,
                 tags: list[str] | None = None, downloads: int = 0) -> HubRepo:
        repo = self.repos.setdefault(repo_id, HubRepo(repo_id))
        repo.tags = list(tags) if tags is not None else (["gguf"] if any(
            n.endswith(".gguf") for n in (files or {})) else [])
        repo.downloads = downloads
        for name, content in (files or {}).items():
            self.add_file(repo_id, name, content)
        return repo

    def add_file(self, repo_id: str, name: str, content: bytes | Path, *, advertised_size: int | None = None,
                 lfs: bool | None = None) -> HubFile:
        """Add (or replace) a file; ``lfs`` defaults to True for .gguf and .safetensors files."""
        repo = self.repos.setdefault(repo_id, HubRepo(repo_id))
        if isinstance(content, (bytes, bytearray)):
            data, path, size = bytes(content), None, len(content)
        else:
            data, path, size = None, Path(content), Path(content).stat().st_size
        if lfs is None:
            lfs = name.endswith((".gguf", ".safetensors", ".bin"))
        f = HubFile(name, data, path, size, _sha256(data, path), lfs=lfs, advertised_size=advertised_size)
        repo.files[name] = f
        if name.endswith(".gguf") and "gguf" not in repo.tags:
            repo.tags.append("gguf")
        return f

    def file(self, repo_id: str, name: str) -> HubFile:
        return self.repos[repo_id].files[name]

    def cut_after(self, repo_id: str, name: str, n_bytes: int) -> None:
        """The next GET of the file sends ``n_bytes`` of body, then the connection drops."""
        self.file(repo_id, name).cut_after.append(n_bytes)

    def hold_after(self, repo_id: str, name: str, n_bytes: int) -> None:
        """The next GET of the file sends ``n_bytes`` of body, then waits until ``release()``."""
        self.file(repo_id, name).hold_after.append(n_bytes)

    def release(self) -> None:
        if self._loop is not None and self._release is not None:
            self._loop.call_soon_threadsafe(self._release.set)

    def corrupt(self, repo_id: str, name: str, offset: int) -> None:
        """Serve the file with the byte at ``offset`` flipped; the listed sha256 stays the true one."""
        self.file(repo_id, name).corrupt_at = offset

    def lie(self, repo_id: str, name: str | None = None, *, commit: str | None = None, **fields) -> None:
        """Serve hostile metadata: sibling ``fields`` of file ``name`` replaced (a value of None
        leaves the field out, e.g. ``lfs=None``), or the repo's listed ``commit``."""
        if name is not None:
            self.file(repo_id, name).listing.update(fields)
        if commit is not None:
            self.repos[repo_id].listed_commit = commit

    def fail_repo(self, repo_id: str, status: int = 404) -> None:
        self.repos.setdefault(repo_id, HubRepo(repo_id)).fail_status = status

    # --- what was received ------------------------------------------------------------------
    def _gets(self, repo_id: str, name: str) -> list[Received]:
        with self._lock:
            return [r for r in self.received
                    if r.method == "GET" and r.repo_id == repo_id and r.filename == name]

    def ranges(self, repo_id: str, name: str) -> list[str | None]:
        """The Range header of each GET of the file, in order (None where there was none)."""
        return [r.range for r in self._gets(repo_id, name)]

    def gets(self, repo_id: str, name: str) -> int:
        return len(self._gets(repo_id, name))

    def bytes_sent(self, repo_id: str, name: str) -> int:
        with self._lock:
            return self._sent.get((repo_id, name), 0)

    # --- lifecycle --------------------------------------------------------------------------
    def start(self) -> LoopbackHub:
        ready = threading.Event()
        self._loop = asyncio.new_event_loop()

        async def setup() -> None:
            self._release = asyncio.Event()
            app = web.Application(middlewares=[_errors])
            app.router.add_route("GET", "/api/models", self._search)
            app.router.add_route("GET", "/api/models/{owner}/{name}", self._info)
            app.router.add_route("GET", "/api/models/{owner}/{name}/revision/{rev}", self._info)
            app.router.add_route("GET", "/api/models/{owner}/{name}/tree/{rev}", self._tree)
            app.router.add_route("GET", "/api/models/{owner}/{name}/tree/{rev}/{path:.+}", self._tree)
            app.router.add_route("*", "/{owner}/{name}/resolve/{rev}/{path:.+}", self._resolve)
            self._runner = web.AppRunner(app, handle_signals=False)
            await self._runner.setup()
            site = web.TCPSite(self._runner, "127.0.0.1", 0)
            await site.start()
            self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"

        def run() -> None:
            asyncio.set_event_loop(self._loop)
            self._loop.run_until_complete(setup())
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name="loopback-hub", daemon=True)
        self._thread.start()
        ready.wait(10)
        return self

    def stop(self) -> None:
        if self._loop is None:
            return
        self.release()
        fut = asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop)
        try:
            fut.result(10)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop.close()
            self._loop = None

    def __enter__(self) -> LoopbackHub:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # --- handlers ---------------------------------------------------------------------------
    def _repo(self, request: web.Request) -> HubRepo:
        repo_id = f"{request.match_info['owner']}/{request.match_info['name']}"
        repo = self.repos.get(repo_id)
        if repo is None or repo.fail_status == 404:
            raise _error(404, "RepoNotFound", f"Repository not found: {repo_id}")
        if repo.fail_status is not None:
            raise _error(repo.fail_status, None, "the hub failed")
        rev = request.match_info.get("rev")
        if rev is not None and rev not in ("main", repo.commit):
            raise _error(404, "RevisionNotFound", f"Invalid rev id: {rev}", repo.commit)
        return repo

    async def _info(self, request: web.Request) -> web.Response:
        repo = self._repo(request)
        blobs = request.query.get("blobs", "").lower() in ("1", "true")
        siblings = []
        for f in repo.files.values():
            s: dict = {"rfilename": f.name}
            if blobs:
                s.update(size=f.listed_size, blobId=f.blob_id)
                if f.lfs:
                    s["lfs"] = {"sha256": f.sha256, "size": f.listed_size, "pointerSize": 135}
                s.update(f.listing)
            siblings.append({k: v for k, v in s.items() if v is not None})
        return web.json_response({
            **self._summary(repo), "sha": repo.commit if repo.listed_commit is None else repo.listed_commit, "siblings": siblings, "disabled": False,
            "createdAt": "2025-01-01T00:00:00.000Z", "usedStorage": sum(f.size for f in repo.files.values()),
        })

    def _summary(self, repo: HubRepo) -> dict:
        owner = repo.repo_id.split("/")[0]
        return {"_id": repo.commit[:24], "id": repo.repo_id, "modelId": repo.repo_id, "author": owner,
                "private": False, "gated": False, "downloads": repo.downloads, "likes": 0,
                "tags": repo.tags, "library_name": "gguf" if "gguf" in repo.tags else None,
                "lastModified": "2025-01-01T00:00:00.000Z"}

    async def _tree(self, request: web.Request) -> web.Response:
        repo = self._repo(request)
        prefix = request.match_info.get("path", "").strip("/")
        out = []
        for f in repo.files.values():
            if prefix and not f.name.startswith(prefix + "/"):
                continue
            item = {"type": "file", "oid": f.blob_id, "size": f.listed_size, "path": f.name}
            if f.lfs:
                item["lfs"] = {"oid": f.sha256, "size": f.listed_size, "pointerSize": 135}
            out.append(item)
        return web.json_response(out)

    async def _search(self, request: web.Request) -> web.Response:
        q = request.query
        search = q.get("search", "").lower()
        filters = q.getall("filter", [])
        author = q.get("author")
        limit = int(q.get("limit", "1000"))
        hits = [r for r in self.repos.values()
                if r.fail_status is None and search in r.repo_id.lower()
                and all(t in r.tags for t in filters)
                and (author is None or r.repo_id.split("/")[0] == author)]
        hits.sort(key=lambda r: -r.downloads)
        return web.json_response([self._summary(r) for r in hits[:limit]])

    async def _resolve(self, request: web.Request) -> web.StreamResponse:
        if request.method not in ("GET", "HEAD"):
            raise web.HTTPMethodNotAllowed(request.method, ["GET", "HEAD"])
        repo = self._repo(request)
        name = request.match_info["path"]
        f = repo.files.get(name)
        rng = request.headers.get("Range")
        if f is None:
            self._record(request, repo.repo_id, name, rng, 404)
            raise _error(404, "EntryNotFound", f"{name} does not exist", repo.commit)
        size = f.size
        start, end = 0, size
        if rng is not None:
            m = _RANGE.match(rng.strip())
            if m is None or int(m.group(1)) >= size:
                self._record(request, repo.repo_id, name, rng, 416)
                raise web.HTTPRequestRangeNotSatisfiable(headers={"Content-Range": f"bytes */{size}"})
            start = int(m.group(1))
            end = min(int(m.group(2)) + 1, size) if m.group(2) else size
        status = 206 if rng is not None else 200
        headers = {
            "ETag": f'"{f.etag}"', "X-Repo-Commit": repo.commit, "Accept-Ranges": "bytes",
            "Content-Length": str(end - start), "Content-Type": "application/octet-stream",
            "Content-Disposition": f'inline; filename="{name.rsplit("/", 1)[-1]}"',
        }
        if f.lfs:
            headers.update({"X-Linked-Etag": f'"{f.sha256}"', "X-Linked-Size": str(f.listed_size)})
        if status == 206:
            headers["Content-Range"] = f"bytes {start}-{end - 1}/{size}"
        self._record(request, repo.repo_id, name, rng, status)
        if request.method == "HEAD":
            return web.Response(status=status, headers=headers)
        cut = f.cut_after.pop(0) if f.cut_after else None
        hold = f.hold_after.pop(0) if f.hold_after else None
        resp = web.StreamResponse(status=status, headers=headers)
        await resp.prepare(request)
        try:
            await self._send(request, resp, repo, f, start, end, cut, hold)
        except ConnectionResetError:  # the client went away (a cancelled or paused download)
            pass
        return resp

    async def _send(self, request, resp, repo: HubRepo, f: HubFile, start: int, end: int,
                    cut: int | None, hold: int | None) -> None:
        name = f.name
        pos, sent = start, 0
        while pos < end:
            if cut is not None and sent >= cut:
                request.transport.close()  # the connection drops mid-body
                return
            n = min(CHUNK, end - pos)
            for limit in (cut, hold):
                if limit is not None and sent < limit:
                    n = min(n, limit - sent)
            await resp.write(f.read(pos, pos + n))
            pos, sent = pos + n, sent + n
            with self._lock:
                self._sent[(repo.repo_id, name)] = self._sent.get((repo.repo_id, name), 0) + n
            if hold is not None and sent >= hold:
                hold = None
                await self._release.wait()
        await resp.write_eof()

    def _record(self, request: web.Request, repo_id: str, name: str, rng: str | None, status: int) -> None:
        with self._lock:
            self.received.append(Received(request.method, repo_id, name, rng, status))


class _HubError(Exception):
    def __init__(self, response: web.Response) -> None:
        super().__init__(response.status)
        self.response = response


@web.middleware
async def _errors(request: web.Request, handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except _HubError as e:
        return e.response


def _error(status: int, code: str | None, message: str, commit: str | None = None) -> _HubError:
    headers = {"X-Error-Message": message}
    if code:
        headers["X-Error-Code"] = code
    if commit:
        headers["X-Repo-Commit"] = commit
    return _HubError(web.json_response({"error": message}, status=status, headers=headers))
