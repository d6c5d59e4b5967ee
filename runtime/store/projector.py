"""A model's multimodal projector: the ``mmproj`` GGUF that sits beside it.

Hugging Face repositories of vision and audio models (``ggml-org/SmolVLM-256M-Instruct-GGUF``,
``ggml-org/gemma-3-4b-it-GGUF``, ...) keep the projector next to the model's quantizations, and
``hearth pull`` fetches it into the same folder; LM Studio lays models out the same way. A file
counts when its name says ``mmproj`` and its header says ``clip`` (llama.cpp's projector
architecture); with several, the one of the highest precision is used (F16 over Q8_0 ...),
since a projector is small and its precision is what the image's embeddings keep.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from runtime.store.gguf_file import InvalidModelFile, read_header
from runtime.store.gguf_names import is_auxiliary, is_gguf

#: quantization names in the order a projector is preferred
_PREFERENCE = ("f32", "bf16", "f16", "q8_0")


@dataclass(frozen=True, slots=True)
class ProjectorFile:
    path: Path
    vision: bool
    audio: bool


def _rank(name: str) -> int:
    low = name.lower()
    return next((i for i, q in enumerate(_PREFERENCE) if q in low), len(_PREFERENCE))


def read_projector(path: Path) -> ProjectorFile | None:
    """``path`` as a projector, or None when its header is not one."""
    try:
        h = read_header(path)
    except (OSError, InvalidModelFile, ValueError):
        return None
    if h.architecture != "clip":
        return None
    meta = h.metadata
    vision = bool(meta.get("clip.has_vision_encoder"))
    audio = bool(meta.get("clip.has_audio_encoder"))
    return ProjectorFile(path, vision, audio) if vision or audio else None


def projector_for(model: Path) -> ProjectorFile | None:
    """The projector beside ``model`` (a GGUF file), or None: a text-only model."""
    if not is_gguf(model.name) or is_auxiliary(model.name):
        return None
    try:
        names = sorted((p for p in model.parent.iterdir() if is_gguf(p.name) and "mmproj" in p.name.lower()),
                       key=lambda p: (_rank(p.name), p.name))
    except OSError:
        return None
    for p in names:
        found = read_projector(p)
        if found is not None:
            return found
    return None
