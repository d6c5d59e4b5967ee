"""Checkpoints: the prefix cache of memory that cannot be cut at any position.

The store's budget under a random workload, where chunks are cut, and a growing
conversation on Gemma 3 (sliding window of 512) past its window with the default settings.
"""

from __future__ import annotations

import random

from runtime.backends.llama import ContextConfig, LlamaBackend
from runtime.engine.checkpoints import Checkpoints
from runtime.engine.engine import CacheConfig, Engine
from runtime.engine.host_cache import HostCache
from runtime.engine.request import Request
from runtime.sampling_params import SamplingParams
from runtime.kernels.block_hash import hash_blocks
from tests.greedy_reference import assert_same_or_near_tie, greedy_reference


def test_the_store_stays_under_its_budget_under_a_random_workload():
    rng = random.Random(7)
    store = HostCache(1 << 20)
    for _ in range(3000):
        # prefixes of a small tree of token blocks, so saved prefixes overlap as in a chat
        hashes = hash_blocks([rng.randrange(3) for _ in range(rng.randrange(1, 8))], 1)
        if rng.random() < 0.5:
            assert store.put_checkpoint(hashes[-1], len(hashes), bytes(rng.randrange(1, 300_000)))
            assert store.touch_checkpoint(hashes[-1])  # the newest is never the one dropped
            assert store.checkpoint(hashes, len(hashes)).blocks == len(hashes)
        else:
            assert store.put(hashes, bytes(rng.randrange(1, 300_000)))
            assert store.longest(hashes)[1] == len(hashes)
        assert store.bytes <= store.capacity_bytes
        assert store.bytes == sum(len(e.data) for e in store._entries.values())
    assert not store.put_checkpoint(1, 1, bytes(2 << 20))  # larger than the whole budget
    assert store.num_checkpoints > 0 and len(store) > store.num_checkpoints


def test_the_longest_checkpoint_at_or_below_the_limit_wins():
    store = HostCache(1 << 20)
    hashes = [11, 12, 13, 14, 15]
    store.put_checkpoint(12, 2, b"two")
    store.put_checkpoint(14, 4, b"four")
    assert store.checkpoint(hashes, 5).data == b"four"
    assert store.checkpoint(hashes, 3).data == b"two"
    assert store.checkpoint(hashes, 1) is None
    # found by the hash of the block it ends on (a chained hash names the whole prefix);
    # the position must agree too
    assert store.checkpoint([11, 14], 2) is None


def _request(prompt_len: int, computed: int) -> Request:
    r = Request("r", prompt_len, list(range(prompt_len)), SamplingParams(), 8)
    r.num_computed = computed
    return r


def test_prefill_chunks_end_on_checkpoint_positions():
    c = Checkpoints(None, HostCache(1 << 20), block_size=16, every_blocks=4)  # every 64 tokens
    assert c.cut(_request(300, 0), 256) == 64
    assert c.cut(_request(300, 64), 256) == 64
    assert c.cut(_request(300, 250), 50) == 6  # 256
    assert c.cut(_request(300, 260), 40) == 28  # the last boundary before the last token: 288
    assert c.cut(_request(300, 288), 50) == 50  # the rest of the prompt, then decoding
    assert c.cut(_request(300, 300), 1) == 1
    assert c.cut(_request(40, 0), 40) == 32  # a short prompt: only its last boundary
    assert c.cut(_request(32, 0), 32) == 16  # 32 tokens: the boundary before token 32 is 16
    assert c.cut(_request(10, 0), 10) == 10  # no full block before the last token


BASE = ("The lighthouse keeper kept a logbook of every ship that passed the rocky point, "
        "noting the weather, the wind and the colour of the sails. ") * 16


def test_a_growing_conversation_past_the_window_reuses_all_but_the_last_block(gemma_path):
    """Turns grow by ~80 tokens; the client appends its own short reply, not the model's
    output. Default cache settings: nothing idle stays on the device, so every hit comes from
    the host tier, through a checkpoint once the conversation passes the 512-token window."""
    b = LlamaBackend(gemma_path, ContextConfig(n_ctx=2048, n_seq_max=6, n_batch=512))
    e = Engine(b, 2, CacheConfig())
    text, prompts, replies, cached = BASE, [], [], []
    try:
        for turn in range(3):
            if turn:
                text += (f"\nReader: and what happened on day {turn}, when the storm came? Keeper: on day "
                         f"{turn} a schooner with grey sails passed the point at dawn, the wind came from "
                         f"the north, and the keeper wrote the ship's name, its flag and its heading in "
                         f"the logbook before he climbed the stairs to trim the lamp again. ")
            prompt = b.tokenize(text)
            r = e.add_request(f"t{turn}", prompt, SamplingParams(temperature=0, max_tokens=6))
            out = ""
            while e.has_work():
                out += "".join(o.text for o in e.step())
            prompts.append(prompt)
            replies.append(out)
            cached.append(r.cached_tokens)
        kv = e.stats().kv
    finally:
        b.close()
    assert len(prompts[0]) < 512 < len(prompts[1]) - 16 and kv.memory == "sliding-window"
    assert cached[0] == 0
    for prev, cur, hit in zip(prompts, prompts[1:], cached[1:]):
        common = next((i for i, (x, y) in enumerate(zip(prev, cur)) if x != y), len(prev))
        # all but the last partial block and the client's edit
        assert hit == (min(common, len(prev)) - 1) // 16 * 16, (hit, common, len(prev))
    assert kv.checkpoints_restored == 2 and kv.blocks_cached == 0
    ref = LlamaBackend(gemma_path, ContextConfig(n_ctx=2048, n_seq_max=1, n_batch=1024))
    try:
        same = [assert_same_or_near_tie(r, greedy_reference(ref, p, 6), tol=1.5)
                for r, p in zip(replies, prompts)]
    finally:
        ref.close()
    assert sum(same) >= len(replies) - 1
