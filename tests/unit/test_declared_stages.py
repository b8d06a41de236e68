"""The stages a graph or pool pipeline declares (NOTE [declared stages]): the per-batch arithmetic
on fixed calls, exclusive timing on a fake clock, what counts as a stage, the channel from other
processes."""

from __future__ import annotations

import dataclasses
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from stallscope.breakdown import stage_clock
from stallscope.breakdown.declared import timed_object
from stallscope.breakdown.declared_table import BETWEEN, declared_table, in_window, wall_shares
from stallscope.breakdown.stage_clock import MAIN, PROCESS, THREAD, StageCall, StageChannel


def _calls(stage: str, where: str, runners: int, each: float, n: int) -> list[StageCall]:
    """``n`` calls of ``each`` seconds, round-robin over ``runners``, each runner's back to back
    from 0.0."""
    out = []
    for i in range(n):
        start = (i // runners) * each
        out.append(
            StageCall(
                stage, where, f"1:{i % runners}", start + each, each, ((start, start + each),)
            )
        )
    return out


def _call(stage: str, where: str, *spans: tuple[float, float], runner: str = "1:1") -> StageCall:
    return StageCall(stage, where, runner, spans[-1][1], sum(e - s for s, e in spans), spans)


def test_each_instant_is_shared_among_the_stages_running_at_it():
    # 0-4 s: decode alone; 4-6 s: decode and collate side by side; 6-8 s: collate alone;
    # 8-10 s: nothing runs (the hand-over).
    calls = [
        _call("decode", THREAD, (0.0, 6.0)),
        _call("collate", MAIN, (4.0, 8.0), runner="1:0"),
    ]
    shares, idle = wall_shares(calls, 0.0, 10.0)
    assert shares[("decode", THREAD)] == pytest.approx(5.0)  # 4 + 2/2
    assert shares[("collate", MAIN)] == pytest.approx(3.0)  # 2/2 + 2
    assert idle == pytest.approx(2.0)
    assert sum(shares.values()) + idle == pytest.approx(10.0)


def test_two_runners_of_one_stage_count_twice_against_another_stage():
    # Two decode threads and one augment thread all running 0-3 s: decode holds 2/3 of it.
    calls = [
        _call("decode", THREAD, (0.0, 3.0), runner="1:1"),
        _call("decode", THREAD, (0.0, 3.0), runner="1:2"),
        _call("augment", THREAD, (0.0, 3.0), runner="1:3"),
    ]
    shares, idle = wall_shares(calls, 0.0, 3.0)
    assert shares[("decode", THREAD)] == pytest.approx(2.0)
    assert shares[("augment", THREAD)] == pytest.approx(1.0)
    assert idle == 0.0


def test_spans_are_clipped_to_the_window_and_waits_do_not_run():
    calls = [
        _call("decode", PROCESS, (-2.0, 1.0)),  # began before the window
        _call("augment", PROCESS, (3.0, 7.0)),  # ends after it
        _call("wait: ParallelMapper", MAIN, (0.0, 5.0), runner="1:0"),
    ]
    shares, idle = wall_shares(calls, 0.0, 5.0)
    assert shares == {("decode", PROCESS): pytest.approx(1.0), ("augment", PROCESS): 2.0}
    assert idle == pytest.approx(2.0)  # 1-3 s: only the main thread's wait


def test_rows_and_the_time_between_stages_add_up_to_the_interval():
    # 10 batches of 8 in a 0.4 s window: decode 16 ms per item on 4 threads back to back
    # (0.32 s), then collate 2 ms per batch in main (0.02 s) while no decode runs, then 60 ms
    # in which nothing runs (items pickled to and from processes, say); the main thread's
    # wait for the mapper is not a row.
    calls = (
        _calls("decode (ParallelMapper)", THREAD, 4, 0.016, 80)
        + [
            _call("collate (Mapper)", MAIN, (0.32 + i * 0.002, 0.322 + i * 0.002), runner="1:0")
            for i in range(10)
        ]
        + [_call("wait: ParallelMapper", MAIN, (0.0, 0.3), runner="1:0")]
    )
    rows, figures = declared_table(calls, samples=80, batches=10, window=(0.0, 0.4))
    by_name = {r.name: r for r in rows}
    assert list(by_name) == ["decode (ParallelMapper)", "collate (Mapper)", BETWEEN]
    assert by_name["decode (ParallelMapper)"].ms_per_sample == pytest.approx(4.0)  # 320 ms / 80
    assert by_name["decode (ParallelMapper)"].where == "4 threads"
    assert by_name["decode (ParallelMapper)"].p90_ms == pytest.approx(16.0)  # one call's cost
    assert by_name["collate (Mapper)"].where == "main"
    assert by_name[BETWEEN].ms_per_sample == pytest.approx(0.75)  # 60 ms / 80
    assert by_name[BETWEEN].kind == "handover"
    assert figures["stage_ms_per_batch"] == pytest.approx(34.0)  # (320 + 20) ms / 10
    assert figures["between_ms_per_batch"] == pytest.approx(6.0)
    assert figures["adds_up"] == pytest.approx(0.85)  # 34 of the 40 ms between batches
    assert figures["main_wait_ms_per_batch"] == pytest.approx(30.0)
    assert sum(r.share for r in rows) == pytest.approx(1.0)
    declared = {d["name"]: d for d in figures["declared"]}
    # Each stage's calls divided among its own runners: 8 x 16 ms / 4 per batch.
    assert declared["decode (ParallelMapper)"]["busy_ms_per_batch"] == pytest.approx(32.0)
    assert declared["decode (ParallelMapper)"]["call_ms_per_sample"] == pytest.approx(16.0)


def test_stages_that_overlap_on_shared_cores_do_not_add_up_past_the_interval():
    # Two mappers' threads (decode on 2, augment on 2) running side by side over the whole
    # window, each call stretched to 20 ms by the other: 8 items a batch through each, so
    # each stage divided by its own runners claims 80 ms of a 80 ms batch -> 160 ms; shared per
    # instant they hold 40 ms each.
    calls = _calls("decode", THREAD, 2, 0.020, 16) + [
        dataclasses.replace(c, stage="augment", runner=c.runner + "a")
        for c in _calls("decode", THREAD, 2, 0.020, 16)
    ]
    rows, figures = declared_table(calls, samples=16, batches=2, window=(0.0, 0.16))
    declared = {d["name"]: d for d in figures["declared"]}
    assert declared["decode"]["busy_ms_per_batch"] + declared["augment"][
        "busy_ms_per_batch"
    ] == pytest.approx(160.0)
    assert figures["stage_ms_per_batch"] == pytest.approx(80.0)
    assert figures["adds_up"] == pytest.approx(1.0)
    assert {r.name: r.share for r in rows} == {
        "decode": pytest.approx(0.5),
        "augment": pytest.approx(0.5),
        BETWEEN: pytest.approx(0.0, abs=1e-9),
    }


def test_process_rows_say_how_many_processes_ran_them():
    rows, figures = declared_table(
        _calls("decode", PROCESS, 2, 0.010, 20), samples=20, batches=5, window=(0.0, 0.1)
    )
    assert rows[0].where == "2 processes"
    assert figures["stage_ms_per_batch"] == pytest.approx(20.0)  # 2 processes busy 100 ms / 5
    assert figures["adds_up"] == pytest.approx(1.0)


def test_only_calls_that_ended_in_the_window_count_as_calls():
    calls = _calls("decode", THREAD, 1, 1.0, 10)  # ended at 1..10
    assert [c.ended for c in in_window(calls, 2.0, 4.0)] == [2.0, 3.0, 4.0]


def test_calls_read_back_from_another_process_keep_their_spans(tmp_path):
    call = StageCall("decode", PROCESS, "7:1", 3.5, 1.5, ((1.0, 2.0), (3.0, 3.5)))
    stage_clock._append(str(tmp_path), call)
    (tmp_path / "old.calls").write_text("decode\tprocess\t8:1\t2.0\t0.5\n")
    channel = StageChannel(tmp_path)
    read = sorted(channel.calls(), key=lambda c: c.runner)
    channel.close()
    assert read[0] == call
    assert read[1].own_spans() == ((1.5, 2.0),)  # a line without spans: the call's own end


class _FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_stage_is_charged_its_own_time_not_the_stages_it_calls(monkeypatch, tmp_path):
    clock = _FakeClock()
    monkeypatch.setattr(stage_clock, "_clock", clock)
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
    calls = {c.stage: c for c in channel.calls()}
    channel.close()
    assert calls["inner"].seconds == pytest.approx(0.003)
    assert calls["outer"].seconds == pytest.approx(0.003)
    # The outer call's own stretches are around the inner one's.
    assert calls["inner"].spans == (pytest.approx((0.001, 0.004)),)
    assert calls["outer"].spans == (pytest.approx((0.0, 0.001)), pytest.approx((0.004, 0.006)))


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
        _calls("decode", THREAD, 2, 0.01, 8), samples=8, batches=2, window=(0.0, 0.04)
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


class _CutBatches:
    """A sampler that yields what __getitem__ takes (lhotse's yield CutSets): lists of ids."""

    def __iter__(self):
        return iter([[0, 1, 2], [3, 4], [5]])

    def __len__(self) -> int:
        return 3


class _LoadsACut:
    def __getitem__(self, cut_ids: list[int]) -> list[int]:
        return [i * 10 for i in cut_ids]


@pytest.mark.parametrize("workers", [0, 1])
def test_a_loader_handed_whole_batches_times_its_datasets_getitem(tmp_path, workers):
    # batch_size=None: the dataset's __getitem__ does the work on the sampler's batch; no attribute
    # of the loader holds it, and without it the table read "between stages" for all of it.
    from torch.utils.data import DataLoader

    loader = DataLoader(
        _LoadsACut(),
        sampler=_CutBatches(),
        batch_size=None,
        num_workers=workers,
        collate_fn=list,
        multiprocessing_context="fork" if workers else None,
    )
    channel = StageChannel(tmp_path)
    copy, names = timed_object(loader, channel.wrap)
    assert "_LoadsACut.__getitem__" in names
    assert [list(b) for b in copy] == [[0, 10, 20], [30, 40], [50]]
    assert [c.stage for c in channel.calls()].count("_LoadsACut.__getitem__") == 3
    channel.close()
    assert isinstance(loader.dataset, _LoadsACut)  # the user's loader is left as it was
