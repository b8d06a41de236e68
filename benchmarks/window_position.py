"""Where a window opens in the epoch: a fixed slice against windows spread over the epoch, and
both against whole epochs (NOTE [window position] in ``stallscope/throughput/measure.py``).

The pipeline is ``tuner_pipelines.py``'s jittery source: about 1 ms of CPU per item, and a fixed
5% of the indices stall 100 ms (a slow replica), so what a window measures depends on which
items fall in it. Two configs the tuner's race has to tell apart there, 11 workers each: in-order
delivery at prefetch 4 and out-of-order delivery at prefetch 2.

For each config, in the same run, alternating the order every repeat (A B, B A, ...):

- ``fixed``: ``measure`` as it was before windows were positioned (``epoch_position=None``: the
  cycle starts at the epoch's first batch and the window opens after the warm-up), with windows
  of ``--short`` and ``--window`` seconds: every repeat times the same items;
- ``spread``: ``measure`` with the window opening at the repeat's point of the epoch
  (``stats.spread_point``), both configs of a repeat at the same point;
- ``epochs``: the same DataLoader with ``persistent_workers=True``, its first epoch left out, then
  whole epochs back to back for ``--window`` seconds or more, as a training loop iterates it.

The question: which of the two does each way rank first, and does that agree with whole epochs?

    python benchmarks/window_position.py --json benchmarks/results/window_position.json
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
from tuner_pipelines import KINDS  # noqa: E402

from stallscope.config import LoaderConfig  # noqa: E402
from stallscope.runtime.processes import no_orphans  # noqa: E402
from stallscope.stats import spread_point  # noqa: E402
from stallscope.target import load_target  # noqa: E402
from stallscope.throughput.measure import measure  # noqa: E402

CONFIGS = {
    "in-order pf=4": {"prefetch_factor": 4, "in_order": True},
    "unordered pf=2": {"prefetch_factor": 2, "in_order": False},
}
WORKERS = 11


def epochs_rate(dataset: Any, batch_size: int, knobs: dict[str, Any], window: float) -> float:
    """Samples per second over whole epochs, re-iterating a persistent loader as a loop does."""
    from torch.utils.data import DataLoader

    loader = DataLoader(
        dataset, batch_size=batch_size, num_workers=WORKERS, persistent_workers=True, **knobs
    )
    for _ in loader:  # the first epoch pays the workers' start-up: left out
        pass
    samples, start = 0, time.perf_counter()
    while time.perf_counter() - start < window:
        for batch in loader:
            samples += int(batch[0].shape[0])
    elapsed = time.perf_counter() - start
    del loader
    return samples / elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=6)
    parser.add_argument("--short", type=float, default=0.75, help="the race's window (seconds)")
    parser.add_argument("--window", type=float, default=1.0, help="the re-race's window (seconds)")
    parser.add_argument("--json", default="benchmarks/results/window_position.json")
    args = parser.parse_args()

    provenance = Provenance.start()
    factory = KINDS["jittery"][0]
    pipeline = load_target(factory)
    made = factory()
    dataset, batch_size = made["dataset"], made["batch_size"]
    arms = [
        ("fixed", args.short),
        ("fixed", args.window),
        ("spread", args.short),
        ("epochs", args.window),
    ]
    rates: dict[tuple[str, float, str], list[float]] = {}
    names = list(CONFIGS)
    with no_orphans():
        for repeat in range(args.repeats):
            for mode, window in arms:
                for name in names if repeat % 2 == 0 else names[::-1]:
                    knobs = CONFIGS[name]
                    if mode == "epochs":
                        rate = epochs_rate(dataset, batch_size, knobs, window)
                    else:
                        config = LoaderConfig(num_workers=WORKERS, batch_size=batch_size, **knobs)
                        position = spread_point(repeat) if mode == "spread" else None
                        m = measure(
                            pipeline,
                            config,
                            min_window_s=window,
                            max_window_s=10.0,
                            epoch_position=position,
                        )
                        rate = m.samples_per_s
                    rates.setdefault((mode, window, name), []).append(round(rate, 1))
                    print(
                        f"repeat {repeat}: {mode:6} {window:4} s {name:15} {rate:8.1f}", flush=True
                    )
    rows = []
    for mode, window in arms:
        medians = {name: statistics.median(rates[(mode, window, name)]) for name in names}
        ratio = medians[names[0]] / medians[names[1]]
        rows.append(
            {
                "way": mode,
                "window_s": window,
                "medians": {name: round(v, 1) for name, v in medians.items()},
                "in_order_over_unordered": round(ratio, 3),
                "ranked_first": max(medians, key=lambda n: medians[n]),
                "runs": {name: rates[(mode, window, name)] for name in names},
            }
        )
    truth = rows[-1]["ranked_first"]
    for row in rows[:-1]:
        row["agrees_with_epochs"] = row["ranked_first"] == truth
    payload = {
        "provenance": provenance.finish(),
        "pipeline": "benchmarks/tuner_pipelines.py:jittery",
        "workers": WORKERS,
        "configs": CONFIGS,
        "settings": {"repeats": args.repeats, "short_s": args.short, "window_s": args.window},
        "rows": rows,
    }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(payload, indent=2) + "\n")
    for row in rows:
        print(
            f"{row['way']:6} {row['window_s']:4} s  {row['medians']}  ratio "
            f"{row['in_order_over_unordered']}  first: {row['ranked_first']}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
