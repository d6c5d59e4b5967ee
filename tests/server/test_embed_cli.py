"""``hearth embed``: a vector for one text, cosine similarities for several (an in-process
service, or the one running on the port)."""

from __future__ import annotations

import json

import numpy as np

from tests.embedding_reference import cosine, onnx_reference
from tests.server.test_cli import hearth


def test_one_text_prints_an_abridged_vector_and_full_prints_it_whole(minilm_path):
    r = hearth("embed", "minilm-l6", "The cat sat on the mat.", "--port", "1")
    assert r.returncode == 0, r.stderr
    assert "minilm-l6: 384 dimensions" in r.stdout and "norm 1.0000" in r.stdout and ", ..., " in r.stdout
    full = hearth("embed", "minilm-l6", "The cat sat on the mat.", "--port", "1", "--full")
    v = np.array(json.loads(full.stdout))
    assert v.shape == (1, 384) and cosine(v, onnx_reference(minilm_path.parent, ["The cat sat on the mat."]))[0] >= 0.999


def test_several_texts_print_their_similarities(minilm_path, server):
    r = hearth("embed", "minilm-l6", "The cat sat on the mat.", "A feline rested on a rug.", "Stocks fell.",
               "--port", str(server.port))
    assert r.returncode == 0, r.stderr
    rows = [line.split()[-3:] for line in r.stdout.splitlines() if line.startswith("[") and "norm" not in line]
    sims = np.array(rows, dtype=float)
    assert np.allclose(np.diag(sims), 1.0, atol=1e-3) and sims[0, 1] > sims[0, 2] + 0.2


def test_a_chat_model_is_refused_with_the_reason(smollm2_path):
    r = hearth("embed", "smollm2-135m", "x", "--port", "1")
    assert r.returncode == 1 and "text-generation model" in r.stderr
