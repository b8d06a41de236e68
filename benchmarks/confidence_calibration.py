"""Does the tuner's confidence hold? (issue 18, part 4; NOTE [what the confidence states] in
``stallscope/tuning/confidence.py``.)

For each of at least 20 tunes over the pipelines of ``tuner_pipelines.py`` (CPU-bound,
latency-bound, jittery, tiny in-memory, collate-heavy; kinds interleaved so the machine's
load drifts over all of them alike):

1. ``ss.tune`` with a modest budget (default 40 s) states a pick, its runner-up in the
   final race, its confidence and whether it was a tie;
2. an independent re-race, started afresh after the tune: the pick, the runner-up and the
   user's baseline, ``--rounds`` rounds (default 10) of one measurement each, the order
   reversed every other round (A B C, C B A, ...: two rounds make an A B C C B A block),
   windows of ``--window`` seconds (default 1.0) and at least 8 batches, all configs of a round
   opening their windows at the same point of the epoch and the rounds at points spread over it
   (NOTE [window position] in ``stallscope/throughput/measure.py``).

**Holds** (defined before looking at any result): for every rival R in {runner-up, baseline}
other than the pick, the median over the re-race's rounds of the paired ratio
pick_i / R_i is at least 1 − tie_margin (the margin the tune's record states, 3%). That is
exactly what the confidence claims: the pick is no slower than any raced rival by more than
the margin. A pick declared a tie (``best.tie``) is not counted as a ≥ 95% claim: its report
says "a tie within noise; the cheaper config was kept"; ties are tabled separately.

The table: stated confidence bucket → picks, how many held. Done when at least 95% of the
picks stated ≥ 95% confident (ties apart) hold. For comparison, each row also carries what the
previous confidence (a percentile bootstrap of the paired median ratio ≥ 0.97 over the rounds,
which said 100% after 2 rounds) would have stated on the first two rounds of the same race.

    # 20 tunes, ~35 min on 2 busy cores
    python benchmarks/confidence_calibration.py
    # a quick check of the script
    python benchmarks/confidence_calibration.py --per-kind 1 --budget 15
    python benchmarks/confidence_calibration.py \\
        --json benchmarks/results/confidence_calibration.json
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _provenance import Provenance  # noqa: E402
from tuner_pipelines import KINDS  # noqa: E402

from stallscope.runtime.host import host_info  # noqa: E402
from stallscope.runtime.processes import no_orphans  # noqa: E402
from stallscope.stats import spread_point  # noqa: E402
from stallscope.target import load_target  # noqa: E402
from stallscope.thresholds import TIE_MARGIN  # noqa: E402
from stallscope.throughput.measure import measure  # noqa: E402
from stallscope.tuning import race as race_module  # noqa: E402
from stallscope.tuning.confidence import RaceLog  # noqa: E402
from stallscope.tuning.tuner import tune  # noqa: E402

BUCKETS = [
    (None, "not confirmed (null)"),
    (0.0, "< 50%"),
    (0.5, "50–80%"),
    (0.8, "80–90%"),
    (0.9, "90–95%"),
    (0.95, "≥ 95%"),
]

# The race log of the last tune (a benchmark-only hook: the record keeps medians, not rounds).
_LAST_LOG: list[RaceLog] = []
_original_run = race_module.Race.run


def _run_and_keep_log(self: Any, entrants: Any) -> Any:
    try:
        return _original_run(self, entrants)
    finally:
        _LAST_LOG.append(self.log)


race_module.Race.run = _run_and_keep_log  # type: ignore[method-assign]


def legacy_confidence(
    log: RaceLog, pick: Any, rounds: int = 2, bar: float = 1 - TIE_MARGIN, resamples: int = 1000
) -> float | None:
    """What the previous confidence said on the first ``rounds`` rounds: the share of bootstrap
    resamples of those rounds in which the pick's paired median ratio reached ``bar`` ×
    every rival's."""
    first = [r for r in log.rounds[:rounds] if pick in r]
    if len(first) < 2:
        return None
    rivals = {c for r in first for c in r if c != pick}
    if not rivals:
        return None
    rng = random.Random(0)
    wins = 0
    for _ in range(resamples):
        sample = rng.choices(first, k=len(first))
        ok = True
        for rival in rivals:
            ratios = [r[pick] / r[rival] for r in sample if rival in r and r[rival] > 0]
            if ratios and statistics.median(ratios) < bar:
                ok = False
        wins += ok
    return wins / resamples


def rerace(pipeline: Any, configs: list[Any], *, rounds: int, window: float) -> list[list[float]]:
    """``rounds`` rounds, one measurement per config, order reversed every other round, every
    config of a round opening its window at the same point of the epoch and the rounds spread over
    it (NOTE [window position]: a loop's epochs cover every part of it); rates per config."""
    rates: list[list[float]] = [[] for _ in configs]
    order = list(range(len(configs)))
    for i in range(rounds):
        for index in order if i % 2 == 0 else order[::-1]:
            try:
                m = measure(
                    pipeline,
                    configs[index],
                    min_window_s=window,
                    max_window_s=max(10.0, 4 * window),
                    min_batches=8,
                    timeout=60.0,
                    epoch_position=spread_point(i),
                )
                rates[index].append(m.samples_per_s)
            except Exception as exc:  # a failed re-race measurement: recorded, never a crash
                log(f"  re-race measurement of {configs[index].label()} failed: {exc}")
                rates[index].append(float("nan"))
    return rates


def bucket_of(confidence: float | None) -> str:
    if confidence is None:
        return BUCKETS[0][1]
    label = BUCKETS[1][1]
    for low, name in BUCKETS[1:]:
        if confidence >= low:
            label = name
    return label


def run_one(kind: str, pipeline: Any, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    _LAST_LOG.clear()
    t0 = time.perf_counter()
    with no_orphans():
        tuned = tune(pipeline, budget_s=args.budget, seed=seed)
    tune_s = time.perf_counter() - t0
    section = tuned.to_dict()
    best = section["best"]
    search = tuned.search
    pick = tuned.config
    margin = best.get("tie_margin") or TIE_MARGIN
    rivals: list[tuple[str, Any]] = []
    if search.runner_up is not None and search.runner_up != pick:
        rivals.append(("runner_up", search.runner_up))
    if tuned.baseline != pick and all(tuned.baseline != c for _, c in rivals):
        rivals.append(("baseline", tuned.baseline))
    race_log = _LAST_LOG[-1] if _LAST_LOG else None
    decided = _decision_pick(race_log, search) if race_log else None
    legacy = (
        legacy_confidence(race_log, decided)
        if race_log is not None and decided is not None
        else None
    )
    row: dict[str, Any] = {
        "kind": kind,
        "seed": seed,
        "pick": pick.label(),
        "runner_up": None if search.runner_up is None else search.runner_up.label(),
        "baseline": tuned.baseline.label(),
        "confidence": best["confidence"],
        "tie": bool(best.get("tie")),
        "tie_margin": margin,
        "rounds": best["rounds"],
        "keep_baseline": best["keep_baseline"],
        "tune_seconds": round(tune_s, 1),
        "legacy_confidence_first_2_rounds": legacy,
        "race_rounds": None
        if race_log is None
        else [{c.label(): round(v, 2) for c, v in r.items()} for r in race_log.rounds],
    }
    if not rivals:
        row.update(rerace=None, held=None, bucket=bucket_of(best["confidence"]))
        return row
    t1 = time.perf_counter()
    with no_orphans():
        rates = rerace(
            pipeline, [pick] + [c for _, c in rivals], rounds=args.rounds, window=args.window
        )
    mine = rates[0]
    checks = {}
    for (role, config), theirs in zip(rivals, rates[1:]):
        paired = [
            a / b for a, b in zip(mine, theirs) if b > 0 and not math.isnan(a) and not math.isnan(b)
        ]
        median_ratio = statistics.median(paired) if paired else None
        checks[role] = {
            "config": config.label(),
            "median_ratio": None if median_ratio is None else round(median_ratio, 4),
            "held": median_ratio is not None and median_ratio >= 1 - margin,
            "rates": [round(r, 1) for r in theirs],
        }
    row.update(
        rerace={
            "pick_rates": [round(r, 1) for r in mine],
            "rivals": checks,
            "seconds": round(time.perf_counter() - t1, 1),
        },
        held=all(c["held"] for c in checks.values()),
        bucket=bucket_of(best["confidence"]),
    )
    return row


def _decision_pick(log: RaceLog, search: Any) -> Any:
    """The config the race decided on (the record's pick may add persistent_workers or a
    start method)."""
    configs = log.configs()
    for config in configs:
        if config == search.pick:
            return config
    same = [
        c
        for c in configs
        if c.replace(persistent_workers=False, multiprocessing_context=None)
        == search.pick.replace(persistent_workers=False, multiprocessing_context=None)
    ]
    return same[0] if same else None


def table(rows: list[dict[str, Any]], key: str = "confidence") -> list[dict[str, Any]]:
    out = []
    for _, name in BUCKETS:
        for tie in (False, True):
            got = [
                r for r in rows if r["bucket"] == name and r["tie"] == tie and r["held"] is not None
            ]
            if got:
                held = sum(1 for r in got if r["held"])
                out.append(
                    {
                        "bucket": name,
                        "tie": tie,
                        "picks": len(got),
                        "held": held,
                        "held_share": round(held / len(got), 3),
                    }
                )
    return out


def legacy_table(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    got = [
        r
        for r in rows
        if r["held"] is not None and (r["legacy_confidence_first_2_rounds"] or 0) >= 0.95
    ]
    held = sum(1 for r in got if r["held"])
    return [
        {
            "bucket": "previous bootstrap, first 2 rounds, ≥ 95%",
            "picks": len(got),
            "held": held,
            "held_share": round(held / len(got), 3) if got else None,
        }
    ]


def markdown(summary: dict[str, Any]) -> str:
    lines = [
        "| stated confidence | tie | picks | held in the re-race | share |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    for t in summary["table"]:
        lines.append(
            f"| {t['bucket']} | {'yes' if t['tie'] else 'no'} | {t['picks']} | {t['held']} | "
            f"{t['held_share']:.0%} |"
        )
    for t in summary["legacy"]:
        share = "–" if t["held_share"] is None else f"{t['held_share']:.0%}"
        lines.append(f"| {t['bucket']} | – | {t['picks']} | {t['held']} | {share} |")
    c = summary["criterion"]
    share = "–" if c["held_share"] is None else f"{c['held_share']:.0%}"
    lines += [
        "",
        f"Picks stated ≥ 95% confident (ties apart): {c['held']} of {c['picks']} held ({share}); "
        f"bar ≥ 95%: {'pass' if c['pass'] else 'FAIL'}.",
    ]
    return "\n".join(lines)


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--kind", default=",".join(KINDS), help=f"comma-separated kinds ({', '.join(KINDS)})"
    )
    parser.add_argument(
        "--per-kind", type=int, default=4, help="tunes per kind (default 4: 20 tunes)"
    )
    parser.add_argument(
        "--budget", type=float, default=40.0, help="tune budget in seconds (default 40)"
    )
    parser.add_argument("--rounds", type=int, default=10, help="re-race rounds (default 10)")
    parser.add_argument(
        "--window", type=float, default=1.0, help="re-race window in seconds (default 1.0)"
    )
    parser.add_argument(
        "--json", type=Path, default=None, help="write rows, table and host as JSON"
    )
    args = parser.parse_args(argv)
    kinds = [k.strip() for k in args.kind.split(",") if k.strip()]
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        parser.error(f"unknown kind(s): {', '.join(unknown)}")
    provenance = Provenance.start()
    host = host_info().to_dict()
    load_start = provenance.load_at_start
    log(f"host: {host['cores']} usable cores, torch {host['torch']}, load average {load_start}")
    pipelines = {kind: load_target(KINDS[kind][0]) for kind in kinds}
    started = time.perf_counter()
    rows = []
    for seed in range(args.per_kind):
        for kind in kinds:  # kinds interleaved: load drift hits every kind alike
            row = run_one(kind, pipelines[kind], seed, args)
            rows.append(row)
            conf = "null" if row["confidence"] is None else f"{row['confidence']:.3f}"
            rr = row["rerace"] or {}
            ratios = {k: v["median_ratio"] for k, v in (rr.get("rivals") or {}).items()}
            log(
                f"[{len(rows):2d}] {kind:8s} seed {seed}: {row['pick']} conf {conf} tie "
                f"{row['tie']} rounds {row['rounds']} (legacy "
                f"{row['legacy_confidence_first_2_rounds']}) re-race ratios {ratios} held "
                f"{row['held']} ({row['tune_seconds']} s + {rr.get('seconds')} s)"
            )
            if args.json:  # after every tune: an interrupted run keeps what it measured
                write_json(args, provenance, kinds, started, rows)
    summary = write_json(args, provenance, kinds, started, rows)
    print(markdown(summary))
    return 0 if summary["criterion"]["pass"] else 1


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    claims = [
        r for r in rows if r["held"] is not None and not r["tie"] and (r["confidence"] or 0) >= 0.95
    ]
    held = sum(1 for r in claims if r["held"])
    all_high = [r for r in rows if r["held"] is not None and (r["confidence"] or 0) >= 0.95]
    return {
        "table": table(rows),
        "legacy": legacy_table(rows),
        "criterion": {
            "picks": len(claims),
            "held": held,
            "held_share": round(held / len(claims), 3) if claims else None,
            "pass": bool(claims) and held >= 0.95 * len(claims),
        },
        "all_at_least_95_including_ties": {
            "picks": len(all_high),
            "held": sum(1 for r in all_high if r["held"]),
        },
    }


def write_json(
    args: argparse.Namespace,
    provenance: Provenance,
    kinds: list[str],
    started: float,
    rows: list[dict[str, Any]],
) -> dict[str, Any]:
    summary = summarise(rows)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps(
                {
                    "script": "benchmarks/confidence_calibration.py",
                    "provenance": provenance.finish(),
                    "settings": {
                        "kinds": kinds,
                        "per_kind": args.per_kind,
                        "budget_s": args.budget,
                        "rounds": args.rounds,
                        "window_s": args.window,
                    },
                    "tunes": len(rows),
                    "seconds": round(time.perf_counter() - started, 1),
                    "summary": summary,
                    "rows": rows,
                },
                indent=2,
            )
        )
    return summary


if __name__ == "__main__":
    raise SystemExit(main())
