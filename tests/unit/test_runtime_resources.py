"""ResourceSampler: CPU % counted from the window start, checked against processes that burn
known CPU."""

from __future__ import annotations

import multiprocessing
import time

import psutil
import pytest

from stallscope.runtime.host import usable_cores
from stallscope.runtime.resources import ResourceSampler

# psutil reads CPU times in clock ticks (10 ms); a few ticks per process over a ~1 s window.
NOISE_PERCENT = 12.0


def _burn(seconds: float) -> None:
    until = time.perf_counter() + seconds
    x = 0
    while time.perf_counter() < until:
        x += 1


def _cpu(procs: list[psutil.Process]) -> float:
    total = 0.0
    for proc in procs:
        times = proc.cpu_times()
        total += times.user + times.system
    return total


@pytest.fixture
def burners():
    ctx = multiprocessing.get_context("fork")
    started: list = []

    def start(n: int, seconds: float) -> list[psutil.Process]:
        for _ in range(n):
            proc = ctx.Process(target=_burn, args=(seconds,), daemon=True)
            proc.start()
            started.append(proc)
        return [psutil.Process(p.pid) for p in started[-n:]]

    yield start
    for proc in started:
        proc.kill()
        proc.join(5)


def test_workers_started_before_the_window_count_from_its_start(burners):
    # Two workers burn for 1 s before the window opens: counted from birth they read
    # about twice their real share (the 245 % on 2 cores of issue 10).
    procs = burners(2, 6.0)
    time.sleep(1.0)
    wall0, cpu0 = time.perf_counter(), _cpu(procs)
    sampler = ResourceSampler(0.2, worker_pids=lambda: [p.pid for p in procs]).start()
    time.sleep(1.2)
    summary = sampler.stop()
    truth = (_cpu(procs) - cpu0) / (time.perf_counter() - wall0) * 100
    if truth < 5:
        pytest.skip("the burners got almost no CPU: the machine is too busy to tell")
    assert summary.workers_cpu_percent == pytest.approx(truth, abs=NOISE_PERCENT)
    cores = usable_cores() * 100
    assert summary.main_cpu_percent + summary.workers_cpu_percent <= cores + NOISE_PERCENT
    # Per tick (0.2 s) a clock tick of jitter per process is 5 %.
    assert max(t.main_cpu_percent + t.workers_cpu_percent for t in summary.ticks) <= cores + 3 * 5.0


def test_a_worker_born_inside_the_window_counts_all_its_cpu(burners):
    sampler = ResourceSampler(0.2).start()  # every descendant of this process
    wall0 = time.perf_counter()
    [proc] = burners(1, 6.0)
    time.sleep(1.2)
    summary = sampler.stop()
    truth = _cpu([proc]) / (time.perf_counter() - wall0) * 100
    if truth < 5:
        pytest.skip("the burner got almost no CPU: the machine is too busy to tell")
    assert summary.workers_cpu_percent == pytest.approx(truth, abs=NOISE_PERCENT)


def test_a_worker_that_has_exited_has_no_memory_reading():
    # An exited worker not yet reaped (a zombie) reads 0 bytes; counted as a reading, a leaking
    # worker's last window of a run read as a fall of its whole memory.
    ctx = multiprocessing.get_context("fork")
    live, dead = ctx.Process(target=time.sleep, args=(30,)), ctx.Process(target=int)
    live.start()
    dead.start()
    try:
        deadline = time.monotonic() + 10.0
        while psutil.Process(dead.pid).status() != psutil.STATUS_ZOMBIE:
            assert time.monotonic() < deadline, "the child never exited"
            time.sleep(0.01)
        sampler = ResourceSampler(60.0, uss_every=1, worker_pids=lambda: [live.pid, dead.pid])
        sampler.begin()
        sampler.sample()
        tick = sampler.latest()
        assert tick is not None and tick.n_workers == 2
        assert tick.worker_rss_mb is not None and tick.worker_uss_each is not None
        alive_rss, dead_rss = tick.worker_rss_mb
        assert alive_rss is not None and alive_rss > 0 and dead_rss is None
        assert tick.worker_uss_each[1] is None
        assert tick.workers_rss_mb == alive_rss  # the total holds the live worker only
    finally:
        live.kill()
        live.join(5)
        dead.join(5)
