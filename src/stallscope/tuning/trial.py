"""One measurement of one config (:class:`Trial`), the evaluator that takes it, and what a search
returns.

Nothing here starts a worker: the search sees the pipeline only through an
:class:`Evaluator` (``measure`` one config, ``interleaved`` repeats of several,
and a clock), so the same strategy runs on real DataLoaders
(``tuner.LoaderEvaluator``) and on a simulated cost model with a fake clock (the tests).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..config import LoaderConfig
from ..stats import round_or_none, spread_point
from ..throughput.epochs import EpochGap
from .regions import Region
from .space import MB, MemoryBudget


@dataclass
class Trial:
    """One measurement of one config, as the search sees it."""

    config: LoaderConfig
    samples_per_s: float
    phase: str
    startup_s: float | None = None
    window_s: float | None = None
    batches: int | None = None
    batch_p50_ms: float | None = None
    batch_p95_ms: float | None = None
    rel_se: float | None = None  # relative standard error of the rate within its window
    worker_bytes: int | None = None  # measured memory per worker
    workers_bytes: int | None = None  # measured memory of all its workers (NOTE [memory budget])
    cost_s: float = 0.0  # wall time the measurement took, start-up included
    error: str | None = None
    main_ms_per_batch: float | None = (
        None  # main process CPU per batch received (NOTE [receive cost])
    )
    cpu_ms_per_sample: float | None = None  # CPU of main process and workers per sample
    # Epochs that ended within the window (a re-iterated loader): samples and batches of a whole
    # epoch, and what an epoch start cost beyond the steady state (Measurement.restart_s).
    epoch_samples: int | None = None
    epoch_batches: int | None = None
    restart_s: float | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.samples_per_s > 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "config": self.config.to_dict(),
            "label": self.config.label(),
            "samples_per_s": round_or_none(self.samples_per_s, 2),
            "phase": self.phase,
            "startup_s": round_or_none(self.startup_s, 4),
            "window_s": round_or_none(self.window_s, 3),
            "batches": self.batches,
            "batch_ms": {
                "p50": round_or_none(self.batch_p50_ms, 3),
                "p95": round_or_none(self.batch_p95_ms, 3),
            },
            "rel_se": round_or_none(self.rel_se, 4),
            "worker_mb": None if self.worker_bytes is None else round(self.worker_bytes / MB, 1),
            "workers_mb": None if self.workers_bytes is None else round(self.workers_bytes / MB, 1),
            "cost_s": round_or_none(self.cost_s, 3),
            "error": self.error,
            "main_ms_per_batch": round_or_none(self.main_ms_per_batch, 4),
            "cpu_ms_per_sample": round_or_none(self.cpu_ms_per_sample, 4),
            "epoch_samples": self.epoch_samples,
            "epoch_batches": self.epoch_batches,
            "restart_s": round_or_none(self.restart_s, 4),
        }


class Evaluator:
    """What the search needs from the world: measurements and a clock.

    A subclass (the real evaluator, the simulated one) gives ``elapsed``, ``measure`` and
    ``epoch_gap``; ``interleaved`` is written here in terms of ``measure``.
    """

    def elapsed(self) -> float:
        """Seconds since tuning started."""
        raise NotImplementedError

    # Interleaved rounds run so far: each opens its windows at the next point of the epoch (NOTE
    # [window position] in ``throughput/measure.py``).
    rounds_run: int = 0

    def measure(
        self, config: LoaderConfig, *, window_s: float, phase: str, position: float = 0.0
    ) -> Trial:
        """One trial of ``config``, its window opening ``position`` (a share) into the epoch."""
        raise NotImplementedError

    def epoch_gap(self, config: LoaderConfig, *, epochs: int) -> EpochGap:
        """The gaps at ``epochs - 1`` epoch boundaries of ``config`` (see
        :mod:`stallscope.throughput.epochs`)."""
        raise NotImplementedError

    def interleaved(
        self,
        configs: Sequence[LoaderConfig],
        *,
        repeats: int,
        window_s: float | Sequence[float],
        phase: str,
    ) -> list[list[Trial]]:
        """``repeats`` rounds of A B … B A, so drift and order effects hit every config alike; the
        trials per config, in ``configs`` order (``window_s``: one window for all, or one per
        config). Every measurement of a round opens its window at the same point of the epoch, so
        a config's two in one round differ by the machine's noise alone, and each round at the
        next point (NOTE [window position] in ``throughput/measure.py``)."""
        windows = (
            [float(window_s)] * len(configs)
            if isinstance(window_s, (int, float))
            else list(window_s)
        )
        out: list[list[Trial]] = [[] for _ in configs]
        order = list(range(len(configs)))
        for _ in range(repeats):
            position = spread_point(self.rounds_run)
            self.rounds_run += 1
            for index in order + order[::-1]:
                out[index].append(
                    self.measure(
                        configs[index], window_s=windows[index], phase=phase, position=position
                    )
                )
        return out


@dataclass
class Effect:
    """A knob's measured effect: ``variant`` vs ``parent`` (same run, same phase)."""

    knob: str
    parent: LoaderConfig
    variant: LoaderConfig
    parent_rate: float
    variant_rate: float
    source: str  # "scan" (single measurements) or "confirm" (interleaved medians)

    @property
    def gain(self) -> float:
        return self.variant_rate / self.parent_rate - 1 if self.parent_rate > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "knob": self.knob,
            "parent": self.parent.label(),
            "variant": self.variant.label(),
            "parent_samples_per_s": round(self.parent_rate, 2),
            "variant_samples_per_s": round(self.variant_rate, 2),
            "gain": round(self.gain, 4),
            "source": self.source,
        }


@dataclass
class SearchResult:
    pick: LoaderConfig
    samples_per_s: float
    baseline: LoaderConfig
    baseline_samples_per_s: float
    confidence: float | None  # None below MIN_ROUNDS interleaved rounds (not confirmed)
    region: Region
    trials: list[Trial]
    effects: list[Effect]
    notes: list[str]
    elapsed_s: float
    runner_up: LoaderConfig | None = None
    margin: float | None = None
    margin_interval: tuple[float, float] | None = None
    # The pick over the user's config, paired by round: the gain's interval (None below two).
    gain_interval: tuple[float, float] | None = None
    tie: bool = (
        False  # the pick was within tie_margin of another raced config; the cheaper config was kept
    )
    tie_margin: float | None = None
    finalists: dict[str, float] = field(default_factory=dict)  # label -> median rate in the race
    rounds: int = 0
    noise: float | None = None  # a config's measurements within one race round: median spread
    startup_s: float | None = None  # the pick's measured start-up (time to first batch)
    memory: MemoryBudget | None = None
    head_to_head: list[dict[str, Any]] = field(default_factory=list)  # who raced, medians, roles
    skipped: list[dict[str, str]] = field(
        default_factory=list
    )  # {label, why}: not measured or not raced
    keep_baseline: bool = False  # the best found is within noise of the user's own config
    within_pct: float | None = None  # the user's config is this % below the best found
    plan: dict[str, Any] = field(
        default_factory=dict
    )  # what the budget fits, from the measured batch time
    persistent: dict[str, Any] | None = (
        None  # the measured epoch-boundary gaps behind persistent_workers
    )
    # The budget and the pick's measured memory (NOTE [memory budget] in space.py).
    pick_memory: dict[str, Any] | None = None
    # Raced configs the rounds could not tell apart, where the cheaper was kept.
    noisy_tie: dict[str, Any] | None = None
    # The epoch's length and the raced configs' per-epoch rates, and whether that rate decided
    # (NOTE [per-epoch rate] in epoch_cost.py); None where no trial saw an epoch end.
    epochs: dict[str, Any] | None = None

    @property
    def confirmed(self) -> bool:
        """The pick raced its rivals in enough interleaved rounds for a confidence."""
        return self.confidence is not None

    @property
    def speedup(self) -> float | None:
        if self.baseline_samples_per_s <= 0:
            return None
        return self.samples_per_s / self.baseline_samples_per_s

    def to_dict(self) -> dict[str, Any]:
        return {
            "pick": self.pick.to_dict(),
            "samples_per_s": round(self.samples_per_s, 2),
            "baseline": self.baseline.to_dict(),
            "baseline_samples_per_s": round(self.baseline_samples_per_s, 2),
            "speedup": None if self.speedup is None else round(self.speedup, 3),
            "confidence": round_or_none(self.confidence, 3),
            "confirmed": self.confirmed,
            "region": self.region.to_dict(),
            "runner_up": None if self.runner_up is None else self.runner_up.label(),
            "margin": round_or_none(self.margin, 4),
            "margin_interval": None
            if self.margin_interval is None
            else [round(v, 4) for v in self.margin_interval],
            "gain_interval": None
            if self.gain_interval is None
            else [round(v, 4) for v in self.gain_interval],
            "tie": self.tie,
            "tie_margin": round_or_none(self.tie_margin, 4),
            "finalists": {k: round(v, 2) for k, v in self.finalists.items()},
            "rounds": self.rounds,
            "noise": round_or_none(self.noise, 4),
            "startup_s": round_or_none(self.startup_s, 4),
            "elapsed_s": round(self.elapsed_s, 3),
            "notes": list(self.notes),
            "effects": [e.to_dict() for e in self.effects],
            "trials": [t.to_dict() for t in self.trials],
            "memory": None if self.memory is None else self.memory.to_dict(),
            "head_to_head": list(self.head_to_head),
            "skipped": list(self.skipped),
            "keep_baseline": self.keep_baseline,
            "within_pct": round_or_none(self.within_pct, 2),
            "plan": dict(self.plan),
            "persistent_workers": None if self.persistent is None else dict(self.persistent),
            "pick_memory": None if self.pick_memory is None else dict(self.pick_memory),
            "noisy_tie": None if self.noisy_tie is None else dict(self.noisy_tie),
            "epochs": None if self.epochs is None else dict(self.epochs),
        }


def overhead_fit(trials: Sequence[Trial]) -> tuple[float, float]:
    """Seconds a measurement takes beyond its window (start-up, warm-up, shutdown) as
    ``a + b × workers``.

    Fitted over past trials and padded by the worst residual: an estimate
    that runs short overshoots the budget.
    """
    points = [(t.config.num_workers, max(0.0, t.cost_s - (t.window_s or 0.0))) for t in trials]
    if not points:
        return 0.2, 0.05
    ws = {w for w, _ in points}
    if len(ws) < 2:
        w, y = max(points, key=lambda p: p[1])
        return (y, 0.05) if w == 0 else (0.2, y / w)
    n = len(points)
    mean_w = sum(w for w, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    var = sum((w - mean_w) ** 2 for w, _ in points)
    slope = max(0.0, sum((w - mean_w) * (y - mean_y) for w, y in points) / var)
    intercept = max(0.0, mean_y - slope * mean_w)
    worst = max(y - (intercept + slope * w) for w, y in points)
    return intercept + max(0.0, worst), slope
