"""The statistics every layer shares: quantiles, Student's t, and intervals over paired rounds.

Pure functions over numbers (no NumPy, no torch), importable by probes and analysis alike: this
module imports nothing from stallscope. One definition of each, so a quantile, an interval or
the rounds an interval needs mean the same in ``tune``, ``compare``, the code-change race and the
report that judges their records again.

Paired rounds (NOTE [paired rounds] in tuning/confidence.py, NOTE [paired comparison] in
analysis/comparison.py): two configs measured in the same interleaved round give one ratio of
their rates; the rounds' log-ratios are the sample. Their mean with a Student-t interval states
the ratio (a log keeps 2× and 0.5× the same distance from 1). One round is one ratio and no
spread, so below :data:`MIN_ROUNDS` rounds there is no interval, and no confidence (SPEC §5).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

# Fewer paired rounds than this give no interval and no confidence: one round is one ratio, whose
# spread nothing estimates (SPEC §5: ``confidence`` is null below two rounds).
MIN_ROUNDS = 2


def rounds_needed(floor: float) -> int:
    """The rounds an interval needs: :data:`MIN_ROUNDS` where the spread has a floor; one more where
    the spread is the rounds' own alone (``compare``: a floor would bound the precision it may ask
    for), since two rounds that agree by chance would state a zero-width interval."""
    return MIN_ROUNDS if floor > 0 else MIN_ROUNDS + 1


# -- quantiles ------------------------------------------------------------------------------------


def quantile(
    values: Sequence[float], q: float, *, ordered: bool = False, lower: bool = False
) -> float | None:
    """The ``q`` quantile (0 ≤ q ≤ 1) of ``values``, linearly interpolated between the two nearest
    ranks (NumPy's default, R's type 7); None for no values. ``ordered``: ``values`` is sorted
    already. ``lower``: the lower of the two ranks instead (NumPy's ``method="lower"``), always a
    value that was observed: a cap on outliers, which interpolation would lift towards the very
    outlier it caps when there are few values."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"a quantile needs 0 <= q <= 1, not {q}")
    if not values:
        return None
    s = values if ordered else sorted(values)
    position = (len(s) - 1) * q
    low = math.floor(position)
    if lower:
        return float(s[low])
    high = min(low + 1, len(s) - 1)
    return float(s[low] + (s[high] - s[low]) * (position - low))


# -- Student's t, for integer degrees of freedom (no SciPy dependency) -----------------------------


def t_cdf(t: float, df: int) -> float:
    """P(T ≤ t) for Student's t with ``df`` ≥ 1 degrees of freedom (Abramowitz & Stegun
    26.7.3–4)."""
    if df < 1:
        raise ValueError("t_cdf needs at least 1 degree of freedom")
    if math.isinf(t):
        return 1.0 if t > 0 else 0.0
    theta = math.atan(abs(t) / math.sqrt(df))
    c2 = math.cos(theta) ** 2
    if df % 2 == 1:
        series, term = 0.0, 1.0
        if df > 1:
            series = 1.0
            for k in range(3, df, 2):  # (2·4···(k−1)) / (1·3···k) cos^(k−1)
                term *= (k - 1) / k * c2
                series += term
        a = 2 / math.pi * (theta + math.sin(theta) * math.cos(theta) * series)
    else:
        series, term = 1.0, 1.0
        for k in range(2, df, 2):  # (1·3···(k−1)) / (2·4···k) cos^k
            term *= (k - 1) / k * c2
            series += term
        a = math.sin(theta) * series
    a = min(1.0, max(0.0, a))
    return 0.5 + a / 2 if t >= 0 else 0.5 - a / 2


def t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile of Student's t with ``df`` ≥ 1 degrees of freedom (bisection on
    :func:`t_cdf`, to 1e-9)."""
    if not 0.0 < p < 1.0:
        raise ValueError("t_quantile needs 0 < p < 1")
    lo, hi = -1e6, 1e6
    for _ in range(200):
        mid = (lo + hi) / 2
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-9:
            break
    return (lo + hi) / 2


def two_sided_t(df: int, level: float) -> float:
    """The multiplier of a two-sided ``level`` t-interval with ``df`` degrees of freedom (infinite
    without one)."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"an interval's level is between 0 and 1, not {level}")
    return math.inf if df < 1 else t_quantile(0.5 + level / 2, df)


# -- paired rounds --------------------------------------------------------------------------------


def spread(logs: Sequence[float], floor: float = 0.0) -> float:
    """The per-round standard deviation of ``logs``, never below ``floor`` (0 for one value)."""
    own = statistics.stdev(logs) if len(logs) >= 2 else 0.0
    return max(own, floor)


def ratio_interval(
    logs: Sequence[float], level: float, *, floor: float = 0.0
) -> dict[str, Any] | None:
    """The ratio a / b from paired per-round log-ratios log(a / b): ``{median, estimate, low, high,
    level, rounds, half_width}``; None without a round.

    ``median`` is the median round's ratio; ``estimate`` (the geometric mean of the rounds'
    ratios) is the centre of the two-sided ``level`` t-interval ``[low, high]``, whose spread is
    the rounds' own, never below ``floor``; ``half_width`` is its relative half-width
    (``sqrt(high / low) - 1``). Below :func:`rounds_needed` rounds low, high and half_width are
    None.
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
    if n >= rounds_needed(floor):
        half = two_sided_t(n - 1, level) * spread(logs, floor) / math.sqrt(n)
        result.update(
            low=math.exp(mean - half), high=math.exp(mean + half), half_width=math.exp(half) - 1.0
        )
    return result


def precise_enough(logs: Sequence[float], precision: float, level: float) -> bool:
    """Whether the rounds so far pin the ratio down to ±``precision`` at ``level`` (a stopping
    rule; the spread is the rounds' own)."""
    interval = ratio_interval(logs, level)
    return bool(
        interval and interval["half_width"] is not None and interval["half_width"] < precision
    )


def side_value(windows: Sequence[dict[str, Any]], metric: str) -> float | None:
    """One side's figure in one round: the mean over its windows (None where a window lacks it or
    it is not finite)."""
    values = [w.get(metric) for w in windows]
    if not values or any(v is None or not math.isfinite(v) for v in values):
        return None
    return statistics.fmean([v for v in values if v is not None])


def paired_log_ratios(
    rounds: Sequence[dict[str, Any]], metric: str, a: str = "a", b: str = "b"
) -> list[float]:
    """Per round (``{a: [window, ...], b: [window, ...]}``), log(B / A) of the sides' mean
    ``metric``; rounds where either side is missing or not positive are skipped."""
    out = []
    for r in rounds:
        va, vb = side_value(r.get(a) or [], metric), side_value(r.get(b) or [], metric)
        if va is not None and vb is not None and va > 0 and vb > 0:
            out.append(math.log(vb / va))
    return out


def ratio_bounds(
    logs: Sequence[float], level: float, *, floor: float = 0.0
) -> tuple[float, float] | None:
    """``(low, high)`` of :func:`ratio_interval`; None below :data:`MIN_ROUNDS` rounds."""
    interval = ratio_interval(logs, level, floor=floor)
    if interval is None or interval["low"] is None:
        return None
    return interval["low"], interval["high"]


def upper_bound(logs: Sequence[float], level: float, *, floor: float = 0.0) -> float | None:
    """The one-sided ``level`` t upper bound of the mean of ``logs``; None below
    :data:`MIN_ROUNDS` values."""
    n = len(logs)
    if n < MIN_ROUNDS:
        return None
    return statistics.fmean(logs) + t_quantile(level, n - 1) * spread(logs, floor) / math.sqrt(n)


# -- trends ---------------------------------------------------------------------------------------


def linear_fit(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float, float]:
    """Least-squares ``(slope, intercept, r²)`` of ``ys`` over ``xs`` (r² is 0 for flat ``ys``)."""
    n = len(xs)
    mx = sum(xs) / n
    my = sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    slope = sxy / sxx if sxx > 0 else 0.0
    intercept = my - slope * mx
    ss_tot = sum((y - my) ** 2 for y in ys)
    ss_res = sum((y - (intercept + slope * x)) ** 2 for x, y in zip(xs, ys))
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else 0.0
    return slope, intercept, r2


# -- figures for records --------------------------------------------------------------------------


def round_or_none(value: float | None, digits: int | None = None) -> float | None:
    """``value`` rounded as :func:`round` rounds it (to a whole number without ``digits``), or None
    where it was not measured."""
    return None if value is None else round(value, digits)


# The golden ratio's fraction: successive multiples fill [0, 1) evenly, however many are taken.
_SPREAD = 0.6180339887498949


def spread_point(k: int) -> float:
    """The ``k``-th of a sequence of points in [0, 1) that stays evenly spread at any length (0
    first): where the ``k``-th repeat opens its window in the epoch (NOTE [window position] in
    ``throughput/measure.py``)."""
    return (k * _SPREAD) % 1.0


def per_epoch_rate(samples: float, restart_s: float, steady: float) -> float:
    """Samples per second over whole epochs of ``samples``, each paying ``restart_s`` to start and
    then delivering at the steady rate ``steady`` (NOTE [per-epoch rate]); 0 without a rate."""
    if steady <= 0:
        return 0.0
    return samples / (restart_s + samples / steady)


def restart_from_startup(startup_s: float, batch_samples: float, steady: float) -> float:
    """An epoch start's cost read from a config's time to its first batch: that wait less the
    first batch's own time at the steady rate (NOTE [per-epoch rate]); the tuner's race and the
    sweep's analysis take it the same way where no epoch start of the config was seen."""
    return max(0.0, startup_s - (batch_samples / steady if steady > 0 else 0.0))
