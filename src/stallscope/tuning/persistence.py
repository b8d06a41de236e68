"""Choices about what happens between epochs and at start-up: ``persistent_workers`` and the start
method.

Neither changes steady-state throughput, so the race cannot see them. Each is
changed only on its own measurement: the start method when another one
reaches the first batch clearly sooner, ``persistent_workers`` when the gap at
an epoch boundary (:mod:`stallscope.throughput.epochs`) is measurably shorter
with it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..config import LoaderConfig
from ..throughput.epochs import EpochGap
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
    config: LoaderConfig, without: EpochGap, with_: EpochGap, *, note: Callable[[str], None]
) -> tuple[LoaderConfig, dict[str, Any]]:
    """``config`` with persistent workers when the measured epoch-boundary gap says so, and the
    evidence."""
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
    if saved >= max(PERSISTENT_MIN_SAVING_S, PERSISTENT_MIN_FRACTION * b):
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
