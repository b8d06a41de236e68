"""How often the ``compare`` gate trips on A/A, and whether its interval covers a known slow-down.

Two claims about the compare engine (in-process, num_workers=0, sleep datasets of known
cost from ``tests/pipelines/compare_pipelines.py``), measured by repetition:

* A/A: the same pipeline on both sides, run ``--aa-runs`` times (3 s budget each, gate
  at 10% slower). The gate must never trip: a noisy machine widens the interval instead.
* +20%: B sleeps 6 ms per item where A sleeps 5 ms, run ``--slow-runs`` times (25 s budget,
  99% level). The gate must trip every time, and the interval should cover the true ratio
  of the rates: each side's real time per item (timed inside the dataset) plus the
  loader's own overhead per sample (measured on a free dataset).

    python benchmarks/compare_calibration.py [--aa-runs 20] [--slow-runs 3]
        [--out benchmarks/results/compare_calibration.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests" / "pipelines"))

import compare_pipelines as cp  # noqa: E402
from _provenance import Provenance  # noqa: E402

from stallscope.analysis.comparison import compare_facts  # noqa: E402
from stallscope.target import pipeline_from_object  # noqa: E402
from stallscope.throughput import compare as engine  # noqa: E402
from stallscope.throughput.measure import measure  # noqa: E402

GATE_PCT = 10
SLOW_COST_S = 0.005


def _pair(slower: bool, cost_s: float | None = None):
    a, b = cp.base(), (cp.plus20() if slower else cp.base())
    if cost_s is not None:
        a["dataset"] = cp.SleepItems(cost_s)
        b["dataset"] = cp.SleepItems(cost_s * (1 + cp.EXTRA) if slower else cost_s)
    return pipeline_from_object(a, label="a"), pipeline_from_object(b, label="b")


def _row(run, facts) -> dict:
    ratio = facts["ratio"]
    return {
        "rounds": len(run.rounds),
        "stopped": run.stopped,
        "estimate": round(ratio["estimate"], 4),
        "low": round(ratio["low"], 4),
        "high": round(ratio["high"], 4),
        "verdict": facts["verdict"],
        "gate_failed": facts["gate"]["failed"],
    }


def a_to_a(runs: int) -> list[dict]:
    rows = []
    for i in range(runs):
        a, b = _pair(False)
        run = engine.compare(a, b, window_s=0.1, budget_s=3.0, precision=0.03)
        rows.append(_row(run, compare_facts(run.rounds, fail_if_slower_pct=GATE_PCT)))
        print(f"A/A {i + 1}/{runs}: {json.dumps(rows[-1])}", flush=True)
    return rows


def slower_by_20(runs: int) -> list[dict]:
    free = pipeline_from_object({"dataset": cp.SleepItems(0.0), "batch_size": 4})
    rows = []
    for i in range(runs):
        a, b = _pair(True, cost_s=SLOW_COST_S)
        a.dataset.durations, b.dataset.durations = [], []
        run = engine.compare(
            a, b, window_s=0.3, budget_s=25, precision=0.03, level=0.99, sample_resources=False
        )
        facts = compare_facts(run.rounds, fail_if_slower_pct=GATE_PCT, level=0.99)
        overhead = 1.0 / measure(free, free.baseline, min_window_s=0.3).samples_per_s
        true = (statistics.fmean(a.dataset.durations) + overhead) / (
            statistics.fmean(b.dataset.durations) + overhead
        )
        row = _row(run, facts)
        row["true_ratio"] = round(true, 4)
        row["covered"] = row["low"] - 0.005 <= true <= row["high"] + 0.005
        rows.append(row)
        print(f"+20% {i + 1}/{runs}: {json.dumps(row)}", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--aa-runs", type=int, default=20)
    parser.add_argument("--slow-runs", type=int, default=3)
    parser.add_argument(
        "--out", type=Path, default=ROOT / "benchmarks" / "results" / "compare_calibration.json"
    )
    args = parser.parse_args()
    prov = Provenance.start()
    aa = a_to_a(args.aa_runs)
    slow = slower_by_20(args.slow_runs)
    summary = {
        "aa_runs": len(aa),
        "aa_gate_failures": sum(r["gate_failed"] for r in aa),
        "slow_runs": len(slow),
        "slow_gate_trips": sum(r["gate_failed"] for r in slow),
        "slow_intervals_covering_truth": sum(r["covered"] for r in slow),
    }
    print(json.dumps(summary))
    payload = {
        "provenance": prov.finish(),
        "gate_pct": GATE_PCT,
        "summary": summary,
        "a_to_a": aa,
        "slower_by_20": slow,
    }
    args.out.write_text(json.dumps(payload, indent=2) + "\n")


if __name__ == "__main__":
    main()
