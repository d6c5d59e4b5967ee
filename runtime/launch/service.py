"""What ``hearth launch`` asks of the running service, over its HTTP API (as any client would).

Read: ``/health`` (whether it runs, the model it used last), ``/v1/models`` (the local models,
loaded or not, with their context and capabilities), Ollama's ``/api/show`` (the context a model
that is not loaded would get: ``--ctx``, else the fit plan's), ``/hearth/fit`` (whether a model
fits this machine at a context). Written: ``POST /hearth/models/{id}/load`` with a larger context
and a keep-alive, when the client's prompt needs more than the model's default context.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

#: seconds to wait for a read; a load waits for the model (and, at most ``--load-wait``, for room)
READ_TIMEOUT = 10.0
LOAD_TIMEOUT = 900.0


class ServiceError(Exception):
    """The service answered a request with an error (its message), or stopped answering."""


@dataclass(frozen=True, slots=True)
class Known:
    """One model as the service (or the local store) describes it."""

    id: str
    trained: int | None  #: the context it was trained for (GGUF header, or the catalog's number)
    #: the longest request it takes now (loaded), or would take once loaded by default; None: unknown
    served: int | None
    loaded: bool
    chat: bool  #: it has a chat template
    tools: bool  #: its chat template renders a list of tools
    remote: bool = False  #: served by an upstream engine (its context is the upstream's to set)


class Service:
    """The service at ``base_url``, with the API key when it has one."""

    def __init__(self, base_url: str, key: str | None) -> None:
        self.base_url, self.key = base_url, key

    def _call(self, path: str, body: dict | None, timeout: float) -> dict:
        headers = {"Content-Type": "application/json"} if body is not None else {}
        if self.key:
            headers["Authorization"] = f"Bearer {self.key}"
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base_url + path, data=data, headers=headers,
                                     method="POST" if body is not None else "GET")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                answer = json.loads(r.read())
        except urllib.error.HTTPError as e:
            raise ServiceError(_message(e.read()) or f"{path}: HTTP {e.code}") from None
        except (urllib.error.URLError, OSError, ValueError) as e:
            raise ServiceError(f"no answer from {self.base_url}{path}: {e}") from None
        if not isinstance(answer, dict):
            raise ServiceError(f"{path} answered something other than a JSON object")
        return answer

    def get(self, path: str) -> dict:
        return self._call(path, None, READ_TIMEOUT)

    def post(self, path: str, body: dict, timeout: float = READ_TIMEOUT) -> dict:
        return self._call(path, body, timeout)

    def health(self) -> dict | None:
        """``/health``, or None when no Hearth service answers there."""
        try:
            answer = self.get("/health")
        except ServiceError:
            return None
        return answer if answer.get("service") == "hearth" else None

    def models(self) -> list[Known]:
        """Every model ``/v1/models`` lists that generates text."""
        from runtime.store.catalog import load_catalog

        catalog = load_catalog()
        out = []
        for d in self.get("/v1/models").get("data", []):
            if not isinstance(d, dict) or not isinstance(d.get("id"), str):
                continue
            caps = d.get("capabilities") or []
            if "embedding" in caps or "rerank" in caps:
                continue
            remote = d.get("engine") == "remote"
            context = d.get("context_length") if isinstance(d.get("context_length"), int) else None
            entry = catalog.get(d["id"])
            if not caps and not d.get("loaded") and not remote:
                # an embedded model not placed in the data directory yet: the catalog's numbers
                if entry is None or entry.raw.get("format") == "onnx" or entry.raw.get("task"):
                    continue
                out.append(Known(d["id"], entry.context_length, None, False, bool(entry.raw.get("chat_template")),
                                 False))
                continue
            if d.get("loaded") and not remote:  # its context is the engine's: the trained one comes from the header
                trained = self.show(d["id"])[1] or (entry.context_length if entry else None)
            else:
                trained = None if remote else context
            out.append(Known(d["id"], trained, context if d.get("loaded") else None, bool(d.get("loaded")),
                             "chat" in caps, "tools" in caps, remote))
        return out

    def show(self, model_id: str) -> tuple[int | None, int | None]:
        """(the context the service gives ``model_id`` when it loads it without being asked for one
        (``--ctx``, else the fit plan's) or has loaded it with, the context it was trained for):
        Ollama's ``/api/show`` (``num_ctx`` and ``model_info``) is the one route that reports both."""
        try:
            shown = self.post("/api/show", {"model": model_id})
        except ServiceError:
            return None, None
        found = re.search(r"^num_ctx\s+(\d+)\s*$", str(shown.get("parameters", "")), re.MULTILINE)
        info = shown.get("model_info")
        info = info if isinstance(info, dict) else {}
        trained = next((v for k, v in info.items() if k.endswith(".context_length") and isinstance(v, int)), None)
        return (int(found.group(1)) if found else None), trained

    def fit(self, model_id: str, ctx: int) -> dict | None:
        """The fit planner's answer for ``model_id`` at ``ctx`` tokens (None: it could not plan it)."""
        query = urllib.parse.urlencode({"model": model_id, "ctx": ctx})
        try:
            return self.get(f"/hearth/fit?{query}")
        except ServiceError:
            return None

    def load(self, model_id: str, ctx: int | None = None, keep_alive: float | None = None) -> dict:
        """Load ``model_id`` (with ``ctx``: reloaded with that context once idle) or set its keep-alive;
        the service's description of the resident model. Raises ``ServiceError``."""
        body: dict = {}
        if ctx is not None:
            body["ctx"] = ctx
        if keep_alive is not None:
            body["keep_alive"] = keep_alive
        return self.post(f"/hearth/models/{urllib.parse.quote(model_id, safe='')}/load", body, LOAD_TIMEOUT)


def _message(body: bytes) -> str | None:
    """The message of an error answer in any of the service's formats."""
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    error = doc.get("error") if isinstance(doc, dict) else None
    if isinstance(error, dict):
        error = error.get("message")
    return error if isinstance(error, str) else None
