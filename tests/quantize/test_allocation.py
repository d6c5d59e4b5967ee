import itertools

import numpy as np
import pytest

from runtime.quantize.allocation import BudgetTooSmall, Option, allocate, lower_hull
from runtime.quantize.target import BadTarget, parse_target


def test_the_hull_drops_dominated_and_concave_options():
    opts = [Option("a", 10, 10.0), Option("b", 20, 4.0), Option("c", 30, 3.5), Option("d", 40, 1.0),
            Option("e", 25, 6.0)]
    assert [o.type_name for o in lower_hull(opts)] == ["a", "b", "d"]


def _brute(options, budget):
    names = list(options)
    best = None
    for combo in itertools.product(*(options[n] for n in names)):
        size = sum(o.bytes for o in combo)
        err = sum(o.error for o in combo)
        if size <= budget and (best is None or err < best):
            best = err
    return best


def test_allocation_meets_the_budget_and_finds_the_optimum_of_convex_options():
    rng = np.random.default_rng(3)
    bpw = [2.6, 3.4, 4.5, 5.5, 6.6, 8.5]
    options = {}
    for t in range(6):
        size, scale = int(rng.integers(100, 1000)), float(rng.random() * 10)
        options[f"t{t}"] = [Option(str(b), int(size * b), scale * 2.0 ** (-2 * b)) for b in bpw]
    lo = sum(o[0].bytes for o in options.values())
    hi = sum(o[-1].bytes for o in options.values())
    last = None
    for budget in np.linspace(lo, hi, 9).astype(int):
        choice = allocate(options, int(budget))
        assert sum(o.bytes for o in choice.values()) <= budget
        err = sum(o.error for o in choice.values())
        assert last is None or err <= last  # more bytes never cost quality
        last = err
        assert err <= _brute(options, int(budget)) * 1.35  # greedy on the hull: near the exact optimum
    with pytest.raises(BudgetTooSmall):
        allocate(options, lo - 1)


def test_targets():
    assert parse_target("q4_k_m").stock == "Q4_K_M"
    assert parse_target("90MB").size == 90_000_000
    assert parse_target("1.5GiB").size == int(1.5 * 1024 ** 3)
    assert parse_target("4.25bpw").bpw == 4.25
    for bad in ("Q9_Z", "4.5", "0.5bpw", "fast"):
        with pytest.raises(BadTarget):
            parse_target(bad)
    assert parse_target("4.5bpw").budget(n_weights=8000, fixed_bytes=100) == 4500
