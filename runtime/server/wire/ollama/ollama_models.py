"""Local models (``runtime.store.registry.LocalModel``, listed by ``local_models.py``) described the
way Ollama's /api/tags, /api/show and /api/ps describe them."""

from __future__ import annotations

import hashlib
from pathlib import Path

from runtime.server.models.model_header import header
from runtime.server.timestamps import iso, now_iso
from runtime.store.catalog import load_catalog
from runtime.store.onnx_model import is_onnx_path
from runtime.store.gguf_file import GGUFHeader
from runtime.store.registry import LocalModel

# llama.cpp's general.file_type values (LLAMA_FTYPE_*) for the common quantizations
_FILE_TYPES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K",
               11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S",
               17: "Q5_K_M", 18: "Q6_K", 32: "BF16"}


def _parameter_size(h: GGUFHeader) -> str:
    n = sum(_elements(t.shape) for t in h.tensors)
    for unit, scale in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f}{unit}" if unit == "B" else f"{round(n / scale)}{unit}"
    return str(n)


def _elements(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _raw(m: LocalModel) -> dict:
    """The model's catalog entry as written, {} for a model the catalog does not list."""
    entry = load_catalog().get(m.catalog_id) if m.catalog_id else None
    return entry.raw if entry is not None else {}


def details(m: LocalModel) -> dict:
    raw, path = _raw(m), Path(m.path)
    out = {"parent_model": "", "format": "gguf", "family": raw.get("family", ""), "families": None,
           "parameter_size": raw.get("parameters", ""),
           "quantization_level": m.quant or raw.get("default_quant", "")}
    if is_onnx_path(path):  # an ONNX encoder: no GGUF header to read
        out["format"] = "onnx"
    elif path.is_file():
        h = header(path)
        out["family"] = out["family"] or h.architecture or ""
        out["parameter_size"] = out["parameter_size"] or _parameter_size(h)
        ft = h.metadata.get("general.file_type")
        known = _FILE_TYPES.get(ft) if isinstance(ft, int) else None
        out["quantization_level"] = out["quantization_level"] or known or str(ft or "")
    out["families"] = [out["family"]] if out["family"] else None
    return out


def digest(m: LocalModel) -> str:
    """Identifies the file version (name, size, modification time), not a hash of its bytes:
    hashing gigabytes on every listing would be too slow."""
    path = Path(m.path)
    st = path.stat() if path.is_file() else None
    key = f"{m.id}:{st.st_size if st else 0}:{st.st_mtime_ns if st else 0}"
    return hashlib.sha256(key.encode()).hexdigest()


def tag_entry(m: LocalModel) -> dict:
    path = Path(m.path)
    st = path.stat() if path.is_file() else None
    name = m.id if ("/" in m.id or ":" in m.id) else f"{m.id}:latest"
    return {"name": name, "model": name, "modified_at": iso(st.st_mtime) if st else now_iso(),
            "size": st.st_size if st else 0, "digest": digest(m), "details": details(m)}


def model_info(h: GGUFHeader) -> dict:
    """The GGUF metadata that is JSON-friendly (vocabulary arrays left out, as Ollama does)."""
    out = {}
    for k, v in h.metadata.items():
        if v is None or k == "tokenizer.chat_template":
            continue
        if isinstance(v, list):
            v = v if len(v) <= 64 and all(isinstance(x, (int, float, str, bool)) for x in v) else []
        elif not isinstance(v, (int, float, str, bool)):
            continue
        if isinstance(v, float) and v != v:
            continue
        out[k] = v
    return out


def _show_onnx(m: LocalModel) -> dict:
    from runtime.store.onnx_model import read_onnx_model

    raw, path = _raw(m), Path(m.path)
    info = read_onnx_model(path, {k: raw[k] for k in ("matryoshka", "pooling", "normalize") if k in raw})
    return {"modelfile": f"# Hearth model {m.id}\nFROM {path.name}\n", "parameters": "", "template": "",
            "license": raw.get("license", ""), "details": details(m),
            "model_info": {f"onnx.{k}": v for k, v in info.to_dict().items() if v not in (None, [])},
            "capabilities": [info.kind], "modified_at": iso(path.stat().st_mtime)}


def show(m: LocalModel, params: dict) -> dict:
    from runtime.server.generate.capabilities import capabilities

    if is_onnx_path(m.path):
        return _show_onnx(m)
    path = Path(m.path)
    h = header(path)
    template = h.metadata.get("tokenizer.chat_template")
    parameters = "\n".join(f"{k:<30} {v}" for k, v in params.items())
    raw = _raw(m)
    return {
        "modelfile": f"# Hearth model {m.id}\nFROM {path.name}\n",
        "parameters": parameters,
        "template": template if isinstance(template, str) else "",
        "license": raw.get("license", ""),
        "details": details(m),
        "model_info": model_info(h),
        # Ollama's vocabulary has no "chat" (a chat model is a "completion" one there) and
        # calls reasoning "thinking"
        "capabilities": [{"reasoning": "thinking"}.get(c, c) for c in capabilities(path) if c != "chat"],
        "modified_at": iso(path.stat().st_mtime),
    }
