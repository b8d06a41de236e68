"""The sweep's fastest config (:func:`best_result`): per epoch where the loader's epochs start
again and their start-up matters, else in steady state.

The sweep reports steady-state rates, each config's start-up apart (SPEC §3.1). A loader that the
measurement re-iterates at each epoch's end (grain's ``DataLoader``, a stream, a factory's loader
that starts a worker pool per epoch) pays that start-up once per epoch in a training loop, and a
config whose start-up fills its buffers with most of an epoch shows a steady rate its loop never
sees: grain with 8 workers on 2 cores drained about 3,000 samples/s from buffers filled during a
15 s start, and ran a 2,048-sample epoch at under 100 samples/s. Where the sweep's windows saw an
epoch whole and an epoch start (``BenchResult.epoch_samples``, ``restart_s``), the rate per epoch,
``S / (R + S / r)``, decides which config is fastest, as it decides the tuner's race (NOTE
[per-epoch rate] in ``tuning/epoch_cost.py``), once some config's start-up takes
``EPOCH_SHARE`` of its epoch.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from ..record.model import BenchResult
from ..record.sections import BenchSection
from ..stats import per_epoch_rate, restart_from_startup
from ..text import plural
from ..thresholds import EPOCH_SHARE
from .readers import Record, batch_size_of, ok_results, steady_config, workers_of


@dataclass(frozen=True)
class EpochRow:
    result: BenchResult
    restart_s: float  # an epoch start's cost beyond the steady state
    measured: bool  # seen in the windows (False: the config's time to its first batch)
    share: float  # of the config's epoch
    samples_per_s: float  # per epoch, start-ups included


@dataclass(frozen=True)
class SweepEpochs:
    """The sweep's configs by their rate per epoch, where it decides."""

    samples: int  # one epoch
    rows: list[EpochRow]  # fastest per epoch first

    @property
    def best(self) -> BenchResult:
        return self.rows[0].result

    def rate_of(self, config: Any) -> float | None:
        want = steady_config(config)
        return next(
            (row.samples_per_s for row in self.rows if steady_config(row.result.config) == want),
            None,
        )

    def sentence(self, label: Any) -> str:
        """What decided, in the words of the tuner's per-epoch rule (a clause: the verdict
        capitalises it): the epoch, the start-up that weighs most, and the rates per epoch and in
        steady state of the fastest and of the steady state's fastest."""
        pick = self.rows[0]
        steady_leader = max(self.rows, key=lambda row: row.result.rate or 0.0)
        rival = (
            steady_leader
            if steady_leader is not pick
            else max(self.rows[1:], key=lambda row: row.share, default=None)
        )
        named = rival or pick
        workers = workers_of(named.result.config)
        name = label(named.result)
        restarts = (
            f"each restarts {plural(workers, 'worker')} of {name} "
            if workers
            else f"each starts {name} again "
        )
        text = (
            f"epochs are {self.samples:,} samples; {restarts}({named.restart_s:.2f} s, "
            f"{named.share:.0%} of its epoch), so the rate per epoch, start-ups included, decides"
        )
        if rival is not None:
            text += (
                f": {label(pick.result)} {pick.samples_per_s:,.0f} vs {name} "
                f"{rival.samples_per_s:,.0f} samples/s per epoch ({pick.result.rate or 0.0:,.0f} "
                f"vs {rival.result.rate or 0.0:,.0f} in steady state)"
            )
        return text


def sweep_epochs(r: Record) -> SweepEpochs | None:
    """The sweep's configs by rate per epoch where that rate decides; None where the windows saw
    no whole epoch or no epoch start, or every start-up is under ``EPOCH_SHARE`` of its epoch."""
    results = ok_results(r)
    lengths = [res.epoch_samples for res in results if res.epoch_samples]
    if not lengths or all(res.restart_s is None for res in results):
        return None
    samples = int(statistics.median(lengths))
    rows = []
    for res in results:
        steady = res.rate or 0.0
        restart = _restart(res, steady)
        if restart is None or steady <= 0:
            return None  # a config with no start-up measured: no rate per epoch to compare
        seconds, measured = restart
        epoch_s = seconds + samples / steady
        rows.append(
            EpochRow(
                result=res,
                restart_s=seconds,
                measured=measured,
                share=seconds / epoch_s,
                samples_per_s=per_epoch_rate(samples, seconds, steady),
            )
        )
    if not any(row.share >= EPOCH_SHARE for row in rows):
        return None
    rows.sort(key=lambda row: -row.samples_per_s)
    return SweepEpochs(samples=samples, rows=rows)


def _restart(res: BenchResult, steady: float) -> tuple[float, bool] | None:
    """The config's epoch-start cost: the one its windows saw, else (its workers persist) none,
    else its time to the first batch less that batch's own steady time, as the tuner takes it."""
    if res.restart_s is not None:
        return res.restart_s, True
    config = res.config
    if workers_of(config) and config.get("persistent_workers"):
        return 0.0, False
    if res.startup_s is None or steady <= 0:
        return None
    per_batch: float = batch_size_of(config) or 1
    if not batch_size_of(config) and res.batches_measured and res.samples_measured:
        per_batch = res.samples_measured / res.batches_measured
    return restart_from_startup(res.startup_s, per_batch, steady), False


def best_result(r: Record) -> BenchResult | None:
    """The sweep's fastest: per epoch where its epochs restart and their start-up decides
    (``sweep_epochs``), else the result the sweep called best (scaling.best_index), else the
    fastest."""
    epochs = sweep_epochs(r)
    if epochs is not None:
        return epochs.best
    bench = BenchSection.from_dict(r)
    index = bench.scaling.best_index if bench.scaling else None
    if index is not None and 0 <= index < len(bench.results):
        chosen = BenchResult.of(bench.results[index])
        if chosen is not None and chosen.measured:
            return chosen
    ok = ok_results(r)
    return max(ok, key=lambda res: res.rate or 0.0) if ok else None
