"""The memory-growth rule, shared by ``check`` (memory-growth) and ``watch``/``profile`` (memory
drift). Pure functions.

One rule for both: a memory channel (MB readings against samples) grows when
it gained at least a channel's minimum in all and at least
``GROWTH_MIN_MB_PER_1000`` per 1,000 samples; it has plateaued when, past one
pass over the data, the last third of its readings grows at under
``PLATEAU_RATE_SHARE`` of the first third's rate and by less than half the
minimum. ``check`` feeds it a probe worker's readings per sample
(``stallscope.checks.memory_rules``); the watch feeds it one reading per time
window of a training run (``stallscope.analysis.drift``). It sits beside ``thresholds`` at the
package root, below both, so the check's rule and the drift analysis read one definition.
"""

from __future__ import annotations

from typing import Any

from .stats import linear_fit

# A channel counts when it grew by this much per process.
# The Python heap: tracemalloc is exact, so no allocator noise to allow for.
HEAP_MIN_MB = 8.0
# Native memory: clean pipelines grow too, from allocator arenas (Pillow, glibc) and pages a fork
# child touches first; the demo grew 13–35 MB per probe worker over three passes, and in one
# process stays flat.
NATIVE_MIN_MB = 32.0
# ...and at least this much per 1,000 samples: slower growth is an arena settling, not a leak a
# training run of millions of samples would notice.
GROWTH_MIN_MB_PER_1000 = 0.5
# A rate fitted over fewer readings than this says nothing about where the growth goes.
GROWTH_MIN_POINTS = 5
# A channel has plateaued when its last third of readings grows at less than this share of
# its first third's rate, and by less than half the channel's minimum in all.
PLATEAU_RATE_SHARE = 1 / 3
# The plateau starts at the first point within this share of the total growth of its final level.
PLATEAU_LEVEL_SHARE = 0.1
# A plateau is judged only past this many passes over the data: a cache filling on the first pass
# levels off after it, so half a pass more is the least that shows it.
PLATEAU_AFTER_PASSES = 1.5


def channel_growth(
    xs: list[float], ys: list[float], pass_samples: float | None, minimum_mb: float
) -> dict[str, Any]:
    """How one memory channel (MB) grows with samples: rate, total, first-pass growth, plateau.

    ``pass_samples`` is one pass over the data, in the same samples as ``xs``.
    A plateau can only be judged past one pass: the last third of the
    readings must grow at under ``PLATEAU_RATE_SHARE`` of the first third's
    rate, and by less than half the channel's minimum. (A worker sees a
    random part of each pass, so a per-worker cache can go on filling into
    the second pass; a leak grows at the same rate throughout.)
    """
    slope, _, r2 = linear_fit(xs, ys)
    grew = ys[-1] - ys[0]
    first = [y for x, y in zip(xs, ys) if pass_samples and x <= pass_samples]
    result: dict[str, Any] = {
        "mb_per_1000": slope * 1000,
        "r2": r2,
        "grew_mb": grew,
        "first_pass_mb": first[-1] - ys[0] if first else None,
        "after_plateau_mb_per_1000": None,
        "plateaued_after": None,
    }
    end = xs[-1]
    if not pass_samples or end < PLATEAU_AFTER_PASSES * pass_samples:
        return result
    head = [(x, y) for x, y in zip(xs, ys) if x <= end / 3]
    tail = [(x, y) for x, y in zip(xs, ys) if x >= 2 * end / 3]
    if len(head) < 2 or len(tail) < GROWTH_MIN_POINTS:
        return result
    head_rate = (head[-1][1] - ys[0]) / max(1e-9, head[-1][0] - xs[0])
    tail_rate = linear_fit([x for x, _ in tail], [y for _, y in tail])[0]
    flat = (
        tail_rate <= PLATEAU_RATE_SHARE * max(head_rate, 0.0)
        and tail[-1][1] - tail[0][1] < minimum_mb / 2
    )
    if flat and grew >= minimum_mb:
        level = sum(y for _, y in tail) / len(tail)
        tolerance = PLATEAU_LEVEL_SHARE * (level - ys[0])
        result.update(
            first_pass_mb=level - ys[0],
            after_plateau_mb_per_1000=tail_rate * 1000,
            plateaued_after=next(x for x, y in zip(xs, ys) if y >= level - tolerance),
        )
    return result


def grows(channel: dict[str, Any], minimum_mb: float) -> bool:
    """Whether a :func:`channel_growth` result counts as growth (before asking whether it
    plateaued)."""
    return bool(
        channel["grew_mb"] >= minimum_mb and channel["mb_per_1000"] >= GROWTH_MIN_MB_PER_1000
    )
