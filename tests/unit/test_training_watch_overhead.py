"""Overhead of ss.watch against a named budget, as Lightning tests its profilers.

The budget is the time watch adds per step, in microseconds, measured on the
cheapest possible loop (iterating a Python list, nothing else) so that the
wrapper's own cost is all there is to see. A % of such a loop would be
meaningless (the bare step costs ~20 ns); against a real DataLoader step
(hundreds of µs) this budget is < 1%. The budget is generous because the
test machine is shared and loaded; the hot path measures well under 1 µs per
step. The end-to-end figure (SPEC §7: ≤ 1% on in-memory data) comes from
benchmarks/watch_overhead.py; here its measurement runs in a tiny mode, to
show it produces the figure.
"""

from __future__ import annotations

import gc
import importlib.util
import math
import threading
import time
from pathlib import Path

import pytest

import stallscope as ss
from stallscope.runtime.gpu import GpuSample
from stallscope.training.watch import Watch

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "watch_overhead.py"

# Added cost per step of a watched loop (µs), including the background sampler threads.
WATCH_STEP_OVERHEAD_BUDGET_US = 20.0
# Lightning-style: the recorded data wait of a step whose next() does nothing (ms, median).
RECORDED_EMPTY_STEP_MAX_MS = 0.5
STEPS = 20_000


def _bare(items: list[int]) -> float:
    start = time.perf_counter()
    for _ in items:
        pass
    return time.perf_counter() - start


def _watched(items: list[int], **options) -> float:
    w = ss.watch(items, **options)
    start = time.perf_counter()
    for _ in w:
        pass
    elapsed = time.perf_counter() - start
    w.close()
    return elapsed


def _added_us_per_step(**options) -> float:
    items = list(range(STEPS))
    added = []
    for _ in range(5):  # interleaved repeats; the minimum is the least disturbed by other load
        bare = _bare(items)
        watched = _watched(items, **options)
        added.append((watched - bare) / STEPS * 1e6)
    return min(added)


def test_per_step_overhead_without_sampling_is_within_budget():
    added = _added_us_per_step(sample_resources=False)
    assert added < WATCH_STEP_OVERHEAD_BUDGET_US, f"{added:.2f} µs/step"


def test_per_step_overhead_with_background_sampling_is_within_budget():
    added = _added_us_per_step(sample_resources=True, sample_interval=0.01)
    assert added < WATCH_STEP_OVERHEAD_BUDGET_US, f"{added:.2f} µs/step"


def test_recorded_durations_of_empty_steps_are_tiny():
    w = ss.watch(list(range(2000)), sample_resources=False)
    for _ in w:
        pass
    d = w.to_dict()
    assert d["total_steps"] == 2000
    assert d["data_ms"]["p50"] < RECORDED_EMPTY_STEP_MAX_MS
    assert d["compute_ms"]["p50"] < RECORDED_EMPTY_STEP_MAX_MS


def test_background_samplers_run_at_a_low_rate_by_default():
    w = Watch([1, 2])
    assert w.sample_interval >= 0.2 and w.resource_interval >= 0.5


class CountingGpu:
    """A GPU monitor that counts the samples taken (one per due sampling tick in steady state)."""

    available = True
    name = "counting"

    def __init__(self) -> None:
        self.calls = 0

    def sample(self) -> GpuSample:
        self.calls += 1
        return GpuSample(util_percent=50.0, memory_used_mb=1.0, memory_total_mb=2.0)

    def close(self) -> None:
        pass


def _sampler_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "stallscope-watch"]


def _sleepy(n: int, seconds: float):
    for i in range(n):
        time.sleep(seconds)
        yield i


def test_an_epoch_end_does_not_wait_for_the_sampler_and_the_report_does():
    w = ss.watch(list(range(50)), sample_interval=0.01, resource_interval=0.01)
    for _ in w:
        time.sleep(0.002)
    assert not w._sampling  # the epoch was handed over, the loop went on
    d = w.to_dict()  # settles: the epoch's figures are filed
    assert d["resources"] is not None and d["resources"]["seconds"] > 0
    w.close()


def test_one_sampler_thread_serves_every_epoch_and_ends_with_close():
    before = len(_sampler_threads())
    w = ss.watch(list(range(5)), sample_interval=0.01, resource_interval=0.01)
    for _ in range(6):
        # Epochs of 100 ms: an epoch shorter than the thread's wake-up on a loaded machine is not
        # seen (by design, sampling.py), and this test counts one window per epoch.
        for _ in w:
            time.sleep(0.02)
        assert len(_sampler_threads()) == before + 1
    w.to_dict()
    assert len(w._samples.resources) == 6  # one resource window per epoch
    w.close()
    assert len(_sampler_threads()) == before


def test_the_sampler_sleeps_between_epochs():
    gpu = CountingGpu()
    w = ss.watch(range(30), gpu=gpu, sample_interval=0.01)
    for _ in w:
        time.sleep(0.005)
    w.to_dict()
    during = gpu.calls
    time.sleep(0.3)  # 30 intervals without an epoch
    assert during > 0 and gpu.calls == during
    w.close()


def test_sampling_clocks_count_only_time_inside_epochs():
    # 20 epochs of about 25 ms against a 50 ms interval: a clock restarted at every
    # epoch would never come due (no sample), one counting the 30 ms gaps between epochs too would
    # come due about twice as often; counted over epochs, samples come at most at the configured
    # rate. (How close to it a loaded machine lets the sampler's thread come is not asserted.)
    gpu = CountingGpu()
    w = ss.watch(range(5), gpu=gpu, sample_interval=0.05)
    inside = 0.0
    for _ in range(20):
        start = time.perf_counter()
        for _ in w:
            time.sleep(0.005)
        inside += time.perf_counter() - start
        time.sleep(0.03)  # between epochs: not counted
    w.close()
    due = inside / 0.05
    assert 1 <= gpu.calls <= due + 1, (gpu.calls, due)


def test_a_watch_dropped_without_close_ends_its_thread():
    before = len(_sampler_threads())
    for _ in ss.watch(list(range(3))):
        pass
    gc.collect()
    deadline = time.perf_counter() + 5.0
    while len(_sampler_threads()) > before and time.perf_counter() < deadline:
        time.sleep(0.01)
    assert len(_sampler_threads()) == before


def _benchmark_module():
    spec = importlib.util.spec_from_file_location("watch_overhead_benchmark", BENCHMARK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_step_interleaved_benchmark_times_every_call_of_both_arms():
    module = _benchmark_module()
    result = module.step_interleaved(epochs=2, batches=100)
    # per arm and epoch: iter() + 100 batches + the StopIteration that ends the epoch
    assert result["timed_calls_per_arm"] == 2 * 102
    assert result["watched_steps_recorded"] == 3 * 100  # the warm-up epoch and the two timed ones
    assert result["resources_seconds"] > 0  # the inline readings ran
    low, high = result["overhead_90ci"]
    assert low <= result["overhead_percent"] <= high and math.isfinite(
        result["overhead_percent_unclipped"]
    )
    control = module.step_interleaved(epochs=1, batches=50, control=True)
    assert control["timed_calls_per_arm"] == 52 and control["watched_steps_recorded"] is None


def test_interleaving_alternates_a_b_b_a_and_finishes_both_epochs():
    module = _benchmark_module()
    order: list[str] = []

    class Recorded:
        def __init__(self, name: str, n: int) -> None:
            self.name, self.n = name, n

        def __iter__(self):
            for i in range(self.n):
                order.append(self.name)
                yield i

    a_steps: list[float] = []
    b_steps: list[float] = []
    module._interleave_epoch(Recorded("a", 4), Recorded("b", 6), a_steps, b_steps)
    assert order == ["a", "b", "b", "a", "a", "b", "b", "a", "b", "b"]
    assert len(a_steps) == 1 + 4 + 1 and len(b_steps) == 1 + 6 + 1


def test_end_to_end_benchmark_produces_the_interleaved_figure():
    result = _benchmark_module().end_to_end(blocks=2, batches=100)
    assert (
        result["blocks"] == 2
        and result["steps_per_epoch"] == 100
        and result["bare_us_per_step_median"] > 0
    )
    for clock in ("wall", "cpu", "step_median"):
        figure = result[clock]
        assert len(figure["blocks_percent"]) == 2 and math.isfinite(
            figure["overhead_percent_median"]
        )
        low, high = figure["median_90ci"]
        assert low <= figure["overhead_percent_median"] <= high


def _burn(seconds: float) -> None:
    until = time.perf_counter() + seconds
    while time.perf_counter() < until:
        pass


def test_a_single_process_loader_is_read_inline_with_exact_figures():
    # No workers, no GPU: no sampler thread at all; CPU and RSS are read on the loop's
    # thread, each epoch is one window spanning it exactly, the main CPU is the loop's.
    from torch.utils.data import DataLoader

    before = len(_sampler_threads())
    loader = DataLoader(list(range(40)), batch_size=1, num_workers=0)
    w = ss.watch(loader, resource_interval=0.05, gpu=False)  # a GPU to read would need the thread
    wall = cpu = 0.0
    for _ in range(3):
        wall0, cpu0 = time.perf_counter(), time.process_time()
        for _ in w:
            _burn(0.005)  # CPU-bound half of the step
            time.sleep(0.005)  # and an idle half
            assert len(_sampler_threads()) == before
        wall += time.perf_counter() - wall0
        cpu += time.process_time() - cpu0
    assert w._sampler is None
    # Readings reach the watch's time windows (the sampler keeps no list of ticks: a run can last a
    # week): about one per 50 ms of the three epochs' ~1.2 s, all in the first 60 s window.
    readings = w._resource_windows.figures(0)
    assert 9 <= w._resource_windows._slots[0]["readings"] <= 48 and readings["main_rss_mb"] > 0
    resources = w.to_dict()["resources"]
    w.close()
    assert resources["seconds"] == pytest.approx(wall, abs=0.02)
    assert resources["main_cpu_percent"] == pytest.approx(cpu / wall * 100, abs=5.0)


def test_an_epoch_with_workers_wakes_the_sampler_at_its_end():
    from torch.utils.data import DataLoader

    loader = DataLoader(list(range(8)), batch_size=2, num_workers=1)
    w = ss.watch(loader, resource_interval=5.0)  # no tick would come due in this epoch
    for _ in w:
        time.sleep(0.01)
    assert w._sampler is not None
    deadline = time.perf_counter() + 2.0
    while not w._samples.resources and time.perf_counter() < deadline:
        time.sleep(0.005)  # filed by the woken thread, not by settle()
    assert len(w._samples.resources) == 1
    w.close()


def test_settle_mid_epoch_returns_at_once():
    w = ss.watch(range(3), resource_interval=0.01)
    for i in w:
        if i == 1:
            start = time.perf_counter()
            w.to_dict()  # the open epoch is not waited for
            assert time.perf_counter() - start < 1.0
    w.close()


def test_the_benchmark_reports_the_per_step_cost_on_a_python_list(capsys):
    module = _benchmark_module()
    figure = module.hot_path_figure(steps=2000, repeats=3)
    assert (
        len(figure["pairs_ns"]) == 3 and figure["steps"] == 2000 and figure["budget_ns"] == 1000.0
    )
    assert figure["min_ns"] <= figure["median_ns"] and all(
        math.isfinite(p) for p in figure["pairs_ns"]
    )
    module.print_hot_path(figure)
    assert "per-step cost on a Python list" in capsys.readouterr().out
