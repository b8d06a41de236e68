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

from ..thresholds import CONFIDENCE_LEVEL, TIE_MARGIN

# Two-sided Student-t quantiles by degrees of freedom, for the levels offered (scipy is not a
# dependency).
_T_QUANTILES = {
    0.95: [
        12.706,
        4.303,
        3.182,
        2.776,
        2.571,
        2.447,
        2.365,
        2.306,
        2.262,
        2.228,
        2.201,
        2.179,
        2.160,
        2.145,
        2.131,
        2.120,
        2.110,
        2.101,
        2.093,
        2.086,
        2.080,
        2.074,
        2.069,
        2.064,
        2.060,
        2.056,
        2.052,
        2.048,
        2.045,
        2.042,
    ],
    0.90: [
        6.314,
        2.920,
        2.353,
        2.132,
        2.015,
        1.943,
        1.895,
        1.860,
        1.833,
        1.812,
        1.796,
        1.782,
        1.771,
        1.761,
        1.753,
        1.746,
        1.740,
        1.734,
        1.729,
        1.725,
        1.721,
        1.717,
        1.714,
        1.711,
        1.708,
        1.706,
        1.703,
        1.701,
        1.699,
        1.697,
    ],
    0.99: [
        63.657,
        9.925,
        5.841,
        4.604,
        4.032,
        3.707,
        3.499,
        3.355,
        3.250,
        3.169,
        3.106,
        3.055,
        3.012,
        2.977,
        2.947,
        2.921,
        2.898,
        2.878,
        2.861,
        2.845,
        2.831,
        2.819,
        2.807,
        2.797,
        2.787,
        2.779,
        2.771,
        2.763,
        2.756,
        2.750,
    ],
}
_T_LIMIT = {0.95: 1.960, 0.90: 1.645, 0.99: 2.576}
LEVELS = tuple(_T_QUANTILES)

# Fewer rounds than this give no interval (one round is one ratio; two give a t of 12.7).
MIN_ROUNDS = 3
# Intervals are stated at stallscope's claim level (thresholds.py).
DEFAULT_LEVEL = CONFIDENCE_LEVEL
# Rounds stop once the interval is this tight (±): the tie margin, since a closer call than the
# tuner's own tie would change no decision.
DEFAULT_PRECISION = TIE_MARGIN

# The figures compared per side; the first is the rate the verdict and the gate read.
METRICS = ("samples_per_s", "batch_ms_p95", "cpu_ms_per_sample", "workers_rss_mb", "worker_uss_mb")

FASTER, SLOWER, WITHIN_NOISE, UNDECIDED = "faster", "slower", "within noise", "undecided"
HIGHER, LOWER = "higher", "lower"


def t_quantile(df: int, level: float = DEFAULT_LEVEL) -> float:
    """The two-sided Student-t quantile for ``df`` degrees of freedom at ``level`` (0.90, 0.95 or
    0.99)."""
    if level not in _T_QUANTILES:
        raise ValueError(f"level must be one of {', '.join(str(v) for v in LEVELS)}, not {level}")
    if df < 1:
        return math.inf
    table = _T_QUANTILES[level]
    return table[df - 1] if df <= len(table) else _T_LIMIT[level]


def round_value(windows: Sequence[dict[str, Any]], metric: str) -> float | None:
    """One side's figure in one round: the mean over its windows (None where a window lacks it)."""
    values = [w.get(metric) for w in windows]
    if not values or any(v is None or not math.isfinite(v) for v in values):
        return None
    return statistics.fmean([v for v in values if v is not None])  # none is None, checked above


def log_ratios(rounds: Sequence[dict[str, Any]], metric: str = "samples_per_s") -> list[float]:
    """Per round, log(B / A) of the metric; rounds where either side is missing or not positive are
    skipped."""
    out = []
    for r in rounds:
        a, b = round_value(r.get("a") or [], metric), round_value(r.get("b") or [], metric)
        if a is not None and b is not None and a > 0 and b > 0:
            out.append(math.log(b / a))
    return out


def ratio_interval(logs: Sequence[float], level: float = DEFAULT_LEVEL) -> dict[str, Any] | None:
    """The ratio B/A from per-round log-ratios: ``{median, estimate, low, high, level, rounds,
    half_width}``.

    ``median`` is the median round's ratio; ``estimate`` (the geometric mean of the rounds' ratios)
    is the centre of the t interval ``[low, high]``; ``half_width`` is the interval's relative
    half-width (``sqrt(high / low) - 1``). Below :data:`MIN_ROUNDS` rounds low, high and half_width
    are None.
    """
    n = len(logs)
    if n == 0:
        return None
    mean = statistics.fmean(logs)
    result: dict[str, Any] = {
        "median": math.exp(statistics.median(logs)),
        "estimate": math.exp(mean),
        "low": None,
        "high": None,
        "level": level,
        "rounds": n,
        "half_width": None,
    }
    if n >= MIN_ROUNDS:
        sd = statistics.stdev(logs)
        half = t_quantile(n - 1, level) * sd / math.sqrt(n)
        result.update(
            low=math.exp(mean - half), high=math.exp(mean + half), half_width=math.exp(half) - 1.0
        )
    return result


def precise_enough(logs: Sequence[float], precision: float, level: float = DEFAULT_LEVEL) -> bool:
    """Whether the rounds so far pin the ratio down to ±``precision`` (the stopping rule)."""
    interval = ratio_interval(logs, level)
    return bool(
        interval and interval["half_width"] is not None and interval["half_width"] < precision
    )


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
