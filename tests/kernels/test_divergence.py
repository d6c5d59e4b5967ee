import numpy as np

from runtime.kernels.divergence import (
    kl_divergence,
    log_softmax,
    next_token_nll,
    perplexity,
)


def test_log_softmax_normalises_and_survives_large_logits():
    x = np.array([[1000.0, 1000.0, 0.0], [0.0, 1.0, 2.0]], dtype=np.float32)
    lp = log_softmax(x)
    np.testing.assert_allclose(np.exp(lp).sum(-1), 1.0)
    np.testing.assert_allclose(lp[0, :2], np.log(0.5), atol=1e-12)


def test_kl_against_a_hand_computed_value():
    p, q = np.array([0.5, 0.25, 0.25]), np.array([0.25, 0.5, 0.25])
    want = 0.5 * np.log(2) + 0.25 * np.log(0.5)
    got = kl_divergence(np.log(p)[None], np.log(q)[None])
    np.testing.assert_allclose(got, [want])
    assert kl_divergence(np.log(p)[None], np.log(p)[None])[0] == 0.0
    a, b = np.array([0.5, 0.5]), np.array([0.9, 0.1])
    np.testing.assert_allclose(kl_divergence(np.log(a)[None], np.log(b)[None]),
                               [0.5 * np.log(0.5 / 0.9) + 0.5 * np.log(0.5 / 0.1)])
    np.testing.assert_allclose(kl_divergence(np.log(b)[None], np.log(a)[None]),
                               [0.9 * np.log(1.8) + 0.1 * np.log(0.2)])  # not symmetric


def test_perplexity_of_a_uniform_model_is_the_vocabulary_size():
    lp = log_softmax(np.zeros((5, 7)))
    tokens = np.array([0, 3, 6, 1, 2])
    nll = next_token_nll(lp, tokens)
    assert nll.shape == (4,)
    np.testing.assert_allclose(perplexity(nll), 7.0)
    sharp = np.full((5, 7), -30.0)
    sharp[np.arange(4), tokens[1:]] = 0.0  # row i puts its mass on token i + 1
    assert perplexity(next_token_nll(log_softmax(sharp), tokens)) < 1.0001
