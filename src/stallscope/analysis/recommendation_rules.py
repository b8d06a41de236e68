"""Recommendations: the record's own, then advice derived by small named rules."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Optional

from .costs import epoch_estimate
from .facts import TARGETS, Recommendation
from .readers import Record
from .sections import best_configuration, tuning_facts

RecommendationRule = Callable[[Record], Optional[Recommendation]]


def recommend_best_config(r: Record) -> Recommendation | None:
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
    return Recommendation(
        id="use-best-config",
        source="analysis",
        values={
            "label": best.label,
            "samples_per_s": best.samples_per_s,
            "baseline": best.baseline.label,
            "baseline_samples_per_s": best.baseline.samples_per_s,
            "speedup": best.speedup,
        },
    )


def recommend_persistent_workers(r: Record) -> Recommendation | None:
    """Only on its measurement: the epoch-boundary gap with and without persistent workers (issue
    10)."""
    tuning = tuning_facts(r)
    gap = tuning.persistent if tuning is not None else None
    if (
        gap is None
        or not gap.recommended
        or gap.saved_s is None
        or gap.gap_without_s is None
        or gap.gap_with_s is None
    ):
        return None
    epoch = epoch_estimate(r)
    row = epoch.rows[0] if epoch else None
    seconds = row.seconds if row is not None and row.seconds > 0 else None
    return Recommendation(
        id="persistent-workers",
        source="analysis",
        values={
            "label": gap.measured_on,
            "gap_without_s": gap.gap_without_s,
            "gap_with_s": gap.gap_with_s,
            "saved_s": gap.saved_s,
            "epoch_s": seconds,
        },
    )


RECOMMENDATION_RULES: list[RecommendationRule] = [
    recommend_best_config,
    recommend_persistent_workers,
]

# Record recommendations (by id) that already give a derived one's advice: the tuner's pick, the
# profiler's epoch start-up advice.
SAME_ADVICE: dict[str, set[str]] = {
    "use-best-config": {"loader-config", "keep-yours"},
    "persistent-workers": {"profile-epoch-startup"},
}


def recommendations(
    r: Record, rules: Sequence[RecommendationRule] | None = None
) -> list[Recommendation]:
    """The record's recommendations first, then derived ones whose id the record lacks."""
    out: list[Recommendation] = []
    seen: set[str] = set()
    best = best_configuration(r)
    # One winner: when the sweep's best overrules the tuner's pick, the tuner's own advice to switch
    # goes.
    overruled = best is not None and best.overruled is not None
    for rec in r.get("recommendations") or []:
        if not isinstance(rec, dict) or (overruled and rec.get("id") == "loader-config"):
            continue
        rid = str(rec.get("id") or f"recommendation-{len(out) + 1}")
        if rid in seen:
            continue
        seen.add(rid)
        out.append(
            Recommendation(
                rid,
                "record",
                rec.get("title"),
                rec.get("detail"),
                rec.get("measured"),
                rec.get("expected_gain"),
            )
        )
    for rule in RECOMMENDATION_RULES if rules is None else rules:
        rec = rule(r)
        if rec is not None and rec.id not in seen and not SAME_ADVICE.get(rec.id, set()) & seen:
            seen.add(rec.id)
            out.append(rec)
    return out
