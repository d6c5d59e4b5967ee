"""Bits where they matter: choose one type per tensor to minimise the summed error in a budget.

Each tensor offers options (bytes, expected error). The problem is a multiple-choice knapsack;
the greedy walk over each tensor's lower convex hull (best error saved per byte first) is
exact at the hull's vertices and what ExLlamaV2's optimiser approximates as well. Options off
the hull (more bytes for no less error than a mix of neighbours) are never chosen.
"""

from __future__ import annotations

from dataclasses import dataclass


class BudgetTooSmall(ValueError):
    pass


@dataclass(slots=True, frozen=True)
class Option:
    type_name: str
    bytes: int
    error: float


def lower_hull(options: list[Option]) -> list[Option]:
    """Options by bytes, each strictly better in error, convex (diminishing returns)."""
    pts = sorted(options, key=lambda o: (o.bytes, o.error))
    mono: list[Option] = []
    for o in pts:
        if mono and o.bytes == mono[-1].bytes:
            continue
        if not mono or o.error < mono[-1].error:
            mono.append(o)
    hull: list[Option] = []
    for o in mono:
        while len(hull) >= 2:
            a, b = hull[-2], hull[-1]
            # b is above the segment a-o: dropping it keeps the hull convex
            if (b.error - a.error) * (o.bytes - a.bytes) >= (o.error - a.error) * (b.bytes - a.bytes):
                hull.pop()
            else:
                break
        hull.append(o)
    return hull


def allocate(options: dict[str, list[Option]], budget: int) -> dict[str, Option]:
    """One option per tensor, total bytes within ``budget``, summed error as low as the walk finds."""
    hulls = {name: lower_hull(opts) for name, opts in options.items()}
    choice = {name: hull[0] for name, hull in hulls.items()}
    spent = sum(o.bytes for o in choice.values())
    if spent > budget:
        raise BudgetTooSmall(f"the smallest mix takes {spent} bytes, over the budget of {budget}")
    steps = []
    for name, hull in hulls.items():
        for i in range(1, len(hull)):
            a, b = hull[i - 1], hull[i]
            steps.append(((a.error - b.error) / (b.bytes - a.bytes), name, i))
    steps.sort(key=lambda s: -s[0])  # along each hull slopes fall, so each tensor's steps stay in order
    level = {name: 0 for name in hulls}
    for _, name, i in steps:
        if level[name] != i - 1:
            continue  # an earlier step of this tensor did not fit
        b, a = hulls[name][i], hulls[name][i - 1]
        if spent + b.bytes - a.bytes > budget:
            continue
        spent += b.bytes - a.bytes
        level[name] = i
        choice[name] = b
    return choice
