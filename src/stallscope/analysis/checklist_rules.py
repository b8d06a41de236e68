"""The checklist: one small named rule per row, each comparing a measured value with its named
target."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Optional

from .costs import epoch_estimate, memory_facts
from .facts import CheckRow, Target, target
from .finding_rules import finding_facts
from .readers import Record, workers_of
from .sections import best_configuration, stage_facts, training_facts

ChecklistRule = Callable[[Record], Optional[CheckRow]]


def check_data_wait(r: Record) -> CheckRow | None:
    # The pass boundary is the input-bound threshold, so the row agrees with the verdict.
    goal = target("data_wait_fraction")
    return _training_check(r, "Data wait share of step time", "stall_fraction", "fraction", goal)


def check_gpu_utilisation(r: Record) -> CheckRow | None:
    goal = target("gpu_util_percent", higher_is_better=True)
    return _training_check(r, "GPU utilisation", "gpu_util", "percent", goal)


def _training_check(
    r: Record, name: str, measured: str, unit: str, goal: Target
) -> CheckRow | None:
    """The training loop's ``measured`` (a TrainingFacts field) against ``goal``."""
    training = training_facts(r)
    value = getattr(training, measured) if training is not None else None
    if value is None:
        return None
    return CheckRow(name, value, unit, goal)


def check_augmentation_overhead(r: Record) -> CheckRow | None:
    stages = stage_facts(r)
    if stages is None or stages.augmentation is None or stages.augmentation.percent is None:
        return None
    return CheckRow(
        "Random-augmentation overhead",
        stages.augmentation.percent,
        "percent",
        target("augmentation_percent"),
    )


def check_batch_time_consistency(r: Record) -> CheckRow | None:
    best = best_configuration(r)
    latency = best.result.batch_ms if best and best.result else None
    p50, p95 = (latency.p50, latency.p95) if latency else (None, None)
    if best is None or not p50 or p95 is None:
        return None
    return CheckRow(
        "Batch-time consistency (p95/p50)",
        p95 / p50,
        "ratio",
        target("batch_time_ratio"),
        best.label,
    )


def check_parallel_efficiency(r: Record) -> CheckRow | None:
    best = best_configuration(r)
    eff = best.result.efficiency if best and best.result else None
    if best is None or eff is None or workers_of(best.config) == 0:
        return None
    return CheckRow(
        "Parallel efficiency",
        eff,
        "fraction",
        target("parallel_efficiency", higher_is_better=True),
        best.label,
    )


def check_measurement_noise(r: Record) -> CheckRow | None:
    best = best_configuration(r)
    noise = best.result.noise if best and best.result else None
    if best is None or noise is None:
        return None
    return CheckRow(
        "Measurement noise (max−min)/median",
        noise,
        "fraction",
        target("measurement_noise"),
        best.label,
    )


def check_tuning_headroom(r: Record) -> CheckRow | None:
    best = best_configuration(r)
    if best is None or best.speedup is None or best.baseline is None:
        return None
    return CheckRow(
        "Headroom over the baseline (best ÷ baseline)",
        best.speedup,
        "ratio",
        target("tuning_headroom"),
        best.baseline.label,
    )


def check_shm_headroom(r: Record) -> CheckRow | None:
    return _memory_check(r, "In-flight batches / free /dev/shm", "shm_fraction")


def check_ram_budget(r: Record) -> CheckRow | None:
    return _memory_check(r, "Workers + in-flight batches / available RAM", "ram_fraction")


def _memory_check(r: Record, name: str, fraction: str) -> CheckRow | None:
    """The first memory row's ``fraction`` (a MemoryRow field, also the target's key)."""
    budget = memory_facts(r)
    row = budget.rows[0] if budget else None
    value = getattr(row, fraction) if row is not None else None
    if row is None or value is None:
        return None
    return CheckRow(name, value, "fraction", target(fraction), row.label)


def check_startup_share(r: Record) -> CheckRow | None:
    epoch = epoch_estimate(r)
    row = epoch.rows[0] if epoch else None
    if row is None or row.startup_s is None or row.persistent or row.seconds <= 0:
        return None
    return CheckRow(
        "Worker start-up / epoch time",
        row.startup_s / row.seconds,
        "fraction",
        target("startup_fraction"),
        row.label,
    )


def check_error_findings(r: Record) -> CheckRow | None:
    facts = finding_facts(r)
    if facts is None:
        return None
    return CheckRow(
        "Error findings", facts.counts.get("error", 0), "count", target("error_findings")
    )


CHECKLIST_RULES: list[ChecklistRule] = [
    check_data_wait,
    check_gpu_utilisation,
    check_augmentation_overhead,
    check_batch_time_consistency,
    check_parallel_efficiency,
    check_measurement_noise,
    check_tuning_headroom,
    check_shm_headroom,
    check_ram_budget,
    check_startup_share,
    check_error_findings,
]


def checklist(r: Record, rules: Sequence[ChecklistRule] | None = None) -> list[CheckRow]:
    rows = (rule(r) for rule in (CHECKLIST_RULES if rules is None else rules))
    return [row for row in rows if row is not None]
