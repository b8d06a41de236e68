"""Tuner vs exhaustive grid (SPEC §7 "Tuner quality" and "Tuning cost").

For each pipeline kind (``tuner_pipelines.py``):

1. the exhaustive grid a user would write with ``stallscope bench``:
   num_workers × prefetch_factor × in_order × persistent_workers, every config
   ``--grid-repeats`` times (interleaved) — its wall time and its best config;
2. ``ss.tune`` with the default budget — its wall time and its pick;
3. the two picks head to head, interleaved in one run (A B B A …), medians:
   ratio = tuner / grid.

Bars: ratio ≥ 0.97 for every kind; tuning ≤ 15% of the grid's wall time and
≤ 60 s. ``--quick`` shrinks the grid and the windows to check the script
works (then the 15% bar is not meaningful: the grid is no longer exhaustive).

    python benchmarks/tuner_vs_grid.py  # all kinds, full grid (long: ~8 min per kind)
    python benchmarks/tuner_vs_grid.py --kind latency --quick
    python benchmarks/tuner_vs_grid.py --json benchmarks/results/tuner_vs_grid.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tuner_pipelines import KINDS  # noqa: E402

from stallscope.runtime.host import host_info  # noqa: E402
from stallscope.runtime.processes import no_orphans  # noqa: E402
from stallscope.target import load_target  # noqa: E402
from stallscope.thresholds import TIE_MARGIN  # noqa: E402
from stallscope.throughput.measure import measure_interleaved  # noqa: E402
from stallscope.throughput.sweep import bench  # noqa: E402
from stallscope.tuning.tuner import tune  # noqa: E402

FULL_GRID = {
    "num_workers": [0, 1, 2, 3, 4, 6, 8, 12, 16],
    "prefetch_factors": [2, 4, 8],
    "in_order": [True, False],
    "persistent_workers": [False, True],
}
QUICK_GRID = {
    "num_workers": [0, 1, 2, 4, 8, 12],
    "prefetch_factors": [2, 4],
    "in_order": [True, False],
    "persistent_workers": [False],
}


def run_kind(kind: str, args: argparse.Namespace) -> dict[str, Any]:
    factory, description = KINDS[kind]
    pipeline = load_target(factory)
    grid_axes = QUICK_GRID if args.quick else FULL_GRID
    log(f"[{kind}] {description}")

    with no_orphans():
        t0 = time.perf_counter()
        grid = bench(pipeline, repeats=args.grid_repeats, min_window_s=args.window, **grid_axes)
        grid_s = time.perf_counter() - t0
    grid_best = grid.best
    log(
        f"[{kind}] grid: {len(grid.results)} configs × {args.grid_repeats} in {grid_s:.0f} s; "
        f"best {grid_best.config.label()} at {grid_best.median_rate:,.0f}/s"
    )

    with no_orphans():
        t0 = time.perf_counter()
        tuned = tune(pipeline, budget_s=args.budget, seed=args.seed)
        tune_s = time.perf_counter() - t0
    sure = "not confirmed" if tuned.confidence is None else f"confidence {tuned.confidence:.0%}"
    log(
        f"[{kind}] tune: {tuned.config.label()} at {tuned.samples_per_s:,.0f}/s in "
        f"{tune_s:.1f} s ({sure})"
    )

    with no_orphans():
        runs = measure_interleaved(
            pipeline,
            [grid_best.config, tuned.config],
            repeats=args.h2h_repeats,
            min_window_s=args.window,
        )
    grid_rates = [m.samples_per_s for m in runs[0]]
    tune_rates = [m.samples_per_s for m in runs[1]]
    ratio = statistics.median(tune_rates) / statistics.median(grid_rates)
    row = {
        "kind": kind,
        "description": description,
        "grid_configs": len(grid.results),
        "grid_repeats": args.grid_repeats,
        "grid_seconds": round(grid_s, 1),
        "grid_best": grid_best.config.label(),
        "tuner_pick": tuned.config.label(),
        "region": tuned.search.region.name,
        "grid_best_samples_per_s": round(statistics.median(grid_rates), 1),
        "tuner_samples_per_s": round(statistics.median(tune_rates), 1),
        "head_to_head": {
            "grid": [round(r, 1) for r in grid_rates],
            "tuner": [round(r, 1) for r in tune_rates],
        },
        "ratio": round(ratio, 3),
        "tuning_seconds": round(tune_s, 1),
        "tuning_share_of_grid": round(tune_s / grid_s, 3),
        "confidence": None if tuned.confidence is None else round(tuned.confidence, 3),
        "measurements_by_tuner": len(tuned.trials),
        "pass_quality": ratio >= 1 - TIE_MARGIN,  # the tuner's pick ties the grid's best
        "pass_cost": tune_s <= 60 and (args.quick or tune_s <= 0.15 * grid_s),
    }
    log(f"[{kind}] head to head ({args.h2h_repeats} interleaved runs each): ratio {ratio:.3f}")
    return row


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def markdown(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    lines = [
        "| kind | grid best (samples/s) | tuner pick (samples/s) | ratio | tuning s | grid s | "
        "tuning / grid |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r['kind']} | {r['grid_best']} ({r['grid_best_samples_per_s']:,.0f}) | "
            f"{r['tuner_pick']} ({r['tuner_samples_per_s']:,.0f}) | {r['ratio']:.3f} | "
            f"{r['tuning_seconds']:.1f} | {r['grid_seconds']:.0f} | "
            f"{r['tuning_share_of_grid']:.0%} |"
        )
    mode = "quick (reduced grid)" if args.quick else "full grid"
    lines.append("")
    lines.append(
        f"Mode: {mode}; grid repeats {args.grid_repeats}, window {args.window} s, "
        f"tune budget {args.budget:.0f} s, head-to-head {args.h2h_repeats} interleaved runs "
        "per config."
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--kind", default=",".join(KINDS), help=f"comma-separated kinds ({', '.join(KINDS)})"
    )
    parser.add_argument(
        "--quick", action="store_true", help="reduced grid, 1 grid repeat, 0.5 s windows"
    )
    parser.add_argument(
        "--budget", type=float, default=60.0, help="tuner budget in seconds (default 60)"
    )
    parser.add_argument(
        "--grid-repeats",
        type=int,
        default=None,
        help="repeats per grid config (default 3; quick 1)",
    )
    parser.add_argument(
        "--h2h-repeats",
        type=int,
        default=None,
        help="head-to-head runs per config (default 6; quick 4)",
    )
    parser.add_argument(
        "--window", type=float, default=None, help="measurement window s (default 1.0; quick 0.5)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None, help="write the rows and host as JSON")
    args = parser.parse_args(argv)
    args.grid_repeats = args.grid_repeats or (1 if args.quick else 3)
    args.h2h_repeats = args.h2h_repeats or (4 if args.quick else 6)
    args.window = args.window or (0.5 if args.quick else 1.0)
    kinds = [k.strip() for k in args.kind.split(",") if k.strip()]
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        parser.error(f"unknown kind(s): {', '.join(unknown)}")
    from _provenance import Provenance, load_average

    prov = Provenance.start()
    host = host_info().to_dict()
    log(f"host: {host['cores']} usable cores, torch {host['torch']}, load {prov.load_at_start}")
    rows = []
    for kind in kinds:
        start = load_average()
        row = run_kind(kind, args)
        row["load_average"] = {"start": start, "end": load_average()}
        rows.append(row)
    print(markdown(rows, args))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        payload = {
            "script": "benchmarks/tuner_vs_grid.py",
            "provenance": prov.finish(),
            "quick": args.quick,
            "settings": {
                "grid": QUICK_GRID if args.quick else FULL_GRID,
                "grid_repeats": args.grid_repeats,
                "window_s": args.window,
                "tune_budget_s": args.budget,
                "head_to_head_repeats": args.h2h_repeats,
                "seed": args.seed,
                "tie_margin": TIE_MARGIN,
            },
            "rows": rows,
        }
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
    return 0 if all(r["pass_quality"] and r["pass_cost"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
