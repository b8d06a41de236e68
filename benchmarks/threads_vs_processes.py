"""Worker threads vs worker processes on a latency-bound source (issue 13, SPEC §8).

1. A latency-bound source: every item waits ``--wait-ms`` (6 ms) with the GIL
   released (``time.sleep``, as a remote read does), batch size 16.
2. ``ss.tune`` with ``--memory-budget`` (1500 MB): its pick.
3. The pick and 64 plain worker processes, interleaved A B B A (``--rounds``
   times): samples/s (median). Then one more run of each that samples the
   workers' memory in steady state (kept apart, so that reading 64 processes'
   memory maps does not slow the 64-worker rate): RSS and USS (private
   memory) summed over the workers, peaks within a ``--memory-window``.

Done when: the pick uses at most 8 worker processes and reaches at least 0.9
of the throughput of 64 plain workers with at most 30% of their memory (USS
summed over workers). Exit code 0 when it passes, 1 otherwise.

    python benchmarks/threads_vs_processes.py          # full: 60 s tune, 2 s windows, 3 × ABBA
    python benchmarks/threads_vs_processes.py --quick  # a check that the script works (~1-2 min)
    python benchmarks/threads_vs_processes.py --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _datasets import SleepCost  # noqa: E402

from stallscope.config import LoaderConfig  # noqa: E402
from stallscope.runtime.host import host_info  # noqa: E402
from stallscope.runtime.processes import no_orphans  # noqa: E402
from stallscope.target import load_target  # noqa: E402
from stallscope.throughput.measure import Measurement, measure  # noqa: E402
from stallscope.tuning.tuner import tune  # noqa: E402

PLAIN_WORKERS = 64
MAX_PICK_WORKERS = 8
MIN_RATE_RATIO = 0.9
MAX_MEMORY_RATIO = 0.3


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def memory(m: Measurement) -> dict[str, float | None]:
    """RSS and USS summed over the workers (peak within the window), MB."""
    res = m.resources
    if res is None or not res.n_workers:
        return {"workers": 0, "rss_mb": None, "uss_mb": None}
    uss = None if res.worker_uss_mb is None else res.worker_uss_mb * res.n_workers
    return {"workers": res.n_workers, "rss_mb": res.workers_rss_mb, "uss_mb": uss}


def summarise(
    config: LoaderConfig, runs: list[Measurement], memory_run: Measurement
) -> dict[str, Any]:
    mem = memory(memory_run)
    return {
        "config": config.to_dict(),
        "label": config.label(),
        "samples_per_s": round(statistics.median(m.samples_per_s for m in runs), 1),
        "samples_per_s_runs": [round(m.samples_per_s, 1) for m in runs],
        "workers": mem["workers"],
        "workers_rss_mb": None if mem["rss_mb"] is None else round(mem["rss_mb"], 1),
        "workers_uss_mb": None if mem["uss_mb"] is None else round(mem["uss_mb"], 1),
        "startup_s": round(statistics.median(m.startup_s for m in runs), 3),
    }


def head_to_head(
    pipeline: Any, configs: list[LoaderConfig], rounds: int, window: float
) -> list[list[Measurement]]:
    """A B B A per round: drift on a shared machine hits both alike."""
    out: list[list[Measurement]] = [[] for _ in configs]
    order = list(range(len(configs)))
    for r in range(rounds):
        for index in order + order[::-1]:
            m = measure(
                pipeline,
                configs[index],
                min_window_s=window,
                max_window_s=4 * window + 2,
                timeout=60,
            )
            out[index].append(m)
            log(
                f"  round {r + 1}: {configs[index].label()}: {m.samples_per_s:,.0f} samples/s "
                f"(start-up {m.startup_s:.2f} s)"
            )
    return out


def memory_run(pipeline: Any, config: LoaderConfig, window: float) -> Measurement:
    """A steady-state run that samples the workers' RSS and USS (USS is read every fourth
    0.2 s tick)."""
    m = measure(
        pipeline,
        config,
        min_window_s=window,
        max_window_s=window + 2,
        sample_resources=True,
        timeout=60,
    )
    mem = memory(m)
    log(
        f"  memory: {config.label()}: {mem['workers']} workers, RSS {mem['rss_mb'] or 0:,.0f} MB, "
        f"USS {mem['uss_mb'] or 0:,.0f} MB (summed)"
    )
    return m


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--quick", action="store_true", help="20 s tune, 1 s windows, one A B B A round"
    )
    parser.add_argument(
        "--wait-ms", type=float, default=6.0, help="GIL-free wait per item (default 6 ms)"
    )
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument(
        "--memory-budget", type=float, default=1500.0, help="MB for tune (default 1500)"
    )
    parser.add_argument(
        "--budget", type=float, default=None, help="tune budget s (default 60; quick 20)"
    )
    parser.add_argument(
        "--rounds", type=int, default=None, help="A B B A rounds (default 3; quick 1)"
    )
    parser.add_argument(
        "--window", type=float, default=None, help="measurement window s (default 2; quick 1)"
    )
    parser.add_argument(
        "--memory-window",
        type=float,
        default=2.0,
        help="s of memory sampling per config (default 2)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    budget = args.budget or (20.0 if args.quick else 60.0)
    rounds = args.rounds or (1 if args.quick else 3)
    window = args.window or (1.0 if args.quick else 2.0)

    host = host_info().to_dict()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    log(f"host: {host['cores']} usable cores, torch {host['torch']}, load average {load}")
    dataset = SleepCost(args.wait_ms / 1000.0, n=8192)
    pipeline = load_target({"dataset": dataset, "batch_size": args.batch_size})

    with no_orphans():
        t0 = time.perf_counter()
        tuned = tune(pipeline, budget_s=budget, memory_budget_mb=args.memory_budget, seed=args.seed)
        tune_s = time.perf_counter() - t0
    pick = tuned.config
    log(
        f"tune ({budget:.0f} s budget, {args.memory_budget:.0f} MB): {pick.label()} at "
        f"{tuned.samples_per_s:,.0f}/s in {tune_s:.1f} s; region {tuned.search.region.name}"
    )
    for note in tuned.search.notes:
        log(f"  note: {note}")

    plain = LoaderConfig(num_workers=PLAIN_WORKERS, batch_size=args.batch_size, prefetch_factor=2)
    with no_orphans():
        runs = head_to_head(pipeline, [pick, plain], rounds, window)
        memories = [memory_run(pipeline, c, args.memory_window) for c in (pick, plain)]
    a, b = summarise(pick, runs[0], memories[0]), summarise(plain, runs[1], memories[1])
    rate_ratio = a["samples_per_s"] / b["samples_per_s"] if b["samples_per_s"] else 0.0
    mem_ratio = (a["workers_uss_mb"] or 0.0) / b["workers_uss_mb"] if b["workers_uss_mb"] else None
    rss_ratio = (a["workers_rss_mb"] or 0.0) / b["workers_rss_mb"] if b["workers_rss_mb"] else None
    passed = (
        pick.num_workers <= MAX_PICK_WORKERS
        and rate_ratio >= MIN_RATE_RATIO
        and mem_ratio is not None
        and mem_ratio <= MAX_MEMORY_RATIO
    )

    print("| config | samples/s (median) | workers RSS (MB) | workers USS (MB) | start-up (s) |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for row, role in ((a, "tuned pick"), (b, f"{PLAIN_WORKERS} plain workers")):
        rss = "–" if row["workers_rss_mb"] is None else f"{row['workers_rss_mb']:,.0f}"
        uss = "–" if row["workers_uss_mb"] is None else f"{row['workers_uss_mb']:,.0f}"
        print(
            f"| {role}: `{row['label']}` | {row['samples_per_s']:,.0f} | {rss} | {uss} | "
            f"{row['startup_s']:.2f} |"
        )
    print()
    print(
        f"throughput ratio (pick / {PLAIN_WORKERS} workers): {rate_ratio:.3f} (bar ≥ "
        f"{MIN_RATE_RATIO})"
    )
    if mem_ratio is not None:
        print(
            f"memory ratio, USS summed over workers: {mem_ratio:.3f} (bar ≤ {MAX_MEMORY_RATIO}); "
            f"RSS: {rss_ratio:.3f}"
        )
    print(
        f"pick uses {pick.num_workers} worker process(es) (bar ≤ {MAX_PICK_WORKERS}); "
        f"{'PASS' if passed else 'FAIL'}"
    )
    print(
        f"Mode: {'quick' if args.quick else 'full'}; {args.wait_ms:g} ms wait per item, batch "
        f"{args.batch_size}, tune budget {budget:.0f} s, {rounds} A B B A round(s) of {window:g} "
        f"s windows; load average {load}."
    )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "host": host,
                    "load_average_at_start": load,
                    "quick": args.quick,
                    "wait_ms": args.wait_ms,
                    "batch_size": args.batch_size,
                    "memory_budget_mb": args.memory_budget,
                    "tune_budget_s": budget,
                    "tuning_seconds": round(tune_s, 1),
                    "region": tuned.search.region.name,
                    "notes": tuned.search.notes,
                    "tune_trials": [
                        {
                            "phase": t.phase,
                            "label": t.config.label(),
                            "samples_per_s": round(t.samples_per_s, 1),
                        }
                        for t in tuned.trials
                    ],
                    "worker_threads_check": tuned.space.to_dict()["worker_threads_check"],
                    "pick": a,
                    "plain": b,
                    "rate_ratio": round(rate_ratio, 3),
                    "uss_ratio": None if mem_ratio is None else round(mem_ratio, 3),
                    "rss_ratio": None if rss_ratio is None else round(rss_ratio, 3),
                    "passed": passed,
                },
                indent=2,
            )
        )
    return 0 if passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
