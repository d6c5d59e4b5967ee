"""llama.cpp's native sampler chain for one request, and the argmax shortcut for plain greedy."""

from __future__ import annotations

import llama_cpp as lc
import numpy as np

from runtime.sampling_params import SamplingParams


class NativeSampler:
    """A llama.cpp sampler chain for one request (penalties, top-k first, then the rest)."""

    __slots__ = ("_ptr", "_argmax", "_n_vocab")

    def __init__(self, n_vocab: int, params: SamplingParams) -> None:
        chain = lc.llama_sampler_chain_init(lc.llama_sampler_chain_default_params())
        add = lambda s: lc.llama_sampler_chain_add(chain, s)  # noqa: E731
        penalties = (
            params.repeat_penalty != 1.0
            or params.frequency_penalty != 0.0
            or params.presence_penalty != 0.0
        )
        # Plain greedy is an argmax over the logits row: numpy does it in ~15 us, while
        # llama_sampler_sample first builds a candidate array over the whole vocabulary
        # (~250 us for 49k tokens here).
        self._argmax = params.temperature <= 0.0 and not penalties
        self._n_vocab = n_vocab
        if penalties:
            add(
                lc.llama_sampler_init_penalties(
                    n_vocab,
                    params.penalty_last_n,
                    params.repeat_penalty,
                    params.frequency_penalty,
                    params.presence_penalty,
                )
            )
        if params.temperature <= 0.0:
            add(lc.llama_sampler_init_greedy())
        else:
            if params.top_k > 0:
                add(lc.llama_sampler_init_top_k(params.top_k))
            if params.top_p < 1.0:
                add(lc.llama_sampler_init_top_p(params.top_p, 1))
            if params.min_p > 0.0:
                add(lc.llama_sampler_init_min_p(params.min_p, 1))
            add(lc.llama_sampler_init_temp(params.temperature))
            seed = lc.LLAMA_DEFAULT_SEED if params.seed is None else params.seed & 0xFFFFFFFF
            add(lc.llama_sampler_init_dist(seed))
        self._ptr = chain

    @property
    def is_argmax(self) -> bool:
        """Plain greedy: the token is the logits row's argmax."""
        return self._argmax

    def accept(self, token: int) -> None:
        lc.llama_sampler_accept(self._ptr, token)

    def sample(self, ctx: lc.llama_context_p, batch_index: int) -> int:
        """Sample from the logits of output ``batch_index`` and accept the token."""
        if self._argmax:
            row = lc.llama_get_logits_ith(ctx, batch_index)
            return int(np.ctypeslib.as_array(row, shape=(self._n_vocab,)).argmax())
        return lc.llama_sampler_sample(self._ptr, ctx, batch_index)

    def close(self) -> None:
        if self._ptr is not None:
            lc.llama_sampler_free(self._ptr)
            self._ptr = None
