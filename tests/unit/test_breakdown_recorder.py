"""The stage recorder, markers, the stage table (pure analysis) and the batch envelope."""

from __future__ import annotations

import itertools
import math
import time
from multiprocessing.reduction import ForkingPickler

import pytest
import torch

import stallscope as ss
from stallscope.breakdown.inprocess import hotspots_from_stats
from stallscope.breakdown.instrumented import SkippedTransform
from stallscope.breakdown.recorder import _ACTIVE, OTHER, StageBatch, StageRecorder
from stallscope.breakdown.results import RawStageTotals
from stallscope.breakdown.table import (
    augmentation_from_stages,
    build_stage_table,
    choose_augmentations,
    transfer_summary,
)
from stallscope.errors import UsageError
from stallscope.pipeline.transforms import TransformSlot


class FakeClock:
    def __init__(self, *times: float) -> None:
        self.times = iter(times)

    def __call__(self) -> float:
        return next(self.times)


def test_nested_stages_are_charged_exclusively_to_the_innermost():
    recorder = StageRecorder(clock=FakeClock(0.0, 1.0, 3.0, 4.5, 5.0, 5.5, 6.0, 7.0))
    recorder.begin_sample()
    recorder.push("outer")  # 0
    recorder.push("inner")  # 1 -> outer +1
    recorder.pop()  # 3 -> inner +2, outer resumes at 3
    recorder.push("inner")  # 4.5 -> outer +1.5
    recorder.pop()  # 5 -> inner +0.5
    recorder.pop()  # 5.5 -> outer +0.5
    assert recorder.totals == {"outer": 3.0, "inner": 2.5}
    recorder.end_sample()
    recorder.begin_sample()
    recorder.push("inner")  # 6
    recorder.pop()  # 7 -> inner +1, a second sample without "outer"
    recorder.end_sample()
    assert recorder.take() == (
        {"outer": 3.0, "inner": 3.5},
        2,
        {"outer": [3.0], "inner": [2.5, 1.0]},
    )
    assert recorder.take() == ({}, 0, {})


def test_marker_does_nothing_without_profiling_and_records_with_it():
    with ss.stage("decode"):
        pass  # no recorder active: nothing to record, nothing raised
    ticks = itertools.count()
    recorder = StageRecorder(clock=lambda: float(next(ticks)))
    token = _ACTIVE.set(recorder)
    try:
        with ss.stage("decode"):
            pass

        @ss.stage("read")
        def read() -> int:
            return 7

        assert read() == 7
    finally:
        _ACTIVE.reset(token)
    assert recorder.totals == {"decode": 1.0, "read": 1.0}


def test_idle_marker_is_cheap():
    # A named budget, not a benchmark: 20 µs per use is ~100x what it costs.
    n = 20000
    start = time.perf_counter()
    for _ in range(n):
        with ss.stage("decode"):
            pass
    assert (time.perf_counter() - start) / n < 20e-6


def test_stage_needs_a_name():
    with pytest.raises(UsageError):
        ss.stage("")


def _raw() -> RawStageTotals:
    return RawStageTotals(
        stage_seconds={
            "decode": 0.6,
            "read": 0.4,
            "tokenise": 0.1,
            "B": 0.2,
            "A": 0.3,
            OTHER: 0.1,
            "collate": 0.2,
        },
        samples=100,
        batches=10,
        transfer={
            "serialise_cpu": 0.01,
            "serialise_wall": 0.02,
            "handoff": 0.03,
            "queue": 0.04,
            "deserialise": 0.05,
        },
        main_seconds={"pin": 0.02, "host→device": 0.03},
        batch_bytes=10 * 1000,
    )


def test_stage_table_order_per_sample_ms_and_shares():
    raw = _raw()
    raw.sample_times = {"read": [0.001, 0.002, 0.003, 0.010]}
    table = build_stage_table(raw, ["A", "B", "C"], ["A"])
    names = [s.name for s in table]
    assert names == [
        "read",
        "decode",
        "tokenise",
        "A",
        "B",
        "C",
        OTHER,
        "collate",
        "transfer: serialise",
        "transfer: queue",
        "transfer: deserialise",
        "pin",
        "host→device",
    ]
    by_name = {s.name: s for s in table}
    assert by_name["read"].ms_per_sample == pytest.approx(4.0)
    assert by_name["collate"].ms_per_sample == pytest.approx(2.0)
    assert (
        by_name["C"].ms_per_sample == 0.0 and by_name["C"].p50_ms is None
    )  # found but never called
    assert by_name["read"].p50_ms == pytest.approx(2.5) and by_name["read"].p90_ms == pytest.approx(
        7.9
    )
    assert by_name["transfer: queue"].ms_per_sample == pytest.approx(0.4)
    assert by_name["tokenise"].kind == "user" and by_name["A"].random and not by_name["B"].random
    assert by_name["host→device"].where == "main" and by_name["A"].where == "worker"
    assert math.fsum(s.share for s in table) == pytest.approx(1.0)
    total = sum(s.ms_per_sample for s in table)
    assert by_name["decode"].share == pytest.approx(6.0 / total)


def test_a_run_without_workers_says_every_stage_ran_in_the_main_process():
    """stages --num-workers 0 measures in the main process: no row may say it ran in a worker."""
    raw = _raw()
    raw.transfer = {}
    table = build_stage_table(raw, ["A", "B"], ["A"], in_process=True)
    assert {s.where for s in table} == {"main"}


def test_transfer_summary_is_per_batch():
    summary = transfer_summary(_raw())
    assert summary["queue_ms_per_batch"] == pytest.approx(4.0)
    assert summary["batch_bytes"] == 1000


def test_augmentation_overhead_is_relative_to_the_pipeline_without_it():
    table = build_stage_table(
        RawStageTotals({"A": 0.3, "B": 0.2, OTHER: 0.5}, samples=100, batches=1), ["A", "B"], ["A"]
    )
    overhead = augmentation_from_stages(table, ["A"], "detected")
    assert overhead.ms_per_sample == pytest.approx(3.0)
    assert overhead.percent == pytest.approx(100 * 3.0 / 7.0)
    assert augmentation_from_stages(table, [], "detected") is None


def _slots() -> list[TransformSlot]:
    return [
        TransformSlot(("t", 0), "RandomCrop", object(), True),
        TransformSlot(("t", 1), "Normalize", object(), False),
        TransformSlot(("t", 2), "target.Lookup", object(), False),
    ]


def test_choose_augmentations_detected_given_and_baseline():
    assert choose_augmentations(_slots()) == (["RandomCrop"], "detected")
    assert choose_augmentations(_slots(), augmentations=["normalize"]) == (["Normalize"], "given")
    assert choose_augmentations(_slots(), augmentations=["Lookup"]) == (["target.Lookup"], "given")
    assert choose_augmentations(_slots(), baseline_transforms=["Normalize"]) == (
        ["RandomCrop", "target.Lookup"],
        "given",
    )
    with pytest.raises(UsageError, match="no transform named 'Nope'"):
        choose_augmentations(_slots(), augmentations=["Nope"])
    with pytest.raises(UsageError):
        choose_augmentations(_slots(), augmentations=["A"], baseline_transforms=["B"])


def test_hotspots_sorted_by_own_time_without_the_profiler():
    stats = {
        ("a.py", 3, "slow"): (10, 10, 0.5, 0.9, {}),
        ("~", 0, "<built-in method zlib.decompress>"): (20, 20, 0.7, 0.7, {}),
        ("~", 0, "<method 'disable' of '_lsprof.Profiler' objects>"): (1, 1, 9.0, 9.0, {}),
        ("b.py", 9, "fast"): (5, 5, 0.01, 0.01, {}),
    }
    spots = hotspots_from_stats(stats, samples=10, top=2)
    assert [(h.function, h.file, h.line) for h in spots] == [
        ("<built-in method zlib.decompress>", "<built-in>", 0),
        ("slow", "a.py", 3),
    ]
    assert spots[1].total_ms == pytest.approx(500.0) and spots[1].cumulative_ms == pytest.approx(
        900.0
    )
    assert spots[1].ms_per_sample == pytest.approx(50.0) and spots[1].calls == 10


def test_stage_batch_times_its_own_transfer_through_the_worker_pickler():
    batch = (torch.arange(1000, dtype=torch.float32), torch.tensor([1, 2]))
    envelope = StageBatch(batch, {"decode": 0.5}, 2, 1, time.monotonic())
    data = ForkingPickler.dumps(envelope)
    received = ForkingPickler.loads(data)
    assert isinstance(received, StageBatch)
    assert torch.equal(received.batch[0], batch[0]) and received.times == {"decode": 0.5}
    assert received.samples == 2 and received.worker == 1
    transfer = received.transfer
    assert transfer is not None
    for value in (
        transfer.serialise_cpu,
        transfer.serialise_wall,
        transfer.handoff,
        transfer.queue,
        transfer.deserialise,
    ):
        assert 0.0 <= value < 5.0


def test_skipped_transform_passes_input_through_in_both_call_styles():
    skip = SkippedTransform("X")
    assert skip(5) == 5
    assert skip(image=1, mask=2) == {"image": 1, "mask": 2}
    assert skip(1, 2) == (1, 2)


def test_a_loader_that_looks_at_its_batches_sees_the_users_batch():
    # mosaicml-streaming's StreamingDataLoader counts each batch's samples with len(batch[0]).
    import torch

    from stallscope.breakdown.recorder import StageBatch

    images, labels = torch.zeros(4, 3), torch.arange(4)
    batch = StageBatch((images, labels), {"other": 0.1}, 4, 0, 0.0)
    assert len(batch) == 2 and len(batch[0]) == 4 and batch[1] is labels
