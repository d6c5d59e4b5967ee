"""What a model file can do, read from its GGUF metadata and chat template.

``chat``: it has a chat template; ``completion``: it generates text (every model that is not an
encoder); ``embedding``: an encoder architecture or a pooling type in its metadata (or an ONNX
encoder); ``rerank``: rank pooling (or an ONNX cross-encoder); ``tools``: its chat template
describes tools or renders calls; ``reasoning``: its template has thinking markers (both read
from the output contract derived from the template; blocking: callers run it in a thread);
``vision`` / ``audio``: a projector beside it
(``runtime.store.projector``) reads images / audio, or it carries a vision encoder of its own.
A model whose file is not placed yet (an embedded one before its first use) has what its
catalog entry states (``catalog_capabilities``).
"""

from __future__ import annotations

from pathlib import Path

from runtime.server.models.embed_engines import ENCODER_ARCHITECTURES
from runtime.store.catalog import CatalogEntry
from runtime.store.gguf_file import GGUFHeader
from runtime.store.projector import projector_for

def capabilities_of(h: GGUFHeader) -> list[str]:
    arch = h.architecture or ""
    meta = h.metadata
    template = meta.get("tokenizer.chat_template")
    template = template if isinstance(template, str) else ""
    encoder = arch in ENCODER_ARCHITECTURES
    caps = []
    if template and not encoder:
        caps.append("chat")
    if not encoder and arch != "clip":
        caps.append("completion")
    if meta.get(f"{arch}.pooling_type") == 4:  # llama.cpp's rank pooling: a reranker (cross-encoder)
        caps.append("rerank")
    elif encoder or f"{arch}.pooling_type" in meta:
        caps.append("embedding")
    caps += [name for name, has in _template_flags(template).items() if has]
    if arch == "clip" or meta.get("clip.has_vision_encoder") or any(k.startswith(f"{arch}.vision.") for k in meta):
        caps.append("vision")
    return caps


def _template_flags(template: str) -> dict[str, bool]:
    """``tools``: the template describes tools or renders calls (or its family's call format is
    documented); ``reasoning``: it has thinking markers. Both from the output contract the model
    would load with (``runtime.chat.template_analysis``: renders of the template, cached by its
    text), so a listing says what requests get, not what a word in the template suggests."""
    if not template:
        return {"tools": False, "reasoning": False}
    from runtime.chat.template_analysis import contract_for

    contract = contract_for(template)
    return {"tools": contract.calls is not None or contract.native_tools, "reasoning": contract.reasoning is not None}


def catalog_capabilities(entry: CatalogEntry) -> list[str]:
    """The capabilities the catalog states for a model whose file is not here yet (an embedded
    model before its first use places it), in the order ``capabilities_of`` gives them."""
    raw = entry.raw
    if raw.get("format") == "onnx" or raw.get("task") in ("embedding", "rerank"):
        return [raw.get("task") or "embedding"]
    caps = ["chat"] if raw.get("chat_template") else []
    caps.append("completion")
    caps += [name for name in ("tools", "reasoning") if raw.get(name) is True]
    return caps + [m for m in entry.modalities if m not in caps]


def capabilities(path: Path) -> list[str]:
    """The capabilities of the model file at ``path`` ([] when it cannot be read)."""
    from runtime.server.models.model_header import header
    from runtime.store.onnx_model import InvalidOnnxModel, is_onnx_path, read_onnx_model

    if is_onnx_path(path):  # an ONNX encoder: it embeds, or (a cross-encoder) reranks
        try:
            return [read_onnx_model(path).kind]
        except InvalidOnnxModel:
            return []
    try:
        caps = capabilities_of(header(path))
    except (OSError, ValueError):
        return []
    projector = projector_for(path)  # an mmproj file beside it: the model reads images and/or audio
    if projector is not None:
        caps += [name for name, has in (("vision", projector.vision), ("audio", projector.audio))
                 if has and name not in caps]
    return caps
