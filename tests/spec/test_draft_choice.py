"""Which draft a model gets: --draft, else the catalog entry's optional ``draft`` field."""

from __future__ import annotations

import shutil

import pytest

from runtime.config import EngineConfig, ServeConfig
from runtime.server.models.model_manager import DraftRefused, ModelManager
from runtime.store.catalog import CatalogEntry
from runtime.store.resolve import ResolvedModel


def _manager(tmp_path, draft: str | None) -> ModelManager:
    return ModelManager(ServeConfig(data_dir=tmp_path, engine=EngineConfig(draft=draft)))


def _catalog(draft):
    """A catalog holding one entry whose ``draft`` field is ``draft`` (built directly: the
    shipped catalog's validator only admits catalog ids there, and these cases are wider)."""
    m = {"id": "big", "name": "Big", "family": "x", "license": "MIT", "context_length": 2048}
    if draft is not None:
        m["draft"] = draft
    return {"big": CatalogEntry("big", "Big", "x", "MIT", 2048, m)}


def test_explicit_draft_wins_and_off_disables(tiny, tmp_path):
    model = ResolvedModel("big", tiny["target"])
    assert _manager(tmp_path, "ngram").draft_for(model, _catalog("x")) == ("ngram", "ngram")
    assert _manager(tmp_path, "off").draft_for(model, _catalog("ngram")) == (None, None)
    path, draft_id = _manager(tmp_path, str(tiny["close"])).draft_for(model)
    assert path == str(tiny["close"].resolve()) and draft_id
    with pytest.raises(DraftRefused, match="does not exist"):
        _manager(tmp_path, str(tmp_path / "none.gguf")).draft_for(model)


def test_catalog_default_draft(tiny, tmp_path):
    model = ResolvedModel("big", tiny["target"])
    m = _manager(tmp_path, None)
    assert m.draft_for(model, _catalog(None)) == (None, None)
    assert m.draft_for(model, _catalog("ngram")) == ("ngram", "ngram")
    local = tmp_path / "close.gguf"  # inside the data directory, where the service may read models
    shutil.copyfile(tiny["close"], local)
    assert m.draft_for(model, _catalog(str(local)))[0] == str(local.resolve())
    assert m.draft_for(model, _catalog({"id": str(local)}))[0] == str(local.resolve())
    # a catalog draft that is not downloaded is skipped, not an error
    assert m.draft_for(model, _catalog("smollm2-not-here")) == (None, None)
