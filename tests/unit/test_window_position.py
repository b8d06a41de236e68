"""Where in the epoch a measurement's window opens (NOTE [window position] in
``throughput/measure.py``): every config of a round at the same batch, the rounds spread over the
epoch."""

from __future__ import annotations

from collections import deque

import pytest
import torch
from torch.utils.data import BatchSampler, Dataset, SequentialSampler
from tune_simulated import unbounded_race

from stallscope.config import LoaderConfig
from stallscope.pipeline.loaders import CyclingBatches, build_loader
from stallscope.stats import spread_point
from stallscope.target import load_target
from stallscope.throughput.measure import (
    MAX_SKIP,
    measure,
    measure_interleaved,
    position_window,
    warmup_batches_for,
)
from stallscope.tuning.race import Entrant
from stallscope.tuning.trial import Evaluator, Trial


class Indices(Dataset):
    """Item ``i`` is ``i``: a batch says which part of the epoch it came from."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.tensor(index)


def test_the_cycle_begins_start_lists_into_the_epoch_and_counts_only_what_it_yields():
    epoch = [[0, 1], [2, 3], [4, 5], [6]]
    sizes: deque[int] = deque()
    cycle = CyclingBatches(epoch, 6, sizes=sizes, start=3)
    assert list(cycle) == [[6], [0, 1], [2, 3], [4, 5], [6], [0, 1]]
    assert list(sizes) == [1, 2, 2, 2, 1, 2]
    assert cycle.epoch_length() == 4
    # A start beyond one epoch goes on into the next; an empty epoch still ends the cycle.
    assert list(CyclingBatches(epoch, 2, start=5)) == [[2, 3], [4, 5]]
    assert list(CyclingBatches([], 3, start=1)) == []
    assert CyclingBatches(iter(epoch), 1).epoch_length() is None


@pytest.mark.parametrize(("drop_last", "samples"), [(False, 2000), (True, 1984)])
def test_an_epochs_samples_are_its_samplers_where_a_batch_sampler_makes_the_lists(
    drop_last, samples
):
    # 63 lists of 32 for 2,000 items: an estimate from a window's lists per batch read 2,001.
    epoch = BatchSampler(SequentialSampler(range(2000)), 32, drop_last=drop_last)
    cycle = CyclingBatches(epoch, 10)
    assert cycle.epoch_samples() == samples == sum(len(b) for b in epoch)
    assert CyclingBatches([[0, 1], [2]], 3).epoch_samples() is None  # lists of the user's own


def test_spread_points_start_at_zero_and_stay_evenly_spread():
    assert spread_point(0) == 0.0
    for n in range(2, 40):
        points = sorted(spread_point(k) for k in range(n))
        assert len(set(points)) == n
        gaps = [b - a for a, b in zip(points, [*points[1:], 1.0])]
        # Three-gap theorem: the golden ratio's multiples leave no gap much over 2.6 / n.
        assert max(gaps) < 3 / n


@pytest.mark.parametrize("position", [0.0, 0.25, 0.5, 0.9])
def test_the_window_opens_at_the_same_batch_whatever_comes_before_it(position):
    pipeline = load_target(Indices(80), batch_size=4)  # 20 batches an epoch
    for before in (0, 3, 7, 31):
        loader = build_loader(pipeline, LoaderConfig(batch_size=4), cycle=100)
        opened = position_window(loader, position, before=before)
        batches = iter(loader)
        for _ in range(before):
            next(batches)
        first = int(next(batches)[0])
        assert first == int(position * 20) * 4
        assert opened == int(position * 20) / 20


def test_a_loader_without_index_lists_to_rotate_is_not_positioned():
    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter(range(40))

    pipeline = load_target(Stream(), batch_size=4)
    loader = build_loader(pipeline, LoaderConfig(batch_size=4), cycle=100)
    assert position_window(loader, 0.5, before=3) is None


def test_a_long_epoch_is_entered_within_its_first_max_skip_lists():
    class Long(CyclingBatches):
        pass

    epoch = BatchSampler(SequentialSampler(range(4 * (MAX_SKIP * 3))), 4, drop_last=False)

    class Holder:
        batch_sampler = Long(epoch, 10)

    holder = Holder()
    opened = position_window(holder, 0.5, before=10)
    assert holder.batch_sampler.start == MAX_SKIP // 2
    assert opened == pytest.approx((MAX_SKIP // 2 + 10) / (MAX_SKIP * 3))


@pytest.mark.parametrize("workers", [0, 2])
def test_measure_opens_its_window_at_the_position_asked(workers):
    pipeline = load_target(Indices(400), batch_size=4)  # 100 batches an epoch
    config = LoaderConfig(num_workers=workers, batch_size=4, multiprocessing_context="fork")
    seen: list[int] = []

    def step(batch: torch.Tensor) -> torch.Tensor:
        seen.append(int(batch[0]))
        return batch

    m = measure(
        pipeline, config, min_window_s=0.0, min_batches=3, main_step=step, epoch_position=0.3
    )
    warmup = warmup_batches_for(config)
    # main_step sees the warm-up's batches, then the window's: the window's first is batch 30.
    assert seen[warmup] == 30 * 4
    assert m.epoch_position == pytest.approx(0.3)
    assert measure(pipeline, config, min_window_s=0.0, min_batches=3).epoch_position is None


def test_repeats_of_a_sweep_share_a_position_per_repeat_and_move_it_between_repeats():
    pipeline = load_target(Indices(200), batch_size=4)
    configs = [LoaderConfig(batch_size=4), LoaderConfig(batch_size=4, prefetch_factor=None)]
    runs = measure_interleaved(pipeline, configs, repeats=3, min_window_s=0.0, min_batches=2)
    positions = [[m.epoch_position for m in per_config] for per_config in runs]
    assert positions[0] == positions[1]
    expected = [int(spread_point(k) * 50) / 50 for k in range(3)]
    assert positions[0] == pytest.approx(expected)
    assert len(set(positions[0])) == 3


class Recording(Evaluator):
    """Records where each trial was asked to open its window."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, float]] = []

    def elapsed(self) -> float:
        return 0.0

    def measure(
        self, config: LoaderConfig, *, window_s: float, phase: str, position: float = 0.0
    ) -> Trial:
        self.asked.append((config.label(), position))
        return Trial(config, 100.0, phase)


def test_every_measurement_of_a_round_opens_at_one_position_and_the_next_round_at_the_next():
    evaluator = Recording()
    a, b = LoaderConfig(batch_size=4), LoaderConfig(batch_size=4, num_workers=2)
    evaluator.interleaved([a, b], repeats=2, window_s=1.0, phase="confirm")
    evaluator.interleaved([a, b], repeats=1, window_s=1.0, phase="confirm")
    la, lb = a.label(), b.label()
    assert evaluator.asked == [
        (label, spread_point(k)) for k in range(3) for label in (la, lb, lb, la)
    ]


class Sliced(Evaluator):
    """Rates that depend on the part of the epoch a window opens at, and nothing else."""

    def __init__(self, rate) -> None:
        self.rate = rate
        self.clock = 0.0

    def elapsed(self) -> float:
        return self.clock

    def measure(
        self, config: LoaderConfig, *, window_s: float, phase: str, position: float = 0.0
    ) -> Trial:
        self.clock += 1.0
        return Trial(config, self.rate(config, position), phase, window_s=window_s)


IN_ORDER = LoaderConfig(batch_size=16, num_workers=4)
UNORDERED = LoaderConfig(batch_size=16, num_workers=4, in_order=False)


def test_a_part_of_the_epoch_that_slows_every_config_alike_is_no_noise_between_them():
    # The second half of the epoch costs twice as much; in-order delivery is 10% faster anywhere.
    def rate(config: LoaderConfig, position: float) -> float:
        slice_cost = 1.0 if position < 0.5 else 2.0
        return (1100.0 if config.in_order else 1000.0) / slice_cost

    race = unbounded_race(Sliced(rate))
    decision = race.run([Entrant(IN_ORDER, "tuner", 1100.0), Entrant(UNORDERED, "other", 1000.0)])
    assert decision.pick == IN_ORDER
    assert race.noise() == pytest.approx(0.0, abs=1e-9)
    assert decision.confidence is not None and decision.confidence >= 0.95


def test_the_race_ranks_by_the_whole_epoch_not_by_its_first_part():
    # In-order delivery wins the epoch's first part (where slow items are rare) and loses the rest
    # by more: over the epoch, out-of-order delivery is faster. A race that timed only the start
    # of the epoch would pick in-order, its rounds agreeing.
    def rate(config: LoaderConfig, position: float) -> float:
        if not config.in_order:
            return 1500.0
        return 1600.0 if position < 0.2 else 1200.0

    race = unbounded_race(Sliced(rate))
    decision = race.run([Entrant(IN_ORDER, "tuner", 1600.0), Entrant(UNORDERED, "other", 1500.0)])
    assert decision.pick == UNORDERED
    assert race.log.median(IN_ORDER) < race.log.median(UNORDERED)
