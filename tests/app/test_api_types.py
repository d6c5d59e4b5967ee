"""The app's typed view of the model API reads the service's own shapes, field for field."""

from __future__ import annotations

from dataclasses import fields

from app.api_types import CatalogModel, LocalModel, RunningModel
from runtime.store.catalog import load_catalog
from runtime.store.registry import LocalModel as StoreModel
from runtime.store.registry import Registry


def test_every_catalog_entry_parses_with_its_repo_and_default_quant():
    for e in load_catalog().values():
        m = CatalogModel.from_api({**e.to_dict(), "local": False, "fit": None})  # as /hearth/catalog sends it
        assert (m.id, m.name, m.repo, m.default_quant) == (e.id, e.name, e.repo, e.default_quant)
        assert m.embedded == (e.embedded is not None)
        if e.quants:
            assert m.size == e.estimated_bytes(e.default_quant)


def test_local_models_parse_every_field_the_store_sends(data_dir, smollm2_path):
    shared = {f.name for f in fields(LocalModel)} - {"fit", "capabilities"}  # the app adds these two (/hearth/fit, /v1/models)
    assert shared <= {f.name for f in fields(StoreModel)}  # no field the service does not send
    models = Registry(data_dir).models()
    assert models
    for m in models:
        parsed = LocalModel.from_api(m.to_dict())
        assert all(getattr(parsed, k) == getattr(m, k) for k in shared), m.id
    assert LocalModel.from_api(next(m for m in models if m.id == "smollm2-135m").to_dict()).embedded


def test_running_model_from_stats():
    r = RunningModel.from_api({"id": "m", "n_ctx": 2048, "pid": 7, "memory": {"rss_bytes": 123, "planned": {}}})
    assert (r.id, r.n_ctx, r.pid, r.memory_bytes) == ("m", 2048, 7, 123)
    assert RunningModel.from_api({"id": "m"}).memory_bytes is None


def test_a_catalog_vision_model_says_what_it_reads():
    from app.api_types import CatalogModel
    from app.qt_models import _catalog_text

    m = CatalogModel.from_api({"id": "smolvlm-256m", "name": "SmolVLM 256M", "default_quant": "Q8_0",
                               "modalities": ["vision", "smell"], "sizes": {"Q8_0": 175_000_000}})
    assert m.modalities == ("vision",) and _catalog_text(m).endswith("· vision")
    assert CatalogModel.from_api({"id": "x", "name": "X", "modalities": "vision"}).modalities == ()
