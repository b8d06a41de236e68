"""The executive verdict: small named rules, first match wins."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Optional

from .attach import attach_facts
from .facts import TARGETS, Verdict
from .finding_rules import finding_facts
from .readers import Record
from .sections import bench_facts, best_configuration, stage_facts, training_facts

VerdictRule = Callable[[Record], Optional[Verdict]]


def verdict_from_errors(r: Record) -> Verdict | None:
    facts = finding_facts(r)
    errors = [f.code for f in facts.findings if f.severity == "error"] if facts else []
    if not errors:
        return None
    return Verdict("unsafe", {"errors": len(errors), "codes": sorted(set(errors))})


def verdict_from_training(r: Record) -> Verdict | None:
    training = training_facts(r)
    if training is None or training.verdict is None:
        return None
    return Verdict(
        training.verdict,
        {
            "stall_fraction": training.stall_fraction,
            "steps": training.steps,
            "what_if_speedup": training.what_if_speedup,
        },
    )


def verdict_from_attach(r: Record) -> Verdict | None:
    facts = attach_facts(r)
    if facts is None or facts.verdict is None or facts.data_wait_fraction is None:
        return None
    waited = facts.data_wait_fraction
    return Verdict(
        facts.verdict,
        {
            "stall_fraction": waited,
            "steps": None,
            "what_if_speedup": 1.0 / (1.0 - waited) if waited < 1.0 else None,
        },
    )


def verdict_from_headroom(r: Record) -> Verdict | None:
    best = best_configuration(r)
    if best is None or best.baseline is None or best.speedup is None:
        return None
    if best.keep_baseline and best.best_found is not None:
        # "Keep yours": the user's loader is within the noise of the best found.
        return Verdict(
            "near-optimal",
            {
                "keep_baseline": True,
                "within_pct": best.within_pct,
                "best": best.best_found.label,
                "samples_per_s": best.best_found.samples_per_s,
                "baseline": best.baseline.label,
                "baseline_samples_per_s": best.baseline.samples_per_s,
            },
        )
    good, _ = TARGETS["tuning_headroom"]
    label = "loader-limited" if best.speedup >= good else "near-optimal"
    return Verdict(
        label,
        {
            "best": best.label,
            "samples_per_s": best.samples_per_s,
            "baseline": best.baseline.label,
            "baseline_samples_per_s": best.baseline.samples_per_s,
            "speedup": best.speedup,
        },
    )


def verdict_from_sweep(r: Record) -> Verdict | None:
    bench = bench_facts(r)
    if bench is None or bench.best is None:
        return None
    return Verdict(
        "measured",
        {
            "best": bench.best.label,
            "samples_per_s": bench.best.samples_per_s,
            "configurations": bench.measured,
        },
    )


def verdict_from_stages(r: Record) -> Verdict | None:
    stages = stage_facts(r)
    if stages is None or stages.top is None:
        return None
    return Verdict(
        "stage-bound",
        {
            "stage": stages.top.name,
            "ms_per_sample": stages.top.ms_per_sample,
            "share": stages.top.share,
        },
    )


def verdict_from_clean_checks(r: Record) -> Verdict | None:
    facts = finding_facts(r)
    if facts is None:
        return None
    return Verdict(
        "no errors", {"warnings": facts.counts["warning"], "infos": facts.counts["info"]}
    )


VERDICT_RULES: list[VerdictRule] = [
    verdict_from_errors,
    verdict_from_training,
    verdict_from_attach,
    verdict_from_headroom,
    verdict_from_sweep,
    verdict_from_stages,
    verdict_from_clean_checks,
]


def verdict(r: Record, rules: Sequence[VerdictRule] | None = None) -> Verdict | None:
    for rule in VERDICT_RULES if rules is None else rules:
        found = rule(r)
        if found is not None:
            return found
    return None
