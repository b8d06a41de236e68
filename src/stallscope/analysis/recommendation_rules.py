"""Recommendations: the record's own, then advice derived by small named rules."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Optional

from .costs import epoch_estimate
from .facts import TARGETS, Recommendation
from .readers import Record
from .sections import best_configuration

RecommendationRule = Callable[[Record], Optional[Recommendation]]


def recommend_best_config(r: Record) -> Recommendation | None:
    best = best_configuration(r)
    good, _ = TARGETS["tuning_headroom"]
    if best is None or best.baseline is None or best.speedup is None or best.speedup < good:
        return None
    return Recommendation(
        id="use-best-config",
        source="analysis",
        values={"label": best.label, "samples_per_s": best.samples_per_s, "baseline": best.baseline.label,
                "baseline_samples_per_s": best.baseline.samples_per_s, "speedup": best.speedup},
    )


def recommend_persistent_workers(r: Record) -> Recommendation | None:
    epoch = epoch_estimate(r)
    row = epoch.rows[0] if epoch else None
    good, _ = TARGETS["startup_fraction"]
    if row is None or row.persistent or row.startup_s is None or row.seconds <= 0:
        return None
    if row.startup_s / row.seconds < good:
        return None
    return Recommendation(
        id="persistent-workers",
        source="analysis",
        values={"label": row.label, "startup_s": row.startup_s, "epoch_s": row.seconds,
                "fraction": row.startup_s / row.seconds},
    )


RECOMMENDATION_RULES: list[RecommendationRule] = [recommend_best_config, recommend_persistent_workers]

# Record recommendations (by id) that already give a derived one's advice: the tuner's pick, the profiler's
# epoch start-up advice.
SAME_ADVICE: dict[str, set[str]] = {
    "use-best-config": {"loader-config"},
    "persistent-workers": {"profile-epoch-startup"},
}


def recommendations(r: Record, rules: Sequence[RecommendationRule] | None = None) -> list[Recommendation]:
    """The record's recommendations first, then derived ones whose id the record lacks."""
    out: list[Recommendation] = []
    seen: set[str] = set()
    for rec in r.get("recommendations") or []:
        if not isinstance(rec, dict):
            continue
        rid = str(rec.get("id") or f"recommendation-{len(out) + 1}")
        if rid in seen:
            continue
        seen.add(rid)
        out.append(Recommendation(rid, "record", rec.get("title"), rec.get("detail"), rec.get("measured"),
                                  rec.get("expected_gain")))
    for rule in RECOMMENDATION_RULES if rules is None else rules:
        rec = rule(r)
        if rec is not None and rec.id not in seen and not SAME_ADVICE.get(rec.id, set()) & seen:
            seen.add(rec.id)
            out.append(rec)
    return out

