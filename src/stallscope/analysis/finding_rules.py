"""Findings as the report shows them, with numbers derived per finding code to help troubleshoot."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..record.model import Finding, findings_of
from .costs import dataset_length, memory_facts
from .facts import FindingFacts, FindingView
from .readers import Record, number, workers_of
from .sections import best_configuration

FindingRule = Callable[[Finding, Record], dict[str, Any]]


def project_memory_growth(finding: Finding, r: Record) -> dict[str, float]:
    """MB per 1,000 samples × the epoch's samples, per worker and for the best config's workers."""
    evidence = finding.evidence
    rate = next(
        (number(v) for k, v in evidence.items() if "per_1000" in k and number(v) is not None), None
    )
    length = dataset_length(r)
    if rate is None or length is None:
        return {}
    per_worker = rate * length / 1000.0
    derived = {
        "mb_per_1000": rate,
        "epoch_samples": float(length),
        "epoch_mb_per_worker": per_worker,
    }
    best = best_configuration(r)
    workers = workers_of(best.config) if best else 0
    if workers > 0:
        derived.update(workers=float(workers), epoch_mb_all_workers=per_worker * workers)
    return derived


def relate_shm_to_budget(finding: Finding, r: Record) -> dict[str, float]:
    budget = memory_facts(r)
    if budget is None or budget.shm_free_bytes is None:
        return {}
    row = max(budget.rows, key=lambda x: x.in_flight_bytes)
    return {
        "in_flight_bytes": row.in_flight_bytes,
        "shm_free_bytes": budget.shm_free_bytes,
        "in_flight_batches": float(row.in_flight_batches),
    }


def find_slowest_sample(finding: Finding, r: Record) -> dict[str, float]:
    """The slowest outlier and the median fetch time, from the evidence (seconds)."""
    evidence = finding.evidence
    indices, seconds = evidence.get("indices") or [], evidence.get("seconds") or []
    times = [number(s) for s in seconds]
    if not times or len(times) != len(indices) or None in times:
        return {}
    known = [t for t in times if t is not None]  # every entry, after the check above
    slowest = max(range(len(known)), key=lambda i: known[i])
    derived: dict[str, float] = {
        "slowest_index": float(indices[slowest]) if number(indices[slowest]) is not None else -1.0,
        "slowest_s": known[slowest],
    }
    median = number(evidence.get("median_s"))
    if median:
        derived["median_s"] = median
    return derived if derived["slowest_index"] >= 0 else {}


def count_threads(finding: Finding, r: Record) -> dict[str, float]:
    """Workers × threads per worker against the usable cores."""
    evidence = finding.evidence
    workers, per_worker = (
        number(evidence.get("num_workers")),
        number(evidence.get("threads_per_worker")),
    )
    cores = number(evidence.get("cores")) or number((r.get("host") or {}).get("cores"))
    if not workers or not per_worker or not cores:
        return {}
    return {
        "num_workers": workers,
        "threads_per_worker": per_worker,
        "threads": workers * per_worker,
        "cores": cores,
    }


FINDING_RULES: dict[str, FindingRule] = {
    "memory-growth": project_memory_growth,
    "shm-too-small": relate_shm_to_budget,
    "slow-samples": find_slowest_sample,
    "oversubscription": count_threads,
}

SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}


def finding_facts(r: Record, rules: dict[str, FindingRule] | None = None) -> FindingFacts | None:
    if not isinstance(r.get("findings"), list):
        return None
    rules = FINDING_RULES if rules is None else rules
    views = []
    for f in findings_of(r):
        rule = rules.get(f.code)
        views.append(
            FindingView(
                code=f.code,
                severity=f.severity,
                message=f.message,
                evidence=f.evidence,
                fix=f.fix or None,
                derived=rule(f, r) if rule else {},
            )
        )
    views.sort(key=lambda v: SEVERITY_ORDER.get(v.severity, 3))
    counts = {sev: sum(1 for v in views if v.severity == sev) for sev in SEVERITY_ORDER}
    return FindingFacts(views, counts)
