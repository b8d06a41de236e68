"""The whole process tree is the pipeline (NOTE [the whole process tree]): the memory-growth rule
on epoch-end readings of the tree, and the CPU and memory of processes a loader starts counted as
the loader's."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
import time

import psutil
import pytest

from stallscope.checks.pipeline_checks import tree_memory_mb
from stallscope.checks.tree_memory import TREE_GROWTH_MIN_MB, detect_tree_memory_growth
from stallscope.runtime.resources import ResourceSampler
from stallscope.throughput.cpu_cost import tree_cpu_seconds, tree_cpu_since


def _readings(totals: list[float], children: float = 0.0) -> dict:
    return {
        "readings": [
            {"tree_uss_mb": t, "main_mb": t - children, "children_mb": children, "processes": 3}
            for t in totals
        ],
        "judged_at": "epoch ends",
    }


def test_memory_rising_at_every_epoch_end_after_the_first_is_growth():
    (finding,) = detect_tree_memory_growth(_readings([100.0, 108.0, 116.0, 124.0]))
    assert finding.code == "memory-growth"
    assert finding.evidence["mb_per_epoch"] == pytest.approx(8.0)
    assert finding.evidence["grew_mb"] == pytest.approx(24.0)
    assert finding.evidence["processes"] == 3
    assert "main process" in finding.message


@pytest.mark.parametrize(
    "totals",
    [
        [100.0, 100.2, 100.1, 100.3],  # flat: allocator noise
        [100.0, 140.0, 120.0, 150.0],  # falls between epochs: memory is given back
        [100.0, 100.0 + TREE_GROWTH_MIN_MB / 2, 100.0 + TREE_GROWTH_MIN_MB * 0.9],  # too little
        [100.0, 140.0],  # one epoch after the first: too few to judge
    ],
)
def test_no_growth_finding_without_steady_growth(totals):
    assert detect_tree_memory_growth(_readings(totals)) == []


def test_rss_is_the_measure_where_uss_cannot_be_read():
    probe = {
        "readings": [{"tree_uss_mb": None, "tree_rss_mb": 200.0 + 10 * i} for i in range(4)],
        "judged_at": "epoch ends",
    }
    (finding,) = detect_tree_memory_growth(probe)
    assert finding.evidence["measure"] == "RSS"


def _burn(seconds: float) -> float:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass
    return seconds


def test_cpu_of_a_pool_the_loader_starts_is_the_loaders():
    start = tree_cpu_seconds()
    own = time.process_time()
    with multiprocessing.get_context("fork").Pool(2) as pool:
        assert sum(pool.map(_burn, [0.05] * 6)) == pytest.approx(0.3)
        spent = tree_cpu_since(start)  # read while the pool's processes are alive
    own = time.process_time() - own
    assert spent - own >= 0.25  # the pool's 6 x 50 ms of CPU, not only this process's


def test_cpu_of_processes_that_ended_inside_the_window_is_counted():
    # NOTE [CPU of processes that end]: a pool opened and closed between two readings (a loader
    # that starts its workers for each epoch) is counted once its processes are reaped.
    from stallscope.throughput.measure import LoaderCpuClock

    clock = LoaderCpuClock()
    start = tree_cpu_seconds()
    own = time.process_time()
    ended: list[int] = []
    for _epoch in range(2):
        pool = multiprocessing.get_context("fork").Pool(2)
        assert sum(pool.map(_burn, [0.05] * 4)) == pytest.approx(0.2)
        ended += [worker.pid for worker in pool._pool]
        pool.close()
        pool.join()  # reaped: gone from the process tree
    assert not {p.pid for p in psutil.Process().children(recursive=True)} & set(ended)
    own = time.process_time() - own
    assert 0.35 <= tree_cpu_since(start) - own <= 0.2 * 2 + 0.3  # 2 epochs x 4 x 50 ms
    elapsed = clock.elapsed()
    assert elapsed is not None and elapsed - own >= 0.35


_REAPED_TWICE = """
import multiprocessing, time
from stallscope.runtime.processes import tree_cpu

def burn(seconds):
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass

if __name__ == "__main__":
    pool = multiprocessing.get_context("fork").Pool(2)
    pool.map(burn, [0.05] * 4)
    _, alive = tree_cpu()
    pool.close()
    pool.join()
    _, reaped = tree_cpu()
    print(alive, reaped)
"""


def test_a_reading_taken_twice_does_not_count_a_reaped_process_twice(tmp_path):
    # In a process of its own: this one's other children (earlier tests') would move the totals.
    script = tmp_path / "reaped_twice.py"
    script.write_text(_REAPED_TWICE)
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, check=True
    )
    alive, reaped = (float(x) for x in done.stdout.split())
    # The pool's CPU moved from its live processes to this process's children times, once.
    assert alive >= 0.18
    assert reaped - alive == pytest.approx(0.0, abs=0.05)


def test_processes_a_known_worker_starts_count_with_it():
    # A "worker" that starts a process of its own (as a pool inside a worker does).
    code = (
        "import subprocess, sys, time; "
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)']); time.sleep(30)"
    )
    worker = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.time() + 20
        grandchildren: list[int] = []
        while time.time() < deadline and not grandchildren:
            grandchildren = [p.pid for p in psutil.Process(worker.pid).children()]
            time.sleep(0.05)
        assert grandchildren
        sampler = ResourceSampler(0.1, worker_pids=lambda: [worker.pid])
        pids = {p.pid for p in sampler._workers()}
        assert pids == {worker.pid, *grandchildren}
    finally:
        for proc in psutil.Process(worker.pid).children(recursive=True):
            proc.kill()
        worker.kill()
        worker.wait()


def test_memory_of_the_tree_counts_every_process():
    with multiprocessing.get_context("fork").Pool(2) as pool:
        pool.map(abs, [1, 2])
        reading = tree_memory_mb()
    assert reading["processes"] >= 3
    assert reading["children_mb"] > 0
    assert reading["threads"] >= 1
