"""Choices about what happens between epochs and at start-up: ``persistent_workers`` and the start
method.

Neither changes steady-state throughput, so the race cannot see them. Each is
changed only on its own measurement: the start method when another one
reaches the first batch clearly sooner, ``persistent_workers`` when the gap at
an epoch boundary (:mod:`stallscope.throughput.epochs`) is measurably shorter
with it. The measurements are a phase of the search (after the race, NOTE [tuning strategy] in
search.py), run here over the :class:`~stallscope.tuning.search.Search` as the threads phase is
(``threads.explore_threads``).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..config import LoaderConfig
from ..thresholds import EPOCH_SHARE
from ..throughput.epochs import EpochGap, epoch_batches
from .trial import Trial

# persistent_workers is recommended when it saves at least this much per epoch boundary...
PERSISTENT_MIN_SAVING_S = 0.05
# ...and at least this fraction of the gap with it (a margin for the noise of single gaps).
PERSISTENT_MIN_FRACTION = 0.2
# A start method must reach the first batch this much sooner (fraction and seconds) to replace the
# default.
START_METHOD_MIN_FRACTION = 0.25
START_METHOD_MIN_SAVING_S = 0.1


def choose_persistent(
    config: LoaderConfig,
    without: EpochGap,
    with_: EpochGap,
    *,
    note: Callable[[str], None],
    epoch_s: float | None = None,
) -> tuple[LoaderConfig, dict[str, Any]]:
    """``config`` with persistent workers when the measured epoch-boundary gap says so, and the
    evidence. The saving must reach ``PERSISTENT_MIN_SAVING_S``, or, where the epoch is short
    (``epoch_s`` at the config's rate), ``EPOCH_SHARE`` of it: 0.04 s saved on a 0.08 s epoch is
    a third of the loop's time."""
    a, b = without.median_s, with_.median_s
    evidence: dict[str, Any] = {
        "measured_on": config.label(),
        "gap_without_s": None if a is None else round(a, 4),
        "gap_with_s": None if b is None else round(b, 4),
        "saved_s": None,
        "boundaries": min(len(without.gaps_s), len(with_.gaps_s)),
        "batches_per_epoch": without.batches_per_epoch,
        "recommended": False,
        "error": without.error or with_.error,
    }
    if a is None or b is None:
        note(
            f"persistent_workers was not measured ({evidence['error'] or 'no epoch boundary'}), so "
            "it is not recommended"
        )
        return config, evidence
    saved = a - b
    evidence["saved_s"] = round(saved, 4)
    floor = PERSISTENT_MIN_SAVING_S
    if epoch_s is not None and epoch_s > 0:
        floor = min(floor, EPOCH_SHARE * epoch_s)
    if saved >= max(floor, PERSISTENT_MIN_FRACTION * b):
        evidence["recommended"] = True
        note(
            f"persistent_workers=True: the gap at an epoch boundary measured {a:.2f} s without it "
            f"and {b:.2f} s with it ({config.num_workers} workers), {saved:.2f} s saved per epoch"
        )
        return config.replace(persistent_workers=True), evidence
    note(
        f"persistent_workers not recommended: the gap at an epoch boundary measured {a:.2f} s "
        f"without it and {b:.2f} s with it"
    )
    return config, evidence


def choose_start_method(
    pick: LoaderConfig,
    contexts: Sequence[str],
    startup_pair: Callable[[LoaderConfig, str], tuple[LoaderConfig, LoaderConfig]],
    scan: Mapping[LoaderConfig, Trial],
    *,
    note: Callable[[str], None],
) -> LoaderConfig:
    """Another start method replaces the default only when it starts clearly faster at the same
    worker count."""
    if pick.num_workers == 0:
        return pick
    for ctx in contexts:
        parent, variant = startup_pair(pick, ctx)
        a, b = scan.get(parent), scan.get(variant)
        if (
            a is None
            or b is None
            or not a.ok
            or not b.ok
            or a.startup_s is None
            or b.startup_s is None
        ):
            continue
        if (
            b.startup_s < a.startup_s * (1 - START_METHOD_MIN_FRACTION)
            and a.startup_s - b.startup_s >= START_METHOD_MIN_SAVING_S
        ):
            note(
                f"start method {ctx!r} reached the first batch in {b.startup_s:.2f} s vs "
                f"{a.startup_s:.2f} s with {parent.num_workers} workers"
            )
            return pick.replace(multiprocessing_context=ctx)
    return pick


# -- measuring them, a phase of the search -------------------------------------------------------


def start_method_pair(
    search: Any, pick: LoaderConfig, ctx: str
) -> tuple[LoaderConfig, LoaderConfig]:
    """Start methods are compared at min(workers, cores): start-up per worker, cheaply."""
    n = max(1, min(pick.num_workers, search.space.cores))
    parent = search.workers(n)
    return parent, parent.replace(multiprocessing_context=ctx)


def measure_start_methods(search: Any, pick: LoaderConfig) -> None:
    """Time to first batch under other start methods (paid every epoch without persistent
    workers)."""
    if pick.num_workers == 0 or not search.space.contexts:
        return
    # Persistent workers pay start-up once per run: only worth measuring with budget to spare.
    if search.ev.elapsed() > 0.75 * search.settings.budget_s:
        search._note("time budget: did not compare start methods")
        return
    for ctx in search.space.contexts:
        parent, variant = start_method_pair(search, pick, ctx)
        own = search._scan.get(parent)
        if own is None or not own.ok or variant in search._scan:
            continue
        # Other start methods may import the pipeline anew in every worker: budget generously.
        if not search.affordable(
            search.estimate_cost(variant, search.settings.scan_window_s)
            + 5 * (own.startup_s or 0.5)
        ):
            search._note("time budget: did not compare start methods")
            return
        trial = search.ev.measure(variant, window_s=search.settings.scan_window_s, phase="startup")
        search._record(trial)
        search._scan[variant] = trial


def measure_persistent(
    search: Any, chosen: LoaderConfig
) -> tuple[LoaderConfig, dict[str, Any] | None]:
    """Measure the epoch-boundary gap of ``chosen`` with and without persistent workers, then
    decide (:func:`choose_persistent`)."""
    if chosen.num_workers == 0 or chosen.persistent_workers or not search.space.persistent_workers:
        return chosen, None
    epoch_s = epoch_seconds(search, chosen)
    if not search.affordable(epoch_gap_cost(search, chosen)):
        persisted = persist_by_startup(search, chosen, epoch_s)
        if persisted is not None:
            return persisted, None
        search._note("time budget: persistent_workers was not measured, so it is not recommended")
        search._skip(
            chosen.replace(persistent_workers=True),
            "epoch-boundary gap not measured: the time budget ran out",
        )
        return chosen, None
    epochs = search.settings.epoch_gap_epochs
    without = search.ev.epoch_gap(chosen, epochs=epochs)
    with_ = search.ev.epoch_gap(chosen.replace(persistent_workers=True), epochs=epochs)
    return choose_persistent(chosen, without, with_, note=search._note, epoch_s=epoch_s)


def epoch_seconds(search: Any, config: LoaderConfig) -> float | None:
    """The user's epoch in seconds at ``config``'s measured rate (its length as the trials
    recorded it: NOTE [per-epoch rate]); None where neither is known."""
    lengths = [t.epoch_samples for t in search.trials if t.ok and t.epoch_samples]
    rate: float = search.rate(config)
    return statistics.median(lengths) / rate if lengths and rate > 0 else None


def persist_by_startup(
    search: Any, chosen: LoaderConfig, epoch_s: float | None
) -> LoaderConfig | None:
    """``chosen`` with persistent workers where the epoch-boundary gap could not be measured (the
    budget ran out) but its measured start-up is at least ``EPOCH_SHARE`` of its epoch
    (``epoch_s``): a loop re-iterating the loader would pay it at every epoch. None otherwise."""
    startup = startup_of(search.trials, chosen)
    if epoch_s is None or startup is None:
        return None
    share = startup / (startup + epoch_s)
    if share < EPOCH_SHARE:
        return None
    search._note(
        f"persistent_workers=True: an epoch of {round(epoch_s * search.rate(chosen))} samples "
        f"takes {epoch_s:.2f} s at {chosen.label()}'s rate, and starting its "
        f"{chosen.num_workers} workers took {startup:.2f} s ({share:.0%} of the epoch with it), "
        "which a loop re-iterating the loader would pay at every epoch"
    )
    return chosen.replace(persistent_workers=True)


def epoch_gap_cost(search: Any, config: LoaderConfig) -> float:
    """Seconds the two epoch-boundary runs of ``config`` take: short epochs at the measured
    rate, and a start-up (plus half as much for the shutdown) per epoch without persistence,
    once with it."""
    rate: float = search.rate(config)
    batch_s = (
        config.batch_size / rate if rate > 0 else search.profile.batch_seconds(config.batch_size)
    )
    startup = startup_of(search.trials, config) or 0.5
    epochs: int = search.settings.epoch_gap_epochs
    restarts = 1.5 * startup * (epochs + 1)
    return restarts + 2 * epochs * epoch_batches(config) * batch_s + 0.5


def startup_of(trials: Sequence[Trial], config: LoaderConfig) -> float | None:
    """The median time to first batch measured for ``config``."""
    values = [
        t.startup_s for t in trials if t.config == config and t.ok and t.startup_s is not None
    ]
    return statistics.median(values) if values else None
