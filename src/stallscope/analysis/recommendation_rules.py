"""Recommendations: one list of small named rules over the record's measurements.

Each rule reads what the probes measured and gives its recommendations; a record holds no advice,
so re-rendering a saved record applies today's rules. Each piece of advice has one rule, so nothing
is said twice.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .costs import epoch_estimate
from .facts import TARGETS, Recommendation
from .invariants import factory_knobs
from .readers import mapping
from .sections import best_configuration, tuning_facts
from .training import profile_recommendations
from .tune_rules import is_tune_section, knob_recommendations, tune_pick

RecommendationRule = Callable[[dict[str, Any]], list[Recommendation]]


def _from_text(rec: dict[str, Any]) -> Recommendation:
    """A rule's recommendation written as sentences (title, detail, measured, expected gain)."""
    return Recommendation(
        str(rec["id"]),
        "text",
        rec.get("title"),
        rec.get("detail"),
        rec.get("measured"),
        rec.get("expected_gain"),
    )


def _from_values(rec_id: str, **values: Any) -> Recommendation:
    """A rule's recommendation given as the measured values a renderer words."""
    return Recommendation(rec_id, "analysis", values=values)


def _use_best_config(r: dict[str, Any]) -> Recommendation | None:
    best = best_configuration(r)
    good, _ = TARGETS["tuning_headroom"]
    if (
        best is None
        or best.keep_baseline
        or best.baseline is None
        or best.speedup is None
        or best.speedup < good
    ):
        return None
    return _from_values(
        "use-best-config",
        label=best.label,
        samples_per_s=best.samples_per_s,
        baseline=best.baseline.label,
        baseline_samples_per_s=best.baseline.samples_per_s,
        speedup=best.speedup,
    )


def _persistent_workers(r: dict[str, Any]) -> Recommendation | None:
    tuning = tuning_facts(r)
    gap = tuning.persistent if tuning is not None else None
    baseline = tuning.baseline.config if tuning is not None and tuning.baseline else {}
    if (
        gap is None
        or not gap.recommended
        or baseline.get("persistent_workers")
        or gap.saved_s is None
        or gap.gap_without_s is None
        or gap.gap_with_s is None
    ):
        return None
    epoch = epoch_estimate(r)
    row = epoch.rows[0] if epoch else None
    seconds = row.seconds if row is not None and row.seconds > 0 else None
    inside = _factory_without(r, "persistent_workers")
    return _from_values(
        "persistent-workers",
        label=gap.measured_on,
        gap_without_s=gap.gap_without_s,
        gap_with_s=gap.gap_with_s,
        saved_s=gap.saved_s,
        epoch_s=seconds,
        **({"inside": inside} if inside else {}),
    )


def _factory_without(r: dict[str, Any], knob: str) -> str | None:
    """The name of the user's factory where it builds the DataLoader and takes no parameter for
    ``knob``: the change goes into the DataLoader call inside it (NOTE [a DataLoader's factory])."""
    loader = mapping(r.get("loader"))
    takes = factory_knobs(r)
    origin = loader.get("origin")
    if takes is None or knob in takes or not loader.get("origin_is_loader") or not origin:
        return None
    return str(origin).removesuffix("()")


def recommend_config(r: dict[str, Any]) -> list[Recommendation]:
    """The one config to use (issue 10, "one winner"): the tuner's verdict on its pick ("keep
    yours", or switch), unless the sweep's best overrules the pick; then, or without a tuner, the
    report's best configuration when it clears the headroom target."""
    if is_tune_section(r):
        best = best_configuration(r)
        if best is None or best.overruled is None:
            pick = tune_pick(r)
            return [_from_text(pick)] if pick is not None else []
    rec = _use_best_config(r)
    return [rec] if rec is not None else []


def recommend_tuned_knobs(r: dict[str, Any]) -> list[Recommendation]:
    """Knobs the tuner measured beyond its pick (batched fetch, in_order, threads, more workers
    than cores)."""
    return [_from_text(rec) for rec in knob_recommendations(r)] if is_tune_section(r) else []


def recommend_persistent_workers(r: dict[str, Any]) -> list[Recommendation]:
    """Only on its measurement: the epoch-boundary gap with and without persistent workers (issue
    10). Where a training-loop profile measured the epoch start-up, its advice (which names
    persistent_workers with that cost) says it instead."""
    if any(rec["id"] == "profile-epoch-startup" for rec in profile_recommendations(r)):
        return []
    rec = _persistent_workers(r)
    return [rec] if rec is not None else []


def recommend_for_training_loop(r: dict[str, Any]) -> list[Recommendation]:
    """What a training-loop profile's stall figures call for (``analysis.training.advise``)."""
    return [_from_text(rec) for rec in profile_recommendations(r)]


RECOMMENDATION_RULES: list[RecommendationRule] = [
    recommend_config,
    recommend_tuned_knobs,
    recommend_persistent_workers,
    recommend_for_training_loop,
]


def recommendations(
    r: dict[str, Any], rules: Sequence[RecommendationRule] | None = None
) -> list[Recommendation]:
    """Every rule's recommendations for the record, in the order of the rules."""
    return [rec for rule in (RECOMMENDATION_RULES if rules is None else rules) for rec in rule(r)]
