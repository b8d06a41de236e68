"""The watch's outputs through the sink protocol: the null sink, and real TensorBoard
event files."""

from __future__ import annotations

import sys

import pytest

from stallscope.training.sinks import NULL_SINKS, Sinks, open_sinks
from stallscope.training.watch import Watch


class FakeClock:
    def __init__(self) -> None:
        self.t = 10.0

    def __call__(self) -> float:
        return self.t


class Steps:
    """An iterable whose items cost 10 ms of fake time each."""

    def __init__(self, clock: FakeClock, n: int) -> None:
        self.clock, self.n = clock, n

    def __len__(self) -> int:
        return self.n

    def __iter__(self):
        for i in range(self.n):
            self.clock.t += 0.01
            yield i


class CountingSink:
    def __init__(self, every: int) -> None:
        self.every, self.writes, self.flushes, self.closed = every, [], 0, False

    def write(self, source) -> None:
        self.writes.append(source.closed_steps)

    def flush(self, source) -> None:
        self.flushes += 1

    def close(self) -> None:
        self.closed = True


def test_no_output_asked_for_is_the_null_sink_which_never_comes_due():
    sinks = open_sinks(log_every=None, log=None, tensorboard=None, jsonl=None, csv=None)
    assert sinks is NULL_SINKS and sinks.due_after(0) == sys.maxsize
    w = Watch(list(range(5)), sample_resources=False, gpu=False)
    assert w._sinks is NULL_SINKS
    assert sum(1 for _ in w) == 5


def test_sinks_are_called_when_due_with_closed_steps_only():
    every3, every4 = CountingSink(3), CountingSink(4)
    sinks = Sinks([every3, every4])
    assert sinks.due_after(0) == 3 and sinks.due_after(3) == 4 and sinks.due_after(4) == 6
    clock = FakeClock()
    w = Watch(Steps(clock, 12), clock=clock, sample_resources=False, gpu=False)
    w._sinks = sinks
    for _ in w:
        clock.t += 0.03
    # At step k the k-th step is still open: a sink sees the k - 1 closed ones.
    assert every3.writes == [2, 5, 8, 11] and every4.writes == [3, 7, 11]
    assert every3.flushes == 1  # epoch end
    w.close()
    assert every3.closed and every4.closed


def test_tensorboard_sink_writes_event_files_tensorboard_reads_back(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    clock = FakeClock()
    w = Watch(
        Steps(clock, 20),
        clock=clock,
        sample_resources=False,
        gpu=False,
        tensorboard=tmp_path / "tb",
        log_every=5,
        log=lambda line: None,
        name="demo",
    )
    with w:
        for _ in w:
            clock.t += 0.03
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {
        "stallscope/demo/data_ms",
        "stallscope/demo/compute_ms",
        "stallscope/demo/stall_fraction",
    } <= tags
    stall = events.Scalars("stallscope/demo/stall_fraction")
    assert [e.step for e in stall] == [4, 9, 14, 19]
    assert stall[-1].value == pytest.approx(0.25, abs=1e-6)
    data = events.Scalars("stallscope/demo/data_ms")
    assert data[-1].value == pytest.approx(10.0, abs=1e-4)
