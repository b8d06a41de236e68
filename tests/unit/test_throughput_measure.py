"""Measurement accuracy: known per-item costs in, the same rates out (SPEC §3.1)."""

from __future__ import annotations

import time

import pytest
from bench_sleepy import SleepyDataset, logged_items, made_between, real_item_seconds
from torch.utils.data import DataLoader

from stallscope.config import LoaderConfig
from stallscope.target import load_target
from stallscope.throughput.measure import (
    Measurement,
    batch_length,
    latency_stats,
    measure,
    relative_spread,
    spread,
    warmup_batches_for,
)

COST = 0.010  # s per item: long enough that sleep overshoot and IPC stay well under 10 %


class Arrivals:
    """A main-process step that notes when each batch after the first reached the loop, and
    which items it held (a SleepyDataset item is filled with its index)."""

    def __init__(self) -> None:
        self.stamps: list[float] = []
        self.indices: list[list[int]] = []

    def __call__(self, batch):
        self.stamps.append(time.perf_counter())
        self.indices.append(batch[0][:, 0].long().tolist())
        return batch

    def window(self, m: Measurement) -> tuple[float, float]:
        """When the window opened (the last warm-up batch) and closed (its last batch)."""
        assert len(self.stamps) == m.warmup_batches + m.batches  # every batch went through
        return self.stamps[m.warmup_batches - 1], self.stamps[-1]


def assert_counts_what_the_workers_made(m: Measurement, arrivals: Arrivals, log_dir: str) -> None:
    # NOTE [rate truth]: the truth is what the loader's processes finished within the window, read
    # from their own logs, not a sleep's nominal cost: under load the gaps between items (collate,
    # the result queue, the scheduler) slow the workers and the truth with them. What the window
    # counts can differ from it only by what was in flight at its edges, the loader's outstanding
    # batches (prefetch_factor per worker); a buffer counted as throughput or a batch counted as a
    # sample shows as more than that.
    config = m.config
    opened, closed = arrivals.window(m)
    made = made_between(log_dir, opened, closed)
    in_flight = config.num_workers * (config.prefetch_factor or 2) if config.num_workers else 1
    assert abs(m.samples - made) <= in_flight * config.batch_size
    assert m.samples_per_s == pytest.approx(m.samples / m.window_s)


# Spawned workers: test_startup_reported_separately_from_rate (one spawned loader, read alike).
@pytest.mark.parametrize(("workers", "context"), [(0, None), (2, "fork"), (4, "fork")])
def test_rate_matches_known_cost(workers, context, tmp_path):
    pipeline = load_target(SleepyDataset(400, COST, log_dir=str(tmp_path)), batch_size=4)
    config = LoaderConfig(num_workers=workers, batch_size=4, multiprocessing_context=context)
    arrivals = Arrivals()
    m = measure(pipeline, config, min_window_s=1.0, main_step=arrivals)
    assert real_item_seconds(str(tmp_path)) >= COST
    assert_counts_what_the_workers_made(m, arrivals, str(tmp_path))
    assert m.batches_per_s == pytest.approx(m.samples_per_s / 4)
    assert m.window_s >= 1.0
    assert m.samples == m.batches * 4


def test_prefetch_buffer_does_not_inflate_rate(tmp_path):
    """A deep prefetch buffer full at start-up must not show up as extra throughput."""
    pipeline = load_target(SleepyDataset(400, 0.04, log_dir=str(tmp_path)), batch_size=2)
    deep = LoaderConfig(num_workers=2, batch_size=2, prefetch_factor=16)
    # The consumer idles 1.5 s after the first batch (a model being built): both workers
    # fill their 16-batch buffers (80 ms a batch). The warm-up drains them before the window opens.
    honest = Arrivals()
    m = measure(pipeline, deep, min_window_s=1.0, settle_s=1.5, main_step=honest)
    assert m.warmup_batches >= 2 * 16
    # The window's items were made while it was open, not taken off the buffer: those made
    # before it opened are at most what the workers finished while the warm-up drained it
    # (a batch or two; the buffer held 64 items).
    made = {index: done for index, _, done in logged_items(str(tmp_path))}  # 400 > items made
    opened, _ = honest.window(m)
    window_items = [i for batch in honest.indices[m.warmup_batches :] for i in batch]
    assert len(window_items) == m.samples
    early = sum(made[i] <= opened for i in window_items)
    assert early <= len(window_items) / 4

    # The same run timed the naive way (no warm-up, a few batches) counts the buffer as
    # throughput: this is the mistake the warm-up prevents, so the test can fail. Its rate is
    # what the main process can take batches off a full buffer at (a few ms a batch, more on a
    # loaded machine), not the workers' capacity: at least twice the honest rate, which is what
    # the workers made.
    naive = measure(pipeline, deep, min_window_s=0.0, min_batches=8, warmup_batches=0, settle_s=1.5)
    assert naive.samples_per_s > 2 * m.samples_per_s


def test_startup_reported_separately_from_rate(tmp_path):
    pipeline = load_target(SleepyDataset(400, COST, log_dir=str(tmp_path)), batch_size=4)
    config = LoaderConfig(num_workers=2, batch_size=4, multiprocessing_context="spawn")
    arrivals = Arrivals()
    m = measure(pipeline, config, main_step=arrivals)
    # Spawning two interpreters that import torch costs far more than one batch (40 ms)...
    assert m.startup_s > 0.04
    # ...but the steady-state rate is unaffected by it: the spawned workers' output, counted
    # per batch as at fork (test_rate_matches_known_cost).
    assert_counts_what_the_workers_made(m, arrivals, str(tmp_path))
    assert m.batches_per_s == pytest.approx(m.samples_per_s / 4)
    assert m.window_s >= 1.0
    assert m.samples == m.batches * 4


def test_a_short_stream_is_re_iterated_and_one_that_runs_dry_is_flagged():
    # NOTE [epoch restarts]: a stream that ends is timed over its epochs, not over one pass
    # (which would hold little more than the warm-up); one whose next pass is empty is flagged.
    from torch.utils.data import IterableDataset

    class Short(IterableDataset):
        def __iter__(self):
            yield from range(40)

    m = measure(load_target(Short(), batch_size=4), LoaderConfig(batch_size=4), min_window_s=0.3)
    assert not m.exhausted
    assert m.samples > 40

    class Once(IterableDataset):
        def __init__(self) -> None:
            self.passes = 0

        def __iter__(self):
            self.passes += 1
            if self.passes == 1:
                yield from range(40)

    m = measure(load_target(Once(), batch_size=4), LoaderConfig(batch_size=4), min_window_s=5.0)
    assert m.exhausted
    assert m.samples <= 40


def test_warmup_covers_prefetch_buffer():
    assert warmup_batches_for(LoaderConfig(num_workers=0, batch_size=2)) == 2
    cfg = LoaderConfig(num_workers=4, batch_size=2, prefetch_factor=3)
    assert warmup_batches_for(cfg) == 4 * 3 + 4 + 1


def test_summaries_are_exact():
    assert spread([3.0, 1.0, 2.0]) == {"median": 2.0, "min": 1.0, "max": 3.0}
    assert relative_spread([90.0, 100.0, 110.0]) == pytest.approx(0.2)
    stats = latency_stats([1.0] * 98 + [10.0, 20.0])
    assert stats["p50"] == 1.0
    assert stats["max"] == 20.0
    assert stats["p99"] > stats["p95"] >= 1.0


def test_batch_length_of_common_batch_shapes():
    import numpy as np
    import torch

    assert batch_length(torch.zeros(5, 3)) == 5
    assert batch_length((torch.zeros(7, 2), torch.zeros(7))) == 7
    assert batch_length({"x": np.zeros((6, 2)), "y": [1] * 6}) == 6
    assert batch_length([1, 2, 3]) == 3


def test_after_a_worker_config_gives_no_first_batch_no_other_worker_config_is_tried(monkeypatch):
    # NOTE [no first batch]: fake measurements, no processes. w=1 never delivers; w=2 and w=4 are
    # not tried; w=0 keeps its rates, and so does the user's own config (w=4 here), tried anyway.
    from stallscope.errors import NoFirstBatch, not_tried
    from stallscope.throughput import measure as measure_module

    pipeline = load_target(lambda: DataLoader(SleepyDataset(32, 0.0), batch_size=4, num_workers=4))
    configs = [pipeline.baseline.replace(num_workers=n) for n in (0, 1, 2, 4)]
    tried: list[int] = []

    def fake_measure(_pipeline, config, **_kwargs):
        tried.append(config.num_workers)
        if config.num_workers == 1:
            raise NoFirstBatch("no batch arrived within 60 s with w=1")
        return Measurement(config=config, samples_per_s=100.0 * (1 + config.num_workers))

    monkeypatch.setattr(measure_module, "measure", fake_measure)
    failures: dict = {}
    results = measure_module.measure_interleaved(pipeline, configs, repeats=2, failures=failures)
    assert tried == [0, 1, 4, 4, 0]  # A B … B A; w=2 never runs
    assert [len(r) for r in results] == [2, 0, 0, 2]
    assert isinstance(failures[1], NoFirstBatch) and not not_tried(str(failures[1]))
    assert set(failures) == {1, 2} and not_tried(str(failures[2]))
    assert "w=1" in str(failures[2])


class _HangsInWorkers(SleepyDataset):
    def __getitem__(self, index: int):
        import threading

        from torch.utils.data import get_worker_info

        if get_worker_info() is not None:
            threading.Event().wait()  # a worker never delivers
        return super().__getitem__(index)


def test_a_worker_trial_whose_first_batch_never_comes_raises_no_first_batch():
    from stallscope.errors import NoFirstBatch

    pipeline = load_target(lambda: DataLoader(_HangsInWorkers(16, 0.0), batch_size=4))
    config = pipeline.baseline.replace(num_workers=1, multiprocessing_context="fork")
    with pytest.raises(NoFirstBatch, match="no batch arrived within 1 s with w=1"):
        measure(pipeline, config, timeout=1.0, sample_resources=False)
