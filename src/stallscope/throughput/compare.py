"""Two pipelines raced in paired rounds (``stallscope compare``), NOTE [paired comparison] in
analysis/comparison.py.

Each window is one :func:`~stallscope.throughput.measure.measure` of one side:
a fresh loader, its start-up and prefetch buffer kept out of the window. A
round is four windows, A B B A (odd rounds B A A B, so neither side always
goes first). After every round the paired ratio's interval is recomputed
(pure, in ``stallscope.stats``; ``analysis.comparison`` judges the rounds
from the record); the run stops when it is narrower than ``precision``, or at
the budget: once ``min_rounds`` are done, before a round that would end past
it; before that, when it is spent.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..config import LoaderConfig
from ..stats import paired_log_ratios, precise_enough, quantile, rounds_needed
from ..target import Pipeline
from ..thresholds import CONFIDENCE_LEVEL, TIE_MARGIN
from .measure import Measurement, measure

SIDES = ("a", "b")
# The interval is stated at stallscope's claim level, and the rounds stop once it is as tight as the
# tie margin (a closer call than the tuner's own tie would change no decision).
DEFAULT_LEVEL, DEFAULT_PRECISION = CONFIDENCE_LEVEL, TIE_MARGIN
# No interval before this many rounds (the spread is the rounds' own: stats.rounds_needed).
MIN_ROUNDS = rounds_needed(0.0)
STOP_PRECISION, STOP_BUDGET, STOP_MAX_ROUNDS = "precision", "budget", "max-rounds"


def window_figures(m: Measurement) -> dict[str, Any]:
    """One window as the record keeps it (``rounds[i].a[j]``): the rate and the per-side figures."""
    res = m.resources
    cpu_ms = None
    if res is not None and m.samples > 0 and m.window_s > 0:
        cpu_ms = (
            (res.main_cpu_percent + res.workers_cpu_percent)
            / 100.0
            * m.window_s
            * 1000.0
            / m.samples
        )
    return {
        "samples_per_s": m.samples_per_s,
        "batches_per_s": m.batches_per_s,
        "batch_ms_p95": quantile(m.batch_ms, 0.95),
        "cpu_ms_per_sample": cpu_ms,
        "workers_rss_mb": res.workers_rss_mb if res is not None and res.n_workers else None,
        "worker_uss_mb": res.worker_uss_mb if res is not None and res.n_workers else None,
        "main_rss_mb": res.main_rss_mb if res is not None else None,
        "window_s": m.window_s,
        "samples": m.samples,
        "batches": m.batches,
        "startup_s": m.startup_s,
    }


@dataclass
class ComparisonRun:
    """The rounds raced, in order; each ``{"order": "ABBA", "a": [window, window], "b": [...]}``."""

    config_a: LoaderConfig
    config_b: LoaderConfig
    rounds: list[dict[str, Any]] = field(default_factory=list)
    stopped: str | None = None
    seconds: float = 0.0
    window_s: float = 0.0
    budget_s: float = 0.0
    precision: float = DEFAULT_PRECISION
    level: float = DEFAULT_LEVEL

    def to_dict(self) -> dict[str, Any]:
        return {
            "configs": {"a": self.config_a.to_dict(), "b": self.config_b.to_dict()},
            "labels": {"a": self.config_a.label(), "b": self.config_b.label()},
            "rounds": self.rounds,
            "stopped": self.stopped,
            "comparison_seconds": self.seconds,
            "settings": {
                "window_s": self.window_s,
                "budget_s": self.budget_s,
                "precision": self.precision,
                "level": self.level,
            },
        }


def round_order(index: int) -> str:
    """A B B A for even rounds, B A A B for odd ones."""
    return "ABBA" if index % 2 == 0 else "BAAB"


def compare(
    a: Pipeline,
    b: Pipeline,
    *,
    config_a: LoaderConfig | None = None,
    config_b: LoaderConfig | None = None,
    precision: float = DEFAULT_PRECISION,
    level: float = DEFAULT_LEVEL,
    budget_s: float = 60.0,
    window_s: float = 0.5,
    min_rounds: int = MIN_ROUNDS,
    max_rounds: int = 1000,
    timeout: float = 60.0,
    sample_resources: bool = True,
    on_window: Callable[[int, str, dict[str, Any]], None] | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> ComparisonRun:
    """Race ``a`` and ``b`` (each at its own baseline config unless given) until the ratio is
    precise enough.

    ``on_window(round, side, window)`` follows every window (progress). Ctrl-C raises
    KeyboardInterrupt with ``.partial`` set to the run so far.
    """
    run = ComparisonRun(
        config_a=config_a or a.baseline,
        config_b=config_b or b.baseline,
        window_s=window_s,
        budget_s=budget_s,
        precision=precision,
        level=level,
    )
    pipelines = {"a": a, "b": b}
    configs = {"a": run.config_a, "b": run.config_b}
    start = clock()
    try:
        for index in range(max_rounds):
            order = round_order(index)
            current: dict[str, Any] = {"order": order, "a": [], "b": []}
            for letter in order:
                side = letter.lower()
                m = measure(
                    pipelines[side],
                    configs[side],
                    min_window_s=window_s,
                    max_window_s=max(10.0, 4 * window_s),
                    timeout=timeout,
                    sample_resources=sample_resources,
                    seed=index,
                )
                window = window_figures(m)
                current[side].append(window)
                if on_window is not None:
                    on_window(index, side, window)
            run.rounds.append(current)
            elapsed = clock() - start
            run.seconds = elapsed
            done = len(run.rounds)
            if done >= min_rounds and precise_enough(
                paired_log_ratios(run.rounds, "samples_per_s"), precision, level
            ):
                run.stopped = STOP_PRECISION
                break
            # Past min_rounds, no round that would end after the budget; before, only the budget
            # itself stops the run (an interval needs min_rounds: the budget may be overrun by one
            # round).
            if elapsed >= budget_s or (done >= min_rounds and elapsed + elapsed / done > budget_s):
                run.stopped = STOP_BUDGET
                break
        else:
            run.stopped = STOP_MAX_ROUNDS
    except KeyboardInterrupt as interrupt:
        run.seconds = clock() - start
        interrupt.partial = run  # type: ignore[attr-defined]
        raise
    run.seconds = clock() - start
    return run


def rounds_for(budget_s: float, window_s: float) -> int:
    """About how many rounds fit a budget (for a progress bar's total)."""
    return max(1, math.floor(budget_s / max(1e-3, 4 * window_s * 1.5)))
