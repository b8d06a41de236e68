"""Configs the race never met that this run cannot tell from the winner (NOTE [plateau]).

NOTE [plateau]: the race compares its finalists in paired rounds, and its confidence speaks of
them alone. A config the scan measured but the race left out (its single measurement a few
percent behind, or the budget ended) may be as fast as the winner: on a 2-core machine the
configs from two to five workers of a CPU-bound pipeline lie within a few percent of each other,
and two runs (``doctor``, then ``tune``) then name different ones, each with a confidence over
its own finalists. How far apart two measurements of one config fall in this run is measured:
every raced config was measured at least twice, in different rounds. Where a config that did not
race lies within that spread of the winner (its median against the winner's median, both over
this run's measurements), the verdict names it as "within this run's noise": another run may
pick it, and that is no contradiction. Raced configs are left to the race (a tie is named as
one; a loss was paired and beyond the noise). Where the rate per epoch decided the pick, the
scan's steady-state rates are not comparable with it and nothing is named.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from ..record.model import Trial, best_of, trials_of
from .invariants import ran_label

# At most this many configs are named; the rest are counted.
SHOWN = 4


@dataclass(frozen=True)
class Plateau:
    """The unraced configs within ``band`` (a fraction) of the winner, fastest first, each with
    its median rate over the winner's."""

    band: float
    configs: list[tuple[str, float]]


def _key(config: Any) -> tuple[tuple[str, str], ...]:
    """A config without ``persistent_workers`` (the epoch-boundary step adds it to the pick; it
    does not change a steady-state rate)."""
    items = config.items() if isinstance(config, dict) else ()
    return tuple(sorted((str(k), repr(v)) for k, v in items if k != "persistent_workers"))


def plateau(r: dict[str, Any]) -> Plateau | None:
    """NOTE [plateau]. None without a race, without a config measured twice, or without a
    winner's measurements to compare with."""
    best = best_of(r)
    if best is None or not best.head_to_head or not best.has("config"):
        return None
    rates: dict[tuple[tuple[str, str], ...], list[float]] = {}
    first: dict[tuple[tuple[str, str], ...], Trial] = {}
    for trial in trials_of(r):
        if trial.error or not trial.samples_per_s or trial.samples_per_s <= 0:
            continue
        key = _key(trial.config)
        rates.setdefault(key, []).append(trial.samples_per_s)
        first.setdefault(key, trial)
    spreads = [
        (max(values) - min(values)) / statistics.median(values)
        for values in rates.values()
        if len(values) >= 2
    ]
    winner = rates.get(_key(best.config))
    if not spreads or not winner:
        return None
    band = statistics.median(spreads)
    top = statistics.median(winner)
    raced = {_key(h.config) for h in best.head_to_head if h.has("config")}
    near = sorted(
        (
            (statistics.median(values) / top, key)
            for key, values in rates.items()
            if key not in raced and key != _key(best.config)
        ),
        key=lambda pair: -pair[0],
    )
    configs = [
        (ran_label(r, first[key].config, first[key].label), round(ratio, 4))
        for ratio, key in near
        if ratio >= 1 - band
    ]
    return Plateau(round(band, 4), configs)
