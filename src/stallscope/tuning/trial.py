"""One measurement of one config (:class:`Trial`), the evaluator that takes it, and what a search returns.

Nothing here starts a worker: the search sees the pipeline only through an
:class:`Evaluator` (``measure`` one config, ``interleaved`` repeats of several,
and a clock), so the same strategy runs on real DataLoaders
(``tuner.LoaderEvaluator``) and on a simulated cost model with a fake clock (the tests).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..config import LoaderConfig
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
    worker_bytes: int | None = None  # measured private memory per worker
    cost_s: float = 0.0  # wall time the measurement took, start-up included
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.samples_per_s > 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "config": self.config.to_dict(),
            "label": self.config.label(),
            "samples_per_s": _round(self.samples_per_s, 2),
            "phase": self.phase,
            "startup_s": _round(self.startup_s, 4),
            "window_s": _round(self.window_s, 3),
            "batches": self.batches,
            "batch_ms": {"p50": _round(self.batch_p50_ms, 3), "p95": _round(self.batch_p95_ms, 3)},
            "rel_se": _round(self.rel_se, 4),
            "worker_mb": None if self.worker_bytes is None else round(self.worker_bytes / MB, 1),
            "cost_s": _round(self.cost_s, 3),
            "error": self.error,
        }


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(float(value), digits)


class Evaluator(Protocol):
    """What the search needs from the world: measurements and a clock."""

    def elapsed(self) -> float:
        """Seconds since tuning started."""
        ...

    def measure(self, config: LoaderConfig, *, window_s: float, phase: str) -> Trial: ...

    def interleaved(
        self, configs: Sequence[LoaderConfig], *, repeats: int, window_s: float, phase: str
    ) -> list[list[Trial]]:
        """``repeats`` rounds of A B … B A; the trials per config, in ``configs`` order."""
        ...


class InterleavingEvaluator:
    """``interleaved`` in terms of ``measure``, shared by the real and the simulated evaluator."""

    def measure(self, config: LoaderConfig, *, window_s: float, phase: str) -> Trial:
        raise NotImplementedError

    def interleaved(
        self, configs: Sequence[LoaderConfig], *, repeats: int, window_s: float, phase: str
    ) -> list[list[Trial]]:
        """``repeats`` rounds of A B … B A, so drift and order effects hit every config alike."""
        out: list[list[Trial]] = [[] for _ in configs]
        order = list(range(len(configs)))
        for _ in range(repeats):
            for index in order + order[::-1]:
                out[index].append(self.measure(configs[index], window_s=window_s, phase=phase))
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
    confidence: float
    region: Region
    trials: list[Trial]
    effects: list[Effect]
    notes: list[str]
    elapsed_s: float
    runner_up: LoaderConfig | None = None
    margin: float | None = None
    margin_interval: tuple[float, float] | None = None
    finalists: dict[str, float] = field(default_factory=dict)  # label -> median rate in the race
    rounds: int = 0
    noise: float | None = None  # median relative spread of raced configs
    startup_s: float | None = None  # the pick's measured start-up (time to first batch)
    memory: MemoryBudget | None = None

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
            "confidence": round(self.confidence, 3),
            "region": self.region.to_dict(),
            "runner_up": None if self.runner_up is None else self.runner_up.label(),
            "margin": _round(self.margin, 4),
            "margin_interval": None if self.margin_interval is None else [round(v, 4) for v in self.margin_interval],
            "finalists": {k: round(v, 2) for k, v in self.finalists.items()},
            "rounds": self.rounds,
            "noise": _round(self.noise, 4),
            "startup_s": _round(self.startup_s, 4),
            "elapsed_s": round(self.elapsed_s, 3),
            "notes": list(self.notes),
            "effects": [e.to_dict() for e in self.effects],
            "trials": [t.to_dict() for t in self.trials],
            "memory": None if self.memory is None else self.memory.to_dict(),
        }
