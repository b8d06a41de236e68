"""Overhead of ``ss.watch`` on the cheapest pipeline: in-memory tensors (SPEC §7: ≤ 1% throughput).

A DataLoader over a TensorDataset (num_workers=0, batch 64, default collate)
with an empty loop body, so every microsecond watch adds is visible.
Variants run in interleaved blocks (A B C C B A: bare, watched with the
background samplers, watched without them) so that drifting machine load hits
all of them alike; each block gives its own overhead estimate, and the
median over blocks is reported with its interquartile range, next to the
ratio of the fastest runs (the least disturbed on a busy machine). Both
wall-clock time (what throughput sees) and this process's CPU time (all
threads, so the samplers' work is included; far less disturbed by other
processes on a shared machine) are compared.

Also: the hot path alone (watching a plain Python list), and, where CUDA is
available, the cost of ``sync="cuda"`` per step with an idle device.

    python benchmarks/watch_overhead.py [--repeats 20] [--batches 300] [--batch-size 64] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader, TensorDataset

import stallscope as ss


def in_memory_loader(batches: int, batch_size: int = 64) -> DataLoader:
    n = batches * batch_size
    dataset = TensorDataset(torch.randn(n, 32), torch.randint(0, 10, (n,)))
    return DataLoader(dataset, batch_size=batch_size, num_workers=0)


def seconds_per_step(iterable, steps: int) -> float:
    start = time.perf_counter()
    for _batch in iterable:
        pass
    return (time.perf_counter() - start) / steps


def timed_per_step(iterable, steps: int) -> tuple[float, float]:
    """(wall, CPU) seconds per step; CPU time is this process's, all threads (the samplers too)."""
    wall0, cpu0 = time.perf_counter(), time.process_time()
    for _batch in iterable:
        pass
    return (time.perf_counter() - wall0) / steps, (time.process_time() - cpu0) / steps


def run_variant(name: str, loader: DataLoader, steps: int) -> tuple[float, float]:
    if name == "bare":
        return timed_per_step(loader, steps)
    w = ss.watch(loader, sample_resources=(name == "watch"))
    elapsed = timed_per_step(w, steps)
    w.close()
    return elapsed


def loader_overhead(repeats: int, batches: int, batch_size: int) -> dict:
    loader = in_memory_loader(batches, batch_size)
    steps = len(loader)
    run_variant("bare", loader, steps)  # warm caches and the allocator once
    blocks = {"wall": [], "cpu": []}
    for _ in range(repeats):
        t: dict[str, list[tuple[float, float]]] = {"bare": [], "watch": [], "watch-nosample": []}
        for name in ("bare", "watch", "watch-nosample", "watch-nosample", "watch", "bare"):
            t[name].append(run_variant(name, loader, steps))
        for index, clock in enumerate(("wall", "cpu")):
            blocks[clock].append({k: statistics.fmean(v[index] for v in runs) for k, runs in t.items()})

    def overhead(clock: str, variant: str) -> dict:
        rows = blocks[clock]
        pct = [(b[variant] / b["bare"] - 1) * 100 for b in rows]
        added_us = [(b[variant] - b["bare"]) * 1e6 for b in rows]
        # The fastest run of each variant is the one least disturbed by other load on the machine.
        best = min(b[variant] for b in rows)
        best_bare = min(b["bare"] for b in rows)
        return {
            "overhead_percent_median": statistics.median(pct),
            "overhead_percent_of_minima": (best / best_bare - 1) * 100,
            "overhead_percent_q1": _quantile(pct, 0.25),
            "overhead_percent_q3": _quantile(pct, 0.75),
            "added_us_per_step_median": statistics.median(added_us),
        }

    return {
        "steps_per_run": steps,
        "repeats": repeats,
        "bare_us_per_step_median": statistics.median(b["bare"] for b in blocks["wall"]) * 1e6,
        "bare_us_per_step_min": min(b["bare"] for b in blocks["wall"]) * 1e6,
        "bare_cpu_us_per_step_median": statistics.median(b["bare"] for b in blocks["cpu"]) * 1e6,
        "wall": {"watch": overhead("wall", "watch"), "watch_nosample": overhead("wall", "watch-nosample")},
        "cpu": {"watch": overhead("cpu", "watch"), "watch_nosample": overhead("cpu", "watch-nosample")},
    }


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def hot_path_cost(steps: int = 200_000, repeats: int = 5) -> dict:
    items = list(range(steps))
    added = []
    for _ in range(repeats):
        bare = seconds_per_step(items, steps)
        watched = seconds_per_step(ss.watch(items, sample_resources=False), steps)
        added.append((watched - bare) * 1e9)
    return {"added_ns_per_step_median": statistics.median(added), "added_ns_per_step_min": min(added)}


class _Idle:
    """An iterable whose next() sleeps: the main thread uses no CPU, so what remains is the samplers'."""

    def __init__(self, steps: int, sleep_s: float) -> None:
        self.steps, self.sleep_s = steps, sleep_s

    def __iter__(self):
        for i in range(self.steps):
            time.sleep(self.sleep_s)
            yield i


def sampler_cpu_share(seconds: float = 3.0) -> dict:
    """CPU the background samplers (resources, occupancy, NVML) use per second of training, watched minus bare."""
    steps = int(seconds / 0.05)

    def cpu_of(iterable) -> float:
        wall0, cpu0 = time.perf_counter(), time.process_time()
        for _ in iterable:
            pass
        return (time.process_time() - cpu0) / (time.perf_counter() - wall0)

    bare = min(cpu_of(_Idle(steps, 0.05)) for _ in range(2))
    watched = min(cpu_of(ss.watch(_Idle(steps, 0.05))) for _ in range(2))
    return {"sampler_cpu_percent_of_a_core": max(0.0, watched - bare) * 100}


def cuda_sync_cost(calls: int = 2000) -> dict | None:
    """Cost of torch.cuda.synchronize per step boundary with nothing queued (the floor of sync='cuda')."""
    if not torch.cuda.is_available():
        return None
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        torch.cuda.synchronize()
    idle_us = (time.perf_counter() - start) / calls * 1e6
    return {"idle_sync_us_per_call": idle_us, "device": torch.cuda.get_device_name(0)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10, help="interleaved A B C C B A blocks (default 10)")
    parser.add_argument("--batches", type=int, default=3000, help="batches per run (default 3000: runs of about a second)")
    parser.add_argument("--batch-size", type=int, default=64, help="batch size of the in-memory loader (default 64)")
    parser.add_argument("--json", type=Path, default=None, help="write the numbers as JSON")
    args = parser.parse_args()

    result = {
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "batch_size": args.batch_size,
        "loader": loader_overhead(args.repeats, args.batches, args.batch_size),
        "hot_path": hot_path_cost(),
        "samplers": sampler_cpu_share(),
        "cuda_sync": cuda_sync_cost(),
    }
    lo = result["loader"]
    print(
        f"in-memory DataLoader (batch {args.batch_size}, num_workers=0), {lo['steps_per_run']} steps/run, "
        f"{lo['repeats']} A-B-C-C-B-A blocks"
    )
    print(f"  bare loop:                {lo['bare_us_per_step_median']:8.1f} µs/step (median)")
    for clock, title in (("wall", "wall-clock time (throughput)"), ("cpu", "process CPU time, all threads (robust to other load)")):
        print(f"  by {title}:")
        for label, key in (("watch (samplers on)", "watch"), ("watch (sample_resources=False)", "watch_nosample")):
            o = lo[clock][key]
            print(
                f"    {label:<31} {o['overhead_percent_median']:+.2f}% median of blocks "
                f"(IQR {o['overhead_percent_q1']:+.2f}% … {o['overhead_percent_q3']:+.2f}%), "
                f"{o['overhead_percent_of_minima']:+.2f}% fastest vs fastest, {o['added_us_per_step_median']:+.2f} µs/step"
            )
    hp = result["hot_path"]
    intrinsic = hp["added_ns_per_step_median"] / 1000 / lo["bare_us_per_step_min"] * 100
    result["intrinsic_overhead_percent"] = intrinsic
    print(
        f"  hot path alone (list):    {hp['added_ns_per_step_median']:.0f} ns/step added (min {hp['added_ns_per_step_min']:.0f}) "
        f"= {intrinsic:.3f}% of the fastest bare DataLoader step"
    )
    sampler = result["samplers"]["sampler_cpu_percent_of_a_core"]
    result["component_overhead_percent"] = intrinsic + sampler
    print(f"  background samplers:      {sampler:.2f}% of one core while training runs")
    print(
        f"  => per-component bound: {intrinsic + sampler:.2f}% "
        "(hot path share of a step + sampler CPU, if the samplers competed with the loop for one core)"
    )
    sync = result["cuda_sync"]
    print(
        "  sync='cuda': "
        + (f"{sync['idle_sync_us_per_call']:.1f} µs per step boundary on an idle {sync['device']}" if sync else "not measured (no CUDA device)")
    )
    wall = lo["wall"]["watch"]
    spread = wall["overhead_percent_q3"] - wall["overhead_percent_q1"]
    verdict = "met" if wall["overhead_percent_median"] <= 1.0 else "NOT met"
    print(f"SPEC §7 target ≤ 1% (wall clock, samplers on): {wall['overhead_percent_median']:+.2f}% median → {verdict}")
    if spread > 2.0:
        print(
            f"  the blocks' interquartile range is {spread:.1f} points: this machine is too loaded to resolve 1% "
            f"end to end; the per-component bound ({result['component_overhead_percent']:.2f}%) is the better estimate."
        )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
