"""The stall fraction ``watch`` and the framework callbacks report on real time, against the truth.

The suite checks these on a fake clock, where the figures are exact; this measures them on the
real one, where sleeps overshoot and a loaded machine preempts. Per run:

* ``watch``: a source that sleeps 6 ms per batch under 4 ms steps (the truth: the sleeps' own
  share, each sleep timed where it happens; the nominal share is 0.6);
* Lightning ``Trainer.fit`` and Hugging Face ``Trainer.train`` with the callbacks, the scenarios
  of ``tests/e2e/test_lightning_real.py`` and ``test_huggingface_real.py`` (a 20 ms fetch, a 30 ms
  step, a busy 10 ms callback), against the truth from the dataset's own fetch log.

The claim: within 0.05 of the truth.

    python benchmarks/watch_accuracy.py [--runs 5] [--out benchmarks/results/watch_accuracy.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests" / "pipelines"))
sys.path.insert(0, str(ROOT / "tests" / "e2e"))

from _provenance import Provenance  # noqa: E402
from framework_timing import Clock, TimedItems  # noqa: E402

import stallscope as ss  # noqa: E402

TOLERANCE = 0.05


class TimedSleeps:
    """``n`` batches, each sleeping ``cost_s``; ``slept`` logs how long each sleep really took."""

    def __init__(self, n: int, cost_s: float) -> None:
        self.n, self.cost_s = n, cost_s
        self.slept: list[float] = []

    def __iter__(self):
        for i in range(self.n):
            start = time.perf_counter()
            time.sleep(self.cost_s)
            self.slept.append(time.perf_counter() - start)
            yield i


def plain_watch() -> dict:
    source, steps = TimedSleeps(30, 0.006), []
    w = ss.watch(source, sample_interval=0.05)
    for _ in w:
        start = time.perf_counter()
        time.sleep(0.004)
        steps.append(time.perf_counter() - start)
    d = w.to_dict()
    # steady state: every step but the first
    data, compute = sum(source.slept[1:]), sum(steps[1:])
    return {"reported": d["stall_fraction"], "truth": round(data / (data + compute), 4)}


def lightning() -> dict:
    import test_lightning_real as lt

    clock = Clock()
    cb = lt.callback(clock)
    _, module, items = lt.fit(clock, [cb, lt.BusyCallback(clock)])
    return {
        "reported": cb.to_dict()["stall_fraction"],
        "truth": round(lt.truth_of(module, items), 4),
    }


def huggingface() -> dict:
    import test_huggingface_real as hf

    items = TimedItems(hf.ITEMS, hf.FETCH_S, as_dict=True, clock=Clock())
    with tempfile.TemporaryDirectory() as tmp:
        cb, ends, items = hf.train(Path(tmp), busy=True, items=items)
    return {"reported": cb.to_dict()["stall_fraction"], "truth": round(hf.truth_of(items, ends), 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--out", type=Path, default=ROOT / "benchmarks" / "results" / "watch_accuracy.json"
    )
    args = parser.parse_args()
    prov = Provenance.start()
    scenarios = {"watch": plain_watch, "lightning": lightning, "huggingface": huggingface}
    results: dict[str, list[dict]] = {name: [] for name in scenarios}
    for i in range(args.runs):
        for name, run in scenarios.items():
            row = run()
            row["difference"] = round(row["reported"] - row["truth"], 4)
            row["within_tolerance"] = abs(row["difference"]) <= TOLERANCE
            results[name].append(row)
            print(f"{name} {i + 1}/{args.runs}: {json.dumps(row)}", flush=True)
    summary = {
        name: {
            "runs": len(rows),
            "within_tolerance": sum(r["within_tolerance"] for r in rows),
            "max_abs_difference": max(abs(r["difference"]) for r in rows),
        }
        for name, rows in results.items()
    }
    print(json.dumps(summary))
    payload = {
        "provenance": prov.finish(),
        "tolerance": TOLERANCE,
        "summary": summary,
        "runs": results,
    }
    args.out.write_text(json.dumps(payload, indent=2) + "\n")


if __name__ == "__main__":
    main()
