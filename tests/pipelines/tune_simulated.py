"""A simulated :class:`~stallscope.tuning.trial.Evaluator` for testing the search without workers."""

from __future__ import annotations

import math
import random
from collections.abc import Callable

from stallscope.config import LoaderConfig
from stallscope.tuning.trial import InterleavingEvaluator, Trial


class SimulatedEvaluator(InterleavingEvaluator):
    """An :class:`Evaluator` over a rate function, with multiplicative noise and a fake clock.

    ``rate_fn(config) -> samples/s`` is the truth; each measurement returns it
    times ``exp(N(0, noise))`` and advances the clock by the window plus a
    start-up of ``startup_fn(config)`` seconds. Deterministic for a seed.
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
    ) -> None:
        self.rate_fn = rate_fn
        self.noise = noise
        self.rng = random.Random(seed)
        self.startup_fn = startup_fn or (lambda c: 0.05 + 0.03 * c.num_workers)
        self.worker_bytes_fn = worker_bytes_fn or (lambda c: None)
        self.overhead_s = overhead_s
        self.clock = 0.0
        self.measured: list[LoaderConfig] = []

    def elapsed(self) -> float:
        return self.clock

    def measure(self, config: LoaderConfig, *, window_s: float, phase: str) -> Trial:
        true = self.rate_fn(config)
        startup = self.startup_fn(config)
        cost = window_s + startup + self.overhead_s
        self.clock += cost
        self.measured.append(config)
        noisy = true * math.exp(self.rng.gauss(0.0, self.noise)) if true > 0 else 0.0
        return Trial(
            config=config,
            samples_per_s=noisy,
            phase=phase,
            startup_s=startup,
            window_s=window_s,
            rel_se=self.noise / 2,
            worker_bytes=self.worker_bytes_fn(config) if config.num_workers else None,
            cost_s=cost,
            error=None if true > 0 else "simulated failure",
        )
