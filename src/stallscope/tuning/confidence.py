"""Pure decisions over raced configs: the pick, how sure it is, and whether to keep the user's own.

NOTE [paired rounds]
Finalists race in interleaved rounds (A B … B A): within one round every
config meets the same machine state (other processes, thermal state, page
cache), so the rates of one round belong together. A busy minute slows all of
them alike; it says nothing about which is faster. Configs are therefore
compared by the ratio of their rates within a round, never by rates pooled
across rounds. One round gives one ratio per rival, which no statistic can turn
into a confidence: below ``MIN_ROUNDS`` rounds the confidence is None ("not
confirmed"), never a number.

NOTE [what the confidence states]
The confidence is the probability that the pick is at least as fast as every
other raced config within the tie margin ``MARGIN`` (3%, the noise floor the
search uses for a gain, ``space.MIN_GAIN``): that pick ≥ (1 − MARGIN) × rival
for each rival. Per rival it comes from the paired per-round log-ratios
log(pick / rival): a one-sided Student-t probability that their mean is at
least log(1 − MARGIN), with the spread estimated from the rounds but never
below ``NOISE_FLOOR`` (two or three rounds can agree by chance). The rivals are
combined by the Bonferroni bound 1 − Σ(1 − p), which needs no assumption about
how they are correlated. Below ``CONFIDENT_ROUNDS`` rounds the confidence is
capped at ``FEW_ROUNDS_CAP``: a percentile bootstrap over two rounds used to
say 100% for picks an independent re-race put behind (issue 18).
``benchmarks/confidence_calibration.py`` checks that picks stated ≥ 95% sure
hold in an independent re-race; docs/tuner-confidence.md has its table.

Within the margin the cheaper config wins: every raced config whose paired
median ratio to the leader is at least 1 − MARGIN is tied with it, the
cheapest of them (:func:`~.space.cost_key`: fewer processes, fewer threads,
shallower prefetch) is the pick, and the decision says it was a tie.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from ..config import LoaderConfig
from ..stats import MIN_ROUNDS, quantile, ratio_bounds, spread, t_cdf, upper_bound
from ..thresholds import CONFIDENCE_LEVEL, TIE_MARGIN
from .space import MIN_GAIN, PLATEAU_TOLERANCE, cost_key
from .trial import Trial

# The pick is claimed at least as fast as each rival within this fraction: the tie margin.
MARGIN = TIE_MARGIN
# The two-sided level of the race's intervals (the runner-up's ratio to the pick): each bound is a
# one-sided CONFIDENCE_LEVEL bound, the sense in which the race's confidence is stated (a pick at
# least as fast as a rival), so 90% two-sided. ``compare`` states two-sided intervals at
# CONFIDENCE_LEVEL itself.
INTERVAL_LEVEL = round(2 * CONFIDENCE_LEVEL - 1, 6)
# Fewer rounds than this never give a confidence above FEW_ROUNDS_CAP (NOTE
# [what the confidence states]).
CONFIDENT_ROUNDS = 4
FEW_ROUNDS_CAP = 0.9
# The per-round spread of a paired log-ratio assumed at least (a few agreeing rounds prove no less
# noise).
NOISE_FLOOR = 0.02
# A rival that raced one round with the pick (dropped as far behind): its ratio's per-round spread,
# assumed, as wide as the largest noise threshold the search allows (search.MAX_SIG).
ONE_ROUND_NOISE = 0.10
# The race stops once the pick is this sure (and has raced CONFIDENT_ROUNDS rounds): the level at
# which stallscope makes a claim (thresholds.py).
STOP_CONFIDENCE = CONFIDENCE_LEVEL


def _spread(values: Sequence[float]) -> float:
    return spread(values, NOISE_FLOOR)


def at_least_probability(log_ratios: Sequence[float], margin: float = MARGIN) -> float | None:
    """How sure paired per-round log-ratios log(a / b) make it that a ≥ (1 − margin) × b.

    One-sided Student-t probability that the ratios' mean is at least
    log(1 − margin), spread floored at ``NOISE_FLOOR``; with one ratio, a normal
    with the spread ``ONE_ROUND_NOISE``. None without a ratio.
    """
    n = len(log_ratios)
    if n == 0:
        return None
    gap = statistics.fmean(log_ratios) - math.log(1 - margin)
    if n == 1:
        return 0.5 * (1 + math.erf(gap / (ONE_ROUND_NOISE * math.sqrt(2))))
    return t_cdf(gap / (_spread(log_ratios) / math.sqrt(n)), n - 1)


def margin_interval(log_ratios: Sequence[float]) -> tuple[float, float] | None:
    """The ``INTERVAL_LEVEL`` t-interval of the paired ratio a / b (spread floored as above); None
    below ``MIN_ROUNDS`` ratios."""
    return ratio_bounds(log_ratios, INTERVAL_LEVEL, floor=NOISE_FLOOR)


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
        return [r[a] / r[b] for r in self.rounds if a in r and b in r and r[a] > 0 and r[b] > 0]

    def log_ratios(self, a: LoaderConfig, b: LoaderConfig) -> list[float]:
        return [math.log(x) for x in self.ratios(a, b)]


@dataclass
class Decision:
    """The pick among raced configs and how sure it is (NOTE [what the confidence states])."""

    pick: LoaderConfig
    leader: LoaderConfig
    medians: dict[LoaderConfig, float]
    confidence: float | None  # None: fewer than MIN_ROUNDS rounds raced (not confirmed)
    runner_up: LoaderConfig | None = None
    margin: float | None = None  # pick median / runner-up median
    margin_interval: tuple[float, float] | None = (
        None  # INTERVAL_LEVEL t-interval of the paired ratio pick / runner-up
    )
    tie: bool = (
        False  # another raced config was within tie_margin of the leader; the cheapest was kept
    )
    tie_margin: float = MARGIN
    noisy_tie: bool = False  # the rounds were too noisy to tell the pick from a faster leader


def decide(
    log: RaceLog,
    *,
    margin: float = MARGIN,
    min_rounds: int = MIN_ROUNDS,
    confident_rounds: int = CONFIDENT_ROUNDS,
    noisy: bool = False,
) -> Decision:
    """Pick among raced configs: the cheapest of those tied with the leader, and how sure that is.

    The leader has the highest median rate. A config is tied with it when its
    paired median ratio to the leader is at least 1 − ``margin``; the cheapest
    tied config is the pick (``tie`` when there was more than one). ``noisy``
    (the rounds' spread is beyond what the search can resolve): a config that
    raced ``min_rounds`` rounds or more and is not :func:`clearly_slower` than
    the leader is tied with it too: the rounds cannot tell them apart, and
    the cheaper config is kept (``noisy_tie``). The confidence is NOTE [what the
    confidence states]'s: None when the pick raced fewer than ``min_rounds``
    rounds, at most ``FEW_ROUNDS_CAP`` below ``confident_rounds``.
    """
    medians = {c: m for c in log.configs() if (m := log.median(c)) is not None}
    if not medians:
        raise ValueError("decide() needs at least one raced config")
    leader = max(medians, key=lambda c: medians[c])

    def to_leader(config: LoaderConfig) -> float:
        paired = log.ratios(config, leader)
        if paired:
            return statistics.median(paired)
        return medians[config] / medians[leader] if medians[leader] > 0 else 0.0

    def indistinct(config: LoaderConfig) -> bool:
        return (
            noisy
            and log.rounds_of(config) >= min_rounds
            and not clearly_slower(log.ratios(config, leader), tolerance=margin)
        )

    within = [c for c in medians if c == leader or to_leader(c) >= 1 - margin]
    tied = within + [c for c in medians if c not in within and indistinct(c)]
    pick = min(tied, key=cost_key)
    noisy_tie = pick not in within
    tie = len(tied) > 1
    rivals = [c for c in medians if c != pick]
    mine = log.rounds_of(pick)
    if not rivals:
        confidence = (
            None if mine < min_rounds else (1.0 if mine >= confident_rounds else FEW_ROUNDS_CAP)
        )
        return Decision(pick, leader, medians, confidence, tie=False, tie_margin=margin)
    runner_up = max(rivals, key=lambda c: medians[c])
    margin_ratio = medians[pick] / medians[runner_up] if medians[runner_up] > 0 else None
    interval = margin_interval(log.log_ratios(pick, runner_up))
    if mine < min_rounds:
        return Decision(
            pick,
            leader,
            medians,
            None,
            runner_up=runner_up,
            margin=margin_ratio,
            tie=tie,
            tie_margin=margin,
            noisy_tie=noisy_tie,
        )
    doubt = 0.0
    for rival in rivals:
        p = at_least_probability(log.log_ratios(pick, rival), margin)
        doubt += 1.0 - (p if p is not None else 0.0)
    confidence = max(0.0, 1.0 - doubt)
    if mine < confident_rounds:
        confidence = min(confidence, FEW_ROUNDS_CAP)
    return Decision(
        pick,
        leader,
        medians,
        confidence,
        runner_up=runner_up,
        margin=margin_ratio,
        margin_interval=interval,
        tie=tie,
        tie_margin=margin,
        noisy_tie=noisy_tie,
    )


def decide_from_scan(
    scan: Mapping[LoaderConfig, Trial],
    baseline: LoaderConfig,
    *,
    tolerance: float = PLATEAU_TOLERANCE,
    rate: Callable[[Trial], float] | None = None,
) -> Decision:
    """No round was raced: the scan's single measurements pick, with no confidence (not
    confirmed). ``rate``: the rate that decides (default: the steady state's; per epoch where
    epochs are short, NOTE [per-epoch rate] in epoch_cost.py)."""
    ok = {c: (rate(t) if rate else t.samples_per_s) for c, t in scan.items() if t.ok}
    if not ok:
        return Decision(pick=baseline, leader=baseline, medians={}, confidence=None)
    leader = max(ok, key=lambda c: ok[c])
    top = ok[leader]
    tied = [c for c in ok if ok[c] >= top * (1 - tolerance)]
    pick = min(tied, key=cost_key)
    rivals = [c for c in ok if c != pick]
    runner = max(rivals, key=lambda c: ok[c]) if rivals else None
    return Decision(
        pick=pick,
        leader=leader,
        medians=ok,
        confidence=None,
        runner_up=runner,
        margin=ok[pick] / ok[runner] if runner is not None and ok[runner] > 0 else None,
        tie=len(tied) > 1,
        tie_margin=tolerance,
    )


def clearly_slower(
    ratios: Sequence[float], *, tolerance: float, level: float = CONFIDENCE_LEVEL
) -> bool:
    """Whether a config is slower than the leader beyond the noise, from its paired per-round ratios
    (its rate / the leader's): the one-sided ``level`` t upper bound of the ratio stays below
    1 − tolerance (spread floored at ``NOISE_FLOOR``; never from fewer than two rounds)."""
    logs = [math.log(r) for r in ratios if r > 0]
    upper = upper_bound(logs, level, floor=NOISE_FLOOR)
    return upper is not None and upper < math.log(1 - tolerance)


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
    """Whether the best found is within noise of the user's own config, so no change is worth
    making.

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
        medians = sorted(
            statistics.median(rng.choices(values, k=len(values))) for _ in range(resamples)
        )
        low = quantile(medians, 0.05, ordered=True)
        return low is not None and low < 1 + threshold
    return False


def within_pct(best_rate: float, baseline_rate: float) -> float | None:
    """How far the user's config is below the best found, in % of the best (0 when it is the
    best)."""
    if best_rate <= 0 or baseline_rate <= 0:
        return None
    return max(0.0, (1 - baseline_rate / best_rate) * 100)
