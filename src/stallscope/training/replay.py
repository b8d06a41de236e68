"""The training step with free data: cached batches replayed through the user's ``train_step``.

``profile`` keeps the first few batches its loop received and, once the loader is shut down,
runs ``train_step`` on them again and again. No loader runs meanwhile, so the step never waits
for data and shares no core with workers: its time is the exact upper bound of fixing the
loader, and ``batch_size / step`` is the rate the loader would have to deliver (the target rate
of the cores-needed estimate, ``analysis/ceiling.py``). Each replayed batch is moved to the
device inside the step, as in the profiled loop.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import PipelineError, describe_exception

CACHED_BATCHES = 8
WARMUP_STEPS = 2
MIN_STEPS = 5
MIN_WINDOW_S = 1.0
MAX_WINDOW_S = 10.0
MAX_STEPS = 500


def replay_free_data(
    step: Callable[[Any], Any],
    batches: Sequence[Any],
    *,
    sync: Callable[[], Any] | None = None,
    min_window_s: float = MIN_WINDOW_S,
    max_window_s: float = MAX_WINDOW_S,
    clock: Callable[[], float] = time.perf_counter,
    fixed_steps: int | None = None,
) -> dict[str, Any] | None:
    """``step(batch)`` over ``batches`` in turn: ``{free_data_step_s, free_data_steps, ...}``
    (median step time), or None without a batch. ``sync`` is called after each step (a device
    synchronise for honest timing). ``fixed_steps`` times exactly that many steps, whatever they
    take: under torchrun every rank must run as many steps as the others (a step's collectives
    would wait forever for a rank that stopped)."""
    if not batches:
        return None
    times: list[float] = []
    total = 0.0
    index = 0
    while True:
        batch = batches[index % len(batches)]
        start = clock()
        try:
            step(batch)
            if sync is not None:
                sync()
        except Exception as exc:
            raise PipelineError(
                f"train_step raised {describe_exception(exc)} replaying a cached batch."
            ) from exc
        elapsed = clock() - start
        index += 1
        if index <= WARMUP_STEPS:
            continue
        times.append(elapsed)
        total += elapsed
        if fixed_steps is not None:
            if len(times) >= fixed_steps:
                break
        elif (
            (len(times) >= MIN_STEPS and total >= min_window_s)
            or total >= max_window_s
            or len(times) >= MAX_STEPS
        ):
            break
    return {
        "free_data_step_s": statistics.median(times),
        "free_data_steps": len(times),
        "free_data_batches": len(batches),
        "free_data_mean_step_s": total / len(times),
    }
