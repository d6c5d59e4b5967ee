"""A GPTQ or AWQ checkpoint is checked against its tensors' real shapes before anything is made
of it: a config.json or tokenizer.json that names more tokens than the embedding holds made the
converter allocate tens of gigabytes (MemoryError, or the machine's memory) in the child a pull
runs, which had no limit. Now the pull fails at once with the reason, and the child runs under
a memory and a time limit that follow the checkpoint's size."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from runtime.quantize.safetensors_file import read_safetensors
from runtime.store.checkpoint_pull import ConvertLimits, convert
from runtime.store.downloads import DownloadManager
from runtime.store.fetch import RetryPolicy
from tests.quantize.test_hf_import import GROUP, N_VOCAB, _checkpoint, _write_safetensors
from tests.store.test_checkpoint_pull import _publish


@pytest.fixture()
async def manager(loopback_hub, tmp_path, data_dir):
    m = DownloadManager(tmp_path / "downloads.json", retry=RetryPolicy(attempts=3, backoff_s=0.05))
    await m.start()
    yield m
    await m.close()


HOSTILE = {
    # a config that asks for 60 million token strings (gigabytes) for an embedding of 257 rows
    "vocab_size": ("config.json", lambda c: c | {"vocab_size": 60_000_000}, "vocab_size 60000000"),
    # a tokenizer whose one added token has id 2e9: a list of two billion tokens
    "token_id": ("tokenizer.json", lambda t: t | {"added_tokens": [{"id": 2_000_000_000, "content": "<x>",
                                                                   "special": True}]}, "token id 2000000000"),
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", list(HOSTILE))
async def test_a_checkpoint_naming_more_tokens_than_its_tensors_fails_its_pull_at_once(case, loopback_hub, tmp_path,
                                                                                      manager, data_dir):
    name, change, words = HOSTILE[case]
    repo = f"someone/Tiny-{case}"
    files = _publish(loopback_hub, tmp_path, repo, "gptq")
    loopback_hub.add_repo(repo, files | {name: json.dumps(change(json.loads(files[name]))).encode()})
    started = time.monotonic()
    d = await manager.wait((await manager.pull(repo)).id)
    assert d.state == "failed" and "could not be converted" in d.error, d.error
    assert words in d.error and f"{N_VOCAB}" in d.error and "MemoryError" not in d.error, d.error
    assert time.monotonic() - started < 60
    assert not list((data_dir / "converted").rglob("*.part"))


def _with_a_wide_layer(folder) -> None:
    """Add one valid 8192 x 8192 GPTQ layer (32 MB packed): unpacking it takes over a GiB."""
    n_in, n_out = 8192, 8192
    rng = np.random.default_rng(0)
    tensors = {k: np.array(v) for k, v in read_safetensors(folder / "model.safetensors").items()}
    base = "model.layers.0.mlp.wide."
    tensors[base + "qweight"] = rng.integers(-2**31, 2**31 - 1, size=(n_in // 8, n_out), dtype=np.int32)
    tensors[base + "qzeros"] = rng.integers(-2**31, 2**31 - 1, size=(n_in // GROUP, n_out // 8), dtype=np.int32)
    tensors[base + "scales"] = np.full((n_in // GROUP, n_out), 0.01, np.float16)
    tensors[base + "g_idx"] = (np.arange(n_in) // GROUP).astype(np.int32)
    _write_safetensors(folder / "model.safetensors", tensors)


async def test_the_converter_child_has_a_time_and_a_memory_limit(tmp_path, data_dir):
    folder = tmp_path / "ck"
    _checkpoint(folder, "gptq", packed=True)
    out = await convert(folder, "someone/Fine", "c" * 40)  # the default limits let a checkpoint through
    assert out.is_file() and not list(out.parent.glob("*.part"))
    _with_a_wide_layer(folder)
    limits = ConvertLimits.for_folder(folder)
    size = sum(p.stat().st_size for p in folder.iterdir())
    assert (4 << 30) + 16 * size == limits.memory_bytes and limits.seconds < 400  # they follow the files' size
    with pytest.raises(ValueError, match="took longer than 0 s"):
        await convert(folder, "someone/Slow", "a" * 40, ConvertLimits(limits.memory_bytes, 0.05))
    with pytest.raises(ValueError, match="needs more memory than its limit of 0.4 GiB"):
        await convert(folder, "someone/Greedy", "b" * 40, ConvertLimits(400 << 20, 300))
    assert not list((data_dir / "converted").rglob("*.part"))
