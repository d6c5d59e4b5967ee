"""The block pool on tiny pools with exact block ids."""

import pytest

from runtime.engine.block_pool import BlockPool
from runtime.kernels.block_hash import ROOT, hash_block, hash_blocks


def ids(blocks):
    return [b.block_id for b in blocks]


def test_allocation_takes_free_blocks_in_order_and_refuses_when_short():
    pool = BlockPool(4, 2)
    assert ids(pool.allocate(3)) == [0, 1, 2]
    assert pool.allocate(2) is None
    assert ids(pool.allocate(1)) == [3]
    assert pool.num_free == 0 and pool.num_used == 4


def test_chained_hashes_depend_on_everything_before():
    a = hash_blocks([1, 2, 3, 4, 5], 2)
    b = hash_blocks([9, 2, 3, 4], 2)
    assert len(a) == 2 and len(b) == 2  # the partial block [5] has no hash
    assert a[0] != b[0] and a[1] != b[1]  # same second block, different prefix
    assert a[1] == hash_block(hash_block(ROOT, [1, 2]), [3, 4])


def test_hit_is_verified_against_the_stored_tokens():
    pool = BlockPool(4, 2)
    (blk,) = pool.allocate(1)
    h = hash_block(ROOT, [7, 8])
    assert pool.cache(blk, h, [7, 8], 0)
    assert pool.lookup(h, [7, 8]) is blk
    assert pool.lookup(h, [7, 9]) is None  # a (simulated) hash collision is not a hit
    assert pool.lookup(hash_block(ROOT, [1, 1]), [1, 1]) is None


def test_reference_counts_and_shared_blocks():
    pool = BlockPool(4, 2)
    (blk,) = pool.allocate(1)
    pool.cache(blk, 11, [1, 2], 0)
    pool.touch([blk])  # a second request hits it
    assert blk.ref_count == 2
    pool.free([blk])
    assert blk.ref_count == 1 and pool.num_free == 3
    pool.free([blk])
    assert pool.num_free == 4 and pool.num_cached_free == 1
    with pytest.raises(ValueError):
        pool.free([blk])
    pool.touch([blk])  # a hit on an unreferenced cached block takes it out of the free queue
    assert pool.num_free == 3 and pool.num_cached_free == 0


def test_lru_eviction_evicts_a_prefix_tail_first():
    evicted = []
    pool = BlockPool(4, 2, on_evict=lambda b: evicted.append(b.block_id))
    a = pool.allocate(3)  # blocks 0, 1, 2: one request's prefix
    for i, b in enumerate(a):
        pool.cache(b, 100 + i, [i, i], i)
    pool.free(a)  # freed tail first: queue is 3, 2, 1, 0
    assert ids(pool.allocate(1)) == [3]  # plain free block first
    assert ids(pool.allocate(1)) == [2] and evicted == [2]  # then the prefix's tail
    assert pool.lookup(102, [2, 2]) is None and pool.lookup(100, [0, 0]) is a[0]
    assert pool.evictions == 1


def test_trim_cache_keeps_a_bounded_number_of_unreferenced_cached_blocks():
    evicted = []
    pool = BlockPool(6, 1, on_evict=lambda b: evicted.append(b.block_id))
    blocks = pool.allocate(4)
    for i, b in enumerate(blocks):
        pool.cache(b, 200 + i, [i], i)
    pool.free(blocks)
    assert pool.num_cached_free == 4
    assert pool.trim_cache(keep=1) == 3
    assert evicted == [3, 2, 1] and pool.num_cached_free == 1 and pool.num_cached == 1


def test_second_block_with_a_known_hash_is_not_cached_twice():
    pool = BlockPool(4, 2)
    x, y = pool.allocate(2)
    assert pool.cache(x, 5, [1, 2], 0)
    assert not pool.cache(y, 5, [1, 2], 0)
    assert y.hash is None
