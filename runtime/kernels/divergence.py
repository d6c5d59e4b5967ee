"""Distances between next-token distributions: log-softmax, KL divergence, perplexity.

Shapes: ``logits`` float32 [n, vocab]; ``tokens`` int [n]. KL(P || Q) with P the reference
model (the unquantized source) and Q the candidate, as llama.cpp's ``llama-perplexity
--kl-divergence`` reports it, in nats per token.
"""

from __future__ import annotations

import numpy as np


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise log-softmax in float64 (float32 loses the tail of a 262k-token vocabulary)."""
    x = logits.astype(np.float64)
    x -= x.max(axis=-1, keepdims=True)
    x -= np.log(np.exp(x).sum(axis=-1, keepdims=True))
    return x


def kl_divergence(ref_logprobs: np.ndarray, logprobs: np.ndarray) -> np.ndarray:
    """Per row KL(P || Q) = sum_v p_v (log p_v - log q_v): [n] float64, >= 0."""
    return (np.exp(ref_logprobs) * (ref_logprobs - logprobs)).sum(axis=-1)


def next_token_nll(logprobs: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """Negative log-likelihood of each next token: row i predicts tokens[i + 1]; [n - 1]."""
    tokens = np.asarray(tokens)
    return -logprobs[np.arange(len(tokens) - 1), tokens[1:]]


def perplexity(nll: np.ndarray) -> float:
    """exp(mean NLL) over all scored tokens."""
    return float(np.exp(np.mean(nll)))
