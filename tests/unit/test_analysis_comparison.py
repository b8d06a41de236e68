"""compare's statistics: fixed rounds in, exact ratios, intervals, verdicts and gate
decisions out."""

from __future__ import annotations

import math

import pytest

from stallscope import stats
from stallscope.analysis import comparison as cmp


def rounds_from(pairs: list[tuple[float, float]], **extra: float) -> list[dict]:
    """Rounds whose two A windows rate ``a`` and two B windows rate ``b``."""
    return [
        {
            "order": cmp_order(i),
            "a": [{"samples_per_s": a, **extra}] * 2,
            "b": [{"samples_per_s": b, **extra}] * 2,
        }
        for i, (a, b) in enumerate(pairs)
    ]


def cmp_order(i: int) -> str:
    return "ABBA" if i % 2 == 0 else "BAAB"


def test_the_ratio_interval_is_a_t_interval_over_round_log_ratios():
    # log ratios of 0.8, 0.84, 0.82: mean and sd by hand
    rounds = rounds_from([(100, 80), (100, 84), (50, 41)])
    logs = cmp.log_ratios(rounds)
    assert logs == pytest.approx([math.log(0.8), math.log(0.84), math.log(0.82)])
    mean = sum(logs) / 3
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / 2)
    half = 4.303 * sd / math.sqrt(3)
    interval = cmp.ratio_interval(logs)
    assert interval["estimate"] == pytest.approx(math.exp(mean))
    assert interval["median"] == pytest.approx(0.82)
    # 4.303: the t table's three-decimal value (stats.t_quantile computes it to 1e-9)
    assert interval["low"] == pytest.approx(math.exp(mean - half), rel=1e-4)
    assert interval["high"] == pytest.approx(math.exp(mean + half), rel=1e-4)
    assert interval["half_width"] == pytest.approx(math.exp(half) - 1, rel=1e-3)
    assert interval["rounds"] == 3 and interval["level"] == 0.95


def test_windows_of_a_round_are_averaged_before_the_ratio():
    rounds = [
        {
            "order": "ABBA",
            "a": [{"samples_per_s": 90}, {"samples_per_s": 110}],
            "b": [{"samples_per_s": 100}, {"samples_per_s": 100}],
        }
    ]
    assert cmp.log_ratios(rounds) == pytest.approx([0.0])


def test_below_three_rounds_there_is_no_interval_and_no_gate():
    facts = cmp.compare_facts(rounds_from([(100, 50), (100, 50)]), fail_if_slower_pct=10)
    assert facts["ratio"]["estimate"] == pytest.approx(0.5)
    assert facts["ratio"]["low"] is None and facts["ratio"]["high"] is None
    assert facts["verdict"] == "undecided"
    assert facts["gate"] == {"fail_if_slower_pct": 10, "threshold_ratio": 0.9, "failed": False}
    assert facts["precise"] is False


def test_a_clear_slowdown_fails_the_gate_and_a_noisy_one_does_not():
    slow = cmp.compare_facts(
        rounds_from([(100, 83), (100, 84), (100, 82), (100, 83)]), fail_if_slower_pct=10
    )
    assert slow["verdict"] == "slower"
    assert slow["ratio"]["high"] < 0.9 and slow["gate"]["failed"] is True
    assert slow["change"]["estimate"] == pytest.approx(slow["ratio"]["estimate"] - 1)
    # the same mean slowdown, but rounds all over the place: the interval reaches above 0.9
    noisy = cmp.compare_facts(
        rounds_from([(100, 60), (100, 105), (100, 70), (100, 98)]), fail_if_slower_pct=10
    )
    assert noisy["ratio"]["estimate"] < 0.9
    assert noisy["ratio"]["high"] > 0.9 and noisy["gate"]["failed"] is False


def test_the_gate_reads_the_interval_not_the_point_estimate():
    # estimate 0.88 (beyond -10%), but the interval's top is above 0.90: not failed
    interval = {"estimate": 0.88, "low": 0.85, "high": 0.91}
    assert cmp.gate_fails(interval, 10) is False
    assert cmp.gate_fails({"estimate": 0.88, "low": 0.85, "high": 0.899}, 10) is True
    assert cmp.gate_fails(interval, None) is False


@pytest.mark.parametrize(
    "low,high,rate,expected",
    [
        (1.02, 1.08, True, "faster"),
        (0.9, 0.98, True, "slower"),
        (0.97, 1.03, True, "within noise"),
        (1.02, 1.08, False, "higher"),
        (0.9, 0.98, False, "lower"),
    ],
)
def test_verdicts(low, high, rate, expected):
    assert cmp.verdict({"low": low, "high": high}, rate=rate) == expected
    assert cmp.verdict({"low": None, "high": None}) == "undecided"


def test_precision_decides_when_to_stop():
    tight = cmp.log_ratios(rounds_from([(100, 100), (100, 101), (100, 99), (100, 100)]))
    loose = cmp.log_ratios(rounds_from([(100, 90), (100, 110), (100, 95), (100, 105)]))
    # The stopping rule is the probe's (throughput.compare), from the stats module, at compare's
    # level.
    assert stats.precise_enough(tight, 0.03, cmp.DEFAULT_LEVEL)
    assert not stats.precise_enough(loose, 0.03, cmp.DEFAULT_LEVEL)
    assert not stats.precise_enough(tight[:2], 0.03, cmp.DEFAULT_LEVEL)  # too few, however close


def test_every_figure_gets_its_sides_and_a_paired_ratio():
    rounds = rounds_from([(100, 80), (100, 82), (100, 81)], batch_ms_p95=10.0, workers_rss_mb=None)
    for r in rounds:
        for w in r["b"]:
            w["batch_ms_p95"] = 12.5
    facts = cmp.compare_facts(rounds)
    assert set(facts["figures"]) == {"samples_per_s", "batch_ms_p95"}  # no memory measured: no row
    p95 = facts["figures"]["batch_ms_p95"]
    assert p95["a"]["median"] == 10.0 and p95["b"]["median"] == 12.5
    assert p95["ratio"]["estimate"] == pytest.approx(1.25)
    assert p95["verdict"] == "higher"  # sd 0: the interval is the point
    rate = facts["figures"]["samples_per_s"]["a"]
    assert rate == {"median": 100.0, "min": 100.0, "max": 100.0, "noise": 0.0, "windows": 6}


def test_stage_differences_put_the_largest_change_first():
    rows = cmp.stage_differences(
        [{"name": "decode", "ms_per_sample": 2.0}, {"name": "collate", "ms_per_sample": 0.1}],
        [
            {"name": "decode", "ms_per_sample": 2.1},
            {"name": "collate", "ms_per_sample": 0.1},
            {"name": "blur", "ms_per_sample": 0.5},
        ],
    )
    assert [r["name"] for r in rows] == ["blur", "decode", "collate"]
    assert rows[0] == {
        "name": "blur",
        "a_ms_per_sample": None,
        "b_ms_per_sample": 0.5,
        "delta_ms_per_sample": 0.5,
    }
    assert rows[1]["delta_ms_per_sample"] == pytest.approx(0.1)
