"""Sampling parameters of one request (a leaf module: the backend and the API use it).

``LIMITS`` is the one table of allowed ranges: the service's validator
(``runtime/server/validation.py``) checks every wire format's fields against it, and the
engine worker checks again with ``problem()`` before a value reaches llama.cpp (a value out
of range there can abort the process: ``penalty_last_n`` sizes a ring buffer).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

DEFAULT_TOP_K = 40
#: at most this many stop strings, each at most ``MAX_STOP_CHARS`` long (every token checks
#: the tail of the text against each of them)
MAX_STOPS = 16
#: alternatives per token a request may ask logprobs for (``runtime.kernels.logprobs.MAX_TOP``)
MAX_TOP_LOGPROBS = 20
MAX_STOP_CHARS = 256

#: field -> (lowest, highest) allowed value
LIMITS: dict[str, tuple[float, float]] = {
    "temperature": (0.0, 2.0),
    "top_k": (0, 1_000_000),  # above the vocabulary size it is the same as 0 (off)
    "top_p": (0.0, 1.0),
    "min_p": (0.0, 1.0),
    "repeat_penalty": (0.01, 10.0),
    "presence_penalty": (-2.0, 2.0),
    "frequency_penalty": (-2.0, 2.0),
    "penalty_last_n": (0, 32_768),
    "seed": (-(2**63), 2**64 - 1),
    "max_tokens": (1, 2**31 - 1),  # the service's --max-tokens-limit narrows it
    "top_logprobs": (0, 20),
}
#: a reasoning budget is at most this many tokens (None: no budget)
MAX_REASONING_BUDGET = 2**31 - 1
#: the longest thinking marker a template may use
MAX_MARKER_CHARS = 32


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
    #: reasoning models: at most this many tokens inside the thinking block, then the engine
    #: closes it and the answer begins (None: no budget); ``think_markers`` open and close the
    #: block, ``in_reasoning``: the prompt already opened it
    reasoning_budget: int | None = None
    think_markers: tuple[str, str] | None = None
    in_reasoning: bool = False

    def problem(self) -> str | None:
        """Why these parameters must not reach llama.cpp, or None when they are in range."""
        for name, (lo, hi) in LIMITS.items():
            v = getattr(self, name)
            if v is None and name in ("seed", "max_tokens"):
                continue
            integral = isinstance(lo, int) and isinstance(hi, int)
            if isinstance(v, bool) or not isinstance(v, int if integral else (int, float)):
                return f"{name} must be {'an integer' if integral else 'a number'}"
            if isinstance(v, float) and not math.isfinite(v):
                return f"{name} must be a finite number"
            if not lo <= v <= hi:
                return f"{name} must be between {lo} and {hi}, got {v}"
        if not isinstance(self.stop, list) or len(self.stop) > MAX_STOPS:
            return f"stop must be a list of at most {MAX_STOPS} strings"
        for s in self.stop:
            if not isinstance(s, str) or len(s) > MAX_STOP_CHARS or not utf8_ok(s):
                return f"each stop string must be valid text of at most {MAX_STOP_CHARS} characters"
        for name in ("ignore_eos", "logprobs", "prompt_logprobs"):
            if not isinstance(getattr(self, name), bool):
                return f"{name} must be true or false"
        if self.reasoning_budget is not None:
            b = self.reasoning_budget
            if isinstance(b, bool) or not isinstance(b, int) or not 0 <= b <= MAX_REASONING_BUDGET:
                return f"reasoning_budget must be an integer between 0 and {MAX_REASONING_BUDGET}"
            m = self.think_markers
            if not (isinstance(m, tuple) and len(m) == 2 and all(
                    isinstance(x, str) and 0 < len(x) <= MAX_MARKER_CHARS and utf8_ok(x) for x in m)):
                return "a reasoning budget needs the thinking block's two markers"
        if not isinstance(self.in_reasoning, bool):
            return "in_reasoning must be true or false"
        if self.draft is not None and (not isinstance(self.draft, str) or not utf8_ok(self.draft)):
            return "draft must be a string"
        return None


def utf8_ok(text: str) -> bool:
    """True when ``text`` encodes as UTF-8 (JSON's ``\\ud800`` escapes give lone surrogates,
    which do not, and would raise inside the tokenizer)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
