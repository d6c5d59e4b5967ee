"""Quality measured, not assumed: KL divergence to the source model and perplexity.

The source model's next-token log-probabilities over a text are computed once
(``Reference``); each candidate file is run over the same token chunks and compared:
mean and 99th-percentile KL(source || candidate) per token, the share of positions where
both pick the same top token, and the candidate's perplexity on the text.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from runtime.backends.token_logits import ChunkScorer
from runtime.kernels.divergence import (
    kl_divergence,
    log_softmax,
    next_token_nll,
    perplexity,
)


@dataclass(slots=True)
class Quality:
    kl_mean: float  #: nats per token
    kl_p99: float
    top1_agree: float  #: share of positions whose most likely token is the source's
    perplexity: float
    tokens: int

    def to_dict(self) -> dict:
        return asdict(self)


class Reference:
    """The source model's log-probabilities over ``chunks`` (kept as float32)."""

    def __init__(self, model: Path, chunks: list[list[int]], threads: int = 0) -> None:
        self.chunks = chunks
        self.threads = threads
        size = max(len(c) for c in chunks)
        self.logprobs: list[np.ndarray] = []
        with ChunkScorer(model, size, threads) as scorer:
            for logits in scorer.each(chunks):
                self.logprobs.append(log_softmax(logits).astype(np.float32))
        self.quality = self._score(self.logprobs)

    def _score(self, logprobs: list[np.ndarray]) -> Quality:
        kl, agree, nll = [], [], []
        for ref, lp, tokens in zip(self.logprobs, logprobs, self.chunks):
            kl.append(kl_divergence(ref.astype(np.float64), lp.astype(np.float64)))
            agree.append(ref.argmax(-1) == lp.argmax(-1))
            nll.append(next_token_nll(lp.astype(np.float64), np.asarray(tokens)))
        kl_all = np.maximum(np.concatenate(kl), 0.0)  # rounding can dip a hair below zero
        return Quality(float(kl_all.mean()), float(np.percentile(kl_all, 99)),
                       float(np.concatenate(agree).mean()), perplexity(np.concatenate(nll)), int(kl_all.size))

    def measure(self, candidate: Path) -> Quality:
        size = max(len(c) for c in self.chunks)
        with ChunkScorer(candidate, size, self.threads) as scorer:
            logprobs = [log_softmax(logits).astype(np.float32) for logits in scorer.each(self.chunks)]
        return self._score(logprobs)
