"""The two memories behind the KV cache manager are ``KVMemory``s, and the manager's truncate
reaches the draft's cells through the mirror."""

from __future__ import annotations

from runtime.backends.llama import ContextConfig, LlamaBackend
from runtime.engine.draft_mirror import DraftMirror
from runtime.engine.kv_memory import KVMemory
from runtime.engine.kv_cache_manager import KVCacheManager
from runtime.engine.request import Request
from runtime.sampling_params import SamplingParams


def test_backend_and_mirror_are_kv_memories_and_truncate_cuts_both(smollm2_path):
    target = LlamaBackend(str(smollm2_path), ContextConfig(n_ctx=256, n_seq_max=2, n_batch=64))
    draft = LlamaBackend(str(smollm2_path), ContextConfig(n_ctx=256, n_seq_max=2, n_batch=64))
    try:
        mirror = DraftMirror(target, draft)
        assert isinstance(target, KVMemory) and isinstance(mirror, KVMemory)
        kv = KVCacheManager(mirror, 16, 16, 2)
        tokens = target.tokenize("one two three four five six seven eight nine ten", add_special=True)
        for b in (target, draft):
            b.batch.clear()
            b.batch.add(tokens, 0, 0, False)
            b.decode(b.batch)
        mirror.set_computed(0, len(tokens))
        r = Request("r", len(tokens), list(tokens), SamplingParams(max_tokens=1), 1, seq_id=0)
        kv.truncate(r, 3)
        assert target.seq_pos_max(0) == 2 and draft.seq_pos_max(0) == 2 and mirror.computed(0) == 3
    finally:
        target.close()
        draft.close()
