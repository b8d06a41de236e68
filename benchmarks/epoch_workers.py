"""Workers beyond an epoch's batches: the steady state against a loop over whole epochs.

stallscope measures a DataLoader in the steady state: its sampler runs on across epochs, so no
epoch boundary falls inside a window (SPEC §3.1). A training loop re-iterates the loader at each
epoch, and an epoch's indices run out with its last batch: with persistent workers, every epoch
still starts with an empty pipeline and ends with workers that have nothing left to fetch. Where
an epoch holds fewer batches than there are workers, the extra workers only wait, and the steady
state reports a rate no loop gets.

For each worker count, in the same run, alternating the order every repeat (A B … B A):

- ``steady``: the user's loader with its sampler repeated (what ``bench`` and the tuner measure),
  after a warm-up of two batches per worker, for ``--window`` seconds;
- ``epochs``: the same loader with ``persistent_workers=True``, its first epoch (the workers'
  start-up) left out, then whole epochs back to back for at least ``--window`` seconds, as a
  training loop iterates it.

It also records the worker counts ``bench`` and ``doctor`` sweep by default on this machine, with
and without the cap at the epoch's batches (``throughput.sweep.default_worker_counts``).

    python benchmarks/epoch_workers.py --workers 0,2,4,8 \\
        --json benchmarks/results/epoch_workers.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _provenance import Provenance  # noqa: E402


def _loader(dataset: Any, batch_size: int, workers: int, sampler: Any = None) -> Any:
    from torch.utils.data import DataLoader

    extra: dict[str, Any] = {"prefetch_factor": 2, "persistent_workers": True} if workers else {}
    return DataLoader(dataset, batch_size=batch_size, num_workers=workers, sampler=sampler, **extra)


def _count(batch: Any) -> int:
    return int(batch[0].shape[0])


def steady_rate(dataset: Any, batch_size: int, workers: int, window: float) -> float:
    """Samples per second with the sampler repeated: no epoch boundary in the window."""
    loader = _loader(dataset, batch_size, workers, sampler=list(range(len(dataset))) * 10_000)
    it = iter(loader)
    for _ in range(2 * max(1, workers)):
        next(it)
    samples, start = 0, time.perf_counter()
    while time.perf_counter() - start < window:
        samples += _count(next(it))
    elapsed = time.perf_counter() - start
    del it
    return samples / elapsed


def epochs_rate(dataset: Any, batch_size: int, workers: int, window: float) -> float:
    """Samples per second over whole epochs, re-iterating the loader as a training loop does."""
    loader = _loader(dataset, batch_size, workers)
    for _ in loader:  # the first epoch pays the workers' start-up: left out
        pass
    samples, start = 0, time.perf_counter()
    while time.perf_counter() - start < window:
        for batch in loader:
            samples += _count(batch)
    elapsed = time.perf_counter() - start
    del loader
    return samples / elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="0,2,4,8", help="comma-separated worker counts")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--window", type=float, default=2.0, help="seconds per measurement")
    parser.add_argument("--commit", help="the commit, where the tree travelled without .git")
    parser.add_argument("--json", default="benchmarks/results/epoch_workers.json")
    args = parser.parse_args()

    from stallscope.demo import pipeline
    from stallscope.runtime.host import usable_cores
    from stallscope.target import load_target
    from stallscope.throughput.sweep import default_worker_counts

    provenance = Provenance.start()
    if args.commit:
        provenance.commit = args.commit
    target = pipeline()
    dataset, batch_size = target["dataset"], target["batch_size"]
    epoch_batches = load_target(target).batches_per_epoch()
    workers = [int(w) for w in args.workers.split(",")]
    arms = [(mode, w) for w in workers for mode in ("steady", "epochs")]
    rates: dict[tuple[str, int], list[float]] = {arm: [] for arm in arms}
    for repeat in range(args.repeats):
        for mode, w in arms if repeat % 2 == 0 else arms[::-1]:
            measure = steady_rate if mode == "steady" else epochs_rate
            rate = measure(dataset, batch_size, w, args.window)
            rates[(mode, w)].append(round(rate, 1))
            print(f"repeat {repeat}: {mode:6} w={w:<3} {rate:8.1f} samples/s", flush=True)
    rows = []
    for w in workers:
        steady = statistics.median(rates[("steady", w)])
        epochs = statistics.median(rates[("epochs", w)])
        rows.append(
            {
                "workers": w,
                "steady_samples_per_s": round(steady, 1),
                "epochs_samples_per_s": round(epochs, 1),
                "epochs_over_steady": round(epochs / steady, 3) if steady > 0 else None,
                "steady_runs": rates[("steady", w)],
                "epochs_runs": rates[("epochs", w)],
            }
        )
    cores = usable_cores()
    payload = {
        "provenance": provenance.finish(),
        "pipeline": "stallscope.demo:pipeline",
        "samples_per_epoch": len(dataset),
        "batch_size": batch_size,
        "batches_per_epoch": epoch_batches,
        "settings": {"repeats": args.repeats, "window_s": args.window, "workers": workers},
        "default_worker_counts": {
            "cores": cores,
            "uncapped": default_worker_counts(cores),
            "capped_at_the_epoch": default_worker_counts(cores, epoch_batches=epoch_batches),
        },
        "rows": rows,
    }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(payload, indent=2) + "\n")
    for row in rows:
        print(
            f"w={row['workers']:<3} steady {row['steady_samples_per_s']:8.1f}  "
            f"epochs {row['epochs_samples_per_s']:8.1f}  ratio {row['epochs_over_steady']}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
