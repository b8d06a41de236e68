"""`bench` at num_workers=0 vs an independent timing of the user's own loader (SPEC §7 fidelity).

For the three real-shape loaders in tests/pipelines (token-budget translation buckets with a
dict collater; OpenCV mosaic detection through a DataLoader subclass; WAV + mel audio with
shuffle, drop_last and a padding collate), alternate a plain timing of the user's loader at
num_workers=0 (samples as their batches hold them, over wall time) with ``ss.bench`` at
num_workers=0 on the same loader, in adjacent pairs (A B, then B A), and report the medians,
the median of the paired ratios bench / independent (the claim: within 0.8–1.25), and bench's
batches/s.

    python benchmarks/fidelity_agreement.py [--pairs 8] [--window 1.0] [--threads N]
        [--out benchmarks/results/fidelity_agreement.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "pipelines"))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import real_audio  # noqa: E402
import real_detection  # noqa: E402
import real_translation  # noqa: E402
import torch  # noqa: E402
from _provenance import Provenance  # noqa: E402
from user_timing import independent_rate  # noqa: E402

import stallscope as ss  # noqa: E402
from stallscope.target import load_target  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--pairs", type=int, default=8, help="adjacent A/B pairs per pipeline (default 8)"
    )
    parser.add_argument("--window", type=float, default=1.0, help="seconds per timing (default 1)")
    parser.add_argument(
        "--threads", type=int, default=None, help="torch intra-op threads for both (default: leave)"
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(ROOT) / "benchmarks" / "results" / "fidelity_agreement.json",
    )
    args = parser.parse_args()
    prov = Provenance.start()
    rows = []
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    print(
        "| loader | independent (samples/s) | bench (samples/s) | bench ÷ independent (median of "
        "pairs) | bench batches/s |"
    )
    print("| --- | ---: | ---: | ---: | ---: |")
    for module in (real_translation, real_detection, real_audio):
        pipeline = load_target(module.make_loader)
        independent, benched, batches = [], [], []
        for pair in range(args.pairs):
            for which in "AB" if pair % 2 == 0 else "BA":
                if which == "A":
                    independent.append(independent_rate(module, args.window))
                else:
                    row = ss.bench(
                        pipeline,
                        num_workers=[0],
                        repeats=1,
                        min_window_s=args.window,
                        sample_resources=False,
                    ).results[0]
                    benched.append(row.median_rate)
                    batches.append(row.measurements[0].batches_per_s)
        ratio = statistics.median(b / a for a, b in zip(independent, benched))
        print(
            f"| {module.__name__} | {statistics.median(independent):,.1f} | "
            f"{statistics.median(benched):,.1f} | {ratio:.3f} | "
            f"{statistics.median(batches):,.1f} |",
            flush=True,
        )
        rows.append(
            {
                "loader": module.__name__,
                "independent_samples_per_s": [round(r, 1) for r in independent],
                "bench_samples_per_s": [round(r, 1) for r in benched],
                "median_paired_ratio": round(ratio, 4),
                "within_0_8_to_1_25": 0.8 <= ratio <= 1.25,
            }
        )
    payload = {
        "provenance": prov.finish(),
        "pairs": args.pairs,
        "window_s": args.window,
        "threads": args.threads,
        "loaders": rows,
    }
    args.out.write_text(json.dumps(payload, indent=2) + "\n")


if __name__ == "__main__":
    main()
