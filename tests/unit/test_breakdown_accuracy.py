"""Stage attribution against known injected costs, real workers.

``stages_injected`` sleeps a known time in each stage, and each injected sleep also
times itself where it happens, in the worker (a sleep lasts a little longer than
asked, more so on a loaded machine). Stallscope's timer of a stage encloses the
stage's own sleep, which never returns early, so what it measures can never be
less than the nominal cost: that holds whatever the load, and a stage measured
short (a batch counted twice, a stage's time given to another) breaks it. That the attribution
is *within 10%* of the injected cost (SPEC §7) is a timing claim measured by
``benchmarks/stage_accuracy.py`` (results in ``benchmarks/results/stage_accuracy.json``).
"""

from __future__ import annotations

import math

import pytest
from stages_injected import INJECTED_MS, TRUTH_ENV, read_truth

import stallscope as ss


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_each_stage_holds_its_injected_cost(start_method, tmp_path, monkeypatch):
    monkeypatch.setenv(TRUTH_ENV, str(tmp_path))
    result = ss.stages(
        "stages_injected:injected",
        num_workers=2,
        samples=96,
        start_method=start_method,
        hotspots=0,
        differential=start_method == "fork",
    )
    truth = read_truth(tmp_path, consumed_batches=result.run.batches + result.run.warmup_batches)
    assert set(truth) == set(INJECTED_MS), "every worker reported what it injected"
    assert result.run.num_workers == 2 and result.run.start_method == start_method
    assert result.run.samples >= 96 and result.run.warmup_batches == 2
    for name, injected in truth.items():
        # "other" is everything __getitem__ does outside the marked stages: the row itself plus
        # the calls broken out of it (here the 2 ms time.sleep()).
        measured = result.inclusive_ms(name)
        # the truth is read back: sleeps never return early
        assert injected >= INJECTED_MS[name] * 0.99
        # the stage's timer encloses its sleep, which never returns early: a stage measured short
        # of its nominal cost lost time (1% for rounding)
        assert measured >= INJECTED_MS[name] * 0.99, (
            f"{name}: measured {measured:.3f} ms, injected {injected:.3f} ms"
        )
    assert math.fsum(s.share for s in result.stages) == pytest.approx(1.0)
    # the unmarked 2 ms sleep is named, a row of its own under "other", and each traced call of
    # it measured the whole sleep (its median). The row's mean is an estimate: "other" of every
    # fetch split in the proportions the traced fetches measured, each part capped at its 95th
    # percentile (table._break_out_calls), so under load it may sit a little under 2 ms (1.85 ms
    # once, with p50 2.07 ms, on a 16-core machine running eight test processes); how close the
    # split comes is benchmarks/stage_accuracy.py's claim, not this test's.
    sleep = result.stage("time.sleep()")
    assert sleep.kind == "call" and sleep.parent == "other (__getitem__)"
    assert sleep.p50_ms is not None and INJECTED_MS["other (__getitem__)"] * 0.99 <= sleep.p50_ms
    assert sleep.ms_per_sample > 0
    # the transfer is measured too (tiny batches: well under a millisecond per sample)
    assert {"transfer: serialise", "transfer: queue", "transfer: deserialise"} <= {
        s.name for s in result.stages
    }
    assert result.transfer["batches"] == result.run.batches
    overhead = result.augmentation_overhead
    assert overhead.transforms == ["RandomShiftA"] and overhead.source == "detected"
    # the augmentation's overhead is its stage's figure
    assert overhead.ms_per_sample == pytest.approx(result.inclusive_ms("RandomShiftA"))
    if start_method == "fork":
        # with vs without, in-process: measured (how close the difference of two ~17 ms means
        # comes to RandomShiftA's 3 ms is the benchmark's to say)
        assert overhead.differential_ms_per_sample is not None
    else:
        assert overhead.differential_ms_per_sample is None


def test_baseline_transforms_choose_what_counts_as_augmentation():
    result = ss.stages(
        "stages_injected:injected",
        num_workers=1,
        samples=16,
        start_method="fork",
        hotspots=3,
        baseline_transforms=["RandomShiftA"],
        differential=False,
    )
    assert result.augmentation_overhead.transforms == ["ScaleB"]
    assert result.augmentation_overhead.source == "given"
    functions = [h.function for h in result.hotspots]
    assert functions[0] == "<built-in method time.sleep>" and len(functions) == 3
