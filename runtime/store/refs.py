"""Model references, as users write them (API ``model``, CLI), parsed without touching the disk or network.

- a catalog id: ``gemma-3-270m``; with a quantization: ``llama-3.2-1b:Q8_0``
- a Hugging Face repo with an optional quantization: ``owner/repo``, ``owner/repo:Q4_K_M``
  (an ``hf.co/`` or ``huggingface.co/`` prefix is accepted, as Ollama writes them)
- a file in a repo: ``owner/repo/file.gguf`` (for a split model, any of its parts)
- a local path: ``/models/x.gguf``, ``./x.gguf``, ``~/x.gguf`` (or any existing file)
- an imported model's id (``imported`` kind, decided by the registry, not here)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from runtime.config import DEFAULT_MODEL

_REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*/[A-Za-z0-9][A-Za-z0-9_.\-]*$")
_QUANT = re.compile(r"^(?:UD-)?[A-Za-z0-9_]+$")
_HOSTS = ("https://huggingface.co/", "http://huggingface.co/", "huggingface.co/", "hf.co/")


class BadReference(ValueError):
    """The text is not a model reference Hearth understands."""


@dataclass(slots=True, frozen=True)
class ModelRef:
    kind: str  #: catalog | hub | path
    text: str
    catalog_id: str | None = None
    repo_id: str | None = None
    quant: str | None = None
    filename: str | None = None
    path: Path | None = None

    @property
    def canonical(self) -> str:
        if self.kind == "catalog":
            assert self.catalog_id is not None  # parse_ref sets it for every catalog reference
            return f"{self.catalog_id}:{self.quant}" if self.quant else self.catalog_id
        if self.kind == "hub":
            assert self.repo_id is not None  # parse_ref sets it for every hub reference
            if self.filename:
                return f"{self.repo_id}/{self.filename}"
            return f"{self.repo_id}:{self.quant}" if self.quant else self.repo_id
        return str(self.path)


def _looks_like_path(text: str) -> bool:
    return text.startswith(("/", "./", "../", "~", "\\")) or re.match(r"^[A-Za-z]:[\\/]", text) is not None


def normalise_ref(text: str) -> str:
    """``text`` without surrounding whitespace; raises ``BadReference`` for control characters
    (a NUL would cut a path short in C) and for an empty reference."""
    ref = text.strip()
    if not ref:
        raise BadReference("empty model reference")
    if any(ord(c) < 32 or ord(c) == 127 for c in ref):
        raise BadReference("the model reference contains a control character")
    return ref


def _hub_filename(name: str, text: str) -> str:
    """A file path inside a repo: relative, no empty, ``.`` or ``..`` segment, no backslash."""
    parts = name.split("/")
    if "\\" in name or any(p in ("", ".", "..") for p in parts):
        raise BadReference(f"{text!r}: a file in a repo is owner/repo/path/file.gguf, without empty, "
                           "'.' or '..' segments")
    return name


def _is_file(ref: str) -> bool:
    """Whether ``ref`` names an existing file; a name the OS cannot even look up (longer than
    a file name may be, a NUL byte) names none."""
    try:
        return Path(ref).expanduser().is_file()
    except (OSError, ValueError):
        return False


def parse_ref(text: str, catalog_ids: set[str] | frozenset[str] = frozenset(), *, probe: bool = True) -> ModelRef:
    """Parse ``text``; raises ``BadReference`` with the accepted forms.

    ``probe``: an existing relative file counts as a path (the CLI); a service passes False,
    so what a request names never depends on which files exist."""
    ref = normalise_ref(text)
    dotdot = ".." in ref.replace("\\", "/").split("/")  # a '..' segment makes any reference a path
    if _looks_like_path(ref) or dotdot or (probe and _is_file(ref)):
        return ModelRef("path", text, path=Path(ref).expanduser())
    name, quant = ref, None
    if ":" in ref:
        name, quant = ref.rsplit(":", 1)
        if not _QUANT.match(quant):
            raise BadReference(f"{quant!r} in {text!r} is not a quantization (e.g. Q4_K_M, Q8_0)")
        quant = quant.upper()
    if name in catalog_ids:
        return ModelRef("catalog", text, catalog_id=name, quant=quant)
    for host in _HOSTS:
        if name.lower().startswith(host):
            name = name[len(host):]
            break
    parts = name.split("/")
    if len(parts) >= 3 and name.lower().endswith(".gguf") and _REPO.match("/".join(parts[:2])):
        if quant is not None:
            raise BadReference(f"{text!r} names a file; a quantization after it has no meaning")
        return ModelRef("hub", text, repo_id="/".join(parts[:2]), filename=_hub_filename("/".join(parts[2:]), text))
    if _REPO.match(name) and not any(p in (".", "..") for p in parts):
        return ModelRef("hub", text, repo_id=name, quant=quant)
    raise BadReference(
        f"unknown model {text!r}: use a catalog id (e.g. {DEFAULT_MODEL}; hearth list shows what is local), "
        "id:QUANT, a Hugging Face repo owner/repo[:QUANT], owner/repo/file.gguf, or a path to a .gguf file")
