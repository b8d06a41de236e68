"""Processes × threads in the search (tuning/threads.py), on the simulated cost model, and thread
eligibility."""

from __future__ import annotations

import dataclasses

import pytest
from threads_datasets import BatchedQuery, LatencyItems, SharedHandleRecords, write_records
from tune_costmodel import CPU_BOUND, TINY_IN_MEMORY, CostModel, dense_space
from tune_simulated import SimulatedEvaluator

from stallscope.analysis.tune_rules import _worker_threads
from stallscope.config import LoaderConfig
from stallscope.target import load_target
from stallscope.tuning.confidence import RaceLog, decide
from stallscope.tuning.search import Search
from stallscope.tuning.space import MB, MemoryBudget, SearchSettings, SearchSpace
from stallscope.tuning.threads import thread_counts, thread_eligibility
from stallscope.tuning.tuner import profile_pipeline

# The 6 ms GIL-free source of the issue, with 0.3 ms of Python per item and 60 MB per worker.
SIX_MS = CostModel(
    cpu_ms=0.3, wait_ms=6.0, batch_size=16, ipc_ms=0.15, worker_mb=60.0, batch_mb=0.01
)
# Threads help, but each item holds the GIL for 1 ms of Python: one process tops out near 1,000/s.
GIL_HEAVY = CostModel(
    cpu_ms=1.0, wait_ms=5.0, batch_size=16, ipc_ms=0.1, cores=8, batch_mb=0.01, worker_mb=300.0
)


def _search(
    model: CostModel,
    *,
    threads: bool,
    seed: int = 0,
    memory_mb: float = 16_000,
    budget_s: float = 60.0,
):
    profile = model.profile()
    space = SearchSpace(
        cores=model.cores,
        batch_size=model.batch_size,
        max_workers=128,
        batched_fetch=model.batched,
        worker_threads=thread_counts(model.batch_size) if threads else (),
    )
    memory = MemoryBudget(budget_bytes=int(memory_mb * MB), batch_bytes=profile.batch_bytes)
    ev = SimulatedEvaluator(
        model.rate,
        noise=0.03,
        seed=seed,
        startup_fn=model.startup,
        worker_bytes_fn=model.worker_bytes,
    )
    result = Search(
        ev,
        space,
        profile,
        baseline=LoaderConfig(batch_size=model.batch_size),
        memory=memory,
        settings=SearchSettings(budget_s=budget_s, seed=seed),
    ).run()
    return result, ev


@pytest.mark.parametrize("seed", range(4))
def test_latency_bound_under_a_memory_budget_picks_threads_in_a_few_processes(seed):
    result, ev = _search(SIX_MS, threads=True, seed=seed, memory_mb=1500)
    assert result.region.name == "latency-bound"
    assert result.pick.worker_threads > 0
    assert 1 <= result.pick.num_workers <= 8
    optimum = SIX_MS.best_over(
        dense_space(SIX_MS, max_workers=25, worker_threads=thread_counts(16))
    )[1]
    assert SIX_MS.rate(result.pick) >= 0.97 * optimum
    # Far more than the plain workers the budget allows (1500 MB / 60 MB).
    plain = SIX_MS.best_over(dense_space(SIX_MS, max_workers=24))[1]
    assert SIX_MS.rate(result.pick) > 1.5 * plain
    assert any(t.phase == "threads" for t in result.trials)
    assert all(result.memory.fits(t.config) for t in result.trials)


@pytest.mark.parametrize("model", [CPU_BOUND, TINY_IN_MEMORY], ids=["cpu-bound", "in-memory"])
@pytest.mark.parametrize("seed", range(3))
def test_cpu_bound_and_in_memory_picks_are_unchanged_when_threads_are_offered(model, seed):
    offered, ev = _search(model, threads=True, seed=seed)
    today, _ = _search(model, threads=False, seed=seed)
    assert offered.pick == today.pick
    assert all(c.worker_threads == 0 for c in ev.measured)


def test_where_the_gil_caps_threads_the_note_gives_the_measured_figures():
    # Memory for two processes on eight cores: threads help, then each process runs out of GIL.
    result, _ = _search(GIL_HEAVY, threads=True, memory_mb=700)
    note = next(n for n in result.notes if "GIL caps them" in n)
    assert "per process" in note and "1.00 ms of Python" in note and "near 1,000 samples/s" in note
    assert "more processes (up to the 8 cores)" in note
    assert result.pick.worker_threads > 0 and result.pick.num_workers == 2
    # No note where threads keep paying (6 ms waits, 0.3 ms of Python per item).
    clean, _ = _search(SIX_MS, threads=True, memory_mb=1500)
    assert not any("GIL caps" in n for n in clean.notes)


def test_equal_speed_prefers_fewer_processes_then_fewer_threads():
    def cfg(w, k=0):
        return LoaderConfig(num_workers=w, batch_size=16, worker_threads=k)

    samples = {
        cfg(64): [1000.0, 1001.0, 999.0],
        cfg(8, 8): [1000.0, 999.0, 1001.0],
        cfg(4, 16): [996.0, 995.0, 997.0],
        cfg(4, 8): [992.0, 993.0, 991.0],  # 0.8% slower: still within the 1% tolerance
        cfg(2, 16): [900.0, 901.0, 899.0],
    }
    log = RaceLog()
    for i in range(3):
        log.add({c: [rates[i]] for c, rates in samples.items()})
    assert decide(log).pick == cfg(4, 8)


def test_memory_need_counts_threads_far_below_processes():
    mem = MemoryBudget(budget_bytes=1500 * MB, batch_bytes=0, worker_bytes=60 * MB)
    plain = LoaderConfig(num_workers=64, batch_size=16)
    threaded = LoaderConfig(num_workers=4, batch_size=16, worker_threads=16)
    assert mem.need(threaded) < 0.1 * mem.need(plain)
    assert mem.fits(threaded) and not mem.fits(plain)


def test_thread_counts_stop_at_the_batch_size():
    assert thread_counts(1) == ()
    assert thread_counts(16) == (2, 4, 8, 16)
    assert thread_counts(12) == (2, 4, 8, 12)
    assert thread_counts(256) == (2, 4, 8, 16, 32, 64)


# -- eligibility on real datasets ------------------------------------------------------------------


def _eligibility(dataset, batch_size=16):
    pipeline = load_target({"dataset": dataset, "batch_size": batch_size})
    profile, _ = profile_pipeline(pipeline)
    return thread_eligibility(pipeline, profile)


def test_a_latency_bound_thread_safe_dataset_is_eligible():
    found = _eligibility(LatencyItems(n=128, wait_s=0.004))
    assert found.counts == (2, 4, 8, 16)
    assert found.safety is None  # checked only when the threads phase needs it
    assert found.confirm() and found.safety.safe and found.counts == (2, 4, 8, 16)
    assert found.to_dict()["thread_safety"]["safe"] is True


def test_a_shared_file_handle_is_not_given_threads_and_the_record_says_why(tmp_path):
    path = write_records(256, str(tmp_path / "records.bin"))
    found = _eligibility(SharedHandleRecords(path, wait_s=0.004))
    # A race is a matter of chance: on a loaded machine fewer rounds fit the default second, so the
    # check may roll the dice for longer here (it stops at the first confirmed difference).
    found.check_s = 30.0
    assert not found.confirm()
    assert found.counts == ()
    assert not found.safety.safe and "not thread-safe" in found.reason
    assert found.to_dict()["thread_safety"]["mismatched"]


def test_cpu_bound_python_and_batched_fetch_are_not_given_threads():
    from threads_datasets import CpuItems

    cpu = _eligibility(CpuItems(n=64, loops=20000))
    assert cpu.counts == () and "GIL" in cpu.reason and cpu.safety is None
    batched = _eligibility(BatchedQuery(n=64, wait_s=0.004))
    assert batched.counts == () and "BatchedQuery.__getitems__" in batched.reason


def test_recommendation_compares_with_the_best_plain_worker_count():
    pick = dataclasses.asdict(LoaderConfig(num_workers=4, batch_size=16, worker_threads=16))
    section = {
        "best": {"config": pick, "label": "w=4 threads×16 bs=16 pf=2", "samples_per_s": 2400.0},
        "trials": [
            {
                "config": dataclasses.asdict(LoaderConfig(num_workers=24, batch_size=16)),
                "label": "w=24 bs=16 pf=2",
                "samples_per_s": 1600.0,
                "error": None,
            },
            {
                "config": pick,
                "label": "w=4 threads×16 bs=16 pf=2",
                "samples_per_s": 2400.0,
                "error": None,
            },
        ],
    }
    (rec,) = _worker_threads(section)
    assert rec["id"] == "worker-threads"
    assert "ss.threaded_dataset(dataset, threads=16)" in rec["detail"]
    assert "1,600.0" in rec["measured"] and rec["expected_gain"].startswith("+50%")
    section["best"]["config"] = dataclasses.asdict(LoaderConfig(num_workers=24, batch_size=16))
    assert _worker_threads(section) == []
