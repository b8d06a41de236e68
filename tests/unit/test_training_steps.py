"""The watch's per-step record: clock readings stored, data wait and compute derived exactly
(fake clock)."""

from __future__ import annotations

import math

import pytest

from stallscope.training.steps import StepTimes
from stallscope.training.watch import Watch


class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


def costed(clock: FakeClock, costs: list[float], *, fail_after: int | None = None):
    """A source whose i-th next() costs ``costs[i]`` of fake time; raises after
    ``fail_after`` items."""

    class Source:
        def __iter__(self):
            for i, cost in enumerate(costs):
                if fail_after is not None and i == fail_after:
                    clock.advance(cost)
                    raise RuntimeError("corrupt batch")
                clock.advance(cost)
                yield i

    return Source()


def watch_on(source, clock: FakeClock) -> Watch:
    return Watch(source, clock=clock, sample_resources=False, gpu=False)


def test_the_hot_path_stores_two_clock_readings_per_step_and_derives_the_rest():
    clock = FakeClock()
    w = watch_on(costed(clock, [0.5, 0.25, 0.125]), clock)
    compute = [1.0, 2.0, 4.0]
    for i in w:
        clock.advance(compute[i])
    steps = w._steps
    assert list(steps.requested) == [
        100.0,
        101.5,
        103.75,
    ]  # asked: start of the epoch, then each return
    assert list(steps.delivered) == [100.5, 101.75, 103.875]
    assert list(steps.data()) == [0.5, 0.25, 0.125]
    assert list(steps.compute()) == [
        1.0,
        2.0,
        4.0,
    ]  # the last ends at the request that found no batch
    assert steps.closed == 3 and not steps.last_open()


def test_a_break_ends_the_step_when_the_generator_closes():
    clock = FakeClock()
    w = watch_on(costed(clock, [0.5] * 5), clock)
    for i in w:
        clock.advance(1.0)
        if i == 1:
            break
    assert list(w._steps.requested) == [100.0, 101.5]  # no request in flight is left behind
    assert list(w._data) == [0.5, 0.5] and list(w._compute) == [1.0, 1.0]


def test_the_open_step_is_left_out_until_the_loop_comes_back():
    clock = FakeClock()
    w = watch_on(costed(clock, [0.5] * 3), clock)
    seen = []
    for _ in w:
        seen.append((w.steps, w.closed_steps, len(w._compute)))
        clock.advance(1.0)
    assert seen == [(1, 0, 0), (2, 1, 1), (3, 2, 2)]
    assert w.closed_steps == 3 and list(w._compute) == [1.0, 1.0, 1.0]


def test_end_step_inside_the_loop_ends_the_step_there():
    clock = FakeClock()
    w = watch_on(costed(clock, [0.5] * 3), clock)
    for i in w:
        clock.advance(1.0)
        if i == 1:
            w.end_step()
            clock.advance(7.0)  # not part of the step
    assert list(w._compute) == [1.0, 1.0, 1.0]
    assert list(w._data) == [0.5, 0.5, 0.5]


def test_a_loader_that_raises_ends_the_step_before_at_its_request():
    clock = FakeClock()
    w = watch_on(costed(clock, [0.5, 0.5, 0.5], fail_after=2), clock)
    with pytest.raises(RuntimeError):
        for _ in w:
            clock.advance(1.0)
    assert w.steps == 2 and list(w._compute) == [1.0, 1.0]
    assert len(w._steps.requested) == 2


def test_epochs_and_manual_steps_mix_without_shifting_a_step():
    clock = FakeClock()
    w = watch_on(costed(clock, [0.5, 0.5]), clock)
    for _ in w:
        clock.advance(1.0)
    clock.advance(10.0)  # between epochs: part of no step
    for _ in w:
        clock.advance(2.0)
    it = iter(costed(clock, [0.25, 0.25]))
    w.next(it)
    clock.advance(3.0)
    w.pause()
    clock.advance(10.0)
    w.next(it)
    clock.advance(4.0)
    assert w.steps == 6 and w.closed_steps == 5 and w._steps.last_open()
    w.end_step()
    assert list(w._data) == [0.5, 0.5, 0.5, 0.5, 0.25, 0.25]
    assert list(w._compute) == [1.0, 1.0, 2.0, 2.0, 3.0, 4.0]
    assert w._epoch_starts == [0, 2]


def test_derived_arrays_grow_with_the_steps_and_match_a_fresh_derivation():
    clock = FakeClock()
    w = watch_on(costed(clock, [0.001 * (i % 7 + 1) for i in range(40)]), clock)
    for i in w:
        clock.advance(0.002 * (i % 5 + 1))
        if i % 9 == 0:
            w.window(0, w.closed_steps)  # derive part of the way, as a sink does
    fresh = StepTimes()
    fresh.requested.extend(w._steps.requested)
    fresh.delivered.extend(w._steps.delivered)
    fresh._end_steps.extend(w._steps._end_steps)
    fresh._end_times.extend(w._steps._end_times)
    assert list(w._data) == list(fresh.data())
    assert list(w._compute) == list(fresh.compute())
    assert all(math.isfinite(c) for c in w._compute)


def test_rows_and_windows_read_the_derived_steps():
    clock = FakeClock()
    w = watch_on(costed(clock, [0.5] * 4), clock)
    for _ in w:
        clock.advance(1.0)
    rows = w.step_rows()
    assert [r["data_ms"] for r in rows] == [500.0] * 4 and [r["compute_ms"] for r in rows] == [
        1000.0
    ] * 4
    assert [r["t_s"] for r in rows] == [0.0, 1.5, 3.0, 4.5] and [r["first"] for r in rows] == [
        True,
        False,
        False,
        False,
    ]
    assert w.window(1, 3) == (1.0, 2.0)
    windows = w.closed_windows(0, final=True)
    assert len(windows) == 1 and windows[0]["total_steps"] == 4 and windows[0]["steps"] == 3
