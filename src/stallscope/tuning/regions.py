"""Which region of the worker-count curve a pipeline sits in (NOTE [tuning strategy], phase 2)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .space import Profile

# The fetch is latency-bound when it uses less CPU than this per second of wall time.
LATENCY_CPU_FRACTION = 0.5
# A batch cheaper than this in-process is in the range of worker IPC costs.
OVERHEAD_BATCH_S = 0.004


@dataclass
class Region:
    name: str  # "cpu-bound" | "latency-bound" | "overhead-bound"
    reason: str
    predicted_workers: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "reason": self.reason,
            "predicted_workers": None
            if self.predicted_workers is None
            else round(self.predicted_workers, 1),
        }


def classify(profile: Profile, r0: float, rc: float | None, cores: int, batch_size: int) -> Region:
    """The region of the worker-count curve the cheap measurements point to.

    ``r0`` is the measured single-process rate, ``rc`` the rate with
    ``cores`` workers (None when it could not be measured).
    """
    cpu = max(profile.cpu_per_wall, 1e-3)
    if profile.cpu_per_wall < LATENCY_CPU_FRACTION:
        predicted = cores / cpu
        return Region(
            "latency-bound",
            f"the fetch used {profile.cpu_per_wall:.0%} of a CPU per second of wall time, so it "
            f"mostly waits (I/O, sleep, GIL released); about {predicted:.0f} workers could keep "
            f"{cores} core(s) busy",
            predicted_workers=predicted,
        )
    batch_s = profile.batch_seconds(batch_size)
    no_gain = rc is not None and r0 > 0 and rc < r0 * 1.1
    if batch_s < OVERHEAD_BATCH_S or no_gain:
        why = (
            f"a batch costs {batch_s * 1000:.2f} ms in-process, comparable to moving it between "
            "processes"
            if batch_s < OVERHEAD_BATCH_S
            else f"{cores} workers gave {(rc or 0.0) / r0 if r0 else 0:.2f}x the single-process "
            "rate"
        )
        return Region("overhead-bound", why, predicted_workers=1.0)
    return Region(
        "cpu-bound",
        f"the fetch used {profile.cpu_per_wall:.0%} of a CPU per second of wall time, so "
        f"throughput scales with the {cores} usable core(s)",
        predicted_workers=float(cores),
    )
