"""The compare engine on sleep datasets of known cost, in-process (num_workers=0).

The A/A test runs the engine 20 times: the CI gate reads the interval, so a noisy shared
machine widens it instead of tripping the gate. The slow-down test checks the gate trips
on a +20% per-sample cost and that the interval covers the true ratio of the two sleeps.
"""

from __future__ import annotations

import statistics

import compare_pipelines as cp
import pytest

from stallscope.analysis.comparison import compare_facts
from stallscope.target import pipeline_from_object
from stallscope.throughput import compare as engine
from stallscope.throughput.measure import measure


def pipelines(b_factory=cp.base, cost_s: float | None = None):
    a, b = cp.base(), b_factory()
    if cost_s is not None:
        a["dataset"] = cp.SleepItems(cost_s)
        b["dataset"] = cp.SleepItems(cost_s * (1 + cp.EXTRA) if b_factory is cp.plus20 else cost_s)
    return pipeline_from_object(a, label="a"), pipeline_from_object(b, label="b")


def test_rounds_alternate_abba_and_baab():
    a, b = pipelines()
    seen: list[tuple[int, str]] = []
    run = engine.compare(
        a,
        b,
        window_s=0.05,
        min_rounds=2,
        max_rounds=2,
        budget_s=60,
        precision=1e-9,
        sample_resources=False,
        on_window=lambda i, side, w: seen.append((i, side)),
    )
    assert [s for _, s in seen] == list("abba") + list("baab")
    assert [r["order"] for r in run.rounds] == ["ABBA", "BAAB"]
    assert run.stopped == engine.STOP_MAX_ROUNDS
    window = run.rounds[0]["a"][0]
    assert window["samples_per_s"] > 0 and window["samples"] >= 8 * 4


def test_a_to_a_never_fails_the_gate_in_20_runs():
    outcomes = []
    for _ in range(20):
        a, b = pipelines()
        run = engine.compare(a, b, window_s=0.1, budget_s=3.0, precision=0.03)
        facts = compare_facts(run.rounds, fail_if_slower_pct=10)
        outcomes.append(
            (
                facts["ratio"]["estimate"],
                facts["ratio"]["low"],
                facts["ratio"]["high"],
                facts["verdict"],
            )
        )
        assert len(run.rounds) >= 3, run.stopped
        assert facts["gate"]["failed"] is False, outcomes[-1]
    print(
        "A/A (estimate, low, high, verdict):",
        [(round(e, 3), round(lo, 3), round(hi, 3), v) for e, lo, hi, v in outcomes],
    )


def test_a_20_percent_dearer_sample_fails_the_gate_and_the_interval_covers_the_true_ratio():
    cost = 0.005  # 5 ms vs 6 ms per item: the loader's own per-sample overhead is small beside it
    a, b = pipelines(cp.plus20, cost_s=cost)
    a.dataset.durations, b.dataset.durations = [], []
    run = engine.compare(
        a, b, window_s=0.3, budget_s=25, precision=0.03, level=0.99, sample_resources=False
    )
    facts = compare_facts(run.rounds, fail_if_slower_pct=10, level=0.99)
    # The true ratio of the rates: each side's real time per item plus the same loader overhead per
    # sample, the overhead measured on a free dataset.
    free = pipeline_from_object({"dataset": cp.SleepItems(0.0), "batch_size": 4})
    overhead = 1.0 / measure(free, free.baseline, min_window_s=0.3).samples_per_s
    true = (statistics.fmean(a.dataset.durations) + overhead) / (
        statistics.fmean(b.dataset.durations) + overhead
    )
    ratio = facts["ratio"]
    print(
        f"+20%: rounds {ratio['rounds']}, B/A {ratio['estimate']:.4f} [{ratio['low']:.4f}, "
        f"{ratio['high']:.4f}], true {true:.4f}"
    )
    assert facts["verdict"] == "slower"
    assert facts["gate"]["failed"] is True
    assert ratio["low"] - 0.005 <= true <= ratio["high"] + 0.005
    assert true == pytest.approx(1 / 1.2, abs=0.02)
