"""A model's multimodal projector: the ``mmproj`` GGUF that sits beside it.

Hugging Face repositories of vision and audio models (``ggml-org/SmolVLM-256M-Instruct-GGUF``,
``ggml-org/gemma-3-4b-it-GGUF``, ...) keep the projector next to the model's quantizations, and
``hearth pull`` fetches it into the same folder; LM Studio lays models out the same way. A file
counts when its name says ``mmproj`` and its header says ``clip`` (llama.cpp's projector
architecture). With several, one is chosen by ``PREFERENCE`` (``preferred_projector``), the
same rule for the file a pull fetches and the file a load takes: F16, the precision projectors
are usually published in, then BF16 and F32 (as precise, in other or twice the bytes), then
Q8_0; a projector is small beside its model, and its precision is what the image's embeddings
keep.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from runtime.store.gguf_file import InvalidModelFile, read_header
from runtime.store.gguf_names import is_auxiliary, is_gguf, quant_of

#: a projector's precision (as its file name states it) in the order one is chosen
PREFERENCE = ("F16", "BF16", "F32", "Q8_0")


@dataclass(frozen=True, slots=True)
class ProjectorFile:
    path: Path
    vision: bool
    audio: bool


def is_projector_name(name: str) -> bool:
    """Whether a file name (a path inside a repo, too) names a projector: ``mmproj`` and ``.gguf``."""
    return is_gguf(name) and "mmproj" in name.rsplit("/", 1)[-1].lower()


def projector_rank(name: str) -> int:
    """Where a projector's file name stands in ``PREFERENCE`` (precisions it lacks come after)."""
    q = quant_of(name)
    return PREFERENCE.index(q) if q in PREFERENCE else len(PREFERENCE)


def preferred_projector(names: Iterable[str]) -> str | None:
    """The projector to use among file ``names`` (others are ignored), or None when none is one."""
    found = sorted((n for n in names if is_projector_name(n)), key=lambda n: (projector_rank(n), n))
    return found[0] if found else None


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
        names = sorted((p for p in model.parent.iterdir() if is_projector_name(p.name)),
                       key=lambda p: (projector_rank(p.name), p.name))
    except OSError:
        return None
    for p in names:
        found = read_projector(p)
        if found is not None:
            return found
    return None
