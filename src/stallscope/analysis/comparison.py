"""``compare``: two pipelines raced in paired rounds, judged by the ratio of their rates. Pure
functions.

NOTE [paired comparison]
Two records of the same pipeline taken minutes apart on a shared machine
differ by 10-30% for reasons that have nothing to do with the pipeline. So
``compare`` never sets two absolute figures side by side: it measures A and B
in the same run, in rounds of four windows (A B B A, then B A A B, ...), and
each round gives one ratio B/A of the mean rates of its windows. A linear
drift within a round hits both sides alike and cancels; a busy minute slows
the whole round and leaves its ratio alone.

The rounds' log-ratios are the sample: their mean, with a Student-t interval
(rounds are independent; a log keeps ratios symmetric, 2× and 0.5× the same
distance from 1). The run stops when the interval's half-width is under the
requested precision, or when the budget ends. A verdict and the CI gate read
the interval, never the point estimate: ``--fail-if-slower 10`` fails only
when the *whole* interval lies below 0.90, so an A/A comparison on a noisy
machine widens its interval instead of tripping the gate.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

from .. import stats
from ..thresholds import CONFIDENCE_LEVEL, TIE_MARGIN

# Intervals are stated at stallscope's claim level (thresholds.py).
DEFAULT_LEVEL = CONFIDENCE_LEVEL
# Rounds stop once the interval is this tight (±): the tie margin, since a closer call than the
# tuner's own tie would change no decision.
DEFAULT_PRECISION = TIE_MARGIN

# The figures compared per side; the first is the rate the verdict and the gate read.
METRICS = ("samples_per_s", "batch_ms_p95", "cpu_ms_per_sample", "workers_rss_mb", "worker_uss_mb")

FASTER, SLOWER, WITHIN_NOISE, UNDECIDED = "faster", "slower", "within noise", "undecided"
HIGHER, LOWER = "higher", "lower"


round_value = stats.side_value


def log_ratios(rounds: Sequence[dict[str, Any]], metric: str = "samples_per_s") -> list[float]:
    """Per round, log(B / A) of the metric (:func:`stallscope.stats.paired_log_ratios`)."""
    return stats.paired_log_ratios(rounds, metric)


def ratio_interval(logs: Sequence[float], level: float = DEFAULT_LEVEL) -> dict[str, Any] | None:
    """The ratio B/A from per-round log-ratios (:func:`stallscope.stats.ratio_interval`, the spread
    the rounds' own: no interval below three rounds)."""
    return stats.ratio_interval(logs, level)


def verdict(interval: dict[str, Any] | None, *, rate: bool = True) -> str:
    """B against A: faster / slower (a rate) or higher / lower (another figure) when the whole
    interval lies on one side of 1, within noise when it holds 1, undecided without an interval."""
    if not interval or interval.get("low") is None:
        return UNDECIDED
    if interval["low"] > 1.0:
        return FASTER if rate else HIGHER
    if interval["high"] < 1.0:
        return SLOWER if rate else LOWER
    return WITHIN_NOISE


def gate_fails(interval: dict[str, Any] | None, fail_if_slower_pct: float | None) -> bool:
    """``--fail-if-slower PCT``: B's rate is below (1 - PCT/100) × A's over the whole interval.

    No interval (too few rounds) never fails the gate: a CI job must not fail on a guess.
    """
    if fail_if_slower_pct is None or not interval or interval.get("high") is None:
        return False
    return bool(interval["high"] < 1.0 - fail_if_slower_pct / 100.0)


def side_figures(rounds: Sequence[dict[str, Any]], side: str, metric: str) -> dict[str, Any] | None:
    """One side's metric over all its windows: ``{median, min, max, noise}`` (noise =
    (max-min)/median)."""
    values = [w.get(metric) for r in rounds for w in r.get(side) or []]
    values = [float(v) for v in values if v is not None and math.isfinite(v)]
    if not values:
        return None
    median = statistics.median(values)
    return {
        "median": median,
        "min": min(values),
        "max": max(values),
        "noise": (max(values) - min(values)) / median if median > 0 else None,
        "windows": len(values),
    }


def compare_facts(
    rounds: Sequence[dict[str, Any]],
    *,
    level: float = DEFAULT_LEVEL,
    precision: float = DEFAULT_PRECISION,
    fail_if_slower_pct: float | None = None,
) -> dict[str, Any]:
    """Everything ``compare`` concludes from its rounds: the record keys ``ratio``, ``change``,
    ``verdict``, ``precise``, ``gate`` and ``figures`` (per metric: A's and B's figures and the
    paired ratio B/A)."""
    ratio = ratio_interval(log_ratios(rounds), level)
    figures: dict[str, Any] = {}
    for metric in METRICS:
        a, b = side_figures(rounds, "a", metric), side_figures(rounds, "b", metric)
        if a is None and b is None:
            continue
        interval = ratio_interval(log_ratios(rounds, metric), level)
        figures[metric] = {
            "a": a,
            "b": b,
            "ratio": interval,
            "verdict": verdict(interval, rate=metric == "samples_per_s"),
        }
    failed = gate_fails(ratio, fail_if_slower_pct)
    return {
        "ratio": ratio,
        "change": _change(ratio),
        "verdict": verdict(ratio),
        "precise": bool(
            ratio and ratio["half_width"] is not None and ratio["half_width"] < precision
        ),
        "gate": None
        if fail_if_slower_pct is None
        else {
            "fail_if_slower_pct": fail_if_slower_pct,
            "threshold_ratio": 1.0 - fail_if_slower_pct / 100.0,
            "failed": failed,
        },
        "figures": figures,
    }


def _change(ratio: dict[str, Any] | None) -> dict[str, Any] | None:
    """B against A as a signed fraction (-0.17: B is 17% slower), the interval's ends likewise."""
    if not ratio:
        return None
    return {
        "estimate": ratio["estimate"] - 1.0,
        "low": None if ratio["low"] is None else ratio["low"] - 1.0,
        "high": None if ratio["high"] is None else ratio["high"] - 1.0,
    }


def stage_differences(
    a_stages: Sequence[dict[str, Any]], b_stages: Sequence[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The stage tables side by side: per stage name, ms per sample on A and B and B - A, largest
    change first."""
    a = {s["name"]: s.get("ms_per_sample") for s in a_stages if s.get("name")}
    b = {s["name"]: s.get("ms_per_sample") for s in b_stages if s.get("name")}
    rows = []
    for name in list(a) + [n for n in b if n not in a]:
        ms_a, ms_b = a.get(name), b.get(name)
        delta = (ms_b or 0.0) - (ms_a or 0.0) if ms_a is not None or ms_b is not None else None
        rows.append(
            {
                "name": name,
                "a_ms_per_sample": ms_a,
                "b_ms_per_sample": ms_b,
                "delta_ms_per_sample": delta,
            }
        )
    return sorted(rows, key=lambda r: -abs(r["delta_ms_per_sample"] or 0.0))
