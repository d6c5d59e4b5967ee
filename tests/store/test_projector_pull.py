"""Pulling a vision model from the (loopback) hub brings its multimodal projector: the preferred
``mmproj`` file of the repo (or the one the catalog names) lands in the model's snapshot folder,
resumed and SHA-256-checked like the model, counted in the space check, and ``projector_for``
finds it there; the other projectors of the repo are not fetched."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from runtime.store.downloads import DownloadManager, NotEnoughSpace
from runtime.store.fetch import RetryPolicy
from runtime.store.hf_cache import find_snapshot
from runtime.store.projector import PREFERENCE, preferred_projector, projector_for, projector_rank
from runtime.store.registry import Registry
from runtime.store.resolve import resolve_model
from tests.media_models import write_projector
from tests.spec.tiny_models import write_tiny

REPO = "hearth-test/Tiny-VLM-GGUF"
MODEL = "Tiny-VLM-Q4_K_M.gguf"
F16 = "mmproj-Tiny-VLM-f16.gguf"
Q8 = "mmproj-Tiny-VLM-Q8_0.gguf"


@pytest.fixture()
async def manager(loopback_hub, tmp_path):
    m = DownloadManager(tmp_path / "downloads.json", retry=RetryPolicy(attempts=3, backoff_s=0.05))
    await m.start()
    yield m
    await m.close()


def _files(tmp_path: Path, model: str = MODEL, projectors: tuple[str, ...] = (F16, Q8)) -> dict[str, bytes]:
    src = tmp_path / "src"
    src.mkdir(exist_ok=True)
    files = {model: write_tiny(src / "model.gguf", seed=3).read_bytes(), "README.md": b"# tiny vlm\n"}
    for seed, name in enumerate(projectors):  # different weights: different blobs
        files[name] = write_projector(src / f"p{seed}.gguf", 64, vision="mlp", seed=seed).read_bytes()
    return files


def test_the_preferred_projector_of_a_list_of_names():
    assert PREFERENCE[0] == "F16"
    names = ["model-Q4_K_M.gguf", "mmproj-model-Q8_0.gguf", "mmproj-model-F32.gguf", "mmproj-model-BF16.gguf",
             "mmproj-model-f16.gguf", "README.md"]
    assert preferred_projector(names) == "mmproj-model-f16.gguf"
    assert preferred_projector(names[:4]) == "mmproj-model-BF16.gguf"  # BF16 is not read as F16
    assert preferred_projector(["mmproj.gguf", "mmproj-Q8_0.gguf"]) == "mmproj-Q8_0.gguf"  # a stated precision first
    assert preferred_projector(["mmproj.gguf"]) == "mmproj.gguf"
    assert preferred_projector(["model-Q4_K_M.gguf", "mmproj-f16.bin"]) is None
    assert projector_rank("gemma-3-mmproj-F32.gguf") == PREFERENCE.index("F32")


async def test_a_hub_pull_lands_the_preferred_projector_beside_the_model(loopback_hub, tmp_path, manager, data_dir):
    files = _files(tmp_path)
    loopback_hub.add_repo(REPO, files)
    d = await manager.wait((await manager.pull(f"{REPO}:Q4_K_M")).id)
    assert d.state == "completed", d.error
    assert [j.name for j in d.files] == [MODEL, F16]
    assert Path(d.path).name == MODEL  # the download's path is still the model
    assert d.done_bytes == d.total_bytes == len(files[MODEL]) + len(files[F16])
    assert loopback_hub.gets(REPO, Q8) == 0 and loopback_hub.gets(REPO, "README.md") == 0

    landed = find_snapshot(REPO, F16)
    assert landed.parent == Path(d.path).parent and landed.read_bytes() == files[F16]
    assert os.path.basename(os.path.realpath(landed)) == hashlib.sha256(files[F16]).hexdigest()
    found = projector_for(Path(d.path))
    assert found is not None and found.path == landed and (found.vision, found.audio) == (True, False)
    # the projector is not a model of its own; the model resolves as before
    assert [m.file for m in Registry(data_dir).models() if m.repo == REPO] == [MODEL]
    assert resolve_model(f"{REPO}:Q4_K_M", data_dir).path == find_snapshot(REPO, MODEL)


async def test_a_text_only_repo_pulls_the_model_alone(loopback_hub, tmp_path, manager):
    loopback_hub.add_repo(REPO, _files(tmp_path, projectors=()))
    d = await manager.wait((await manager.pull(f"{REPO}/{MODEL}")).id)
    assert d.state == "completed", d.error
    assert [j.name for j in d.files] == [MODEL] and projector_for(Path(d.path)) is None


async def test_a_projector_cut_midway_resumes_and_a_corrupt_one_is_refused(loopback_hub, tmp_path, manager):
    files = _files(tmp_path)
    loopback_hub.add_repo(REPO, files)
    half = len(files[F16]) // 2
    loopback_hub.cut_after(REPO, F16, half)
    d = await manager.wait((await manager.pull(REPO)).id)
    assert d.state == "completed", d.error
    first, second = loopback_hub.ranges(REPO, F16)
    assert first is None and second is not None and second.startswith("bytes=") and second != "bytes=0-"
    assert find_snapshot(REPO, F16).read_bytes() == files[F16]

    other = "hearth-test/Tiny-VLM-2-GGUF"
    loopback_hub.add_repo(other, files)
    loopback_hub.corrupt(other, F16, half)
    d = await manager.wait((await manager.pull(other)).id)
    assert d.state == "failed" and f"{F16} failed its SHA-256 check" in (d.error or "")
    assert find_snapshot(other, F16) is None


async def test_the_space_check_counts_the_projector(loopback_hub, tmp_path, manager):
    files = _files(tmp_path, projectors=(F16,))
    loopback_hub.add_repo(REPO, {MODEL: files[MODEL]})
    loopback_hub.add_file(REPO, F16, files[F16], advertised_size=10**16)  # a projector no disk holds
    with pytest.raises(NotEnoughSpace) as refused:
        await manager.pull(REPO)
    assert f"needs {(len(files[MODEL]) + 10**16) / 1e9:.2f} GB more disk space" in str(refused.value)
    assert loopback_hub.gets(REPO, MODEL) == 0  # refused before anything is fetched


async def test_a_catalog_pull_takes_the_projector_the_catalog_names(loopback_hub, tmp_path, manager, data_dir):
    repo, model, named = ("ggml-org/SmolVLM-256M-Instruct-GGUF", "SmolVLM-256M-Instruct-Q8_0.gguf",
                          "mmproj-SmolVLM-256M-Instruct-f16.gguf")
    other = "mmproj-SmolVLM-256M-Instruct-Q8_0.gguf"
    files = _files(tmp_path, model, (named, other))
    loopback_hub.add_repo(repo, files)
    d = await manager.wait((await manager.pull("smolvlm-256m")).id)
    assert d.state == "completed", d.error
    assert [j.name for j in d.files] == [model, named] and loopback_hub.gets(repo, other) == 0
    path = resolve_model("smolvlm-256m", data_dir).path
    found = projector_for(path)
    assert found is not None and found.path == find_snapshot(repo, named)


async def test_a_catalog_projector_the_repo_lacks_falls_back_to_the_repos_own(loopback_hub, tmp_path, manager):
    repo, model, renamed = ("ggml-org/SmolVLM-500M-Instruct-GGUF", "SmolVLM-500M-Instruct-Q8_0.gguf",
                            "mmproj-SmolVLM-500M-Instruct-Q8_0.gguf")
    loopback_hub.add_repo(repo, _files(tmp_path, model, (renamed,)))
    d = await manager.wait((await manager.pull("smolvlm-500m")).id)
    assert d.state == "completed", d.error
    assert [j.name for j in d.files] == [model, renamed]
    assert projector_for(Path(d.path)).path.name == renamed
