"""What the service's model API answers, parsed once into small typed classes.

The app reads ``/hearth/catalog``, ``/hearth/models`` (or ``/v1/models`` where a service has
no store), ``/hearth/models/{id}/template`` and ``/hearth/stats`` here, and nowhere else: the
pages and Qt models use the attributes, never the JSON field names. Each ``from_api`` takes the
service's one vocabulary (``repo``, ``default_quant``, ``quant``, ``size``) and tolerates a
missing optional field.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypedDict, cast


def _str(d: dict, key: str) -> str | None:
    v = d.get(key)
    return v if isinstance(v, str) and v else None


def _int(d: dict, key: str) -> int | None:
    v = d.get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _strs(d: dict, key: str) -> list[str] | None:
    v = d.get(key)
    return [x for x in v if isinstance(x, str)] if isinstance(v, list) else None


def _fit(d: dict) -> dict | None:
    v = d.get("fit")
    return v if isinstance(v, dict) else None


@dataclass(slots=True)
class CatalogModel:
    """One entry of ``GET /hearth/catalog``."""

    id: str
    name: str
    family: str | None = None
    repo: str | None = None
    default_quant: str | None = None
    parameters: str | None = None
    license: str | None = None
    context_length: int | None = None
    embedded: bool = False
    local: bool = False  #: downloaded (or embedded): nothing to fetch
    sizes: dict[str, int | None] = field(default_factory=dict)  #: bytes per quantization
    fit: dict | None = None  #: the planner's verdict (``/hearth/fit``'s body)
    task: str | None = None  #: "embedding" or "rerank"; None for a chat model
    params: int | None = None  #: the parameter count
    #: what it reads besides text: "vision", "audio" (its projector comes with it)
    modalities: tuple[str, ...] = ()

    @classmethod
    def from_api(cls, d: dict) -> CatalogModel:
        sizes = d.get("sizes")
        sizes = sizes if isinstance(sizes, dict) else {}
        return cls(str(d["id"]), _str(d, "name") or str(d["id"]), _str(d, "family"), _str(d, "repo"),
                   _str(d, "default_quant"), _str(d, "parameters"), _str(d, "license"), _int(d, "context_length"),
                   bool(d.get("embedded")), bool(d.get("local")), dict(sizes), _fit(d), _str(d, "task"),
                   _int(d, "params"),
                   tuple(str(m) for m in d.get("modalities") or () if m in ("vision", "audio"))
                   if isinstance(d.get("modalities"), list) else ())

    @property
    def size(self) -> int | None:
        """The default quantization's file size, when the catalog knows it."""
        return self.sizes.get(self.default_quant) if self.default_quant else None

    def matches(self, query: str) -> bool:
        """Whether a (lower-case) search string appears in what the catalog row shows."""
        return any(query in (v or "").lower() for v in (self.id, self.name, self.family, self.repo,
                                                       self.default_quant, self.license, self.parameters))


@dataclass(slots=True)
class LocalModel:
    """One entry of ``GET /hearth/models``: a model on this computer."""

    id: str
    name: str
    source: str = "local"  #: embedded | hub | imported | file
    path: str | None = None
    size: int | None = None  #: bytes on disk (0 or None: not placed or not known)
    quant: str | None = None
    repo: str | None = None
    catalog_id: str | None = None
    fit: dict | None = None
    capabilities: list[str] | None = None  #: from ``/v1/models`` (chat, tools, embedding, ...)

    @classmethod
    def from_api(cls, d: dict) -> LocalModel:
        return cls(str(d["id"]), _str(d, "name") or str(d["id"]), _str(d, "source") or "local", _str(d, "path"),
                   _int(d, "size"), _str(d, "quant"), _str(d, "repo"), _str(d, "catalog_id"), _fit(d),
                   _strs(d, "capabilities"))

    @classmethod
    def from_openai(cls, d: dict) -> LocalModel:
        """An entry of ``GET /v1/models``, for a service without the store's routes."""
        return cls(str(d["id"]), _str(d, "name") or str(d["id"]),
                   "embedded" if d.get("owned_by") == "hearth" else "local", capabilities=_strs(d, "capabilities"))

    @property
    def embedded(self) -> bool:
        """Ships with Hearth: it cannot be deleted."""
        return self.source == "embedded"


@dataclass(slots=True)
class ModelTemplate:
    """``/hearth/models/{id}/template``: the chat template a model renders with."""

    id: str
    template: str | None  #: the Jinja text; None: the model has none (plain User: / Assistant: turns)
    #: "model" (its own), "stored" (a replacement the user loaded), "file" (``--chat-template-file``)
    origin: str = "model"

    @classmethod
    def from_api(cls, d: dict) -> ModelTemplate:
        return cls(str(d["id"]), _str(d, "template"), _str(d, "origin") or "model")


class ModelMemory(TypedDict, total=False):
    rss_bytes: int  #: what the model's worker holds, as the service measures it
    planned: dict  #: the fit plan's parts


class RemoteWhere(TypedDict, total=False):
    upstream: str
    host: str
    url: str
    model: str
    health: str


class AvailableModel(TypedDict, total=False):
    """A row of ``/v1/models``: a model a chat can pick (kept as the JSON object it is; every key
    but ``id`` may be missing from an older service or another server)."""

    id: str
    name: str
    owned_by: str
    capabilities: list[str]
    loaded: bool
    context_length: int | None
    memory: ModelMemory
    engine: str  #: "remote" for a model another machine serves
    remote: RemoteWhere


@dataclass(slots=True)
class ModelLoadSettings:
    """``/hearth/models/{id}/settings``: what the user stored for a model's loading (None: the
    service's choice), and what it is loaded with now (``loaded_*``; None: not loaded)."""

    id: str
    ctx: int | None = None
    gpu_layers: int | None = None
    kv_type: str | None = None
    loaded: bool = False
    loaded_ctx: int | None = None
    loaded_gpu_layers: int | None = None
    loaded_kv_type: str | None = None

    @classmethod
    def from_api(cls, d: dict) -> ModelLoadSettings:
        stored, now = d.get("settings"), d.get("loaded")
        s: dict = stored if isinstance(stored, dict) else {}
        n: dict = now if isinstance(now, dict) else {}
        return cls(str(d["id"]), _int(s, "ctx"), _int(s, "gpu_layers"), _str(s, "kv_type"), isinstance(now, dict),
                   _int(n, "ctx"), _int(n, "gpu_layers"), _str(n, "kv_type"))


@dataclass(slots=True)
class RunningModel:
    """A loaded model, as ``GET /hearth/stats`` describes it (``models[]``)."""

    id: str
    n_ctx: int | None = None
    pid: int | None = None
    memory_bytes: int | None = None  #: what its worker holds, as the service measures it

    @classmethod
    def from_api(cls, d: dict) -> RunningModel:
        memory = d.get("memory")
        memory = memory if isinstance(memory, dict) else {}
        return cls(str(d["id"]), _int(d, "n_ctx"), _int(d, "pid"), _int(memory, "rss_bytes"))


def available_models(rows: list[dict]) -> list[AvailableModel]:
    """``/v1/models`` rows with an id, typed (nothing is copied)."""
    return [cast(AvailableModel, r) for r in rows if isinstance(r.get("id"), str) and r["id"]]
