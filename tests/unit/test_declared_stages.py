"""The stages a graph or pool pipeline declares (NOTE [declared stages]): the per-batch arithmetic
on fixed calls, exclusive timing on a fake clock, what counts as a stage, the channel from other
processes."""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from stallscope.breakdown import stage_clock
from stallscope.breakdown.declared import timed_object
from stallscope.breakdown.declared_table import declared_table, in_window
from stallscope.breakdown.stage_clock import MAIN, PROCESS, THREAD, StageCall, StageChannel


def _calls(stage: str, where: str, runners: int, each: float, n: int) -> list[StageCall]:
    return [
        StageCall(stage, where, f"1:{i % runners}", ended=float(i), seconds=each) for i in range(n)
    ]


def test_rows_are_divided_among_their_runners_and_waits_are_not_rows():
    # 10 batches of 8: decode 16 ms per item on 4 threads, collate 2 ms per batch in main, and
    # the main thread waiting 30 ms per batch for the mapper.
    calls = (
        _calls("decode (ParallelMapper)", THREAD, 4, 0.016, 80)
        + _calls("collate (Mapper)", MAIN, 1, 0.002, 10)
        + _calls("wait: ParallelMapper", MAIN, 1, 0.030, 10)
    )
    rows, figures = declared_table(calls, samples=80, batches=10, interval_ms=34.0)
    by_name = {r.name: r for r in rows}
    assert set(by_name) == {"decode (ParallelMapper)", "collate (Mapper)"}
    assert by_name["decode (ParallelMapper)"].ms_per_sample == pytest.approx(16.0)
    assert by_name["decode (ParallelMapper)"].where == "4 threads"
    assert by_name["collate (Mapper)"].ms_per_sample == pytest.approx(0.25)
    assert by_name["collate (Mapper)"].where == "main"
    # per batch: 8 x 16 ms / 4 threads + 2 ms = 34 ms
    assert figures["stage_ms_per_batch"] == pytest.approx(34.0)
    assert figures["adds_up"] == pytest.approx(1.0)
    assert figures["main_wait_ms_per_batch"] == pytest.approx(30.0)
    assert sum(r.share for r in rows) == pytest.approx(1.0)
    assert rows[0].name == "decode (ParallelMapper)"  # largest per batch first
    assert by_name["decode (ParallelMapper)"].p90_ms == pytest.approx(16.0)


def test_process_rows_say_how_many_processes_ran_them():
    rows, figures = declared_table(
        _calls("decode", PROCESS, 2, 0.010, 20), samples=20, batches=5, interval_ms=None
    )
    assert rows[0].where == "2 processes"
    assert figures["stage_ms_per_batch"] == pytest.approx(20.0)  # 4 items x 10 ms / 2
    assert figures["adds_up"] is None


def test_only_calls_that_ended_in_the_window_count():
    calls = _calls("decode", THREAD, 1, 0.01, 10)  # ended at 0..9
    assert [c.ended for c in in_window(calls, 2.0, 4.0)] == [2.0, 3.0, 4.0]


class _FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_stage_is_charged_its_own_time_not_the_stages_it_calls(monkeypatch, tmp_path):
    clock = _FakeClock()
    monkeypatch.setattr(stage_clock.time, "perf_counter", clock)
    channel = StageChannel(tmp_path)

    def inner(x: int) -> int:
        clock.now += 0.003
        return x

    timed_inner = channel.wrap(inner, "inner")

    def outer(x: int) -> int:
        clock.now += 0.001
        value = timed_inner(x)
        clock.now += 0.002
        return value

    timed_outer = channel.wrap(outer, "outer")
    assert timed_outer(5) == 5
    seconds = {c.stage: c.seconds for c in channel.calls()}
    channel.close()
    assert seconds == {"inner": pytest.approx(0.003), "outer": pytest.approx(0.003)}


def test_calls_in_threads_and_other_processes_reach_the_channel(tmp_path):
    channel = StageChannel(tmp_path)
    timed = channel.wrap(abs, "abs")
    with ThreadPoolExecutor(2) as pool:
        assert list(pool.map(timed, [-1, -2])) == [1, 2]
    # A call in another process writes a file of its own (as a forked worker's would).
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            timed(-3)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    calls = channel.calls()
    channel.close()
    assert sorted(c.where for c in calls) == [PROCESS, THREAD, THREAD]
    assert len({c.runner for c in calls}) >= 2  # the child is a runner of its own


class _Pipeline:
    def __init__(self) -> None:
        self.transform = lambda x: x + 1
        self.pool = ThreadPoolExecutor(1)
        self.lock = threading.Lock()
        self.batch_size = 4

    def decode(self, i: int) -> int:
        return i * 2

    def prepare(self, i: int) -> int:
        return self.transform(self.decode(i))

    def _batches(self):  # a generator: timing its creation would time nothing
        yield from ()

    def __iter__(self):
        for i in range(8):
            yield self.prepare(i)


def test_the_callables_a_pipeline_holds_are_its_stages(tmp_path):
    pipeline = _Pipeline()
    channel = StageChannel(tmp_path)
    copy, names = timed_object(pipeline, channel.wrap)
    assert sorted(names) == ["decode", "prepare", "transform"]
    assert list(copy) == [2 * i + 1 for i in range(8)]
    assert {c.stage for c in channel.calls()} == {"decode", "prepare", "transform"}
    channel.close()
    assert "decode" not in vars(pipeline)  # the user's object is left as it was
    pipeline.pool.shutdown()


def test_no_wait_is_reported_where_no_node_was_waited_in():
    _rows, figures = declared_table(
        _calls("decode", THREAD, 2, 0.01, 8), samples=8, batches=2, interval_ms=20.0
    )
    assert figures["main_wait_ms_per_batch"] is None


class _Uncopyable(_Pipeline):
    def __copy__(self):
        raise RuntimeError("holds a live connection")


def test_a_pipeline_that_cannot_be_copied_is_not_measured_and_says_why():
    from stallscope.breakdown.declared import declared_stages
    from stallscope.errors import NotMeasured
    from stallscope.target import pipeline_from_object

    pipeline = pipeline_from_object(_Uncopyable(), label="uncopyable")
    with pytest.raises(NotMeasured, match="holds a live connection"):
        declared_stages(pipeline, batches=2, max_seconds=1.0)
    pipeline.kind.loader.pool.shutdown()
