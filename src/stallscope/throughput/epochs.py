"""The gap at an epoch boundary: from the last batch of epoch k to the first batch of epoch k+1.

This is what ``persistent_workers`` changes, and nothing else: steady-state
throughput is the same with and without it. Without it the DataLoader shuts
its workers down when an epoch ends and starts new ones for the next, so the
gap holds the shutdown, the start-up (re-importing or re-forking the dataset)
and the first batch. With it the workers stay, and the gap holds only the
first batch of the new epoch. The tuner measures both on the config it
recommends before it recommends the flag (issue 10, item 4).

Epochs here are short (a few batches per worker): the boundary costs the same
whatever the epoch's length, and short epochs keep the measurement cheap.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any

from ..config import LoaderConfig
from ..errors import PipelineError
from ..pipeline.loaders import build_loader, quiet_worker_warning
from ..runtime.processes import (
    describe_worker_death,
    is_worker_death,
    shutdown_iterator,
    stop_workers,
)
from ..target import Pipeline


@dataclass
class EpochGap:
    """Epoch-boundary gaps of one config (seconds, one per boundary)."""

    config: LoaderConfig
    gaps_s: list[float] = field(default_factory=list)
    batches_per_epoch: int = 0
    cost_s: float = 0.0
    error: str | None = None

    @property
    def median_s(self) -> float | None:
        return statistics.median(self.gaps_s) if self.gaps_s else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.config.label(),
            "gaps_s": [round(g, 4) for g in self.gaps_s],
            "median_s": None if self.median_s is None else round(self.median_s, 4),
            "batches_per_epoch": self.batches_per_epoch,
            "error": self.error,
        }


def epoch_batches(config: LoaderConfig) -> int:
    """Batches per short epoch: one per worker (each worker starts and serves), at least two, at
    most 16."""
    return max(2, min(16, config.num_workers))


def epoch_gap(
    pipeline: Pipeline,
    config: LoaderConfig,
    *,
    epochs: int = 3,
    batches_per_epoch: int | None = None,
    timeout: float = 30.0,
) -> EpochGap:
    """Run ``epochs`` short epochs of ``config`` and time each boundary between them.

    Map-style datasets only: an epoch of an IterableDataset ends where the
    stream does, which may be never. Raises :class:`PipelineError` when the
    pipeline fails.
    """
    result = EpochGap(config=config)
    length = pipeline.length()
    if pipeline.is_iterable or not length:
        result.error = "an IterableDataset has no epoch boundary to time"
        return result
    batches = batches_per_epoch or epoch_batches(config)
    result.batches_per_epoch = batches
    # Each iter() is a short epoch of the user's own batches (their sampler, re-iterated).
    loader = build_loader(pipeline, config, cycle=batches, timeout=timeout)
    started = time.perf_counter()
    iterator = None
    last: float | None = None
    try:
        for _ in range(epochs):
            with quiet_worker_warning():
                iterator = iter(loader)  # with persistent workers: the same workers, reset
            first = True
            for batch in iterator:
                now = time.perf_counter()
                del batch
                if first and last is not None:
                    result.gaps_s.append(now - last)
                first = False
                last = now
    except PipelineError:
        raise
    except Exception as exc:
        dead = stop_workers(iterator, exc) if iterator is not None else []  # NOTE [worker death]
        if dead or is_worker_death(exc):
            raise PipelineError(
                describe_worker_death(dead, f" with {config.label()}", exc)
            ) from exc
        raise PipelineError(
            f"{config.label()}: an epoch-boundary run failed: {type(exc).__name__}: {exc}"
        ) from exc
    finally:
        if iterator is not None:
            shutdown_iterator(iterator)
    result.cost_s = time.perf_counter() - started
    return result
