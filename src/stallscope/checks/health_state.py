"""What the sample-health probe's main process keeps: its settings, one slot per probe worker,
and the summary of the fetch times it measured."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class WorkerSlot:
    """One probe worker as the main process sees it."""

    worker_id: int
    process: Any
    conn: Any
    stack_path: Path
    started_at: float
    ready: bool = False
    busy: bool = False
    pending: list[Any] = field(default_factory=list)  # indices sent, not yet answered
    current: Any = None
    current_since: float = 0.0
    exhausted: bool = False


@dataclass
class HealthSettings:
    timeout: float
    deadline: float  # time.monotonic() by which the probe stops
    workers: int
    start_method: str
    batch_size: int
    seed: int = 0
    max_hangs: int = 3
    startup_timeout: float = 60.0
    sample_limit: int | None = None  # iterable datasets: stop after this many items


def timing_summary(values: list[float]) -> dict[str, Any]:
    """Median, MAD and tail quantiles of sorted fetch times (seconds)."""
    if not values:
        return {"count": 0}
    n = len(values)

    def quantile(q: float) -> float:
        return values[min(n - 1, int(q * (n - 1) + 0.5))]

    median = quantile(0.5)
    mad = sorted(abs(v - median) for v in values)[n // 2]
    return {
        "count": n,
        "median_s": round(median, 6),
        "mad_s": round(mad, 6),
        "p90_s": round(quantile(0.9), 6),
        "p99_s": round(quantile(0.99), 6),
        "max_s": round(values[-1], 6),
        "total_s": round(sum(values), 4),
    }


def callable_name(fn: Any) -> str:
    name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    module = getattr(fn, "__module__", None) or ""
    return f"{module}.{name}" if module and module != "builtins" else name
