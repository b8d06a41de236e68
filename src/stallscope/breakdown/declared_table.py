"""Analysis (pure): the calls of a pipeline's declared stages -> the stage table and how its
rows add up to the measured time per batch (NOTE [declared stages] in ``declared.py``)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ..text import plural
from .results import StageRun, StageTime
from .stage_clock import MAIN, PROCESS, StageCall

WAIT_PREFIX = "wait: "  # a node whose next() only takes what another thread made
BETWEEN = "between stages"  # the row of the time no declared stage was running anywhere


@dataclass
class DeclaredStageRun(StageRun):
    """The run of a graph or thread-pool pipeline: StageRun's figures and the per-batch sum."""

    # the declared stages' share of the time per batch (each instant of the window divided among
    # the stages running at it, in any thread or process)
    stage_ms_per_batch: float | None = None
    # the time per batch in which no declared stage ran anywhere: the hand-over between them
    between_ms_per_batch: float | None = None
    # stage_ms_per_batch / batch_interval_ms: the part of the batch time the declared stages
    # account for (the rest is between_ms_per_batch)
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


def wall_shares(
    calls: Iterable[StageCall], start: float, end: float
) -> tuple[dict[tuple[str, str], float], float]:
    """Each instant of ``[start, end]`` divided equally among the declared stages running at it
    (in any thread or process; waits are not running), and the seconds in which none ran.

    The shares and the idle time add up to the window by construction: stages that overlap (a
    mapper's threads decoding while the main thread collates, two mappers on the same cores)
    share the instants they overlap in instead of each claiming them, and the time when every
    runner is between stages (in a queue, pickling for another process, in the pipeline's own
    code) is counted once, as such.
    """
    events: list[tuple[float, int, tuple[str, str]]] = []
    for call in calls:
        if call.stage.startswith(WAIT_PREFIX):
            continue
        key = (call.stage, call.where)
        for s, e in call.own_spans():
            s, e = max(s, start), min(e, end)
            if e > s:
                events.append((s, 1, key))
                events.append((e, -1, key))
    events.sort(key=lambda ev: (ev[0], ev[1]))  # at one instant, ends before starts
    shares: dict[tuple[str, str], float] = {}
    active: dict[tuple[str, str], int] = {}
    running = 0
    idle = 0.0
    last = start
    for at, step, key in events:
        span = at - last
        if span > 0:
            if running == 0:
                idle += span
            else:
                for k, n in active.items():
                    if n:
                        shares[k] = shares.get(k, 0.0) + span * n / running
            last = at
        active[key] = active.get(key, 0) + step
        running += step
    idle += max(0.0, end - last)
    return shares, idle


def _where(where: str, runners: int) -> str:
    if where == MAIN:
        return "main"
    if where == PROCESS:
        return f"{runners} process{'es' if runners != 1 else ''}"
    return plural(runners, "thread")


def _percentile_ms(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, math.ceil(q / 100 * len(ordered)) - 1))
    return ordered[rank] * 1000


def declared_table(
    calls: Sequence[StageCall],
    *,
    samples: int,
    batches: int,
    window: tuple[float, float],
) -> tuple[list[StageTime], dict[str, Any]]:
    """Stage rows and the per-batch figures of a run whose batches came in ``window``.

    A row's time is its share of the window, each instant divided among the stages running at
    it (``wall_shares``), per sample (``ms_per_sample``) and per batch; the time no stage ran is
    a row of its own (``BETWEEN``), so the rows add up to the measured interval between batches.
    The calls that ended inside the window give each row's cost per call where it ran
    (``p50_ms``, ``p90_ms``) and, per row, its time per sample undivided
    (``call_ms_per_sample``) and divided among its runners (``busy_ms_per_batch``). Waits (a node
    taking what another thread made) are not rows: the main thread's is reported beside them.
    """
    start, end = window
    shares, idle = wall_shares(calls, start, end)
    ended = in_window(calls, start, end)
    groups: dict[tuple[str, str], list[StageCall]] = {}
    for call in ended:
        groups.setdefault((call.stage, call.where), []).append(call)
    per_sample = 1000.0 / max(1, samples)
    per_batch = 1000.0 / max(1, batches)
    window_s = max(0.0, end - start)
    main_wait_s: float | None = None  # None: no node the main thread waits in was timed
    rows: list[dict[str, Any]] = []
    for key in sorted(set(groups) | set(shares)):
        stage, where = key
        group = groups.get(key, [])
        total = sum(c.seconds for c in group)
        if stage.startswith(WAIT_PREFIX):
            if where == MAIN:
                main_wait_s = (main_wait_s or 0.0) + total
            continue
        runners = len({c.runner for c in group}) or 1
        rows.append(
            {
                "name": stage,
                "where": where,
                "runners": runners,
                "calls": len(group),
                "wall_s": shares.get(key, 0.0),
                "call_ms_per_sample": total * per_sample,
                "busy_ms_per_batch": total * per_batch / runners,
                "seconds": [c.seconds for c in group],
            }
        )
    rows.sort(key=lambda r: -r["wall_s"])
    stage_s = sum(r["wall_s"] for r in rows)
    table = [
        StageTime(
            name=r["name"],
            ms_per_sample=r["wall_s"] * per_sample,
            share=(r["wall_s"] / window_s) if window_s > 0 else 0.0,
            kind="user",
            where=_where(r["where"], r["runners"]),
            p50_ms=_percentile_ms(r["seconds"], 50),
            p90_ms=_percentile_ms(r["seconds"], 90),
        )
        for r in rows
    ]
    if rows and window_s > 0:
        table.append(
            StageTime(
                name=BETWEEN,
                ms_per_sample=idle * per_sample,
                share=idle / window_s,
                kind="handover",
                where="no stage running",
            )
        )
    interval_ms = window_s * per_batch if batches else None
    figures: dict[str, Any] = {
        "stage_ms_per_batch": stage_s * per_batch,
        "between_ms_per_batch": idle * per_batch,
        "adds_up": (stage_s * per_batch / interval_ms) if interval_ms else None,
        "main_wait_ms_per_batch": None if main_wait_s is None else main_wait_s * per_batch,
        "declared": [
            {
                "name": r["name"],
                "where": r["where"],
                "runners": r["runners"],
                "calls": r["calls"],
                "ms_per_batch": r["wall_s"] * per_batch,
                "busy_ms_per_batch": r["busy_ms_per_batch"],
                "call_ms_per_sample": r["call_ms_per_sample"],
            }
            for r in rows
        ],
    }
    return table, figures
