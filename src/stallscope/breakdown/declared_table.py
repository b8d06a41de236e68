"""Analysis (pure): the calls of a pipeline's declared stages -> the stage table and how its
rows add up to the measured time per batch (NOTE [declared stages] in ``declared.py``)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from .results import StageRun, StageTime
from .stage_clock import MAIN, PROCESS, StageCall

WAIT_PREFIX = "wait: "  # a node whose next() only takes what another thread made


@dataclass
class DeclaredStageRun(StageRun):
    """The run of a graph or thread-pool pipeline: StageRun's figures and the per-batch sum."""

    # the stage rows' time per batch, each row divided among the threads or processes that ran it
    stage_ms_per_batch: float | None = None
    # stage_ms_per_batch / batch_interval_ms: 1.0 when the rows account for the batch time exactly
    adds_up: float | None = None
    # the main thread's time per batch waiting for what other threads or processes make
    main_wait_ms_per_batch: float | None = None
    declared: list[dict[str, Any]] = field(default_factory=list)  # per row: runners, calls
    kind: str = ""  # the loader kind whose stages these are

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def in_window(calls: Iterable[StageCall], start: float, end: float) -> list[StageCall]:
    """The calls that ended inside ``[start, end]`` (monotonic clock)."""
    return [c for c in calls if start <= c.ended <= end]


def _where(where: str, runners: int) -> str:
    if where == MAIN:
        return "main"
    if where == PROCESS:
        return f"{runners} process{'es' if runners != 1 else ''}"
    return f"{runners} thread{'s' if runners != 1 else ''}"


def _percentile_ms(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, math.ceil(q / 100 * len(ordered)) - 1))
    return ordered[rank] * 1000


def declared_table(
    calls: Sequence[StageCall], *, samples: int, batches: int, interval_ms: float | None
) -> tuple[list[StageTime], dict[str, Any]]:
    """Stage rows (ms per sample where each runs) and the per-batch figures of the run.

    A row's time per batch is its calls' time over the batches, divided among the threads or
    processes that ran it (they work side by side); the rows' sum is set against the measured
    interval between batches. Waits (a node taking what another thread made) are not rows: the
    main thread's is reported beside them.
    """
    groups: dict[tuple[str, str], list[StageCall]] = {}
    for call in calls:
        groups.setdefault((call.stage, call.where), []).append(call)
    per_sample = 1000.0 / max(1, samples)
    rows: list[tuple[str, str, float, float, list[float], int, int]] = []
    main_wait_s: float | None = None  # None: no node the main thread waits in was timed
    for (stage, where), group in groups.items():
        total = sum(c.seconds for c in group)
        if stage.startswith(WAIT_PREFIX):
            if where == MAIN:
                main_wait_s = (main_wait_s or 0.0) + total
            continue
        runners = len({c.runner for c in group})
        ms_per_batch = total * 1000.0 / max(1, batches) / max(1, runners)
        rows.append(
            (
                stage,
                where,
                total * per_sample,
                ms_per_batch,
                [c.seconds for c in group],
                runners,
                len(group),
            )
        )
    rows.sort(key=lambda r: -r[3])
    stage_ms = sum(r[3] for r in rows)
    table = [
        StageTime(
            name=stage,
            ms_per_sample=ms,
            share=(per_batch / stage_ms) if stage_ms > 0 else 0.0,
            kind="user",
            where=_where(where, runners),
            p50_ms=_percentile_ms(seconds, 50),
            p90_ms=_percentile_ms(seconds, 90),
        )
        for stage, where, ms, per_batch, seconds, runners, _n in rows
    ]
    figures: dict[str, Any] = {
        "stage_ms_per_batch": stage_ms,
        "adds_up": (stage_ms / interval_ms) if interval_ms else None,
        "main_wait_ms_per_batch": None
        if main_wait_s is None
        else main_wait_s * 1000.0 / max(1, batches),
        "declared": [
            {
                "name": stage,
                "where": where,
                "runners": runners,
                "calls": n,
                "ms_per_batch": per_batch,
            }
            for stage, where, _ms, per_batch, _s, runners, n in rows
        ],
    }
    return table, figures
