"""Analysis (pure): the worker run's raw totals -> the stage table, the transfer summary and
the augmentation overhead; which transforms count as augmentation.

NOTE [stages add up]
The stage times of one batch are bounded by what the same run measured: the
main process received a batch every ``batch_interval_ms``, so the stages that
run in the main process (deserialise, pin, host→device) cannot take longer
than that per batch, and those that run in the workers (read … collate,
serialise) cannot take longer than ``num_workers`` times that (each worker
makes one batch in ``num_workers`` intervals). A row that breaks its bound by
more than the noise (``STAGE_NOISE_SHARE`` plus ``STAGE_NOISE_MS``) measured
something else (a wait inside its clock: NOTE [deserialise timing] in
recorder.py); it is marked doubtful, largest first until the rest fit, and
left out of the shares instead of being printed as a cost.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ..errors import UsageError
from ..pipeline.transforms import TransformSlot
from ..stats import quantile
from ..text import plural
from .callees import CALLEE_MIN_SHARE, OTHER_TRACED, callee_label, is_callee
from .recorder import COLLATE, DECODE, OTHER, READ
from .results import (
    DESERIALISE,
    H2D,
    PIN,
    QUEUE,
    SERIALISE,
    AugmentationOverhead,
    RawStageTotals,
    StageTime,
)

# A side's stages may exceed its bound by this share plus this many ms per batch (timer and
# scheduling noise) before a row is doubtful (NOTE [stages add up]).
STAGE_NOISE_SHARE = 0.25
STAGE_NOISE_MS = 1.0

# Where each kind of stage runs, for the record's "where" key.
_WHERE = {
    "read": "worker",
    "decode": "worker",
    "user": "worker",
    "transform": "worker",
    "other": "worker",
    "call": "worker",
    "collate": "worker",
    "serialise": "worker",
    "queue": "worker→main",
    "deserialise": "main",
    "pin": "main",
    "h2d": "main",
}


def build_stage_table(
    raw: RawStageTotals,
    transforms: Sequence[str],
    random_transforms: Sequence[str] = (),
    *,
    in_process: bool = False,
) -> list[StageTime]:
    """Per-sample ms and shares, in pipeline order: read, decode, user stages, transforms,
    other and the calls broken out of it, collate, transfer, pin, host→device. Shares add
    up to 1. A call ``__getitem__`` made is a row of its own when it holds at least
    ``CALLEE_MIN_SHARE`` of the total, else its time goes back into ``other`` (whose
    p50/p90 then leave the folded calls out). ``in_process``: the run had no workers, so every
    stage ran in the main process."""
    per_sample = 1000.0 / max(1, raw.samples)
    seconds = dict(raw.stage_seconds)
    calls = {name: seconds.pop(name) * per_sample for name in list(seconds) if is_callee(name)}
    traced_rest = seconds.pop(OTHER_TRACED, 0.0) * per_sample
    rows: list[tuple[str, float, str]] = []

    def take(name: str, kind: str, *, always: bool = False) -> None:
        if name in seconds or always:
            rows.append((name, seconds.pop(name, 0.0) * per_sample, kind))

    take(READ, "read")
    take(DECODE, "decode")
    transform_set = set(transforms)
    for name in [n for n in list(seconds) if n not in transform_set and n not in (OTHER, COLLATE)]:
        take(name, "user")
    for name in transforms:
        take(name, "transform", always=True)
    take(OTHER, "other", always=bool(calls))
    take(COLLATE, "collate")
    if raw.transfer:
        rows.append((SERIALISE, raw.transfer.get("serialise_cpu", 0.0) * per_sample, "serialise"))
        rows.append((QUEUE, raw.transfer.get("queue", 0.0) * per_sample, "queue"))
        rows.append((DESERIALISE, raw.transfer.get("deserialise", 0.0) * per_sample, "deserialise"))
    if PIN in raw.main_seconds:
        rows.append((PIN, raw.main_seconds[PIN] * per_sample, "pin"))
    if H2D in raw.main_seconds:
        rows.append((H2D, raw.main_seconds[H2D] * per_sample, "h2d"))
    if calls or traced_rest:
        _break_out_calls(rows, calls, traced_rest, raw.sample_times)
    total = sum(ms for _, ms, _ in rows)
    random_set = set(random_transforms)
    # with calls broken out, other's own per-sample times are those of the traced fetches
    own = OTHER_TRACED if calls else OTHER
    return [
        StageTime(
            name=callee_label(name) if kind == "call" else name,
            ms_per_sample=ms,
            share=(ms / total) if total > 0 else 0.0,
            kind=kind,
            where="main" if in_process else _WHERE[kind],
            random=name in random_set,
            p50_ms=_percentile_ms(raw.sample_times.get(own if name == OTHER else name), 50),
            p90_ms=_percentile_ms(raw.sample_times.get(own if name == OTHER else name), 90),
            parent=OTHER if kind == "call" else None,
        )
        for name, ms, kind in rows
    ]


def mark_doubtful(
    table: Sequence[StageTime],
    *,
    batch_interval_ms: float | None,
    num_workers: int,
    samples_per_batch: float,
) -> list[StageTime]:
    """The table with the rows that cannot be right marked doubtful and the shares recomputed
    over the rest (NOTE [stages add up]). Unchanged without a measured interval."""
    rows = list(table)
    if not batch_interval_ms or batch_interval_ms <= 0 or samples_per_batch <= 0:
        return rows
    interval = batch_interval_ms
    if num_workers <= 0:
        sides = [("main", [r for r in rows if r.kind != "queue"], 1)]
    else:
        sides = [
            ("main", [r for r in rows if r.where == "main"], 1),
            ("worker", [r for r in rows if r.where == "worker"], num_workers),
        ]
    for side, members, parallel in sides:
        bound = parallel * interval * (1 + STAGE_NOISE_SHARE) + STAGE_NOISE_MS
        per_batch = sum(r.ms_per_sample for r in members) * samples_per_batch
        for row in sorted(members, key=lambda r: -r.ms_per_sample):
            if per_batch <= bound:
                break
            spent = row.ms_per_sample * samples_per_batch
            where = "the main process" if side == "main" else plural(parallel, "worker")
            row.doubtful = (
                f"{spent:.1f} ms per batch, but {where} received a batch every "
                f"{interval:.1f} ms in the same run"
                + (
                    f" ({parallel} × {interval:.1f} ms for the workers together)"
                    if side == "worker"
                    else ""
                )
                + ": its clock spans something else (a wait)"
            )
            per_batch -= spent
    kept = sum(r.ms_per_sample for r in rows if not r.doubtful)
    for r in rows:
        r.share = 0.0 if r.doubtful else (r.ms_per_sample / kept if kept > 0 else 0.0)
    return rows


def _break_out_calls(
    rows: list[tuple[str, float, str]],
    calls: dict[str, float],
    traced_rest: float,
    sample_times: dict[str, list[float]],
) -> None:
    """Split ``other`` of all fetches in the proportions the traced fetches measured (NOTE in
    callees.py); insert the calls holding ``CALLEE_MIN_SHARE`` of the total after ``other``,
    largest first, and put the time of the others back into ``other``.

    ``other`` of all fetches is read off the untraced ones, per sample, where there are both: the
    hook costs a Python call per call and return, so a traced fetch of a ``__getitem__`` that
    makes many small calls (pandas indexing) takes far longer than the fetch itself (a third
    longer on a pytorch-forecasting ``TimeSeriesDataSet``), and adding the traced fetches' time
    would put the hook's own cost into the table.

    Only part of the fetches is traced, so one stall in a traced fetch (the machine busy
    elsewhere) would count several times over in its call's estimate: the proportions use
    each part's per-sample times capped at their 95th percentile."""
    at = next(i for i, row in enumerate(rows) if row[0] == OTHER)
    name, untraced, kind = rows[at]
    traced = traced_rest + sum(calls.values())
    plain = len(sample_times.get(OTHER) or ())  # fetches without the hook
    hooked = len(sample_times.get(OTHER_TRACED) or ())
    whole = untraced * (plain + hooked) / plain if plain and hooked else untraced + traced
    weights = {n: ms * _robust_fraction(sample_times.get(n)) for n, ms in calls.items()}
    rest_weight = traced_rest * _robust_fraction(sample_times.get(OTHER_TRACED))
    weighed = rest_weight + sum(weights.values())
    scale = whole / weighed if weighed > 0 else 0.0
    estimated = {n: w * scale for n, w in weights.items()}
    total = sum(ms for _, ms, _ in rows) - untraced + whole
    kept = sorted(
        ((n, ms) for n, ms in estimated.items() if ms >= CALLEE_MIN_SHARE * total),
        key=lambda c: -c[1],
    )
    rows[at] = (name, whole - sum(ms for _, ms in kept), kind)
    rows[at + 1 : at + 1] = [(n, ms, "call") for n, ms in kept]


def _robust_fraction(values: Sequence[float] | None, q: float = 0.95) -> float:
    """The share of a per-sample series' sum left after capping it at its ``q`` quantile, the lower
    rank (an observed value: one stall in ten samples must not lift its own cap), 1.0 for fewer
    than 8 values (too few to call one an outlier)."""
    if not values or len(values) < 8:
        return 1.0
    ordered = sorted(values)
    cap = quantile(ordered, q, ordered=True, lower=True) or 0.0
    total = sum(ordered)
    return sum(min(v, cap) for v in ordered) / total if total > 0 else 1.0


def _percentile_ms(values: Sequence[float] | None, q: float) -> float | None:
    value = quantile(values or [], q / 100.0)
    return None if value is None else 1000.0 * value


def transfer_summary(raw: RawStageTotals) -> dict[str, Any] | None:
    """Per-batch transfer latencies (ms) and the mean batch size in bytes."""
    if not raw.transfer or raw.batches == 0:
        return None
    per_batch = 1000.0 / raw.batches
    return {
        "batches": raw.batches,
        "batch_bytes": raw.batch_bytes // max(1, raw.batches),
        "serialise_ms_per_batch": raw.transfer.get("serialise_cpu", 0.0) * per_batch,
        "serialise_wall_ms_per_batch": raw.transfer.get("serialise_wall", 0.0) * per_batch,
        "handoff_ms_per_batch": raw.transfer.get("handoff", 0.0) * per_batch,
        "queue_ms_per_batch": raw.transfer.get("queue", 0.0) * per_batch,
        "deserialise_ms_per_batch": raw.transfer.get("deserialise", 0.0) * per_batch,
        "deserialise_wait_ms_per_batch": raw.transfer.get("deserialise_wait", 0.0) * per_batch,
    }


def augmentation_from_stages(
    table: Sequence[StageTime],
    augmentations: Sequence[str],
    source: str,
) -> AugmentationOverhead | None:
    """The random transforms' share of the per-sample cost, from the stage table."""
    if not augmentations:
        return None
    wanted = set(augmentations)
    aug_ms = sum(s.ms_per_sample for s in table if s.name in wanted)
    total = sum(s.ms_per_sample for s in table)
    without = total - aug_ms
    percent = 100.0 * aug_ms / without if without > 0 else math.inf
    return AugmentationOverhead(
        ms_per_sample=aug_ms, percent=percent, transforms=list(augmentations), source=source
    )


def choose_augmentations(
    slots: Sequence[TransformSlot],
    *,
    augmentations: Sequence[str] | None = None,
    baseline_transforms: Sequence[str] | None = None,
) -> tuple[list[str], str]:
    """Names of the transforms counted as augmentation, and whether they were detected or given.

    ``augmentations`` names them directly; ``baseline_transforms`` names the ones the
    baseline keeps (everything else is augmentation). Names match a stage name or a
    class name, case-insensitively.
    """
    if augmentations and baseline_transforms:
        raise UsageError("give either --augmentations or --baseline-transforms, not both.")
    if augmentations is not None or baseline_transforms is not None:
        given = list(augmentations if augmentations is not None else baseline_transforms or [])
        matched = _match_names(slots, given)
        if baseline_transforms is not None:
            return [s.name for s in slots if s.name not in matched], "given"
        return [s.name for s in slots if s.name in matched], "given"
    return [s.name for s in slots if s.random], "detected"


def _match_names(slots: Sequence[TransformSlot], names: Sequence[str]) -> set[str]:
    matched: set[str] = set()
    for wanted in names:
        key = wanted.strip().lower()
        hits = {
            s.name
            for s in slots
            if s.name.lower() == key or s.name.split(" #")[0].split(".")[-1].lower() == key
        }
        if not hits:
            available = ", ".join(s.name for s in slots) or "none found"
            raise UsageError(
                f"no transform named {wanted!r} in the pipeline (transforms: {available})."
            )
        matched |= hits
    return matched
