"""Tiny models for the speculative decoding tests (written once per session)."""

from __future__ import annotations

import pytest

from tests.spec.tiny_models import vocab, write_tiny


@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny-spec")
    return {
        "target": write_tiny(d / "target.gguf", seed=0),
        # the target's weights with noise: agrees often, not always
        "close": write_tiny(d / "close.gguf", seed=0, noise=0.01),
        # another model over the same vocabulary: disagrees often
        "other": write_tiny(d / "other.gguf", seed=5),
        # the target with its output layer negated: its argmax is the target's argmin
        "contrary": write_tiny(d / "contrary.gguf", seed=0, negate_output=True),
        # same size, other token texts
        "foreign": write_tiny(d / "foreign.gguf", seed=0, tokens=vocab("w")),
    }
