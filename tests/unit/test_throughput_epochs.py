"""The epoch-boundary gap behind persistent_workers, measured with real worker processes."""

from __future__ import annotations

import pytest
from tune_pipelines import slow_start_loader

from stallscope.target import load_target
from stallscope.throughput.epochs import epoch_gap


def test_gap_holds_the_worker_start_up_only_without_persistent_workers():
    pipeline = load_target(slow_start_loader)
    # One forked worker: the boundary behaves the same with more, and epoch_gap does nothing
    # particular to a start method (a spawned one only adds its torch import to the gap without).
    config = pipeline.baseline.replace(
        batch_size=pipeline.batch_size, num_workers=1, multiprocessing_context="fork"
    )
    without = epoch_gap(pipeline, config, epochs=2)
    with_ = epoch_gap(pipeline, config.replace(persistent_workers=True), epochs=2)
    assert without.error is None and with_.error is None
    assert len(without.gaps_s) == 1 and len(with_.gaps_s) == 1
    # Each new worker sleeps 0.3 s in worker_init_fn: restarted workers pay it at the boundary...
    assert without.median_s >= 0.3
    # ...persistent ones do not (their first batch of the new epoch is all the gap holds).
    assert with_.median_s < 0.3 <= without.median_s
    assert without.to_dict()["median_s"] == pytest.approx(without.median_s, abs=1e-4)


def test_an_iterable_dataset_has_no_epoch_boundary_to_time():
    from tune_pipelines import ReplayingStream

    pipeline = load_target({"dataset": ReplayingStream(n=64), "batch_size": 8})
    gap = epoch_gap(pipeline, pipeline.baseline.replace(batch_size=8, num_workers=1), epochs=2)
    assert gap.gaps_s == [] and gap.median_s is None and "IterableDataset" in gap.error
