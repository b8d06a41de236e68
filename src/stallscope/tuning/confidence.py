"""Pure decisions over raced configs: the pick, and how sure it is (NOTE [tuning strategy], phase 5)."""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from ..config import LoaderConfig
from .space import PLATEAU_TOLERANCE, cost_key
from .trial import Trial

# Confidence is the probability that the pick reaches BAR × every rival's rate.
BAR = 0.97


@dataclass
class Decision:
    """The pick among raced configs and how sure it is."""

    pick: LoaderConfig
    leader: LoaderConfig
    medians: dict[LoaderConfig, float]
    confidence: float
    runner_up: LoaderConfig | None = None
    margin: float | None = None  # pick median / runner-up median
    margin_interval: tuple[float, float] | None = None  # 90% bootstrap interval of the margin


def _bootstrap_medians(values: Sequence[float], rng: random.Random, n: int) -> list[float]:
    k = len(values)
    return [statistics.median(rng.choices(values, k=k)) for _ in range(n)]


def decide(
    samples: dict[LoaderConfig, list[float]],
    *,
    tolerance: float = PLATEAU_TOLERANCE,
    bar: float = BAR,
    seed: int = 0,
    resamples: int = 1000,
) -> Decision:
    """Pick among raced configs: the leader, or a cheaper one within ``tolerance`` of it.

    Confidence is the bootstrap probability (resampling each config's repeats)
    that the pick's median reaches ``bar`` × every rival's median.
    """
    medians = {c: statistics.median(v) for c, v in samples.items() if v}
    if not medians:
        raise ValueError("decide() needs at least one config with samples")
    leader = max(medians, key=lambda c: medians[c])
    top = medians[leader]
    eligible = [c for c in medians if medians[c] >= top * (1 - tolerance)]
    pick = min(eligible, key=cost_key)
    rivals = [c for c in medians if c != pick]
    rng = random.Random(seed)
    if not rivals:
        return Decision(pick=pick, leader=leader, medians=medians, confidence=1.0)
    boot = {c: _bootstrap_medians(samples[c], rng, resamples) for c in [pick, *rivals]}
    wins = sum(
        1 for i in range(resamples) if all(boot[pick][i] >= bar * boot[c][i] for c in rivals)
    )
    runner_up = max(rivals, key=lambda c: medians[c])
    ratios = sorted(boot[pick][i] / boot[runner_up][i] for i in range(resamples) if boot[runner_up][i] > 0)
    interval = (ratios[int(0.05 * len(ratios))], ratios[int(0.95 * len(ratios)) - 1]) if ratios else None
    return Decision(
        pick=pick,
        leader=leader,
        medians=medians,
        confidence=wins / resamples,
        runner_up=runner_up,
        margin=medians[pick] / medians[runner_up] if medians[runner_up] > 0 else None,
        margin_interval=interval,
    )


def clearly_slower(
    candidate: Sequence[float], leader: Sequence[float], *, tolerance: float, seed: int = 0, resamples: int = 400
) -> bool:
    """Whether ``candidate`` is slower than ``leader`` beyond the noise (90% bootstrap upper bound)."""
    rng = random.Random(seed)
    a = _bootstrap_medians(list(candidate), rng, resamples)
    b = _bootstrap_medians(list(leader), rng, resamples)
    ratios = sorted(x / y for x, y in zip(a, b) if y > 0)
    if not ratios:
        return False
    upper = ratios[int(0.95 * len(ratios)) - 1]
    return upper < 1 - tolerance


def single_measurement_confidence(pick: Trial, rivals: Sequence[Trial], *, bar: float = BAR, noise_floor: float = 0.03) -> float:
    """Confidence from single measurements (no race): a normal approximation on log rates."""
    if not rivals:
        return 1.0
    prob = 1.0
    for rival in rivals:
        if not rival.ok:
            continue
        sd = math.sqrt((pick.rel_se or noise_floor) ** 2 + (rival.rel_se or noise_floor) ** 2 + noise_floor**2)
        z = (math.log(pick.samples_per_s / rival.samples_per_s) - math.log(bar)) / sd
        prob = min(prob, 0.5 * (1 + math.erf(z / math.sqrt(2))))
    return prob
