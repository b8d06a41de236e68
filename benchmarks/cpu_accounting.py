"""CPU % of DataLoader workers: counted from the window start vs from their birth (issue 10,
item 5).

A CPU-bound dataset (each item burns ``--item-ms`` of CPU) runs through a
DataLoader; after a warm-up of ``--warmup-s`` seconds (worker start-up, the
prefetch buffer), a window of ``--window-s`` seconds opens. Per worker count it
prints, for the same window:

- ``from birth``: the workers' whole CPU time over the window, which is what
  ``ResourceSampler`` used to report;
- ``from window start``: what it reports now (NOTE [CPU from the window
  start] in ``runtime/resources.py``);
- the usable cores × 100 %, which main + workers cannot exceed.

    python benchmarks/cpu_accounting.py [--workers 1,2,4,8] [--item-ms 2] [--window-s 2] \\
        [--warmup-s 2] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import psutil
from _datasets import SpinCost
from torch.utils.data import DataLoader

from stallscope.runtime.host import usable_cores
from stallscope.runtime.processes import shutdown_iterator, worker_pids
from stallscope.runtime.resources import ResourceSampler


def _cpu_seconds(pid: int) -> float:
    try:
        times = psutil.Process(pid).cpu_times()
        return times.user + times.system
    except psutil.Error:
        return 0.0


def run(workers: int, item_ms: float, warmup_s: float, window_s: float) -> dict:
    loader = DataLoader(SpinCost(item_ms / 1000, n=100_000), batch_size=8, num_workers=workers)
    iterator = iter(loader)
    try:
        until = time.perf_counter() + warmup_s
        while time.perf_counter() < until:
            next(iterator)
        pids = worker_pids(iterator)
        sampler = ResourceSampler(0.2, worker_pids=lambda: pids).start()
        started = time.perf_counter()
        until = started + window_s
        while time.perf_counter() < until:
            next(iterator)
        from_birth = sum(_cpu_seconds(pid) for pid in pids) / (time.perf_counter() - started) * 100
        summary = sampler.stop()
    finally:
        shutdown_iterator(iterator)
    return {
        "workers": workers,
        "workers_cpu_percent_from_birth": round(from_birth, 1),
        "workers_cpu_percent": round(summary.workers_cpu_percent, 1),
        "main_cpu_percent": round(summary.main_cpu_percent, 1),
        "main_plus_workers_percent": round(
            summary.main_cpu_percent + summary.workers_cpu_percent, 1
        ),
        "cores_percent": usable_cores() * 100,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", default="1,2,4,8")
    parser.add_argument("--item-ms", type=float, default=2.0)
    parser.add_argument("--warmup-s", type=float, default=2.0)
    parser.add_argument("--window-s", type=float, default=2.0)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    rows = [
        run(int(w), args.item_ms, args.warmup_s, args.window_s) for w in args.workers.split(",")
    ]
    print(
        f"{'workers':>7} {'from birth':>11} {'from window start':>18} {'main+workers':>13} "
        f"{'cores×100':>10}"
    )
    for r in rows:
        print(
            f"{r['workers']:>7} {r['workers_cpu_percent_from_birth']:>10.0f}% "
            f"{r['workers_cpu_percent']:>17.0f}% {r['main_plus_workers_percent']:>12.0f}% "
            f"{r['cores_percent']:>9}%"
        )
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
