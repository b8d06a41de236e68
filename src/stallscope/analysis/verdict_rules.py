"""The executive verdict: small named rules, first match wins."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Optional, Protocol

from .attach import attach_facts
from .facts import TARGETS, Verdict
from .finding_rules import finding_facts
from .readers import Record
from .sections import bench_facts, best_configuration, stage_facts, training_facts

VerdictRule = Callable[[Record], Optional[Verdict]]


class _Rated(Protocol):
    """A config as measured: ConfigRate, BestConfig or BenchRow."""

    @property
    def label(self) -> str: ...

    @property
    def samples_per_s(self) -> float | None: ...


def _rates(best: _Rated, baseline: _Rated | None = None) -> dict[str, Any]:
    """A verdict's evidence of the config it names and its rate, then the user's loader and its
    rate where there is one."""
    rates: dict[str, Any] = {"best": best.label, "samples_per_s": best.samples_per_s}
    if baseline is not None:
        rates.update(baseline=baseline.label, baseline_samples_per_s=baseline.samples_per_s)
    return rates


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
                **_rates(best.best_found, best.baseline),
            },
        )
    good, _ = TARGETS["tuning_headroom"]
    label = "loader-limited" if best.speedup >= good else "near-optimal"
    return Verdict(label, {**_rates(best, best.baseline), "speedup": best.speedup})


def verdict_from_sweep(r: Record) -> Verdict | None:
    bench = bench_facts(r)
    if bench is None or bench.best is None:
        return None
    return Verdict("measured", {**_rates(bench.best), "configurations": bench.measured})


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
