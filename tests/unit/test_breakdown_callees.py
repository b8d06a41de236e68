"""The rows broken out of ``other (__getitem__)``: the calls ``__getitem__`` makes, named,
exclusive, estimated from the traced fetches, folded back below 5%."""

from __future__ import annotations

import math
import sys
import time

import cv2
import pytest
import stages_libraries as sl
import torch

import stallscope as ss
from stallscope.breakdown.callees import (
    CALLEE_PREFIX,
    OTHER_TRACED,
    c_function_name,
    python_function_name,
)
from stallscope.breakdown.instrumented import InstrumentedDataset
from stallscope.breakdown.recorder import OTHER, process_recorder
from stallscope.breakdown.results import RawStageTotals
from stallscope.breakdown.table import build_stage_table


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_calls_of_getitem_become_rows_in_a_worker(start_method):
    result = ss.stages(
        {"dataset": sl.Helpers(), "batch_size": 4},
        num_workers=1,
        samples=32,
        start_method=start_method,
        hotspots=0,
        differential=False,
    )
    rows = {s.name: s for s in result.stages}
    # load() sleeps 4 ms, spectrum() 3 ms, __getitem__ itself 2 ms. Sleeps never return early,
    # but the rows are estimated from the traced half of the fetches (a stall in one of them
    # shifts the proportions a little on a busy machine), hence the margin.
    assert rows["load()"].ms_per_sample >= 4.0 * 0.75
    assert rows["spectrum()"].ms_per_sample >= 3.0 * 0.75
    assert rows["time.sleep()"].ms_per_sample >= 2.0 * 0.75
    assert rows["load()"].ms_per_sample > rows["time.sleep()"].ms_per_sample
    for name in ("load()", "spectrum()", "time.sleep()"):
        assert (
            rows[name].kind == "call"
            and rows[name].parent == OTHER
            and rows[name].where == "worker"
        )
    assert "torch.zeros()" not in rows  # far below 5%: folded back into other
    assert rows[OTHER].share < 0.3
    assert math.fsum(s.share for s in result.stages) == pytest.approx(1.0)
    order = [s.name for s in result.stages]
    assert order.index(OTHER) + 1 == order.index("load()")  # the calls follow other, largest first


def test_callees_off_keeps_other_whole():
    result = ss.stages(
        {"dataset": sl.Helpers(), "batch_size": 4},
        num_workers=0,
        samples=16,
        hotspots=0,
        differential=False,
        callees=False,
    )
    assert [s for s in result.stages if s.kind == "call"] == []
    assert result.stage(OTHER).ms_per_sample >= 9.0 * 0.98


def test_break_out_splits_all_of_other_in_the_traced_proportions():
    """Untraced fetches put 60 ms into other; traced ones 5 ms rest + 30 + 4 + 1 ms of calls.
    Other as a whole is 100 ms, split 5 : 30 : 4 : 1 over the 40 ms traced."""
    raw = RawStageTotals(
        stage_seconds={
            OTHER: 0.060,
            OTHER_TRACED: 0.005,
            CALLEE_PREFIX + "mosaic()": 0.030,
            CALLEE_PREFIX + "cv2.resize()": 0.004,
            CALLEE_PREFIX + "len()": 0.001,
            "decode": 0.100,
        },
        samples=10,
        batches=1,
    )
    table = {s.name: s for s in build_stage_table(raw, [])}
    assert table["mosaic()"].ms_per_sample == pytest.approx(7.5)  # 100 ms × 30/40 over 10 samples
    assert table["cv2.resize()"].ms_per_sample == pytest.approx(1.0)  # 5% of the 20 ms/sample total
    assert "len()" not in table  # 0.25 ms: below 5%, back into other
    assert table[OTHER].ms_per_sample == pytest.approx(10.0 - 7.5 - 1.0)
    assert sum(s.ms_per_sample for s in table.values()) == pytest.approx(20.0)
    assert [s.name for s in build_stage_table(raw, [])] == [
        "decode",
        OTHER,
        "mosaic()",
        "cv2.resize()",
    ]


def test_other_as_a_whole_is_read_off_the_fetches_the_hook_did_not_slow():
    """5 untraced fetches of 6 ms; the hook slows the 5 traced ones to 9 ms (2 ms rest, 7 ms
    in mosaic()). Other is 6 ms a sample, as the untraced fetches took, split 2 : 7; adding
    the traced fetches' time would make it 7.5 ms, a quarter of it the hook's own."""
    raw = RawStageTotals(
        stage_seconds={OTHER: 0.030, OTHER_TRACED: 0.010, CALLEE_PREFIX + "mosaic()": 0.035},
        samples=10,
        batches=1,
        sample_times={
            OTHER: [0.006] * 5,
            OTHER_TRACED: [0.002] * 5,
            CALLEE_PREFIX + "mosaic()": [0.007] * 5,
        },
    )
    table = {s.name: s for s in build_stage_table(raw, [])}
    assert table["mosaic()"].ms_per_sample == pytest.approx(6.0 * 7 / 9)
    assert table[OTHER].ms_per_sample + table["mosaic()"].ms_per_sample == pytest.approx(6.0)


def test_one_stall_in_a_traced_fetch_does_not_take_the_split_over():
    """10 traced samples: mosaic() 3 ms each but one stalled for 50 ms; the rest 1 ms each.
    Capped at its 95th percentile, mosaic() weighs 30 ms against 10 ms of rest, so the
    100 ms of other split 75 : 25, where the raw sums (80 : 10) would give mosaic() 89%."""
    mosaic = [0.003] * 9 + [0.053]
    raw = RawStageTotals(
        stage_seconds={OTHER: 0.010, OTHER_TRACED: 0.010, CALLEE_PREFIX + "mosaic()": sum(mosaic)},
        samples=20,
        batches=2,
        sample_times={OTHER_TRACED: [0.001] * 10, CALLEE_PREFIX + "mosaic()": mosaic},
    )
    table = {s.name: s for s in build_stage_table(raw, [])}
    assert table["mosaic()"].ms_per_sample == pytest.approx(5.0 * 0.75)  # 100 ms / 20 samples, 75%
    assert table[OTHER].ms_per_sample + table["mosaic()"].ms_per_sample == pytest.approx(5.0)


def test_names_a_user_would_write():
    assert c_function_name(cv2.resize) == "cv2.resize()"
    assert c_function_name(torch.conv1d) == "torch.conv1d()"
    assert c_function_name(time.sleep) == "time.sleep()"
    assert c_function_name(len) == "len()"
    assert c_function_name(torch.zeros(1).abs) == "torch.Tensor.abs()"
    stft = torch.stft.__code__
    assert (
        python_function_name(stft, torch.stft.__module__, sl.Helpers.__getitem__.__code__)
        == "torch.stft()"
    )
    load = sl.Helpers.load.__code__
    assert python_function_name(load, sl.__name__, sl.Helpers.__getitem__.__code__) == "load()"
    assert (
        python_function_name(sl.spectrum.__code__, sl.__name__, sl.Helpers.__getitem__.__code__)
        == "spectrum()"
    )


def test_the_tracer_restores_the_profile_function_and_breaks_out_in_process():
    seen = []

    def outer_profiler(frame, event, arg):
        seen.append(event)

    dataset = InstrumentedDataset(sl.Helpers())
    recorder = process_recorder()
    recorder.take()
    sys.setprofile(outer_profiler)
    try:
        for index in range(4):
            dataset[index]
        assert sys.getprofile() is outer_profiler
    finally:
        sys.setprofile(None)
    totals, samples, _ = recorder.take()
    assert samples == 4
    assert CALLEE_PREFIX + "load()" in totals and OTHER_TRACED in totals  # every 2nd fetch traced
    assert totals[OTHER] >= 2 * 0.009  # the two untraced fetches keep all of it in other
    assert recorder.tracer is None and not recorder._stack


def test_a_wrapper_dataset_is_seen_through_and_its_own_calls_still_count():
    dataset = InstrumentedDataset(sl.Wrapped(sl.Helpers()))
    recorder = process_recorder()
    recorder.take()
    for index in range(4):
        dataset[index]
    totals, _, _ = recorder.take()
    # the inner dataset's calls, as if it were the dataset itself
    assert {CALLEE_PREFIX + "load()", CALLEE_PREFIX + "spectrum()"} <= set(totals)
    # the sleep of the inner __getitem__ (2 ms) and the wrapper's own (3 ms), in the 2 traced
    # fetches
    assert totals[CALLEE_PREFIX + "time.sleep()"] >= 2 * 0.005 * 0.98
