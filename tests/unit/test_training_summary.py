"""The profile figures a watch records, from per-step times: exact numbers, no timing."""

from __future__ import annotations

import pytest

from stallscope.training import summary


def test_timeline_buckets_long_runs():
    short = summary.timeline([0.001, 0.002], [0.003, float("nan")])
    assert short == {"data_ms": [1.0, 2.0], "compute_ms": [3.0, None], "stride": 1}
    long = summary.timeline([0.001] * 5000, [0.002] * 5000, points=1000)
    assert (
        long["stride"] == 5
        and len(long["data_ms"]) == 1000
        and long["compute_ms"][0] == pytest.approx(2.0)
    )


def test_distribution_and_what_if():
    d = summary.distribution_ms([0.001, 0.002, 0.003, float("nan")])
    assert (
        d.mean == pytest.approx(2.0)
        and d.max == pytest.approx(3.0)
        and d.total_s == pytest.approx(0.006)
    )
    assert summary.distribution_ms([]) is None
    assert summary.what_if_speedup(10.0, 4.0) == 2.5 and summary.what_if_speedup(1.0, 0.0) is None


def test_distribution_percentiles_interpolate_between_ranks():
    d = summary.distribution_ms([0.004, 0.001, 0.003, 0.002])  # 1..4 ms, in any order
    assert d.p50 == pytest.approx(2.5) and d.p95 == pytest.approx(3.85)


def test_steps_record_figures_and_no_verdict():
    figures = summary.summarize_steps(
        data_s=[0.5, 0.02, 0.02, 0.02], compute_s=[0.01] * 4, epoch_starts=[0]
    )
    assert figures["stall_fraction"] == pytest.approx(0.6667, abs=1e-4)
    assert figures["steps"] == 3 and figures["first_batch_s"] == 0.5
    assert "verdict" not in figures and "thresholds" not in figures  # analysis judges


def test_gpu_median_is_the_interpolated_middle():
    from types import SimpleNamespace

    gpu = SimpleNamespace(available=True, name="fake", reason=None)
    entry = summary.gpu_summary(gpu, [90.0, 10.0, 40.0, 60.0], 100.0, 200.0)
    assert entry["util_percent_p50"] == 50.0 and entry["util_percent_mean"] == 50.0
    assert summary.gpu_summary(gpu, [], 0.0, None)["util_percent_p50"] is None
