"""Rule (pure): memory of a pipeline's whole process tree read at each epoch's end -> a
``memory-growth`` finding when it keeps rising after the first epoch (NOTE [pipeline checks] in
``pipeline_checks.py``)."""

from __future__ import annotations

from typing import Any

from ..text import plural
from .findings import WARNING, Finding

# Growth over the judged epochs (after the first) below this is noise: allocator arenas, caches.
TREE_GROWTH_MIN_MB = 8.0
# The epochs judged (after the first, which fills caches) that must each end higher.
TREE_MIN_JUDGED_EPOCHS = 2


def _total(reading: dict[str, Any]) -> float:
    """The tree's own memory at one reading: USS (pages only it holds) where read, else RSS."""
    uss = reading.get("tree_uss_mb")
    return float(uss if uss is not None else reading.get("tree_rss_mb") or 0.0)


def detect_tree_memory_growth(probe: dict[str, Any] | None) -> list[Finding]:
    """A ``memory-growth`` finding when every epoch after the first ends with more memory in the
    pipeline's process tree, by at least ``TREE_GROWTH_MIN_MB`` in all."""
    if not probe:
        return []
    readings = list(probe.get("readings") or [])
    # The first epoch's end is the baseline (caches fill during that epoch); each later one is
    # judged against the one before.
    epochs = len(readings) - 1
    if epochs < TREE_MIN_JUDGED_EPOCHS:
        return []
    totals = [_total(r) for r in readings]
    steps = [b - a for a, b in zip(totals, totals[1:], strict=False)]
    grew = totals[-1] - totals[0]
    if grew < TREE_GROWTH_MIN_MB or any(step <= 0 for step in steps):
        return []
    per_epoch = grew / epochs
    last = readings[-1]
    measure = "USS" if last.get("tree_uss_mb") is not None else "RSS"
    at = probe.get("judged_at") or "epoch ends"
    unit = "epoch" if at == "epoch ends" else f"{probe.get('batches_per_reading')} batches"
    evidence = {
        "mb_per_epoch" if at == "epoch ends" else "mb_per_reading": round(per_epoch, 2),
        "grew_mb": round(grew, 1),
        "judged_at": at,
        "readings": len(readings),
        "measure": measure,
        "processes": last.get("processes"),
        "threads": last.get("threads"),
        "main_mb_start": readings[0].get("main_mb"),
        "main_mb_end": last.get("main_mb"),
        "children_mb_start": readings[0].get("children_mb"),
        "children_mb_end": last.get("children_mb"),
    }
    where = (
        "the main process (where the pipeline's threads run)"
        if (last.get("main_mb") or 0) - (readings[0].get("main_mb") or 0)
        >= (last.get("children_mb") or 0) - (readings[0].get("children_mb") or 0)
        else "the processes the pipeline started"
    )
    message = (
        f"The pipeline's processes and threads together hold {grew:.0f} MB more ({measure}) "
        f"after {plural(epochs, 'more ' + unit)} than after the first: "
        f"{per_epoch:.1f} MB per {unit}, rising at every reading, most of it in {where}."
    )
    fix = (
        "Find what the pipeline keeps from every item: a list or dict on the pipeline object or a "
        "module-level cache its map functions fill, results a pool keeps; bound it (an LRU of "
        "fixed size) or drop it when the epoch ends."
    )
    return [Finding("memory-growth", WARNING, message, evidence, fix)]
