"""The header reader and the shape reader refuse hostile GGUF files quickly and without
allocating what the files declare (tracemalloc measures what Python allocated)."""

from __future__ import annotations

import time
import tracemalloc

import pytest

from runtime.hardware.shape import shape_from_gguf
from runtime.store.gguf_file import InvalidModelFile, read_header
from tests.store.hostile_ggufs import HOSTILE, SHAPE_ONLY, write_all


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    return write_all(tmp_path_factory.mktemp("hostile"))


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_file_is_refused_fast_and_small(hostile, name):
    path = hostile[name]
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        with pytest.raises(InvalidModelFile) as refused:
            shape_from_gguf(path)  # reads the header, then the shape numbers
        elapsed = time.perf_counter() - t0
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert elapsed < 2.0, f"{name} took {elapsed:.2f}s to refuse"
    assert peak < 4 << 20, f"{name} made the reader allocate {peak:,} bytes"
    assert path.name in str(refused.value)
    if name not in SHAPE_ONLY:  # the header itself is refused, not only its numbers
        with pytest.raises(InvalidModelFile):
            read_header(path)


def test_huge_block_count_names_the_key_and_the_bound(hostile):
    with pytest.raises(InvalidModelFile, match=r"llama\.block_count' = 4,294,967,295; Hearth accepts 0 to 512"):
        shape_from_gguf(hostile["huge_block_count"])


def test_the_real_models_still_read(smollm2_path, gemma_path):
    for path in (smollm2_path, gemma_path):
        shape = shape_from_gguf(path)
        assert 0 < shape.n_layer <= 512 and shape.n_vocab > 1000
