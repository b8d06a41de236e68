"""ss.watch: exact figures with a fake clock, sleep-based accuracy, occupancy with real workers."""

from __future__ import annotations

import json
import math
import time

import pytest
import torch
from profile_synthetic import SleepDataset
from torch.utils.data import DataLoader

import stallscope as ss
from stallscope.analysis.training import judged_profile
from stallscope.api import Watch
from stallscope.errors import UsageError
from stallscope.training.sampling import prefetch_occupancy
from stallscope.training.summary import occupancy_summary, summarize_steps
from stallscope.training.watch import resolve_sync


class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


class TimedSource:
    """An iterable whose next() costs known (fake) time; ``startup`` lands on the first batch."""

    def __init__(self, clock: FakeClock, costs: list[float], startup: float = 0.0) -> None:
        self.clock, self.costs, self.startup = clock, costs, startup

    def __len__(self) -> int:
        return len(self.costs)

    def __iter__(self):
        self.clock.advance(self.startup)
        for i, cost in enumerate(self.costs):
            self.clock.advance(cost)
            yield i


def run_fake_loop(
    data: list[float], compute: list[float], *, startup: float = 0.0, **options
) -> Watch:
    clock = FakeClock()
    w = Watch(
        TimedSource(clock, data, startup), clock=clock, sample_resources=False, gpu=False, **options
    )
    for i in w:
        clock.advance(compute[i])
    return w


# -- exact figures ---------------------------------------------------------------------------


def test_fake_clock_figures_are_exact():
    w = run_fake_loop([0.010] * 5, [0.030] * 5, startup=0.5)
    d = w.to_dict()
    assert d["total_steps"] == 5 and d["steps"] == 4
    assert d["stall_fraction"] == pytest.approx(0.25)
    assert d["verdict"] == "input-bound"
    assert d["what_if_speedup"] == pytest.approx(40 / 30, abs=1e-3)
    assert d["first_batch_s"] == pytest.approx(
        0.51
    )  # start-up + first fetch, kept out of steady state
    assert d["data_ms"]["mean"] == pytest.approx(10.0)
    assert d["compute_ms"]["mean"] == pytest.approx(30.0)
    assert d["step_timeline"]["data_ms"][0] == pytest.approx(510.0)
    assert d["step_timeline"]["compute_ms"] == pytest.approx([30.0] * 5)


def test_warmup_steps_are_kept_out_of_steady_state():
    w = run_fake_loop([0.1, 0.1, 0.001, 0.001], [0.01] * 4, warmup=2)
    d = w.to_dict()
    assert d["steps"] == 2 and d["warmup_steps"] == 2
    assert d["stall_fraction"] == pytest.approx(0.001 / 0.011, abs=1e-3)


@pytest.mark.parametrize(
    ("stall", "verdict"),
    [
        (0.0, "compute-bound"),
        (0.0499, "compute-bound"),
        (0.05, "balanced"),
        (0.149, "balanced"),
        (0.15, "input-bound"),
        (0.9, "input-bound"),
    ],
)
def test_verdict_thresholds(stall, verdict):
    from stallscope.analysis.training import verdict_for

    assert verdict_for(stall) == verdict


def test_every_epoch_reports_its_first_batch():
    clock = FakeClock()
    source = TimedSource(clock, [0.01] * 3, startup=0.2)
    w = Watch(source, clock=clock, sample_resources=False, gpu=False)
    for _epoch in range(2):
        for _ in w:
            clock.advance(0.01)
    d = w.to_dict()
    assert d["epochs"] == 2 and d["total_steps"] == 6 and d["steps"] == 4
    assert d["epoch_start_s"] == pytest.approx([0.21, 0.21])
    assert d["stall_fraction"] == pytest.approx(0.5)
    assert d["epoch_steps"] == 3
    assert d["startup_share_per_epoch"] == pytest.approx(0.21 / (0.21 + 3 * 0.02), abs=1e-3)


def test_break_closes_the_last_step_when_the_loop_leaves():
    clock = FakeClock()
    w = Watch(TimedSource(clock, [0.01] * 10), clock=clock, sample_resources=False, gpu=False)
    for i in w:
        clock.advance(0.02)
        if i == 3:
            break
    assert w.steps == 4
    assert w.to_dict()["compute_ms"]["max"] == pytest.approx(20.0)
    assert len(w._compute) == 4


def test_summarize_steps_handles_an_open_step_and_no_steps():
    d = summarize_steps(data_s=[0.1, 0.01, 0.01], compute_s=[0.01, 0.03], epoch_starts=[0])
    assert d["steps"] == 1 and d["stall_fraction"] == pytest.approx(0.25)
    empty = summarize_steps(data_s=[], compute_s=[], epoch_starts=[])
    assert empty["stall_fraction"] is None and empty["what_if_speedup"] is None
    # No steps, no verdict (judged by analysis from the figures, never made up).
    assert judged_profile(empty)["verdict"] is None


# -- accuracy against known sleep costs --------------------------------------------------------


class SleepSource:
    def __init__(self, n: int, cost_s: float) -> None:
        self.n, self.cost_s = n, cost_s

    def __iter__(self):
        for i in range(self.n):
            if (
                self.cost_s > 0
            ):  # sleep(0) yields the CPU, which costs milliseconds on a loaded machine
                time.sleep(self.cost_s)
            yield i


def test_the_real_clock_holds_every_sleep():
    # On the default clock (time.perf_counter), with the resource sampler on: every wait holds
    # its loader's sleep and every step its compute's (a sleep never ends early). How close the
    # stall fraction comes to the sleeps' own share is a timing claim:
    # benchmarks/watch_accuracy.py measures it.
    data_s, compute_s = 0.006, 0.004
    w = ss.watch(SleepSource(30, data_s), sample_interval=0.05)
    for _ in w:
        time.sleep(compute_s)
    d = w.to_dict()
    assert d["steps"] == 29 and d["resources"] is not None
    timeline = d["step_timeline"]
    assert min(timeline["data_ms"]) >= data_s * 1000 * 0.999, timeline
    assert min(timeline["compute_ms"]) >= compute_s * 1000 * 0.999, timeline
    stall = d["data_ms"]["mean"] / (d["data_ms"]["mean"] + d["compute_ms"]["mean"])
    assert d["stall_fraction"] == pytest.approx(stall, abs=1e-3)
    assert d["what_if_speedup"] == pytest.approx(1 / (1 - d["stall_fraction"]), rel=1e-3)


def test_compute_dominated_loop_is_compute_bound():
    # A free source under 30 ms steps, on the fake clock: no wait at all.
    d = run_fake_loop([0.0] * 20, [0.03] * 20).to_dict()
    assert d["stall_fraction"] == pytest.approx(0.0, abs=1e-9)
    assert d["verdict"] == "compute-bound"
    assert d["what_if_speedup"] == pytest.approx(1.0)


# -- prefetch-buffer occupancy -----------------------------------------------------------------


def _occupancy_run(
    cost_s: float, compute_s: float, steps: int, context: str, workers: int = 2
) -> dict:
    loader = DataLoader(
        SleepDataset(steps * 2, cost_s),
        batch_size=2,
        num_workers=workers,
        prefetch_factor=4 // workers,
        multiprocessing_context=context,
    )
    w = ss.watch(loader, sample_interval=0.01)
    it = iter(w)
    for _ in it:
        time.sleep(compute_s)
    return w.to_dict()


def test_occupancy_is_near_zero_when_the_loader_is_the_bottleneck():
    d = _occupancy_run(cost_s=0.010, compute_s=0.0, steps=40, context="fork")
    occ = d["occupancy"]
    assert occ is not None and occ["capacity"] == 4 and occ["samples"] >= 5
    assert occ["mean_fraction"] < 0.25, occ
    assert d["verdict"] == "input-bound"


@pytest.mark.parametrize(
    ("context", "workers"), [("fork", 2), ("spawn", 1)]
)  # one spawned worker: its start-up is slow
def test_occupancy_is_near_full_when_compute_is_the_bottleneck(context, workers):
    d = _occupancy_run(cost_s=0.0, compute_s=0.02, steps=30, context=context, workers=workers)
    occ = d["occupancy"]
    assert occ is not None and occ["capacity"] == 4
    assert occ["mean_fraction"] > 0.6, occ
    res = d["resources"]
    assert res is not None and res["main_rss_mb"] > 0


class FakeQueue:
    def __init__(self, size: int | None) -> None:
        self.size = size

    def qsize(self) -> int:
        if self.size is None:
            raise NotImplementedError  # as on macOS
        return self.size


class FakeIterator:
    def __init__(self, queued=1, stashed=1, pinned=None, workers=2, factor=2) -> None:
        self._num_workers, self._prefetch_factor, self._shutdown = workers, factor, False
        self._worker_result_queue = FakeQueue(queued)
        self._data_queue = FakeQueue(pinned) if pinned is not None else self._worker_result_queue
        self._task_info = {5: (0,), 6: (1, "batch")} if stashed else {5: (0,)}


def test_prefetch_occupancy_reads_iterator_internals():
    assert prefetch_occupancy(FakeIterator(queued=1, stashed=1)) == (2, 4)
    assert prefetch_occupancy(FakeIterator(queued=1, stashed=0, pinned=2)) == (3, 4)
    assert prefetch_occupancy(FakeIterator(queued=9, stashed=1)) == (4, 4)  # never above capacity
    assert prefetch_occupancy(FakeIterator(queued=None)) is None
    assert prefetch_occupancy(FakeIterator(workers=0)) is None
    stopped = FakeIterator()
    stopped._shutdown = True
    assert prefetch_occupancy(stopped) is None
    assert prefetch_occupancy(iter([1, 2])) is None


def test_prefetch_occupancy_on_a_real_torch_iterator():
    loader = DataLoader(SleepDataset(16, 0.0), batch_size=2, num_workers=1, prefetch_factor=3)
    it = iter(loader)
    try:
        deadline = time.monotonic() + 20
        occ = prefetch_occupancy(it)
        while occ is not None and occ[0] < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
            occ = prefetch_occupancy(it)
        assert occ == (3, 3)  # all prefetched batches are ready and waiting
        next(it)
        ready, capacity = prefetch_occupancy(it)
        assert capacity == 3 and ready <= 3
    finally:
        it._shutdown_workers()
    assert prefetch_occupancy(iter(DataLoader(SleepDataset(4, 0.0), batch_size=2))) is None


def test_occupancy_summary_numbers():
    occ = occupancy_summary([0, 0, 2, 4], 4)
    assert occ == {
        "capacity": 4,
        "mean_ready": 1.5,
        "mean_fraction": 0.375,
        "empty_fraction": 0.5,
        "full_fraction": 0.25,
        "samples": 4,
    }
    assert occupancy_summary([], 4) is None


# -- honest device timing (faked: no GPU here) ---------------------------------------------------


def test_sync_time_counts_as_compute_and_is_reported():
    clock = FakeClock()
    calls = []

    def fake_device_sync():  # the device finishes 8 ms of queued work
        calls.append(clock())
        clock.advance(0.008)

    w = Watch(
        TimedSource(clock, [0.002] * 6),
        clock=clock,
        sync=fake_device_sync,
        sample_resources=False,
        gpu=False,
    )
    for _ in w:
        clock.advance(0.001)  # CPU-side launch time only
    d = w.to_dict()
    assert len(calls) == 6
    assert d["compute_ms"]["mean"] == pytest.approx(9.0)
    assert d["stall_fraction"] == pytest.approx(2 / 11, abs=1e-3)
    assert d["sync"]["calls"] == 6 and d["sync"]["mean_ms"] == pytest.approx(8.0)
    assert (
        d["sync"]["mode"]
        == "test_sync_time_counts_as_compute_and_is_reported.<locals>.fake_device_sync"
    )


def test_resolve_sync(monkeypatch):
    assert resolve_sync(None) == (None, None)
    fn = lambda: None  # noqa: E731
    assert resolve_sync(fn)[0] is fn
    with pytest.raises(UsageError):
        resolve_sync("tpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(UsageError, match="CUDA"):
        resolve_sync("cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    sentinel = lambda: None  # noqa: E731
    monkeypatch.setattr(torch.cuda, "synchronize", sentinel)
    assert resolve_sync("cuda") == (sentinel, "cuda")


class FakeGpu:
    available = True
    name = "Fake GPU"
    reason = None

    def __init__(self) -> None:
        self.values = iter([40.0, 60.0, 80.0] + [80.0] * 10_000)

    def sample(self):
        from stallscope.runtime.gpu import GpuSample

        return GpuSample(
            util_percent=next(self.values), memory_used_mb=1000.0, memory_total_mb=8000.0
        )

    def close(self) -> None:
        pass


def test_gpu_samples_feed_utilisation():
    w = ss.watch(SleepSource(10, 0.01), gpu=FakeGpu(), sample_interval=0.01)
    for _ in w:
        pass
    d = w.to_dict()
    assert d["gpu_util"] is not None and 40.0 <= d["gpu_util"] <= 80.0
    assert d["gpu"]["name"] == "Fake GPU" and d["gpu"]["memory_used_mb_max"] == 1000.0


# -- outputs -----------------------------------------------------------------------------------


class FakeWriter:
    def __init__(self) -> None:
        self.scalars: list[tuple[str, float, int]] = []

    def add_scalar(self, tag, value, step):
        self.scalars.append((tag, value, step))

    def flush(self):
        pass


def test_live_lines_files_and_tensorboard(tmp_path):
    lines: list[str] = []
    writer = FakeWriter()
    clock = FakeClock()
    w = Watch(
        TimedSource(clock, [0.01] * 12),
        clock=clock,
        sample_resources=False,
        gpu=False,
        log_every=5,
        log=lines.append,
        jsonl=tmp_path / "steps.jsonl",
        csv=tmp_path / "steps.csv",
        tensorboard=writer,
        name="demo",
    )
    with w:
        for _ in w:
            clock.advance(0.03)
    assert (
        len(lines) == 2
        and lines[0].startswith("[stallscope demo] step 4")
        and "stall 25%" in lines[1]
    )
    rows = [json.loads(line) for line in (tmp_path / "steps.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(12))
    assert (
        rows[0]["first"] is True
        and rows[1]["data_ms"] == pytest.approx(10.0)
        and rows[1]["compute_ms"] == pytest.approx(30.0)
    )
    csv_lines = (tmp_path / "steps.csv").read_text().splitlines()
    assert csv_lines[0] == "step,epoch,t_s,data_ms,compute_ms,first" and len(csv_lines) == 13
    tags = {tag for tag, _, _ in writer.scalars}
    assert {
        "stallscope/demo/data_ms",
        "stallscope/demo/compute_ms",
        "stallscope/demo/stall_fraction",
    } <= tags
    stall = [v for tag, v, _ in writer.scalars if tag.endswith("stall_fraction")]
    assert stall[-1] == pytest.approx(0.25)


def test_tensorboard_dir_without_tensorboard_is_a_usage_error(tmp_path, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_tensorboard(name, *args, **kwargs):
        if name.startswith("torch.utils.tensorboard") or name == "tensorboard":
            raise ImportError("no tensorboard")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_tensorboard)
    with pytest.raises(UsageError, match="tensorboard"):
        ss.watch([1, 2], tensorboard=tmp_path)


def test_summary_text_and_record_keys():
    w = run_fake_loop([0.02] * 6, [0.01] * 6)
    text = ss.stall_summary(w)
    assert "input-bound" in text and "stall fraction 66.7%" in text and "advice:" in text
    d = w.to_dict()
    for key in (
        "stall_fraction",
        "verdict",
        "steps",
        "gpu_util",
        "what_if_speedup",
        "step_timeline",
        "first_batch_s",
        "occupancy",
        "resources",
        "ranks",
        "usable_cores",
        "local_world_size",
    ):
        assert key in d
    # The watch records measurements; its advice is analysis over them, asked for at the API.
    assert "recommendations" not in d and "advice" not in d
    assert any(r.id == "profile-input-bound" for r in w.recommendations())
    assert (w.advice() or "").startswith("input-bound: 67% of each step waits for data")
    assert f"advice: {w.advice()}" in text


# -- manual API (plain loops; what the integrations drive) ---------------------------------------


def test_manual_api_next_data_and_end_step():
    clock = FakeClock()
    w = Watch(None, clock=clock, sample_resources=False, gpu=False)
    source = TimedSource(clock, [0.004] * 3)
    it = iter(source)
    for _ in range(3):
        w.next(it)
        clock.advance(0.012)
    with pytest.raises(StopIteration):
        w.next(it)
    with w.data():
        clock.advance(0.004)
    clock.advance(0.012)
    w.end_step()
    clock.advance(5.0)  # evaluation: not part of any step
    w.data_start()
    w.cancel_wait()
    d = w.to_dict()
    assert d["total_steps"] == 4 and d["steps"] == 3
    assert d["stall_fraction"] == pytest.approx(0.25)
    assert d["compute_ms"]["max"] == pytest.approx(12.0)


def test_attributes_go_to_the_loader():
    loader = DataLoader(SleepDataset(8, 0.0), batch_size=4)
    w = ss.watch(loader, sample_resources=False)
    assert w.batch_size == 4 and len(w) == 2 and w.loader is loader
    with pytest.raises(AttributeError):
        _ = w.no_such_attribute


def test_bad_arguments_are_usage_errors():
    with pytest.raises(UsageError):
        ss.watch([1], log_every=0)
    with pytest.raises(UsageError):
        ss.watch([1], log=42)


def test_gather_outside_a_distributed_job_has_one_rank():
    w = run_fake_loop([0.01] * 4, [0.01] * 4)
    d = w.gather()
    assert [r["rank"] for r in d["ranks"]] == [0]
    assert d["distributed"]["slowest_rank"] == 0
    assert math.isclose(d["ranks"][0]["data_wait_ms_per_step"], 10.0, rel_tol=1e-6)


def test_pause_keeps_validation_out_of_steps_and_samples():
    clock = FakeClock()
    w = Watch(None, clock=clock, sample_resources=False, gpu=False)
    it = iter(TimedSource(clock, [0.01] * 4))
    w.epoch_start()
    for _ in range(2):
        w.next(it)
        clock.advance(0.03)
    assert w._in_steady_state()
    w.pause()  # validation: the open step ends, the samplers stop counting the buffer
    assert not w._in_steady_state()
    clock.advance(2.0)
    for _ in range(2):
        w.next(it)
        clock.advance(0.03)
    assert w._in_steady_state()
    w.pause()
    d = w.to_dict()
    assert d["steps"] == 3 and d["stall_fraction"] == pytest.approx(0.25)
    assert d["compute_ms"]["max"] == pytest.approx(30.0) and d["data_ms"]["max"] == pytest.approx(
        10.0
    )


def test_timed_iterator_for_a_consumer_that_fetches_one_batch_ahead():
    """Like Lightning's fetcher on a stream: prefetch at iter(), then one refill per step, the last
    one ends it."""
    clock = FakeClock()
    w = Watch(None, clock=clock, sample_resources=False, gpu=False)
    w.epoch_start()
    it = w.timed(iter(TimedSource(clock, [0.01] * 4)), ahead=1, stop_ends_wait=True)
    buffered = [next(it)]  # the prefetch: part of the first step's wait
    clock.advance(0.001)
    for _ in range(4):
        try:
            buffered.append(next(it))  # the refill: the step's blocking fetch
        except StopIteration:
            pass
        buffered.pop(0)
        clock.advance(0.03)  # the step's compute
    w.pause()
    d = w.to_dict()
    assert d["total_steps"] == 4 and d["steps"] == 3
    assert d["first_batch_s"] == pytest.approx(0.021)
    assert d["compute_ms"]["max"] == pytest.approx(30.0)
    assert d["stall_fraction"] == pytest.approx(
        0.02 / 0.11, abs=1e-4
    )  # two refills of 10 ms, the last one ends the stream


def test_summary_method_is_the_stall_summary_text():
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    w = ss.watch(
        DataLoader(TensorDataset(torch.zeros(64, 2)), batch_size=8), sample_resources=False
    )
    for _ in w:
        pass
    assert w.summary() == ss.stall_summary(w) and "stall" in w.summary().lower()
