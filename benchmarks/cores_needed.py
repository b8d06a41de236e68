"""The ceiling and the cores needed (issue 18): ``stallscope doctor --target-rate`` against a
by-hand figure.

For each pipeline (the built-in demo, and the CPU-bound JPEG look-alike of
``tests/pipelines/ceiling_vision.py``):

1. ``stallscope doctor TARGET --budget B --target-rate R --json`` runs as a user would run it; the
   record's ``ceiling`` and ``cores_needed`` are read back.
2. By hand, with plain DataLoaders and nothing of stallscope's measuring code:

   - CPU seconds per sample: ``num_workers=0``, one intra-op thread (as in a worker), process CPU
     time over a window of ``--window-s`` seconds after two warm-up batches;
   - the doctor's pick (its num_workers, prefetch_factor, batch size) and the single process (one
     intra-op thread, as each worker runs) run in ``--rounds`` interleaved rounds (A B B A ...)
     over ``--window-s`` windows; each window reads the rate and the CPU time of the main process
     and its children (the workers); medians;
   - CPU efficiency = CPU per sample in one process ÷ CPU per sample at the pick (the doctor's
     figure where it clocked the pick's CPU), and SPEC §3.2's rate efficiency = the pick's rate over
     ``min(cores, workers)`` single-process rates (its stand-in);
   - cores needed = R × CPU seconds per sample ÷ min(1, the efficiency the doctor used).

3. The ratio of the doctor's figure to the by-hand one; the bar is within 25%.

Also recorded: how busy other processes kept this machine's cores during the by-hand CPU window
(a shared machine gives the loader fewer cores, and the figures say so).

    python benchmarks/cores_needed.py [--budget 30] [--target-rate 5000] \\
        [--out benchmarks/results/cores_needed.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import torch
from torch.utils.data import DataLoader, RandomSampler

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "pipelines"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _provenance import Provenance  # noqa: E402

PIPELINES = {
    "demo": "stallscope.demo:pipeline",
    "jpeg-lookalike": "tests/pipelines/ceiling_vision.py:loader",
}


def demo_parts() -> tuple:
    from stallscope.demo import pipeline
    from stallscope.demo.cache import build_demo_dataset

    build_demo_dataset()
    target = pipeline()
    return target["dataset"], target["batch_size"]


def lookalike_parts() -> tuple:
    import ceiling_vision

    loader = ceiling_vision.loader()
    return loader.dataset, loader.batch_size


PARTS = {"demo": demo_parts, "jpeg-lookalike": lookalike_parts}


def busy_cpu_seconds() -> float:
    allowed = os.sched_getaffinity(0)
    return sum(
        sum(t) - t.idle - getattr(t, "iowait", 0.0)
        for i, t in enumerate(psutil.cpu_times(percpu=True))
        if i in allowed
    )


def endless(dataset) -> RandomSampler:
    """Random indices without an epoch end (the demo has fewer images than a window needs)."""
    return RandomSampler(dataset, replacement=True, num_samples=10**8)


def cpu_per_sample(dataset, batch_size: int, window_s: float) -> dict:
    """Process CPU seconds per sample, single-process, one intra-op thread."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        it = iter(DataLoader(dataset, batch_size=batch_size, sampler=endless(dataset)))
        for _ in range(2):
            next(it)
        busy0, cpu0, wall0 = busy_cpu_seconds(), time.process_time(), time.perf_counter()
        samples = 0
        while time.perf_counter() - wall0 < window_s:
            samples += len(next(it)[1])
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        others = (busy_cpu_seconds() - busy0 - cpu) / wall
    finally:
        torch.set_num_threads(previous)
    return {
        "cpu_s_per_sample": cpu / samples,
        "wall_s_per_sample": wall / samples,
        "samples": samples,
        "window_s": wall,
        "others_busy_cores": round(max(0.0, others), 3),
    }


def loader_cpu_seconds() -> float:
    """CPU seconds of this process and its children (the DataLoader's workers)."""
    total = time.process_time()
    for child in psutil.Process().children(recursive=True):
        try:
            t = child.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


def steady_rate(
    dataset,
    batch_size: int,
    workers: int,
    prefetch: int | None,
    window_s: float,
    one_thread: bool = True,
) -> tuple[float, float]:
    """(samples/s, CPU seconds per sample of main process and workers) after the prefetch buffer and
    one round per worker are drained; single-process with one intra-op thread unless not
    ``one_thread``."""
    previous = torch.get_num_threads()
    if not workers and one_thread:
        torch.set_num_threads(1)
    kwargs = {"num_workers": workers}
    if workers:
        kwargs["prefetch_factor"] = prefetch or 2
    loader = DataLoader(dataset, batch_size=batch_size, sampler=endless(dataset), **kwargs)
    it = iter(loader)
    try:
        for _ in range(workers * (prefetch or 2) + workers + 2 if workers else 2):
            next(it)
        cpu0, start, samples = loader_cpu_seconds(), time.perf_counter(), 0
        while time.perf_counter() - start < window_s:
            samples += len(next(it)[1])
        wall, cpu = time.perf_counter() - start, loader_cpu_seconds() - cpu0
        return samples / wall, cpu / samples
    finally:
        del it
        torch.set_num_threads(previous)


def run_doctor(target: str, budget: float, target_rate: float) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "report.json"
        cmd = [
            sys.executable,
            "-m",
            "stallscope",
            "doctor",
            target,
            "--budget",
            str(budget),
            "--target-rate",
            str(target_rate),
            "--skip",
            "check,stages",
            "--out",
            folder,
            "--json",
            str(out),
            "--quiet",
        ]
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
        if proc.returncode not in (0, 1):
            raise SystemExit(f"doctor failed: {proc.stderr}")
        return json.loads(out.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budget", type=float, default=30.0)
    parser.add_argument("--target-rate", type=float, default=5000.0)
    parser.add_argument("--window-s", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", default=None, help="one of: " + ", ".join(PIPELINES))
    parser.add_argument(
        "--out", type=Path, default=ROOT / "benchmarks" / "results" / "cores_needed.json"
    )
    args = parser.parse_args()
    from stallscope.runtime.host import usable_cores

    provenance = Provenance.start()
    cores = usable_cores()
    rows = []
    for name, target in PIPELINES.items():
        if args.only and name != args.only:
            continue
        started = time.perf_counter()
        record = run_doctor(target, args.budget, args.target_rate)
        doctor_s = time.perf_counter() - started
        print(
            f"{name}: doctor in {doctor_s:.0f} s: {json.dumps(record.get('ceiling'))} "
            f"{json.dumps(record.get('cores_needed'))}",
            flush=True,
        )
        ceiling, needed = record.get("ceiling") or {}, record.get("cores_needed") or {}
        measured = (record.get("results") or []) + (record.get("trials") or [])
        pick = next(
            (res["config"] for res in measured if res.get("label") == needed.get("efficiency_of")),
            None,
        )
        pick = pick or (record.get("best") or {}).get("config") or {}
        dataset, batch_size = PARTS[name]()
        batch_size = pick.get("batch_size", batch_size)
        workers, prefetch = pick.get("num_workers", 0), pick.get("prefetch_factor")
        cost = cpu_per_sample(dataset, batch_size, args.window_s)
        single, multi, multi_cpu = [], [], []
        for r in range(args.rounds):  # A B, B A, ...
            order = [0, workers] if r % 2 == 0 else [workers, 0]
            for w in order:
                rate, cpu = steady_rate(dataset, batch_size, w, prefetch, args.window_s)
                if w == 0:
                    single.append(rate)
                else:
                    multi.append(rate)
                    multi_cpu.append(cpu)
        single_rate = statistics.median(single)
        pick_rate = statistics.median(multi) if workers else single_rate
        rate_efficiency = pick_rate / (min(cores, max(workers, 1)) * single_rate)
        if (
            not workers
        ):  # the pick is the user's single process, with torch's default intra-op threads
            multi_cpu = [
                steady_rate(dataset, batch_size, 0, None, args.window_s, one_thread=False)[1]
                for _ in range(args.rounds)
            ]
        pick_cpu = statistics.median(multi_cpu)
        cpu_efficiency = cost["cpu_s_per_sample"] / pick_cpu
        efficiency = cpu_efficiency if needed.get("efficiency_from") == "cpu" else rate_efficiency
        by_hand = args.target_rate * cost["cpu_s_per_sample"] / min(1.0, efficiency)
        row = {
            "pipeline": name,
            "target": target,
            "doctor_command": (
                f"stallscope doctor {target} --budget {args.budget:g} "
                f"--target-rate {args.target_rate:g} --skip check,stages"
            ),
            "doctor_seconds": round(doctor_s, 1),
            "ceiling": ceiling,
            "cores_needed": needed,
            "pick": pick,
            "by_hand": {
                "cpu_ms_per_sample": round(cost["cpu_s_per_sample"] * 1000, 4),
                "wall_ms_per_sample_single_process": round(cost["wall_s_per_sample"] * 1000, 4),
                "others_busy_cores": cost["others_busy_cores"],
                "single_process_samples_per_s": [round(x, 1) for x in single],
                "pick_samples_per_s": [round(x, 1) for x in multi],
                "pick_cpu_ms_per_sample": [round(x * 1000, 4) for x in multi_cpu],
                "cpu_efficiency": round(cpu_efficiency, 4),
                "rate_efficiency": round(rate_efficiency, 4),
                "efficiency": round(efficiency, 4),
                "cores_needed": round(by_hand, 2),
                "cpu_ceiling_samples_per_s": round(cores / cost["cpu_s_per_sample"], 1),
            },
            "ratio_doctor_over_hand": round(needed["cores"] / by_hand, 4)
            if needed.get("cores")
            else None,
        }
        row["within_25pct"] = (
            row["ratio_doctor_over_hand"] is not None
            and abs(row["ratio_doctor_over_hand"] - 1) <= 0.25
        )
        rows.append(row)
        print(
            json.dumps({k: row[k] for k in ("pipeline", "ratio_doctor_over_hand", "within_25pct")}),
            flush=True,
        )
        print(
            f"  doctor: ceiling {ceiling.get('samples_per_s')} ({ceiling.get('basis')}), pick "
            f"fraction {ceiling.get('pick_fraction')}, cores needed {needed.get('cores')} (cpu "
            f"{needed.get('cpu_ms_per_sample')} ms, efficiency {needed.get('efficiency')} of "
            f"{needed.get('efficiency_of')})",
            flush=True,
        )
        print(
            f"  by hand: cpu {row['by_hand']['cpu_ms_per_sample']} ms, efficiency "
            f"{row['by_hand']['efficiency']}, cores needed {row['by_hand']['cores_needed']}, "
            f"others busy {cost['others_busy_cores']} cores",
            flush=True,
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    previous = json.loads(args.out.read_text()) if args.out.exists() and args.only else {}
    merged = {r["pipeline"]: r for r in previous.get("pipelines", [])}
    merged.update({r["pipeline"]: r for r in rows})
    result = {
        "script": "benchmarks/cores_needed.py",
        "provenance": provenance.finish(),
        "usable_cores": cores,
        "target_rate": args.target_rate,
        "budget_s": args.budget,
        "window_s": args.window_s,
        "rounds": args.rounds,
        "torch": torch.__version__,
        "pipelines": list(merged.values()),
    }
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
