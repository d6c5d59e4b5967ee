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
            assert store.has_checkpoint(hashes[-1])  # the newest is never the one dropped
            assert store.checkpoint(hashes, len(hashes)).blocks == len(hashes)
        else:
            assert store.put(hashes, bytes(rng.randrange(1, 300_000)))
            assert store.longest(hashes)[1] == len(hashes)
        assert store.bytes <= store.capacity_bytes
        assert store.bytes == sum(len(e.data) for e in store.entries())
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


def _kept(store: HostCache) -> list[tuple[str, int]]:
    """The store's entries in eviction order: ("s", last hash) states, ("c", hash) checkpoints."""
    return [("c" if e.is_checkpoint else "s", e.hashes[-1]) for e in store.entries()]


def test_states_are_evicted_before_checkpoints_and_shared_checkpoints_last():
    store = HostCache(100)
    store.put_checkpoint(1, 1, bytes(20))
    store.put_checkpoint(2, 2, bytes(20))
    store.seen([1, 2])  # a second prompt held both prefixes: shared, the shallower one last to go
    store.put_checkpoint(3, 3, bytes(10))
    store.put([10], bytes(30))
    store.put([20], bytes(30))  # the oldest state goes, not the older checkpoints
    assert _kept(store) == [("s", 20), ("c", 3), ("c", 2), ("c", 1)] and store.bytes == 80
    store.put([30], bytes(60))  # every older state, then the lone checkpoint
    assert _kept(store) == [("s", 30), ("c", 2), ("c", 1)] and store.bytes == 100
    store.put_checkpoint(4, 4, bytes(20))  # a new checkpoint pushes the state out
    store.put_checkpoint(5, 5, bytes(30))
    store.put_checkpoint(6, 6, bytes(20))  # the least recently used lone one goes
    assert _kept(store) == [("c", 5), ("c", 6), ("c", 2), ("c", 1)] and store.bytes == 90
    store.seen([1, 2, 3, 4, 5])  # another prompt with prefix 5 (and so 1 and 2)
    assert _kept(store) == [("c", 6), ("c", 5), ("c", 2), ("c", 1)]
    store.put_checkpoint(7, 7, bytes(40))  # the lone one, then the deepest shared one
    assert _kept(store) == [("c", 7), ("c", 2), ("c", 1)] and store.bytes == 80
    assert store.checkpoint([1, 2], 2).data == bytes(20)  # a lookup makes it the most recent
    assert _kept(store) == [("c", 7), ("c", 1), ("c", 2)]
    store.put([50], bytes(100))  # fits alone: everything else goes
    assert _kept(store) == [("s", 50)]
    assert not store.put([60], bytes(101)) and _kept(store) == [("s", 50)]


def test_a_state_covered_by_a_newer_one_is_dropped():
    store = HostCache(1000)
    store.put([1, 2], bytes(10))
    store.put([1, 2, 3], bytes(15))  # the next turn of the same conversation
    store.put([1, 7], bytes(12))  # another branch: covers block 1 only, so [1, 2, 3] stays
    assert _kept(store) == [("s", 3), ("s", 7)] and store.bytes == 27
    entry, n = store.longest([1, 2, 9])
    assert n == 2 and entry.hashes == [1, 2, 3]
    assert store.longest([1, 7, 8])[1] == 2 and store.longest([5])[1] == 0


def test_the_default_tier_is_a_share_of_the_available_ram_within_bounds():
    from runtime.engine.host_cache import MAX_BYTES, MIN_BYTES, RAM_SHARE, default_capacity

    gib = 1 << 30
    assert default_capacity(8 * gib) == int(8 * gib * RAM_SHARE)
    assert default_capacity(512 << 20) == MIN_BYTES  # the floor
    assert default_capacity(300 << 20) == 150 << 20  # never more than half of what is left
    assert default_capacity(0) == 0
    assert default_capacity(1024 * gib) == MAX_BYTES


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
    output. Default cache settings, and another client's request between the turns takes the
    conversation's idle cells off the device, so every hit comes from the host tier, through a
    checkpoint once the conversation passes the 512-token window. (Without it, the next turn
    continues on the idle cells, whose window is intact: no checkpoint is needed.)"""
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
            e.add_request(f"other{turn}", b.tokenize("Where is Peru?"), SamplingParams(temperature=0, max_tokens=2))
            while e.has_work():
                e.step()
        kv = e.stats().kv
    finally:
        b.close()
    assert len(prompts[0]) < 512 < len(prompts[1]) - 16 and kv.memory == "sliding-window"
    assert cached[0] == 0
    for prev, cur, hit in zip(prompts, prompts[1:], cached[1:]):
        common = next((i for i, (x, y) in enumerate(zip(prev, cur)) if x != y), len(prev))
        # all but the last partial block and the client's edit
        assert hit == (min(common, len(prev)) - 1) // 16 * 16, (hit, common, len(prev))
    assert kv.checkpoints_restored == 2
    ref = LlamaBackend(gemma_path, ContextConfig(n_ctx=2048, n_seq_max=1, n_batch=1024))
    try:
        same = [assert_same_or_near_tie(r, greedy_reference(ref, p, 6), tol=1.5)
                for r, p in zip(replies, prompts)]
    finally:
        ref.close()
    assert sum(same) >= len(replies) - 1


AGENT = "".join(f"Tool {i}: search_{i}(query: string, limit: integer = {10 + i}) finds the files whose "
                f"text matches query and returns their paths, best first; errors: bad_query_{i}.\n"
                for i in range(23))


def test_a_new_agent_session_reuses_the_shared_prefix_when_states_outgrow_the_tier(gemma_path):
    """Two sessions of one agent: the same tools (~1,060 tokens), then their own turns. The host
    tier holds about one saved state and two checkpoints: each new state pushes the older
    states and the session's own newest checkpoint out, the checkpoint inside the tools stays,
    so the second session's first request restores the tools up to it (in one LRU order it
    went on the second turn, and the second session reused nothing)."""
    b = LlamaBackend(gemma_path, ContextConfig(n_ctx=2048, n_seq_max=6, n_batch=512))
    e = Engine(b, 2, CacheConfig(16, True, 0.0, host_mib=28))
    tools = b.tokenize(AGENT)

    def turn(rid: str, text: str) -> int:
        r = e.add_request(rid, tools + b.tokenize(text, add_special=False),
                          SamplingParams(temperature=0, max_tokens=4))
        while e.has_work():
            e.step()
        return r.cached_tokens

    try:
        chat = ""
        for k in range(3):
            chat += f"\nUser: find the tests of module {k}, then the module itself.\nAgent: searching.\n"
            turn(f"one/{k}", chat)
        # another client's request between the sessions takes the first one's cells off the
        # device: the second session's prefix comes from the host tier
        e.add_request("other", b.tokenize("What is the capital of Peru?"), SamplingParams(temperature=0, max_tokens=2))
        while e.has_work():
            e.step()
        reused = turn("two/0", "\nUser: where is the config read?\n")
        kv = e.stats().kv
    finally:
        b.close()
    state, ckpt = kv.host_tier.states, kv.host_tier.checkpoints
    assert 1024 < len(tools) < 1100 and 2 * state.bytes + ckpt.bytes > kv.host_tier.capacity_bytes
    assert reused >= 0.9 * len(tools), (reused, len(tools))
    assert reused == len(tools) // 512 * 512  # the last checkpoint inside the tools
