"""``stallscope tune --memory-budget`` on a quiet and on a busy machine (issue 27, item 4).

1. A latency-bound source: every item waits ``--wait-ms`` (6 ms) with the GIL released
   (``time.sleep``, as a remote read does), batch size 16; this file's :func:`make_loader`.
2. ``stallscope tune`` (the CLI, in a subprocess) with ``--memory-budget 1500``: once as the
   machine is, once with ``--hogs`` (2) busy-loop processes beside it, started by this script and
   always killed by it.
3. After each tune, under the same conditions, the pick runs once more while its workers' memory
   is sampled in steady state (``--memory-window`` seconds): resident memory (RSS) summed over the
   workers, the figure the budget bounds (NOTE [memory budget] in tuning/space.py), and private
   memory (USS) summed over them.

Done when: under the CPU hog, the pick's workers' measured memory (RSS summed over them) stays
within the budget. Exit code 0 when it does, 1 otherwise. The machine's load average at the start
and end of each run is recorded: a "quiet" run on a shared machine is not quiet.

    python benchmarks/tune_under_load.py                 # 60 s tunes
    python benchmarks/tune_under_load.py --quick         # 30 s tunes (a check that it works)
    python benchmarks/tune_under_load.py --json benchmarks/results/tune_under_load.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _datasets import SleepCost  # noqa: E402

WAIT_MS = float(os.environ.get("TUNE_UNDER_LOAD_WAIT_MS", "6"))
BATCH_SIZE = 16


def make_loader() -> Any:
    """The target ``stallscope tune`` loads: a latency-bound DataLoader with torch's defaults."""
    import torch

    return torch.utils.data.DataLoader(SleepCost(WAIT_MS / 1000.0, n=8192), batch_size=BATCH_SIZE)


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def load_average() -> float:
    return round(os.getloadavg()[0], 2)


class Hogs:
    """``n`` busy-loop processes for the duration of a ``with`` block; always killed on exit."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.procs: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> Hogs:
        for _ in range(self.n):
            self.procs.append(subprocess.Popen([sys.executable, "-c", "while True: pass"]))
        return self

    def __exit__(self, *exc: object) -> None:
        for proc in self.procs:
            proc.kill()
        for proc in self.procs:
            proc.wait(timeout=10)


def run_tune(budget_s: float, memory_mb: float, seed: int) -> dict[str, Any]:
    """``stallscope tune`` on :func:`make_loader`; the record it wrote."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "tune.json"
        cmd = [
            sys.executable,
            "-m",
            "stallscope",
            "tune",
            f"{Path(__file__).resolve()}:make_loader",
            "--memory-budget",
            f"{memory_mb:g}",
            "--budget",
            f"{budget_s:g}",
            "--seed",
            str(seed),
            "--quiet",
            "--json",
            str(out),
        ]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=budget_s * 3 + 120)
        if done.returncode != 0 or not out.exists():
            raise SystemExit(f"stallscope tune failed ({done.returncode}): {done.stderr[-2000:]}")
        record: dict[str, Any] = json.loads(out.read_text())
        return record


def steady_memory(config_dict: dict[str, Any], window_s: float) -> dict[str, Any]:
    """The pick once more, its workers' memory sampled in steady state."""
    from stallscope.config import LoaderConfig
    from stallscope.runtime.processes import no_orphans
    from stallscope.target import load_target
    from stallscope.throughput.measure import measure

    config = LoaderConfig.from_dict(config_dict)
    pipeline = load_target(make_loader)
    with no_orphans():
        m = measure(
            pipeline,
            config,
            min_window_s=window_s,
            max_window_s=window_s + 5,
            sample_resources=config.num_workers > 0,
            timeout=60,
        )
    res = m.resources
    workers = res.n_workers if res is not None else 0
    uss = None
    if res is not None and res.worker_uss_mb is not None:
        uss = round(res.worker_uss_mb * res.n_workers, 1)
    return {
        "samples_per_s": round(m.samples_per_s, 1),
        "window_s": round(m.window_s, 2),
        "workers": workers,
        "workers_rss_mb": round(res.workers_rss_mb, 1) if res is not None else 0.0,
        "workers_uss_mb": uss,
    }


def one_run(
    name: str, hogs: int, budget_s: float, memory_mb: float, seed: int, window_s: float
) -> dict[str, Any]:
    log(f"{name}: tune with {hogs} busy process(es) beside it; load average {load_average()}")
    started = load_average()
    with Hogs(hogs):
        t0 = time.perf_counter()
        record = run_tune(budget_s, memory_mb, seed)
        tune_s = time.perf_counter() - t0
        after_tune = load_average()
        best = record["best"]
        config = record["baseline"]["config"] if best.get("keep_baseline") else best["config"]
        steady = steady_memory(config, window_s)
    ended = load_average()
    search = record.get("search") or {}
    run = {
        "hogs": hogs,
        "load_average": {"start": started, "after_tune": after_tune, "end": ended},
        "tune_wall_s": round(tune_s, 1),
        "pick": {
            "label": best["label"],
            "config": config,
            "keep_baseline": bool(best.get("keep_baseline")),
            "samples_per_s_in_tune": best["samples_per_s"],
            "confirmed": best.get("confirmed"),
            "rounds": best.get("rounds"),
            "confidence": best.get("confidence"),
        },
        "baseline_samples_per_s": record["baseline"]["samples_per_s"],
        "memory_budget": record.get("memory_budget"),
        "steady": steady,
        "region": (search.get("region") or {}).get("name"),
        "notes": search.get("notes", []),
        "trials": [
            {
                "phase": t["phase"],
                "label": t["label"],
                "samples_per_s": t["samples_per_s"],
                "workers_mb": t.get("workers_mb"),
            }
            for t in record.get("trials", [])
        ],
    }
    log(
        f"  pick {best['label']}: {best['samples_per_s']:,.0f} samples/s in the tune; steady "
        f"{steady['samples_per_s']:,.0f}/s, workers RSS {steady['workers_rss_mb']:,.0f} MB "
        f"(USS {steady['workers_uss_mb']} MB) over {steady['workers']} worker(s); load "
        f"{started} -> {ended}"
    )
    return run


def main(argv: list[str] | None = None) -> int:
    from _provenance import Provenance

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="30 s tunes")
    parser.add_argument("--budget", type=float, default=None, help="tune budget s (default 60)")
    parser.add_argument("--memory-budget", type=float, default=1500.0, help="MB (default 1500)")
    parser.add_argument("--hogs", type=int, default=2, help="busy-loop processes (default 2)")
    parser.add_argument(
        "--memory-window", type=float, default=3.0, help="s of steady memory sampling (default 3)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    budget = args.budget or (30.0 if args.quick else 60.0)
    prov = Provenance.start()
    runs = {
        name: one_run(name, hogs, budget, args.memory_budget, args.seed, args.memory_window)
        for name, hogs in (("as-is", 0), ("cpu-hog", args.hogs))
    }
    limit = args.memory_budget
    hogged = runs["cpu-hog"]["steady"]["workers_rss_mb"]
    passed = hogged <= limit

    print(
        "| run | load (start → end) | pick | samples/s (tune) | samples/s (steady) | "
        "workers RSS (MB) | workers USS (MB) | recorded (MB) |"
    )
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for name, run in runs.items():
        s, mem = run["steady"], run["memory_budget"] or {}
        print(
            f"| {name} ({run['hogs']} hogs) | {run['load_average']['start']} → "
            f"{run['load_average']['end']} | `{run['pick']['label']}` | "
            f"{run['pick']['samples_per_s_in_tune']:,.0f} | {s['samples_per_s']:,.0f} | "
            f"{s['workers_rss_mb']:,.0f} | {s['workers_uss_mb'] or 0:,.0f} | "
            f"{mem.get('workers_mb', '–')} |"
        )
    print(
        f"\nunder {args.hogs} busy processes the pick's workers hold {hogged:,.0f} MB resident "
        f"(bar ≤ {limit:,.0f} MB): {'PASS' if passed else 'FAIL'}"
    )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        payload = {
            "provenance": prov.finish(),
            "quick": args.quick,
            "wait_ms": WAIT_MS,
            "batch_size": BATCH_SIZE,
            "memory_budget_mb": args.memory_budget,
            "tune_budget_s": budget,
            "memory_window_s": args.memory_window,
            "runs": runs,
            "bar": "under the CPU hog, the pick's workers' RSS summed over them <= the budget",
            "passed": passed,
        }
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
