"""``bench`` on every loader kind agrees with an independent timing of the user's own loader.

For each loader in ``KINDS`` (look-alikes under ``tests/pipelines/``: a torchdata.nodes graph, a
wrapper holding a DataLoader, a UserDict-batch DataLoader, a factory-built stream, DataLoader
subclasses with keyword-only constructor arguments, a StatefulDataLoader subclass over a
token-packing stream, a streaming library's loader over a self-sharding stream, an adapter that
passes for a DataLoader, a multi-task wrapper; and the real libraries' own: accelerate's prepared
loader and Lightning's CombinedLoader), at the loader's own settings, A B B A rounds of:

* A: stallscope's ``measure()`` of the pipeline's baseline (the trial the kind's adapter builds);
* B: a plain timing of the object the factory returns: iterate it (re-iterating at each epoch
  end), skip the first batches, count samples by the batch's leading dimension over a window of
  at least ``--window`` seconds. The wait for an epoch's first batch (starting its workers or
  threads again) is left out of the clock, as ``bench`` reports start-up apart from the
  steady-state rate (SPEC §3.1; its epoch-boundary cost is the ``persistent_workers`` advice).

Prints and writes (``--json``) the median ratio A ÷ B per kind; 1.0 is perfect agreement.

Then, per kind, ``stallscope tune`` (the real CLI, default settings but ``--budget``) picks a
config, and the pick is timed the plain way against a small grid of the kind's own knob values
(and the loader's own settings), in rounds of shuffled order: the pick is built by running the
code ``tune`` printed (its verified snippet) where it printed some, the grid configs by the kind's
adapter. ``pick_fraction`` = the pick's median ÷ the best median of all timed configs.

Last, ``stallscope doctor`` (the real CLI, ``--budget`` for its tuner) runs on each kind: the
error-level findings it reports (none expected: the look-alikes are clean loaders), the steps it
could not run and why, and whether the code it prints was run first.
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
sys.path.insert(0, str(HERE.parent / "tests" / "pipelines"))
sys.path.insert(0, str(HERE))

from _provenance import Provenance  # noqa: E402

KINDS = [
    "real_loader_kinds:nodes_graph",
    "real_loader_kinds:wrapped_loader",
    "real_loader_kinds:mapping_batches",
    "real_loader_kinds:threaded_stream",
    "real_loader_kinds:sharded_text",
    "real_loader_kinds:stateful_text",
    "real_lm_stream:make_loader",
    "real_streaming_lib:make_loader",
    "real_adapters:proxy_loader",
    "real_adapters:multitask_loader",
    "real_adapters:accelerate_loader",
    "real_adapters:lightning_combined",
]


def resolve(name: str):
    """The factory named ``module:function`` (modules under tests/pipelines/)."""
    import importlib

    module, function = name.split(":")
    return getattr(importlib.import_module(module), function)


def independent(factory, window_s: float, warmup: int = 8) -> float:
    """Samples/s of a plain loop over ``factory()``'s loader (re-iterated at each epoch end)."""
    from stallscope.pipeline.kinds import close_trial
    from stallscope.pipeline.structure import batch_length

    loader = factory()
    iterator = iter(loader)

    restarts = 0.0  # seconds spent waiting for an epoch's first batch (start-up, not steady state)

    def take():
        nonlocal iterator, restarts
        try:
            return next(iterator)
        except StopIteration:
            began = time.perf_counter()
            iterator = iter(loader)
            next(iterator)
            restarts += time.perf_counter() - began
            return None  # its samples are not counted either

    try:
        for _ in range(warmup):
            take()
        start = time.perf_counter()
        restarts = 0.0
        samples = 0
        while time.perf_counter() - start < window_s:
            batch = take()
            samples += 0 if batch is None else batch_length(batch)
        return samples / (time.perf_counter() - start - restarts)
    finally:
        close_trial(loader, iterator)


def _pythonpath() -> str:
    """The test pipelines' folder first, then whatever PYTHONPATH already says (the checkout's
    ``src`` when the package is not installed from it)."""
    return os.pathsep.join(
        p for p in (str(HERE.parent / "tests" / "pipelines"), os.environ.get("PYTHONPATH")) if p
    )


def tune_pick(name: str, budget: float) -> dict:
    """Run the real ``stallscope tune`` on ``name``; its record's pick and printed code."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "tune.json"
        env = dict(os.environ, PYTHONPATH=_pythonpath())
        subprocess.run(
            [
                sys.executable,
                "-m",
                "stallscope",
                "tune",
                name,
                "--budget",
                str(budget),
                "--quiet",
                "--json",
                str(out),
            ],
            check=True,
            env=env,
            cwd=HERE.parent,
            timeout=budget * 4 + 120,
        )
        record = json.loads(out.read_text())
    code = (record.get("loader_code") or {}).get("python")
    return {
        "config": record["best"]["config"],
        "code": code,
        "tuning_seconds": record.get("tuning_seconds"),
    }


def doctor_summary(name: str, budget: float) -> dict:
    """Run the real ``stallscope doctor`` on ``name``: its exit code, errors, not-run
    steps, code."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "doctor.json"
        env = dict(os.environ, PYTHONPATH=_pythonpath())
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "stallscope",
                "doctor",
                name,
                "--budget",
                str(budget),
                "--quiet",
                "--out",
                str(Path(tmp) / "report"),
                "--json",
                str(out),
            ],
            env=env,
            cwd=HERE.parent,
            timeout=budget * 6 + 300,
            capture_output=True,
            text=True,
        )
        record = json.loads(out.read_text()) if out.exists() else {}
    findings = record.get("findings") or []
    code = record.get("loader_code") or {}
    return {
        "exit_code": done.returncode,
        "error_findings": [
            f"{f['code']}: {f['message']}" for f in findings if f.get("severity") == "error"
        ],
        "not_run": record.get("not_run") or [],
        "code_printed": bool(code.get("python")),
        "code_verified": code.get("verified"),
        "code_reason": code.get("reason"),
        "stderr_tail": done.stderr[-400:] if done.returncode else "",
    }


def snippet_factory(code: str):
    """A factory that runs the printed snippet and returns the ``loader`` it defines."""

    def build():
        scope: dict = {"__name__": "__snippet__"}
        exec(compile(code, "<tune --emit python>", "exec"), scope)
        return scope["loader"]

    return build


def grid_configs(pipeline) -> list:
    """The loader's own settings and the kind's worker/thread knob over a small range."""
    base = pipeline.baseline
    configs = [base]
    if "num_workers" in pipeline.kind.knobs:
        configs += [base.replace(num_workers=n) for n in (0, 2, 4, 8) if n != base.num_workers]
    if "worker_threads" in pipeline.kind.knobs:
        configs += [base.replace(worker_threads=n) for n in (4, 16, 32) if n != base.worker_threads]
    return configs


def tune_versus_grid(name: str, factory, pipeline, args) -> dict:
    from stallscope.config import LoaderConfig
    from stallscope.pipeline.loaders import build_loader

    picked = tune_pick(name, args.budget)
    pick = LoaderConfig.from_dict(
        {k: v for k, v in picked["config"].items() if k in LoaderConfig.__dataclass_fields__}
    )
    arms = {
        "pick": snippet_factory(picked["code"])
        if picked["code"]
        else (lambda c=pick: build_loader(pipeline, c))
    }
    for config in grid_configs(pipeline):
        if config.label() != pick.label():
            arms[config.label()] = lambda c=config: build_loader(pipeline, c)
    rates: dict[str, list[float]] = {arm: [] for arm in arms}
    shuffle = random.Random(0)
    for _ in range(args.rounds):
        order = list(arms)
        shuffle.shuffle(order)
        for arm in order:
            rates[arm].append(independent(arms[arm], args.window))
    medians = {arm: statistics.median(v) for arm, v in rates.items()}
    best = max(medians, key=medians.get)
    return {
        "pick": pick.label(),
        "pick_built_from": "printed code" if picked["code"] else "adapter",
        "tuning_seconds": picked["tuning_seconds"],
        "best_timed": "pick" if best == "pick" else best,
        "medians": {arm: round(v, 1) for arm, v in medians.items()},
        "pick_fraction": round(medians["pick"] / medians[best], 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--window", type=float, default=1.5)
    parser.add_argument("--budget", type=float, default=30.0, help="tune's --budget per kind")
    parser.add_argument("--skip-tune", action="store_true", help="no tune-versus-grid step")
    parser.add_argument("--skip-doctor", action="store_true", help="no doctor step")
    parser.add_argument(
        "--kinds", nargs="*", help="module:function targets (default: all of KINDS)"
    )
    parser.add_argument(
        "--json", type=Path, default=HERE / "results" / "loader_kinds_agreement.json"
    )
    args = parser.parse_args()
    provenance = Provenance.start()

    from stallscope.runtime.processes import no_orphans
    from stallscope.target import load_target
    from stallscope.throughput.measure import measure

    rows = []
    for name in args.kinds or KINDS:
        factory = resolve(name)
        pipeline = load_target(factory)
        ratios, ours, theirs = [], [], []
        with no_orphans():
            for r in range(args.rounds):
                order = ("ours", "theirs") if r % 2 == 0 else ("theirs", "ours")
                got = {}
                for arm in order:
                    if arm == "ours":
                        got[arm] = measure(
                            pipeline, pipeline.baseline, min_window_s=args.window
                        ).samples_per_s
                    else:
                        got[arm] = independent(factory, args.window)
                ours.append(got["ours"])
                theirs.append(got["theirs"])
                ratios.append(got["ours"] / got["theirs"])
        row = {
            "kind": pipeline.kind.name,
            "target": name,
            "config": pipeline.baseline.label(),
            "stallscope_samples_per_s": [round(v, 1) for v in ours],
            "independent_samples_per_s": [round(v, 1) for v in theirs],
            "ratio_median": round(statistics.median(ratios), 3),
        }
        print(
            f"{name:34s} {row['kind']:20s} {row['config']:24s} ratio {row['ratio_median']:.3f}  "
            f"(ours {statistics.median(ours):,.0f}/s, independent "
            f"{statistics.median(theirs):,.0f}/s)"
        )
        if pipeline.kind.tunable and not args.skip_tune:
            with no_orphans():
                row["tune"] = tune_versus_grid(name, factory, pipeline, args)
            print(
                f"{'':34s} tune picked {row['tune']['pick']} ({row['tune']['pick_built_from']}): "
                f"{row['tune']['pick_fraction']:.3f} of the best timed "
                f"({row['tune']['best_timed']})"
            )
        if not args.skip_doctor:
            row["doctor"] = doctor_summary(name, args.budget)
            print(
                f"{'':34s} doctor exit {row['doctor']['exit_code']}, error findings "
                f"{row['doctor']['error_findings'] or 'none'}, code printed "
                f"{row['doctor']['code_printed']}"
            )
        rows.append(row)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps(
            {
                "rounds": args.rounds,
                "window_s": args.window,
                "tune_budget_s": args.budget,
                "provenance": provenance.finish(),
                "rows": rows,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
