"""Exactness of the speculative kernels: emitted tokens follow the target's distribution."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from runtime.kernels.speculative import (
    Candidates, accepted_count_probs, candidates, choose_k, expected_tokens, sample, verify,
    verify_candidates, verify_greedy,
)

TRIALS = 200_000


def _dist(rng, v, sparsity=0.0):
    w = rng.random(v) ** 3
    if sparsity:
        w[rng.random(v) < sparsity] = 0.0
        if w.sum() == 0:
            w[0] = 1.0
    return w / w.sum()


def _run(p_rows, q_rows, seed=0):
    """200k trials of drafting K tokens from q (each position independent of earlier tokens)
    and verifying against p. Returns (n_accepted [T], first token [T], second token [T] or -1)."""
    rng = np.random.default_rng(seed)
    p = np.broadcast_to(p_rows, (TRIALS,) + p_rows.shape)
    q = np.broadcast_to(q_rows, (TRIALS,) + q_rows.shape)
    draft = sample(q, rng)  # [T, K]
    n_acc, tok = verify(p, q, draft, rng)
    first = np.where(n_acc == 0, tok, draft[:, 0])
    second = np.where(n_acc == 1, tok, np.where(n_acc >= 2, draft[:, 1] if draft.shape[1] > 1 else -1, -1))
    return n_acc, first, second


def _tv(samples, p):
    counts = np.bincount(samples, minlength=p.size)[:p.size]
    return 0.5 * np.abs(counts / samples.size - p).sum()


def _check(p_rows, q_rows, seed=0):
    n_acc, first, second = _run(p_rows, q_rows, seed)
    assert _tv(first, p_rows[0]) < 0.01
    emitted = second[second >= 0]
    if emitted.size > 20_000:
        assert _tv(emitted, p_rows[1]) < 0.015
    beta = [np.minimum(p_rows[k], q_rows[k]).sum() for k in range(q_rows.shape[0])]
    theory = accepted_count_probs(beta)
    observed = np.bincount(n_acc, minlength=len(theory)) / TRIALS
    assert np.abs(observed - theory).max() < 0.01, (observed, theory)
    return n_acc


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_distributions_match_target(seed):
    rng = np.random.default_rng(100 + seed)
    v, k = 12, 3
    p = np.stack([_dist(rng, v) for _ in range(k + 1)])
    q = np.stack([_dist(rng, v) for _ in range(k)])
    _check(p, q, seed)


def test_sparse_supports_match_target():
    rng = np.random.default_rng(7)
    v, k = 20, 4
    p = np.stack([_dist(rng, v, 0.5) for _ in range(k + 1)])
    q = np.stack([_dist(rng, v, 0.5) for _ in range(k)])
    _check(p, q)


def test_disjoint_supports_reject_everything():
    v = 10
    p = np.zeros((3, v)); p[:, :5] = _dist(np.random.default_rng(1), 5)
    q = np.zeros((2, v)); q[:, 5:] = _dist(np.random.default_rng(2), 5)
    n_acc = _check(p, q)
    assert (n_acc == 0).all()


def test_equal_distributions_accept_everything():
    rng = np.random.default_rng(3)
    p = np.stack([_dist(rng, 8) for _ in range(4)])
    n_acc = _check(p, p[:3].copy())
    assert (n_acc == 3).all()


def test_one_hot_target_and_draft():
    v = 6
    p = np.zeros((3, v)); p[0, 2] = p[1, 4] = p[2, 1] = 1.0
    q = np.zeros((2, v)); q[0, 2] = 1.0; q[1, 3] = 1.0  # first agrees, second does not
    n_acc, first, second = _run(p, q)
    assert (n_acc == 1).all() and (first == 2).all() and (second == 4).all()
    # a one-hot (deterministic) draft against a spread target: accepted with p(x)
    p2 = np.stack([_dist(np.random.default_rng(4), v) for _ in range(2)])
    q2 = np.zeros((1, v)); q2[0, 0] = 1.0
    n_acc = _check(p2, q2)
    assert abs((n_acc == 1).mean() - p2[0, 0]) < 0.01


def test_sparse_candidates_verify_matches_target():
    rng = np.random.default_rng(5)
    p = Candidates(np.array([3, 7, 9, 11]), np.array([0.4, 0.3, 0.2, 0.1]))
    bonus = Candidates(np.array([1]), np.array([1.0]))
    q = Candidates(np.array([7, 9, 50]), np.array([0.5, 0.25, 0.25]))
    out = []
    for _ in range(20_000):
        x = int(q.ids[sample(q.probs, rng)])
        n, tok = verify_candidates([x], [p, bonus], [q], rng)
        out.append(x if n == 1 else tok)
    counts = {t: out.count(t) / len(out) for t in set(out)}
    assert set(counts) <= {3, 7, 9, 11}
    for t, pr in zip(p.ids, p.probs):
        assert abs(counts.get(int(t), 0.0) - pr) < 0.015


def test_greedy_verification():
    assert verify_greedy([5, 6, 7], [5, 6, 7, 8]) == (3, 8)
    assert verify_greedy([5, 9, 7], [5, 6, 7, 8]) == (1, 6)
    assert verify_greedy([1], [2, 3]) == (0, 2)


@dataclass
class T:
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    repeat_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    penalty_last_n: int = 64


def _softmax(z):
    e = np.exp(z - z.max())
    return e / e.sum()


def test_candidates_transforms():
    rng = np.random.default_rng(9)
    logits = rng.normal(size=1000).astype(np.float32) * 3
    full = candidates(logits, T())
    assert np.allclose(np.sort(full.probs), np.sort(_softmax(logits.astype(np.float64))))
    c = candidates(logits, T(top_k=10, temperature=0.5))
    top = np.argsort(-logits)[:10]
    assert set(c.ids.tolist()) == set(top.tolist())
    assert np.allclose(c.probs, _softmax(logits[c.ids].astype(np.float64) / 0.5))
    c = candidates(logits, T(top_p=0.5))
    order = np.argsort(-logits)
    cum = np.cumsum(_softmax(logits[order].astype(np.float64)))
    assert c.ids.size == int(np.argmax(cum >= 0.5)) + 1
    c = candidates(logits, T(min_p=0.1))
    pr = _softmax(logits.astype(np.float64))
    assert set(c.ids.tolist()) == set(np.nonzero(pr >= 0.1 * pr.max())[0].tolist())
    assert candidates(logits, T(temperature=0)).ids.tolist() == [int(np.argmax(logits))]


def test_penalties():
    logits = np.array([2.0, -1.0, 0.5, 3.0], dtype=np.float32)
    t = T(temperature=0, repeat_penalty=2.0, frequency_penalty=0.5, presence_penalty=0.25)
    # token 3 seen twice: 3.0 / 2 - 2*0.5 - 0.25 = 0.25 < 2.0 -> argmax becomes 0
    assert candidates(logits, t, [3, 3]).ids.tolist() == [0]
    assert candidates(logits, T(temperature=0), [3, 3]).ids.tolist() == [3]


def test_expected_tokens_and_choice():
    assert expected_tokens(0.0, 4) == 1.0
    assert expected_tokens(1.0, 4) == 5.0
    assert abs(expected_tokens(0.5, 2) - 1.75) < 1e-12
    verify_cost = [1.0 + 0.05 * k for k in range(9)]
    k, speed = choose_k(0.9, 0.2, verify_cost, 1.0)
    assert 2 <= k <= 8 and speed > 1.5
    k, speed = choose_k(0.1, 0.5, verify_cost, 1.0)
    assert speed < 1.0  # a poor draft does not pay
