"""Memory drift over the time windows of a long training run (``watch``/``profile``). Pure
functions.

Each window holds the memory of the main process and of each loader worker
at the window's end (RSS every reading, USS where it was read). Per process
the readings are judged by ``check``'s memory-growth rule
(:mod:`stallscope.growth`) against the samples the process saw, and
fitted against time for a rate per hour:

- ``growing``: it grew by at least the rule's minimum and keeps growing;
- ``plateaued``: it grew, then levelled off (past ``PLATEAU_AFTER_PASSES`` passes over the data);
- ``flat``: it never grew by the rule's minimum.

What is judged is memory a process made, not pages it maps (NOTE [memory a
process made]): per process its anonymous memory (RSS less the pages of files
and shared memory), and per worker also its private dirty pages, which copies
on write raise while its RSS stays flat. Records from before these readings
are judged on RSS and USS.

A worker's samples are the run's samples divided by the number of workers
(a DataLoader hands batches to its workers in turn). Without a batch size the
x axis is steps, and the per-1,000 figures are per 1,000 steps.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..growth import (
    GROWTH_MIN_POINTS,
    NATIVE_MIN_MB,
    PLATEAU_AFTER_PASSES,
    channel_growth,
    grows,
)
from ..record.model import Window, windows_of
from ..stats import linear_fit, round_or_none

GROWING, PLATEAUED, FLAT = "growing", "plateaued", "flat"


def judge_channel(
    xs: Sequence[float],
    hours: Sequence[float],
    ys: Sequence[float | None],
    pass_x: float | None,
    *,
    minimum_mb: float = NATIVE_MIN_MB,
) -> dict[str, Any] | None:
    """One process's memory (MB) against its samples ``xs`` and the run's ``hours``: verdict and
    rates.

    RSS and USS hold the whole process (Python heap, native memory, allocator
    slack), so the minimum is the rule's native one. None below
    ``GROWTH_MIN_POINTS`` readings.
    """
    points = [(x, h, y) for x, h, y in zip(xs, hours, ys) if y is not None]
    if len(points) < GROWTH_MIN_POINTS:
        return None
    px, ph, py = [p[0] for p in points], [p[1] for p in points], [p[2] for p in points]
    channel = channel_growth(px, py, pass_x, minimum_mb)
    per_hour = linear_fit(ph, py)[0] if ph[-1] > ph[0] else None
    if not grows(channel, minimum_mb):
        verdict = FLAT
    elif channel["plateaued_after"] is not None:
        verdict = PLATEAUED
    else:
        verdict = GROWING
    return {
        "verdict": verdict,
        "mb_per_hour": round_or_none(per_hour, 2),
        "mb_per_1000": round(channel["mb_per_1000"], 3),
        "after_plateau_mb_per_1000": round_or_none(channel["after_plateau_mb_per_1000"], 3),
        "plateaued_after": round_or_none(channel["plateaued_after"]),
        "grew_mb": round(channel["grew_mb"], 1),
        "start_mb": round(py[0], 1),
        "end_mb": round(py[-1], 1),
        "r2": round(channel["r2"], 3),
        "points": len(points),
    }


def memory_drift(
    windows: Sequence[Window | Mapping[str, Any]], *, pass_samples: float | None = None
) -> dict[str, Any] | None:
    """The ``memory_drift`` entry of a profile from its ``windows`` (None without memory readings).

    ``pass_samples``: one epoch of the run, in samples (steps without a batch
    size), for the plateau test; unknown (a stream), the run is judged as if
    its first two thirds were one pass, so a plateau needs the last third flat.
    """
    rows = [
        w for w in filter(None, map(Window.of, windows)) if w.main_rss_mb is not None and w.end_step
    ]
    if not rows:
        return None
    by_samples = all(w.end_samples is not None for w in rows)
    xs = [float((w.end_samples if by_samples else w.end_step) or 0) for w in rows]
    hours = [float(w.end_s or 0.0) / 3600 for w in rows]
    pass_x = pass_samples if pass_samples else xs[-1] / PLATEAU_AFTER_PASSES
    anon, _ = _made([w.main_anon_mb for w in rows], [w.main_rss_mb for w in rows])
    main = judge_channel(xs, hours, anon, pass_x)
    n_workers = max((len(w.workers) for w in rows), default=0)
    workers: list[dict[str, Any]] = []
    channels: list[tuple[str, dict[str, Any] | None]] = [("main process", main)]
    for k in range(n_workers):
        share = [x / n_workers for x in xs]
        readings = [w.worker(k) for w in rows]
        anon, made = _made([r.anon_mb for r in readings], [r.rss_mb for r in readings])
        dirty, _ = _made([r.dirty_mb for r in readings], [r.uss_mb for r in readings])
        anon_judged = judge_channel(share, hours, anon, pass_x / n_workers)
        dirty_judged = judge_channel(share, hours, dirty, pass_x / n_workers)
        workers.append({"worker": k, "anon": anon_judged, "dirty": dirty_judged})
        channels += [
            (f"worker {k} {'anonymous' if made else 'RSS'}", anon_judged),
            (f"worker {k} {'private dirty' if made else 'USS'}", dirty_judged),
        ]
    judged = [(name, ch) for name, ch in channels if ch is not None]
    if not judged:
        return {
            "verdict": None,
            "reason": f"fewer than {GROWTH_MIN_POINTS} windows with memory readings",
            "windows": len(rows),
            "per": "samples" if by_samples else "steps",
            "main": None,
            "workers": workers,
            "growing": [],
            "minimum_mb": NATIVE_MIN_MB,
        }
    growing = [name for name, ch in judged if ch["verdict"] == GROWING]
    plateaued = [name for name, ch in judged if ch["verdict"] == PLATEAUED]
    verdict = GROWING if growing else PLATEAUED if plateaued else FLAT
    return {
        "verdict": verdict,
        "reason": None,
        "windows": len(rows),
        "per": "samples" if by_samples else "steps",
        "pass_samples": round_or_none(pass_samples),
        "minimum_mb": NATIVE_MIN_MB,
        "main": main,
        "workers": workers,
        "growing": growing,
        "plateaued": plateaued,
        "worst": _worst(judged),
    }


def _made(made: list[float | None], whole: list[float | None]) -> tuple[list[float | None], bool]:
    """The readings of memory a process made where the record has them, else the older whole
    readings (RSS, USS) of a record from before them; and which it is (True: made)."""
    have = any(v is not None for v in made)
    return (made if have else whole), have


def _worst(judged: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """The channel to headline: a growing one first, anonymous memory before private dirty pages
    (an allocation raises both, so the headline would otherwise flip between them), then the
    largest rate per hour."""
    order = {GROWING: 0, PLATEAUED: 1, FLAT: 2}
    name, ch = min(
        judged,
        key=lambda c: (
            order[c[1]["verdict"]],
            c[0].endswith((" USS", " private dirty")),
            -(c[1]["mb_per_hour"] or 0.0),
        ),
    )
    return {"process": name, **ch}


def slowest_rank_per_window(per_rank: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Across ranks, per window index: the rank that waited longest for data, and the job's worst
    stall.

    ``per_rank``: ``{"rank": r, "windows": [{index, data_wait_s, stall_fraction, ...}]}`` per rank.
    Windows are aligned by index (each rank counts its windows from its first batch request).
    """
    by_index: dict[int, list[tuple[Any, Window]]] = {}
    for entry in per_rank:
        for w in windows_of(entry):
            if w.index is not None:
                by_index.setdefault(w.index, []).append((entry.get("rank"), w))
    rows = []
    for index in sorted(by_index):
        ranks = [(r, w) for r, w in by_index[index] if w.data_wait_s is not None]
        if not ranks:
            continue
        rank, worst = max(ranks, key=lambda rw: rw[1].data_wait_s or 0.0)
        stalls = [w.stall_fraction for _, w in ranks if w.stall_fraction is not None]
        rows.append(
            {
                "index": index,
                "slowest_rank": rank,
                "max_data_wait_s": worst.data_wait_s,
                "max_stall_fraction": max(stalls) if stalls else None,
                "ranks": len(ranks),
            }
        )
    return rows
