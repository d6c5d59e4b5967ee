"""The host tier's saved states: what a lookup finds after others went, and in which order they go.

(Checkpoints and the ranks they share with states: ``test_checkpoints.py``.)
"""

from __future__ import annotations

from runtime.engine.host_cache import SHARED_SHARE, HostCache


def _kept(store: HostCache) -> list[tuple[str, int]]:
    """States in eviction order: ("s", last hash) single conversations', ("p", ...) shared prefixes."""
    return [("p" if e.shared else "s", e.hashes[-1]) for e in store.entries() if not e.is_checkpoint]


def test_a_prefix_two_states_share_stays_found_when_the_newer_one_goes():
    """Two sessions of one agent: blocks 1-3 (tools) shared, then their own. The lookup of a third
    session found nothing once the newer state had gone, though the older one still held it."""
    store = HostCache(100)
    store.put([1, 2, 3, 10], bytes(30))
    store.put([1, 2, 3, 20], bytes(30))
    assert store.longest([1, 2, 3, 10])[1] == 4  # the first session goes on: the second is the older
    store.put([7, 8], bytes(41))  # another directory's session: the least recently used goes
    assert _kept(store) == [("s", 10), ("s", 8)]
    entry, n = store.longest([1, 2, 3, 30])
    assert n == 3 and entry is not None and entry.hashes == [1, 2, 3, 10]
    assert store.reach([1, 2, 3, 30]) == 3 and store.has([1, 2, 3])


def test_the_smallest_state_that_reaches_furthest_is_restored():
    """A state is loaded whole before it is trimmed to the hit: the smaller, the fewer cells it needs."""
    store = HostCache(1000)
    store.put([1, 2, 3, 4, 5, 6], bytes(60), prompt_blocks=5)
    store.put([1, 2, 3], bytes(30), prompt_blocks=3, shared=True)  # inside the other: kept all the same
    assert _kept(store) == [("s", 6), ("p", 3)]
    entry, n = store.longest([1, 2, 3, 9])
    assert n == 3 and entry is not None and len(entry.data) == 30
    entry, n = store.longest([1, 2, 3, 4, 9])
    assert n == 4 and entry is not None and len(entry.data) == 60
    store.put([1, 2, 3, 4, 5, 6, 7], bytes(70))  # the next turn covers its previous turn whole, not the prefix
    assert _kept(store) == [("s", 7), ("p", 3)]


def test_where_a_prompt_parts_from_another_prompt():
    """A prompt parts from a kept one inside that one's prompt; the next turn of a conversation
    leaves it only past it (in its reply)."""
    store = HostCache(1000)
    store.put([1, 2, 3, 4, 5], bytes(50), prompt_blocks=4)  # blocks 5: its reply
    assert store.parts([1, 2, 3, 8, 9], 3)  # another session: parts after block 3 of its prompt
    assert not store.parts([1, 2, 3, 4, 6, 7], 4)  # the next turn: goes on past its prompt
    assert not store.parts([1, 2, 3, 4, 5], 5)  # all of it cached: nothing to part from
    store.put([7, 8, 9], bytes(30))  # prompt length not known
    assert not store.parts([7, 8, 5], 2)


def test_shared_prefixes_go_after_single_conversations_within_their_share():
    store = HostCache(100)
    store.put([1, 2], bytes(20), prompt_blocks=2, shared=True)
    store.put([1, 2, 3], bytes(30))
    store.put([5, 6], bytes(20), prompt_blocks=2, shared=True)
    store.put([5, 6, 7], bytes(30))  # single conversations' states go first
    assert _kept(store) == [("s", 3), ("s", 7), ("p", 2), ("p", 6)] and store.bytes == 100
    store.put([9], bytes(20))
    assert _kept(store) == [("s", 7), ("s", 9), ("p", 2), ("p", 6)]
    store.put([4], bytes(15), shared=True)  # shared prefixes beyond their share go first, oldest first
    assert store.prefix_bytes <= SHARED_SHARE * store.capacity_bytes
    assert _kept(store) == [("s", 7), ("s", 9), ("p", 6), ("p", 4)] and store.bytes == 85
    store.put([9], bytes(20), shared=True)  # a single conversation's state that turns out to be shared
    assert _kept(store) == [("s", 7), ("p", 6), ("p", 4), ("p", 9)] and store.prefix_bytes == 55
