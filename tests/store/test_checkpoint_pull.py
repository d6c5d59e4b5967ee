"""Pulling a GPTQ or AWQ repository (no GGUF in it) from the loopback hub: its safetensors,
configuration and tokenizer are downloaded, converted to a GGUF with the 4-bit matrices kept,
and the result is a local model that resolves and runs."""

from __future__ import annotations

import json

import numpy as np
import pytest
from gguf import GGUFReader

from runtime.store import hub
from runtime.store.checkpoint_pull import NotACheckpoint, file_summary
from runtime.store.download_list import load_list, save_list
from runtime.store.downloads import DownloadManager
from runtime.store.fetch import RetryPolicy
from runtime.store.resolve import resolve_model
from tests.quantize.test_hf_import import _checkpoint


@pytest.fixture()
async def manager(loopback_hub, tmp_path, data_dir):
    m = DownloadManager(tmp_path / "downloads.json", retry=RetryPolicy(attempts=3, backoff_s=0.05))
    await m.start()
    yield m
    await m.close()


def _publish(loopback_hub, tmp_path, repo: str, method: str, packed: bool = True, **extra: bytes) -> dict:
    folder = tmp_path / "src" / repo.replace("/", "--")
    _checkpoint(folder, method, packed=packed)
    files = {p.name: p.read_bytes() for p in folder.iterdir()} | {"README.md": b"# tiny\n"} | extra
    loopback_hub.add_repo(repo, files)
    return files


@pytest.mark.parametrize("method", ["gptq", "awq"])
async def test_a_checkpoint_pull_becomes_a_registered_4bit_gguf(method, loopback_hub, tmp_path, manager, data_dir):
    repo = f"someone/Tiny-{method.upper()}"
    _publish(loopback_hub, tmp_path, repo, method)
    assert [r["convert"] for r in file_summary(hub.repo_info(repo))] == [method]
    d = await manager.wait((await manager.pull(repo)).id)
    assert d.state == "completed", d.error
    assert d.convert == method and d.model_id.startswith(f"Tiny-{method.upper()}")  # the repo's name
    assert loopback_hub.gets(repo, "README.md") == 0  # only what the conversion reads
    model = resolve_model(d.model_id, data_dir)
    assert str(model.path) == d.path and model.path.is_relative_to(data_dir / "converted")
    reader = GGUFReader(str(model.path))
    kinds = {t.name: t.tensor_type.name for t in reader.tensors}
    assert kinds["blk.0.ffn_up.weight"] == "Q4_1" and kinds["token_embd.weight"] == "F16"
    name = bytes(reader.fields["general.name"].parts[-1]).decode()
    assert name == f"Tiny-{method.upper()}"  # not the snapshot folder's commit hash

    from runtime.backends.token_logits import ChunkScorer

    with ChunkScorer(model.path, 32, threads=2) as s:
        logits = s.logits(list(range(2, 20)))
    assert np.isfinite(logits).all()

    again = await manager.wait((await manager.pull(repo)).id)  # a second pull reuses the file and the id
    assert again.state == "completed" and again.model_id == d.model_id and again.path == d.path


async def test_a_download_that_converts_survives_a_restart_of_the_list(tmp_path, loopback_hub, manager):
    _publish(loopback_hub, tmp_path, "someone/Tiny-GPTQ", "gptq")
    d = await manager.wait((await manager.pull("someone/Tiny-GPTQ")).id)
    save_list(tmp_path / "list.json", [d])
    (back,), problem = load_list(tmp_path / "list.json")
    assert problem is None and back.convert == "gptq"
    raw = json.loads((tmp_path / "list.json").read_text())
    raw["downloads"][0]["convert"] = "../../etc"
    (tmp_path / "list.json").write_text(json.dumps(raw))
    rows, problem = load_list(tmp_path / "list.json")
    assert rows == [] and "unreadable" in problem


async def test_what_is_not_converted_is_refused_with_the_reason(tmp_path, loopback_hub, manager):
    _publish(loopback_hub, tmp_path, "someone/Tiny-float", "gptq", packed=False)
    with pytest.raises(NotACheckpoint, match="not quantized"):
        await manager.pull("someone/Tiny-float")
    files = _publish(loopback_hub, tmp_path, "someone/Tiny-exl2", "gptq", packed=False)
    config = json.loads(files["config.json"]) | {"quantization_config": {"quant_method": "exl2"}}
    loopback_hub.add_repo("someone/Tiny-exl2", files | {"config.json": json.dumps(config).encode()})
    with pytest.raises(NotACheckpoint, match="exl2"):
        await manager.pull("someone/Tiny-exl2")
    loopback_hub.add_repo("someone/nothing", {"README.md": b"# no model\n"})
    with pytest.raises(hub.HubError, match="no GGUF files"):
        await manager.pull("someone/nothing")
    assert file_summary(hub.repo_info("someone/nothing")) == []


async def test_a_hostile_config_is_refused_before_it_is_read_whole(tmp_path, loopback_hub, manager):
    files = _publish(loopback_hub, tmp_path, "someone/Tiny-big", "gptq")
    loopback_hub.add_repo("someone/Tiny-big", files | {"config.json": b"{" + b" " * (2 << 20) + b"}"})
    with pytest.raises(hub.UntrustedMetadata, match="larger than"):
        await manager.pull("someone/Tiny-big")
    loopback_hub.add_repo("someone/Tiny-list", files | {"config.json": b"[1, 2]"})
    with pytest.raises(hub.UntrustedMetadata, match="not an object"):
        await manager.pull("someone/Tiny-list")


async def test_a_checkpoint_that_fails_to_convert_fails_the_download_with_the_reason(tmp_path, loopback_hub, manager,
                                                                                   data_dir):
    files = _publish(loopback_hub, tmp_path, "someone/Tiny-bert", "gptq")
    config = json.loads(files["config.json"]) | {"architectures": ["BertModel"]}
    loopback_hub.add_repo("someone/Tiny-bert", files | {"config.json": json.dumps(config).encode()})
    d = await manager.wait((await manager.pull("someone/Tiny-bert")).id)
    assert d.state == "failed" and "BertModel" in d.error and "could not be converted" in d.error
    assert not list((data_dir / "converted").rglob("*.part"))
