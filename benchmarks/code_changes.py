"""Code changes, applied and measured (issue 18, part 3; SPEC §8).

For each pipeline, the built-in demo (``stallscope.demo:pipeline``), a CPU-bound look-alike
(``tests/pipelines/vision_changes.py:pipeline``: JPEG decode of 768×576 sources, random resized
crop to 224, flip, colour jitter, normalise to float), and three datasets that do their work inline
in ``__getitem__`` with no transform list (JPEG files of 768×576 on disk): PIL + NumPy
(``inline_pil.py``: decode, NumPy random crop, flip, brightness/contrast jitter, normalise), OpenCV
(``inline_opencv.py``: imread, resize to 320×240, random crop, flip, normalise) and albumentations
(``inline_albumentations.py``: imread, ``A.Compose`` of resize, random crop, flip,
brightness/contrast, normalise):

1. ``ss.tune`` (``--tune-budget`` s) picks the best knob config, as ``doctor`` does.
2. ``stallscope.changes.code_changes`` applies every applicable change inside its probes and races
   each against that pick in the same interleaved rounds (``--rounds``, A B … B A), on the same
   items.
3. Writes every change's speed-up (its rate ÷ the pick's, median of the paired rounds), rounds,
   side effect, whether its diff was verified, and what did not apply and why.

Done when: on each pipeline at least one applied change measures ≥ 1.3× the best knob config, with
a verified diff and a measured side effect. Exit code 0 when it passes, 1 otherwise.

    python benchmarks/code_changes.py          # writes benchmarks/results/code_changes.json
    python benchmarks/code_changes.py --quick  # a check that the script works
    python benchmarks/code_changes.py --only inline-pil --only inline-opencv  # those again; the
                                               # other pipelines keep their figures in the JSON

Each pipeline's entry carries its own provenance block (commit, host, load average at its start
and end: ``benchmarks/_provenance.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "pipelines"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _provenance import Provenance  # noqa: E402

from stallscope.changes import code_changes  # noqa: E402
from stallscope.runtime.host import host_info  # noqa: E402
from stallscope.target import load_target  # noqa: E402
from stallscope.tuning.tuner import tune  # noqa: E402

PIPELINES = {
    "demo": "stallscope.demo:pipeline",
    "cpu-vision-look-alike": str(ROOT / "tests" / "pipelines" / "vision_changes.py") + ":pipeline",
    "inline-pil": str(ROOT / "tests" / "pipelines" / "inline_pil.py") + ":pipeline",
    "inline-opencv": str(ROOT / "tests" / "pipelines" / "inline_opencv.py") + ":pipeline",
    "inline-albumentations": str(ROOT / "tests" / "pipelines" / "inline_albumentations.py")
    + ":pipeline",
}
BAR = 1.3


def run_one(name: str, target: str, args: argparse.Namespace) -> dict[str, Any]:
    provenance = Provenance.start()
    pipeline = load_target(target)
    load_before = os.getloadavg()[0]
    started_at = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    started = time.perf_counter()
    tuned = tune(pipeline, budget_s=args.tune_budget)
    print(
        f"[{name}] pick {tuned.config.label()} at {tuned.samples_per_s:,.1f} samples/s "
        f"({time.perf_counter() - started:.0f} s)",
        flush=True,
    )
    result = code_changes(
        pipeline, tuned.config, budget_s=args.budget, max_rounds=args.rounds, window_s=args.window
    )
    data = result.to_dict()
    changes = []
    for change in data["code_changes"]:
        changes.append(
            {
                "id": change["id"],
                "title": change["title"],
                "speedup": change["speedup"],
                "speedup_interval_90": change.get("speedup_interval"),
                "rounds": change["rounds"],
                "samples_per_s": change["samples_per_s"],
                "pick_samples_per_s": change["pick_samples_per_s"],
                "verified_diff": change["verified"],
                "unverified_reason": change["unverified_reason"],
                "diff": change["diff"],
                "side_effect": change["side_effect"],
                "error": change["error"],
            }
        )
        print(
            f"[{name}]   {change['title']}: {change['speedup']}× over {change['rounds']} round(s); "
            f"{change['side_effect']['summary']}",
            flush=True,
        )
    for item in data["code_changes_run"]["not_applied"]:
        print(f"[{name}]   not applied: {item['title']}: {item['why']}", flush=True)
    winners = [
        c
        for c in changes
        if (c["speedup"] or 0) >= BAR and c["verified_diff"] and c["side_effect"].get("summary")
    ]
    return {
        "target": target,
        "provenance": provenance.finish(),
        "started_at": started_at,
        "load_average": {"before": round(load_before, 2), "after": round(os.getloadavg()[0], 2)},
        "pick": {
            "label": tuned.config.label(),
            "config": tuned.config.to_dict(),
            "tune_samples_per_s": round(tuned.samples_per_s, 2),
        },
        "race": {
            k: data["code_changes_run"][k]
            for k in ("items", "rounds", "seconds", "notes", "not_applied")
        },
        "changes": changes,
        "passes": bool(winners),
        "args": " ".join(sys.argv[1:]),
        "settings": {
            "tune_budget_s": args.tune_budget,
            "budget_s": args.budget,
            "max_rounds": args.rounds,
            "window_s": args.window,
        },
        "best": max(changes, key=lambda c: c["speedup"] or 0)["id"] if changes else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tune-budget", type=float, default=30.0)
    parser.add_argument(
        "--budget", type=float, default=120.0, help="seconds for the code-change step per pipeline"
    )
    parser.add_argument("--rounds", type=int, default=4, help="interleaved rounds (at most)")
    parser.add_argument("--window", type=float, default=1.0, help="measurement window, seconds")
    parser.add_argument(
        "--only", choices=sorted(PIPELINES), action="append", help="this pipeline (repeatable)"
    )
    parser.add_argument(
        "--quick", action="store_true", help="short budgets: checks that the script works"
    )
    parser.add_argument(
        "--json", type=Path, default=ROOT / "benchmarks" / "results" / "code_changes.json"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.tune_budget, args.budget, args.rounds, args.window = 10.0, 20.0, 1, 0.5
    results = {
        name: run_one(name, target, args)
        for name, target in PIPELINES.items()
        if not args.only or name in args.only
    }
    if (
        args.only and args.json.exists()
    ):  # one pipeline again: keep the other's figures from their own run
        results = {**json.loads(args.json.read_text()).get("pipelines", {}), **results}
    passes = all(r["passes"] for r in results.values())
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps(
            {
                "script": "benchmarks/code_changes.py",
                "commands": sorted(
                    {
                        f"python benchmarks/code_changes.py {r['args']}"
                        for r in results.values()
                        if "args" in r
                    }
                ),
                "bar": (
                    f"at least one applied change >= {BAR}x the best knob config, same "
                    "interleaved rounds"
                ),
                "host": host_info().to_dict(),
                # Per pipeline: its settings, when it ran, and the 1-minute load average (other
                # jobs) around it.
                "pipelines": results,
                "passes": passes,
            },
            indent=2,
            default=str,
        )
        + "\n"
    )
    print(f"wrote {args.json}; {'PASS' if passes else 'FAIL'}")
    return 0 if passes else 1


if __name__ == "__main__":
    sys.exit(main())
