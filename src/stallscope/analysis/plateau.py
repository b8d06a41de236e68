"""The configs this run cannot tell from the winner, raced or not (NOTE [plateau]).

NOTE [plateau]: the race compares its finalists in paired rounds, and its confidence speaks of
them alone, in this run. Two runs (``doctor``, then ``tune``) on a 2-core machine often name
different configs from two to five workers of a CPU-bound pipeline, each with a confidence over
its own finalists: between runs, configs that close swap places. How far one config's rate moves
from measurement to measurement is measured in the run itself: every raced config was measured at
least twice, in different rounds, and the median of their spreads ((max − min) / median) is the
run's noise. Every config within that noise of the winner is named as "within this run's noise":
one the race never met (its median over the run's measurements against the winner's), and one it
raced and found slower by less than that noise (the race's medians); in ``doctor``, a config its
sweep measured and the tuner did not is compared by the sweep's median (two commands on the same
target otherwise disagreed without either saying so: ``doctor``'s tuner never measured the sweep's
``w=2`` that ``tune`` then picked). Another run may pick any of them, and that is no
contradiction. A config never raced whose rate lies beyond that noise above the winner's (a scan's
one short window that the tuner set aside as too noisy to tell apart) is not within the noise: it
is named apart, as measured faster and never raced. The user's own config is left to the
keep-yours rule and a tie to the race's tie sentence. Where the rate per epoch decided the pick,
the scan's steady-state rates do not compare with it and nothing is named.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from ..record.model import Trial, baseline_of, best_of, trials_of
from .invariants import ran_label
from .readers import ok_results, steady_config


@dataclass(frozen=True)
class Plateau:
    """The configs within ``band`` (a fraction) of the winner, fastest first: each label, its
    median rate over the winner's, and whether it raced."""

    band: float
    configs: list[tuple[str, float, bool]]
    # Configs never raced whose rate outside the race lies beyond the noise above the winner's
    # (a scan's short window the tuner set aside): not "within the noise", said apart.
    beyond: list[tuple[str, float]] = field(default_factory=list)


def _key(config: Any) -> tuple[tuple[str, str], ...]:
    """A config without ``persistent_workers`` (the epoch-boundary step adds it to the pick; it
    does not change a steady-state rate)."""
    items = steady_config(config if isinstance(config, dict) else None).items()
    return tuple(sorted((str(k), repr(v)) for k, v in items))


def _baseline_config(r: dict[str, Any]) -> Any:
    baseline = baseline_of(r)
    return baseline.config if baseline is not None and baseline.has("config") else None


def plateau(r: dict[str, Any]) -> Plateau | None:
    """NOTE [plateau]. None without a race, without a config measured twice, or without the
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
    mine = _key(best.config)
    winner = rates.get(mine)
    if not spreads or not winner:
        return None
    band = statistics.median(spreads)
    top = statistics.median(winner)
    baseline = _baseline_config(r)
    left_out = {mine, _key(baseline)} if baseline is not None else {mine}
    raced = {_key(h.config): h for h in best.head_to_head if h.has("config")}
    lead = raced.get(mine)
    near: list[tuple[float, str, bool]] = []
    if lead is not None and lead.samples_per_s:  # raced: the race's medians
        near += [
            (h.samples_per_s / lead.samples_per_s, ran_label(r, h.config, h.label), True)
            for key, h in raced.items()
            if key not in left_out and h.samples_per_s
        ]
    near += [  # not raced: the medians of the run's measurements
        (statistics.median(values) / top, ran_label(r, first[key].config, first[key].label), False)
        for key, values in rates.items()
        if key not in raced and key not in left_out
    ]
    seen = set(rates) | left_out
    for res in ok_results(r):  # doctor's sweep: configs the tuner did not measure again
        key = _key(res.config)
        if res.rate and key not in seen:
            near.append((res.rate / top, ran_label(r, res.config, res.label), False))
            seen.add(key)
    near.sort(key=lambda item: -item[0])
    configs = [
        (label, round(ratio, 4), was_raced)
        for ratio, label, was_raced in near
        if ratio >= 1 - band and (was_raced or ratio <= 1 + band)
    ]
    beyond = [
        (label, round(ratio, 4))
        for ratio, label, was_raced in near
        if not was_raced and ratio > 1 + band
    ]
    return Plateau(round(band, 4), configs, beyond)
