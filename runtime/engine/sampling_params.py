"""Sampling parameters of one request (a leaf module: the backend and the API use it)."""

from __future__ import annotations

from dataclasses import dataclass, field

DEFAULT_TOP_K = 40


@dataclass(slots=True)
class SamplingParams:
    """How to pick tokens. ``temperature == 0`` is greedy.

    ``top_k`` defaults to 40 (as llama.cpp's server and Ollama do): it bounds the
    vocabulary-wide work of sampling; 0 disables it.
    """

    temperature: float = 1.0
    top_k: int = DEFAULT_TOP_K
    top_p: float = 1.0
    min_p: float = 0.0
    repeat_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    penalty_last_n: int = 64
    seed: int | None = None
    max_tokens: int | None = None
    stop: list[str] = field(default_factory=list)
    ignore_eos: bool = False
    #: speculative decoding: None (the server's default), "model", "ngram" or "off"
    draft: str | None = None
    #: logprobs of every sampled token (the model's raw softmax: ``runtime/engine/logprobs.py``)
    logprobs: bool = False
    #: alternatives per position with the logprobs (0..20)
    top_logprobs: int = 0
    #: logprobs of the prompt tokens too (echo): the whole prompt is computed, no prefix cache
    prompt_logprobs: bool = False
