"""Local models: imports (valid, truncated, text renamed .gguf), cache scanning, delete, usage."""

from __future__ import annotations

import pytest

from runtime.store.gguf_file import InvalidModelFile
from runtime.store.hf_cache import CachedFile, cache_dir
from runtime.store.registry import ModelNotFound, Registry
from runtime.store.resolve import resolve_model
from tests.store.hubfiles import tiny_model


@pytest.fixture()
def reg(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    return Registry(tmp_path / "data")


def test_import_a_valid_gguf_by_reference(reg, tmp_path):
    src = tiny_model(tmp_path / "My-Model-Q8_0.gguf")
    m = reg.import_file(src)
    assert (m.id, m.source, m.quant, m.path, m.size) == ("My-Model-Q8_0", "imported", "Q8_0", str(src), src.stat().st_size)
    assert [x.id for x in Registry(reg.data_dir).models() if x.source == "imported"] == ["My-Model-Q8_0"]
    assert resolve_model("My-Model-Q8_0", reg.data_dir).path == src  # usable by its id, not copied
    assert reg.import_file(src).id == m.id  # importing twice keeps one entry
    r = reg.delete(m.id)
    assert r["freed_bytes"] == 0 and src.is_file()
    with pytest.raises(ModelNotFound):
        reg.find(m.id)


def test_import_refuses_a_truncated_file(reg, tmp_path):
    src = tiny_model(tmp_path / "cut.gguf")
    src.write_bytes(src.read_bytes()[: src.stat().st_size * 2 // 3])
    with pytest.raises(InvalidModelFile, match="truncated"):
        reg.import_file(src)
    assert reg.models() == [] or all(m.source != "imported" for m in reg.models())


def test_import_refuses_text_renamed_gguf(reg, tmp_path):
    src = tmp_path / "readme.gguf"
    src.write_text("This is a README, not a model.\n" * 20)
    with pytest.raises(InvalidModelFile, match="not a GGUF file"):
        reg.import_file(src)
    with pytest.raises(InvalidModelFile, match="does not exist"):
        reg.import_file(tmp_path / "missing.gguf")


def _place(repo: str, commit: str, name: str, data: bytes, etag: str) -> CachedFile:
    c = CachedFile(cache_dir(), repo, commit, name, etag)
    c.blob.parent.mkdir(parents=True, exist_ok=True)
    c.blob.write_bytes(data)
    c.link("main")
    return c


def test_finds_ggufs_other_tools_put_in_the_cache_and_deletes_them(reg, tmp_path):
    data = tiny_model(tmp_path / "src.gguf").read_bytes()
    _place("someone/Thing-GGUF", "a" * 40, "Thing-Q4_K_M.gguf", data, "1" * 64)
    _place("someone/Thing-GGUF", "a" * 40, "mmproj-Thing-f16.gguf", b"GGUF....", "2" * 64)
    for i in (1, 2):
        _place("someone/Big-GGUF", "b" * 40, f"Big-Q8_0-0000{i}-of-00002.gguf", b"x" * (100 * i), f"{i + 2}" * 64)
    # The same model listed by a catalog entry's repo and file gets the catalog id.
    _place("bartowski/Llama-3.2-1B-Instruct-GGUF", "c" * 40, "Llama-3.2-1B-Instruct-Q8_0.gguf", b"y" * 10, "5" * 64)
    models = {m.id: m for m in reg.models() if m.source == "hub"}
    assert set(models) == {"someone/Thing-GGUF/Thing-Q4_K_M.gguf", "someone/Big-GGUF/Big-Q8_0-00001-of-00002.gguf",
                           "llama-3.2-1b:Q8_0"}
    big = models["someone/Big-GGUF/Big-Q8_0-00001-of-00002.gguf"]
    assert (big.parts, big.size) == (2, 300)
    usage = reg.disk_usage()
    assert usage["by_source"]["hub"] == len(data) + 300 + 10

    assert reg.delete(big.id)["freed_bytes"] == 300
    assert reg.delete("someone/Thing-GGUF/Thing-Q4_K_M.gguf")["freed_bytes"] == len(data)
    assert {m.id for m in reg.models() if m.source == "hub"} == {"llama-3.2-1b:Q8_0"}


def test_imports_at_the_same_time_all_stay_registered(reg, tmp_path):
    """Each import reads imports.json, adds its row and writes it back: without one writer at a
    time, two imports at once each wrote the file without the other's row."""
    from concurrent.futures import ThreadPoolExecutor

    srcs = [tiny_model(tmp_path / f"same-time-{i}-Q8_0.gguf") for i in range(8)]
    with ThreadPoolExecutor(8) as pool:
        ids = [m.id for m in pool.map(reg.import_file, srcs)]
    assert len(set(ids)) == 8
    assert sorted(m.id for m in Registry(reg.data_dir).imported()) == sorted(ids)
    with ThreadPoolExecutor(4) as pool:  # four forgotten at once
        list(pool.map(reg.delete, ids[:4]))
    assert sorted(m.id for m in Registry(reg.data_dir).imported()) == sorted(ids[4:])
    assert not [p.name for p in reg.data_dir.iterdir() if ".tmp" in p.name or ".partial" in p.name]
