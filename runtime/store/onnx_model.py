"""An ONNX encoder model on disk: which files, and how its outputs become vectors or scores.

A model is an ``.onnx`` file with a ``tokenizer.json`` beside it (or one folder up: hub
exports keep the graph under ``onnx/``). How token states become one vector is read from the
model's sentence-transformers configuration where present: ``1_Pooling/config.json`` (mean,
CLS, last token, max), a ``Normalize`` module in ``modules.json``, ``max_seq_length`` in
``sentence_bert_config.json``; else ``tokenizer_config.json``'s ``model_max_length`` and
``config.json``'s ``max_position_embeddings``. A ``*ForSequenceClassification`` architecture in
``config.json`` is a cross-encoder: it scores (query, document) pairs instead of embedding.
``hearth.json`` (written beside the embedded model) and the catalog entry of a downloaded one
may add ``matryoshka`` (the dimensions the model was trained to be truncated to), ``kind``,
``pooling``, ``normalize`` and ``max_length``.

Nothing here imports onnxruntime: the service reads these files, the worker runs the graph.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

POOLINGS = ("mean", "cls", "last", "max")


class InvalidOnnxModel(ValueError):
    pass


@dataclass(slots=True, frozen=True)
class OnnxModelInfo:
    model_file: Path
    tokenizer_file: Path
    kind: str = "embedding"  #: embedding | rerank
    pooling: str = "mean"
    normalize: bool = False
    max_length: int = 512
    dimensions: int | None = None
    matryoshka: tuple[int, ...] = ()
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"kind": self.kind, "pooling": self.pooling, "normalize": self.normalize,
                "max_length": self.max_length, "dimensions": self.dimensions, "matryoshka": list(self.matryoshka)}


def is_onnx_path(path: Path | str) -> bool:
    return str(path).lower().endswith(".onnx")


def _json(path: Path) -> Any:
    """The file's parsed JSON (of whatever shape it holds), or None where it can't be read."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _pooling(cfg: dict) -> str:
    if cfg.get("pooling_mode_cls_token"):
        return "cls"
    if cfg.get("pooling_mode_lasttoken"):
        return "last"
    if cfg.get("pooling_mode_max_tokens"):
        return "max"
    return "mean"


def read_onnx_model(model_file: Path | str, overrides: dict | None = None) -> OnnxModelInfo:
    """The model's files and settings; ``InvalidOnnxModel`` names what is missing.
    ``overrides``: settings from the catalog entry (``matryoshka``, ``pooling``, ...), over
    the folder's ``hearth.json``."""
    model_file = Path(model_file)
    if not model_file.is_file():
        raise InvalidOnnxModel(f"ONNX model file {model_file} does not exist")
    roots = [model_file.parent, model_file.parent.parent]
    root = next((r for r in roots if (r / "tokenizer.json").is_file()), None)
    if root is None:
        raise InvalidOnnxModel(f"no tokenizer.json beside {model_file.name} (nor one folder up): an ONNX "
                               "model needs its tokenizer")
    hearth = {**(_json(root / "hearth.json") or {}), **(overrides or {})}
    config = _json(root / "config.json") or {}
    archs = config.get("architectures") or [] if isinstance(config, dict) else []
    kind = hearth.get("kind") or ("rerank" if any(str(a).endswith("ForSequenceClassification") for a in archs)
                                  else "embedding")
    pool_cfg = _json(root / "1_Pooling" / "config.json")
    modules = _json(root / "modules.json")
    pooling = hearth.get("pooling") or (_pooling(pool_cfg) if isinstance(pool_cfg, dict) else "mean")
    if pooling not in POOLINGS:
        raise InvalidOnnxModel(f"pooling {pooling!r} is not one of {', '.join(POOLINGS)}")
    normalize = hearth.get("normalize")
    if normalize is None:
        normalize = isinstance(modules, list) and any(
            isinstance(m, dict) and str(m.get("type", "")).endswith("Normalize") for m in modules)
    st = _json(root / "sentence_bert_config.json") or {}
    tok_cfg = _json(root / "tokenizer_config.json") or {}
    max_length = hearth.get("max_length") or st.get("max_seq_length")
    if not isinstance(max_length, int):
        candidates = [v for v in (tok_cfg.get("model_max_length"), config.get("max_position_embeddings"))
                      if isinstance(v, int) and 0 < v < 1_000_000]
        max_length = min(candidates) if candidates else 512
    dims = (pool_cfg or {}).get("word_embedding_dimension") if isinstance(pool_cfg, dict) else None
    dims = dims or config.get("hidden_size")
    matryoshka = tuple(int(d) for d in hearth.get("matryoshka", ()) if isinstance(d, int) and d > 0)
    return OnnxModelInfo(model_file, root / "tokenizer.json", kind, pooling, bool(normalize), int(max_length),
                         dims if isinstance(dims, int) else None, matryoshka, hearth)
