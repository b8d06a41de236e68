"""Datasets that time their own fetches, and the true stall fraction computed from those timings.

Used by the real-framework tests (Lightning, Hugging Face): the truth never
comes from stallscope. Each item costs a known sleep inside ``__getitem__``;
the dataset logs when every fetch started and ended, so the test can compute

    truth = time inside __getitem__ during the measured steps
            ÷ wall time of the measured steps (validation runs excluded)

where the measured steps are those stallscope counts as steady state: every
step of an epoch but its first. They start when the loop asks for the
epoch's second batch, which is the fetch of item 1, or of item 2 where the
framework's loader runs one batch ahead (accelerate's ``DataLoaderShard``),
and end with the epoch.

Every cost is slept on a clock: the real one (``Clock``), or a ``FakeClock``
that moves only when something sleeps on it. Given to stallscope's callback as
well (``clock=``), the fake one makes the truth exact and a run free of load:
the figures the callback reports must then equal the dataset's own.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import torch
from torch.utils.data import Dataset


class Clock:
    """Real time: ``clock()`` reads ``time.perf_counter``, ``clock.sleep(s)`` sleeps."""

    def __call__(self) -> float:
        return time.perf_counter()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


class FakeClock(Clock):
    """Time that moves only by ``sleep``: whatever else runs (the framework's own loop) takes
    none."""

    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds


class TimedItems(Dataset):
    """``length`` items, each costing ``cost_s`` of sleep on ``clock``; ``fetches`` logs (start,
    end) of every call."""

    def __init__(
        self, length: int, cost_s: float, *, as_dict: bool = False, clock: Clock | None = None
    ) -> None:
        self.length, self.cost_s, self.as_dict = length, cost_s, as_dict
        self.clock = clock or Clock()
        self.fetches: list[tuple[float, float]] = []

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int):
        start = self.clock()
        self.clock.sleep(self.cost_s)
        x = torch.full((4,), float(index))
        item = {"x": x, "labels": torch.tensor(float(index % 2))} if self.as_dict else x
        self.fetches.append((start, self.clock()))
        return item


def true_stall(
    fetches: Sequence[tuple[float, float]],
    epochs: Sequence[tuple[int, int, float]],
    pauses: Sequence[tuple[float, float]] = (),
) -> float:
    """Fetch time ÷ wall time over each epoch's measured steps.

    ``epochs``: per epoch, (index in ``fetches`` of its first fetch inside the
    measured steps, one past its last fetch, the time the epoch ended).
    ``pauses``: (start, end) intervals that belong to no step (validation).
    """
    fetch_s = wall_s = 0.0
    for first, stop, end in epochs:
        begin = fetches[first][0]
        fetch_s += sum(min(b, end) - a for a, b in fetches[first:stop] if a < end)
        paused = sum(max(0.0, min(b, end) - max(a, begin)) for a, b in pauses)
        wall_s += end - begin - paused
    return fetch_s / wall_s


def assert_stall_near_truth(
    profile: dict, truth: float, *, steps: int, framework: str, tolerance: float = 0.05
) -> None:
    """The callback timed the fetch itself, covered ``steps`` steady steps, and its stall is within
    ``tolerance``."""
    print(
        f"{framework}: reported stall {profile['stall_fraction']:.4f}, truth {truth:.4f}"
    )  # shown with pytest -s
    assert profile["timing"]["method"] == "fetch"
    assert profile["steps"] == steps
    assert abs(profile["stall_fraction"] - truth) <= tolerance, (profile["stall_fraction"], truth)
