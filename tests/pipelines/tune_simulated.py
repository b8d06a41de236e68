"""A simulated :class:`~stallscope.tuning.trial.Evaluator` for testing the search
without workers."""

from __future__ import annotations

import math
import random
from collections.abc import Callable

from stallscope.config import LoaderConfig
from stallscope.throughput.epochs import EpochGap, epoch_batches
from stallscope.throughput.measure import warmup_batches_for
from stallscope.tuning.race import Race
from stallscope.tuning.space import SearchSettings
from stallscope.tuning.trial import Evaluator, Trial


class SimulatedEvaluator(Evaluator):
    """An :class:`Evaluator` over a rate function, with multiplicative noise and a fake clock.

    ``rate_fn(config) -> samples/s`` is the truth; each measurement returns it
    times ``exp(N(0, noise))`` and advances the clock by the window (at least
    ``min_batches`` batches at the true rate) plus a start-up of
    ``startup_fn(config)`` seconds and the warm-up batches. Deterministic for a seed.

    An epoch boundary costs one worker's batch time, plus (without persistent
    workers) the shutdown and start-up of the workers, ``1.5 × startup_fn(config)``.

    ``epoch_samples``: epochs of that many samples end within every window (a loader re-iterated
    at each epoch end, NOTE [per-epoch rate]): each trial records the epoch and what an epoch
    start cost, ``1.5 × startup_fn(config)`` (none with persistent workers), with the noise.
    ``noise_fn(config)``: that config's noise instead of ``noise`` (the windows of an in-order
    loader behind a jittery source swing far more than an unordered one's).
    ``cycled``: the epochs are a DataLoader's that stallscope walks back to back (its sampler
    cycled): each trial records the epoch's length, and no epoch start (``restart_s`` None).
    """

    def __init__(
        self,
        rate_fn: Callable[[LoaderConfig], float],
        *,
        noise: float = 0.02,
        seed: int = 0,
        startup_fn: Callable[[LoaderConfig], float] | None = None,
        worker_bytes_fn: Callable[[LoaderConfig], int | None] | None = None,
        overhead_s: float = 0.05,
        min_batches: int = 8,
        epoch_samples: int | None = None,
        cycled: bool = False,
        noise_fn: Callable[[LoaderConfig], float] | None = None,
    ) -> None:
        self.epoch_samples = epoch_samples
        self.noise_fn = noise_fn or (lambda c: noise)
        self.cycled = cycled
        self.rate_fn = rate_fn
        self.noise = noise
        self.rng = random.Random(seed)
        self.startup_fn = startup_fn or (lambda c: 0.05 + 0.03 * c.num_workers)
        self.worker_bytes_fn = worker_bytes_fn or (lambda c: None)
        self.overhead_s = overhead_s
        self.min_batches = min_batches
        self.clock = 0.0
        self.measured: list[LoaderConfig] = []
        self.epoch_gaps: list[LoaderConfig] = []

    def elapsed(self) -> float:
        return self.clock

    def measure(
        self, config: LoaderConfig, *, window_s: float, phase: str, position: float = 0.0
    ) -> Trial:
        true = self.rate_fn(config)
        startup = self.startup_fn(config)
        if true > 0 and self.min_batches:
            # As throughput.measure: the window holds at least min_batches batches, after a warm-up.
            batch_s = config.batch_size / true
            window_s = max(window_s, self.min_batches * batch_s)
            startup_total = startup + warmup_batches_for(config) * batch_s
        else:
            startup_total = startup
        cost = window_s + startup_total + self.overhead_s
        self.clock += cost
        self.measured.append(config)
        noise = self.noise_fn(config)
        noisy = true * math.exp(self.rng.gauss(0.0, noise)) if true > 0 else 0.0
        epoch: dict = {}
        if self.epoch_samples:
            restart = 0.0 if config.persistent_workers else 1.5 * startup
            epoch = {
                "epoch_samples": self.epoch_samples,
                "epoch_batches": self.epoch_samples // config.batch_size,
                "restart_s": None
                if self.cycled
                else restart * math.exp(self.rng.gauss(0.0, self.noise)),
            }
        return Trial(
            config=config,
            samples_per_s=noisy,
            phase=phase,
            startup_s=startup,
            window_s=window_s,
            rel_se=noise / 2,
            worker_bytes=self.worker_bytes_fn(config) if config.num_workers else None,
            cost_s=cost,
            error=None if true > 0 else "simulated failure",
            **epoch,
        )

    def epoch_gap(self, config: LoaderConfig, *, epochs: int) -> EpochGap:
        true = self.rate_fn(config)
        workers = max(1, config.num_workers)
        batch_s = config.batch_size * workers / true if true > 0 else 1.0  # one worker's batch
        startup = self.startup_fn(config)
        restart = (
            0.0 if config.persistent_workers else 1.5 * startup
        )  # shutdown (half a start-up) + start-up
        batches = epoch_batches(config)
        gaps = [
            (restart + batch_s) * math.exp(self.rng.gauss(0.0, self.noise))
            for _ in range(epochs - 1)
        ]
        cost = 1.5 * startup + epochs * batches * batch_s / workers + sum(gaps)
        self.clock += cost
        self.epoch_gaps.append(config)
        return EpochGap(config=config, gaps_s=gaps, batches_per_epoch=batches, cost_s=cost)


def unbounded_race(evaluator: Evaluator) -> Race:
    """A race with default settings and no time budget, that records nothing."""
    return Race(
        evaluator,
        SearchSettings(),
        round_cost=lambda configs: 0.0,
        affordable=lambda seconds: True,
        record=lambda trial: None,
        note=lambda text: None,
        skip=lambda config, why: None,
    )
