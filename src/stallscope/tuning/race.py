"""The final race (NOTE [tuning strategy], phase 5): finalists in interleaved rounds until the pick
is clear.

Who races: the search's best few, the cheapest config within a few percent
of them, the user's baseline, and every *seed* a caller passes in (``doctor``
passes the sweep's best), so that one report never names two winners that did
not meet (NOTE [paired rounds] in :mod:`.confidence`).

NOTE [the user's config races]
The gain a verdict states is the pick over the user's own loader, and its
interval needs the two in at least two paired rounds (``MIN_ROUNDS``). A
config far behind after one round otherwise leaves the race (``FAR_BEHIND``),
and a baseline the scan put below half the leader never entered it, so the
headline figure of a run whose user's loader was slowest rested on one
unpaired window, often the scan's, taken at another moment of a drifting
machine. The user's config therefore enters the race whatever its scan rate
and stays for two rounds, far behind or not; after them it leaves as any
other config does. Where the budget cannot fit two rounds with it,
``_fit_budget`` leaves it out first, and the verdict says why there is no
interval.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..config import LoaderConfig
from ..stats import MIN_ROUNDS
from .confidence import (
    CONFIDENT_ROUNDS,
    STOP_CONFIDENCE,
    Decision,
    RaceLog,
    clearly_slower,
    decide,
)
from .epoch_cost import EpochCost, epoch_cost
from .space import SearchSettings, confirm_window
from .trial import Effect, Evaluator, Trial

# After one round, a config below this fraction of the leader's rate is out: two maximal noise
# thresholds (MAX_SIG) below, no second round will turn it around.
FAR_BEHIND = 0.8


@dataclass
class Entrant:
    """A config in the race and why it is there."""

    config: LoaderConfig
    role: str  # "baseline" | "sweep-best" | "tuner" | "other" (see head_to_head)
    scan_rate: float = 0.0
    seeded: bool = False  # a caller's seed: leaves the race only by losing, never for the budget


def entrants(
    scan: Mapping[LoaderConfig, float],
    finalists: Sequence[LoaderConfig],
    seeds: Sequence[tuple[LoaderConfig, str]],
    baseline: LoaderConfig,
) -> list[Entrant]:
    """The finalists, the caller's seeds and the user's baseline, each with its role (``scan``: the
    scanned rates). The first finalist is the tuner's own best; a seed or the baseline takes over
    the role of a finalist it coincides with."""
    out = [Entrant(c, "tuner" if i == 0 else "other", scan[c]) for i, c in enumerate(finalists)]

    def enter(config: LoaderConfig, role: str, seeded: bool) -> None:
        found = next((e for e in out if e.config == config), None)
        if found is None:
            out.append(Entrant(config, role, scan[config], seeded=seeded))
        else:
            found.role, found.seeded = role, found.seeded or seeded

    for config, role in seeds:
        if config in scan:
            enter(config, role, True)
    # The user's own config races however far behind the scan put it: the speed-up and the "keep
    # yours" verdict then come from the same rounds as the pick (NOTE [the user's config races]).
    if baseline in scan:
        enter(baseline, "baseline", False)
    return out


@dataclass(eq=False)
class Race:
    """Interleaved rounds over the entrants, within the budget the caller's ``affordable``
    grants."""

    evaluator: Evaluator
    settings: SearchSettings
    round_cost: Callable[[Sequence[LoaderConfig]], float]
    affordable: Callable[[float], bool]
    record: Callable[[Trial], None]
    note: Callable[[str], None]
    skip: Callable[[LoaderConfig, str], None]
    # The loader takes persistent_workers (NOTE [per-epoch rate] in epoch_cost.py).
    can_persist: bool = False
    # Steady-state rates: the figures reported.
    log: RaceLog = field(init=False, default_factory=RaceLog)
    entrants: list[Entrant] = field(init=False, default_factory=list)
    # Each round's trials per config, and whether the per-epoch rate decides (NOTE
    # [per-epoch rate] in epoch_cost.py: once it does, it does for the rest of the race).
    round_trials: list[dict[LoaderConfig, list[Trial]]] = field(init=False, default_factory=list)
    per_epoch: bool = field(init=False, default=False)
    # The trials measured before the race (the scan): their epoch starts count too.
    earlier: Sequence[Trial] = field(init=False, default=())

    def epochs(self) -> EpochCost | None:
        """The epoch's length and each raced config's start-up cost per epoch, from its trials
        before and in the race (NOTE [per-epoch rate])."""
        steady = {c: m for c in self.log.configs() if (m := self.log.median(c)) is not None}
        raced = [t for rates in self.round_trials for ts in rates.values() for t in ts]
        trials = [*(t for t in self.earlier if t.config in steady), *raced]
        if not steady:
            return None
        return epoch_cost(trials, steady, can_persist=self.can_persist)

    @property
    def deciding(self) -> RaceLog:
        """The rounds in the rate that decides: per epoch where epochs are short enough for their
        start-up to matter, else the steady state."""
        cost = self.epochs() if self.per_epoch else None
        return cost.log(self.round_trials) if cost is not None else self.log

    @property
    def rounds(self) -> int:
        return len(self.log)

    def run(self, entrants: Sequence[Entrant]) -> Decision | None:
        """Race; the decision over the rounds run, or None when not one round fitted."""
        settings = self.settings
        self.entrants = list(entrants)
        alive = [e.config for e in self.entrants]
        while len(alive) >= 2:
            alive = self._fit_budget(alive)
            if len(alive) < 2:
                break
            windows = [confirm_window(c, settings) for c in alive]
            results = self.evaluator.interleaved(
                alive, repeats=1, window_s=windows, phase="confirm"
            )
            rates: dict[LoaderConfig, list[float]] = {}
            kept: dict[LoaderConfig, list[Trial]] = {}
            for config, trials in zip(alive, results):
                for trial in trials:
                    self.record(trial)
                    if trial.ok:
                        rates.setdefault(config, []).append(trial.samples_per_s)
                        kept.setdefault(config, []).append(trial)
            self.log.add(rates)
            self.round_trials.append(kept)
            if not self.per_epoch:
                cost = self.epochs()
                self.per_epoch = cost is not None and cost.decides
            alive = [c for c in alive if c in rates]
            if settings.rounds is not None:
                if self.rounds >= settings.rounds:
                    break
                continue
            alive = self._drop_losers(alive)
            if self.rounds < settings.min_rounds:
                continue
            # Sure enough only after CONFIDENT_ROUNDS rounds (NOTE [what the confidence states]).
            decision = decide(self.deciding, margin=settings.tie_margin)
            sure = (
                self.rounds >= CONFIDENT_ROUNDS and (decision.confidence or 0.0) >= STOP_CONFIDENCE
            )
            if sure or self.rounds >= settings.max_rounds:
                break
        self._skip_unconfirmed()
        if not self.log.rounds:
            return None
        return decide(self.deciding, margin=settings.tie_margin)

    def _fit_budget(self, alive: list[LoaderConfig]) -> list[LoaderConfig]:
        """Leave out entrants until the rounds a confidence needs fit (``min_rounds`` of them, those
        already raced counted): the slowest first, then the baseline; never a seed or the leader.
        Two rounds of fewer configs say more than one round of many (NOTE [paired rounds]). Where
        not even that fits, one round still runs; nothing is raced when not one round fits."""
        seeded = {e.config for e in self.entrants if e.seeded}
        roles = {e.config: e.role for e in self.entrants}
        scan = {e.config: e.scan_rate for e in self.entrants}
        wanted = max(1, self.settings.min_rounds - self.rounds)

        deciding = self.deciding

        def rate(c: LoaderConfig) -> float:
            return deciding.median(c) or scan.get(c, 0.0)

        out = list(alive)
        while len(out) > 2 and not self.affordable(wanted * self.round_cost(out)):
            leader = max(out, key=rate)
            droppable = [c for c in out if c not in seeded and c != leader]
            if not droppable:
                break
            # A baseline far behind the leader is only there for the gain's interval (NOTE [the
            # user's config races]): it goes first; one close to the leader may be the verdict
            # ("keep yours") and goes last.
            far = rate(leader) * FAR_BEHIND
            worst = min(
                droppable,
                key=lambda c: (
                    roles.get(c) != "baseline" or rate(c) >= far,
                    roles.get(c) == "baseline",
                    rate(c),
                ),
            )
            out.remove(worst)
            why = (
                f"left out of the race: {wanted} round(s) of {len(out) + 1} configs did not fit "
                "the time budget"
                if wanted > 1
                else f"left out of race round {self.rounds + 1}: the time budget ran out"
            )
            self.skip(worst, why)
        if not self.affordable(self.round_cost(out)):
            self.note(f"time budget: stopped the final race after {self.rounds} round(s)")
            for config in out:
                if self.log.rounds_of(config) == 0:
                    self.skip(config, "not raced: the time budget ran out before the final race")
            return []
        return out

    def _drop_losers(self, alive: list[LoaderConfig]) -> list[LoaderConfig]:
        """Far behind after one round, or clearly slower (paired, beyond the noise) after
        ``min_rounds`` (in the rate that decides)."""
        log = self.deciding
        medians = {c: log.median(c) or 0.0 for c in alive}
        if not medians:
            return alive
        leader = max(medians, key=lambda c: medians[c])
        roles = {e.config: e.role for e in self.entrants}
        keep = []
        for config in alive:
            if config == leader:
                keep.append(config)
                continue
            if roles.get(config) == "baseline" and self.log.rounds_of(config) < MIN_ROUNDS:
                keep.append(config)  # the gain's interval needs two paired rounds of it
                continue
            if medians[config] < FAR_BEHIND * medians[leader]:
                continue
            if self.rounds >= self.settings.min_rounds and clearly_slower(
                log.ratios(config, leader), tolerance=self.settings.tolerance
            ):
                continue
            keep.append(config)
        # A confidence needs a rival in the rounds (NOTE [what the confidence states]): the best of
        # the dropped stays until the pick has raced enough rounds for one, as the budget allows.
        if len(keep) < 2 <= len(alive) and self.rounds < CONFIDENT_ROUNDS:
            dropped = [c for c in alive if c not in keep]
            if dropped:
                keep.append(max(dropped, key=lambda c: medians[c]))
        return keep

    def _skip_unconfirmed(self) -> None:
        if 0 < self.rounds < MIN_ROUNDS:
            self.note(
                f"not confirmed: the time budget ran out after {self.rounds} interleaved round(s)"
            )
        for entrant in self.entrants:
            raced = self.log.rounds_of(entrant.config)
            if 0 < raced < MIN_ROUNDS and self.rounds < MIN_ROUNDS:
                self.skip(
                    entrant.config, f"raced {raced} round(s) of the {MIN_ROUNDS} a confidence needs"
                )

    def noise(self, *, deciding: bool = False) -> float | None:
        """How far one config's measurements scatter on this machine: the median relative spread
        (max − min) / mean of a config's measurements within one round, over every raced config
        and round (in the rate that decides, with ``deciding``). Within a round, because every
        measurement of a round opens its window at the same point of the epoch and rounds at
        different ones (NOTE [window position] in ``throughput/measure.py``): the rounds' rates
        also differ by what that part of the epoch costs, which moves every config of a round
        alike and is no noise between them. Where no round measured a config twice, the spread of
        its rates over the rounds."""
        cost = self.epochs() if deciding and self.per_epoch else None

        def rate(trial: Trial) -> float:
            return cost.trial_rate(trial) if cost is not None else trial.samples_per_s

        spreads = []
        for trials in self.round_trials:
            for measured in trials.values():
                values = [rate(t) for t in measured if t.ok]
                if len(values) >= 2 and statistics.fmean(values) > 0:
                    spreads.append((max(values) - min(values)) / statistics.fmean(values))
        if spreads:
            return statistics.median(spreads)
        log = self.deciding if deciding else self.log
        for config in log.configs():
            values = log.values(config)
            if len(values) >= 2 and statistics.median(values) > 0:
                spreads.append((max(values) - min(values)) / statistics.median(values))
        return statistics.median(spreads) if spreads else None

    def confirm_effects(self, effects: Sequence[Effect]) -> None:
        """Replace single-measurement effects by interleaved medians where both sides raced."""
        for effect in effects:
            a, b = self.log.median(effect.parent), self.log.median(effect.variant)
            if a is not None and b is not None:
                effect.parent_rate, effect.variant_rate, effect.source = a, b, "confirm"

    def head_to_head(self) -> list[dict[str, Any]]:
        """The configs that raced, with their medians and why they were there (fastest first)."""
        roles = {e.config: e.role for e in self.entrants}
        rows = []
        for config in self.log.configs():
            median = self.log.median(config)
            if median is None:
                continue
            rows.append(
                {
                    "config": config.to_dict(),
                    "label": config.label(),
                    "samples_per_s": round(median, 2),
                    "rounds": self.log.rounds_of(config),
                    "role": roles.get(config, "other"),
                }
            )
        return sorted(rows, key=lambda r: -r["samples_per_s"])
