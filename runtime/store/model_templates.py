"""Chat templates the user chose for a model, used instead of the one in its GGUF.

One file per model, ``<data dir>/templates/<model id>.jinja`` (the id percent-encoded, so an
``owner/repo:QUANT`` id is one file name on every platform), owner-only like the rest of the
data directory. The service's worker loads the model with it and derives the model's output
contract from it; ``hearth template`` renders with it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import quote

from runtime.chat.template_check import MAX_TEMPLATE_BYTES, TemplateRefused, check_size
from runtime.private_files import private_dir, write_private
from runtime.store.gguf_file import read_header, read_token_texts

TEMPLATES_DIR = "templates"
#: where a model's template comes from: its GGUF, the override stored for it, a file given
#: for this run (``--chat-template-file``, ``hearth template --template``)
MODEL, STORED, GIVEN = "model", "stored", "file"


@dataclass(slots=True, frozen=True)
class ModelTemplate:
    """The chat template a model renders with, and the BOS and EOS text it is given."""

    #: the Jinja text; None: the model has none (the plain fallback, ``runtime.chat.chat_template``)
    source: str | None
    bos: str
    eos: str
    origin: str = MODEL


def gguf_template(path: str | Path) -> ModelTemplate:
    """The template in a GGUF's header, with the text of its BOS and EOS tokens, read without
    loading the model (``tokenizer.ggml.bos_token_id`` / ``eos_token_id``; "" where the header
    names none). Blocking; raises ``InvalidModelFile``."""
    meta = read_header(path).metadata
    source = meta.get("tokenizer.chat_template")
    bos_id, eos_id = _token_id(meta, "bos"), _token_id(meta, "eos")
    texts = read_token_texts(path, {i for i in (bos_id, eos_id) if i is not None})
    return ModelTemplate(source if isinstance(source, str) and source else None,
                         bos=texts.get(bos_id, "") if bos_id is not None else "",
                         eos=texts.get(eos_id, "") if eos_id is not None else "")


def _token_id(meta: dict[str, object], which: str) -> int | None:
    value = meta.get(f"tokenizer.ggml.{which}_token_id")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def template_for(data_dir: Path, model_id: str, path: str | Path, given: str | None = None) -> ModelTemplate:
    """What the service renders ``model_id`` (the file ``path``) with: ``given`` (a file named
    for this run), else the override stored for it, else the GGUF's own. Blocking."""
    own = gguf_template(path)
    if given is not None:
        return replace(own, source=given, origin=GIVEN)
    stored = stored_template(data_dir, model_id)
    return replace(own, source=stored, origin=STORED) if stored is not None else own


def model_file_name(model_id: str) -> str:
    """A model's id as one file name on every platform (percent-encoded; a long path's id is cut
    and told apart by a hash, within any file system's name limit)."""
    name = quote(model_id, safe="-_.")
    if len(name) > 160:
        name = f"{name[:100]}-{hashlib.sha256(model_id.encode()).hexdigest()[:24]}"
    return name


def template_path(data_dir: Path, model_id: str) -> Path:
    """Where the override of ``model_id`` is kept (whether or not there is one)."""
    return data_dir / TEMPLATES_DIR / f"{model_file_name(model_id)}.jinja"


def stored_template(data_dir: Path, model_id: str) -> str | None:
    """The template stored for ``model_id``; None: none (the model's own is used). Blocking."""
    path = template_path(data_dir, model_id)
    try:
        if path.stat().st_size > MAX_TEMPLATE_BYTES:
            raise TemplateRefused(f"{path} is over {MAX_TEMPLATE_BYTES // 1024} KiB: remove it or replace it")
        return path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return None


def store_template(data_dir: Path, model_id: str, text: str) -> Path:
    """Keep ``text`` as the template of ``model_id`` (replacing any); the caller checked that it
    renders (``template_check.check_template``). Raises ``TemplateRefused`` (too large) or OSError."""
    check_size(text)
    private_dir(data_dir / TEMPLATES_DIR)
    path = template_path(data_dir, model_id)
    write_private(path, text)
    return path


def remove_template(data_dir: Path, model_id: str) -> bool:
    """Go back to the model's own template; False when none was stored."""
    try:
        template_path(data_dir, model_id).unlink()
    except FileNotFoundError:
        return False
    return True
