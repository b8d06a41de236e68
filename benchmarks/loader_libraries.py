"""The real loader libraries of issue 26, each built by a factory taking ``num_workers`` with the
library's own defaults: stallscope's rate against an independent timer, and ``tune``'s pick
against the best an independent timer finds among ``num_workers`` 0, 2 and the pick.

Libraries (targets under ``tests/pipelines/``): webdataset (``WebLoader`` over a ``WebDataset``
with batches built in the workers, ``batch_size=None``), litdata (``StreamingDataLoader`` over a
``StreamingDataset`` written with litdata's own writer), and a torchtitan-style
``StatefulDataLoader`` subclass with required keyword-only constructor arguments.

Per library, in A B B A rounds:

* A: stallscope's ``measure()`` (what ``bench`` runs) of the pipeline's baseline, the trial the
  kind's adapter builds (here: the factory called as the target calls it);
* B: :func:`loader_kinds_agreement.independent`, a plain loop over ``make_loader()``: skip the
  first batches, count samples by the batch's leading dimension, epoch start-up off the clock.

Then the real ``stallscope tune`` picks a config; ``make_loader(num_workers=0)``,
``make_loader(num_workers=2)`` and the pick (built by running the code ``tune`` printed, which
calls the factory) are timed the plain way in shuffled rounds: ``pick_fraction`` = the pick's
median ÷ the best median. Last, the real ``stallscope doctor``: its exit code, error findings,
steps not run and why, and whether its printed code ran.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests" / "pipelines"))

from _provenance import Provenance  # noqa: E402
from loader_kinds_agreement import (  # noqa: E402
    doctor_summary,
    independent,
    resolve,
    snippet_factory,
    tune_pick,
)

LIBRARIES = {
    "real_webdataset:make_loader": "webdataset",
    "real_litdata:make_loader": "litdata",
    "real_stateful_subclass:make_loader": "torchdata StatefulDataLoader subclass",
    "real_hf_datasets:make_loader": "datasets (map-style, with_transform)",
    "real_hf_datasets:make_stream_loader": "datasets (IterableDataset)",
}


def pick_versus_independent(name: str, factory, args) -> dict:
    """The tune pick (its printed code) against ``factory(num_workers=0)`` and ``=2``."""
    picked = tune_pick(name, args.budget)
    workers = picked["config"]["num_workers"]
    arms = {
        f"pick (w={workers})": snippet_factory(picked["code"]) if picked["code"] else None,
        "w=0": lambda: factory(num_workers=0),
        "w=2": lambda: factory(num_workers=2),
    }
    if arms[f"pick (w={workers})"] is None:
        return {"pick": picked["config"], "code_printed": False}
    rates: dict[str, list[float]] = {arm: [] for arm in arms}
    shuffle = random.Random(0)
    for _ in range(args.rounds):
        order = list(arms)
        shuffle.shuffle(order)
        for arm in order:
            rates[arm].append(independent(arms[arm], args.window))
    medians = {arm: statistics.median(v) for arm, v in rates.items()}
    best = max(medians, key=medians.get)
    pick = f"pick (w={workers})"
    return {
        "pick_num_workers": workers,
        "code_printed": True,
        "code": picked["code"],
        "tuning_seconds": picked["tuning_seconds"],
        "independent_samples_per_s": {arm: [round(v, 1) for v in r] for arm, r in rates.items()},
        "medians": {arm: round(v, 1) for arm, v in medians.items()},
        "best_timed": best,
        "pick_fraction": round(medians[pick] / medians[best], 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--window", type=float, default=1.5)
    parser.add_argument("--budget", type=float, default=20.0, help="tune's --budget per library")
    parser.add_argument("--json", type=Path, default=HERE / "results" / "loader_libraries.json")
    args = parser.parse_args()
    provenance = Provenance.start()

    from stallscope.runtime.processes import no_orphans
    from stallscope.target import load_target
    from stallscope.throughput.measure import measure

    rows = []
    for name, library in LIBRARIES.items():
        factory = resolve(name)
        pipeline = load_target(factory)
        ours, theirs = [], []
        with no_orphans():
            for r in range(args.rounds):
                order = ("ours", "theirs") if r % 2 == 0 else ("theirs", "ours")
                for arm in order:
                    if arm == "ours":
                        rate = measure(pipeline, pipeline.baseline, min_window_s=args.window)
                        ours.append(rate.samples_per_s)
                    else:
                        theirs.append(independent(factory, args.window))
        ratios = [a / b for a, b in zip(ours, theirs, strict=True)]
        row: dict = {
            "library": library,
            "target": name,
            "kind": pipeline.kind.name,
            "kind_description": pipeline.kind.description,
            "config": pipeline.baseline.label(pipeline.kind.knobs),
            "stallscope_samples_per_s": [round(v, 1) for v in ours],
            "independent_samples_per_s": [round(v, 1) for v in theirs],
            "ratio_median": round(statistics.median(ratios), 3),
        }
        print(
            f"{library:40s} {row['kind']:10s} rate ratio {row['ratio_median']:.3f} "
            f"(ours {statistics.median(ours):,.0f}/s, independent "
            f"{statistics.median(theirs):,.0f}/s)",
            flush=True,
        )
        with no_orphans():
            row["tune"] = pick_versus_independent(name, factory, args)
        if row["tune"].get("code_printed"):
            print(
                f"{'':40s} tune picked w={row['tune']['pick_num_workers']}: "
                f"{row['tune']['pick_fraction']:.3f} of the best timed "
                f"({row['tune']['best_timed']})",
                flush=True,
            )
        row["doctor"] = doctor_summary(name, args.budget)
        print(
            f"{'':40s} doctor exit {row['doctor']['exit_code']}, error findings "
            f"{row['doctor']['error_findings'] or 'none'}, not run "
            f"{[n['step'] for n in row['doctor']['not_run']] or 'none'}, code ran "
            f"{row['doctor']['code_verified']}",
            flush=True,
        )
        rows.append(row)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps(
            {
                "provenance": provenance.finish(),
                "rounds": args.rounds,
                "window_s": args.window,
                "tune_budget_s": args.budget,
                "rows": rows,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
