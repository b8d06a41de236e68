"""Injected per-item costs vs what stallscope measures (SPEC §3.1, issue: measurement accuracy).

For datasets of known cost, the true steady-state rate is known:
  * sleep-based (latency-bound): workers × 1 / cost, even beyond the core count;
  * CPU-bound (spins on CPU time): min(cores, workers) × 1 / cost, at best.
Also shows why the warm-up matters: the same loader timed naively after the
prefetch buffer filled (as a hand-written script that times the first batches
after model set-up does) reports a rate inflated by the buffer.

    python benchmarks/measurement_accuracy.py [--repeats 3] [--window 1.0]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _datasets import SleepCost, SpinCost  # noqa: E402

from stallscope.config import LoaderConfig  # noqa: E402
from stallscope.runtime.host import usable_cores  # noqa: E402
from stallscope.target import load_target  # noqa: E402
from stallscope.throughput.measure import measure  # noqa: E402


def in_process_cost(dataset, items: int = 200) -> float:
    """Seconds one item really takes when called directly (sleep overshoot included)."""
    start = time.perf_counter()
    for index in range(items):
        dataset[index]
    return (time.perf_counter() - start) / items


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--window", type=float, default=1.0)
    args = parser.parse_args()
    cores = usable_cores()
    batch_size = 4
    cases = [
        ("sleep", 0.005, 0, None),
        ("sleep", 0.005, 2, "fork"),
        ("sleep", 0.005, 8, "fork"),
        ("sleep", 0.005, 16, "fork"),
        ("sleep", 0.005, 4, "spawn"),
        ("cpu", 0.004, 0, None),
        ("cpu", 0.004, 1, "fork"),
        ("cpu", 0.004, cores, "fork"),
    ]
    print(
        f"usable cores: {cores}; batch size {batch_size}; {args.repeats} repeats × "
        f"{args.window:g} s windows"
    )
    print(
        "expected = parallel items ÷ the real in-process cost of one item (sleep "
        "overshoot included)."
    )
    print(
        "Sleep rows have a known truth. CPU rows compare with the ideal min(cores, workers) "
        "÷ cost, an"
    )
    print(
        "upper bound: the main process needs CPU too, so their gap is parallel efficiency, "
        "not error.\n"
    )
    print(
        "| kind | injected ms/item | real ms/item | workers | start | expected samples/s | "
        "measured (median) | error vs real | error vs injected |"
    )
    print("|---|---:|---:|---:|---|---:|---:|---:|---:|")
    for kind, cost, workers, ctx in cases:
        dataset = SleepCost(cost) if kind == "sleep" else SpinCost(cost)
        pipeline = load_target(dataset, batch_size=batch_size)
        config = LoaderConfig(
            num_workers=workers, batch_size=batch_size, multiprocessing_context=ctx
        )
        rates = [
            measure(pipeline, config, min_window_s=args.window).samples_per_s
            for _ in range(args.repeats)
        ]
        real = in_process_cost(dataset)
        parallel = max(workers, 1) if kind == "sleep" else min(cores, max(workers, 1))
        expected = parallel / real
        nominal = parallel / cost
        got = statistics.median(rates)
        print(
            f"| {kind} | {cost * 1000:.1f} | {real * 1000:.2f} | {workers} | {ctx or '-'} | "
            f"{expected:,.0f} | {got:,.0f} | {100 * (got - expected) / expected:+.1f}% | "
            f"{100 * (got - nominal) / nominal:+.1f}% |"
        )

    print(
        "\nPrefetch buffer (2 workers, prefetch_factor=16, 20 ms/item, consumer idle 1 s after "
        "the first batch):"
    )
    pipeline = load_target(SleepCost(0.02), batch_size=2)
    config = LoaderConfig(num_workers=2, batch_size=2, prefetch_factor=16)
    truth = 2 / 0.02
    ours = measure(pipeline, config, min_window_s=args.window, settle_s=1.0).samples_per_s
    naive = measure(
        pipeline, config, min_window_s=0.0, min_batches=8, warmup_batches=0, settle_s=1.0
    ).samples_per_s
    print("| method | samples/s | vs truth |")
    print("|---|---:|---:|")
    print(f"| truth | {truth:,.0f} | |")
    print(
        f"| stallscope (warm-up drains the buffer) | {ours:,.0f} | "
        f"{100 * (ours - truth) / truth:+.1f}% |"
    )
    print(
        f"| naive (time 8 batches right away) | {naive:,.0f} | "
        f"{100 * (naive - truth) / truth:+.1f}% |"
    )


if __name__ == "__main__":
    main()
