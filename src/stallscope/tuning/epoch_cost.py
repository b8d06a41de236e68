"""Which rate decides the pick: the steady state, or the rate per epoch where epochs are short.

NOTE [per-epoch rate]
The race compares steady-state rates: each epoch's start-up stays off the clock (SPEC §3.1,
NOTE [epoch restarts] in ``throughput/measure.py``). A loader re-iterated at each epoch end (a
factory's loader without persistent workers, a stream) starts its workers again every epoch, and
a training loop over such epochs pays that start-up once per epoch: 8 workers that start in
0.1 s lose to none at all over a 0.1 s epoch, however fast their steady state. Where epochs end
within a measurement window, every trial records the epoch's length ``S`` (samples) and what an
epoch start cost beyond the steady state, ``R`` (``Trial.restart_s``); a config's rate per epoch
is ``S / (R + S / r)`` at the steady rate ``r``, ``R`` the median over every trial of the config
(scan and race: an epoch start under load varies far more than a window's steady rate, and no
single quick or slow start should decide). A raced config that measured no epoch start of its
own reuses its measured start-up (time to first batch) less the steady time of that first batch
as ``R``.

A DataLoader whose epochs stallscope walks back to back (its sampler cycled: no epoch start in
the window) records the user's epoch length all the same. A training loop re-iterating it starts
its workers at every epoch unless they persist; it takes ``persistent_workers``, so worker configs
are compared without start-ups (``R`` = 0), and the pick's workers are made to persist by the
epoch-boundary gap (``persistence.py``, its saving judged against the epoch's length too), or,
where the budget ran out before that gap was measured, where its measured start-up is at least
``EPOCH_SHARE`` of its epoch (``persistence.persist_by_startup``): 8 workers at 7,000 samples/s
that take 0.05 s to start, restarted every 512-sample epoch, deliver 512 / (0.05 + 512 / 7,000),
about 4,200 samples/s, to such a loop.

When the start-up takes at least ``EPOCH_SHARE`` of some raced config's epoch, the per-epoch rate
decides everything the race decides: who drops out, the pick, the tie, the confidence, "keep
yours". The rates reported stay the steady state's, the per-epoch rates are recorded beside them
(``search.epochs``), and the verdict names the rate that decided. Epochs too long to end within a
window and infinite iterators are decided on the steady state; a DataLoader that takes
``persistent_workers`` gets it from the epoch-boundary phase (``persistence.py``), measured.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..config import LoaderConfig
from ..stats import per_epoch_rate, restart_from_startup
from ..thresholds import EPOCH_SHARE
from .confidence import RaceLog
from .trial import Trial


@dataclass(frozen=True)
class EpochCost:
    """An epoch's length and each config's start-up cost per epoch, as the trials measured them."""

    samples: int  # samples in one epoch (median over the whole epochs the trials saw)
    batches: int | None
    restart_s: Mapping[LoaderConfig, float]  # per config: what an epoch start costs it
    measured: Mapping[LoaderConfig, bool]  # its own epoch starts (True) or its start-up reused
    steady: Mapping[LoaderConfig, float]  # the steady rates the shares were taken at

    def rate(self, config: LoaderConfig, steady: float) -> float:
        """Samples per second over whole epochs at the steady rate ``steady``."""
        return per_epoch_rate(self.samples, self.restart_s.get(config, 0.0), steady)

    def share(self, config: LoaderConfig) -> float:
        """The share of ``config``'s epoch its start-up takes."""
        steady = self.steady.get(config, 0.0)
        if steady <= 0:
            return 0.0
        restart = self.restart_s.get(config, 0.0)
        return restart / (restart + self.samples / steady)

    @property
    def decides(self) -> bool:
        return any(self.share(c) >= EPOCH_SHARE for c in self.restart_s)

    def trial_rate(self, trial: Trial) -> float:
        """One trial's per-epoch rate: its steady rate, and its config's epoch-start cost (the
        median over all its trials: one start varies more than a window's steady rate does)."""
        return self.rate(trial.config, trial.samples_per_s)

    def log(self, rounds: Sequence[Mapping[LoaderConfig, Sequence[Trial]]]) -> RaceLog:
        """The race's rounds in per-epoch rates (paired by round as the steady ones are)."""
        log = RaceLog()
        for trials in rounds:
            log.add({c: [self.trial_rate(t) for t in ts if t.ok] for c, ts in trials.items()})
        return log

    def to_dict(self, per_epoch: Mapping[LoaderConfig, float], *, decides: bool) -> dict[str, Any]:
        """The record's ``search.epochs``: the epoch, and per config its start-up cost, its steady
        and per-epoch rates (``per_epoch``: the race's medians), fastest per epoch first."""
        rows = [
            {
                "config": c.to_dict(),
                "label": c.label(),
                "workers": c.num_workers,
                "restart_s": round(self.restart_s[c], 4),
                "restart_measured": self.measured.get(c, False),
                "startup_share": round(self.share(c), 4),
                "steady_samples_per_s": round(self.steady.get(c, 0.0), 2),
                "per_epoch_samples_per_s": round(per_epoch[c], 2),
            }
            for c in sorted(per_epoch, key=lambda c: -per_epoch[c])
            if c in self.restart_s
        ]
        return {
            "decides": decides,
            "samples_per_epoch": self.samples,
            "batches_per_epoch": self.batches,
            "share_threshold": EPOCH_SHARE,
            "configs": rows,
        }


def epoch_cost(
    trials: Sequence[Trial], steady: Mapping[LoaderConfig, float], *, can_persist: bool = False
) -> EpochCost | None:
    """The epoch's length and each config's start-up cost per epoch (NOTE [per-epoch rate]), for
    the configs in ``steady`` (their steady rates); None where no trial saw a whole epoch end (the
    epochs are long, or never end), or a config has neither an epoch start nor a start-up
    measured. ``can_persist``: the loader takes ``persistent_workers``, so a config that saw no
    epoch start of its own need not start its workers at each (the search makes the pick persist
    where its start-up matters: ``persistence.persist_by_startup``)."""
    ok = [t for t in trials if t.ok]
    lengths = [t.epoch_samples for t in ok if t.epoch_samples]
    if not lengths:
        return None
    batches = [t.epoch_batches for t in ok if t.epoch_batches]
    # Samples a batch holds, where the trials counted an epoch's batches too.
    per_batch = statistics.median(lengths) / statistics.median(batches) if batches else None
    restart: dict[LoaderConfig, float] = {}
    measured: dict[LoaderConfig, bool] = {}
    for config in steady:
        mine = [t for t in ok if t.config == config]
        own = [t.restart_s for t in mine if t.restart_s is not None]
        startups = [t.startup_s for t in mine if t.startup_s is not None]
        if own:
            restart[config], measured[config] = statistics.median(own), True
        elif config.num_workers and (config.persistent_workers or can_persist):
            restart[config], measured[config] = 0.0, False  # its workers outlive the epoch
        elif startups:
            # The time to the first batch holds that batch's own fetch: an epoch start costs only
            # what it took beyond one batch at the steady rate (as ``Measurement.restart_s``). A
            # single-process loader's first batch is otherwise all of it, and would make the
            # per-epoch rate decide on any epoch of fewer than about 20 batches.
            restart[config] = restart_from_startup(
                statistics.median(startups), per_batch or config.batch_size, steady[config]
            )
            measured[config] = False
        else:
            return None
    return EpochCost(
        samples=int(statistics.median(lengths)),
        batches=int(statistics.median(batches)) if batches else None,
        restart_s=restart,
        measured=measured,
        steady=dict(steady),
    )
