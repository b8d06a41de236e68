"""Every committed result under ``benchmarks/results/``, regenerated from HEAD by one script.

Each entry below is one benchmark run whose output is committed: the command (as run from the
repository root) and the files it writes. ``tests/unit/test_benchmark_results.py`` holds the
results folder to this list (no committed result without the command that makes it) and the
README and docs/ to the results folder (no link to a result that is not there).

The runs go one after the other, never side by side: each measures a 2-core machine that another
benchmark would load. Each JSON carries its own provenance (commit, host, load at the start and the
end: ``_provenance.py``), so a run taken on a busy machine says so. The working tree must be clean
(a result names the commit it was measured at); ``--allow-dirty`` runs anyway and the provenance
then says ``+dirty``.

    python benchmarks/regenerate.py --list                  # the entries and their expected minutes
    python benchmarks/regenerate.py                         # all of them (about two hours)
    python benchmarks/regenerate.py --only demo_doctor attach
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from _provenance import git_commit, load_average  # noqa: E402

RESULTS = "benchmarks/results"


@dataclass(frozen=True)
class Entry:
    name: str
    argv: tuple[str, ...]  # after ``python``
    outputs: tuple[str, ...]  # file names under benchmarks/results/
    minutes: float  # what it took on a quiet 2-core machine, roughly
    needs_gpu: bool = False  # run only where torch sees a CUDA device; skipped elsewhere
    min_cores: int = 0  # run only where this many cores are usable; skipped elsewhere


def _json(name: str) -> str:
    return f"{RESULTS}/{name}.json"


ENTRIES: tuple[Entry, ...] = (
    Entry(
        "doctor_tune_agreement",
        ("benchmarks/doctor_tune_agreement.py", "--json", _json("doctor_tune_agreement")),
        ("doctor_tune_agreement.json",),
        8,
    ),
    Entry(
        "loader_kinds_agreement",
        (
            "benchmarks/loader_kinds_agreement.py",
            *("--rounds", "3", "--window", "1.0", "--budget", "15"),
            *("--json", _json("loader_kinds_agreement")),
        ),
        ("loader_kinds_agreement.json",),
        20,
    ),
    Entry(
        "loader_libraries",
        ("benchmarks/loader_libraries.py", "--json", _json("loader_libraries")),
        ("loader_libraries.json",),
        10,
    ),
    Entry(
        "check_examples",
        ("benchmarks/check_examples.py", "--json", _json("check_examples")),
        ("check_examples.json",),
        1,
    ),
    Entry(
        "cores_needed",
        ("benchmarks/cores_needed.py", "--out", _json("cores_needed")),
        ("cores_needed.json",),
        8,
    ),
    Entry(
        "code_changes",
        ("benchmarks/code_changes.py", "--rounds", "5", "--json", _json("code_changes")),
        ("code_changes.json",),
        15,
    ),
    Entry(
        "watch_hot_path",
        ("benchmarks/watch_overhead.py", "--hot-path", "--json", _json("watch_hot_path")),
        ("watch_hot_path.json",),
        1,
    ),
    Entry(
        "attach",
        ("benchmarks/attach_overhead.py", "--json", _json("attach")),
        ("attach.json",),
        10,
    ),
    Entry(
        "attach_cpu_rate20",
        (
            "benchmarks/attach_overhead.py",
            *("--settings", "cpu", "--rate", "20", "--json", _json("attach_cpu_rate20")),
        ),
        ("attach_cpu_rate20.json",),
        5,
    ),
    Entry(
        "confidence_calibration",
        (
            "benchmarks/confidence_calibration.py",
            *("--budget", "40", "--json", _json("confidence_calibration")),
        ),
        ("confidence_calibration.json",),
        25,
    ),
    Entry(
        "confidence_calibration_budget60",
        (
            "benchmarks/confidence_calibration.py",
            *("--per-kind", "2", "--budget", "60"),
            *("--json", _json("confidence_calibration_budget60")),
        ),
        ("confidence_calibration_budget60.json",),
        20,
    ),
    Entry(
        "declared_stage_accuracy",
        (
            "benchmarks/declared_stage_accuracy.py",
            *("--repeats", "3", "--out", _json("declared_stage_accuracy")),
        ),
        ("declared_stage_accuracy.json",),
        5,
    ),
    Entry(
        "stage_accuracy",
        ("benchmarks/stage_accuracy.py", "--samples", "192", "--out", _json("stage_accuracy")),
        ("stage_accuracy.json",),
        1,
    ),
    Entry(
        "compare_calibration",
        ("benchmarks/compare_calibration.py", "--out", _json("compare_calibration")),
        ("compare_calibration.json",),
        3,
    ),
    Entry(
        "fidelity_agreement",
        (
            "benchmarks/fidelity_agreement.py",
            *("--pairs", "6", "--window", "0.8", "--threads", "1"),
            *("--out", _json("fidelity_agreement")),
        ),
        ("fidelity_agreement.json",),
        1,
    ),
    Entry(
        "watch_accuracy",
        ("benchmarks/watch_accuracy.py", "--runs", "5", "--out", _json("watch_accuracy")),
        ("watch_accuracy.json",),
        1,
    ),
    Entry(
        "tune_under_load",
        ("benchmarks/tune_under_load.py", "--json", _json("tune_under_load")),
        ("tune_under_load.json",),
        6,
    ),
    Entry(
        "epoch_workers",
        ("benchmarks/epoch_workers.py", "--workers", "0,2,4,8", "--json", _json("epoch_workers")),
        ("epoch_workers.json",),
        2,
    ),
    Entry(
        "epoch_workers_16cores",
        (
            "benchmarks/epoch_workers.py",
            *("--workers", "0,7,16", "--json", _json("epoch_workers_16cores")),
        ),
        ("epoch_workers_16cores.json",),
        2,
        min_cores=16,
    ),
    Entry(
        "tuner_vs_grid",
        ("benchmarks/tuner_vs_grid.py", "--json", _json("tuner_vs_grid")),
        ("tuner_vs_grid.json",),
        45,
    ),
    Entry(
        "window_position",
        ("benchmarks/window_position.py", "--json", _json("window_position")),
        ("window_position.json",),
        5,
    ),
    # Last: it rewrites the README's block, a tracked file outside benchmarks/results/, and a
    # result measured after it would name a dirty tree.
    Entry(
        "demo_doctor",
        ("benchmarks/demo_doctor.py",),
        ("demo_doctor.json", "demo_doctor.console.txt", "demo_doctor.provenance.json"),
        2,
    ),
    Entry(
        "cuda_paths",
        ("benchmarks/cuda_paths.py", "--out", _json("cuda_paths")),
        ("cuda_paths.json",),
        6,
        needs_gpu=True,
    ),
)


def outputs() -> set[str]:
    """Every file name under benchmarks/results/ that an entry writes."""
    return {name for entry in ENTRIES for name in entry.outputs}


def _cuda_available() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=[e.name for e in ENTRIES], default=None)
    parser.add_argument("--list", action="store_true", help="print the entries and stop")
    parser.add_argument("--allow-dirty", action="store_true")
    args = parser.parse_args(argv)
    chosen = [e for e in ENTRIES if args.only is None or e.name in args.only]
    if args.list:
        for entry in chosen:
            print(f"{entry.name:34} ~{entry.minutes:>4.0f} min  python {' '.join(entry.argv)}")
        print(f"{'total':34} ~{sum(e.minutes for e in chosen):>4.0f} min")
        return 0
    commit = git_commit()
    if commit is None or (commit.endswith("+dirty") and not args.allow_dirty):
        log(f"the working tree is not a clean commit ({commit}): commit first, or --allow-dirty")
        return 2
    failed = []
    for entry in chosen:
        if entry.needs_gpu and not _cuda_available():
            log(f"{entry.name}: skipped, it needs a CUDA device and torch sees none here")
            continue
        if len(os.sched_getaffinity(0)) < entry.min_cores:
            log(f"{entry.name}: skipped, it needs {entry.min_cores} usable cores")
            continue
        log(f"{entry.name}: python {' '.join(entry.argv)} (load {load_average()}) …")
        t0 = time.perf_counter()
        code = subprocess.run([sys.executable, *entry.argv], cwd=ROOT, env=os.environ).returncode
        log(f"{entry.name}: exit {code} after {time.perf_counter() - t0:.0f} s")
        if code not in (0, 1):  # 1: the run finished and its bar was missed; the JSON says so
            failed.append(entry.name)
    if failed:
        log(f"failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
