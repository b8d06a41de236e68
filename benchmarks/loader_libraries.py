"""The real loader libraries of issue 26, each built by a factory taking ``num_workers`` with the
library's own defaults: stallscope's ``bench`` rate against an independent timer, and
``doctor``'s pick against the best an independent timer finds among ``num_workers`` 0, 2 and the
pick.

Libraries (targets under ``tests/pipelines/``): torch ``DataLoader``; torchdata
``StatefulDataLoader`` and a torchtitan-style subclass with required keyword-only constructor
arguments; a ``torchdata.nodes`` graph; webdataset (``WebLoader`` over a ``WebDataset`` with
batches built in the workers, ``batch_size=None``); litdata (``StreamingDataLoader`` over a
``StreamingDataset`` written with litdata's own writer); Hugging Face ``datasets`` (map-style with
``with_transform``, and an ``IterableDataset``); Lightning's ``CombinedLoader``; accelerate's
prepared loader; grain's ``DataLoader`` (its workers through ``worker_count=``, started at every
epoch).

Per library, in A B B A rounds:

* A: stallscope's ``measure()`` (what ``bench`` runs) of the pipeline's baseline, the trial the
  kind's adapter builds;
* B: :func:`independent`, a plain loop over ``make_loader()``: skip the first batches, count
  samples by the batch's leading dimension, each epoch's start-up off the clock (the wait for its
  first batch and the batches the workers made meanwhile, as ``bench`` reports start-up apart).

Then the real ``stallscope doctor`` (its bench and tune steps; ``--full`` adds check, stages and
code changes) picks one config (its verdict: the record's ``analysis`` block); ``make_loader
(num_workers=0)``, ``make_loader(num_workers=2)`` and the pick (built by running the code doctor
printed, which calls the factory) are timed the plain way in shuffled rounds: ``pick_fraction`` =
the pick's median ÷ the best median, on the steady clock and on the wall clock (epoch start-ups
included). Where a loader's epochs are short and restart its workers, doctor decides on the rate
per epoch (NOTE [per-epoch rate] in ``tuning/epoch_cost.py``), which the wall clock measures; its
verdict's sentence saying so is recorded (``doctor.decided_by``), and the wall clock judges that
pick (``pick.pick_fraction``; the steady clock judges the rest). Where the pick is the
``num_workers=0`` or ``=2`` arm's config (``pick.pick_is``), the two arms are one config: their
measurements are pooled into one median, not set against each other (two timings of one config
differ by the machine's noise alone). The machine's load average is recorded per library.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests" / "pipelines"))

from _provenance import Provenance  # noqa: E402
from loader_kinds_agreement import _pythonpath, resolve, snippet_factory  # noqa: E402


def independent(factory, window_s: float, burst: int, warmup: int = 8) -> tuple[float, float]:
    """Two rates of a plain loop over ``factory()``'s loader, re-iterated at each epoch end:

    * steady: each epoch's start-up off the clock — the wait for its first batch and the next
      ``burst`` batches, which the workers made during that wait (NOTE [epoch restarts] in
      ``throughput/measure.py``; ``burst`` = workers × prefetch − 1, 0 without workers); where
      epochs hold fewer than twice ``burst + 1`` batches there is no steady state, and it is the
      wall rate;
    * wall: everything on the clock, epoch start-ups included (what a training loop of many
      such epochs sees).

    Samples are counted by the batch's leading dimension."""
    from stallscope.pipeline.kinds import close_trial
    from stallscope.pipeline.structure import batch_length

    loader = factory()
    iterator = iter(loader)
    try:
        for _ in range(warmup):
            try:
                next(iterator)
            except StopIteration:
                iterator = iter(loader)
        start = last = time.perf_counter()
        off = 0.0  # seconds of start-up
        steady = wall = batches = epochs = 0
        skip = 0
        while last - start < window_s or epochs < 3 and last - start < 4 * window_s:
            try:
                batch = next(iterator)
                fresh = False
            except StopIteration:
                iterator = iter(loader)
                batch = next(iterator)
                fresh = True
            now = time.perf_counter()
            n = batch_length(batch)
            wall += n
            batches += 1
            epochs += int(fresh)
            if fresh or skip > 0:
                off += now - last
                skip = burst if fresh else skip - 1
            else:
                steady += n
            last = now
        elapsed = last - start
        if not steady or (epochs and batches < 2 * (burst + 1) * epochs):
            return wall / elapsed, wall / elapsed
        return steady / (elapsed - off), wall / elapsed
    finally:
        close_trial(loader, iterator)


def burst_of(config: dict | None) -> int:
    from stallscope.config import LoaderConfig
    from stallscope.throughput.measure import restart_burst

    return restart_burst(LoaderConfig.from_dict(config)) if config else 0


LIBRARIES = {
    "real_loader_kinds:torch_loader": "torch DataLoader",
    "real_loader_kinds:stateful_loader": "torchdata StatefulDataLoader",
    "real_stateful_subclass:make_loader": "StatefulDataLoader subclass (required kw-only args)",
    "real_loader_kinds:nodes_graph": "torchdata.nodes graph",
    "real_webdataset:make_loader": "webdataset WebLoader",
    "real_litdata:make_loader": "litdata StreamingDataLoader",
    "real_hf_datasets:make_loader": "datasets map-style (with_transform)",
    "real_hf_datasets:make_stream_loader": "datasets IterableDataset",
    "real_adapters:lightning_factory": "Lightning CombinedLoader",
    "real_adapters:accelerate_factory": "accelerate prepared loader",
    "real_grain:make_loader": "grain DataLoader (worker_count=)",
}


def load() -> float:
    return round(os.getloadavg()[0], 2)


def doctor_pick(name: str, budget: float, full: bool) -> dict:
    """Run the real ``stallscope doctor`` on ``name``: its verdict's config, printed code, exit
    code, error findings and the steps it did not run."""
    skip = [] if full else ["--skip", "check,stages,changes"]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "doctor.json"
        began = time.perf_counter()
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "stallscope",
                "doctor",
                name,
                "--budget",
                str(budget),
                "--repeats",
                "1",
                *skip,
                "--quiet",
                "--out",
                str(Path(tmp) / "report"),
                "--json",
                str(out),
            ],
            env=dict(os.environ, PYTHONPATH=_pythonpath()),
            cwd=HERE.parent,
            timeout=budget * 6 + 300,
            capture_output=True,
            text=True,
        )
        seconds = time.perf_counter() - began
        record = json.loads(out.read_text()) if out.exists() else {}
    verdict = record.get("analysis") or {}
    code = record.get("loader_code") or {}
    findings = record.get("findings") or []
    return {
        "exit_code": done.returncode,
        "seconds": round(seconds, 1),
        "action": verdict.get("action"),
        "label": verdict.get("label"),
        "config": verdict.get("config"),
        "samples_per_s": verdict.get("samples_per_s"),
        "measurement": verdict.get("measurement"),
        # Where the rate per epoch, start-ups included, decided (short epochs that restart their
        # workers): the verdict's sentence; None where the steady state decided.
        "decided_by": verdict.get("decided_by"),
        "baseline": verdict.get("baseline"),
        "code": code.get("python"),
        "code_verified": code.get("verified"),
        "error_findings": [
            f"{f['code']}: {f['message']}" for f in findings if f.get("severity") == "error"
        ],
        "not_run": record.get("not_run") or [],
        "stderr_tail": done.stderr[-400:] if done.returncode not in (0, 1) else "",
    }


def same_arm(name: str, config: dict) -> str | None:
    """The arm ("w=0" or "w=2") whose loader is the config doctor named, if one is: the factory's
    defaults with that worker count. Two arms of one config differ only by noise, so their
    measurements are pooled rather than set against each other."""
    from stallscope.config import LoaderConfig
    from stallscope.target import load_target

    if not config:
        return None
    baseline = load_target(resolve(name)).baseline
    pick = LoaderConfig.from_dict(config)
    for workers in (0, 2):
        if pick == baseline.replace(num_workers=workers):
            return f"w={workers}"
    return None


def with_workers(name: str):
    """``factory(n)``: the target's factory called with ``n`` workers through the parameter it
    takes for them (``num_workers``; grain's ``worker_count``), as stallscope's trials call it."""
    from stallscope.target import load_target

    factory = resolve(name)
    parameters = getattr(load_target(factory).kind, "parameters", None) or {}
    param = next(
        (p for p, (field, _) in parameters.items() if field == "num_workers"), "num_workers"
    )
    return lambda n: factory(**{param: n})


def pick_versus_independent(factory, doctor: dict, args, same: str | None = None) -> dict:
    """Doctor's pick (its printed code where it printed some) against ``factory(0)`` and
    ``factory(2)`` (``with_workers``), timed the plain way in shuffled rounds. Where the pick is
    one of those arms (``same``), both are timed and their measurements pooled: one config, one
    median."""
    config = doctor.get("config") or {}
    if doctor.get("code"):
        pick = snippet_factory(doctor["code"])
    elif config:
        workers = config.get("num_workers", 0)
        pick = lambda: factory(workers)  # noqa: E731
    else:
        return {"timed": False, "why": "doctor named no config"}
    arms = {
        "pick": pick,
        "w=0": lambda: factory(0),
        "w=2": lambda: factory(2),
    }
    bursts = {
        "pick": burst_of(config),
        "w=0": 0,
        "w=2": 2 * 2 - 1,  # DataLoader's default prefetch_factor (2) per worker
    }
    rates: dict[str, list[float]] = {arm: [] for arm in arms}
    walls: dict[str, list[float]] = {arm: [] for arm in arms}
    shuffle = random.Random(0)
    for _ in range(args.rounds):
        order = list(arms)
        shuffle.shuffle(order)
        for arm in order:
            steady, wall = independent(arms[arm], args.window, bursts[arm])
            rates[arm].append(steady)
            walls[arm].append(wall)
    out: dict = {"timed": True, "pick_is": same}
    for clock, measured in (("steady", rates), ("wall", walls)):
        both = measured["pick"] + measured[same] if same else []
        pooled = {arm: both if same and arm in ("pick", same) else v for arm, v in measured.items()}
        medians = {arm: statistics.median(v) for arm, v in pooled.items()}
        best = max(medians, key=lambda arm: medians[arm])
        out[clock] = {
            "samples_per_s": {arm: [round(v, 1) for v in r] for arm, r in measured.items()},
            "medians": {arm: round(v, 1) for arm, v in medians.items()},
            "best_timed": best,
            "pick_fraction": round(medians["pick"] / medians[best], 3) if medians[best] else None,
        }
    return out


def rate_versus_independent(name: str, args) -> dict:
    """stallscope's ``measure()`` of the baseline against the plain loop, A B B A."""
    from stallscope.runtime.processes import no_orphans
    from stallscope.target import load_target
    from stallscope.throughput.measure import measure

    factory = resolve(name)
    pipeline = load_target(factory)
    burst = burst_of(pipeline.baseline.to_dict())
    ours, theirs = [], []
    with no_orphans():
        for r in range(args.rounds):
            for arm in ("ours", "theirs") if r % 2 == 0 else ("theirs", "ours"):
                if arm == "ours":
                    m = measure(pipeline, pipeline.baseline, min_window_s=args.window)
                    ours.append(m.samples_per_s)
                else:
                    theirs.append(independent(factory, args.window, burst)[0])
    ratios = [a / b for a, b in zip(ours, theirs, strict=True)]
    return {
        "kind": pipeline.kind.name,
        "kind_description": pipeline.kind.description,
        "config": pipeline.kind.label(pipeline.baseline),
        "stallscope_samples_per_s": [round(v, 1) for v in ours],
        "independent_samples_per_s": [round(v, 1) for v in theirs],
        "ratio_median": round(statistics.median(ratios), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--window", type=float, default=1.0)
    parser.add_argument("--budget", type=float, default=12.0, help="doctor's --budget (its tuner)")
    parser.add_argument("--full", action="store_true", help="doctor with check, stages, changes")
    parser.add_argument("--only", default=None, help="comma-separated targets (module:function)")
    parser.add_argument("--json", type=Path, default=HERE / "results" / "loader_libraries.json")
    args = parser.parse_args()
    provenance = Provenance.start()

    from stallscope.runtime.processes import no_orphans

    names = args.only.split(",") if args.only else list(LIBRARIES)
    rows = []
    for name in names:
        library = LIBRARIES.get(name, name)
        row: dict = {"library": library, "target": name, "load_average_at_start": load()}
        row.update(rate_versus_independent(name, args))
        print(
            f"{library:52s} rate ratio {row['ratio_median']:.3f} (ours "
            f"{statistics.median(row['stallscope_samples_per_s']):,.0f}/s, independent "
            f"{statistics.median(row['independent_samples_per_s']):,.0f}/s), load "
            f"{row['load_average_at_start']}",
            flush=True,
        )
        row["doctor"] = doctor_pick(name, args.budget, args.full)
        same = same_arm(name, row["doctor"].get("config") or {})
        with no_orphans():
            row["pick"] = pick_versus_independent(with_workers(name), row["doctor"], args, same)
        if row["pick"]["timed"]:
            steady, wall = row["pick"]["steady"], row["pick"]["wall"]
            # The clock the pick was chosen on is the one that judges it: the wall clock (epoch
            # start-ups included) where the rate per epoch decided, else the steady state.
            clock = "wall" if row["doctor"]["decided_by"] else "steady"
            row["pick"]["deciding_clock"] = clock
            row["pick"]["pick_fraction"] = row["pick"][clock]["pick_fraction"]
            print(
                f"{'':52s} doctor exit {row['doctor']['exit_code']}, pick "
                f"{row['doctor']['label']!r}: {steady['pick_fraction']} of the best timed "
                f"steady ({steady['best_timed']}; {steady['medians']}), "
                f"{wall['pick_fraction']} on the wall clock ({wall['best_timed']}; "
                f"{wall['medians']}); decided "
                + ("per epoch" if row["doctor"]["decided_by"] else "on the steady state"),
                flush=True,
            )
        else:
            print(f"{'':52s} doctor exit {row['doctor']['exit_code']}: {row['pick']['why']}")
        row["load_average_at_end"] = load()
        rows.append(row)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps(
            {
                "provenance": provenance.finish(),
                "rounds": args.rounds,
                "window_s": args.window,
                "doctor_budget_s": args.budget,
                "doctor_steps": "all" if args.full else "bench, tune",
                "rows": rows,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
