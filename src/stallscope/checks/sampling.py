"""Which indices ``check`` fetches: a stratified pilot, then the plan for the rest (NOTE [check
coverage] in runner.py)."""

from __future__ import annotations

import random
from typing import Any


def stratified(
    n: int, k: int, rng: random.Random, *, exclude: set[Any] | frozenset[Any] = frozenset()
) -> list[int]:
    """About ``k`` indices of ``range(n)``, one drawn at random from each of ``k`` equal strata,
    none in ``exclude``."""
    chosen = []
    for j in range(max(0, min(k, n))):
        low, high = j * n // k, (j + 1) * n // k
        if high <= low:
            continue
        for _ in range(4):  # a few draws; a stratum already covered is skipped
            index = rng.randrange(low, high)
            if index not in exclude:
                chosen.append(index)
                break
    return chosen


def pilot_order(n: int, size: int, seed: int) -> list[int]:
    """The first indices to fetch: all of a small dataset; else the two ends, then ``size - 2``
    spread over the range."""
    rng = random.Random(seed)
    if n <= size:
        order = list(range(n))
        rng.shuffle(order)
        return order
    # The ends first: off-by-one bugs live at the last index.
    return [0, n - 1, *stratified(n, size - 2, rng, exclude={0, n - 1})]


def plan_order(n: int, checked: set[Any], fits: int, seed: int) -> list[int]:
    """Every index not yet ``checked`` when they are no more than ``fits``, else ``fits`` of them
    stratified.

    Shuffled, so a run cut short by the budget is still spread over the range.
    """
    rng = random.Random(seed + 2)
    if fits >= n - len(checked):
        order = [i for i in range(n) if i not in checked]
    else:
        order = stratified(n, fits, rng, exclude=checked)
    rng.shuffle(order)
    return order


def memory_pool(n: int, size: int, checked: set[Any], bad: set[Any], seed: int) -> list[int]:
    """``size`` good indices for the memory probe, first those the sample-health probe did not
    reach."""
    rng = random.Random(seed + 1)
    unreached = n - len(checked)
    if 0 < unreached <= 4 * size + 1000:
        fresh = [i for i in range(n) if i not in checked]
    else:
        fresh = stratified(n, min(size, max(0, unreached)), rng, exclude=checked)
    rng.shuffle(fresh)
    fresh = [i for i in fresh if i not in bad][:size]
    seen = [i for i in sorted(i for i in checked if isinstance(i, int)) if i not in bad]
    rng.shuffle(seen)
    return fresh + seen[: max(0, size - len(fresh))]


def bad_indices(health: dict[str, Any]) -> set[Any]:
    """The indices the sample-health probe found broken: they raised, hung, were still running at
    the end, or crashed their worker."""
    bad = {e["index"] for e in health.get("errors") or []}
    bad |= {h["index"] for h in health.get("hangs") or []}
    bad |= {u["index"] for u in health.get("unfinished") or []}
    bad |= {c["index"] for c in health.get("crashes") or [] if c.get("index") is not None}
    return bad
