"""Start-up of re-iterated epochs stays off the clock, and so do the batches the workers made
while it lasted (NOTE [epoch restarts] in ``throughput/measure.py``); epochs too short for a
steady state are timed whole. A fake clock advanced by the loader itself."""

from __future__ import annotations

import time
import types

import pytest
import torch

from stallscope.stats import per_epoch_rate
from stallscope.target import load_target
from stallscope.throughput import measure as measure_module


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0


class Epochs:
    """Each epoch: a first batch after ``startup`` seconds (the workers start and fill their
    slots), then the ``burst`` batches they made meanwhile at no wait, then batches ``step``
    seconds apart; 10 samples a batch."""

    def __init__(self, clock: Clock, batches: int, burst: int, startup: float, step: float):
        self.clock, self.batches, self.burst = clock, batches, burst
        self.startup, self.step = startup, step

    def __iter__(self):
        for i in range(self.batches):
            if i == 0:
                self.clock.now += self.startup
            elif i > self.burst:
                self.clock.now += self.step
            yield torch.zeros(10, 2)


@pytest.fixture
def clock(monkeypatch):
    clock = Clock()
    fake = types.SimpleNamespace(
        **{name: getattr(time, name) for name in dir(time) if not name.startswith("_")}
    )
    fake.perf_counter = lambda: clock.now
    monkeypatch.setattr(measure_module, "time", fake)
    return clock


def _pipeline(clock: Clock, batches: int):
    def make_loader(num_workers: int = 2):
        # 2 workers × prefetch 2: 3 batches besides the first are made during the start-up.
        return Epochs(clock, batches, burst=3, startup=1.0, step=0.01)

    pipeline = load_target(make_loader)
    assert pipeline.kind.name == "factory"
    return pipeline


def test_the_burst_after_an_epoch_start_is_not_steady_state(clock):
    pipeline = _pipeline(clock, batches=40)
    m = measure_module.measure(pipeline, pipeline.baseline, min_window_s=2.0, max_window_s=60)
    assert not m.startup_included
    # Only batches 0.01 s apart were timed: 10 samples each, 1000 samples/s exactly.
    assert m.samples_per_s == pytest.approx(1000.0)
    assert min(m.batch_ms) == pytest.approx(10.0)


def test_epochs_shorter_than_their_burst_are_timed_whole(clock):
    pipeline = _pipeline(clock, batches=6)
    m = measure_module.measure(pipeline, pipeline.baseline, min_window_s=2.0, max_window_s=60)
    assert m.startup_included
    # An epoch: 1.0 s of start-up, 3 free batches, 2 more 0.01 s apart: 60 samples in 1.02 s.
    assert m.samples_per_s == pytest.approx(60 / 1.02, rel=0.15)


def test_an_epoch_and_its_start_up_cost_are_recorded(clock):
    pipeline = _pipeline(clock, batches=40)
    m = measure_module.measure(pipeline, pipeline.baseline, min_window_s=5.0, max_window_s=60)
    assert m.epoch_samples == 400 and m.epoch_batches == 40
    # An epoch start: 1.0 s off the clock, during which 4 batches (40 samples) arrived; at the
    # steady 1000 samples/s those take 0.04 s, so the start-up costs an epoch 0.96 s: an epoch
    # takes 0.96 + 400 / 1000 = 1.36 s, its 1.0 s wait plus 36 batches 0.01 s apart.
    assert m.restart_s == pytest.approx(0.96)


def test_epochs_timed_whole_cost_nothing_beyond_their_rate(clock):
    pipeline = _pipeline(clock, batches=6)
    m = measure_module.measure(pipeline, pipeline.baseline, min_window_s=2.0, max_window_s=60)
    assert m.startup_included and m.epoch_samples == 60 and m.restart_s == 0.0


def test_no_epoch_end_in_the_window_no_epoch_figures(clock):
    pipeline = _pipeline(clock, batches=100_000)
    m = measure_module.measure(pipeline, pipeline.baseline, min_window_s=2.0, max_window_s=60)
    assert m.epoch_samples is None and m.restart_s is None


def test_the_first_epoch_counted_from_the_trials_first_batch_is_whole(clock):
    # The window opens late in the first epoch and closes within the second: one epoch start, no
    # epoch between two starts. The trial began at the first epoch's first batch, so that epoch,
    # first batch and warm-up included, is whole (NOTE [the first epoch]).
    pipeline = _pipeline(clock, batches=30)
    m = measure_module.measure(pipeline, pipeline.baseline, min_window_s=0.4, max_window_s=60)
    assert m.epoch_samples == 300 and m.epoch_batches == 30
    assert m.restart_s == pytest.approx(0.96)


def test_an_epoch_made_during_its_start_up_is_known_from_one_epoch_start(clock):
    """grain's DataLoader: the start-up fills the buffers with most of the epoch, the rest comes
    at no wait, and the next epoch starts the same way. The window sees one epoch start; the
    epoch's length is what makes its start-up count (NOTE [per-epoch rate])."""

    def make_loader(num_workers: int = 8):
        return Epochs(clock, 64, burst=40, startup=15.0, step=0.01)

    pipeline = load_target(make_loader)
    # The window closes inside the second epoch, as grain's did: one epoch start in it.
    m = measure_module.measure(pipeline, pipeline.baseline, min_window_s=0.3, max_window_s=60)
    assert m.epoch_samples == 640 and m.epoch_batches == 64
    # The window's rate is the drained buffer's (no steady state comes before the epoch ends),
    # but over whole epochs it is the loop's: 640 samples every 15 s + 23 steps of 0.01 s.
    assert m.samples_per_s > 2000
    per_epoch = per_epoch_rate(m.epoch_samples, m.restart_s or 0.0, m.samples_per_s)
    assert per_epoch == pytest.approx(640 / 15.23, rel=0.01)


def test_a_dataloader_whose_epochs_are_walked_back_to_back_records_its_epoch():
    # stallscope cycles a DataLoader's sampler (no epoch start in the window), but a training loop
    # re-iterates it: the user's epoch (5 batches of 4 over 20 items) is recorded, so the start-up
    # can be charged per epoch (NOTE [per-epoch rate]); no epoch start was seen, so no cost.
    loader = torch.utils.data.DataLoader(torch.arange(20.0), batch_size=4)
    pipeline = load_target(loader)
    m = measure_module.measure(pipeline, pipeline.baseline, min_window_s=0.01, max_window_s=1)
    assert m.epoch_batches == 5 and m.epoch_samples == 20
    assert m.restart_s is None
