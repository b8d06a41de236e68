"""Pure summaries of what a :class:`~stallscope.training.watch.Watch` recorded (tested with exact
numbers).

Per-step arrays in, the figures of the ``profile`` section out: steady-state
stall fraction, distributions, each epoch's first batch, buffer occupancy and
what synchronising cost. Nothing here measures, prints or judges: the verdict and the advice
are :mod:`stallscope.analysis.training`'s, from these figures; the context :func:`loader_context`
reads from the loader and the host is recorded with the figures, for the advice analysis derives
from them.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ..stats import quantile, round_or_none

# Per-step series longer than this are averaged into buckets for the plots.
TIMELINE_POINTS = 2000


def summarize_steps(
    *,
    data_s: list[float],
    compute_s: list[float],
    epoch_starts: list[int],
    warmup: int = 0,
    with_timeline: bool = True,
) -> dict[str, Any]:
    """Steady-state stall figures from per-step data wait and compute (seconds)."""
    n = len(data_s)
    compute_full = list(compute_s) + [math.nan] * (n - len(compute_s))
    closed = [math.isfinite(c) for c in compute_full]
    mask = steady_mask(n, epoch_starts, warmup, closed)
    steady_data = [d for d, m in zip(data_s, mask) if m]
    steady_compute = [c for c, m in zip(compute_full, mask) if m]
    data_total = sum(steady_data)
    compute_total = sum(steady_compute)
    total = data_total + compute_total
    stall = data_total / total if total > 0 else None
    firsts = [data_s[i] for i in epoch_starts if i < n]
    wall = sum(data_s) + sum(c for c in compute_full if math.isfinite(c))
    data_dist = distribution_ms(steady_data)
    compute_dist = distribution_ms(steady_compute)
    step_dist = distribution_ms([d + c for d, c in zip(steady_data, steady_compute)])
    profile: dict[str, Any] = {
        "steps": len(steady_data),  # the steps the figures cover (steady state)
        "total_steps": n,  # all recorded, with warm-up and each epoch's first batch
        "warmup_steps": min(warmup, n),
        "epochs": len(epoch_starts),
        "stall_fraction": round(stall, 4) if stall is not None else None,
        "what_if_speedup": round_or_none(what_if_speedup(total, compute_total), 3),
        "data_ms": data_dist.to_dict() if data_dist else None,
        "compute_ms": compute_dist.to_dict() if compute_dist else None,
        "step_ms": step_dist.to_dict() if step_dist else None,
        "steps_per_s": round(len(steady_data) / total, 3) if total > 0 else None,
        "first_batch_s": round(firsts[0], 4) if firsts else None,
        "epoch_start_s": [round(f, 4) for f in firsts],
        "startup_share": round(sum(firsts) / wall, 4) if wall > 0 and firsts else None,
        "wall_s": round(wall, 4),
    }
    if with_timeline:
        profile["step_timeline"] = timeline(data_s, compute_full)
    return profile


def what_if_speedup(total_s: float, compute_s: float) -> float | None:
    """Speed-up of the same steps if data were free: total / compute."""
    if total_s <= 0 or compute_s <= 0:
        return None
    return total_s / compute_s


@dataclass
class Distribution:
    """Summary of one per-step series in milliseconds."""

    mean: float
    p50: float
    p95: float
    max: float
    total_s: float

    def to_dict(self) -> dict[str, float]:
        return {k: round(v, 4) for k, v in asdict(self).items()}


def distribution_ms(values_s: Sequence[float]) -> Distribution | None:
    """Mean, p50, p95, max (ms) and total (s) of ``values_s`` given in seconds."""
    finite = sorted(v for v in values_s if math.isfinite(v))
    if not finite:
        return None
    ms = [v * 1000.0 for v in finite]
    return Distribution(
        mean=sum(ms) / len(ms),
        p50=quantile(ms, 0.5, ordered=True) or 0.0,
        p95=quantile(ms, 0.95, ordered=True) or 0.0,
        max=ms[-1],
        total_s=math.fsum(finite),
    )


def steady_mask(
    n_steps: int, epoch_starts: Sequence[int], warmup: int, closed: Sequence[bool]
) -> list[bool]:
    """Steps that count for steady state: closed, past warm-up, not an epoch's first."""
    first = set(epoch_starts)
    return [bool(closed[i]) and i >= warmup and i not in first for i in range(n_steps)]


def timeline(
    data_s: Sequence[float], compute_s: Sequence[float], points: int = TIMELINE_POINTS
) -> dict[str, Any]:
    """Per-step series in ms for plots, averaged into buckets of ``stride`` steps when long."""
    import numpy as np

    n = len(data_s)
    stride = max(1, math.ceil(n / points)) if n else 1

    def bucket(values: Sequence[float]) -> list[float | None]:
        arr = np.asarray(values, dtype=float) * 1000.0
        if stride == 1:
            return [round(float(v), 4) if math.isfinite(v) else None for v in arr]
        out: list[float | None] = []
        for start in range(0, n, stride):
            chunk = arr[start : start + stride]
            chunk = chunk[np.isfinite(chunk)]
            out.append(round(float(chunk.mean()), 4) if chunk.size else None)
        return out

    return {"data_ms": bucket(data_s), "compute_ms": bucket(compute_s), "stride": stride}


def loader_context(loader: Any) -> dict[str, Any]:
    """What the advice needs besides the steps: usable cores, ranks per host, epochs, config."""
    from ..runtime.distributed import rank_info
    from ..runtime.host import usable_cores

    ctx: dict[str, Any] = {
        "cores": usable_cores(),
        "local_world_size": rank_info().local_world_size,
    }
    with contextlib.suppress(Exception):
        ctx["epoch_steps"] = len(loader)
    with contextlib.suppress(Exception):
        from torch.utils.data import DataLoader

        if isinstance(loader, DataLoader):
            from ..config import config_from_loader

            config = config_from_loader(loader)
            ctx["config"] = config.to_dict()
            ctx["config_label"] = config.label()
    return ctx


def epoch_startup(profile: dict[str, Any], epoch_steps: int | None) -> dict[str, Any]:
    """The first batch's share of one whole epoch of ``epoch_steps`` steady steps.

    A short measurement overstates start-up (one first batch against a few
    dozen steps); what matters is its cost against a real epoch.
    """
    first = profile.get("first_batch_s")
    step = (profile.get("step_ms") or {}).get("mean")
    if not epoch_steps or first is None or step is None:
        return {"epoch_steps": epoch_steps, "startup_share_per_epoch": None}
    epoch_s = epoch_steps * step / 1000.0
    return {
        "epoch_steps": epoch_steps,
        "startup_share_per_epoch": round(first / (first + epoch_s), 4),
    }


def occupancy_summary(ready: list[int], capacity: int | None) -> dict[str, Any] | None:
    """Mean ready batches and how often the buffer was empty / full, from background samples."""
    if not ready or not capacity:
        return None
    n = len(ready)
    mean_ready = sum(ready) / n
    return {
        "capacity": capacity,
        "mean_ready": round(mean_ready, 3),
        "mean_fraction": round(mean_ready / capacity, 4),
        "empty_fraction": round(sum(1 for r in ready if r == 0) / n, 4),
        "full_fraction": round(sum(1 for r in ready if r >= capacity) / n, 4),
        "samples": n,
    }


def sync_summary(
    mode: str | None, sync_s: list[float], profile: dict[str, Any]
) -> dict[str, Any] | None:
    """What synchronising at step boundaries cost: time inside the sync call, and its share of the
    run."""
    if mode is None:
        return None
    total = sum(sync_s)
    wall = profile.get("wall_s") or 0.0
    return {
        "mode": mode,
        "calls": len(sync_s),
        "mean_ms": round(total / len(sync_s) * 1000, 4) if sync_s else None,
        "total_s": round(total, 4),
        "share_of_wall": round(total / wall, 4) if wall > 0 else None,
        "note": (
            "time spent waiting in the synchronise is device work, counted as compute; "
            "the CPU no longer runs ahead into the next fetch while the device works"
        ),
    }


def merge_resources(parts: list[dict[str, Any]]) -> dict[str, Any] | None:
    """One resources dict from per-epoch ones: CPU % weighted by seconds, memory peaks."""
    parts = [p for p in parts if p]
    if not parts:
        return None
    seconds = sum(p.get("seconds", 0.0) for p in parts) or 1e-9
    merged: dict[str, Any] = {
        "main_cpu_percent": round(
            sum(p["main_cpu_percent"] * p.get("seconds", 0.0) for p in parts) / seconds, 2
        ),
        "workers_cpu_percent": round(
            sum(p["workers_cpu_percent"] * p.get("seconds", 0.0) for p in parts) / seconds, 2
        ),
        "main_rss_mb": max(p["main_rss_mb"] for p in parts),
        "workers_rss_mb": max(p["workers_rss_mb"] for p in parts),
        "n_workers": max(p["n_workers"] for p in parts),
        "seconds": round(seconds, 3),
    }
    uss = [p["worker_uss_mb"] for p in parts if p.get("worker_uss_mb") is not None]
    merged["worker_uss_mb"] = max(uss) if uss else None
    return merged


def gpu_summary(
    gpu: Any, util: list[float], memory_used_max: float, memory_total: float | None
) -> dict[str, Any] | None:
    """The ``gpu`` entry: the monitor's name and the sampled utilisation and memory (None without a
    monitor)."""
    if gpu is None:
        return None
    if not gpu.available:
        return {"available": False, "reason": gpu.reason}
    ordered = sorted(util)
    return {
        "available": True,
        "name": gpu.name,
        "util_percent_mean": round(sum(ordered) / len(ordered), 2) if ordered else None,
        "util_percent_p50": quantile(ordered, 0.5, ordered=True),
        "memory_used_mb_max": round(memory_used_max, 1) if ordered else None,
        "memory_total_mb": memory_total,
        "samples": len(ordered),
    }
