"""Whether a draft model shares the target's vocabulary (speculative decoding needs token
ids to mean the same text in both models)."""

from __future__ import annotations

import numpy as np

#: token ids compared text by text, spread over the vocabulary
SAMPLE = 2048


def vocab_mismatch(target, draft) -> str | None:
    """None when the vocabularies match, else a sentence that says how they differ.

    Compares the vocabulary size, the tokenizer type, the special tokens and the text of
    ``SAMPLE`` token ids spread over the vocabulary.
    """
    if target.n_vocab != draft.n_vocab:
        return (f"the draft model's vocabulary has {draft.n_vocab} tokens and the target's "
                f"{target.n_vocab}: a draft model must use the same tokenizer as the target")
    key = "tokenizer.ggml.model"
    if target.meta(key) != draft.meta(key):
        return (f"the draft model's tokenizer is {draft.meta(key)!r} and the target's "
                f"{target.meta(key)!r}: a draft model must use the same tokenizer as the target")
    ids = np.unique(np.linspace(0, target.n_vocab - 1, min(SAMPLE, target.n_vocab)).astype(int))
    for t in ids.tolist() + [target.eos, target.bos]:
        if t is None or t < 0:
            continue
        if target.token_text(t) != draft.token_text(t):
            return (f"token {t} is {target.token_text(t)!r} for the target and "
                    f"{draft.token_text(t)!r} for the draft model: they use different tokenizers")
    return None
