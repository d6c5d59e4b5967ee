"""The importance matrix llama.cpp's eval hook yields matches a numpy forward pass."""

from __future__ import annotations

import numpy as np
import pytest

from runtime.backends.imatrix import collect_importance
from tests.quantize import tiny_llama


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return tiny_llama.write(tmp_path_factory.mktemp("imatrix") / "tiny.gguf")


def test_importance_matches_a_numpy_forward_pass(tiny):
    rng = np.random.default_rng(1)
    chunks = [list(rng.integers(3, tiny_llama.N_VOCAB, size=n)) for n in (48, 32)]
    got = collect_importance(tiny, chunks, threads=2)
    w = tiny_llama.weights()
    expected_names = {n for n in w if n.endswith(".weight") and "norm" not in n and n != "token_embd.weight"}
    assert set(got.sums) == expected_names
    want: dict[str, np.ndarray] = {}
    for ids in chunks:
        for name, x in tiny_llama.matmul_inputs(w, [int(t) for t in ids]).items():
            want[name] = want.get(name, 0) + (x * x).sum(axis=0)
    for name in expected_names:
        assert got.counts[name] == 80, name
        np.testing.assert_allclose(got.sums[name], want[name], rtol=2e-2, atol=1e-3, err_msg=name)


def test_batches_below_sixteen_rows_are_not_counted(tiny):
    got = collect_importance(tiny, [[5, 6, 7, 8]], threads=1)
    assert got.sums == {}
