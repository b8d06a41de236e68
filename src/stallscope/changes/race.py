"""Changed pipelines against the best knob config, in the same interleaved rounds.

Every entrant runs the best knob config (the tuner's pick); they differ only in the code change.
One round measures pick, change 1 … change n, then the same in reverse (A B … B A), so drift and
order effects hit every entrant alike; a change's speed-up is the median over rounds of its round
rate ÷ the pick's rate in that round (paired, as ``tuning.confidence`` pairs them).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..config import LoaderConfig
from ..errors import PipelineError
from ..target import Pipeline

PICK = "pick"


@dataclass
class Entrant:
    id: str
    pipeline: Pipeline
    main_step: Callable[[Any], Any] | None = None
    rates: list[float] = field(default_factory=list)  # one per round (mean of its two measurements)
    error: str | None = None


def race_pipeline(pipeline: Pipeline, dataset: Any, items: int) -> Pipeline:
    """The pipeline over the first ``items`` of ``dataset`` (the same items for every entrant), with
    the user's batch size, collate and worker init."""
    from torch.utils.data import Subset

    return replace(
        pipeline,
        dataset=Subset(dataset, range(items)),
        sampler=None,
        batch_sampler=None,
        generator=None,
    )


def fill(pipeline: Pipeline, config: LoaderConfig, *, timeout: float) -> tuple[float, int]:
    """One pass over ``pipeline``'s items with ``config`` (a cache's first pass): seconds, items."""
    import torch

    from ..pipeline.kinds import close_trial
    from ..pipeline.loaders import build_loader, close_threads
    from ..pipeline.structure import batch_length
    from ..runtime.processes import stop_workers

    loader = build_loader(pipeline, config, timeout=timeout)
    iterator = None
    threads = torch.get_num_threads()
    if config.torch_threads:  # as measure() runs the config
        torch.set_num_threads(config.torch_threads)
    seen = 0
    start = time.perf_counter()
    failure: BaseException | None = None
    try:
        iterator = iter(loader)
        for batch in iterator:
            seen += batch_length(batch)
    except BaseException as exc:
        failure = exc
        raise
    finally:
        if iterator is not None:
            stop_workers(iterator, failure)
        close_trial(loader, iterator)
        close_threads(loader)
        torch.set_num_threads(threads)
    return time.perf_counter() - start, seen


def run_race(
    entrants: Sequence[Entrant],
    config: LoaderConfig,
    *,
    deadline: float,
    max_rounds: int = 3,
    window_s: float = 0.6,
    timeout: float = 30.0,
    on_measure: Callable[[str, int], None] | None = None,
) -> int:
    """Interleaved rounds until ``max_rounds`` or until the next round would pass ``deadline``
    (at least one round). Returns the rounds run; each entrant's ``rates`` holds its round rates."""
    from ..throughput.measure import measure

    rounds = 0
    while rounds < max_rounds:
        alive = [e for e in entrants if e.error is None]
        if len(alive) < 2 or alive[0].id != PICK:
            break
        started = time.perf_counter()
        got: dict[str, list[float]] = {e.id: [] for e in alive}
        for entrant in [*alive, *reversed(alive)]:
            if entrant.error is not None:
                continue
            if on_measure is not None:
                on_measure(entrant.id, rounds + 1)
            try:
                m = measure(
                    entrant.pipeline,
                    config,
                    min_window_s=window_s,
                    max_window_s=3 * window_s,
                    min_batches=4,
                    timeout=timeout,
                    main_step=entrant.main_step,
                )
            except PipelineError as exc:
                entrant.error = str(exc)
                continue
            if m.samples_per_s > 0:
                got[entrant.id].append(m.samples_per_s)
        for entrant in alive:  # NaN keeps the rounds of every entrant aligned
            entrant.rates.append(statistics.fmean(got[entrant.id]) if got[entrant.id] else math.nan)
        rounds += 1
        cost = time.perf_counter() - started
        if time.perf_counter() + cost > deadline:
            break
    return rounds


def speedup(entrant: Entrant, pick: Entrant) -> float | None:
    """Median over rounds of the entrant's rate ÷ the pick's rate in the same round."""
    pairs = [
        a / b
        for a, b in zip(entrant.rates, pick.rates)
        if math.isfinite(a) and math.isfinite(b) and b > 0
    ]
    return statistics.median(pairs) if pairs else None


def speedup_interval(entrant: Entrant, pick: Entrant) -> tuple[float, float] | None:
    """The t-interval of the entrant's rate ÷ the pick's over the paired rounds, as the tuner's race
    states it (``tuning.confidence.margin_interval``); None below two rounds."""
    from ..tuning.confidence import margin_interval

    logs = [
        math.log(a / b)
        for a, b in zip(entrant.rates, pick.rates)
        if math.isfinite(a) and math.isfinite(b) and a > 0 and b > 0
    ]
    return margin_interval(logs)
