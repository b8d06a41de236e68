"""The statistics module: quantiles, Student's t, paired-round intervals, against known values."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest

from stallscope import stats


def test_quantile_interpolates_between_ranks_as_numpy_does():
    values = [7.0, 1.0, 3.0, 5.0]  # sorted: 1 3 5 7
    assert stats.quantile(values, 0.5) == 4.0
    assert stats.quantile(values, 0.0) == 1.0 and stats.quantile(values, 1.0) == 7.0
    assert stats.quantile(values, 0.95) == pytest.approx(6.7)  # 3 × 0.95 = 2.85 → 5 + 0.85 × 2
    assert stats.quantile([1.0, 3.0, 5.0, 7.0], 0.25, ordered=True) == 2.5
    assert stats.quantile([], 0.5) is None and stats.quantile([2.0], 0.9) == 2.0
    rng = np.random.default_rng(0)
    sample = list(rng.exponential(size=101))
    for q in (0.05, 0.5, 0.95, 0.99):
        assert stats.quantile(sample, q) == pytest.approx(float(np.percentile(sample, q * 100)))
    with pytest.raises(ValueError):
        stats.quantile(values, 95)  # a fraction, not a percentage


def test_the_lower_quantile_is_an_observed_value():
    """An outlier cap: with one stall in ten values, the interpolated p95 sits halfway into the
    stall; the lower rank is the largest ordinary value."""
    values = [3.0] * 9 + [53.0]
    assert stats.quantile(values, 0.95) == pytest.approx(30.5)
    assert stats.quantile(values, 0.95, lower=True) == 3.0
    for q in (0.1, 0.5, 0.9):
        assert stats.quantile(list(range(11)), q, lower=True) == float(
            np.quantile(range(11), q, method="lower")
        )


@pytest.mark.parametrize(
    ("p", "df", "table"),
    [  # Student's t table (one-sided p quantiles)
        (0.975, 1, 12.706),
        (0.975, 2, 4.303),
        (0.975, 3, 3.182),
        (0.975, 9, 2.262),
        (0.975, 30, 2.042),
        (0.95, 4, 2.132),
        (0.95, 9, 1.833),
        (0.99, 7, 2.998),
        (0.995, 9, 3.250),
    ],
)
def test_t_quantiles_match_the_table(p, df, table):
    assert stats.t_quantile(p, df) == pytest.approx(table, abs=1e-3)
    assert stats.t_cdf(table, df) == pytest.approx(p, abs=1e-4)
    assert stats.t_cdf(-table, df) == pytest.approx(1 - p, abs=1e-4)


def test_t_cdf_is_the_cauchy_at_one_degree_and_symmetric():
    assert stats.t_cdf(0.0, 5) == 0.5
    assert stats.t_cdf(1.0, 1) == pytest.approx(0.75)
    assert stats.t_cdf(3.0, 30) == pytest.approx(0.99733, abs=2e-4)  # near the normal's 0.99865


def test_two_sided_t_is_the_upper_quantile_of_half_the_rest():
    assert stats.two_sided_t(2, 0.95) == pytest.approx(4.303, abs=1e-3)
    assert stats.two_sided_t(9, 0.90) == pytest.approx(1.833, abs=1e-3)
    # Past the old 15-row table the multiplier keeps falling towards the normal's 1.96.
    assert stats.two_sided_t(7, 0.95) == pytest.approx(2.365, abs=1e-3)
    assert stats.two_sided_t(500, 0.95) == pytest.approx(1.965, abs=1e-3)
    assert stats.two_sided_t(0, 0.95) == math.inf
    with pytest.raises(ValueError):
        stats.two_sided_t(3, 95)


def test_ratio_interval_is_a_t_interval_over_round_log_ratios():
    logs = [math.log(0.8), math.log(0.84), math.log(0.82)]
    mean, sd = statistics.fmean(logs), statistics.stdev(logs)
    half = 4.303 * sd / math.sqrt(3)
    interval = stats.ratio_interval(logs, 0.95)
    assert interval["estimate"] == pytest.approx(math.exp(mean))
    assert interval["median"] == pytest.approx(0.82)
    assert interval["low"] == pytest.approx(math.exp(mean - half), rel=1e-4)
    assert interval["high"] == pytest.approx(math.exp(mean + half), rel=1e-4)
    assert interval["half_width"] == pytest.approx(math.exp(half) - 1, rel=1e-3)
    assert interval["rounds"] == 3 and interval["level"] == 0.95
    assert stats.ratio_interval([], 0.95) is None


def test_rounds_needed_follow_the_spread_floor():
    """SPEC §5: no confidence below two rounds. With a floored spread two rounds give an
    interval; with the rounds' own spread alone two that agree by chance would give a zero-width
    one, so three are needed."""
    assert stats.MIN_ROUNDS == 2
    two = [math.log(1.1), math.log(1.1)]
    floored = stats.ratio_interval(two, 0.9, floor=0.02)
    assert floored["low"] < 1.1 < floored["high"]
    bare = stats.ratio_interval(two, 0.95)
    assert bare["low"] is None and bare["high"] is None and bare["half_width"] is None
    assert stats.ratio_interval([0.1], 0.9, floor=0.02)["low"] is None
    assert stats.ratio_bounds([0.1], 0.9, floor=0.02) is None


def test_the_floor_keeps_agreeing_rounds_from_proving_too_much():
    low, high = stats.ratio_bounds([math.log(1.01)] * 4, 0.9, floor=0.02)
    assert low < 1.0 < high
    # The same rounds without a floor: a zero-width interval at 1.01.
    assert stats.ratio_bounds([math.log(1.01)] * 4, 0.9) == pytest.approx((1.01, 1.01))


def test_upper_bound_is_one_sided():
    logs = [-0.1, -0.12, -0.08, -0.1]
    bound = stats.upper_bound(logs, 0.95)
    expected = statistics.fmean(logs) + 2.353 * statistics.stdev(logs) / 2
    assert bound == pytest.approx(expected, abs=1e-4)
    assert stats.upper_bound([-0.1], 0.95) is None


def test_paired_log_ratios_average_each_side_within_a_round():
    rounds = [
        {"a": [{"r": 90.0}, {"r": 110.0}], "b": [{"r": 100.0}, {"r": 100.0}]},
        {"a": [{"r": 100.0}], "b": [{"r": 50.0}]},
        {"a": [{"r": 100.0}], "b": [{"r": None}]},  # a side without the figure: skipped
        {"a": [{"r": 0.0}], "b": [{"r": 50.0}]},  # not positive: skipped
    ]
    assert stats.paired_log_ratios(rounds, "r") == pytest.approx([0.0, math.log(0.5)])


def test_precise_enough_reads_the_half_width():
    tight = [math.log(1.10), math.log(1.11), math.log(1.09), math.log(1.10)]
    assert stats.precise_enough(tight, 0.05, 0.95)
    assert not stats.precise_enough(tight, 0.001, 0.95)
    assert not stats.precise_enough(tight[:2], 0.5, 0.95)  # no interval yet


def test_linear_fit_exact_and_flat():
    assert stats.linear_fit([0, 1, 2, 3], [1, 3, 5, 7]) == pytest.approx((2.0, 1.0, 1.0))
    assert stats.linear_fit([1, 1, 1], [2, 4, 6]) == pytest.approx((0.0, 4.0, 0.0))


def test_round_or_none_keeps_a_missing_figure_missing():
    assert stats.round_or_none(None, 2) is None and stats.round_or_none(None) is None
    assert stats.round_or_none(1.23456, 2) == 1.23
    whole = stats.round_or_none(41.6)
    assert whole == 42 and isinstance(whole, int)
