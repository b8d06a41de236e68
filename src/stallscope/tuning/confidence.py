"""Pure decisions over raced configs: the pick, how sure it is, and whether to keep the user's own.

NOTE [paired rounds]
Finalists race in interleaved rounds (A B … B A): within one round every
config meets the same machine state (other processes, thermal state, page
cache), so the rates of one round belong together. A busy minute slows all of
them alike; it says nothing about which is faster. The bootstrap therefore
resamples *rounds*, never individual rates, and compares configs by the ratio
of their rates within a round. One round gives one ratio per rival, which no
resampling can turn into a confidence: below ``MIN_ROUNDS`` rounds the
confidence is None ("not confirmed"), never a number.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ..config import LoaderConfig
from .space import MIN_GAIN, PLATEAU_TOLERANCE, cost_key
from .trial import Trial

# Confidence is the probability that the pick reaches BAR × every rival's rate.
BAR = 0.97
# Fewer interleaved rounds than this give no confidence at all (NOTE [paired rounds]).
MIN_ROUNDS = 2


@dataclass
class RaceLog:
    """The interleaved rounds: ``rounds[i][config]`` is the config's rate in round ``i``.

    A config measured twice in a round (A B B A) gets the mean of the two; a
    config that dropped out is absent from the later rounds.
    """

    rounds: list[dict[LoaderConfig, float]] = field(default_factory=list)

    def add(self, rates: Mapping[LoaderConfig, Sequence[float]]) -> None:
        self.rounds.append({c: statistics.fmean(v) for c, v in rates.items() if v})

    def __len__(self) -> int:
        return len(self.rounds)

    def configs(self) -> list[LoaderConfig]:
        seen: list[LoaderConfig] = []
        for rates in self.rounds:
            seen.extend(c for c in rates if c not in seen)
        return seen

    def values(self, config: LoaderConfig) -> list[float]:
        return [rates[config] for rates in self.rounds if config in rates]

    def median(self, config: LoaderConfig) -> float | None:
        values = self.values(config)
        return statistics.median(values) if values else None

    def rounds_of(self, config: LoaderConfig) -> int:
        return sum(1 for rates in self.rounds if config in rates)

    def ratios(self, a: LoaderConfig, b: LoaderConfig) -> list[float]:
        """``a``'s rate over ``b``'s, one per round both raced."""
        return [r[a] / r[b] for r in self.rounds if a in r and b in r and r[b] > 0]


@dataclass
class Decision:
    """The pick among raced configs and how sure it is."""

    pick: LoaderConfig
    leader: LoaderConfig
    medians: dict[LoaderConfig, float]
    confidence: float | None  # None: fewer than MIN_ROUNDS rounds raced (not confirmed)
    runner_up: LoaderConfig | None = None
    margin: float | None = None  # pick median / runner-up median
    margin_interval: tuple[float, float] | None = None  # 90% bootstrap interval of the paired ratio


def _median_ratio(log: RaceLog, pick: LoaderConfig, rival: LoaderConfig, rounds: Sequence[int]) -> float | None:
    values = [log.rounds[i][pick] / log.rounds[i][rival] for i in rounds if rival in log.rounds[i] and log.rounds[i][rival] > 0]
    return statistics.median(values) if values else None


def decide(
    log: RaceLog,
    *,
    tolerance: float = PLATEAU_TOLERANCE,
    bar: float = BAR,
    seed: int = 0,
    resamples: int = 1000,
    min_rounds: int = MIN_ROUNDS,
) -> Decision:
    """Pick among raced configs: the leader by median, or a cheaper one within ``tolerance`` of it.

    Confidence is the bootstrap probability, resampling whole rounds (NOTE
    [paired rounds]), that the pick's median rate within a round reaches
    ``bar`` × every rival's. None when the pick raced fewer than ``min_rounds``.
    """
    medians = {c: m for c in log.configs() if (m := log.median(c)) is not None}
    if not medians:
        raise ValueError("decide() needs at least one raced config")
    leader = max(medians, key=lambda c: medians[c])
    top = medians[leader]
    pick = min((c for c in medians if medians[c] >= top * (1 - tolerance)), key=cost_key)
    rivals = [c for c in medians if c != pick]
    mine = [i for i, rates in enumerate(log.rounds) if pick in rates]
    if not rivals:
        return Decision(pick=pick, leader=leader, medians=medians, confidence=1.0 if len(mine) >= min_rounds else None)
    runner_up = max(rivals, key=lambda c: medians[c])
    margin = medians[pick] / medians[runner_up] if medians[runner_up] > 0 else None
    if len(mine) < min_rounds:
        return Decision(pick, leader, medians, None, runner_up=runner_up, margin=margin)
    rng = random.Random(seed)
    overall = {c: _median_ratio(log, pick, c, mine) for c in rivals}
    wins = 0
    margins: list[float] = []
    for _ in range(resamples):
        sample = rng.choices(mine, k=len(mine))
        ratios = {c: _median_ratio(log, pick, c, sample) for c in rivals}
        # A rival absent from every drawn round (it dropped out early) keeps its overall paired ratio.
        ratios = {c: overall[c] if r is None else r for c, r in ratios.items()}
        if all(r is None or r >= bar for r in ratios.values()):
            wins += 1
        if ratios[runner_up] is not None:
            margins.append(ratios[runner_up])
    margins.sort()
    interval = (margins[int(0.05 * len(margins))], margins[int(0.95 * len(margins)) - 1]) if margins else None
    return Decision(pick, leader, medians, wins / resamples, runner_up=runner_up, margin=margin, margin_interval=interval)


def decide_from_scan(
    scan: Mapping[LoaderConfig, Trial], baseline: LoaderConfig, *, tolerance: float = PLATEAU_TOLERANCE
) -> Decision:
    """No round was raced: the scan's single measurements pick, with no confidence (not confirmed)."""
    ok = {c: t for c, t in scan.items() if t.ok}
    if not ok:
        return Decision(pick=baseline, leader=baseline, medians={}, confidence=None)
    leader = max(ok, key=lambda c: ok[c].samples_per_s)
    top = ok[leader].samples_per_s
    pick = min((c for c in ok if ok[c].samples_per_s >= top * (1 - tolerance)), key=cost_key)
    rivals = [t for c, t in ok.items() if c != pick]
    runner = max(rivals, key=lambda t: t.samples_per_s) if rivals else None
    return Decision(
        pick=pick,
        leader=leader,
        medians={c: t.samples_per_s for c, t in ok.items()},
        confidence=None,
        runner_up=runner.config if runner else None,
        margin=ok[pick].samples_per_s / runner.samples_per_s if runner else None,
    )


def clearly_slower(ratios: Sequence[float], *, tolerance: float, seed: int = 0, resamples: int = 400) -> bool:
    """Whether a config is slower than the leader beyond the noise, from its paired per-round ratios
    (its rate / the leader's): the 90% bootstrap upper bound of the median ratio stays below 1 − tolerance."""
    if not ratios:
        return False
    rng = random.Random(seed)
    values = list(ratios)
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(resamples))
    return medians[int(0.95 * len(medians)) - 1] < 1 - tolerance


def keeps_baseline(
    best_rate: float,
    baseline_rate: float,
    *,
    paired: Sequence[float] = (),
    noise: float | None = None,
    min_gain: float = MIN_GAIN,
    seed: int = 0,
    resamples: int = 400,
) -> bool:
    """Whether the best found is within noise of the user's own config, so no change is worth making.

    A change must gain more than the noise: ``min_gain`` or the race's
    measured noise, whichever is larger. Where the two raced ``MIN_ROUNDS``
    rounds or more, the gain must clear that threshold at the lower end of the
    90% bootstrap interval of the paired ratio (``paired``: best / baseline per
    round), not only at its median.
    """
    if baseline_rate <= 0:
        return False
    threshold = max(min_gain, noise or 0.0)
    if best_rate / baseline_rate - 1 < threshold:
        return True
    if len(paired) >= MIN_ROUNDS:
        rng = random.Random(seed)
        values = list(paired)
        medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(resamples))
        return medians[int(0.05 * len(medians))] < 1 + threshold
    return False


def within_pct(best_rate: float, baseline_rate: float) -> float | None:
    """How far the user's config is below the best found, in % of the best (0 when it is the best)."""
    if best_rate <= 0 or baseline_rate <= 0:
        return None
    return max(0.0, (1 - baseline_rate / best_rate) * 100)
