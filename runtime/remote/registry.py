"""The service's upstreams: which exist (``remotes.json``), what each offers (its ``/v1/models``,
refreshed periodically and on demand), how healthy each is, and the remote engine for a
model name.

Naming: a remote model is called ``ID@UPSTREAM`` (``llama3.1:8b@gpu-box``), where ID is the
id its upstream gives it, so a prompt leaves the computer only when the request says where.
An upstream the user added with ``plain_names`` (``--plain-names``) also serves its ids as they
are (``Qwen/Qwen2.5-7B-Instruct``); even then a local model with the same id wins the plain
name, and several such upstreams offering the same id are one model with failover between
them. A plain name that only an upstream without ``plain_names`` lists gets a 404 that names
``ID@UPSTREAM``.
"""

from __future__ import annotations

import asyncio
import builtins
import json
import logging
import time
import weakref

import aiohttp

from runtime.remote.health import Health
from runtime.remote.keys import delete_key, load_key, store_key
from runtime.remote.remote_engine import RemoteEngine, connect_reason
from runtime.remote.upstream import Upstream, UpstreamRefused, UpstreamStore
from runtime.remote.wire import MAX_MODELS_BYTES, AnswerTooLarge, error_message, read_capped, read_error_body

log = logging.getLogger("hearth.remote")
#: /v1/models fields that give a model's context (vLLM, Hearth, LM Studio)
_CTX_FIELDS = ("max_model_len", "context_length", "max_context_length", "n_ctx")


def split_ref(ref: str) -> tuple[str, str | None]:
    """``ID@UPSTREAM`` -> (ID, UPSTREAM); anything else -> (ref, None)."""
    model, at, name = ref.rpartition("@")
    return (model, name) if at and model and name else (ref, None)


def _ollama_plain(model: str) -> str:
    return model[:-len(":latest")] if model.endswith(":latest") else model


def _json(body: bytes) -> object:
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        raise ValueError("the answer to /v1/models is not JSON") from None


def discovered(body: object) -> list[dict]:
    """The models of a ``/v1/models`` answer: id and, when the server says, its context."""
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        raise ValueError("the answer to /v1/models has no 'data' list")
    out = []
    for m in data:
        if not isinstance(m, dict) or not isinstance(m.get("id"), str) or not m["id"]:
            continue
        entry: dict = {"id": m["id"]}
        for f in _CTX_FIELDS:
            if isinstance(m.get(f), int) and not isinstance(m.get(f), bool) and m[f] > 0:
                entry["context_length"] = m[f]
                break
        if isinstance(m.get("owned_by"), str):
            entry["owned_by"] = m["owned_by"]
        out.append(entry)
    return out


class Remotes:
    def __init__(self, data_dir, refresh_interval: float = 300.0) -> None:
        self.store = UpstreamStore(data_dir)
        self.refresh_interval = refresh_interval
        self.upstreams: dict[str, Upstream] = {}
        self.health: dict[str, Health] = {}
        self._keys: dict[str, str | None] = {}
        self._engines: dict[tuple[str, str | None], RemoteEngine] = {}
        self._session: aiohttp.ClientSession | None = None
        self._stale: set[str] = set()
        #: every engine made (a refresh replaces the lookup table, not the engines serving requests)
        self.engines_made: weakref.WeakSet[RemoteEngine] = weakref.WeakSet()
        self._sync(force=True)

    # -- the list ----------------------------------------------------------------------
    def _sync(self, force: bool = False) -> None:
        """Read ``remotes.json`` again when another process (``hearth remote``) changed it."""
        if not force and not self.store.changed():
            return
        self.upstreams = {u.name: u for u in self.store.load()}
        self.health = {n: self.health.get(n, Health()) for n in self.upstreams}
        self._keys.clear()
        self._engines.clear()

    def list(self) -> list[Upstream]:
        self._sync()
        return list(self.upstreams.values())

    def get(self, name: str) -> Upstream | None:
        self._sync()
        return self.upstreams.get(name)

    def add(self, upstream: Upstream, api_key: str | None = None, replace: bool = True) -> None:
        """Add (or replace) ``upstream``; ``api_key`` goes to the OS keyring first (raises
        ``KeyringUnavailable`` without one: nothing is added then)."""
        self._sync()
        if not replace and upstream.name in self.upstreams:
            raise UpstreamRefused(f"an upstream named {upstream.name!r} exists: remove it first", "name")
        if api_key:
            store_key(upstream.name, api_key)
            upstream.key = "keyring"
        self.upstreams[upstream.name] = upstream
        self.health[upstream.name] = Health()
        self._keys.pop(upstream.name, None)
        self._engines.clear()
        self.store.save(list(self.upstreams.values()))

    def remove(self, name: str, keep_key: bool = False) -> bool:
        """Forget ``name`` (and its key in the keyring, unless ``keep_key``: the caller deletes it)."""
        self._sync()
        up = self.upstreams.pop(name, None)
        if up is None:
            return False
        if up.key == "keyring" and not keep_key:
            delete_key(name)
        self.health.pop(name, None)
        self._keys.pop(name, None)
        self._engines.clear()
        self.store.save(list(self.upstreams.values()))
        return True

    def health_of(self, name: str) -> Health:
        return self.health.setdefault(name, Health())

    def key_for(self, upstream: Upstream) -> str | None:
        if upstream.name not in self._keys:
            self._keys[upstream.name] = load_key(upstream.name, upstream.key)
        return self._keys[upstream.name]

    def stale(self, name: str) -> None:
        """The upstream's model list looks out of date: the next refresh reads it again."""
        self._stale.add(name)

    # -- models ------------------------------------------------------------------------
    def offers(self, model: str, only: str | None = None) -> builtins.list[tuple[Upstream, str]]:
        """(upstream, its model id) for ``model``, healthiest first (the order of failover):
        ``only`` that upstream, or (a plain name) those the user let serve plain names."""
        self._sync()
        found = []
        for up in self.upstreams.values():
            if (up.name != only) if only is not None else not up.plain_names:
                continue
            ids = up.model_ids()
            for want in (model, _ollama_plain(model)):
                if want in ids:
                    found.append((up, want))
                    break
        return sorted(found, key=lambda x: self.health_of(x[0].name).rank)

    def context_length(self, model: str, only: str | None = None) -> int | None:
        for up, mid in self.offers(model, only):
            for m in up.models:
                if m["id"] == mid and m.get("context_length"):
                    return int(m["context_length"])
        return None

    def engine_for(self, ref: str | None) -> RemoteEngine | None:
        """The remote engine ``ref`` names (``ID`` or ``ID@UPSTREAM``), None when no upstream offers it."""
        if not ref:
            return None
        model, only = split_ref(ref)
        if only is not None and self.get(only) is None:
            model, only = ref, None  # an '@' that is part of an id
        if not self.offers(model, only):
            return None
        key = (model, only)
        engine = self._engines.get(key)
        if engine is None:
            engine = self._engines[key] = RemoteEngine(self, ref if only else model, only, model)
        return engine

    def not_chosen(self, ref: str, missing: Exception) -> Exception:
        """The error for ``ref`` when no local model has that name and no chosen upstream offers
        it: ``missing`` (the local lookup's error), or, when an upstream lists the model but the
        user did not let plain names reach it, a 404 that says the name to use. A prompt leaves
        this computer only for a remote engine the user chose."""
        self._sync()
        names = [f"{ref}@{up.name}" for up in self.upstreams.values()
                 if not up.plain_names and any(want in up.model_ids() for want in (ref, _ollama_plain(ref)))]
        if not names:
            return missing
        from runtime.store.resolve import UnknownModel

        where = " or ".join(repr(n) for n in names[:3])
        return UnknownModel(f"model {ref!r} is not available on this computer; a remote engine lists it: to send "
                            f"the prompt there, name it {where} (or let that upstream serve plain names: "
                            "`hearth remote add NAME URL --plain-names`)")

    def explicit(self, ref: str | None) -> RemoteEngine | None:
        """The engine for an ``ID@UPSTREAM`` reference (None for any other)."""
        if not ref or split_ref(ref)[1] is None:
            return None
        return self.engine_for(ref)

    def model_entries(self, local_ids: set[str]) -> builtins.list[dict]:
        """One entry per remote model as the API lists it (see the module docstring for names)."""
        out, seen = [], set()
        for up in self.list():
            h = self.health_of(up.name)
            for m in up.models:
                mid = m["id"]
                plain = up.plain_names and mid not in local_ids and mid not in seen
                name = mid if plain else f"{mid}@{up.name}"
                if plain:
                    seen.add(mid)
                out.append({"id": name, "upstream_model": mid, "upstream": up.name, "host": up.host,
                            "url": up.url, "context_length": m.get("context_length"), "health": h.state,
                            "refreshed_at": up.refreshed_at})
        return out

    # -- talking to upstreams ----------------------------------------------------------
    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            # trust_env off: prompts go to the address the user gave, not through a proxy from the environment
            self._session = aiohttp.ClientSession(trust_env=False, read_bufsize=256 * 1024,
                                                  timeout=aiohttp.ClientTimeout(total=None))
        return self._session

    async def refresh(self, name: str | None = None) -> dict[str, str | None]:
        """Read the ``/v1/models`` of one upstream (or all); returns name -> error (None: fine)."""
        targets = [u for u in self.list() if name is None or u.name == name]
        results = await asyncio.gather(*(self._refresh_one(u) for u in targets))
        self._sync()
        for up, (models, _) in zip(targets, results):
            current = self.upstreams.get(up.name)
            if current is not None and models is not None:
                current.models, current.refreshed_at = models, time.time()
        if any(models is not None for models, _ in results):
            self._engines.clear()
            self.store.save(list(self.upstreams.values()))
        self._stale.difference_update(u.name for u in targets)
        return {u.name: err for u, (_, err) in zip(targets, results)}

    async def _refresh_one(self, up: Upstream) -> tuple[builtins.list[dict] | None, str | None]:
        """Read ``up``'s model list (its health check). The error is Hearth's own words and the
        status: nothing the address answered is repeated (adding an upstream must not tell a
        caller what else listens at an address), and the answer is read up to a cap."""
        health = self.health_of(up.name)
        headers = {}
        key = self.key_for(up)
        if key:
            headers["Authorization"] = f"Bearer {key}"
        t = up.timeouts
        timeout = aiohttp.ClientTimeout(total=t.connect + t.idle, sock_connect=t.connect)
        try:
            async with self.session().get(up.endpoint("/models"), headers=headers, timeout=timeout,
                                          allow_redirects=False) as r:
                if r.status != 200:
                    body = await read_error_body(r) if r.status >= 400 else b""
                    log.warning("upstream %s: /v1/models answered HTTP %s: %s", up.name, r.status,
                                error_message(body)[:200])
                    raise ValueError(f"/v1/models answered HTTP {r.status}"
                                     + (" (a redirect; Hearth does not follow them)" if 300 <= r.status < 400 else ""))
                body = await read_capped(r, MAX_MODELS_BYTES)
            models = discovered(_json(body))
        except aiohttp.ClientConnectorError as e:
            err = f"cannot be reached ({connect_reason(e)})"
            health.failed(err, unreachable=True)
            return None, err
        except aiohttp.ConnectionTimeoutError:
            err = f"did not accept the connection within {t.connect:g} s (connect timeout)"
            health.failed(err, unreachable=True)
            return None, err
        except asyncio.TimeoutError:
            err = "no answer to /v1/models in time"
            health.failed(err)
            return None, err
        except AnswerTooLarge:
            err = "the answer to /v1/models is too large"
            health.failed(err)
            return None, err
        except aiohttp.ClientError as e:
            err = f"did not answer /v1/models as an HTTP server ({type(e).__name__})"
            health.failed(err)
            return None, err
        except ValueError as e:
            err = str(e)
            health.failed(err)
            return None, err
        health.ok()
        return models, None

    async def refresh_forever(self) -> None:
        """Keep the model lists current: at start, then every ``refresh_interval`` seconds
        (sooner, within 10 s, for an upstream whose list looked stale)."""
        last = float("-inf")
        while True:
            if self.list() and (time.monotonic() - last >= self.refresh_interval or self._stale):
                stale = set(self._stale)
                if stale and time.monotonic() - last < self.refresh_interval:
                    for name in stale:
                        await self.refresh(name)
                else:
                    await self.refresh()
                    last = time.monotonic()
            await asyncio.sleep(10.0)

    def status(self) -> builtins.list[dict]:
        """Every upstream: address, where its key is (never the key), models, health."""
        out = []
        for up in self.list():
            out.append({"name": up.name, "url": up.url, "host": up.host,
                        "key": up.key, "allow_insecure": up.allow_insecure, "plain_names": up.plain_names,
                        "timeouts": {"connect": up.timeouts.connect, "first_byte": up.timeouts.first_byte,
                                     "idle": up.timeouts.idle},
                        "models": up.model_ids(), "refreshed_at": up.refreshed_at,
                        "health": self.health_of(up.name).to_dict(),
                        "active": sum(1 for e in list(self.engines_made) for s in list(e._open)
                                      if s.upstream.name == up.name)})
        return out

    def busy(self) -> bool:
        """Requests in flight at any upstream."""
        return any(e.active for e in list(self.engines_made))

    def fail_all(self, error) -> None:
        for e in list(self.engines_made):
            e.fail_all(error)

    async def close(self) -> None:
        for e in list(self.engines_made):
            await e.close()
        if self._session is not None:
            await self._session.close()
